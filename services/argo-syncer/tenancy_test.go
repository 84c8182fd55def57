package main

import (
	"context"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestRenderTenantProjectIsTheGrant: a grant's AppProject allows exactly the grant's
// repositories, its namespaces on its own cluster only, and no cluster-scoped kind unless the
// grant lists it; its name never equals a cluster's own project.
func TestRenderTenantProjectIsTheGrant(t *testing.T) {
	g := &events.Grant{Name: "team-a", SourceRepos: []string{"https://git.example.com/team-a/*"}, DestinationNamespaces: []string{"team-a-*"}}
	name := TenantProjectName("prod-1", "team-a")
	if name == ProjectName("prod-1") || !strings.HasPrefix(name, "prod-1-team-a-") || len(name) != len("prod-1-team-a-")+16 {
		t.Fatalf("TenantProjectName = %q", name)
	}
	o := RenderTenantProject("argocd", name, "prod-1", "https://k8s.example", g)
	spec := o.Spec.(argov1.AppProjectSpec)
	if strings.Join(spec.SourceRepos, ",") != "https://git.example.com/team-a/*" {
		t.Errorf("source repos %v", spec.SourceRepos)
	}
	want := []argov1.ApplicationDestination{{Server: "https://k8s.example", Namespace: "team-a-*"}, {Name: "prod-1", Namespace: "team-a-*"}}
	if len(spec.Destinations) != 2 || spec.Destinations[0] != want[0] || spec.Destinations[1] != want[1] {
		t.Errorf("destinations %+v, want %+v", spec.Destinations, want)
	}
	if len(spec.ClusterResourceWhitelist) != 0 {
		t.Errorf("cluster resources %v, want none", spec.ClusterResourceWhitelist)
	}
	if o.Metadata.Annotations[AnnotationGrant] != "team-a" || o.Metadata.Annotations[AnnotationCluster] != "prod-1" || o.Metadata.Labels[LabelManagedBy] != ManagedByValue {
		t.Errorf("metadata %+v", o.Metadata)
	}
	g.ClusterResources = []events.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}
	spec = RenderTenantProject("argocd", name, "prod-1", "", g).Spec.(argov1.AppProjectSpec)
	if len(spec.ClusterResourceWhitelist) != 1 || spec.ClusterResourceWhitelist[0].Kind != "ClusterRole" || len(spec.Destinations) != 1 {
		t.Errorf("with cluster resources and no URL: %+v", spec)
	}
}

// tenantIntent is an install intent of rule team-a/<rule> acting under grant g on cluster: its
// enforcement installs from a team-a repository into namespace team-a-<enforcement>.
func (h *harness) tenantIntent(rule, cluster, enforcement string, g *events.Grant) *events.InstallIntent {
	in := h.installIntent(rule, cluster, enforcement)
	in.Rule.Namespace = "team-a"
	in.Enforcement.Repo = "https://git.example.com/team-a/" + enforcement
	in.Enforcement.Namespace = "team-a-" + enforcement
	in.Grant = g
	return in
}

// teamAGrant is a grant of two repository patterns and two destination namespace patterns that
// allows ClusterRoles.
func teamAGrant() *events.Grant {
	return &events.Grant{
		Name:                  "team-a",
		SourceRepos:           []string{"https://git.example.com/team-a/*", "https://git.example.com/shared/*"},
		DestinationNamespaces: []string{"team-a-*", "shared-a"},
		ClusterResources:      []events.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}},
	}
}

// projectAllowsExactly fails the test unless the AppProject name, as the API server has it,
// allows exactly the grant's repositories, the grant's namespaces on cluster (by URL and by
// name) and the grant's cluster-scoped kinds.
func (h *harness) projectAllowsExactly(name string, cluster events.Target, g *events.Grant) {
	h.t.Helper()
	p := h.project(name)
	if p == nil {
		h.t.Fatalf("AppProject %s does not exist", name)
	}
	if !slices.Equal(p.Spec.SourceRepos, g.SourceRepos) {
		h.t.Errorf("AppProject %s source repos %v, want %v", name, p.Spec.SourceRepos, g.SourceRepos)
	}
	var dests []argov1.ApplicationDestination
	for _, ns := range g.DestinationNamespaces {
		dests = append(dests, argov1.ApplicationDestination{Server: cluster.URL, Namespace: ns}, argov1.ApplicationDestination{Name: cluster.Name, Namespace: ns})
	}
	if !slices.Equal(p.Spec.Destinations, dests) {
		h.t.Errorf("AppProject %s destinations %+v, want %+v", name, p.Spec.Destinations, dests)
	}
	var kinds []metav1.GroupKind
	for _, gk := range g.ClusterResources {
		kinds = append(kinds, metav1.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	if !slices.Equal(p.Spec.ClusterResourceWhitelist, kinds) {
		h.t.Errorf("AppProject %s cluster resources %v, want %v", name, p.Spec.ClusterResourceWhitelist, kinds)
	}
	if len(p.Spec.NamespaceResourceBlacklist)+len(p.Spec.ClusterResourceBlacklist)+len(p.Spec.SourceNamespaces) != 0 || p.Spec.NamespaceResourceWhitelist != nil {
		h.t.Errorf("AppProject %s allows or denies more than the grant: %+v", name, p.Spec)
	}
}

// TestTenantApplicationLivesInItsGrantProject: an install intent carrying a grant puts its
// Application into the grant's AppProject on that cluster, which the API server holds with
// exactly the grant's repositories, destinations and cluster-scoped kinds; a narrower grant
// rewrites it (down to no cluster-scoped kind at all). The cluster's own AppProject, used by an
// operator-namespace rule on the same cluster, is not written by any of it.
func TestTenantApplicationLivesInItsGrantProject(t *testing.T) {
	h := newHarness(t)
	h.consume()
	op := h.installIntent("baseline", "prod-1", "agent")
	h.publish(op)
	h.outcome(succeeded(op.ID()))
	own := h.project("prod-1")
	if own == nil {
		t.Fatal("the operator rule's cluster AppProject was not created")
	}

	in := h.tenantIntent("web", "prod-1", "web", teamAGrant())
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	project := TenantProjectName("prod-1", "team-a")
	app := h.app("prod-1-web")
	if app == nil || app.Spec.Project != project {
		t.Fatalf("tenant Application %+v, want it in AppProject %s", app, project)
	}
	if app.Spec.Destination.Name != "prod-1" || app.Spec.Destination.Namespace != "team-a-web" {
		t.Errorf("tenant Application destination %+v", app.Spec.Destination)
	}
	h.projectAllowsExactly(project, in.Cluster, in.Grant)
	if p := h.project(project); p.Annotations[AnnotationGrant] != "team-a" || p.Annotations[AnnotationCluster] != "prod-1" || !owned(p) {
		t.Errorf("tenant AppProject metadata %+v", p.ObjectMeta)
	}

	// The grant narrows: one repository, one namespace, no cluster-scoped kind.
	narrow := h.tenantIntent("web", "prod-1", "web", &events.Grant{
		Name: "team-a", SourceRepos: []string{"https://git.example.com/team-a/web"}, DestinationNamespaces: []string{"team-a-web"},
	})
	narrow.SpecHash = "h2"
	h.publish(narrow)
	h.outcome(succeeded(narrow.ID()))
	h.projectAllowsExactly(project, narrow.Cluster, narrow.Grant)
	if app := h.app("prod-1-web"); app.Spec.Project != project {
		t.Errorf("after the narrower grant the Application is in %s", app.Spec.Project)
	}

	// The cluster's own AppProject was never written: same resource version, none of the
	// tenant's repositories, all namespaces and kinds for the operator's rules as before.
	after := h.project("prod-1")
	if after == nil || after.ResourceVersion != own.ResourceVersion || !reflect.DeepEqual(after.Spec, own.Spec) {
		t.Errorf("cluster AppProject changed:\n before %+v\n after  %+v", own.Spec, after.Spec)
	}
	if slices.Contains(after.Spec.SourceRepos, in.Enforcement.Repo) {
		t.Errorf("cluster AppProject allows the tenant's repository: %v", after.Spec.SourceRepos)
	}
	if a := h.app("prod-1-agent"); a == nil || a.Spec.Project != "prod-1" {
		t.Errorf("operator Application %+v, want it in AppProject prod-1", a)
	}
}

// deletedSince lists "<resource>/<name>" of the DELETE requests since mark, in order.
func (h *harness) deletedSince(mark int) []string {
	var out []string
	for _, r := range h.log.since(mark) {
		if r.Method == http.MethodDelete {
			out = append(out, resourceOf(r)+"/"+r.Path[strings.LastIndex(r.Path, "/")+1:])
		}
	}
	return out
}

// registrationIntact fails the test unless the cluster Secret and the AppProjects are all there.
func (h *harness) registrationIntact(when, cluster string, projects ...string) {
	h.t.Helper()
	if h.secret(ClusterSecretName(cluster)) == nil {
		h.t.Fatalf("%s: cluster Secret of %s deleted", when, cluster)
	}
	for _, p := range projects {
		if h.project(p) == nil {
			h.t.Fatalf("%s: AppProject %s deleted", when, p)
		}
	}
}

// TestTenantOnlyClusterUnregistersInOrder: a cluster with only tenant Applications (no rule of
// OPERATOR_NAMESPACE, so no cluster AppProject) stays registered, grant projects and Secret,
// while one of them is there or terminating (a cascade that Argo CD's controller has not
// finished: its finalizer is still set); once the last one is gone, without another intent, the
// grant projects are deleted and then the cluster Secret.
func TestTenantOnlyClusterUnregistersInOrder(t *testing.T) {
	h := newHarness(t)
	h.consume()
	ctx := context.Background()
	web := h.tenantIntent("web", "t1", "web", teamAGrant())
	web.DeletionPolicy = events.DeletionCascade
	teamB := &events.Grant{Name: "team-b", SourceRepos: []string{"https://git.example.com/team-a/*"}, DestinationNamespaces: []string{"team-a-*"}}
	api := h.tenantIntent("api", "t1", "api", teamB)
	h.publish(web, api)
	h.outcome(succeeded(web.ID()))
	h.outcome(succeeded(api.ID()))
	projA, projB := TenantProjectName("t1", "team-a"), TenantProjectName("t1", "team-b")
	h.registrationIntact("installed", "t1", projA, projB)
	if h.project(ProjectName("t1")) != nil {
		t.Fatal("a cluster AppProject was created for tenant Applications only")
	}
	// Argo CD's controller sets the resources finalizer on an Application it syncs.
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "t1-web", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":["resources-finalizer.argocd.argoproj.io"]}}`),
		metav1.PatchOptions{FieldManager: "argocd-application-controller"}); err != nil {
		t.Fatal(err)
	}

	// The other tenant Application is still there: its uninstall removes nothing else.
	uweb := uninstallIntent(web, events.UninstallRuleDeleted)
	h.publish(uweb)
	if d := h.outcome(uninstalled(uweb.ID())).(*events.UninstallDone); !d.Deleted {
		t.Fatalf("uninstall of the cascading Application: %+v", d)
	}
	if app := h.app("t1-web"); app == nil || app.DeletionTimestamp == nil {
		t.Fatalf("want t1-web terminating (Argo CD has not removed its finalizer), got %+v", app)
	}
	h.registrationIntact("one Application alive, one terminating", "t1", projA, projB)

	// The last one goes while the first still terminates: nothing of the registration is removed.
	uapi := uninstallIntent(api, events.UninstallRuleDeleted)
	h.publish(uapi)
	h.outcome(uninstalled(uapi.ID()))
	if h.app("t1-api") != nil {
		t.Fatal("t1-api not deleted")
	}
	time.Sleep(300 * time.Millisecond) // room for a wrong unregistration to happen
	h.registrationIntact("one Application terminating", "t1", projA, projB)

	// Argo CD finishes the cascade: the grant projects go, then the Secret, with no intent.
	mark := h.log.mark()
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "t1-web", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{FieldManager: "argocd-application-controller"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "tenant-only cluster unregistered", func() bool {
		return h.secret(ClusterSecretName("t1")) == nil && h.project(projA) == nil && h.project(projB) == nil
	})
	deletes := h.deletedSince(mark)
	want := []string{"appprojects/" + projA, "appprojects/" + projB, "secrets/cluster-t1"}
	slices.Sort(want[:2])
	if len(deletes) == 3 {
		slices.Sort(deletes[:2])
	}
	if !slices.Equal(deletes, want) {
		t.Errorf("deletes %v, want %v (grant projects, then the Secret)", deletes, want)
	}
}

// TestForeignApplicationKeepsTenantProject: an Application Enforcement does not manage that uses
// a grant's AppProject (it deploys to that cluster) keeps the project and the cluster's
// registration when Enforcement's last Application of the cluster goes, as a foreign
// Application in the cluster's own project does; once it is gone, the unregistration finishes
// without another intent.
func TestForeignApplicationKeepsTenantProject(t *testing.T) {
	h := newHarness(t)
	h.consume()
	ctx := context.Background()
	web := h.tenantIntent("web", "t2", "web", teamAGrant())
	h.publish(web)
	h.outcome(succeeded(web.ID()))
	project := TenantProjectName("t2", "team-a")
	foreign := &argov1.Application{
		ObjectMeta: metav1.ObjectMeta{Name: "hand-made", Namespace: h.ns},
		Spec: argov1.ApplicationSpec{Project: project, Destination: argov1.ApplicationDestination{Name: "t2", Namespace: "team-a-x"},
			Source: &argov1.ApplicationSource{RepoURL: "https://git.example.com/team-a/x"}},
	}
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Create(ctx, foreign, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache sees the foreign Application", func() bool { _, ok, _ := h.syncer.apps.get("hand-made"); return ok })

	uweb := uninstallIntent(web, events.UninstallRuleDeleted)
	h.publish(uweb)
	if d := h.outcome(uninstalled(uweb.ID())).(*events.UninstallDone); !d.Deleted {
		t.Fatalf("uninstall done %+v, want deleted", d)
	}
	if h.app("t2-web") != nil {
		t.Fatal("t2-web not deleted")
	}
	h.registrationIntact("foreign Application in the grant project", "t2", project)
	if p := h.project(project); p.Annotations[AnnotationUnregister] == "" {
		t.Errorf("grant project not marked for the pending unregistration: %v", p.Annotations)
	}

	// An install on the cluster meanwhile wants it registered: the mark goes, and comes back
	// with the next last uninstall.
	again := h.tenantIntent("web", "t2", "web", teamAGrant())
	again.Rule.Generation++
	h.publish(again)
	h.outcome(succeeded(again.ID()))
	if p := h.project(project); p.Annotations[AnnotationUnregister] != "" {
		t.Errorf("install left the pending unregistration mark: %v", p.Annotations)
	}
	uagain := uninstallIntent(again, events.UninstallRuleDeleted)
	h.publish(uagain)
	h.outcome(uninstalled(uagain.ID()))
	h.registrationIntact("foreign Application in the grant project, second uninstall", "t2", project)

	if err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Delete(ctx, "hand-made", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cluster unregistered once the foreign Application is gone", func() bool {
		return h.project(project) == nil && h.secret(ClusterSecretName("t2")) == nil
	})
}
