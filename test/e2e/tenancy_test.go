package e2e

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

var gvrClusterRuleGrant = schema.GroupVersionResource{Group: "enforcement.globo.com", Version: "v1beta1", Resource: "clusterrulegrants"}

// tenantUser is a dynamic client impersonating user, who may do with ClusterRules in namespace
// what the Role of docs/tenancy.md allows, and nothing else.
func (s *system) tenantUser(namespace, user string) dynamic.Interface {
	s.t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "clusterrule-author"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"enforcement.globo.com"}, Resources: []string{"clusterrules"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "clusterrule-author"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}}
	if err := s.kube.Client.Create(context.Background(), role); err != nil {
		s.t.Fatal(err)
	}
	if err := s.kube.Client.Create(context.Background(), binding); err != nil {
		s.t.Fatal(err)
	}
	// The user's requests carry the groups of every authenticated user.
	groups := []string{"system:authenticated"}
	// The API server's RBAC authorizer learns of a new binding from its own cache, a moment
	// later: ask it, as the user's requests will, until it allows.
	testenv.Eventually(s.t, 30*time.Second, func() error {
		review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: namespace, Verb: "create",
				Group: "enforcement.globo.com", Resource: "clusterrules"}}}
		if err := s.kube.Client.Create(context.Background(), review); err != nil {
			return err
		}
		if !review.Status.Allowed {
			return fmt.Errorf("%s may not create clusterrules in %s yet", user, namespace)
		}
		return nil
	})
	cfg := rest.CopyConfig(s.kube.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return dyn
}

// deletion is an object deleted from the Argo CD namespace, as a watch reported it.
type deletion struct {
	what string // "<resource>/<name>"
	rv   uint64 // the resource version of the deletion
}

// deletions records the deletions of Applications, AppProjects and cluster Secrets in the Argo
// CD namespace from the moment it is called. Resource versions of one API server are etcd's
// revisions, increasing across resources, so sorting by them gives the order the deletes
// happened in.
func (s *system) deletions(ctx context.Context) func() []deletion {
	s.t.Helper()
	var mu sync.Mutex
	var seen []deletion
	for _, gvr := range []schema.GroupVersionResource{gvrApplication, gvrAppProject, gvrSecret} {
		opts := metav1.ListOptions{}
		if gvr == gvrSecret {
			opts = listBySecretType
		}
		w, err := s.dyn.Resource(gvr).Namespace(argoNS).Watch(ctx, opts)
		if err != nil {
			s.t.Fatal(err)
		}
		go func() {
			defer w.Stop()
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if !ok || ev.Type != watch.Deleted {
					continue
				}
				rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
				mu.Lock()
				seen = append(seen, deletion{what: gvr.Resource + "/" + u.GetName(), rv: rv})
				mu.Unlock()
			}
		}()
	}
	return func() []deletion {
		mu.Lock()
		defer mu.Unlock()
		out := slices.Clone(seen)
		slices.SortFunc(out, func(a, b deletion) int { return cmp.Compare(a.rv, b.rv) })
		return out
	}
}

// checkUnregistrationOrder: the deletions of cluster's objects happened in the order of want,
// whose groups (any order inside one) follow each other. The watches report a deletion a moment
// after the object is gone, so it first waits until they have seen as many as want names.
func checkUnregistrationOrder(t *testing.T, deleted func() []deletion, cluster string, want ...[]string) {
	t.Helper()
	var flat []string
	for _, group := range want {
		flat = append(flat, group...)
	}
	var got []string
	testenv.Eventually(t, 10*time.Second, func() error {
		got = got[:0]
		for _, d := range deleted() {
			if name := d.what[strings.Index(d.what, "/")+1:]; name == events.ObjectName(cluster) || name == "cluster-"+cluster ||
				strings.HasPrefix(name, cluster+"-") {
				got = append(got, d.what)
			}
		}
		if len(got) < len(flat) {
			return fmt.Errorf("deletions of %s seen so far: %v, want %v", cluster, got, want)
		}
		return nil
	})
	done := 0
	for i, group := range want {
		if !sameElements(got[done:done+len(group)], group) {
			t.Errorf("deletions of %s: %v, want %v (step %d: %v)", cluster, got, want, i+1, group)
			return
		}
		done += len(group)
	}
	if len(got) != len(flat) {
		t.Errorf("deletions of %s: %v, want %v", cluster, got, want)
	}
}

func sameElements(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestTenantRuleLandsInItsGrantProject: with the built services, the operator grants namespace
// team-a the clusters labelled tenant=team-a, its repositories and its namespaces; a user who may
// only write ClusterRules in team-a (RBAC of docs/tenancy.md, impersonated) creates a rule for
// every Rancher cluster. Only the team's clusters get its Application, in the grant's AppProject
// on that cluster, which allows exactly the grant's limits; the operator's own rule on those
// clusters keeps the cluster's AppProject, without the team's repository. The user's rule for a
// repository outside the grant is NotPermitted and installs nothing. Each team cluster that
// leaves the source is unregistered in order: its Applications, the grant project, the cluster
// project, the cluster Secret.
func TestTenantRuleLandsInItsGrantProject(t *testing.T) {
	s := startSystem(t, nil)
	ctx := t.Context()
	a1 := rancherfake.Cluster("c-1", "a1", "active", map[string]string{"tenant": "team-a"})
	a2 := rancherfake.Cluster("c-2", "a2", "active", map[string]string{"tenant": "team-a"})
	b1 := rancherfake.Cluster("c-3", "b1", "active", map[string]string{"tenant": "team-b"})
	s.rancher.SetClusters(a1, a2, b1)

	s.kube.Namespace(t, "team-a")
	grant := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRuleGrant
metadata: {name: team-a, namespace: enforcement}
spec:
  sourceNamespaces: [team-a]
  sources: [{kind: rancher}]
  clusterSelector: {matchLabels: {tenant: team-a}}
  sourceRepos: ["https://git.example.com/team-a/*"]
  destinationNamespaces: ["team-a-*"]
`), &grant.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := s.dyn.Resource(gvrClusterRuleGrant).Namespace(operatorNS).Create(ctx, grant, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The operator's own rule on the team's clusters.
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata: {name: monitoring}
spec:
  enforcements:
    - {name: monitoring, repo: https://github.com/example/monitoring, path: agent}
  source:
    rancher: {labels: {tenant: team-a}}
`)
	alice := s.tenantUser("team-a", "alice").Resource(gvrClusterRule).Namespace("team-a")
	tenantRule := func(name, repo string) {
		t.Helper()
		u := &unstructured.Unstructured{}
		manifest := fmt.Sprintf(`apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata: {name: %s, namespace: team-a}
spec:
  enforcements:
    - {name: %s, repo: %q, path: chart, namespace: team-a-%s}
  source:
    rancher: {}
`, name, name, repo, name)
		if err := yaml.Unmarshal([]byte(manifest), &u.Object); err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("alice creates rule %s: %v", name, err)
		}
	}
	tenantRule("web", "https://git.example.com/team-a/web")

	apps := []string{"a1-monitoring", "a1-web", "a2-monitoring", "a2-web"}
	projects := []string{"a1", "a2", events.ObjectName("a1.team-a"), events.ObjectName("a2.team-a")}
	slices.Sort(projects)
	testenv.Eventually(t, 60*time.Second, func() error { return s.holds(apps, projects, []string{"a1", "a2"}) })
	for _, c := range []struct{ cluster, id string }{{"a1", "c-1"}, {"a2", "c-2"}} {
		project := events.ObjectName(c.cluster + ".team-a")
		web := s.get(gvrApplication, c.cluster+"-web")
		if p, _, _ := unstructured.NestedString(web.Object, "spec", "project"); p != project {
			t.Errorf("Application %s-web in project %q, want the grant's %s", c.cluster, p, project)
		}
		checkGrantProject(t, s.get(gvrAppProject, project), s.rancher.URL+"/k8s/clusters/"+c.id, c.cluster)
		repos, _, _ := unstructured.NestedStringSlice(s.get(gvrAppProject, c.cluster).Object, "spec", "sourceRepos")
		if !slices.Equal(repos, []string{"https://github.com/example/monitoring"}) {
			t.Errorf("cluster AppProject %s allows %v, want only the operator rule's repository", c.cluster, repos)
		}
	}

	// A repository outside the grant: NotPermitted, no cluster, no intent, no Application.
	tenantRule("stray", "https://git.example.com/team-b/stray")
	testenv.Eventually(t, 30*time.Second, func() error {
		u, err := alice.Get(ctx, "stray", getOpts)
		if err != nil {
			return err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Ready" && m["status"] == "False" && m["reason"] == "NotPermitted" {
				return nil
			}
		}
		return fmt.Errorf("rule stray: conditions %v, want Ready=False NotPermitted", conds)
	})
	for _, e := range s.audit() {
		if in, ok := e.(*events.InstallIntent); ok && in.Rule.Name == "stray" {
			t.Errorf("install intent for the rule outside its grant: %s", in.ID())
		}
	}
	if err := s.holds(apps, projects, []string{"a1", "a2"}); err != nil {
		t.Fatalf("after the refused rule: %v", err)
	}

	// The team's clusters leave the source one after the other (one removal per scan keeps under
	// the source's removal breaker); b1, outside the grant, never had anything.
	deleted := s.deletions(ctx)
	s.rancher.SetClusters(a1, b1)
	testenv.Eventually(t, 30*time.Second, func() error {
		return s.holds(apps[:2], []string{"a1", events.ObjectName("a1.team-a")}, []string{"a1"})
	})
	s.rancher.SetClusters(b1)
	testenv.Eventually(t, 30*time.Second, func() error { return s.holds(nil, nil, nil) })
	for _, c := range []string{"a2", "a1"} {
		checkUnregistrationOrder(t, deleted, c,
			[]string{"applications/" + c + "-monitoring", "applications/" + c + "-web"},
			[]string{"appprojects/" + events.ObjectName(c+".team-a")},
			[]string{"appprojects/" + c},
			[]string{"secrets/cluster-" + c})
	}
}

// checkGrantProject checks that a grant's AppProject allows exactly the grant of the test: its
// repository pattern, its namespaces on cluster (by API URL and by name) and no cluster-scoped
// kind.
func checkGrantProject(t *testing.T, p *unstructured.Unstructured, server, cluster string) {
	t.Helper()
	repos, _, _ := unstructured.NestedStringSlice(p.Object, "spec", "sourceRepos")
	if !slices.Equal(repos, []string{"https://git.example.com/team-a/*"}) {
		t.Errorf("AppProject %s source repos %v", p.GetName(), repos)
	}
	dests, _, _ := unstructured.NestedSlice(p.Object, "spec", "destinations")
	want := []any{
		map[string]any{"server": server, "namespace": "team-a-*"},
		map[string]any{"name": cluster, "namespace": "team-a-*"},
	}
	if fmt.Sprint(dests) != fmt.Sprint(want) {
		t.Errorf("AppProject %s destinations %v, want %v", p.GetName(), dests, want)
	}
	if kinds, found, _ := unstructured.NestedSlice(p.Object, "spec", "clusterResourceWhitelist"); found && len(kinds) > 0 {
		t.Errorf("AppProject %s allows cluster-scoped kinds %v, want none", p.GetName(), kinds)
	}
}
