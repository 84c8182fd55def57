package main

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestInstallWritesExactObjects feeds two rules' intents for one cluster through NATS and
// compares the cluster Secret, the AppProject and the Applications field by field.
func TestInstallWritesExactObjects(t *testing.T) {
	h := newHarness(t)
	h.consume()
	a := h.installIntent("baseline", "prod-1", "agent")
	b := h.installIntent("security", "prod-1", "scanner")
	b.Enforcement.HelmParameters = nil
	b.Enforcement.TargetRevision = ""
	b.Enforcement.Namespace = ""
	h.publish(a, b)
	for _, in := range []*events.InstallIntent{a, b} {
		s := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded)
		if !s.Created || s.Application != events.ApplicationName("prod-1", in.Enforcement.Name) || s.SpecHash != in.SpecHash {
			t.Errorf("install succeeded %+v", s)
		}
	}

	sec := h.secret("cluster-prod-1")
	if sec == nil {
		t.Fatal("no cluster secret")
	}
	wantLabels := map[string]string{LabelSecretType: "cluster", LabelManagedBy: "enforcement", LabelCluster: "prod-1"}
	if !equalMaps(sec.Labels, wantLabels) {
		t.Errorf("secret labels %v", sec.Labels)
	}
	if string(sec.Data["name"]) != "prod-1" || string(sec.Data["server"]) != "https://prod-1.example:6443" || len(sec.Data) != 3 {
		t.Errorf("secret data keys name=%q server=%q (%d keys)", sec.Data["name"], sec.Data["server"], len(sec.Data))
	}
	var cfg map[string]any
	if err := json.Unmarshal(sec.Data["config"], &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["bearerToken"] != "token-s3cr3t" {
		t.Errorf("config bearerToken missing")
	}
	var typed argov1.ClusterConfig
	_ = json.Unmarshal(sec.Data["config"], &typed)
	if string(typed.CAData) != string(testCAPEMParsable(t)) || typed.Insecure {
		t.Errorf("tls config %+v", typed.TLSClientConfig)
	}

	p := h.project("prod-1")
	if p == nil {
		t.Fatal("no appproject")
	}
	if !equalMaps(p.Labels, map[string]string{LabelManagedBy: "enforcement", LabelCluster: "prod-1"}) {
		t.Errorf("project labels %v", p.Labels)
	}
	wantProject := argov1.AppProjectSpec{
		Description: "Enforcement packages for cluster prod-1",
		SourceRepos: []string{"https://git.example/agent", "https://git.example/scanner"},
		Destinations: []argov1.ApplicationDestination{
			{Server: "https://prod-1.example:6443", Namespace: "*"},
			{Name: "prod-1", Namespace: "*"},
		},
		ClusterResourceWhitelist: []metav1.GroupKind{{Group: "*", Kind: "*"}},
	}
	if !reflect.DeepEqual(p.Spec, wantProject) {
		t.Errorf("project spec\n got %+v\nwant %+v", p.Spec, wantProject)
	}

	app := h.app("prod-1-agent")
	if app == nil {
		t.Fatal("no application prod-1-agent")
	}
	wantAppLabels := map[string]string{LabelManagedBy: "enforcement", LabelCluster: "prod-1",
		LabelRuleNamespace: "team", LabelRuleName: "baseline", LabelEnforcement: "agent"}
	if !equalMaps(app.Labels, wantAppLabels) {
		t.Errorf("application labels %v", app.Labels)
	}
	for k, v := range map[string]string{AnnotationRule: "team/baseline", AnnotationRuleUID: "uid-baseline",
		AnnotationEnforcement: "agent", AnnotationCluster: "prod-1", AnnotationSpecHash: "h1"} {
		if app.Annotations[k] != v {
			t.Errorf("annotation %s=%q, want %q", k, app.Annotations[k], v)
		}
	}
	wantApp := argov1.ApplicationSpec{
		Source: &argov1.ApplicationSource{RepoURL: "https://git.example/agent", Path: "charts/agent", TargetRevision: "v1",
			Helm: &argov1.ApplicationSourceHelm{Parameters: []argov1.HelmParameter{{Name: "replicas", Value: "2"}, {Name: "cluster", Value: "prod-1"}}}},
		Destination: argov1.ApplicationDestination{Name: "prod-1", Namespace: "monitoring"},
		Project:     "prod-1",
		SyncPolicy:  &argov1.SyncPolicy{Automated: &argov1.SyncPolicyAutomated{Prune: true, SelfHeal: true}, SyncOptions: argov1.SyncOptions{"CreateNamespace=true"}},
	}
	if !reflect.DeepEqual(app.Spec, wantApp) {
		t.Errorf("application spec\n got %+v\nwant %+v", app.Spec, wantApp)
	}
	app2 := h.app("prod-1-scanner")
	if app2 == nil || app2.Spec.Destination.Namespace != "default" || app2.Spec.Source.Helm != nil || app2.Spec.Source.TargetRevision != "" {
		t.Errorf("application prod-1-scanner %+v", app2)
	}
	if len(app.Finalizers) != 0 {
		t.Errorf("finalizers %v: the orphan default must not add the resources finalizer", app.Finalizers)
	}
}

// TestRedeliveryWritesNothing hands the same intents to the handler again, as a redelivery
// would: no write reaches the API server.
func TestRedeliveryWritesNothing(t *testing.T) {
	h := newHarness(t)
	a := h.installIntent("baseline", "c1", "agent")
	b := h.installIntent("baseline", "c1", "logs")
	h.handle(a)
	h.handle(b)
	mark := h.log.mark()
	h.handle(a) // immediately: the informer may lag, the overlay must not
	h.handle(b)
	eventually(t, "informer caught up", func() bool { _, ok, _ := h.syncer.apps.get("c1-logs"); return ok })
	h.handle(a)
	h.handle(b)
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Fatalf("redelivered intents wrote %d times: %+v", len(w), w)
	}
	if r := h.log.since(mark); len(nonWatch(r)) != 0 {
		t.Fatalf("redelivered intents sent %d requests: %+v", len(nonWatch(r)), nonWatch(r))
	}
}

// TestStreamRedeliveryWritesOnce stores the same intent twice in the stream (as a publisher
// retrying after the duplicate window would) and lets the consumer handle both: one set of
// writes, and one stored InstallSucceeded.
func TestStreamRedeliveryWritesOnce(t *testing.T) {
	h := newHarness(t)
	in := h.installIntent("baseline", "c1", "agent")
	ctx := context.Background()
	for i := range 2 {
		m, err := events.Encode(in, "/enforcement/test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set("Nats-Msg-Id", in.ID()+"-copy-"+itoa(i))
		if _, err := h.js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	mark := h.log.mark()
	h.consume()
	h.outcome(succeeded(in.ID()))
	eventually(t, "both copies handled", func() bool {
		info, err := h.js.Consumer(ctx, events.StreamName, events.ConsumerArgoSyncer)
		if err != nil {
			return false
		}
		ci, err := info.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= 2 && ci.NumAckPending == 0
	})
	if w := writes(h.log.since(mark)); len(w) != 3 {
		t.Fatalf("%d writes for one intent delivered twice, want 3: %+v", len(w), w)
	}
	stream, err := h.js.Stream(ctx, events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	si, err := stream.Info(ctx, jetstream.WithSubjectFilter("enforcement.install.succeeded.>"))
	if err != nil {
		t.Fatal(err)
	}
	var stored uint64
	for _, n := range si.State.Subjects {
		stored += n
	}
	if stored != 1 {
		t.Fatalf("%d InstallSucceeded stored, want 1 (%v)", stored, si.State.Subjects)
	}
}

func nonWatch(reqs []request) []request {
	var out []request
	for _, r := range reqs {
		if !r.Watch {
			out = append(out, r)
		}
	}
	return out
}

// byKind counts requests by method and resource ("PATCH applications"), watches left out.
func byKind(reqs []request) map[string]int {
	counts := map[string]int{}
	for _, r := range nonWatch(reqs) {
		counts[r.Method+" "+resourceOf(r)]++
	}
	return counts
}

// TestUpdateKeepsArgoCDFields changes an enforcement's rendering: the Application is updated,
// while the status, operation and finalizer Argo CD wrote stay.
func TestUpdateKeepsArgoCDFields(t *testing.T) {
	h := newHarness(t)
	h.consume()
	a := h.installIntent("baseline", "c1", "agent")
	h.publish(a)
	h.outcome(succeeded(a.ID()))

	// Argo CD's controller: a finalizer, an operation and a status, under its own field manager.
	ctx := context.Background()
	patch := []byte(`{"metadata":{"finalizers":["resources-finalizer.argocd.argoproj.io"]},
		"operation":{"sync":{"revision":"abc"}},
		"status":{"sync":{"status":"Synced","revision":"abc"},"health":{"status":"Healthy"}}}`)
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "c1-agent", types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "argocd-application-controller"}); err != nil {
		t.Fatal(err)
	}

	b := h.installIntent("baseline", "c1", "agent")
	b.Enforcement.HelmParameters = []events.HelmParameter{{Name: "replicas", Value: "5"}}
	b.Enforcement.Path = "charts/agent-v2"
	b.SpecHash = "h2"
	h.publish(b)
	s := h.outcome(succeeded(b.ID())).(*events.InstallSucceeded)
	if s.Created {
		t.Error("an update reported Created")
	}
	app := h.app("c1-agent")
	if app.Spec.Source.Path != "charts/agent-v2" || len(app.Spec.Source.Helm.Parameters) != 1 || app.Spec.Source.Helm.Parameters[0].Value != "5" {
		t.Errorf("spec not updated: %+v", app.Spec.Source)
	}
	if app.Annotations[AnnotationSpecHash] != "h2" {
		t.Errorf("spec hash annotation %q", app.Annotations[AnnotationSpecHash])
	}
	if app.Status.Sync.Status != "Synced" || app.Status.Health.Status != "Healthy" || app.Operation == nil ||
		!slices.Contains(app.Finalizers, argov1.ResourcesFinalizerName) {
		t.Errorf("Argo CD's fields were not kept: status %+v operation %+v finalizers %v", app.Status.Sync, app.Operation, app.Finalizers)
	}
}

// TestFieldOfSomeoneElseIsNotDrift: argo-syncer caches a digest of its Applications' specs, not
// the specs. A field another tool adds to a spec changes the digest but is not drift: the next
// intent reads the Application once, writes nothing, and later intents read nothing. A field
// argo-syncer renders edited by hand is drift: read, then applied back, the other tool's fields
// kept; the spec is then again the one found in sync before, and nothing is read.
func TestFieldOfSomeoneElseIsNotDrift(t *testing.T) {
	h := newHarness(t)
	h.syncer.metrics = NewMetrics(prometheus.NewRegistry())
	a := h.installIntent("baseline", "c1", "agent")
	h.handle(a)
	ctx := context.Background()
	apps := h.argo.ArgoprojV1alpha1().Applications(h.ns)
	edit := func(patch string) specDigest {
		t.Helper()
		app, err := apps.Patch(ctx, "c1-agent", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "team-tool"})
		if err != nil {
			t.Fatal(err)
		}
		d := digestSpec(app.Spec)
		h.cacheSees("the edit", func(s *Syncer) bool { app, _, _ := s.apps.get("c1-agent"); return app != nil && app.SpecDigest == d })
		return d
	}
	driftChecks := func() float64 {
		return testutil.ToFloat64(h.syncer.metrics.reads.WithLabelValues("Application", "drift_check", "ok"))
	}

	edit(`{"spec":{"revisionHistoryLimit":3,"ignoreDifferences":[{"kind":"Deployment","jsonPointers":["/spec/replicas"]}]}}`)
	mark := h.log.mark()
	h.handle(a)
	h.handle(a)
	if got, want := byKind(h.log.since(mark)), map[string]int{"GET applications": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("two intents after another tool's field: requests %v, want %v", got, want)
	}
	if n := driftChecks(); n != 1 {
		t.Errorf("drift checks counted: %v, want 1", n)
	}

	// The repair is the first apply since the Application's creation, and the other tool's
	// fields make its spec another than the rendered one: argo-syncer cannot tell them from a
	// field its creation wrote and the apply left out, so it converts the creation's ownership
	// and applies again (writeApplication), which leaves the other tool's fields alone.
	edit(`{"spec":{"source":{"path":"by-hand"}}}`)
	mark = h.log.mark()
	h.handle(a)
	if got, want := byKind(h.log.since(mark)), map[string]int{"GET applications": 1, "PATCH applications": 3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("an intent after a hand edit: requests %v, want %v", got, want)
	}
	app := h.app("c1-agent")
	if app.Spec.Source.Path != "charts/agent" || app.Spec.RevisionHistoryLimit == nil || len(app.Spec.IgnoreDifferences) != 1 {
		t.Errorf("after the repair: path %q (want charts/agent), the other tool's fields %v %+v (want kept)",
			app.Spec.Source.Path, app.Spec.RevisionHistoryLimit, app.Spec.IgnoreDifferences)
	}
	h.cacheSees("the repair", func(s *Syncer) bool {
		c, _, _ := s.apps.get("c1-agent")
		return c != nil && c.SpecDigest == digestSpec(app.Spec)
	})
	mark = h.log.mark()
	h.handle(a)
	h.handle(a)
	// The repaired spec is the one read after the other tool's edit, which is remembered.
	if got := byKind(h.log.since(mark)); len(got) != 0 {
		t.Fatalf("two intents after the repair: requests %v, want none", got)
	}
}

// TestProjectFieldOfSomeoneElseIsNotDrift: as for Applications, argo-syncer caches a digest of
// its AppProjects' specs. A field another tool adds (a role) costs one read and no write; a field
// argo-syncer renders changed by hand (the destinations) is read and applied back, the other
// tool's field kept, and later intents send nothing. The project was created, so the apply that
// repairs it, finding a spec other than it rendered (the other tool's role), converts the
// creation's fields and applies again (writeProject): three writes, once.
func TestProjectFieldOfSomeoneElseIsNotDrift(t *testing.T) {
	h := newHarness(t)
	h.syncer.metrics = NewMetrics(prometheus.NewRegistry())
	a := h.installIntent("baseline", "c1", "agent")
	h.handle(a)
	ctx := context.Background()
	projects := h.argo.ArgoprojV1alpha1().AppProjects(h.ns)
	rendered := h.project("c1").Spec.Destinations
	edit := func(patch string) {
		t.Helper()
		p, err := projects.Patch(ctx, "c1", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "team-tool"})
		if err != nil {
			t.Fatal(err)
		}
		d := digestSpec(p.Spec)
		h.cacheSees("the edit", func(s *Syncer) bool { p, _, _ := s.projects.get("c1"); return p != nil && p.SpecDigest == d })
	}

	edit(`{"spec":{"roles":[{"name":"viewer","policies":["p, proj:c1:viewer, applications, get, c1/*, allow"]}]}}`)
	mark := h.log.mark()
	h.handle(a)
	h.handle(a)
	if got, want := byKind(h.log.since(mark)), map[string]int{"GET appprojects": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("two intents after another tool's field: requests %v, want %v", got, want)
	}
	if n := testutil.ToFloat64(h.syncer.metrics.reads.WithLabelValues("AppProject", "drift_check", "ok")); n != 1 {
		t.Errorf("AppProject drift checks counted: %v, want 1", n)
	}

	edit(`{"spec":{"destinations":[{"server":"https://elsewhere.example","namespace":"*"}]}}`)
	mark = h.log.mark()
	h.handle(a)
	if got, want := byKind(h.log.since(mark)), map[string]int{"GET appprojects": 1, "PATCH appprojects": 3}; !reflect.DeepEqual(got, want) {
		t.Fatalf("an intent after a hand edit: requests %v, want %v (a read, then apply, conversion, apply)", got, want)
	}
	p := h.project("c1")
	if !reflect.DeepEqual(p.Spec.Destinations, rendered) || len(p.Spec.Roles) != 1 {
		t.Errorf("after the repair: destinations %+v (want %+v), roles %+v (want the other tool's kept)", p.Spec.Destinations, rendered, p.Spec.Roles)
	}
	h.cacheSees("the repair", func(s *Syncer) bool {
		c, _, _ := s.projects.get("c1")
		return c != nil && c.SpecDigest == digestSpec(p.Spec)
	})
	mark = h.log.mark()
	h.handle(a)
	h.handle(a)
	if got := byKind(h.log.since(mark)); len(got) != 0 {
		t.Fatalf("two intents after the repair: requests %v, want none", got)
	}
}

// TestSharedClusterUninstallOrder installs two rules on one cluster and uninstalls them one by
// one: the cluster Secret and AppProject stay until the last Application is gone, and then go
// in the order Application, AppProject, Secret.
func TestSharedClusterUninstallOrder(t *testing.T) {
	h := newHarness(t)
	h.consume()
	a := h.installIntent("baseline", "c1", "agent")
	b := h.installIntent("security", "c1", "scanner")
	h.publish(a, b)
	h.outcome(succeeded(a.ID()))
	h.outcome(succeeded(b.ID()))

	ua := uninstallIntent(a, events.UninstallRuleDeleted)
	h.publish(ua)
	d := h.outcome(uninstalled(ua.ID())).(*events.UninstallDone)
	if !d.Deleted || d.Application != "c1-agent" {
		t.Errorf("uninstall done %+v", d)
	}
	if h.app("c1-agent") != nil {
		t.Error("c1-agent still exists")
	}
	if h.app("c1-scanner") == nil || h.project("c1") == nil || h.secret("cluster-c1") == nil {
		t.Fatal("the other rule's Application, the AppProject or the cluster Secret went away")
	}

	mark := h.log.mark()
	ub := uninstallIntent(b, events.UninstallNoLongerMatches)
	h.publish(ub)
	h.outcome(uninstalled(ub.ID()))
	if h.app("c1-scanner") != nil || h.project("c1") != nil || h.secret("cluster-c1") != nil {
		t.Fatal("cluster not unregistered after its last Application")
	}
	var deletes []string
	for _, r := range writes(h.log.since(mark)) {
		if r.Method == http.MethodDelete {
			deletes = append(deletes, r.Path[strings.LastIndex(r.Path[:strings.LastIndex(r.Path, "/")], "/")+1:])
		}
	}
	want := []string{"applications/c1-scanner", "appprojects/c1", "secrets/cluster-c1"}
	if !reflect.DeepEqual(deletes, want) {
		t.Errorf("deletes %v, want %v", deletes, want)
	}
}

// TestUninstallPolicies covers the deletion policies: orphan removes a resources finalizer
// someone set; cascade sets it and waits for Argo CD; a gone cluster always orphans.
func TestUninstallPolicies(t *testing.T) {
	h := newHarness(t)
	h.consume()
	ctx := context.Background()

	// Orphan, with a finalizer set by someone else: removed before the delete.
	o := h.installIntent("baseline", "orphan", "agent")
	h.publish(o)
	h.outcome(succeeded(o.ID()))
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "orphan-agent", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["resources-finalizer.argocd.argoproj.io"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache sees finalizer", func() bool {
		a, _, _ := h.syncer.apps.get("orphan-agent")
		return len(a.Finalizers) == 1
	})
	uo := uninstallIntent(o, events.UninstallRuleDeleted)
	h.publish(uo)
	h.outcome(uninstalled(uo.ID()))
	if h.app("orphan-agent") != nil || h.project("orphan") != nil || h.secret("cluster-orphan") != nil {
		t.Error("orphan: Application, AppProject or Secret left")
	}

	// Cascade: the finalizer is set and the Application waits for Argo CD (which does not run
	// here), so the cluster stays registered and its AppProject is marked.
	c := h.installIntent("baseline", "cascade", "agent")
	c.DeletionPolicy = events.DeletionCascade
	h.publish(c)
	h.outcome(succeeded(c.ID()))
	uc := uninstallIntent(c, events.UninstallRuleDeleted)
	h.publish(uc)
	if d := h.outcome(uninstalled(uc.ID())).(*events.UninstallDone); !d.Deleted {
		t.Errorf("cascade: %+v", d)
	}
	app := h.app("cascade-agent")
	if app == nil || app.DeletionTimestamp == nil || !slices.Contains(app.Finalizers, argov1.ResourcesFinalizerName) {
		t.Fatalf("cascade: want a terminating Application with the resources finalizer, got %+v", app)
	}
	if p := h.project("cascade"); p == nil || p.Annotations[AnnotationUnregister] == "" || h.secret("cluster-cascade") == nil {
		t.Fatal("cascade: cluster unregistered before its Application is gone, or the AppProject is not marked")
	}
	// A reinstall while the Application is still terminating is retried, not lost.
	reinstall := h.installIntent("baseline", "cascade", "agent")
	reinstall.SpecHash = "h-re"
	if _, err := h.syncer.Install(ctx, reinstall, true); err == nil || !strings.Contains(err.Error(), ReasonTerminating) {
		t.Errorf("install on a terminating Application: %v", err)
	}
	// Argo CD finishes: it removes the finalizer, the Application goes, and the cluster is
	// unregistered without another intent.
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "cascade-agent", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cascade cluster unregistered", func() bool {
		return h.project("cascade") == nil && h.secret("cluster-cascade") == nil
	})

	// Gone cluster with policy Cascade: orphaned (nothing could finish the cascade).
	g := h.installIntent("baseline", "gone", "agent")
	g.DeletionPolicy = events.DeletionCascade
	h.publish(g)
	h.outcome(succeeded(g.ID()))
	ug := uninstallIntent(g, events.UninstallClusterGone)
	ug.Cluster.Gone = true
	h.publish(ug)
	h.outcome(uninstalled(ug.ID()))
	if h.app("gone-agent") != nil || h.project("gone") != nil || h.secret("cluster-gone") != nil {
		t.Error("gone cluster: objects left")
	}
}

// TestUninstallTolerates404AndForeignObjects: nothing to delete is done, an Application
// Enforcement does not own is kept, and another rule's Application is not touched.
func TestUninstallTolerates404AndForeignObjects(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	// Nothing there at all.
	missing := uninstallIntent(h.installIntent("baseline", "nowhere", "agent"), events.UninstallRuleDeleted)
	res, err := h.syncer.Uninstall(ctx, missing)
	if err != nil || res.Deleted {
		t.Fatalf("uninstall of nothing: %+v %v", res, err)
	}
	// A foreign Application with the same name and no labels of ours.
	foreign := &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: "c1-agent", Namespace: h.ns, Labels: map[string]string{LabelManagedBy: "someone-else", LabelCluster: "c1"}},
		Spec:       argov1.ApplicationSpec{Project: "default", Destination: argov1.ApplicationDestination{Name: "c1"}, Source: &argov1.ApplicationSource{RepoURL: "x"}},
	}
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache sees foreign app", func() bool { _, ok, _ := h.syncer.apps.get("c1-agent"); return ok })
	in := h.installIntent("baseline", "c1", "agent")
	if _, err := h.syncer.Uninstall(ctx, uninstallIntent(in, events.UninstallRuleDeleted)); err != nil {
		t.Fatal(err)
	}
	if h.app("c1-agent") == nil {
		t.Fatal("deleted an Application Enforcement does not own")
	}
	// And installing over it fails permanently with a reason.
	_, err = h.syncer.Install(ctx, in, true)
	var f *failure
	if !errorsAs(err, &f) || !f.permanent || f.reason != ReasonNotOwned {
		t.Fatalf("install over a foreign Application: %v", err)
	}

	// Another rule's Application with the same name is not removed by this rule's uninstall.
	other := h.installIntent("other", "c2", "agent")
	if _, err := h.syncer.Install(ctx, other, true); err != nil {
		t.Fatal(err)
	}
	mine := h.installIntent("baseline", "c2", "agent")
	if _, err := h.syncer.Uninstall(ctx, uninstallIntent(mine, events.UninstallRuleDeleted)); err != nil {
		t.Fatal(err)
	}
	if h.app("c2-agent") == nil {
		t.Fatal("uninstall of rule baseline removed rule other's Application")
	}
}

// TestDeleteToleratesConflictAndNotFound drives deleteApplication with a stale copy (its
// resourceVersion is outdated, so the finalizer patch conflicts) and with a deleted object.
func TestDeleteToleratesConflictAndNotFound(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.installIntent("baseline", "c1", "agent")
	if _, err := h.syncer.Install(ctx, in, true); err != nil {
		t.Fatal(err)
	}
	stale, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Get(ctx, "c1-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "c1-agent", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"touched":"yes"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mark := h.log.mark()
	deleted, err := h.syncer.deleteApplication(ctx, cacheApplication(stale), true)
	if err != nil || !deleted {
		t.Fatalf("delete after conflict: %v %v", deleted, err)
	}
	var conflictRetried bool
	reqs := h.log.since(mark)
	for i, r := range reqs {
		if r.Method == http.MethodGet && i > 0 && reqs[i-1].Method == http.MethodPatch {
			conflictRetried = true
		}
	}
	if !conflictRetried {
		t.Errorf("expected a re-read after the conflicting patch: %+v", reqs)
	}
	app := h.app("c1-agent")
	if app == nil || app.DeletionTimestamp == nil || app.Annotations["touched"] != "yes" {
		t.Fatalf("want the fresh Application terminating with the finalizer, got %+v", app)
	}
	// Deleting again what is already gone (Argo CD finished): a 404 is success.
	gone := stale.DeepCopy()
	gone.Name = "never-existed"
	if deleted, err := h.syncer.deleteApplication(ctx, cacheApplication(gone), false); err != nil || deleted {
		t.Fatalf("delete of a missing Application: %v %v", deleted, err)
	}
}

// TestRejectedObjectIsPermanentFailure: the API server refuses the rendered Application (an
// enforcement label that is not a valid label key); the failure is permanent, carries the
// server's message, and the message is acknowledged rather than retried.
func TestRejectedObjectIsPermanentFailure(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "c1", "agent")
	in.Enforcement.Labels = map[string]string{"not a/valid/key": "x"}
	h.publish(in)
	f := h.outcome(failed(in.ID())).(*events.InstallFailed)
	if !f.Permanent || f.Reason != ReasonRejected || !strings.Contains(f.Message, "not a/valid/key") ||
		!strings.Contains(f.Message, "Invalid value") {
		t.Fatalf("install failed %+v", f)
	}
	if h.app("c1-agent") != nil {
		t.Fatal("rejected Application exists")
	}
	// Other intents go on.
	ok := h.installIntent("baseline", "c2", "agent")
	h.publish(ok)
	h.outcome(succeeded(ok.ID()))
	// The rejected intent was acknowledged: no retries publish again, no dead letter.
	h.noOutcome(200*time.Millisecond, failed(in.ID()))
}

// TestRequestsPerBatch counts the API requests a batch of 200 new clusters costs: reads are
// O(1) per batch (the informers listed Applications, AppProjects and cluster Secrets once at
// start, the source Secret is read once for the whole batch, no GET per cluster or package),
// writes are one per new object (a Secret, an AppProject and an Application create), and
// the same batch delivered again through the stream sends no request at all.
func TestRequestsPerBatch(t *testing.T) {
	h := newHarness(t)
	const n = 200
	if got := informerLists(h.log.since(0)); !reflect.DeepEqual(got, map[string]int{"applications": 1, "appprojects": 1, "secrets": 1}) {
		t.Fatalf("LIST requests at start: %v, want one per informer", got)
	}
	mark := h.log.mark()
	h.consume()
	var ins []*events.InstallIntent
	for i := range n {
		in := h.installIntent("baseline", "batch-"+itoa(i), "agent")
		ins = append(ins, in)
		h.publish(in)
	}
	for _, in := range ins {
		h.outcome(succeeded(in.ID()))
	}
	reqs := nonWatch(h.log.since(mark))
	counts := byKind(reqs)
	want := map[string]int{"POST secrets": n, "POST appprojects": n, "POST applications": n, "GET secrets": 1}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("requests for %d new clusters: %v, want %v", n, counts, want)
	}
	t.Logf("%d install intents for %d clusters: %d API requests (%v)", n, n, len(reqs), counts)

	// The same batch again, stored anew in the stream (a replay, or a publisher retrying after
	// the duplicate window): every intent is handled and acknowledged without a request.
	mark = h.log.mark()
	ctx := context.Background()
	var last uint64
	for _, in := range ins {
		m, err := events.Encode(in, "/enforcement/test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		m.Header.Set("Nats-Msg-Id", in.ID()+"-replay")
		ack, err := h.js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		last = ack.Sequence
	}
	eventually(t, "the replayed batch handled", func() bool {
		c, err := h.js.Consumer(ctx, events.StreamName, events.ConsumerArgoSyncer)
		if err != nil {
			return false
		}
		ci, err := c.Info(ctx)
		return err == nil && ci.AckFloor.Stream >= last && ci.NumAckPending == 0
	})
	if r := nonWatch(h.log.since(mark)); len(r) != 0 {
		t.Fatalf("the replayed batch of %d intents sent %d requests, want none: %v", n, len(r), r[:min(len(r), 10)])
	}

	// A second rule for the same clusters: one write per Application (and one per project for
	// its new repository), no registration.
	mark = h.log.mark()
	for i := range n {
		in := h.installIntent("security", "batch-"+itoa(i), "scanner")
		ins = append(ins, in)
		h.publish(in)
	}
	for _, in := range ins[n:] {
		h.outcome(succeeded(in.ID()))
	}
	counts = byKind(h.log.since(mark))
	want = map[string]int{"PATCH appprojects": n, "POST applications": n}
	if !reflect.DeepEqual(counts, want) {
		t.Fatalf("requests for a second rule: %v, want %v", counts, want)
	}
	for i := range n {
		p := h.project("batch-" + itoa(i))
		if len(p.Spec.SourceRepos) != 2 {
			t.Fatalf("project %s repos %v: want both rules' repositories", p.Name, p.Spec.SourceRepos)
		}
	}
}

// TestConcurrentRulesShareProject: many rules target one cluster at once; its AppProject ends
// with every rule's repository (intents of one cluster are serialised and read their own writes).
func TestConcurrentRulesShareProject(t *testing.T) {
	h := newHarness(t)
	h.consume()
	var ins []*events.InstallIntent
	for i := range 8 {
		in := h.installIntent("rule-"+itoa(i), "shared", "pkg-"+itoa(i))
		ins = append(ins, in)
	}
	for _, in := range ins {
		h.publish(in)
	}
	for _, in := range ins {
		h.outcome(succeeded(in.ID()))
	}
	p := h.project("shared")
	if len(p.Spec.SourceRepos) != 8 {
		t.Fatalf("project repos %v, want 8", p.Spec.SourceRepos)
	}
	secrets, err := h.kube.CoreV1().Secrets(h.ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelSecretType + "=cluster"})
	if err != nil || len(secrets.Items) != 1 {
		t.Fatalf("cluster secrets: %d %v, want 1", len(secrets.Items), err)
	}
}

func itoa(i int) string { return strconvItoa(i) }

// informerLists counts, per resource, the LIST requests among reqs (GETs of a collection that
// are not watches).
func informerLists(reqs []request) map[string]int {
	lists := map[string]int{}
	for _, r := range reqs {
		if r.Method != http.MethodGet || r.Watch {
			continue
		}
		parts := strings.Split(r.Path, "/")
		if res := parts[len(parts)-1]; res == "applications" || res == "appprojects" || res == "secrets" {
			lists[res]++
		}
	}
	return lists
}

// resourceOf is the resource a request is about: the last path segment of a collection request
// (POST, list), the one before the name otherwise.
func resourceOf(r request) string {
	parts := strings.Split(r.Path, "/")
	if r.Method == http.MethodPost {
		return parts[len(parts)-1]
	}
	return parts[len(parts)-2]
}

// TestTransientFailureIsRetried: the source Secret is missing, so the install fails with a
// non-permanent InstallFailed and is retried in place; once the Secret exists it succeeds.
// The token never appears in the published failure.
func TestTransientFailureIsRetried(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	c, err := events.Consume(ctx, h.js, h.handler.Handle, events.ConsumerOptions{
		Name: events.ConsumerArgoSyncer, MaxAttempts: 50,
		Backoff: func(int) time.Duration { return 100 * time.Millisecond },
		Logger:  h.handler.logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(ctx) })
	in := h.installIntent("baseline", "c1", "agent")
	in.Cluster.Source.SecretName = "rancher-late"
	h.publish(in)
	f := h.outcome(failed(in.ID())).(*events.InstallFailed)
	if f.Permanent || f.Reason != ReasonSecretInvalid || !strings.Contains(f.Message, "rancher-late") {
		t.Fatalf("install failed %+v", f)
	}
	if h.secret("cluster-c1") != nil || h.project("c1") != nil || h.app("c1-agent") != nil {
		t.Fatal("wrote objects without credentials")
	}
	src, err := h.kube.CoreV1().Secrets(h.opNS).Get(ctx, "rancher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.ObjectMeta = metav1.ObjectMeta{Name: "rancher-late", Namespace: h.opNS}
	if _, err := h.kube.CoreV1().Secrets(h.opNS).Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.outcome(succeeded(in.ID()))
	if h.app("c1-agent") == nil || h.secret("cluster-c1") == nil {
		t.Fatal("objects missing after the retry succeeded")
	}
}

// TestClusterURLChange: a new API URL for a registered cluster updates Enforcement's cluster
// Secret and the AppProject's destination, without a second registration.
func TestClusterURLChange(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.installIntent("baseline", "moved", "agent")
	if _, err := h.syncer.Install(ctx, in, true); err != nil {
		t.Fatal(err)
	}
	in.Cluster.URL = "https://new.example:6443"
	in.Cluster.Revision = 2
	if _, err := h.syncer.Install(ctx, in, true); err != nil {
		t.Fatal(err)
	}
	sec := h.secret("cluster-moved")
	if string(sec.Data["server"]) != "https://new.example:6443" || string(sec.Data["name"]) != "moved" {
		t.Errorf("secret server %q name %q", sec.Data["server"], sec.Data["name"])
	}
	var cfg argov1.ClusterConfig
	if err := json.Unmarshal(sec.Data["config"], &cfg); err != nil || cfg.BearerToken != "token-s3cr3t" {
		t.Errorf("config lost: %v", err)
	}
	p := h.project("moved")
	if p.Spec.Destinations[0].Server != "https://new.example:6443" {
		t.Errorf("project destinations %+v", p.Spec.Destinations)
	}
	secrets, _ := h.kube.CoreV1().Secrets(h.ns).List(ctx, metav1.ListOptions{})
	if len(secrets.Items) != 1 {
		t.Errorf("%d secrets, want 1", len(secrets.Items))
	}
}

// TestAmbiguousNamesDoNotCollide: cluster "a-b" with enforcement "c" and cluster "a" with
// enforcement "b-c" both map to Application "a-b-c"; the second install fails permanently
// instead of taking the first one over, and its uninstall leaves the first one alone.
func TestAmbiguousNamesDoNotCollide(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	first := h.installIntent("baseline", "a-b", "c")
	if _, err := h.syncer.Install(ctx, first, true); err != nil {
		t.Fatal(err)
	}
	second := h.installIntent("baseline", "a", "b-c")
	_, err := h.syncer.Install(ctx, second, true)
	var f *failure
	if !errorsAs(err, &f) || !f.permanent || f.reason != ReasonNotOwned {
		t.Fatalf("second install: %v", err)
	}
	if _, err := h.syncer.Uninstall(ctx, uninstallIntent(second, events.UninstallRuleDeleted)); err != nil {
		t.Fatal(err)
	}
	app := h.app("a-b-c")
	if app == nil || app.Spec.Destination.Name != "a-b" {
		t.Fatalf("first Application changed or deleted: %+v", app)
	}
}
