package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

var gvrManagedCluster = schema.GroupVersionResource{Group: "cluster.open-cluster-management.io", Version: "v1", Resource: "managedclusters"}

// ocmCAPEM is a PEM block as the managed-serviceaccount add-on's ca.crt holds (argo-syncer
// copies it, it never parses the certificate).
var ocmCAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not a real certificate")})

func ocmURL(name string) string { return "https://" + name + ".example.com:6443" }

// createManagedCluster creates an accepted ManagedCluster on the hub (the test's API server) and
// writes its status as OCM's registration controller would (no klusterlet runs here).
func (s *system) createManagedCluster(name string, claims map[string]string, available string) {
	s.t.Helper()
	mc := &unstructured.Unstructured{}
	mc.SetAPIVersion("cluster.open-cluster-management.io/v1")
	mc.SetKind("ManagedCluster")
	mc.SetName(name)
	mc.Object["spec"] = map[string]any{
		"hubAcceptsClient":            true,
		"managedClusterClientConfigs": []any{map[string]any{"url": ocmURL(name)}},
	}
	if _, err := s.dyn.Resource(gvrManagedCluster).Create(context.Background(), mc, metav1.CreateOptions{}); err != nil {
		s.t.Fatalf("create ManagedCluster %s: %v", name, err)
	}
	s.setManagedClusterStatus(name, claims, available)
}

// setManagedClusterStatus writes a ManagedCluster's claims and conditions through the status
// subresource (accepted and joined, Available as given), retrying on conflicts.
func (s *system) setManagedClusterStatus(name string, claims map[string]string, available string) {
	s.t.Helper()
	ctx := context.Background()
	for attempt := 0; ; attempt++ {
		mc, err := s.dyn.Resource(gvrManagedCluster).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			s.t.Fatalf("get ManagedCluster %s: %v", name, err)
		}
		var claimList []any
		for _, k := range sortedKeys(claims) {
			claimList = append(claimList, map[string]any{"name": k, "value": claims[k]})
		}
		now := time.Now().UTC().Format(time.RFC3339)
		var conds []any
		for _, c := range [][2]string{{"HubAcceptedManagedCluster", "True"}, {"ManagedClusterJoined", "True"}, {"ManagedClusterConditionAvailable", available}} {
			conds = append(conds, map[string]any{"type": c[0], "status": c[1], "reason": "Test",
				"message": "set by the e2e test", "lastTransitionTime": now})
		}
		if err := unstructured.SetNestedSlice(mc.Object, claimList, "status", "clusterClaims"); err != nil {
			s.t.Fatal(err)
		}
		if err := unstructured.SetNestedSlice(mc.Object, conds, "status", "conditions"); err != nil {
			s.t.Fatal(err)
		}
		_, err = s.dyn.Resource(gvrManagedCluster).UpdateStatus(ctx, mc, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			s.t.Fatalf("write ManagedCluster %s status: %v", name, err)
		}
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

// checkOCMClusterSecret: the cluster Secret of an OCM cluster carries the ManagedCluster's
// client config URL and the bearer token and CA of its ocm-<cluster> Secret.
func checkOCMClusterSecret(t *testing.T, s *system, cluster, bearer string) {
	t.Helper()
	u, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).Get(t.Context(), "cluster-"+cluster, getOpts)
	if err != nil {
		t.Fatalf("cluster Secret of %s: %v", cluster, err)
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	if got := decodeB64(data["name"]); got != cluster {
		t.Errorf("cluster Secret cluster-%s: name %q", cluster, got)
	}
	if got := decodeB64(data["server"]); got != ocmURL(cluster) {
		t.Errorf("cluster Secret %s: server %q, want %q", cluster, got, ocmURL(cluster))
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(decodeB64(data["config"])), &cfg); err != nil {
		t.Fatalf("cluster Secret %s: config: %v", cluster, err)
	}
	want := map[string]any{
		"bearerToken":     bearer,
		"tlsClientConfig": map[string]any{"insecure": false, "caData": base64.StdEncoding.EncodeToString(ocmCAPEM)},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("cluster Secret %s: config\n got %v\nwant %v", cluster, cfg, want)
	}
	if u.GetLabels()["app.kubernetes.io/managed-by"] != "enforcement" {
		t.Errorf("cluster Secret %s lacks the managed-by label", cluster)
	}
}

// TestOCMClaimFlipsInstallAndUninstall closes the compliance loop on the hub: a rule selects
// ManagedClusters by their policy-watcher ClusterClaim. Only the compliant spoke gets the
// packages (registered with the credentials of its ocm-<cluster> Secret); a claim flipping to
// compliant installs, one flipping away uninstalls (and unregisters the cluster, since nothing
// targets it any more, though it is still on the hub); a spoke that becomes unavailable is
// present but not eligible and keeps what it has.
func TestOCMClaimFlipsInstallAndUninstall(t *testing.T) {
	s := startSystem(t, nil)
	const claim = "policy-watcher-claim"
	s.createSecret("ocm-spoke-1", map[string][]byte{"token": []byte("msa-spoke-1-t0ken\n"), "ca.crt": ocmCAPEM})
	s.createSecret("ocm-spoke-2", map[string][]byte{"token": []byte("msa-spoke-2-t0ken"), "ca.crt": ocmCAPEM})
	s.createManagedCluster("spoke-1", map[string]string{claim: "compliant", "platform.open-cluster-management.io": "Other"}, "True")
	s.createManagedCluster("spoke-2", map[string]string{claim: "noncompliant"}, "True")
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: compliant-only
spec:
  enforcements:
    - name: guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: guestbook
    - name: monitoring
      repo: https://github.com/example/monitoring
      path: agent
      namespace: monitoring
  source:
    ocm:
      claims:
        policy-watcher-claim: compliant
`)
	spoke1 := []string{"spoke-1-guestbook", "spoke-1-monitoring"}
	spoke2 := []string{"spoke-2-guestbook", "spoke-2-monitoring"}

	// Only the compliant spoke.
	testenv.Eventually(t, 90*time.Second, func() error {
		return equal("Applications for the compliant spoke only", s.names(gvrApplication), spoke1)
	})
	if err := s.holds(spoke1, []string{"spoke-1"}, []string{"spoke-1"}); err != nil {
		t.Fatal(err)
	}
	checkOCMClusterSecret(t, s, "spoke-1", "msa-spoke-1-t0ken")
	checkApplication(t, s.get(gvrApplication, "spoke-1-guestbook"), "spoke-1", "default",
		"https://github.com/argoproj/argocd-example-apps", "guestbook", nil)
	checkApplication(t, s.get(gvrApplication, "spoke-1-monitoring"), "spoke-1", "monitoring",
		"https://github.com/example/monitoring", "agent", nil)
	checkAppProjectDestination(t, s, "spoke-1")

	// spoke-2 becomes compliant: its packages appear, spoke-1's stay.
	s.setManagedClusterStatus("spoke-2", map[string]string{claim: "compliant"}, "True")
	both := append(append([]string(nil), spoke1...), spoke2...)
	testenv.Eventually(t, 90*time.Second, func() error {
		return s.holds(both, []string{"spoke-1", "spoke-2"}, []string{"spoke-1", "spoke-2"})
	})
	checkOCMClusterSecret(t, s, "spoke-2", "msa-spoke-2-t0ken")
	checkAppProjectDestination(t, s, "spoke-2")

	// spoke-1 becomes noncompliant: the pair no longer matches, its Applications are removed,
	// and since nothing targets spoke-1 any more its AppProject and cluster Secret go too (the
	// ManagedCluster is still on the hub: this is an uninstall, not a gone cluster).
	s.setManagedClusterStatus("spoke-1", map[string]string{claim: "noncompliant", "platform.open-cluster-management.io": "Other"}, "True")
	testenv.Eventually(t, 90*time.Second, func() error {
		return s.holds(spoke2, []string{"spoke-2"}, []string{"spoke-2"})
	})
	if _, err := s.dyn.Resource(gvrManagedCluster).Get(t.Context(), "spoke-1", getOpts); err != nil {
		t.Fatalf("spoke-1's ManagedCluster: %v", err)
	}
	uninstalls := map[string]string{}
	for _, e := range s.audit() {
		if u, ok := e.(*events.UninstallIntent); ok {
			uninstalls[u.Cluster.Name+"/"+u.Enforcement] = fmt.Sprintf("%s gone=%v", u.Reason, u.Cluster.Gone)
		}
	}
	wantUninstalls := map[string]string{
		"spoke-1/guestbook":  events.UninstallNoLongerMatches + " gone=false",
		"spoke-1/monitoring": events.UninstallNoLongerMatches + " gone=false",
	}
	if !reflect.DeepEqual(uninstalls, wantUninstalls) {
		t.Fatalf("uninstall intents %v, want %v", uninstalls, wantUninstalls)
	}

	// spoke-2 becomes unavailable: present but not eligible, it keeps what it has. Wait for the
	// scanner to publish the change, then give the rule engine and argo-syncer time to act on it.
	stream := eventstest.NewReader(t, s.js)
	s.setManagedClusterStatus("spoke-2", map[string]string{claim: "compliant"}, "False")
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, e := range stream.New(t) {
			if u, ok := e.(*events.ClusterUpdated); ok && u.Cluster.Name == "spoke-2" && !u.Cluster.Eligible {
				return nil
			}
		}
		return errors.New("no ClusterUpdated of spoke-2 with eligible=false")
	})
	time.Sleep(5 * time.Second) // longer than GONE_GRACE_PERIOD and several scans
	if err := s.holds(spoke2, []string{"spoke-2"}, []string{"spoke-2"}); err != nil {
		t.Fatalf("an unavailable spoke lost what it had: %v", err)
	}
	for _, e := range s.audit() {
		if u, ok := e.(*events.UninstallIntent); ok && u.Cluster.Name == "spoke-2" {
			t.Fatalf("uninstall intent for the unavailable spoke-2: %+v", u)
		}
	}
	checkNoDuplicates(t, s)
}

// checkAppProjectDestination: the cluster's AppProject allows its ManagedCluster's URL.
func checkAppProjectDestination(t *testing.T, s *system, cluster string) {
	t.Helper()
	p := s.get(gvrAppProject, cluster)
	dests, _, _ := unstructured.NestedSlice(p.Object, "spec", "destinations")
	for _, d := range dests {
		if m, ok := d.(map[string]any); ok && m["server"] == ocmURL(cluster) {
			return
		}
	}
	t.Errorf("AppProject %s: destinations %v lack server %s", cluster, dests, ocmURL(cluster))
}
