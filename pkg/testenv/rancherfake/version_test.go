package rancherfake

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"k8s.io/apimachinery/pkg/version"
)

// TestProxiedVersion: GET /k8s/clusters/<id>/version answers a Kubernetes version for a listed
// cluster with the fake's token, 401 without it, 404 for an unknown cluster or another path.
func TestProxiedVersion(t *testing.T) {
	s := New(t, "tok", 10)
	s.SetClusters(Cluster("c-1", "prod-a", "active", nil))
	get := func(path, token string) (int, []byte) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, s.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, body
	}
	code, body := get("/k8s/clusters/c-1/version", "tok")
	var info version.Info
	if code != http.StatusOK || json.Unmarshal(body, &info) != nil || info.Major != "1" || info.GitVersion == "" {
		t.Errorf("version of c-1: %d %s, want 200 and a version.Info", code, body)
	}
	for path, want := range map[string]int{"/k8s/clusters/c-1/version": http.StatusUnauthorized} {
		if code, _ := get(path, "wrong"); code != want {
			t.Errorf("GET %s with a wrong token: %d, want %d", path, code, want)
		}
	}
	for _, path := range []string{"/k8s/clusters/c-9/version", "/k8s/clusters/c-1/api"} {
		if code, _ := get(path, "tok"); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, code)
		}
	}
}
