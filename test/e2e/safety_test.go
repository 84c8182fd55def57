package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The end-to-end tests of the safety guards listed in docs/safety.md.

// staticRule writes the static clusters (the clusters.yaml of the default ConfigMap) and applies
// the ClusterRule "edge", which installs the package "agent" on every one of them. specYAML, if
// given, is added to the rule's spec (indented as a key of spec, for example "  triggers: ...").
func (s *system) staticRule(clustersYAML string, specYAML ...string) {
	s.t.Helper()
	s.staticClusters(clustersYAML)
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: edge
spec:
  enforcements:
    - name: agent
      repo: https://github.com/example/agent
      path: chart
  source:
    static: {}
`+strings.Join(specYAML, ""))
}

// staticClusters writes the static clusters (the clusters.yaml of the default ConfigMap).
func (s *system) staticClusters(clustersYAML string) {
	s.t.Helper()
	err := s.kube.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "enforcement-static-clusters", Namespace: operatorNS},
		Data:       map[string]string{"clusters.yaml": clustersYAML},
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// TestStaticClusterKeepsItsOwnCredentials: a static cluster that names a Secret of its own is
// registered in Argo CD with that Secret's token, and a static cluster without one with the
// static source's Secret. Before the guard, every static cluster got the source's token.
func TestStaticClusterKeepsItsOwnCredentials(t *testing.T) {
	s := startSystem(t, nil)
	s.createSecret("static", map[string][]byte{"token": []byte("source-token")})
	s.createSecret("edge-1-credentials", map[string][]byte{"token": []byte("edge-1-token")})
	s.staticRule(`
- name: edge-1
  url: https://edge-1.example:6443
  secretName: edge-1-credentials
- name: edge-2
  url: https://edge-2.example:6443
`)
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("cluster Secrets", s.clusterSecretNames(), []string{"edge-1", "edge-2"})
	})
	checkClusterSecret(t, s, "edge-1", "https://edge-1.example:6443", "edge-1-token")
	checkClusterSecret(t, s, "edge-2", "https://edge-2.example:6443", "source-token")
}

// TestDesiredStateIsReasserted: with the built services and RESYNC_INTERVAL=2s, an Application
// deleted by hand, another one's path edited by hand, and the cluster's AppProject deleted by
// hand are all put back by argo-syncer's resync; the restores are recorded on the bus as
// restored outcomes (never as a new creation). A cluster that goes away is cleaned up and its
// Applications are not recreated by later rounds.
func TestDesiredStateIsReasserted(t *testing.T) {
	s := startSystem(t, map[string]string{"RESYNC_INTERVAL": "2s"})
	steady := []map[string]any{gke("c-1", "prod-a", "active", norman), gke("c-2", "prod-b", "active", norman),
		gke("c-3", "prod-c", "active", norman), gke("c-4", "prod-d", "active", norman), gke("c-5", "prod-e", "active", norman)}
	s.rancher.SetClusters(steady...)
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))
	var all []string
	for _, c := range []string{"prod-a", "prod-b", "prod-c", "prod-d", "prod-e"} {
		all = append(all, c+"-guestbook", c+"-helm-guestbook")
	}
	sort.Strings(all)
	testenv.Eventually(t, 60*time.Second, func() error { return equal("Applications", s.names(gvrApplication), all) })

	ctx := context.Background()
	apps := s.dyn.Resource(gvrApplication).Namespace(argoNS)
	if err := apps.Delete(ctx, "prod-a-guestbook", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := apps.Patch(ctx, "prod-b-guestbook", types.MergePatchType, []byte(`{"spec":{"source":{"path":"by-hand"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.dyn.Resource(gvrAppProject).Namespace(argoNS).Delete(ctx, "prod-c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, func() error {
		if err := equal("Applications", s.names(gvrApplication), all); err != nil {
			return err
		}
		if !contains(s.names(gvrAppProject), "prod-c") {
			return errors.New("AppProject prod-c not restored yet")
		}
		path, _, _ := unstructured.NestedString(s.get(gvrApplication, "prod-b-guestbook").Object, "spec", "source", "path")
		if path != "guestbook" {
			return fmt.Errorf("prod-b-guestbook path is %q, want guestbook", path)
		}
		return nil
	})
	restores := 0
	for _, e := range s.audit() {
		if o, ok := e.(*events.InstallSucceeded); ok && o.Restored != "" {
			restores++
			if o.Created {
				t.Errorf("restore of %s reported as a creation (the afterInstall moment)", o.Application)
			}
		}
	}
	if restores < 2 {
		t.Errorf("%d restored outcomes on the bus, want at least 2 (the deleted and the edited Application)", restores)
	}

	// prod-e leaves: cleaned up after the grace period and never recreated by later rounds.
	s.rancher.SetClusters(steady[:4]...)
	kept := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return strings.HasPrefix(n, "prod-e-") })
	testenv.Eventually(t, 60*time.Second, func() error { return equal("Applications", s.names(gvrApplication), kept) })
	time.Sleep(5 * time.Second) // two resync rounds
	if err := equal("Applications after two resync rounds", s.names(gvrApplication), kept); err != nil {
		t.Fatal(err)
	}
}

// readyReason returns the reason of a ClusterRule's Ready condition ("" while it has none).
func (s *system) readyReason(namespace, name string) string {
	s.t.Helper()
	u, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Get(context.Background(), name, getOpts)
	if err != nil {
		s.t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			reason, _ := m["reason"].(string)
			return reason
		}
	}
	return ""
}

// selectionUninstalls counts the uninstall intents of a rule published because a rule edit
// stopped selecting a cluster.
func (s *system) selectionUninstalls(rule string) int {
	n := 0
	for _, e := range s.audit() {
		if u, ok := e.(*events.UninstallIntent); ok && u.Rule.Name == rule && u.Reason == events.UninstallNoLongerMatches {
			n++
		}
	}
	return n
}

// TestRuleEditTypoRemovesNothing: with the built services, a typo in the labels of the
// original's example rule stops it selecting all five clusters; the rule edit breaker holds the
// ten removals (RemovalsHeld), and reverting the typo drops the hold: no Application is deleted
// or recreated, and no uninstall intent is published at any point.
func TestRuleEditTypoRemovesNothing(t *testing.T) {
	s := startSystem(t, nil)
	var fleet []map[string]any
	var all []string
	for i, c := range []string{"prod-a", "prod-b", "prod-c", "prod-d", "prod-e"} {
		fleet = append(fleet, gke(fmt.Sprintf("c-%d", i+1), c, "active", norman))
		all = append(all, c+"-guestbook", c+"-helm-guestbook")
	}
	sort.Strings(all)
	s.rancher.SetClusters(fleet...)
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))
	testenv.Eventually(t, 60*time.Second, func() error { return equal("Applications", s.names(gvrApplication), all) })
	uids := map[string]types.UID{}
	for _, n := range all {
		uids[n] = s.get(gvrApplication, n).GetUID()
	}

	rules := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS)
	setCreator := func(v string) {
		patch := fmt.Sprintf(`{"spec":{"source":{"rancher":{"labels":{"cattle.io/creator":%q}}}}}`, v)
		if _, err := rules.Patch(context.Background(), "dev-rule", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setCreator("normann")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := s.readyReason(operatorNS, "dev-rule"); r != "RemovalsHeld" {
			return fmt.Errorf("Ready reason %q, want RemovalsHeld", r)
		}
		return nil
	})
	setCreator("norman")
	testenv.Eventually(t, 30*time.Second, func() error {
		if r := s.readyReason(operatorNS, "dev-rule"); r == "RemovalsHeld" {
			return errors.New("still RemovalsHeld after the revert")
		}
		return nil
	})
	if err := equal("Applications after the typo and its revert", s.names(gvrApplication), all); err != nil {
		t.Fatal(err)
	}
	for _, n := range all {
		if uid := s.get(gvrApplication, n).GetUID(); uid != uids[n] {
			t.Errorf("Application %s was deleted and recreated", n)
		}
	}
	if n := s.selectionUninstalls("dev-rule"); n != 0 {
		t.Errorf("%d uninstall intents published for the typo, want none", n)
	}
}

// TestSameNameInTwoSourcesNeverShares: a Rancher cluster and a static cluster both named
// prod-a, each selected by its own rule. The first registered keeps the cluster Secret (its
// server never moves to the other's URL) and its Applications; the other rule shows
// NameConflict and nothing of it is installed under that name.
func TestSameNameInTwoSourcesNeverShares(t *testing.T) {
	s := startSystem(t, nil)
	s.rancher.SetClusters(gke("c-1", "prod-a", "active", norman))
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))
	rancherURL := s.rancher.URL + "/k8s/clusters/c-1"
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"prod-a-guestbook", "prod-a-helm-guestbook"})
	})

	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	s.staticRule("- name: prod-a\n  url: https://elsewhere.example:6443\n")
	testenv.Eventually(t, 60*time.Second, func() error {
		if r := s.readyReason(operatorNS, "edge"); r != "NameConflict" {
			return fmt.Errorf("Ready reason of the static rule %q, want NameConflict", r)
		}
		return nil
	})
	if err := equal("Applications", s.names(gvrApplication), []string{"prod-a-guestbook", "prod-a-helm-guestbook"}); err != nil {
		t.Fatal(err)
	}
	checkClusterSecret(t, s, "prod-a", rancherURL, token)
	if got := s.clusterSecretNames(); len(got) != 1 {
		t.Errorf("cluster Secrets for %v, want one for prod-a", got)
	}
}

// staticConfigMap writes the static clusters clustersYAML into ConfigMap name of the operator
// namespace.
func (s *system) staticConfigMap(name, clustersYAML string) {
	s.t.Helper()
	err := s.kube.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: operatorNS},
		Data:       map[string]string{"clusters.yaml": clustersYAML},
	})
	if err != nil {
		s.t.Fatal(err)
	}
}

// TestRenamedStaticConfigMapHandsOver: with the built services, a rule (Cascade, with a
// beforeInstall hook) over the static ConfigMap edge-v1 moves to edge-v2, which lists the same
// two clusters (new identities) and a third. The two keep their Applications, updated in place
// (same UIDs) to the new identity along with their AppProjects and cluster Secrets; the hook is
// called for the third only; no uninstall intent is published. Before the handover, the edit's
// removals were held and the new identities got NameConflict against their own old objects.
func TestRenamedStaticConfigMapHandsOver(t *testing.T) {
	s := startSystem(t, map[string]string{"TRIGGER_ALLOWED_NETWORKS": "127.0.0.0/8"}) // the hook listens on loopback
	var hooks atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hooks.Add(1) }))
	t.Cleanup(hook.Close)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	clusters := "- name: edge-1\n  url: https://edge-1.example:6443\n- name: edge-2\n  url: https://edge-2.example:6443\n"
	s.staticConfigMap("edge-v1", clusters)
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: edge
spec:
  deletionPolicy: Cascade
  enforcements:
    - name: agent
      repo: https://github.com/example/agent
      path: chart
  triggers:
    beforeInstall:
      endpoint: `+hook.URL+`
  source:
    static:
      configMap: edge-v1
`)
	before := []string{"edge-1-agent", "edge-2-agent"}
	testenv.Eventually(t, 60*time.Second, func() error { return equal("Applications", s.names(gvrApplication), before) })
	uids := map[string]types.UID{}
	for _, n := range before {
		uids[n] = s.get(gvrApplication, n).GetUID()
	}
	if n := hooks.Load(); n != 2 {
		t.Fatalf("%d beforeInstall calls for two new Applications", n)
	}

	s.staticConfigMap("edge-v2", clusters+"- name: edge-3\n  url: https://edge-3.example:6443\n")
	patch := `{"spec":{"source":{"static":{"configMap":"edge-v2"}}}}`
	if _, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Patch(context.Background(), "edge", types.MergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	identity := func(kind schema.GroupVersionResource, name string) string {
		return s.get(kind, name).GetAnnotations()["enforcement.globo.com/cluster-identity"]
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := equal("Applications", s.names(gvrApplication), []string{"edge-1-agent", "edge-2-agent", "edge-3-agent"}); err != nil {
			return err
		}
		for _, c := range []string{"edge-1", "edge-2"} {
			want := "static:" + operatorNS + "/edge-v2/" + c
			for _, obj := range []struct {
				kind schema.GroupVersionResource
				name string
			}{{gvrApplication, c + "-agent"}, {gvrAppProject, c}, {gvrSecret, "cluster-" + c}} {
				if got := identity(obj.kind, obj.name); got != want {
					return fmt.Errorf("%s %s records identity %q, want %q", obj.kind.Resource, obj.name, got, want)
				}
			}
		}
		if r := s.readyReason(operatorNS, "edge"); r != "Installed" {
			return fmt.Errorf("Ready reason %q, want Installed", r)
		}
		return nil
	})
	for _, n := range before {
		if uid := s.get(gvrApplication, n).GetUID(); uid != uids[n] {
			t.Errorf("Application %s was deleted and recreated", n)
		}
	}
	if n := hooks.Load(); n != 3 {
		t.Errorf("%d beforeInstall calls in all, want 3 (edge-3's only after the edit)", n)
	}
	for _, e := range s.audit() {
		if u, ok := e.(*events.UninstallIntent); ok {
			t.Errorf("uninstall intent %s %s (%s) published for the rename", u.Cluster.Name, u.Enforcement, u.Reason)
		}
	}
}

// TestRefusedTakeoverIsNotOrphaned: two rules install on edge-1 of the static ConfigMap edge-v1.
// One of them moves to edge-v2, which lists edge-1 again (another identity): argo-syncer refuses
// that takeover (NameConflict: the other rule still installs on the old edge-1), so the moved
// rule's Application stays on the old identity, and the rule shows NameConflict. rule-engine
// keeps that old pair known, so deleting the moved rule removes its Application: nothing is
// orphaned, and the other rule's Application stays.
func TestRefusedTakeoverIsNotOrphaned(t *testing.T) {
	s := startSystem(t, nil)
	s.createSecret("static", map[string][]byte{"token": []byte("static-token")})
	edge := "- name: edge-1\n  url: https://edge-1.example:6443\n"
	s.staticConfigMap("edge-v1", edge)
	for _, enf := range []string{"agent", "logging"} {
		s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: `+enf+`
spec:
  enforcements:
    - name: `+enf+`
      repo: https://github.com/example/`+enf+`
      path: chart
  source:
    static:
      configMap: edge-v1
`)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"edge-1-agent", "edge-1-logging"})
	})

	s.staticConfigMap("edge-v2", edge)
	if _, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Patch(context.Background(), "agent", types.MergePatchType,
		[]byte(`{"spec":{"source":{"static":{"configMap":"edge-v2"}}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, func() error {
		if r := s.readyReason(operatorNS, "agent"); r != "NameConflict" {
			return fmt.Errorf("Ready reason of the moved rule %q, want NameConflict", r)
		}
		return nil
	})
	if got := s.get(gvrApplication, "edge-1-agent").GetAnnotations()["enforcement.globo.com/cluster-identity"]; got != "static:"+operatorNS+"/edge-v1/edge-1" {
		t.Fatalf("edge-1-agent records identity %q after the refused takeover, want the old edge-1's", got)
	}

	s.deleteRule(operatorNS, "agent")
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"edge-1-logging"})
	})
}
