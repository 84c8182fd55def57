package main

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestInstallIntentsCarryRegistrationHints: the cluster's "argocd.*" attributes (as the EKS and
// GKE listers write them, decoded from the wire) become the install intent's
// Target.Registration, strings as they are and the args list JSON-encoded; other attributes
// do not, a cluster without hints has none, and uninstall intents carry none.
func TestInstallIntentsCarryRegistrationHints(t *testing.T) {
	pub := &recordingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	ctx := context.Background()
	applySourceRules(t, e)
	// Attributes as they arrive in a cluster event: decoded JSON, so the args list is []any.
	attrs := func(raw string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	source := func(kind string) events.SourceRef {
		return events.SourceRef{Kind: kind, ID: events.SourceID(kind, "enforcement", kind, nil), SecretNamespace: "enforcement", SecretName: kind}
	}
	eks := events.Cluster{Source: source("eks"), Key: "arn:aws:eks:eu-west-1:1:cluster/Prod_1", Name: "prod-1",
		URL: "https://ABC.gr7.eu-west-1.eks.amazonaws.com", Labels: map[string]string{"env": "prod"}, State: "ACTIVE", Eligible: true,
		Attributes: attrs(`{"region": "eu-west-1", "tags": {"env": "prod"},
			"argocd.awsAuthConfig.clusterName": "Prod_1", "argocd.awsAuthConfig.roleARN": "arn:aws:iam::1:role/argocd",
			"argocd.caData": "LS0tLS1CRUdJTg==", "argocd.nothing": null}`)}
	gke := events.Cluster{Source: source("gke"), Key: "projects/p/locations/l/clusters/g1", Name: "g1", URL: "https://34.1.2.3",
		State: "RUNNING", Eligible: true,
		Attributes: attrs(`{"region": "europe-west1", "argocd.caData": "LS0tLS1CRUdJTg==",
			"argocd.execProviderConfig.command": "argocd-k8s-auth", "argocd.execProviderConfig.args": ["gcp"],
			"argocd.execProviderConfig.apiVersion": "client.authentication.k8s.io/v1beta1"}`)}
	rancher := events.Cluster{Source: source("rancher"), Key: "c-r1", Name: "r1", URL: "https://rancher.example/k8s/clusters/c-r1",
		State: "active", Eligible: true, Attributes: attrs(`{"region": "x", "driver": "rke2"}`)}
	for i, c := range []events.Cluster{eks, gke, rancher} {
		if err := e.applyCluster(ctx, c, uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]string{
		"prod-1": {
			"argocd.awsAuthConfig.clusterName": "Prod_1",
			"argocd.awsAuthConfig.roleARN":     "arn:aws:iam::1:role/argocd",
			"argocd.caData":                    "LS0tLS1CRUdJTg==",
		},
		"g1": {
			"argocd.caData":                        "LS0tLS1CRUdJTg==",
			"argocd.execProviderConfig.command":    "argocd-k8s-auth",
			"argocd.execProviderConfig.args":       `["gcp"]`,
			"argocd.execProviderConfig.apiVersion": "client.authentication.k8s.io/v1beta1",
		},
		"r1": nil,
	}
	got := map[string]map[string]string{}
	for _, ev := range pub.evs {
		in, ok := ev.(*events.InstallIntent)
		if !ok {
			t.Fatalf("unexpected %T", ev)
		}
		got[in.Cluster.Name] = in.Cluster.Registration
		if in.Cluster.Name == "prod-1" && in.Enforcement.Path != "eu-west-1" {
			t.Errorf("template variables changed: path %q", in.Enforcement.Path)
		}
		// The hints survive the wire format.
		msg, err := events.Encode(in, "/enforcement/test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		back, _, err := events.DecodeAs[*events.InstallIntent](msg.Subject, msg.Header, msg.Data)
		if err != nil || !reflect.DeepEqual(back.Cluster.Registration, in.Cluster.Registration) {
			t.Errorf("%s: registration after a round trip %v (%v)", in.Cluster.Name, back.Cluster.Registration, err)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("registrations\n got %v\nwant %v", got, want)
	}

	// The EKS cluster stops matching: its uninstall intent carries no hints.
	pub.evs = nil
	eks.Labels = map[string]string{"env": "dev"}
	if err := e.applyCluster(ctx, eks, 10, 0); err != nil {
		t.Fatal(err)
	}
	if len(pub.evs) != 1 {
		t.Fatalf("%d intents after the label change, want 1 uninstall", len(pub.evs))
	}
	if un, ok := pub.evs[0].(*events.UninstallIntent); !ok || un.Cluster.Registration != nil {
		t.Errorf("uninstall intent %+v", pub.evs[0])
	}
}

// applySourceRules applies one rule per source kind (eks with a label selector, gke, rancher),
// each with one templated enforcement.
func applySourceRules(t *testing.T, e *engine) {
	t.Helper()
	ctx := context.Background()
	for _, src := range []v1beta1.Source{
		{EKS: &v1beta1.EKSSource{}, MatchLabels: map[string]string{"env": "prod"}},
		{GKE: &v1beta1.GKESource{}},
		{Rancher: &v1beta1.RancherSource{}},
	} {
		kind := "rancher"
		if src.EKS != nil {
			kind = "eks"
		} else if src.GKE != nil {
			kind = "gke"
		}
		cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: kind, UID: types.UID("u-" + kind), Generation: 1},
			Spec: v1beta1.ClusterRuleSpec{Source: src, Enforcements: []v1beta1.Enforcement{
				{Name: "agent", Repo: "https://git.example/agent", Path: "${{ region }}"}}}}
		if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaticClusterSecretTravelsInTheIntent: a static cluster that names a Secret of its own
// (the scanner sends it as the cluster's source.secretName) gets install intents that reference
// that Secret, so argo-syncer registers it with its own token; a static cluster without one
// references the source's Secret.
func TestStaticClusterSecretTravelsInTheIntent(t *testing.T) {
	pub := &recordingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	ctx := context.Background()
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "edge", UID: "u-edge", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Source: v1beta1.Source{Static: &v1beta1.StaticSource{}}, Enforcements: []v1beta1.Enforcement{
			{Name: "agent", Repo: "https://git.example/agent", Path: "chart"}}}}
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	source := events.SourceRef{Kind: "static", ID: events.SourceID("static", "enforcement", "static", events.StaticSourceFilters("")),
		SecretNamespace: "enforcement", SecretName: "static"}
	own := source
	own.SecretName = "edge-1-credentials"
	for i, c := range []events.Cluster{
		{Source: own, Key: "edge-1", Name: "edge-1", URL: "https://edge-1.example:6443", Eligible: true},
		{Source: source, Key: "edge-2", Name: "edge-2", URL: "https://edge-2.example:6443", Eligible: true},
	} {
		if err := e.applyCluster(ctx, c, uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for _, in := range pub.installs() {
		got[in.Cluster.Name] = in.Cluster.Source.SecretNamespace + "/" + in.Cluster.Source.SecretName
		if in.Cluster.Source.ID != source.ID {
			t.Errorf("%s: intent source id %s, want the rule's %s", in.Cluster.Name, in.Cluster.Source.ID, source.ID)
		}
	}
	want := map[string]string{"edge-1": "enforcement/edge-1-credentials", "edge-2": "enforcement/static"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Secrets referenced by the install intents: %v, want %v", got, want)
	}
}

// TestChangedClusterSecretIsSentAgain: a static cluster whose own secretName changes (the
// scanner's cluster.updated, "secret") gets its install intents again, carrying the new Secret,
// so that argo-syncer refreshes the cluster Secret's credentials; the rendered enforcement is the
// same (no spec change). An update that changes nothing sends nothing.
func TestChangedClusterSecretIsSentAgain(t *testing.T) {
	e := newEnv(t)
	e.start()
	src, ref := staticSourceOf("edge")
	edge := staticCluster(ref, "edge", "edge-1")
	edge.Source.SecretName = "edge-1-credentials"
	e.publish(appeared(edge, 1))
	e.createRule("edge", v1beta1.ClusterRuleSpec{Source: src, Enforcements: []v1beta1.Enforcement{
		{Name: "agent", Repo: "https://git.example/agent", Path: "chart"}}})
	first := installsOf(e.waitIntentSet("install edge-1 agent"))[0]

	edge.Source.SecretName = "edge-1-rotated"
	e.publish(&events.ClusterUpdated{Cluster: edge, Revision: 2, Changed: []string{"secret"}})
	again := installsOf(e.waitIntentSet("install edge-1 agent", "install edge-1 agent"))[1]
	if again.Cluster.Source.SecretName != "edge-1-rotated" || again.Cluster.Source.ID != ref.ID || again.SpecHash != first.SpecHash ||
		again.Cluster.Replaces != "" || again.Cluster.Identity != first.Cluster.Identity {
		t.Errorf("intent after the Secret changed: target %+v, spec %s; want Secret edge-1-rotated, the same source, identity and spec %s",
			again.Cluster, again.SpecHash, first.SpecHash)
	}
	// Nothing changed at revision 3; the moved URL at revision 4 (handled after it: one cluster's
	// events are in order) is the only intent after the Secret's.
	e.publish(&events.ClusterUpdated{Cluster: edge, Revision: 3, Changed: []string{"state"}})
	edge.URL = "https://edge-1.moved.example:6443"
	e.publish(&events.ClusterUpdated{Cluster: edge, Revision: 4, Changed: []string{"url"}})
	moved := installsOf(e.waitIntentSet("install edge-1 agent", "install edge-1 agent", "install edge-1 agent"))[2]
	if moved.Cluster.Revision != 4 || moved.Cluster.Source.SecretName != "edge-1-rotated" {
		t.Errorf("third intent: revision %d, Secret %s; want the moved URL's (4), still edge-1-rotated", moved.Cluster.Revision, moved.Cluster.Source.SecretName)
	}
}
