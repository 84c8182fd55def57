package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/aksfake"
)

// useAKS points the service at the ARM fake: AKS_ENDPOINT, AKS_CA_FILE (the fake's TLS
// certificate) and azidentity's AZURE_AUTHORITY_HOST (process environment: azidentity reads it).
func (e *serviceEnv) useAKS(f *aksfake.Server) {
	e.t.Helper()
	ca := filepath.Join(e.t.TempDir(), "aks-ca.pem")
	e.must(os.WriteFile(ca, f.CACertPEM(), 0o600))
	e.env["AKS_ENDPOINT"], e.env["AKS_CA_FILE"] = f.URL, ca
	e.t.Setenv("AZURE_AUTHORITY_HOST", f.URL)
}

// aksSecret is a source Secret with the fake's service principal.
func aksSecret() map[string][]byte {
	return map[string][]byte{"tenant_id": []byte(aksfake.TenantID), "client_id": []byte(aksfake.ClientID), "client_secret": []byte(aksfake.ClientSecret)}
}

// TestRunAKS: rules with an aks source are listed through the real armcontainerservice client
// and azidentity against the ARM fake (AKS_ENDPOINT, AKS_CA_FILE, AZURE_AUTHORITY_HOST): with a
// client secret from a named Secret, with workload identity when the rule names no Secret and
// there is no "aks" Secret; a stopped cluster appears; a malformed Secret, a rule without a
// subscription and a subscription the identity may not read degrade their sources; throttling
// past the grace period removes nothing.
func TestRunAKS(t *testing.T) {
	fake := aksfake.New(t)
	fake.Add("sub-a", "rg", "aks-prod", "Succeeded", "Running", map[string]string{"env": "prod"})
	fake.Add("sub-a", "rg", "Night_Cluster", "Succeeded", "Stopped", nil)
	fake.Add("sub-b", "rg", "wi-cluster", "Succeeded", "Running", nil)
	fake.Configure(func(f *aksfake.Server) {
		f.Fail["sub-denied"] = aksfake.Error{Status: 403, Code: "AuthorizationFailed", Msg: "The client does not have authorization to perform action 'Microsoft.ContainerService/managedClusters/read'"}
	})
	tokenFile := filepath.Join(t.TempDir(), "azure-identity-token")
	if err := os.WriteFile(tokenFile, []byte(aksfake.FederatedToken), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AZURE_CLIENT_ID", aksfake.ClientID)
	t.Setenv("AZURE_TENANT_ID", aksfake.TenantID)
	t.Setenv("AZURE_FEDERATED_TOKEN_FILE", tokenFile)

	e := newServiceEnv(t, "aks")
	e.useAKS(fake)
	e.secret("aks-sp", aksSecret())
	e.secret("aks-bad", map[string][]byte{"client_secret": []byte("orphan-secret-value")})
	e.rule("sp", v1beta1.Source{SecretName: "aks-sp", AKS: &v1beta1.AKSSource{Subscriptions: []string{"sub-a"}}})
	e.rule("wi", v1beta1.Source{AKS: &v1beta1.AKSSource{Subscriptions: []string{"sub-b"}}})
	e.rule("bad-secret", v1beta1.Source{SecretName: "aks-bad", AKS: &v1beta1.AKSSource{Subscriptions: []string{"sub-a"}}})
	e.rule("no-subscription", v1beta1.Source{SecretName: "aks-sp", AKS: &v1beta1.AKSSource{}})
	e.rule("denied", v1beta1.Source{SecretName: "aks-sp", AKS: &v1beta1.AKSSource{Subscriptions: []string{"sub-denied"}}})
	e.start()

	night := events.ObjectName("Night_Cluster")
	e.s.waitFor("appeared aks aks-prod", "appeared aks "+night, "appeared aks wi-cluster",
		"degraded aks SecretInvalid", "degraded aks InvalidSpec", "degraded aks Unauthorized")

	fake.Configure(func(f *aksfake.Server) { f.Throttle["sub-a"] = aksfake.Throttle{N: 1 << 20, RetryAfter: 3600} })
	e.s.waitFor("degraded aks ListFailed")
	time.Sleep(500 * time.Millisecond) // longer than the grace period
	if n := e.s.count("gone aks aks-prod") + e.s.count("gone aks "+night); n != 0 {
		t.Fatal("a cluster gone while its listing was throttled")
	}
	m := e.metrics()
	for _, want := range []string{
		`enforcement_source_scanner_aks_api_calls_total{operation="List",outcome="success"}`,
		`enforcement_source_scanner_aks_api_calls_total{operation="List",outcome="throttled"}`,
		`enforcement_source_scanner_aks_api_calls_total{operation="ListClusterUserCredentials",outcome="success"}`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
}

// TestAKSConfig: AKS_ENDPOINT must be https (azcore sends tokens over TLS only) and AKS_CA_FILE
// a readable PEM bundle; the errors name the variable.
func TestAKSConfig(t *testing.T) {
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for env, want := range map[string]string{
		"AKS_ENDPOINT=http://arm.local": `AKS_ENDPOINT="http://arm.local": want an absolute https URL`,
		"AKS_CA_FILE=/nonexistent/ca":   `AKS_CA_FILE="/nonexistent/ca"`,
		"AKS_CA_FILE=" + notPEM:         "holds no PEM certificate",
	} {
		k, v, _ := strings.Cut(env, "=")
		_, err := loadConfig(func(name string) string {
			if name == k {
				return v
			}
			return ""
		})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", env, err, want)
		}
	}
	cfg, err := loadConfig(func(name string) string {
		return map[string]string{"AKS_ENDPOINT": "https://management.usgovcloudapi.net"}[name]
	})
	if err != nil || cfg.AKS.Endpoint != "https://management.usgovcloudapi.net" || cfg.AKS.HTTPClient == nil {
		t.Fatalf("config = %+v, %v", cfg.AKS, err)
	}
}
