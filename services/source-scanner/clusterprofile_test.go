package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/clusterprofile"
)

// clusterProfile creates or updates a ClusterProfile in namespace and writes its status as a
// cluster manager would: ControlPlaneHealthy, a property and one access provider.
func clusterProfile(t *testing.T, k client.Client, namespace, name, healthy, location string) {
	t.Helper()
	ctx := context.Background()
	cp := &unstructured.Unstructured{}
	cp.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	cp.SetKind("ClusterProfile")
	err := k.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, cp)
	switch {
	case err == nil:
	case client.IgnoreNotFound(err) == nil:
		cp.SetNamespace(namespace)
		cp.SetName(name)
		cp.SetLabels(map[string]string{"x-k8s.io/cluster-manager": "fleet"})
		cp.Object["spec"] = map[string]any{"displayName": name, "clusterManager": map[string]any{"name": "fleet"}}
		if err := k.Create(ctx, cp); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal(err)
	}
	cp.Object["status"] = map[string]any{
		"conditions": []any{map[string]any{"type": clusterprofile.ConditionControlPlaneHealthy, "status": healthy,
			"reason": "Test", "message": "set by the test", "lastTransitionTime": time.Now().UTC().Format(time.RFC3339)}},
		"version":    map[string]any{"kubernetes": "v1.31.2"},
		"properties": []any{map[string]any{"name": "location", "value": location}},
		"accessProviders": []any{map[string]any{"name": "azure", "cluster": map[string]any{
			"server": "https://" + name + ".example.com:443", "certificate-authority-data": "Q0E="}}},
	}
	if err := k.Status().Update(ctx, cp); err != nil {
		t.Fatalf("write ClusterProfile status: %v", err)
	}
}

// TestRunClusterProfile: ClusterProfiles on the real API server with the real CRD
// (cluster-inventory-api v0.1.2) are watched: with SCAN_INTERVAL at an hour, every scan after
// the first is triggered by a change. A profile appears with its properties, version and the
// Argo CD hints of its configured access provider; a health change is an update of eligibility
// within a second; profiles outside the source's namespaces are not listed; a deleted profile
// is gone only after GONE_GRACE_PERIOD; a malformed providers configuration and a hub without
// the CRD (a remote kubeconfig pointing at nothing) degrade their sources while the good one
// carries on.
func TestRunClusterProfile(t *testing.T) {
	e := newServiceEnv(t, "cp")
	e.kube.InstallCRDs(t, testenv.ClusterProfileCRDs()...)
	fleet := e.kube.Namespace(t, e.ns+"-fleet")
	other := e.kube.Namespace(t, e.ns+"-other")
	e.env["SCAN_INTERVAL"], e.env["GONE_GRACE_PERIOD"] = "1h", "2s"
	e.secret("cp-providers", map[string][]byte{clusterprofile.SecretKeyProviders: []byte(
		`{"providers":[{"name":"azure","execConfig":{"apiVersion":"client.authentication.k8s.io/v1beta1","command":"kubelogin","args":["get-token","--login","workloadidentity"]}}]}`)})
	e.secret("cp-bad", map[string][]byte{clusterprofile.SecretKeyProviders: []byte(`{"providers":[{"name":"azure"}]}`)})
	e.rule("fleet", v1beta1.Source{SecretName: "cp-providers", ClusterProfile: &v1beta1.ClusterProfileSource{Namespaces: []string{fleet}}})
	e.rule("bad", v1beta1.Source{SecretName: "cp-bad", ClusterProfile: &v1beta1.ClusterProfileSource{}})
	e.start()
	e.s.waitFor("degraded clusterprofile SecretInvalid")

	clusterProfile(t, e.k, fleet, "member-1", "True", "eu-west")
	clusterProfile(t, e.k, fleet, "member-2", "True", "us-east")
	clusterProfile(t, e.k, other, "elsewhere", "True", "eu-west")
	e.s.waitFor("appeared clusterprofile member-1", "appeared clusterprofile member-2")
	if e.s.count("appeared clusterprofile elsewhere") != 0 {
		t.Fatal("a ClusterProfile outside the source's namespaces was listed")
	}
	var got *events.ClusterAppeared
	for _, ev := range eventstest.NewReader(t, e.s.js).New(t) {
		if a, ok := ev.(*events.ClusterAppeared); ok && a.Cluster.Name == "member-1" {
			got = a
		}
	}
	if got == nil {
		t.Fatal("no appeared event for member-1 in the stream")
	}
	c := got.Cluster
	if c.Key != fleet+"/member-1" || c.URL != "https://member-1.example.com:443" || !c.Eligible ||
		c.Attributes[clusterprofile.AttrKubernetesVersion] != "v1.31.2" ||
		c.Attributes[clusterprofile.AttrArgoCDExecCommand] != "kubelogin" || c.Attributes[clusterprofile.AttrArgoCDCAData] != "Q0E=" ||
		!strings.HasPrefix(c.Identity, "clusterprofile:") {
		t.Errorf("member-1 = %+v", c)
	}
	if props, _ := c.Attributes[clusterprofile.AttrProperties].(map[string]any); props["location"] != "eu-west" {
		t.Errorf("properties %v", c.Attributes[clusterprofile.AttrProperties])
	}

	// Unhealthy: still present, no longer eligible, on the bus within a second of the change.
	changed := time.Now()
	clusterProfile(t, e.k, fleet, "member-1", "False", "eu-west")
	e.s.waitForPrefix("updated clusterprofile member-1 ", 1)
	if d := time.Since(changed); d > time.Second {
		t.Errorf("the health change took %s to reach the bus", d)
	}
	var last string
	for _, ev := range e.s.poll() {
		if strings.HasPrefix(ev, "updated clusterprofile member-1 ") {
			last = ev
		}
	}
	if !strings.Contains(last, "eligible") || !strings.Contains(last, "state") {
		t.Fatalf("health change: %q, want eligible and state changed", last)
	}

	// Deleted: missing, not gone, within the grace period; the next change after it completes
	// the removal.
	deleted := time.Now()
	cp := &unstructured.Unstructured{}
	cp.SetAPIVersion("multicluster.x-k8s.io/v1alpha1")
	cp.SetKind("ClusterProfile")
	cp.SetNamespace(fleet)
	cp.SetName("member-1")
	e.must(e.k.Delete(context.Background(), cp))
	time.Sleep(time.Second)
	if e.s.count("gone clusterprofile member-1") != 0 {
		t.Fatal("member-1 gone before GONE_GRACE_PERIOD")
	}
	time.Sleep(time.Until(deleted.Add(2500 * time.Millisecond)))
	clusterProfile(t, e.k, fleet, "member-2", "True", "eu-west")
	e.s.waitForPrefix("updated clusterprofile member-2 ", 1)
	e.s.waitFor("gone clusterprofile member-1")

	// Deleting the last profile of the source is an empty listing: degraded, never a removal.
	cp.SetName("member-2")
	e.must(e.k.Delete(context.Background(), cp))
	e.s.waitFor("degraded clusterprofile EmptyListing")
	time.Sleep(2500 * time.Millisecond)
	clusterProfile(t, e.k, other, "elsewhere", "False", "eu-west") // another namespace's change triggers nothing
	if e.s.count("gone clusterprofile member-2") != 0 {
		t.Fatal("member-2 gone through an empty listing")
	}
}
