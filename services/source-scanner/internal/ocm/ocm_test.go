package ocm

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// managedCluster creates a ManagedCluster with the given claims and conditions, writing its
// status as the registration controller would (no OCM controller runs in tests).
func managedCluster(t *testing.T, kube *testenv.Kube, name string, labels map[string]string, accepted bool, claims map[string]string, conditions map[string]string) {
	t.Helper()
	ctx := context.Background()
	mc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.open-cluster-management.io/v1",
		"kind":       "ManagedCluster",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"hubAcceptsClient": accepted,
			"managedClusterClientConfigs": []any{
				map[string]any{"url": "https://" + name + ".example.com:6443", "caBundle": "Y2E="},
			},
		},
	}}
	mc.SetLabels(labels)
	if err := kube.Client.Create(ctx, mc); err != nil {
		t.Fatal(err)
	}
	var claimList, condList []any
	for k, v := range claims {
		claimList = append(claimList, map[string]any{"name": k, "value": v})
	}
	for k, v := range conditions {
		condList = append(condList, map[string]any{"type": k, "status": v, "reason": "Test", "message": "set by the test",
			"lastTransitionTime": metav1.Now().UTC().Format("2006-01-02T15:04:05Z")})
	}
	_ = unstructured.SetNestedSlice(mc.Object, claimList, "status", "clusterClaims")
	_ = unstructured.SetNestedSlice(mc.Object, condList, "status", "conditions")
	if err := kube.Client.Status().Update(ctx, mc); err != nil {
		t.Fatalf("write ManagedCluster status: %v", err)
	}
}

var healthy = map[string]string{"HubAcceptedManagedCluster": "True", "ManagedClusterJoined": "True", "ManagedClusterConditionAvailable": "True"}

func TestListManagedClustersOnARealHub(t *testing.T) {
	kube := testenv.StartKube(t, testenv.WithCRDs(testenv.OCMCRDs()...))
	managedCluster(t, kube, "cluster1", map[string]string{"env": "prod", "policy-watcher-claim": "hub-says"}, true,
		map[string]string{"policy-watcher-claim": "compliant", "region": "eu"}, healthy)
	managedCluster(t, kube, "cluster2", nil, true, map[string]string{"policy-watcher-claim": "noncompliant"},
		map[string]string{"HubAcceptedManagedCluster": "True", "ManagedClusterJoined": "True", "ManagedClusterConditionAvailable": "Unknown"})
	managedCluster(t, kube, "cluster3", nil, false, nil, map[string]string{})

	clusters, err := (&Lister{Hub: kube.Client}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 3 {
		t.Fatalf("%d clusters, want 3", len(clusters))
	}
	c1, c2, c3 := clusters[0], clusters[1], clusters[2]
	if !c1.Eligible || c1.State != StateAvailable || c1.URL != "https://cluster1.example.com:6443" || c1.Key != "cluster1" {
		t.Errorf("cluster1: %+v", c1)
	}
	if c1.Labels["env"] != "prod" || c1.Labels["region"] != "eu" || c1.Labels["policy-watcher-claim"] != "hub-says" {
		t.Errorf("cluster1 labels %v: want claims merged under the hub's labels", c1.Labels)
	}
	claims, _ := c1.Attributes[AttributeClaims].(map[string]string)
	if claims["policy-watcher-claim"] != "compliant" {
		t.Errorf("cluster1 claims attribute %v", c1.Attributes[AttributeClaims])
	}
	if c2.Eligible || c2.State != StateUnavailable || c2.Labels["policy-watcher-claim"] != "noncompliant" {
		t.Errorf("cluster2 (joined, not available): %+v", c2)
	}
	if c3.Eligible || c3.State != StateNotJoined {
		t.Errorf("cluster3 (not accepted): %+v", c3)
	}
}

func TestHubConfigRejectsABadKubeconfig(t *testing.T) {
	_, err := HubConfig(events.OCMCredentials{Kubeconfig: []byte("{{{")})
	if err == nil || !strings.Contains(err.Error(), `key "kubeconfig"`) {
		t.Errorf("HubConfig = %v, want an error naming the key", err)
	}
}
