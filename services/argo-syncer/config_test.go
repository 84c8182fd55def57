package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, c Config)
		wantErr string
	}{
		{name: "defaults", env: map[string]string{}, check: func(t *testing.T, c Config) {
			if c.ArgoCDNamespace != "argocd" || c.OperatorNamespace != "enforcement" || c.Concurrency != 128 ||
				c.ProjectSourceRepos != "rules" || c.ProjectClusterResources != "all" || c.SourceSecretTTL != 30*time.Second ||
				c.KubeQPS != 0 || c.KubeBurst != 0 || c.ResyncInterval != 10*time.Minute {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "overrides", env: map[string]string{"ARGOCD_NAMESPACE": "gitops", "SYNC_CONCURRENCY": "4", "PROJECT_SOURCE_REPOS": "*", "PROJECT_CLUSTER_RESOURCES": "none"},
			check: func(t *testing.T, c Config) {
				if c.ArgoCDNamespace != "gitops" || c.Concurrency != 4 || c.ProjectSourceRepos != "*" || c.ProjectClusterResources != "none" {
					t.Errorf("overrides %+v", c)
				}
			}},
		{name: "client-side rate limit", env: map[string]string{"KUBE_QPS": "300"}, check: func(t *testing.T, c Config) {
			if c.KubeQPS != 300 || c.KubeBurst != 600 {
				t.Errorf("KUBE_QPS=300: qps %v burst %d, want 300 and 600", c.KubeQPS, c.KubeBurst)
			}
		}},
		{name: "burst without qps", env: map[string]string{"KUBE_BURST": "50"}, wantErr: "KUBE_BURST is set without KUBE_QPS"},
		{name: "bad qps", env: map[string]string{"KUBE_QPS": "0"}, wantErr: "KUBE_QPS"},
		{name: "bad concurrency", env: map[string]string{"SYNC_CONCURRENCY": "0"}, wantErr: "SYNC_CONCURRENCY"},
		{name: "bad repos", env: map[string]string{"PROJECT_SOURCE_REPOS": "some"}, wantErr: "PROJECT_SOURCE_REPOS"},
		{name: "bad resources", env: map[string]string{"PROJECT_CLUSTER_RESOURCES": "x"}, wantErr: "PROJECT_CLUSTER_RESOURCES"},
		{name: "bad ttl", env: map[string]string{"SOURCE_SECRET_TTL": "soon"}, wantErr: "SOURCE_SECRET_TTL"},
		{name: "bad resync", env: map[string]string{"RESYNC_INTERVAL": "often"}, wantErr: "RESYNC_INTERVAL"},
		{name: "zero resync", env: map[string]string{"RESYNC_INTERVAL": "0"}, wantErr: "RESYNC_INTERVAL"},
		{name: "api mode with a password", env: map[string]string{"ARGO_URL": "https://argocd.example/argo", "ARGO_USERNAME": "admin", "ARGO_PASSWORD": "pw", "ARGO_GRPC_WEB": "true"},
			check: func(t *testing.T, c Config) {
				a := c.ArgoAPI
				if !a.Enabled() || a.Username != "admin" || a.Password != "pw" || a.Token != "" || !a.GRPCWeb || a.Insecure || a.PollInterval != 30*time.Second {
					t.Errorf("API mode %+v", a)
				}
				if c.Concurrency != 16 {
					t.Errorf("SYNC_CONCURRENCY defaults to %d in API mode, want 16: argocd-server has no Priority and Fairness", c.Concurrency)
				}
				opts, err := a.clientOptions()
				if err != nil || opts.ServerAddr != "argocd.example:443" || opts.PlainText || opts.GRPCWebRootPath != "argo" {
					t.Errorf("client options %+v, %v; want argocd.example:443 over TLS, root path argo", opts, err)
				}
			}},
		{name: "api mode with a token", env: map[string]string{"ARGO_URL": "http://argocd:8080", "ARGO_TOKEN": "t", "ARGO_INSECURE": "1", "ARGO_POLL_INTERVAL": "5s"},
			check: func(t *testing.T, c Config) {
				a := c.ArgoAPI
				opts, err := a.clientOptions()
				if a.Token != "t" || !a.Insecure || a.PollInterval != 5*time.Second || err != nil || opts.ServerAddr != "argocd:8080" || !opts.PlainText {
					t.Errorf("API mode %+v, options %+v, %v", a, opts, err)
				}
			}},
		{name: "declarative mode", env: map[string]string{}, check: func(t *testing.T, c Config) {
			if c.ArgoAPI.Enabled() {
				t.Errorf("API mode on without ARGO_URL: %+v", c.ArgoAPI)
			}
		}},
		{name: "api mode without credentials", env: map[string]string{"ARGO_URL": "https://argocd.example"}, wantErr: "ARGO_URL is set without credentials"},
		{name: "password without url", env: map[string]string{"ARGO_USERNAME": "admin", "ARGO_PASSWORD": "pw"}, wantErr: "without ARGO_URL"},
		{name: "username without password", env: map[string]string{"ARGO_URL": "https://a", "ARGO_USERNAME": "admin"}, wantErr: "ARGO_USERNAME and ARGO_PASSWORD go together"},
		{name: "token and password", env: map[string]string{"ARGO_URL": "https://a", "ARGO_TOKEN": "t", "ARGO_USERNAME": "admin", "ARGO_PASSWORD": "pw"}, wantErr: "use one of them"},
		{name: "bad url", env: map[string]string{"ARGO_URL": "argocd.example:443", "ARGO_TOKEN": "t"}, wantErr: "ARGO_URL"},
		{name: "bad insecure", env: map[string]string{"ARGO_URL": "https://a", "ARGO_TOKEN": "t", "ARGO_INSECURE": "maybe"}, wantErr: "ARGO_INSECURE"},
		{name: "missing server crt", env: map[string]string{"ARGO_URL": "https://a", "ARGO_TOKEN": "t", "ARGO_SERVER_CRT": "/nonexistent/ca.pem"}, wantErr: "ARGO_SERVER_CRT"},
		{name: "short poll", env: map[string]string{"ARGO_URL": "https://a", "ARGO_TOKEN": "t", "ARGO_POLL_INTERVAL": "10ms"}, wantErr: "ARGO_POLL_INTERVAL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

// TestComposeAPIModeExample: the env file compose's API-mode override tells users to copy is a
// configuration argo-syncer accepts as it stands, in API mode with a password.
func TestComposeAPIModeExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "compose", "argocd-api.env.example"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "ARGO_") {
			t.Fatalf("line %q: want ARGO_<NAME>=<value>", line)
		}
		vars[k] = v
	}
	c, err := LoadConfig(env(vars))
	if err != nil {
		t.Fatalf("the example is refused: %v", err)
	}
	if !c.ArgoAPI.Enabled() || c.ArgoAPI.Username == "" || c.ArgoAPI.Password == "" {
		t.Errorf("the example does not configure API mode with a password: %+v", c.ArgoAPI)
	}
}
