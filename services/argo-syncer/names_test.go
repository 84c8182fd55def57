package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// identified is the harness's install intent of enforcement on cluster, with a provider
// identity and API URL of the cluster's own.
func (h *harness) identified(cluster, enforcement string) *events.InstallIntent {
	in := h.installIntent("baseline", cluster, enforcement)
	in.Cluster.Key = "c-" + cluster
	in.Cluster.URL = "https://" + events.ObjectName(cluster) + ".example:6443"
	in.Cluster.Identity = "static:enforcement/clusters#" + cluster
	return in
}

// installed publishes in and fails the test unless it succeeds; it returns the outcome.
func (h *harness) installed(in *events.InstallIntent) *events.InstallSucceeded {
	h.t.Helper()
	h.publish(in)
	switch o := h.outcome(func(e events.Event) bool { return succeeded(in.ID())(e) || failed(in.ID())(e) }).(type) {
	case *events.InstallSucceeded:
		return o
	case *events.InstallFailed:
		h.t.Fatalf("install of %s on cluster %q failed: %s: %s", in.Enforcement.Name, in.Cluster.Name, o.Reason, o.Message)
	}
	return nil
}

// TestCrafted32BitCollisionsGetTheirOwnObjects: two clusters whose names were chosen to collide
// under the 32-bit suffix of earlier versions (eventstest: their cluster Secret and AppProject
// names, or their Application names, were one) each get their own cluster Secret, AppProject
// and Application, pointing at their own server, instead of the second one getting NameConflict
// (or the first one's objects).
func TestCrafted32BitCollisionsGetTheirOwnObjects(t *testing.T) {
	h := newHarness(t)
	h.consume()
	for _, pair := range [][2]string{
		{eventstest.ClusterCollidingA, eventstest.ClusterCollidingB},
		{eventstest.AppCollidingA, eventstest.AppCollidingB},
	} {
		a, b := h.identified(pair[0], eventstest.AppCollidingEnforcement), h.identified(pair[1], eventstest.AppCollidingEnforcement)
		oa, ob := h.installed(a), h.installed(b)
		if oa.Application == ob.Application {
			t.Errorf("clusters %q and %q share Application %s", a.Cluster.Name, b.Cluster.Name, oa.Application)
		}
		for _, in := range []*events.InstallIntent{a, b} {
			c := in.Cluster.Name
			sec, p, app := h.secret(ClusterSecretName(c)), h.project(ProjectName(c)), h.app(events.ApplicationName(c, in.Enforcement.Name))
			if sec == nil || p == nil || app == nil {
				t.Fatalf("cluster %q: Secret %v, AppProject %v, Application %v; want all three of its own", c, sec != nil, p != nil, app != nil)
			}
			if string(sec.Data["name"]) != c || string(sec.Data["server"]) != in.Cluster.URL || sec.Annotations[AnnotationIdentity] != in.Cluster.Identity {
				t.Errorf("cluster Secret %s: name %q server %q identity %q; want %q, %q, %q", sec.Name, sec.Data["name"], sec.Data["server"],
					sec.Annotations[AnnotationIdentity], c, in.Cluster.URL, in.Cluster.Identity)
			}
			if p.Annotations[AnnotationIdentity] != in.Cluster.Identity || app.Spec.Destination.Name != c || app.Spec.Project != p.Name {
				t.Errorf("cluster %q: AppProject %s identity %q, Application %s destination %q project %q",
					c, p.Name, p.Annotations[AnnotationIdentity], app.Name, app.Spec.Destination.Name, app.Spec.Project)
			}
		}
	}
}

// writeLegacyObjects writes the cluster Secret, AppProject and Application of in as a version
// with 32-bit name suffixes wrote them: the same objects under the legacy names and cluster_name
// label. It returns the three UIDs.
func (h *harness) writeLegacyObjects(in *events.InstallIntent) (secret, project, app types.UID) {
	h.t.Helper()
	ctx := context.Background()
	c := in.Cluster.Name
	legacy := objectNames{
		secret: "cluster-" + events.LegacyObjectName(c), project: events.LegacyObjectName(c),
		application:   events.LegacyApplicationName(c, in.Enforcement.Name),
		legacyProject: true, legacyApplication: true,
	}
	if legacy.secret == ClusterSecretName(c) || legacy.application == events.ApplicationName(c, in.Enforcement.Name) {
		h.t.Fatalf("cluster %q needs no normalising: nothing to test", c)
	}
	// Its config as that version built it, from the Secret the intent references; it recorded no
	// credentials reference (AnnotationCredentials) yet.
	cfg, err := h.syncer.clusterConfig(ctx, in.Cluster)
	if err != nil {
		h.t.Fatal(err)
	}
	sec, err := RenderClusterSecret(h.ns, in.Cluster, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	sec.Name, sec.Labels[LabelCluster] = legacy.secret, legacyClusterLabel(c)
	created, err := h.kube.CoreV1().Secrets(h.ns).Create(ctx, sec, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	rendered := RenderProject(h.ns, legacy, c, in.Cluster.URL, []string{in.Enforcement.Repo}, ProjectSettings{ClusterResources: true})
	rendered.Metadata.Annotations[AnnotationIdentity] = in.Cluster.Identity
	rendered.seal()
	p, err := h.argo.ArgoprojV1alpha1().AppProjects(h.ns).Patch(ctx, legacy.project, types.ApplyPatchType, rendered.body(),
		metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
	if err != nil {
		h.t.Fatal(err)
	}
	renderedApp := RenderApplication(h.ns, in, legacy)
	renderedApp.seal()
	a, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, legacy.application, types.ApplyPatchType,
		renderedApp.body(), metav1.PatchOptions{FieldManager: FieldManager, Force: ptr(true)})
	if err != nil {
		h.t.Fatal(err)
	}
	// The caches must hold them before the intents arrive, as they would after a restart.
	testenv.EventuallyTrue(h.t, 10*time.Second, "caches hold the legacy objects", func() bool {
		_, s, _ := h.syncer.secrets.get(legacy.secret)
		_, pr, _ := h.syncer.projects.get(legacy.project)
		_, ap, _ := h.syncer.apps.get(legacy.application)
		return s && pr && ap
	})
	return created.UID, p.UID, a.UID
}

// TestLegacyNamedObjectsAreKept: a cluster Secret, AppProject and Application written under the
// 32-bit names of an earlier version are found and kept after the upgrade: the same install
// writes nothing and reports the Application under its legacy name (the name trigger-dispatcher,
// rule-engine and the CLI get), the resync finds nothing to restore, a new enforcement goes into
// the legacy AppProject, the cluster stays registered while the legacy Application is left, and
// the uninstalls remove the legacy objects, never duplicating any of them.
func TestLegacyNamedObjectsAreKept(t *testing.T) {
	h := newHarness(t)
	const cluster = "Fleet Cluster/EU" // neither a DNS label nor a label value: all three names normalised
	agent := h.identified(cluster, "agent")
	secretUID, projectUID, appUID := h.writeLegacyObjects(agent)
	legacyApp, legacyProject, legacySecret := events.LegacyApplicationName(cluster, "agent"), events.LegacyObjectName(cluster), "cluster-"+events.LegacyObjectName(cluster)
	h.consume()

	mark := h.log.mark()
	if o := h.installed(agent); o.Application != legacyApp || o.Created {
		t.Errorf("install reported Application %s created %v; want the legacy %s, not created", o.Application, o.Created, legacyApp)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the upgrade's first install wrote %d times: %+v", len(w), w)
	}
	res, err := h.handler.Resync(context.Background(), "after-upgrade")
	if err != nil || res.Restored != 0 || res.Failed != 0 {
		t.Errorf("resync after the upgrade: %+v, %v; want nothing to restore", res, err)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the upgrade wrote %d times: %+v", len(w), w)
	}
	if s := h.secret(legacySecret); s == nil || s.UID != secretUID {
		t.Errorf("cluster Secret %s replaced or gone", legacySecret)
	}
	if p := h.project(legacyProject); p == nil || p.UID != projectUID {
		t.Errorf("AppProject %s replaced or gone", legacyProject)
	}
	if a := h.app(legacyApp); a == nil || a.UID != appUID {
		t.Errorf("Application %s replaced or gone", legacyApp)
	}
	if h.secret(ClusterSecretName(cluster)) != nil || h.project(ProjectName(cluster)) != nil || h.app(events.ApplicationName(cluster, "agent")) != nil {
		t.Fatal("an object was duplicated under its new name")
	}

	logging := h.identified(cluster, "logging")
	if o := h.installed(logging); o.Application != events.ApplicationName(cluster, "logging") || !o.Created {
		t.Errorf("new enforcement: Application %s created %v; want %s, created", o.Application, o.Created, events.ApplicationName(cluster, "logging"))
	}
	if a := h.app(events.ApplicationName(cluster, "logging")); a == nil || a.Spec.Project != legacyProject {
		t.Errorf("the new Application is not in the legacy AppProject %s", legacyProject)
	}
	if h.secret(ClusterSecretName(cluster)) != nil || h.project(ProjectName(cluster)) != nil {
		t.Fatal("the new enforcement duplicated the cluster Secret or AppProject")
	}

	// The new-named Application goes first: the legacy one, labelled the old way, still keeps
	// the cluster registered.
	u := uninstallIntent(logging, events.UninstallEnforcementRemoved)
	h.publish(u)
	h.outcome(uninstalled(u.ID()))
	if h.project(legacyProject) == nil || h.secret(legacySecret) == nil {
		t.Fatal("the cluster was unregistered while its legacy Application was still there")
	}
	u = uninstallIntent(agent, events.UninstallRuleDeleted)
	h.publish(u)
	if d := h.outcome(uninstalled(u.ID())).(*events.UninstallDone); !d.Deleted || d.Application != legacyApp {
		t.Errorf("uninstall: deleted %v Application %s; want the legacy %s deleted", d.Deleted, d.Application, legacyApp)
	}
	eventually(t, "legacy objects removed", func() bool {
		return h.app(legacyApp) == nil && h.project(legacyProject) == nil && h.secret(legacySecret) == nil
	})
}

// TestLegacyObjectsOfAnotherClusterAreNotTaken: an object under a cluster's legacy name that was
// written for another cluster (a name crafted to collide under 32 bits, installed first) is not
// the cluster's: it gets its own objects under the new names and the other's stay as they are.
func TestLegacyObjectsOfAnotherClusterAreNotTaken(t *testing.T) {
	h := newHarness(t)
	first := h.identified(eventstest.ClusterCollidingA, "agent")
	_, projectUID, _ := h.writeLegacyObjects(first)
	h.consume()
	second := h.identified(eventstest.ClusterCollidingB, "agent")
	h.installed(second)
	if p := h.project(ProjectName(second.Cluster.Name)); p == nil || p.Annotations[AnnotationCluster] != second.Cluster.Name {
		t.Errorf("the second cluster has no AppProject of its own")
	}
	if p := h.project(events.LegacyObjectName(first.Cluster.Name)); p == nil || p.UID != projectUID || p.Annotations[AnnotationCluster] != first.Cluster.Name {
		t.Errorf("the first cluster's legacy AppProject changed hands")
	}
}

// TestWaitingInstallUnderALegacyKeyIsReleased: an install that waited for its beforeInstall
// trigger under the gate key of its 32-bit Application name when the upgrade came is moved to
// the new key at start-up, and the trigger's outcome creates its Application.
func TestWaitingInstallUnderALegacyKeyIsReleased(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.identified("Fleet Cluster/EU", "agent")
	in.Triggers = beforeInstall
	entry, _ := json.Marshal(gateEntry{IntentID: in.ID(), Application: events.LegacyApplicationName(in.Cluster.Name, "agent"), Intent: *in, Since: time.Now()})
	if _, err := h.gates.kv.Put(ctx, gateKey(in.Rule, events.LegacyApplicationName(in.Cluster.Name, "agent")), entry); err != nil {
		t.Fatal(err)
	}
	if moved, err := h.gates.moveLegacyKeys(ctx); err != nil || moved != 1 {
		t.Fatalf("moved %d entries: %v; want 1", moved, err)
	}
	if moved, err := h.gates.moveLegacyKeys(ctx); err != nil || moved != 0 {
		t.Fatalf("a second start moved %d entries: %v; want none", moved, err)
	}
	h.consume()
	h.publish(delivered(in, "dlv-legacy", 0))
	if o := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded); !o.Created || o.Application != events.ApplicationName(in.Cluster.Name, "agent") {
		t.Errorf("released install: Application %s created %v; want %s created", o.Application, o.Created, events.ApplicationName(in.Cluster.Name, "agent"))
	}
	h.caughtUp()
	if h.waiting(in) != "" {
		t.Error("the install still waits after its release")
	}
}

// TestAmbiguousNamesOfTwoIdentitiesAreNameConflict: valid names are kept unchanged, so cluster
// "a-b" with enforcement "c" and cluster "a" with enforcement "b-c" still share the Application
// name "a-b-c". The cluster identity guard catches it: the second install fails NameConflict,
// writes nothing, and its uninstall leaves the first one's Application alone.
func TestAmbiguousNamesOfTwoIdentitiesAreNameConflict(t *testing.T) {
	h := newHarness(t)
	h.consume()
	first := h.identified("a-b", "c")
	h.installed(first)
	second := h.identified("a", "b-c")
	h.publish(second)
	f, isFailed := h.outcome(func(e events.Event) bool { return succeeded(second.ID())(e) || failed(second.ID())(e) }).(*events.InstallFailed)
	if !isFailed || f.Reason != ReasonNameConflict || !f.Permanent {
		t.Fatalf("second install: %+v; want a permanent %s", f, ReasonNameConflict)
	}
	if h.secret("cluster-a") != nil || h.project("a") != nil {
		t.Error("the refused install registered its cluster")
	}
	u := uninstallIntent(second, events.UninstallRuleDeleted)
	h.publish(u)
	if d := h.outcome(uninstalled(u.ID())).(*events.UninstallDone); d.Deleted {
		t.Error("the second pair's uninstall deleted an Application")
	}
	if app := h.app("a-b-c"); app == nil || app.Spec.Destination.Name != "a-b" || app.Annotations[AnnotationIdentity] != first.Cluster.Identity {
		t.Fatalf("the first pair's Application changed or was deleted: %+v", app)
	}
}
