package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
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

var gvrClusterProfile = schema.GroupVersionResource{Group: "multicluster.x-k8s.io", Version: "v1alpha1", Resource: "clusterprofiles"}

// fleetCAPEM is the CA a cluster manager publishes in a ClusterProfile's access provider.
var fleetCAPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("fleet member CA")})

func fleetURL(name string) string { return "https://" + name + ".fleet.example.com:443" }

// setClusterProfile creates a ClusterProfile in namespace (when absent) and writes its status as
// a cluster manager would: ControlPlaneHealthy, the location property, the Kubernetes version
// and the "fleet" access provider (KEP-5339), retrying on conflicts.
func (s *system) setClusterProfile(namespace, name, healthy, location string) {
	s.t.Helper()
	ctx := context.Background()
	res := s.dyn.Resource(gvrClusterProfile).Namespace(namespace)
	cp := &unstructured.Unstructured{}
	cp.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	cp.SetKind("ClusterProfile")
	cp.SetNamespace(namespace)
	cp.SetName(name)
	cp.SetLabels(map[string]string{"x-k8s.io/cluster-manager": "fleet"})
	cp.Object["spec"] = map[string]any{"clusterManager": map[string]any{"name": "fleet"}}
	if _, err := res.Create(ctx, cp, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		s.t.Fatalf("create ClusterProfile %s: %v", name, err)
	}
	for attempt := 0; ; attempt++ {
		cur, err := res.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			s.t.Fatalf("get ClusterProfile %s: %v", name, err)
		}
		cur.Object["status"] = map[string]any{
			"conditions": []any{map[string]any{"type": "ControlPlaneHealthy", "status": healthy, "reason": "Test",
				"message": "set by the e2e test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
			"version":    map[string]any{"kubernetes": "v1.31.2"},
			"properties": []any{map[string]any{"name": "location", "value": location}},
			"accessProviders": []any{map[string]any{"name": "fleet", "cluster": map[string]any{
				"server": fleetURL(name), "certificate-authority-data": base64.StdEncoding.EncodeToString(fleetCAPEM)}}},
		}
		_, err = res.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || attempt >= 5 {
			s.t.Fatalf("write ClusterProfile %s status: %v", name, err)
		}
	}
}

// TestClusterProfileRegistersFromAccessProviders runs the built binaries over ClusterProfiles
// (the Cluster Inventory API's CRD): a rule selects the profiles of one namespace by a property
// and renders the Kubernetes version; the cluster is registered in Argo CD through the exec
// plugin the source Secret's providers configuration names for the profile's access provider,
// with the profile's server and CA; a profile whose control plane turns unhealthy is present but
// not eligible and keeps what it has.
func TestClusterProfileRegistersFromAccessProviders(t *testing.T) {
	s := startSystem(t, nil)
	fleet := s.kube.Namespace(t, "fleet")
	s.createSecret("clusterprofile", map[string][]byte{"providers": []byte(`{"providers": [{"name": "fleet",
		"execConfig": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "kubelogin", "args": ["get-token", "--login", "workloadidentity"]}}]}`)})
	s.setClusterProfile(fleet, "member-eu", "True", "eu-west")
	s.setClusterProfile(fleet, "member-us", "True", "us-east")
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: eu-members
spec:
  enforcements:
    - name: guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: guestbook
      helm:
        parameters:
          kubeVersion: "${{ kubernetesVersion }}"
          location: "${{ properties.location }}"
  source:
    clusterProfile:
      namespaces: [`+fleet+`]
      selector:
        matchLabels: {x-k8s.io/cluster-manager: fleet}
      properties:
        location: eu-west
`)
	apps := []string{"member-eu-guestbook"}
	testenv.Eventually(t, 90*time.Second, func() error {
		return s.holds(apps, []string{"member-eu"}, []string{"member-eu"})
	})
	checkApplication(t, s.get(gvrApplication, "member-eu-guestbook"), "member-eu", "default",
		"https://github.com/argoproj/argocd-example-apps", "guestbook", map[string]string{"kubeVersion": "v1.31.2", "location": "eu-west"})

	u, err := s.dyn.Resource(gvrSecret).Namespace(argoNS).Get(t.Context(), "cluster-member-eu", getOpts)
	if err != nil {
		t.Fatalf("cluster Secret: %v", err)
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	if got := decodeB64(data["server"]); got != fleetURL("member-eu") {
		t.Errorf("server %q, want %q", got, fleetURL("member-eu"))
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(decodeB64(data["config"])), &cfg); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"execProviderConfig": map[string]any{"command": "kubelogin", "args": []any{"get-token", "--login", "workloadidentity"},
			"apiVersion": "client.authentication.k8s.io/v1beta1"},
		"tlsClientConfig": map[string]any{"insecure": false, "caData": base64.StdEncoding.EncodeToString(fleetCAPEM)},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("cluster Secret config\n got %v\nwant %v", cfg, want)
	}

	// Unhealthy: the scanner publishes it (no scan interval to wait for), the cluster keeps
	// what it has.
	stream := eventstest.NewReader(t, s.js)
	s.setClusterProfile(fleet, "member-eu", "False", "eu-west")
	testenv.Eventually(t, 30*time.Second, func() error {
		for _, e := range stream.New(t) {
			if u, ok := e.(*events.ClusterUpdated); ok && u.Cluster.Name == "member-eu" && !u.Cluster.Eligible {
				return nil
			}
		}
		return errors.New("no ClusterUpdated of member-eu with eligible=false")
	})
	time.Sleep(5 * time.Second)
	if err := s.holds(apps, []string{"member-eu"}, []string{"member-eu"}); err != nil {
		t.Fatalf("an unhealthy member lost what it had: %v", err)
	}
	checkNoDuplicates(t, s)
}
