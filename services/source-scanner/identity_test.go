package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks/eksfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke/gkefake"
)

// identityRulesFile holds one rule per source kind with everything that makes up a source's
// identity; rule-engine's TestSelectionSourceIsTheRuleSource reads the same rules.
const identityRulesFile = "pkg/api/v1beta1/testdata/source-identity-rules.yaml"

// clustersAnnotation names, in identityRulesFile, the clusters each rule's source lists here.
const clustersAnnotation = "enforcement.test/clusters"

func loadIdentityRules(t *testing.T) []v1beta1.ClusterRule {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, filepath.FromSlash(identityRulesFile)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []v1beta1.ClusterRule
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var r v1beta1.ClusterRule
		if err := dec.Decode(&r); errors.Is(err, io.EOF) {
			return rules
		} else if err != nil {
			t.Fatalf("%s: %v", identityRulesFile, err)
		}
		rules = append(rules, r)
	}
}

// appearance is one cluster appeared event as a subscriber sees it.
type appearance struct {
	subject  string
	source   events.SourceRef
	identity string
}

// appearances reads every cluster appeared event of the stream, by cluster name.
func (s *stream) appearances() map[string][]appearance {
	s.t.Helper()
	ctx := context.Background()
	st, err := s.js.Stream(ctx, events.StreamName)
	if err != nil {
		return nil
	}
	info, err := st.Info(ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string][]appearance{}
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			s.t.Fatal(err)
		}
		e, _, err := events.Decode(m.Subject, m.Header, m.Data)
		if err != nil {
			s.t.Fatal(err)
		}
		if a, ok := e.(*events.ClusterAppeared); ok {
			out[a.Cluster.Name] = append(out[a.Cluster.Name], appearance{subject: m.Subject, source: a.Cluster.Source, identity: a.Cluster.Identity})
		}
	}
	return out
}

// TestPublishedSourceIsTheRuleSource runs the real scanner, with every kind's real lister (a
// fake Rancher, EKS and GKE API; ConfigMaps and ManagedClusters on the real API server), for the
// rules of identityRulesFile: a rancher source with filters and a secretName, the static source
// with the default and with another ConfigMap, eks regions unsorted and duplicated, gke projects
// and filters, a gke filter expression, ocm claims, clusterProfile namespaces (duplicated). Every cluster it announces for a rule must carry, in the subject and
// in the payload, the source v1beta1.Source.Ref gives for that rule: the source rule-engine's
// selection uses (its TestSelectionSourceIsTheRuleSource), so the rule selects what was
// announced. A scanner that derived a source differently publishes under another id and fails
// here.
func TestPublishedSourceIsTheRuleSource(t *testing.T) {
	rules := loadIdentityRules(t)

	rancher := rancherfake.New(t, "tok-identity", 10)
	gkeViaRancher := rancherfake.Cluster("c-gke", "gke-1", "active", map[string]string{"cattle.io/creator": "norman"})
	gkeViaRancher["driver"] = "googleKubernetesEngine"
	rke := rancherfake.Cluster("c-rke", "rke-1", "active", nil)
	rke["driver"] = "rancherKubernetesEngine"
	rancher.SetClusters(gkeViaRancher, rke)

	eksAPI := eksfake.New(t)
	eksAPI.Add("eu-west-1", "prod-eu", "ACTIVE", map[string]string{"env": "prod"})
	eksAPI.Add("us-east-1", "prod-us", "ACTIVE", nil)
	eksAPI.Add("ap-south-1", "not-listed", "ACTIVE", nil)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	gkeAPI := gkefake.New(t)
	gkeAPI.Add("proj-a", "europe-west1", "alpha", "RUNNING", map[string]string{"env": "prod"})
	gkeAPI.Add("proj-b", "europe-west4", "gamma", "RUNNING", nil)
	gkeAPI.Add("proj-a", "us-central1", "beta", "RUNNING", nil)
	gkeAPI.Add("proj-a", "asia-east1", "delta", "RUNNING", nil)

	e := newServiceEnv(t, "identity")
	e.kube.InstallCRDs(t, testenv.OCMCRDs()...)
	e.kube.InstallCRDs(t, testenv.ClusterProfileCRDs()...)
	e.env["EKS_ENDPOINT"], e.env["EKS_STS_ENDPOINT"], e.env["GKE_ENDPOINT"] = eksAPI.URL, eksAPI.URL, gkeAPI.URL
	e.secret("rancher-secret", map[string][]byte{"url": []byte(rancher.URL), "token": []byte(rancher.Token), "caCert": rancher.CACertPEM()})
	e.secret("eks-keys", map[string][]byte{"aws_access_key_id": []byte(eksfake.DefaultKeyID), "aws_secret_access_key": []byte("identity-secret")})
	e.secret("gke-key", map[string][]byte{"key.json": gkeAPI.KeyJSON(t)})
	aksAPI := aksfake.New(t)
	aksAPI.Add("sub-a", "RG-Prod", "aks-prod", "Succeeded", "Running", map[string]string{"env": "prod"})
	aksAPI.Add("sub-b", "rg-prod", "aks-stopped", "Succeeded", "Stopped", nil)
	aksAPI.Add("sub-a", "rg-other", "aks-other-group", "Succeeded", "Running", nil)
	e.useAKS(aksAPI)
	e.secret("aks-sp", aksSecret())
	ctx := context.Background()
	for name, list := range map[string]string{
		events.DefaultStaticConfigMap: `[{name: edge-1, url: "https://edge-1:6443"}]`,
		"lab-clusters":                `[{name: lab-1, url: "https://lab-1:6443", labels: {env: lab}}]`,
	} {
		e.must(e.k.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name},
			Data: map[string]string{"clusters.yaml": list}}))
	}
	managedCluster(t, e.k, "identity-spoke", map[string]string{"policy-watcher-claim": "compliant"}, "True")
	t.Cleanup(func() {
		mc := &unstructured.Unstructured{}
		mc.SetAPIVersion("cluster.open-cluster-management.io/v1")
		mc.SetKind("ManagedCluster")
		mc.SetName("identity-spoke")
		_ = e.k.Delete(context.Background(), mc)
	})

	if err := e.k.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "identity-fleet"}}); client.IgnoreAlreadyExists(err) != nil {
		t.Fatal(err)
	}
	clusterProfile(t, e.k, "identity-fleet", "identity-member", "True", "eu-west")

	want := map[string]events.SourceRef{} // cluster name → the source of the rule that lists it
	kinds := map[string]bool{}
	for i := range rules {
		r := &rules[i]
		ref, err := r.Spec.Source.Ref(e.ns)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		kinds[ref.Kind] = true
		for _, name := range strings.Split(r.Annotations[clustersAnnotation], ",") {
			want[name] = ref
		}
		r.Namespace = e.rulesNS
		e.must(e.k.Create(ctx, r))
	}
	for _, k := range events.SourceKinds {
		if !kinds[k] {
			t.Fatalf("%s has no rule of source kind %s", identityRulesFile, k)
		}
	}

	e.start()
	var seen map[string][]appearance
	testenv.Eventually(t, 30*time.Second, func() error {
		seen = e.s.appearances()
		missing := []string{}
		for name := range want {
			if len(seen[name]) == 0 {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("clusters %q never appeared (a source published under an id no rule has?); appeared: %v", missing, seen)
		}
		return nil
	})
	for name, ref := range want {
		wantSubject := events.Subject(&events.ClusterAppeared{Cluster: events.Cluster{Source: ref, Name: name}})
		for _, a := range seen[name] {
			if a.subject != wantSubject || a.source != ref {
				t.Errorf("%s appeared on %s with source %+v; the rule's source (Source.Ref) is %+v, subject %s",
					name, a.subject, a.source, ref, wantSubject)
			}
		}
	}
	// The provider identity of the kinds TestClusterIdentityIsTheProviderIdentity does not cover.
	for name, want := range map[string]string{
		"alpha":           "gke:projects/proj-a/locations/europe-west1/clusters/alpha",
		"aks-prod":        "aks:/subscriptions/sub-a/resourcegroups/rg-prod/providers/microsoft.containerservice/managedclusters/aks-prod",
		"identity-spoke":  "ocm:" + strings.TrimSuffix(e.kube.Config.Host, "/") + "/identity-spoke",
		"identity-member": "clusterprofile:" + strings.TrimSuffix(e.kube.Config.Host, "/") + "/identity-fleet/identity-member",
	} {
		for _, a := range seen[name] {
			if a.identity != want {
				t.Errorf("%s has identity %q; want %q", name, a.identity, want)
			}
		}
	}
	for _, name := range []string{"rke-1", "not-listed", "beta", "aks-other-group"} {
		if len(seen[name]) > 0 {
			t.Errorf("%s appeared, but no rule's source lists it", name)
		}
	}
}

// TestClusterIdentityIsTheProviderIdentity runs the real scanner with two rules reading one
// Rancher through two source Secrets, an EKS rule listing two clusters named prod in two
// regions, and the static source: the Rancher cluster, announced by two sources, has one
// identity (the server and its id, not the Secret), the two prods have their ARNs, and the
// static entry names its ConfigMap.
func TestClusterIdentityIsTheProviderIdentity(t *testing.T) {
	rancher := rancherfake.New(t, "tok-ident", 10)
	rancher.SetClusters(rancherfake.Cluster("c-shared", "shared-1", "active", nil))

	eksAPI := eksfake.New(t)
	eksAPI.Add("eu-west-1", "prod", "ACTIVE", nil)
	eksAPI.Add("us-east-1", "prod", "ACTIVE", nil)
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")

	e := newServiceEnv(t, "provider-identity")
	e.env["EKS_ENDPOINT"], e.env["EKS_STS_ENDPOINT"] = eksAPI.URL, eksAPI.URL
	for _, name := range []string{"rancher-a", "rancher-b"} {
		e.secret(name, map[string][]byte{"url": []byte(rancher.URL), "token": []byte(rancher.Token), "caCert": rancher.CACertPEM()})
		e.rule(name, v1beta1.Source{SecretName: name, Rancher: &v1beta1.RancherSource{}})
	}
	e.secret("eks-keys", map[string][]byte{"aws_access_key_id": []byte(eksfake.DefaultKeyID), "aws_secret_access_key": []byte("ident-secret")})
	e.rule("eks", v1beta1.Source{SecretName: "eks-keys", EKS: &v1beta1.EKSSource{Regions: []string{"eu-west-1", "us-east-1"}}})
	e.must(e.k.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: events.DefaultStaticConfigMap},
		Data: map[string]string{"clusters.yaml": `[{name: edge-1, url: "https://edge-1:6443"}]`}}))
	e.rule("static", v1beta1.Source{Static: &v1beta1.StaticSource{}})

	e.start()
	var seen map[string][]appearance
	testenv.Eventually(t, 30*time.Second, func() error {
		seen = e.s.appearances()
		if len(seen["shared-1"]) < 2 || len(seen["prod"]) < 2 || len(seen["edge-1"]) < 1 {
			return fmt.Errorf("not every cluster appeared yet: %v", seen)
		}
		return nil
	})
	identities := func(name string) map[string]bool {
		out := map[string]bool{}
		for _, a := range seen[name] {
			out[a.identity] = true
		}
		return out
	}
	wantRancher := "rancher:" + strings.TrimSuffix(rancher.URL, "/") + "/c-shared"
	if got := identities("shared-1"); len(got) != 1 || !got[wantRancher] {
		t.Errorf("shared-1, listed through two Secrets of one Rancher, has identities %v; want only %q", got, wantRancher)
	}
	if sources := map[string]bool{seen["shared-1"][0].source.ID: true, seen["shared-1"][1].source.ID: true}; len(sources) != 2 {
		t.Errorf("shared-1 appeared %d times from sources %v; want once from each of two sources", len(seen["shared-1"]), sources)
	}
	wantEKS := map[string]bool{
		"eks:arn:aws:eks:eu-west-1:111122223333:cluster/prod": true,
		"eks:arn:aws:eks:us-east-1:111122223333:cluster/prod": true,
	}
	if got := identities("prod"); !maps.Equal(got, wantEKS) {
		t.Errorf("the two EKS clusters named prod have identities %v; want %v", got, wantEKS)
	}
	wantStatic := "static:" + e.ns + "/" + events.DefaultStaticConfigMap + "/edge-1"
	if got := identities("edge-1"); len(got) != 1 || !got[wantStatic] {
		t.Errorf("edge-1 has identities %v; want %q", got, wantStatic)
	}
}
