package main

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// writesTo lists the method of each write request among reqs to resource ("applications",
// "appprojects"), its collection (a create) or one of its objects.
func writesTo(reqs []request, resource string) []string {
	var methods []string
	for _, r := range writes(reqs) {
		if strings.Contains(r.Path, "/"+resource) {
			methods = append(methods, r.Method)
		}
	}
	return methods
}

// applicationRequests lists the method of each write request to Applications among reqs.
func applicationRequests(reqs []request) []string { return writesTo(reqs, "applications") }

// heldByUpdate reports whether argo-syncer's field manager holds fields of app by an update.
func heldByUpdate(app *argov1.Application) bool {
	return slices.ContainsFunc(app.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
		return e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationUpdate
	})
}

// A new Application is created in one plain create, and its fields are then argo-syncer's by an
// update. An edit that leaves out nothing the creation wrote is one apply. An edit that leaves
// out a label or a spec field the creation wrote converts the ownership and applies again, and
// the field is gone, as when the Application was created by an apply; from then on an edit is
// one apply again. What someone else wrote stays.
func TestCreatedApplicationLosesWhatLaterRendersLeaveOut(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.installIntent("baseline", "owned", "agent")
	in.Enforcement.Labels = map[string]string{"team": "platform", "tier": "gold"}
	mark := h.log.mark()
	if res, err := h.syncer.Install(ctx, in, true); err != nil || !res.Created {
		t.Fatalf("install: %+v, %v; want Created", res, err)
	}
	if got := applicationRequests(h.log.since(mark)); !slices.Equal(got, []string{http.MethodPost}) {
		t.Errorf("creation sent %v; want one create", got)
	}
	app := h.app("owned-agent")
	if app == nil || !heldByUpdate(app) || app.Annotations[AnnotationCreatedBy] != in.ID() {
		t.Fatalf("created %v; want it held by argo-syncer's update, with its creating intent", app)
	}

	edit := func(what string, change func(*events.InstallIntent), want []string) *argov1.Application {
		t.Helper()
		next := h.installIntent("baseline", "owned", "agent")
		next.Enforcement.Labels = maps.Clone(in.Enforcement.Labels)
		next.Enforcement.TargetRevision = in.Enforcement.TargetRevision
		change(next)
		next.SpecHash = in.SpecHash + "+"
		in = next
		eventually(t, "cache sees the last write", func() bool {
			cached, ok, _ := h.syncer.apps.get("owned-agent")
			live := h.app("owned-agent")
			return ok && live != nil && cached.GetResourceVersion() == live.ResourceVersion
		})
		mark := h.log.mark()
		if _, err := h.syncer.Install(ctx, next, true); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := applicationRequests(h.log.since(mark)); !slices.Equal(got, want) {
			t.Errorf("%s sent %v; want %v", what, got, want)
		}
		return h.app("owned-agent")
	}
	apply, convert := http.MethodPatch, []string{http.MethodPatch, http.MethodPatch, http.MethodPatch}

	app = edit("a new revision", func(i *events.InstallIntent) { i.Enforcement.TargetRevision = "v2" }, []string{apply})
	if app.Spec.Source.TargetRevision != "v2" || app.Labels["tier"] != "gold" || app.Annotations[AnnotationCreatedBy] == "" {
		t.Errorf("after a new revision: %+v; want v2, the labels and the creation's record kept", app.ObjectMeta)
	}

	app = edit("a label left out", func(i *events.InstallIntent) { delete(i.Enforcement.Labels, "tier") }, convert)
	if _, ok := app.Labels["tier"]; ok || heldByUpdate(app) || app.Annotations[AnnotationCreatedBy] != "" {
		t.Errorf("after the label was left out: %+v; want it gone, with the creation's record, and nothing held by an update", app.ObjectMeta)
	}
	if app.Labels["team"] != "platform" {
		t.Errorf("labels %v; want the rendered team=platform kept", app.Labels)
	}

	app = edit("another revision", func(i *events.InstallIntent) { i.Enforcement.TargetRevision = "v3" }, []string{apply})
	if app.Spec.Source.TargetRevision != "v3" {
		t.Errorf("revision %q; want v3", app.Spec.Source.TargetRevision)
	}
}

// A spec field the creation wrote and a later render leaves out is removed too. A label someone
// else added is kept, though argo-syncer, which does not read the managed fields' sets, cannot
// tell it from one it left out: the first edit converts the ownership.
func TestCreatedApplicationLosesASpecFieldLaterRendersLeaveOut(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.installIntent("baseline", "spec", "agent")
	if _, err := h.syncer.Install(ctx, in, true); err != nil {
		t.Fatal(err)
	}
	app := h.app("spec-agent")
	app.Labels["owner"] = "sre"
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Update(ctx, app, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache sees the label", func() bool {
		cached, ok, _ := h.syncer.apps.get("spec-agent")
		return ok && cached.Labels.Get("owner") == "sre"
	})
	next := h.installIntent("baseline", "spec", "agent")
	next.Enforcement.TargetRevision = "" // Argo CD's default: HEAD
	next.SpecHash = "h2"
	mark := h.log.mark()
	if _, err := h.syncer.Install(ctx, next, true); err != nil {
		t.Fatal(err)
	}
	if got, want := applicationRequests(h.log.since(mark)), []string{http.MethodPatch, http.MethodPatch, http.MethodPatch}; !slices.Equal(got, want) {
		t.Errorf("the edit sent %v; want %v (apply, conversion, apply)", got, want)
	}
	app = h.app("spec-agent")
	if app == nil || app.Spec.Source.TargetRevision != "" || heldByUpdate(app) || app.Labels["owner"] != "sre" {
		t.Errorf("after the revision was left out: %+v", app)
	}
}

// A cluster's new AppProject is created in one plain create. A repository added later is one
// apply: the repositories only grow, so it leaves out nothing the creation wrote. A setting that
// drops a field the creation wrote (cluster-scoped resources no longer allowed) converts the
// ownership and applies again, and the field is gone.
func TestCreatedProjectLosesWhatLaterRendersLeaveOut(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	name := ProjectName("owned")
	install := func(what, enforcement, repo string, want []string) *argov1.AppProject {
		t.Helper()
		if cached, ok, _ := h.syncer.projects.get(name); ok {
			eventually(t, "cache sees the last write", func() bool {
				live := h.project(name)
				return live != nil && cached.GetResourceVersion() == live.ResourceVersion
			})
		}
		in := h.installIntent("baseline", "owned", enforcement)
		in.Enforcement.Repo = repo
		mark := h.log.mark()
		if _, err := h.syncer.Install(ctx, in, true); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got := writesTo(h.log.since(mark), "appprojects"); !slices.Equal(got, want) {
			t.Errorf("%s sent %v to AppProjects; want %v", what, got, want)
		}
		return h.project(name)
	}

	p := install("the first install", "agent", "https://git.example/agent", []string{http.MethodPost})
	if p == nil || len(p.Spec.ClusterResourceWhitelist) == 0 || !updatedByManager(p.ManagedFields) {
		t.Fatalf("created %+v; want cluster resources allowed, held by argo-syncer's update", p)
	}

	p = install("a second repository", "ingress", "https://git.example/ingress", []string{http.MethodPatch})
	if want := []string{"https://git.example/agent", "https://git.example/ingress"}; !slices.Equal(p.Spec.SourceRepos, want) {
		t.Errorf("repositories %v; want %v", p.Spec.SourceRepos, want)
	}

	h.syncer.project.ClusterResources = false
	p = install("cluster resources no longer allowed", "policies", "https://git.example/policies",
		[]string{http.MethodPatch, http.MethodPatch, http.MethodPatch})
	if len(p.Spec.ClusterResourceWhitelist) != 0 || updatedByManager(p.ManagedFields) || len(p.Spec.SourceRepos) != 3 {
		t.Errorf("after cluster resources were left out: %+v, %+v; want none allowed, three repositories and nothing held by an update",
			p.Spec, p.ManagedFields)
	}

	install("a fourth repository", "backup", "https://git.example/backup", []string{http.MethodPatch})
}
