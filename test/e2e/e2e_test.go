package e2e

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/compat"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

// example reads a manifest of the original operator from the compatibility suite
// (pkg/testenv/compat).
func example(t *testing.T, name string) string {
	t.Helper()
	return string(compat.Manifest(t, "enforcement/"+name))
}

// gke is a Rancher cluster made with Google's driver, as example-rancher.yaml filters for.
func gke(id, name, state string, labels map[string]string) map[string]any {
	c := rancherfake.Cluster(id, name, state, labels)
	c["driver"] = "googleKubernetesEngine"
	return c
}

var norman = map[string]string{"cattle.io/creator": "norman"}

func decodeB64(s string) string {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "<not base64: " + s + ">"
	}
	return string(b)
}

// TestExampleRancherRule applies the original operator's example-rancher.yaml unchanged and
// follows a fleet through the life of its clusters: selection (filters, labels, ignore,
// eligibility), exact objects, a new cluster, a cluster that becomes eligible, a failing and an
// empty source (nothing deleted), and a removed cluster cleaned up after the grace period.
func TestExampleRancherRule(t *testing.T) {
	s := startSystem(t, nil)
	// The part of the fleet that stays: prod-a is selected, the others are left out.
	steady := []map[string]any{
		gke("c-1", "prod-a", "active", norman),
		gke("c-2", "cluster1", "active", norman),               // ignored by name
		gke("c-3", "prod-b", "active", nil),                    // lacks the label
		rancherfake.Cluster("c-4", "prod-c", "active", norman), // another driver: filtered by Rancher
	}
	prodD := gke("c-5", "prod-d", "active", norman)
	s.rancher.SetClusters(append(slices.Clone(steady), gke("c-5", "prod-d", "provisioning", norman))...) // present, not eligible
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))

	// Applications for the one selected cluster.
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"prod-a-guestbook", "prod-a-helm-guestbook"})
	})
	if err := s.holds([]string{"prod-a-guestbook", "prod-a-helm-guestbook"}, []string{"prod-a"}, []string{"prod-a"}); err != nil {
		t.Fatal(err)
	}
	checkApplication(t, s.get(gvrApplication, "prod-a-helm-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "helm-guestbook", map[string]string{"replicaCount": "1"})
	checkApplication(t, s.get(gvrApplication, "prod-a-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "guestbook", nil)
	checkClusterSecret(t, s, "prod-a", s.rancher.URL+"/k8s/clusters/c-1", token)

	// A cluster that finishes provisioning, and a new one, get their packages.
	s.rancher.SetClusters(slices.Concat(steady, []map[string]any{prodD, gke("c-6", "prod-e", "active", norman)})...)
	all := []string{"prod-a-guestbook", "prod-a-helm-guestbook", "prod-d-guestbook", "prod-d-helm-guestbook", "prod-e-guestbook", "prod-e-helm-guestbook"}
	testenv.Eventually(t, 60*time.Second, func() error { return equal("Applications", s.names(gvrApplication), all) })

	// A failing source, then an empty one, for longer than the grace period: nothing goes.
	s.rancher.FailPage(1, 503)
	time.Sleep(6 * time.Second)
	s.rancher.Heal()
	s.rancher.SetClusters()
	time.Sleep(6 * time.Second)
	if err := equal("Applications", s.names(gvrApplication), all); err != nil {
		t.Fatalf("a failing or empty source deleted Applications: %v", err)
	}
	degraded := map[string]bool{}
	for _, e := range s.audit() {
		if d, ok := e.(*events.SourceDegraded); ok {
			degraded[d.Reason] = true
		}
	}
	if !degraded[events.DegradedListFailed] || !degraded[events.DegradedEmpty] {
		t.Fatalf("source degraded reasons published: %v, want %s and %s", degraded, events.DegradedListFailed, events.DegradedEmpty)
	}

	// prod-e leaves for good: cleaned up after the grace period, the others untouched. (One
	// removal out of five known clusters: removing more at once would trip the breaker.)
	s.rancher.SetClusters(append(slices.Clone(steady), prodD)...)
	testenv.Eventually(t, 60*time.Second, func() error {
		return s.holds(all[:4], []string{"prod-a", "prod-d"}, []string{"prod-a", "prod-d"})
	})
	checkNoDuplicates(t, s)
}

// TestDynamicRuleRendersPerCluster applies the original README's dynamic rule.
func TestDynamicRuleRendersPerCluster(t *testing.T) {
	s := startSystem(t, nil)
	s.rancher.SetClusters(rancherfake.Cluster("c-1", "cluster1", "active", nil), rancherfake.Cluster("c-2", "cluster2", "active", nil))
	s.applyRule(operatorNS, example(t, "readme-02-dynamic-rule-jinja.yaml"))
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("rendered Applications", s.names(gvrApplication), []string{"cluster1-guestbook-cluster1", "cluster2-guestbook-other"})
	})
	checkApplication(t, s.get(gvrApplication, "cluster1-guestbook-cluster1"), "cluster1", "cluster1",
		"https://github.com/argoproj/argocd-example-apps", "helm-guestbook",
		map[string]string{"replicaCount": "10", "clusterURL": s.rancher.URL + "/k8s/clusters/c-1"})
	checkApplication(t, s.get(gvrApplication, "cluster2-guestbook-other"), "cluster2", "cluster2",
		"https://github.com/argoproj/argocd-example-apps", "helm-guestbook",
		map[string]string{"replicaCount": "10", "clusterURL": s.rancher.URL + "/k8s/clusters/c-2"})
}

// TestDeletingARuleRemovesWhatItAloneInstalled: two rules share a cluster; deleting one removes
// its Applications and keeps the other rule's, and the shared cluster registration.
func TestDeletingARuleRemovesWhatItAloneInstalled(t *testing.T) {
	s := startSystem(t, nil)
	s.rancher.SetClusters(gke("c-1", "prod-a", "active", norman))
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: monitoring
spec:
  enforcements:
    - name: monitoring
      repo: https://github.com/example/monitoring
      path: agent
  source:
    rancher: {}
`)
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications of both rules", s.names(gvrApplication), []string{"prod-a-guestbook", "prod-a-helm-guestbook", "prod-a-monitoring"})
	})
	s.deleteRule(operatorNS, "monitoring")
	kept := []string{"prod-a-guestbook", "prod-a-helm-guestbook"}
	testenv.Eventually(t, 60*time.Second, func() error {
		if err := equal("Applications after the rule's deletion", s.names(gvrApplication), kept); err != nil {
			return err
		}
		if _, err := s.dyn.Resource(gvrClusterRule).Namespace(operatorNS).Get(t.Context(), "monitoring", getOpts); err == nil {
			return errors.New("the ClusterRule still exists (finalizer not released)")
		}
		return nil
	})
	if err := s.holds(kept, []string{"prod-a"}, []string{"prod-a"}); err != nil {
		t.Fatalf("the shared cluster registration or AppProject was touched: %v", err)
	}
}

// TestKillingAServiceMidRunConverges kills each service with SIGKILL in turn, changes the world
// while it is down, restarts it and checks the system converges with every event stored once
// and every Application created once.
func TestKillingAServiceMidRunConverges(t *testing.T) {
	s := startSystem(t, nil)
	clusters := []map[string]any{gke("c-1", "prod-a", "active", norman)}
	s.rancher.SetClusters(clusters...)
	s.applyRule(operatorNS, example(t, "example-rancher.yaml"))
	want := []string{"prod-a-guestbook", "prod-a-helm-guestbook"}
	testenv.Eventually(t, 60*time.Second, func() error { return equal("first Applications", s.names(gvrApplication), want) })

	for i, name := range []string{"source-scanner", "rule-engine", "argo-syncer", "trigger-dispatcher"} {
		s.kill(name)
		id := fmt.Sprintf("k-%d", i)
		cluster := fmt.Sprintf("kill-%d", i)
		clusters = append(clusters, gke(id, cluster, "active", norman))
		s.rancher.SetClusters(clusters...)
		want = append(want, cluster+"-guestbook", cluster+"-helm-guestbook")
		time.Sleep(2 * time.Second) // the world changes while the service is down
		s.start(name)
		sorted := append([]string(nil), want...)
		sortStrings(sorted)
		testenv.Eventually(t, 90*time.Second, func() error {
			return equal("Applications after restarting "+name, s.names(gvrApplication), sorted)
		})
	}
	checkNoDuplicates(t, s)
}

// checkNoDuplicates: every event id is stored once, and no Application was created twice.
func checkNoDuplicates(t *testing.T, s *system) {
	t.Helper()
	ids := map[string]int{}
	created := map[string]int{}
	for _, e := range s.audit() {
		ids[e.ID()]++
		if ok, is := e.(*events.InstallSucceeded); is && ok.Created {
			created[ok.Application]++
		}
	}
	for id, n := range ids {
		if n > 1 {
			t.Errorf("event %s stored %d times", id, n)
		}
	}
	for app, n := range created {
		if n > 1 {
			t.Errorf("Application %s created %d times", app, n)
		}
	}
}

func checkApplication(t *testing.T, app *unstructured.Unstructured, cluster, namespace, repo, path string, params map[string]string) {
	t.Helper()
	str := func(fields ...string) string { v, _, _ := unstructured.NestedString(app.Object, fields...); return v }
	checks := map[string][2]string{
		"label cluster_name":                 {app.GetLabels()["cluster_name"], cluster},
		"label app.kubernetes.io/managed-by": {app.GetLabels()["app.kubernetes.io/managed-by"], "enforcement"},
		"spec.project":                       {str("spec", "project"), events.ObjectName(cluster)},
		"spec.destination.name":              {str("spec", "destination", "name"), cluster},
		"spec.destination.namespace":         {str("spec", "destination", "namespace"), namespace},
		"spec.source.repoURL":                {str("spec", "source", "repoURL"), repo},
		"spec.source.path":                   {str("spec", "source", "path"), path},
	}
	for what, c := range checks {
		if c[0] != c[1] {
			t.Errorf("Application %s: %s = %q, want %q", app.GetName(), what, c[0], c[1])
		}
	}
	prune, _, _ := unstructured.NestedBool(app.Object, "spec", "syncPolicy", "automated", "prune")
	heal, _, _ := unstructured.NestedBool(app.Object, "spec", "syncPolicy", "automated", "selfHeal")
	opts, _, _ := unstructured.NestedStringSlice(app.Object, "spec", "syncPolicy", "syncOptions")
	if !prune || !heal || !contains(opts, "CreateNamespace=true") {
		t.Errorf("Application %s: syncPolicy prune=%v selfHeal=%v syncOptions=%v", app.GetName(), prune, heal, opts)
	}
	got := map[string]string{}
	list, _, _ := unstructured.NestedSlice(app.Object, "spec", "source", "helm", "parameters")
	for _, p := range list {
		m := p.(map[string]any)
		got[fmt.Sprint(m["name"])] = fmt.Sprint(m["value"])
	}
	if params == nil {
		params = map[string]string{}
	}
	if a, b := fmt.Sprint(got), fmt.Sprint(params); a != b {
		t.Errorf("Application %s: helm parameters %s, want %s", app.GetName(), a, b)
	}
}

// checkClusterSecret checks the Argo CD cluster Secret of a cluster: its server, the bearer token
// of its credentials and the managed-by label.
func checkClusterSecret(t *testing.T, s *system, cluster, server, wantToken string) {
	t.Helper()
	list, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).List(t.Context(), listBySecretType)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range list.Items {
		data, _, _ := unstructured.NestedStringMap(i.Object, "data")
		if decodeB64(data["name"]) != cluster {
			continue
		}
		if got := decodeB64(data["server"]); got != server {
			t.Errorf("cluster Secret %s: server %q, want %q", cluster, got, server)
		}
		var cfg struct {
			BearerToken string `json:"bearerToken"`
		}
		if err := json.Unmarshal([]byte(decodeB64(data["config"])), &cfg); err != nil || cfg.BearerToken != wantToken {
			t.Errorf("cluster Secret %s: config carries bearer token %q, want %q (%v)", cluster, cfg.BearerToken, wantToken, err)
		}
		if i.GetLabels()["app.kubernetes.io/managed-by"] != "enforcement" {
			t.Errorf("cluster Secret %s lacks the managed-by label", cluster)
		}
		return
	}
	t.Errorf("no cluster Secret for %s", cluster)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
