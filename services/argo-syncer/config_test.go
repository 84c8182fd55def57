package main

import (
	"errors"
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
			if c.ArgoCDNamespace != "argocd" || c.OperatorNamespace != "enforcement" || c.Concurrency != 16 ||
				c.ProjectSourceRepos != "rules" || c.ProjectClusterResources != "all" || c.SourceSecretTTL != 30*time.Second ||
				c.KubeQPS != 100 || c.KubeBurst != 200 || c.ResyncInterval != 10*time.Minute {
				t.Errorf("defaults %+v", c)
			}
		}},
		{name: "overrides", env: map[string]string{"ARGOCD_NAMESPACE": "gitops", "SYNC_CONCURRENCY": "4", "PROJECT_SOURCE_REPOS": "*", "PROJECT_CLUSTER_RESOURCES": "none"},
			check: func(t *testing.T, c Config) {
				if c.ArgoCDNamespace != "gitops" || c.Concurrency != 4 || c.ProjectSourceRepos != "*" || c.ProjectClusterResources != "none" {
					t.Errorf("overrides %+v", c)
				}
			}},
		{name: "bad concurrency", env: map[string]string{"SYNC_CONCURRENCY": "0"}, wantErr: "SYNC_CONCURRENCY"},
		{name: "bad repos", env: map[string]string{"PROJECT_SOURCE_REPOS": "some"}, wantErr: "PROJECT_SOURCE_REPOS"},
		{name: "bad resources", env: map[string]string{"PROJECT_CLUSTER_RESOURCES": "x"}, wantErr: "PROJECT_CLUSTER_RESOURCES"},
		{name: "bad ttl", env: map[string]string{"SOURCE_SECRET_TTL": "soon"}, wantErr: "SOURCE_SECRET_TTL"},
		{name: "bad resync", env: map[string]string{"RESYNC_INTERVAL": "often"}, wantErr: "RESYNC_INTERVAL"},
		{name: "zero resync", env: map[string]string{"RESYNC_INTERVAL": "0"}, wantErr: "RESYNC_INTERVAL"},
		{name: "api mode", env: map[string]string{"ARGO_URL": "https://argocd.example"}, wantErr: "API mode not built yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(env(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tt.wantErr)
				}
				if tt.name == "api mode" && !errors.Is(err, errAPIMode) {
					t.Fatalf("error %v, want errAPIMode", err)
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
