package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"

	"github.com/enforcement-io/enforcement/pkg/events"
)

func intent(cluster, enforcement string) *events.InstallIntent {
	return &events.InstallIntent{
		Rule:    events.RuleRef{Namespace: "team", Name: "baseline", UID: "uid-1", Generation: 3},
		Cluster: events.Target{Name: cluster, Key: "c-" + cluster, URL: "https://" + cluster + ".example:6443", Revision: 1},
		Enforcement: events.Enforcement{
			Name: enforcement, Repo: "https://git.example/" + enforcement, Path: "charts/" + enforcement,
			Namespace: "monitoring", TargetRevision: "v1",
			HelmParameters: []events.HelmParameter{{Name: "replicas", Value: "2"}, {Name: "cluster", Value: cluster}},
		},
		SpecHash: "h1",
	}
}

func TestRenderApplication(t *testing.T) {
	long := strings.Repeat("x", 70)
	tests := []struct {
		name       string
		mutate     func(*events.InstallIntent)
		wantName   string
		wantLabels map[string]string
		wantNS     string
	}{
		{
			name:     "plain",
			wantName: "prod-1-agent",
			wantNS:   "monitoring",
			wantLabels: map[string]string{
				LabelManagedBy: ManagedByValue, LabelCluster: "prod-1", LabelRuleNamespace: "team",
				LabelRuleName: "baseline", LabelEnforcement: "agent",
			},
		},
		{
			name: "default namespace and enforcement labels, ours win",
			mutate: func(in *events.InstallIntent) {
				in.Enforcement.Namespace = ""
				in.Enforcement.Labels = map[string]string{"team": "sre", LabelManagedBy: "someone"}
			},
			wantName: "prod-1-agent",
			wantNS:   "default",
			wantLabels: map[string]string{
				"team": "sre", LabelManagedBy: ManagedByValue, LabelCluster: "prod-1", LabelRuleNamespace: "team",
				LabelRuleName: "baseline", LabelEnforcement: "agent",
			},
		},
		{
			name:     "rule name too long for a label keeps annotation only",
			mutate:   func(in *events.InstallIntent) { in.Rule.Name = long },
			wantName: "prod-1-agent",
			wantNS:   "monitoring",
			wantLabels: map[string]string{
				LabelManagedBy: ManagedByValue, LabelCluster: "prod-1", LabelRuleNamespace: "team", LabelEnforcement: "agent",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := intent("prod-1", "agent")
			if tt.mutate != nil {
				tt.mutate(in)
			}
			o := RenderApplication("argocd", in, newNames(in.Cluster.Name, in.Enforcement.Name))
			if o.Metadata.Name != tt.wantName || o.Metadata.Namespace != "argocd" {
				t.Fatalf("name %s/%s, want argocd/%s", o.Metadata.Namespace, o.Metadata.Name, tt.wantName)
			}
			if !equalMaps(o.Metadata.Labels, tt.wantLabels) {
				t.Errorf("labels %v, want %v", o.Metadata.Labels, tt.wantLabels)
			}
			if got := o.Metadata.Annotations[AnnotationRule]; got != "team/"+in.Rule.Name {
				t.Errorf("rule annotation %q", got)
			}
			spec := o.Spec.(argov1.ApplicationSpec)
			if spec.Project != "prod-1" || spec.Destination.Name != "prod-1" || spec.Destination.Namespace != tt.wantNS || spec.Destination.Server != "" {
				t.Errorf("project/destination %+v %+v", spec.Project, spec.Destination)
			}
			if spec.Source.RepoURL != "https://git.example/agent" || spec.Source.Path != "charts/agent" || spec.Source.TargetRevision != "v1" {
				t.Errorf("source %+v", spec.Source)
			}
			if len(spec.Source.Helm.Parameters) != 2 || spec.Source.Helm.Parameters[1] != (argov1.HelmParameter{Name: "cluster", Value: "prod-1"}) {
				t.Errorf("helm parameters %+v", spec.Source.Helm.Parameters)
			}
			if a := spec.SyncPolicy.Automated; !a.Prune || !a.SelfHeal || len(spec.SyncPolicy.SyncOptions) != 1 || spec.SyncPolicy.SyncOptions[0] != "CreateNamespace=true" {
				t.Errorf("sync policy %+v", spec.SyncPolicy)
			}
		})
	}
}

func TestSealIsStableAndSensitive(t *testing.T) {
	a := RenderApplication("argocd", intent("c", "e"), newNames("c", "e"))
	b := RenderApplication("argocd", intent("c", "e"), newNames("c", "e"))
	a.seal()
	b.seal()
	if a.hash() == "" || a.hash() != b.hash() {
		t.Fatalf("same intent, hashes %q and %q", a.hash(), b.hash())
	}
	a.seal() // sealing twice ignores the previous hash annotation
	if a.hash() != b.hash() {
		t.Fatal("sealing twice changed the hash")
	}
	in := intent("c", "e")
	in.Enforcement.HelmParameters[0].Value = "3"
	c := RenderApplication("argocd", in, newNames(in.Cluster.Name, in.Enforcement.Name))
	c.seal()
	if c.hash() == a.hash() {
		t.Fatal("changed helm parameter, same hash")
	}
}

func TestRenderProject(t *testing.T) {
	tests := []struct {
		name      string
		url       string
		repos     []string
		settings  ProjectSettings
		wantRepos []string
		wantDests int
		wantWL    bool
	}{
		{"rules repos sorted and unique", "https://c:6443", []string{"b", "a", "b"}, ProjectSettings{ClusterResources: true}, []string{"a", "b"}, 2, true},
		{"any repo", "https://c:6443", []string{"b"}, ProjectSettings{AnyRepo: true}, []string{"*"}, 2, false},
		{"no url: name only", "", []string{"a"}, ProjectSettings{}, []string{"a"}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := RenderProject("argocd", newNames("c", ""), "c", tt.url, tt.repos, tt.settings)
			spec := o.Spec.(argov1.AppProjectSpec)
			if strings.Join(spec.SourceRepos, ",") != strings.Join(tt.wantRepos, ",") {
				t.Errorf("repos %v, want %v", spec.SourceRepos, tt.wantRepos)
			}
			if len(spec.Destinations) != tt.wantDests {
				t.Errorf("destinations %+v", spec.Destinations)
			}
			for _, d := range spec.Destinations {
				if d.Namespace != "*" {
					t.Errorf("destination %+v: want any namespace", d)
				}
			}
			if got := len(spec.ClusterResourceWhitelist) == 1 && spec.ClusterResourceWhitelist[0].Group == "*" && spec.ClusterResourceWhitelist[0].Kind == "*"; got != tt.wantWL {
				t.Errorf("cluster resource whitelist %+v, want all=%v", spec.ClusterResourceWhitelist, tt.wantWL)
			}
			if o.Metadata.Name != "c" || o.Metadata.Labels[LabelManagedBy] != ManagedByValue || o.Metadata.Labels[LabelCluster] != "c" {
				t.Errorf("metadata %+v", o.Metadata)
			}
		})
	}
}

func TestClusterConfigFromSecret(t *testing.T) {
	tests := []struct {
		name    string
		kind    string
		data    map[string][]byte
		want    argov1.ClusterConfig
		wantErr string
	}{
		{"rancher: the original's two keys", "rancher", map[string][]byte{"url": []byte("https://rancher"), "token": []byte("s3cr3t\n")},
			argov1.ClusterConfig{BearerToken: "s3cr3t"}, ""},
		{"rancher: ca and insecure", "rancher", map[string][]byte{"url": []byte("https://rancher"), "token": []byte("tok"), "caCert": testCAPEMParsable(t), "insecure": []byte("true")},
			argov1.ClusterConfig{BearerToken: "tok", TLSClientConfig: argov1.TLSClientConfig{CAData: testCAPEMParsable(t), Insecure: true}}, ""},
		{"rancher: as the scanner, url is required", "rancher", map[string][]byte{"token": []byte("s3cr3t")}, argov1.ClusterConfig{}, `key "url"`},
		{"rancher: as the scanner, caCert must be PEM", "rancher", map[string][]byte{"url": []byte("https://rancher"), "token": []byte("s3cr3t"), "caCert": []byte("PEM")},
			argov1.ClusterConfig{}, `key "caCert"`},
		{"static: ca and insecure", "static", map[string][]byte{"token": []byte("tok"), "caCert": []byte("PEM"), "insecure": []byte("true")},
			argov1.ClusterConfig{BearerToken: "tok", TLSClientConfig: argov1.TLSClientConfig{CAData: []byte("PEM"), Insecure: true}}, ""},
		{"ocm add-on keys", "ocm", map[string][]byte{"token": []byte("tok"), "ca.crt": []byte("PEM")},
			argov1.ClusterConfig{BearerToken: "tok", TLSClientConfig: argov1.TLSClientConfig{CAData: []byte("PEM")}}, ""},
		{"no token", "static", map[string][]byte{"url": []byte("https://rancher")}, argov1.ClusterConfig{}, `key "token"`},
		{"bad insecure", "static", map[string][]byte{"token": []byte("s3cr3t"), "insecure": []byte("maybe")}, argov1.ClusterConfig{}, `key "insecure"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ClusterConfigFromSecret(tt.kind, tt.data)
			if tt.wantErr != "" {
				var ke *events.SecretKeyError
				if !errors.Is(err, errCredentials) || !errors.As(err, &ke) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want errCredentials naming %s", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "s3cr3t") {
					t.Fatalf("error %q leaks the token", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tt.want)
			if string(g) != string(w) {
				t.Errorf("config %s, want %s", g, w)
			}
		})
	}
}

// testCAPEMParsable is a self-signed CA certificate, which a rancher Secret's caCert must be.
func testCAPEMParsable(t testing.TB) []byte {
	t.Helper()
	caOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rancher CA"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	})
	return caPEM
}

var (
	caOnce sync.Once
	caPEM  []byte
)

func TestObjectNamesNormalised(t *testing.T) {
	for _, cluster := range []string{"Prod_Cluster.1", strings.Repeat("a", 80)} {
		if got := ProjectName(cluster); got != events.ObjectName(cluster) || len(got) > 63 {
			t.Errorf("project name of %q: %q", cluster, got)
		}
		if got := clusterLabel(cluster); len(got) > 63 || strings.ContainsAny(got, "_.") && len(cluster) > 63 {
			t.Errorf("cluster label of %q: %q", cluster, got)
		}
	}
	if got := clusterLabel("Prod_Cluster.1"); got != "Prod_Cluster.1" {
		t.Errorf("a valid label value is kept: got %q", got)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestClusterConfigFromHints compares the config JSON with Argo CD's documented EKS, GKE and AKS
// (workload identity) examples (operator-manual/declarative-setup.md), byte for byte.
func TestClusterConfigFromHints(t *testing.T) {
	ca := base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}))
	tests := []struct {
		name, kind string
		hints      map[string]string
		want       string
		wantErr    string
	}{
		{"eks", KindEKS, map[string]string{HintAWSClusterName: "my-eks-cluster-name",
			HintAWSRoleARN: "arn:aws:iam::1:role/r", HintCAData: ca, "argocd.unknown": "ignored"},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"awsAuthConfig":{"clusterName":"my-eks-cluster-name","roleARN":"arn:aws:iam::1:role/r"}}`, ""},
		{"eks without role", KindEKS, map[string]string{HintAWSClusterName: "c", HintCAData: ca},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"awsAuthConfig":{"clusterName":"c"}}`, ""},
		{"gke", KindGKE, map[string]string{HintExecCommand: "argocd-k8s-auth", HintExecArgs: `["gcp"]`,
			HintExecAPIVersion: "client.authentication.k8s.io/v1beta1", HintCAData: ca},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"execProviderConfig":{"command":"argocd-k8s-auth","args":["gcp"],"apiVersion":"client.authentication.k8s.io/v1beta1"}}`, ""},
		{"gke plain arg", KindGKE, map[string]string{HintExecCommand: "argocd-k8s-auth", HintExecArgs: "gcp",
			HintExecAPIVersion: "client.authentication.k8s.io/v1beta1", HintCAData: ca},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"execProviderConfig":{"command":"argocd-k8s-auth","args":["gcp"],"apiVersion":"client.authentication.k8s.io/v1beta1"}}`, ""},
		{"aks", KindAKS, map[string]string{HintExecCommand: "argocd-k8s-auth", HintExecArgs: `["azure"]`,
			HintExecEnv: `{"AAD_LOGIN_METHOD":"workloadidentity"}`, HintExecAPIVersion: "client.authentication.k8s.io/v1beta1", HintCAData: ca},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"execProviderConfig":{"command":"argocd-k8s-auth","args":["azure"],"env":{"AAD_LOGIN_METHOD":"workloadidentity"},"apiVersion":"client.authentication.k8s.io/v1beta1"}}`, ""},
		{"aks env not an object", KindAKS, map[string]string{HintExecCommand: "argocd-k8s-auth", HintExecArgs: `["azure"]`,
			HintExecEnv: `["AAD_LOGIN_METHOD"]`, HintExecAPIVersion: "client.authentication.k8s.io/v1beta1", HintCAData: ca},
			"", `hint "argocd.execProviderConfig.env" is not a JSON object of strings`},
		{"aks no CA", KindAKS, map[string]string{HintExecCommand: "argocd-k8s-auth", HintExecArgs: `["azure"]`, HintExecAPIVersion: "v"},
			"", `hint "argocd.caData" is missing`},
		{"clusterprofile", KindClusterProfile, map[string]string{HintExecCommand: "kubelogin", HintExecArgs: `["get-token","--server-id","x"]`,
			HintExecAPIVersion: "client.authentication.k8s.io/v1", HintCAData: ca},
			`{"tlsClientConfig":{"insecure":false,"caData":"` + ca + `"},"execProviderConfig":{"command":"kubelogin","args":["get-token","--server-id","x"],"apiVersion":"client.authentication.k8s.io/v1"}}`, ""},
		{"clusterprofile without a configured provider", KindClusterProfile, map[string]string{HintCAData: ca}, "",
			`hint "argocd.execProviderConfig.command" is missing`},
		{"eks no hints", KindEKS, nil, "", `hint "argocd.awsAuthConfig.clusterName" is missing`},
		{"eks ca not pem", KindEKS, map[string]string{HintAWSClusterName: "c", HintCAData: base64.StdEncoding.EncodeToString([]byte("x"))},
			"", `hint "argocd.caData" is not the base64 of a PEM certificate`},
		{"gke no command", KindGKE, map[string]string{HintExecArgs: `["gcp"]`, HintExecAPIVersion: "v", HintCAData: ca},
			"", `hint "argocd.execProviderConfig.command" is missing`},
		{"rancher", "rancher", map[string]string{HintCAData: ca}, "", `source kind "rancher" is not registered from hints`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ClusterConfigFromHints(tt.kind, tt.hints)
			if tt.wantErr != "" {
				if !errors.Is(err, errRegistration) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want errRegistration with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if g, _ := json.Marshal(got); string(g) != tt.want {
				t.Errorf("config\n got %s\nwant %s", g, tt.want)
			}
		})
	}
}
