package e2e

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
)

// TestAKSClusterRegisteredWithWorkloadIdentity runs the built binaries against the ARM fake (the
// source-scanner's real armcontainerservice and azidentity clients, over TLS with AKS_CA_FILE):
// a rule with an aks source and tags installs on the running AKS cluster, which argo-syncer
// registers as Argo CD documents AKS with workload identity, with the CA the scanner fetched
// through listClusterUserCredential; a stopped cluster gets nothing until it starts, and a
// cluster stopped after its install keeps it past the grace period.
func TestAKSClusterRegisteredWithWorkloadIdentity(t *testing.T) {
	const sub = "aaaaaaaa-0000-0000-0000-00000000e2e0"
	fake := aksfake.New(t)
	fake.Add(sub, "rg-prod", "aks-prod", "Succeeded", "Running", map[string]string{"env": "prod"})
	fake.Add(sub, "rg-prod", "Night_Cluster", "Succeeded", "Stopped", map[string]string{"env": "prod"})
	fake.Add(sub, "rg-prod", "aks-dev", "Succeeded", "Running", map[string]string{"env": "dev"})
	ca := filepath.Join(t.TempDir(), "arm-ca.pem")
	if err := os.WriteFile(ca, fake.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSystem(t, map[string]string{"AKS_ENDPOINT": fake.URL, "AKS_CA_FILE": ca, "AZURE_AUTHORITY_HOST": fake.URL})
	s.createSecret("aks", map[string][]byte{"tenant_id": []byte(aksfake.TenantID), "client_id": []byte(aksfake.ClientID),
		"client_secret": []byte(aksfake.ClientSecret), "subscription_id": []byte(sub)})
	s.applyRule(operatorNS, `apiVersion: enforcement.globo.com/v1beta1
kind: ClusterRule
metadata:
  name: aks-baseline
spec:
  enforcements:
    - name: guestbook
      repo: https://github.com/argoproj/argocd-example-apps
      path: guestbook
  source:
    aks:
      tags: {env: prod}
`)
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"aks-prod-guestbook"})
	})
	sec := s.get(gvrSecret, "cluster-aks-prod")
	data, _ := sec.Object["data"].(map[string]any)
	server, _ := data["server"].(string)
	if decodeB64(server) != "https://"+fqdn(t, fake, "aks-prod") {
		t.Errorf("cluster Secret server = %q", decodeB64(server))
	}
	raw, _ := data["config"].(string)
	var cfg map[string]any
	if err := json.Unmarshal([]byte(decodeB64(raw)), &cfg); err != nil {
		t.Fatalf("cluster Secret config: %v", err)
	}
	want := map[string]any{
		"execProviderConfig": map[string]any{
			"command":    "argocd-k8s-auth",
			"args":       []any{"azure"},
			"env":        map[string]any{"AAD_LOGIN_METHOD": "workloadidentity"},
			"apiVersion": "client.authentication.k8s.io/v1beta1",
		},
		"tlsClientConfig": map[string]any{"insecure": false, "caData": base64.StdEncoding.EncodeToString(aksfake.ClusterCAPEM("aks-prod"))},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("cluster Secret config\n got %v\nwant %v", cfg, want)
	}

	// The stopped cluster is known but not eligible: it gets its install when it starts.
	night := events.ObjectName("Night_Cluster")
	fake.SetState(sub, "Night_Cluster", "Succeeded", "Running")
	testenv.Eventually(t, 60*time.Second, func() error {
		return equal("Applications", s.names(gvrApplication), []string{"aks-prod-guestbook", night + "-guestbook"})
	})
	// Stopping a cluster for the night removes nothing, past the grace period (4s).
	fake.SetState(sub, "aks-prod", "Succeeded", "Stopped")
	time.Sleep(8 * time.Second)
	if got := s.names(gvrApplication); !slices.Contains(got, "aks-prod-guestbook") {
		t.Fatalf("the stopped cluster's Application was removed: %v", got)
	}
	var n int
	fake.Configure(func(f *aksfake.Server) { n = f.Creds["aks-prod"] })
	if n != 1 {
		t.Errorf("the CA of aks-prod was fetched %d times, want once (first sight)", n)
	}
}

// fqdn reads a fake cluster's FQDN.
func fqdn(t *testing.T, f *aksfake.Server, name string) string {
	t.Helper()
	var out string
	f.Configure(func(f *aksfake.Server) {
		for _, cs := range f.Clusters {
			for _, c := range cs {
				if c["name"] == name {
					out = fmt.Sprint(c["properties"].(map[string]any)["fqdn"])
				}
			}
		}
	})
	return out
}
