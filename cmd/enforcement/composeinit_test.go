package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/testenv"
)

func TestWritePKI(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := writePKI(dir, "https://kube-apiserver:6443", "https://127.0.0.1:16443", &out); err != nil {
		t.Fatal(err)
	}
	ca := parseCert(t, filepath.Join(dir, caCertFile))
	serving := parseCert(t, filepath.Join(dir, servingCertFile))
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	// The names containers and the host use must verify against the CA.
	for _, name := range []string{"kube-apiserver", "127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", name, err)
		}
	}
	for file, server := range map[string]string{kubeconfigFile: "https://kube-apiserver:6443", hostKubeconfig: "https://127.0.0.1:16443"} {
		cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if cfg.Host != server || cfg.BearerToken == "" || len(cfg.CAData) == 0 {
			t.Errorf("%s: host %q, token set %v, CA set %v; want host %q with token and CA", file, cfg.Host, cfg.BearerToken != "", len(cfg.CAData) > 0, server)
		}
		if strings.Contains(out.String(), cfg.BearerToken) {
			t.Errorf("the output shows the token")
		}
	}
	for _, f := range []string{caKeyFile, servingKeyFile, saKeyFile, tokenFile} {
		if info, err := os.Stat(filepath.Join(dir, f)); err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (err %v), want 0600", f, info.Mode().Perm(), err)
		}
	}

	// A second run (a restarted demo, perhaps on another host port) keeps the keys and the token
	// and points the host kubeconfig at the new port.
	token, _ := readToken(filepath.Join(dir, tokenFile))
	if err := writePKI(dir, "https://kube-apiserver:6443", "https://127.0.0.1:26443", &out); err != nil {
		t.Fatal(err)
	}
	if again := parseCert(t, filepath.Join(dir, caCertFile)); !again.Equal(ca) {
		t.Error("second run replaced the CA")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, hostKubeconfig))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:26443" || cfg.BearerToken != token {
		t.Errorf("second run: host %q and same token %v; want the new port and the kept token", cfg.Host, cfg.BearerToken == token)
	}
}

func TestAddServerName(t *testing.T) {
	for _, tc := range []struct {
		url     string
		wantDNS int
		wantIPs int
	}{
		{"https://kube-apiserver:6443", 1, 0}, // already there
		{"https://api.dev.example.com:6443", 2, 0},
		{"https://192.168.1.5:6443", 1, 1},
		{"::not a url", 1, 0},
	} {
		cert := &x509.Certificate{DNSNames: []string{"kube-apiserver"}}
		addServerName(cert, tc.url)
		if len(cert.DNSNames) != tc.wantDNS || len(cert.IPAddresses) != tc.wantIPs {
			t.Errorf("%s: DNS %v IPs %v, want %d and %d", tc.url, cert.DNSNames, cert.IPAddresses, tc.wantDNS, tc.wantIPs)
		}
	}
}

// TestSeed seeds a real API server twice: CRDs and demo the first time, nothing new (and no
// error) the second.
func TestSeed(t *testing.T) {
	k := testenv.StartKube(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	crds := filepath.Join(root, "deploy", "k8s", "enforcement-crds", "crds")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 2 {
		var out bytes.Buffer
		if err := seed(ctx, k.Kubeconfig, crds, &out); err != nil {
			t.Fatalf("seed %d: %v\n%s", i+1, err, out.String())
		}
	}
	var cm corev1.ConfigMap
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: localOperatorNamespace, Name: staticConfigMap}, &cm); err != nil {
		t.Fatal(err)
	}
	rule := &unstructured.Unstructured{}
	rule.SetGroupVersionKind(schema.GroupVersionKind{Group: "enforcement.globo.com", Version: "v1beta1", Kind: "ClusterRule"})
	if err := k.Client.Get(ctx, client.ObjectKey{Namespace: localOperatorNamespace, Name: "demo"}, rule); err != nil {
		t.Fatal(err)
	}
	apps := &unstructured.UnstructuredList{}
	apps.SetGroupVersionKind(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "ApplicationList"})
	if err := k.Client.List(ctx, apps); err != nil {
		t.Errorf("Argo CD Application CRD not served: %v", err)
	}
}

// TestSeedGivesUpAtDeadline: with no API server, seed returns when its context ends and says why.
func TestSeedGivesUpAtDeadline(t *testing.T) {
	dir := t.TempDir()
	if err := writePKI(dir, "https://127.0.0.1:1", "https://127.0.0.1:1", &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err := seed(ctx, filepath.Join(dir, kubeconfigFile), t.TempDir(), &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "Kubernetes API") {
		t.Fatalf("seed = %v, want an error naming the Kubernetes API", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("seed took %s after a 1s deadline", d)
	}
}

func parseCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM block", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
