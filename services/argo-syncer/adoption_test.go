package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// originalProjectOf is the AppProject the original operator created for a cluster (its
// project.py): no labels, the cluster's server as destination, every repository.
func originalProjectOf(ns, cluster, url string) *argov1.AppProject {
	return &argov1.AppProject{
		ObjectMeta: metav1.ObjectMeta{Name: cluster, Namespace: ns},
		Spec: argov1.AppProjectSpec{SourceRepos: []string{"*"},
			Destinations: []argov1.ApplicationDestination{{Server: url, Namespace: "*"}}},
	}
}

// originalApplicationOf is the Application the original operator created for an enforcement
// (its application.py, as the Argo CD API stored it): label cluster_name only, project
// "default", destination by cluster name, one source, automated sync with prune and self-heal.
func originalApplicationOf(ns, cluster, enforcement string) *argov1.Application {
	return &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: cluster + "-" + enforcement, Namespace: ns, Labels: map[string]string{LabelCluster: cluster}},
		Spec: argov1.ApplicationSpec{Project: "default",
			Destination: argov1.ApplicationDestination{Name: cluster, Namespace: "default"},
			Source:      &argov1.ApplicationSource{RepoURL: "https://git.example/agent", Path: "old"},
			SyncPolicy:  &argov1.SyncPolicy{Automated: &argov1.SyncPolicyAutomated{Prune: true, SelfHeal: true}}},
	}
}

func (h *harness) create(objs ...any) {
	h.t.Helper()
	ctx := context.Background()
	for _, o := range objs {
		var err error
		switch o := o.(type) {
		case *argov1.Application:
			_, err = h.argo.ArgoprojV1alpha1().Applications(h.ns).Create(ctx, o, metav1.CreateOptions{})
		case *argov1.AppProject:
			_, err = h.argo.ArgoprojV1alpha1().AppProjects(h.ns).Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			h.t.Fatal(err)
		}
	}
}

// cached waits until the syncer's caches hold the named Applications and AppProjects.
func (h *harness) cached(t *testing.T, apps, projects []string) {
	t.Helper()
	eventually(t, "cache sees the objects", func() bool {
		for _, a := range apps {
			if _, ok, _ := h.syncer.apps.get(a); !ok {
				return false
			}
		}
		for _, p := range projects {
			if _, ok, _ := h.syncer.projects.get(p); !ok {
				return false
			}
		}
		return true
	})
}

// TestAdoptsOriginalOperatorObjects: the Application and AppProject the original operator made
// are adopted, not duplicated or failed on, and carry the adoption record, which a later update
// keeps.
func TestAdoptsOriginalOperatorObjects(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "legacy", "agent")
	h.create(originalProjectOf(h.ns, "legacy", in.Cluster.URL), originalApplicationOf(h.ns, "legacy", "agent"))
	h.cached(t, []string{"legacy-agent"}, []string{"legacy"})
	uid := h.app("legacy-agent").UID
	h.publish(in)
	if s := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded); s.Created {
		t.Error("adoption reported Created")
	}
	apps, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil || len(apps.Items) != 1 {
		t.Fatalf("%d Applications (%v), want the one adopted", len(apps.Items), err)
	}
	app := apps.Items[0]
	if app.Labels[LabelManagedBy] != ManagedByValue || app.Spec.Source.Path != "charts/agent" || app.UID != uid ||
		app.Spec.Project != "legacy" {
		t.Errorf("adopted application labels %v path %s project %s", app.Labels, app.Spec.Source.Path, app.Spec.Project)
	}
	p := h.project("legacy")
	if p.Labels[LabelManagedBy] != ManagedByValue || !slices.Contains(p.Spec.SourceRepos, "*") ||
		!slices.Contains(p.Spec.SourceRepos, "https://git.example/agent") {
		t.Errorf("adopted project %+v %+v", p.Labels, p.Spec.SourceRepos)
	}
	for _, meta := range []metav1.ObjectMeta{app.ObjectMeta, p.ObjectMeta} {
		at, err := time.Parse(time.RFC3339, meta.Annotations[AnnotationAdoptedAt])
		if meta.Annotations[AnnotationAdoptedFrom] != OriginOriginalOperator || err != nil || time.Since(at) > time.Minute {
			t.Errorf("%s: adoption record %s=%q %s=%q", meta.Name, AnnotationAdoptedFrom, meta.Annotations[AnnotationAdoptedFrom],
				AnnotationAdoptedAt, meta.Annotations[AnnotationAdoptedAt])
		}
	}

	// An update (a server-side apply that does not send the record) keeps it.
	up := h.installIntent("baseline", "legacy", "agent")
	up.SpecHash, up.Enforcement.Path = "h2", "charts/agent-v2"
	h.publish(up)
	h.outcome(succeeded(up.ID()))
	if a := h.app("legacy-agent"); a.Spec.Source.Path != "charts/agent-v2" || a.Annotations[AnnotationAdoptedFrom] != OriginOriginalOperator {
		t.Errorf("after an update: path %s, adoption record %q", a.Spec.Source.Path, a.Annotations[AnnotationAdoptedFrom])
	}
}

// TestForeignObjectsAreNotAdopted: an Application with the expected name and cluster_name label
// but another shape, and an unlabelled AppProject named after a cluster but not the original's,
// are someone else's: the installs fail with reason NotOwned and say what differs, the objects
// stay as they were, and other intents carry on.
func TestForeignObjectsAreNotAdopted(t *testing.T) {
	h := newHarness(t)
	h.consume()
	foreignApp := originalApplicationOf(h.ns, "c1", "agent")
	foreignApp.Spec.Project = "team"
	foreignApp.Spec.Destination = argov1.ApplicationDestination{Server: "https://c1.example", Namespace: "team"}
	foreignProject := originalProjectOf(h.ns, "c2", "https://c2.example:6443")
	foreignProject.Spec.SourceRepos = []string{"https://git.example/team"}
	foreignProject.Spec.Roles = []argov1.ProjectRole{{Name: "deployers", Policies: []string{"p, proj:c2:deployers, applications, sync, c2/*, allow"}}}
	h.create(foreignApp, foreignProject)
	h.cached(t, []string{"c1-agent"}, []string{"c2"})

	app := h.installIntent("baseline", "c1", "agent")
	project := h.installIntent("baseline", "c2", "agent")
	project.Cluster.URL = "https://c2.example:6443"
	other := h.installIntent("baseline", "c1", "logs")
	h.publish(app, project, other)
	for in, want := range map[*events.InstallIntent]string{app: "destination", project: "sourceRepos"} {
		f := h.outcome(failed(in.ID())).(*events.InstallFailed)
		if !f.Permanent || f.Reason != ReasonNotOwned || !strings.Contains(f.Message, "not adopted") || !strings.Contains(f.Message, want) {
			t.Errorf("install over a foreign object: %+v", f)
		}
	}
	h.outcome(succeeded(other.ID()))
	if a := h.app("c1-agent"); a.Labels[LabelManagedBy] != "" || a.Spec.Project != "team" || a.Annotations[AnnotationAdoptedFrom] != "" {
		t.Errorf("foreign application taken over: labels %v project %s", a.Labels, a.Spec.Project)
	}
	if p := h.project("c2"); len(p.Labels) != 0 || !slices.Equal(p.Spec.SourceRepos, []string{"https://git.example/team"}) {
		t.Errorf("foreign appproject taken over: labels %v repos %v", p.Labels, p.Spec.SourceRepos)
	}
	if h.app("c2-agent") != nil {
		t.Error("an Application was created in a foreign AppProject")
	}
}

// TestProjectWithForeignApplicationSurvivesLastUninstall: someone else's Application lives in a
// cluster's AppProject. The cluster's last Enforcement Application is uninstalled: it goes, but
// the AppProject and the cluster Secret stay (marked pending) while the foreign Application
// uses them, and go once it is deleted.
func TestProjectWithForeignApplicationSurvivesLastUninstall(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "c3", "agent")
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	h.create(&argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: "team-dashboard", Namespace: h.ns},
		Spec: argov1.ApplicationSpec{Project: "c3", Destination: argov1.ApplicationDestination{Name: "c3", Namespace: "team"},
			Source: &argov1.ApplicationSource{RepoURL: "https://git.example/agent", Path: "dashboard"}},
	})
	h.cached(t, []string{"team-dashboard"}, nil)

	un := uninstallIntent(in, events.UninstallNoLongerMatches)
	h.publish(un)
	if d := h.outcome(uninstalled(un.ID())).(*events.UninstallDone); !d.Deleted {
		t.Errorf("uninstall done %+v", d)
	}
	if h.app("c3-agent") != nil {
		t.Error("Enforcement's Application was not deleted")
	}
	p := h.project("c3")
	if p == nil || h.secret("cluster-c3") == nil {
		t.Fatal("the AppProject or the cluster Secret of a foreign Application was deleted")
	}
	if p.Annotations[AnnotationUnregister] == "" {
		t.Errorf("project not marked pending: %v", p.Annotations)
	}
	if err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Delete(context.Background(), "team-dashboard", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster unregistered once the foreign Application is gone", func() bool {
		return h.project("c3") == nil && h.secret("cluster-c3") == nil
	})
}
