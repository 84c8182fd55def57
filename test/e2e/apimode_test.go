package e2e

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestExampleRancherRuleInAPIMode runs the original operator's example-rancher.yaml with
// argo-syncer in API mode, logged in to a real argocd-server with the admin password as the
// original was (ARGO_URL, ARGO_USERNAME, ARGO_PASSWORD): Argo CD itself writes the objects, and
// they are the ones the declarative mode writes (the same Applications, AppProjects and cluster
// registrations, checked the same way). Argo CD connects to each cluster before it registers it:
// the fake Rancher answers its /version through /k8s/clusters/<id>. A cluster that leaves is
// cleaned up in API mode too. ("default" is the AppProject argocd-server creates for itself.)
func TestExampleRancherRuleInAPIMode(t *testing.T) {
	var proxy *testenv.TCPProxy // between argo-syncer and Argo CD, to cut it off
	s := newSystemWith(t, nil, natsSingle, func(s *system) {
		argocd := testenv.StartArgoCD(t, s.kube, argoNS)
		proxy = testenv.NewTCPProxy(t, argocd.Addr)
		s.env["ARGO_URL"], s.env["ARGO_USERNAME"], s.env["ARGO_PASSWORD"] = "http://"+proxy.Addr(), testenv.ArgoCDAdmin, argocd.Password
		s.env["ARGO_POLL_INTERVAL"] = "2s"
	})
	steady := []map[string]any{
		gke("c-1", "prod-a", "active", norman),
		gke("c-2", "cluster1", "active", norman), // ignored by name
		gke("c-3", "prod-b", "active", nil),      // lacks the label
	}
	s.rancher.SetClusters(steady...)
	rule := s.applyRule(operatorNS, example(t, "example-rancher.yaml"))

	testenv.Eventually(t, 60*time.Second, func() error {
		return s.holds([]string{"prod-a-guestbook", "prod-a-helm-guestbook"}, []string{"default", "prod-a"}, []string{"prod-a"})
	})
	checkApplication(t, s.get(gvrApplication, "prod-a-helm-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "helm-guestbook", map[string]string{"replicaCount": "1"})
	checkApplication(t, s.get(gvrApplication, "prod-a-guestbook"), "prod-a", "default",
		"https://github.com/argoproj/argocd-example-apps", "guestbook", nil)
	checkClusterSecret(t, s, "prod-a", s.rancher.URL+"/k8s/clusters/c-1", token)

	// Argo CD wrote them: its cluster Secrets are named by Argo CD, not "cluster-<cluster>", and
	// argo-syncer counts its requests to the API.
	for _, name := range s.names(gvrSecret) {
		if name == "cluster-prod-a" {
			t.Errorf("cluster Secret %s: written by argo-syncer, want Argo CD's own name", name)
		}
	}
	metrics := get(t, "http://"+s.procs["argo-syncer"].metrics+"/metrics")
	if !strings.Contains(metrics, `enforcement_argo_syncer_argocd_api_requests_total{code="OK",method="ApplicationService.Create"} 2`) {
		t.Errorf("argo-syncer's metrics do not show the two Application creates through Argo CD's API:\n%s", grepMetric(metrics, "argocd_api"))
	}

	// Argo CD unreachable: a new cluster's install waits and is retried, the rule says why and
	// argo-syncer is not ready; once Argo CD answers, the cluster gets its packages.
	proxy.Close()
	s.rancher.SetClusters(append(slices.Clone(steady), gke("c-6", "prod-e", "active", norman))...)
	testenv.Eventually(t, 60*time.Second, func() error {
		reason, message := s.readyCondition(operatorNS, rule.GetName())
		errs := s.installErrors(operatorNS, rule.GetName())
		if reason != "InstallFailed" || !strings.Contains(errs, "prod-e: APIError: ") || !strings.Contains(errs, "Argo CD API at http://"+proxy.Addr()) {
			return fmt.Errorf("rule Ready condition %s: %q, install errors %q; want InstallFailed, prod-e's naming Argo CD's API", reason, message, errs)
		}
		if code, body := s.readyz("argo-syncer"); code != http.StatusServiceUnavailable || !strings.Contains(body, "argocd") {
			return fmt.Errorf("argo-syncer /readyz %d %q, want 503 naming argocd", code, body)
		}
		return nil
	})
	proxy.Open()
	all := []string{"prod-a-guestbook", "prod-a-helm-guestbook", "prod-e-guestbook", "prod-e-helm-guestbook"}
	testenv.Eventually(t, 90*time.Second, func() error {
		return s.holds(all, []string{"default", "prod-a", "prod-e"}, []string{"prod-a", "prod-e"})
	})
	testenv.Eventually(t, 30*time.Second, func() error {
		if reason, message := s.readyCondition(operatorNS, rule.GetName()); reason != "Installed" {
			return fmt.Errorf("rule Ready condition after Argo CD came back: %s %q", reason, message)
		}
		return nil
	})

	// The cluster that leaves is cleaned up, the others untouched.
	s.rancher.SetClusters(append(slices.Clone(steady), gke("c-7", "prod-f", "provisioning", norman))...)
	testenv.Eventually(t, 60*time.Second, func() error {
		return s.holds(all[:2], []string{"default", "prod-a"}, []string{"prod-a"})
	})
	checkNoDuplicates(t, s)
}

// readyCondition returns the reason and message of a ClusterRule's Ready condition.
func (s *system) readyCondition(namespace, name string) (string, string) {
	s.t.Helper()
	u, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Get(context.Background(), name, getOpts)
	if err != nil {
		s.t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
			reason, _ := m["reason"].(string)
			message, _ := m["message"].(string)
			return reason, message
		}
	}
	return "", ""
}

// installErrors lists a ClusterRule's status.installErrors as "<cluster>: <reason>: <message>"
// lines.
func (s *system) installErrors(namespace, name string) string {
	s.t.Helper()
	u, err := s.dyn.Resource(gvrClusterRule).Namespace(namespace).Get(context.Background(), name, getOpts)
	if err != nil {
		s.t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "installErrors")
	var out []string
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, fmt.Sprintf("%v: %v: %v", m["cluster"], m["reason"], m["message"]))
		}
	}
	return strings.Join(out, "\n")
}

// grepMetric returns the lines of a /metrics page that contain substr.
func grepMetric(page, substr string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
