package rancher_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/rancher"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// lister returns a lister for srv that trusts its certificate.
func lister(t testing.TB, srv *rancherfake.Server, filters map[string]string) *rancher.Lister {
	t.Helper()
	creds, err := events.ParseRancherSecret(map[string][]byte{"url": []byte(srv.URL), "token": []byte(srv.Token), "caCert": srv.CACertPEM()})
	if err != nil {
		t.Fatal(err)
	}
	return &rancher.Lister{Creds: creds, Filters: filters}
}

func TestListFollowsPaginationAndFilters(t *testing.T) {
	srv := rancherfake.New(t, "tok-1", 2)
	srv.SetClusters(
		rancherfake.Cluster("c-1", "prod-1", "active", map[string]string{"env": "prod"}),
		rancherfake.Cluster("c-2", "prod-2", "provisioning", nil),
		rancherfake.Cluster("c-3", "prod-3", "waiting", nil),
		rancherfake.Cluster("c-4", "prod-4", "updating", nil),
		rancherfake.Cluster("c-5", "prod-5", "unavailable", nil),
		func() map[string]any {
			c := rancherfake.Cluster("c-6", "dev-1", "active", nil)
			c["provider"] = "eks"
			return c
		}(),
	)
	got, err := lister(t, srv, map[string]string{"provider": "rke"}).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("listed %d clusters, want 5 (the rke ones over 3 pages)", len(got))
	}
	wantEligible := map[string]bool{"c-1": true, "c-2": false, "c-3": false, "c-4": true, "c-5": true}
	for _, c := range got {
		if c.Eligible != wantEligible[c.Key] {
			t.Errorf("%s (%s): eligible = %t", c.Key, c.State, c.Eligible)
		}
		if want := srv.URL + "/k8s/clusters/" + c.Key; c.URL != want {
			t.Errorf("url = %s, want %s", c.URL, want)
		}
		if c.Attributes["provider"] != "rke" || c.Attributes["id"] != c.Key || c.Attributes["nodeCount"] != float64(3) {
			t.Errorf("attributes miss top-level fields: %v", c.Attributes)
		}
		for _, f := range rancher.VolatileFields {
			if _, ok := c.Attributes[f]; ok {
				t.Errorf("volatile field %s kept in attributes", f)
			}
		}
	}
	if got[0].Labels["env"] != "prod" {
		t.Errorf("labels = %v", got[0].Labels)
	}
	reqs := srv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 pages", len(reqs))
	}
	for _, r := range reqs {
		if r.Authorization != "Bearer tok-1" || !strings.Contains(r.Query, "provider=rke") {
			t.Errorf("request %+v lacks the token or the filter", r)
		}
	}
}

func TestListDegradedReasons(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(*rancherfake.Server)
		token  string
		want   string
	}{
		{"401", nil, "wrong", events.DegradedUnauthorized},
		{"403", func(s *rancherfake.Server) { s.FailPage(1, 403) }, "", events.DegradedUnauthorized},
		{"500 first page", func(s *rancherfake.Server) { s.FailPage(1, 500) }, "", events.DegradedListFailed},
		{"503 second page", func(s *rancherfake.Server) { s.FailPage(2, 503) }, "", events.DegradedPartial},
		{"garbage", func(s *rancherfake.Server) { s.BreakPage(1, rancherfake.FailGarbage) }, "", events.DegradedListFailed},
		{"garbage second page", func(s *rancherfake.Server) { s.BreakPage(2, rancherfake.FailGarbage) }, "", events.DegradedPartial},
		{"partial without next", func(s *rancherfake.Server) { s.BreakPage(1, rancherfake.FailPartial) }, "", events.DegradedPartial},
		{"timeout on second page", func(s *rancherfake.Server) { s.BreakPage(2, rancherfake.FailHang) }, "", events.DegradedPartial},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := rancherfake.New(t, "tok-9f8e7d", 1)
			srv.SetClusters(rancherfake.Cluster("c-1", "a", "active", nil), rancherfake.Cluster("c-2", "b", "active", nil))
			if tt.break_ != nil {
				tt.break_(srv)
			}
			l := lister(t, srv, nil)
			if tt.token != "" {
				l.Creds.Token = tt.token
			}
			timeout := 10 * time.Second
			if strings.HasPrefix(tt.name, "timeout") {
				timeout = time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			got, err := l.List(ctx)
			if err == nil {
				t.Fatalf("listed %d clusters, want an error", len(got))
			}
			if r := scanner.ReasonOf(err); r != tt.want {
				t.Fatalf("reason = %s (%v), want %s", r, err, tt.want)
			}
			if strings.Contains(err.Error(), l.Creds.Token) {
				t.Fatalf("error %q contains the token", err)
			}
		})
	}
}

func TestListRefusesTLSWithoutTrust(t *testing.T) {
	srv := rancherfake.New(t, "tok", 10)
	srv.SetClusters(rancherfake.Cluster("c-1", "a", "active", nil))
	creds, _ := events.ParseRancherSecret(map[string][]byte{"url": []byte(srv.URL), "token": []byte("tok")})
	if _, err := (&rancher.Lister{Creds: creds}).List(context.Background()); err == nil {
		t.Fatal("listing succeeded against an untrusted certificate")
	}
	creds.Insecure = true
	if got, err := (&rancher.Lister{Creds: creds}).List(context.Background()); err != nil || len(got) != 1 {
		t.Fatalf("insecure listing: %v, %d clusters", err, len(got))
	}
}

// TestTokenNeverLeavesTheSourceHost points pagination.next and a redirect at another host and
// checks that host never receives a request with the token.
func TestTokenNeverLeavesTheSourceHost(t *testing.T) {
	var leaked atomic.Int32
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			leaked.Add(1)
		}
		fmt.Fprint(w, `{"type":"collection","data":[]}`)
	}))
	defer evil.Close()
	source := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("mode") == "redirect" {
			http.Redirect(w, r, evil.URL+"/v3/clusters", http.StatusFound)
			return
		}
		fmt.Fprintf(w, `{"type":"collection","data":[{"id":"c-1","name":"a","state":"active"}],"pagination":{"next":%q,"partial":true}}`, evil.URL+"/v3/clusters?marker=1")
	}))
	defer source.Close()
	for _, mode := range []string{"next", "redirect"} {
		u, _ := url.Parse(source.URL)
		l := &rancher.Lister{Creds: events.RancherCredentials{URL: u, Token: "secret-token"}, Filters: map[string]string{"mode": mode}}
		if _, err := l.List(context.Background()); err == nil {
			t.Errorf("%s: listing succeeded through another host", mode)
		}
	}
	if n := leaked.Load(); n != 0 {
		t.Fatalf("the other host received the token %d times", n)
	}
}

func TestListTimeoutIsDeadline(t *testing.T) {
	srv := rancherfake.New(t, "tok", 10)
	srv.BreakPage(1, rancherfake.FailHang)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := lister(t, srv, nil).List(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || scanner.ReasonOf(err) != events.DegradedListFailed {
		t.Fatalf("err = %v, want a ListFailed deadline error", err)
	}
}

// TestAttributesNeverCarryCredentials lists a cluster object with credentials nested the way RKE
// and imported-cluster configurations carry them, and in fields no deny-list names: only the
// allowed fields become attributes, and an operator's extra field still loses its credentials
// at any depth.
func TestAttributesNeverCarryCredentials(t *testing.T) {
	srv := rancherfake.New(t, "tok-5e6f", 10)
	c := rancherfake.Cluster("c-1", "a", "active", map[string]string{"team": "x"})
	c["rancherKubernetesEngineConfig"] = map[string]any{
		"privateRegistries": []any{map[string]any{"url": "registry.example", "user": "bot", "password": "hunter2"}},
		"cloudProvider":     map[string]any{"azureCloudProvider": map[string]any{"aadClientId": "id", "aadClientSecret": "s3cr3t-azure"}},
		"bastionHost":       map[string]any{"ssh_key": "-----BEGIN ssh", "sshAgentAuth": false, "private-key": "-----BEGIN"},
		"services":          map[string]any{"etcd": map[string]any{"key": "etcd-key-5a1b", "path": "/etcd"}},
	}
	c["importedConfig"] = map[string]any{"kubeConfig": "apiVersion: v1 # kubeconfig-9f2c", "privateRegistryURL": "registry.example"}
	c["mgmtBearerToken"] = "bearer-xyz"
	c["key"] = "top-level-key-77aa"
	c["someFieldOfANewerRancher"] = map[string]any{"auth": "newer-rancher-3c4d"}
	srv.SetClusters(c)
	secrets := []string{"hunter2", "s3cr3t-azure", "-----BEGIN", "bearer-xyz", "tok-5e6f", "etcd-key-5a1b",
		"kubeconfig-9f2c", "top-level-key-77aa", "newer-rancher-3c4d"}

	l := lister(t, srv, nil)
	l.IgnoreFields = []string{"uuid"}
	got, err := l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(got[0])
	for _, secret := range secrets {
		if strings.Contains(string(body), secret) {
			t.Errorf("cluster carries %q: %s", secret, body)
		}
	}
	for _, field := range []string{"rancherKubernetesEngineConfig", "importedConfig", "caCert", "actions", "links"} {
		if _, ok := got[0].Attributes[field]; ok {
			t.Errorf("attribute %q is not in the allow-list but was kept", field)
		}
	}
	if a := got[0].Attributes; a["provider"] != "rke" || a["driver"] != "imported" || a["labels"] == nil || a["version"] == nil {
		t.Errorf("allowed attributes missing: %v", a)
	}
	if _, ok := got[0].Attributes["uuid"]; ok {
		t.Error("an ignored field is still in the attributes")
	}

	l.ExtraFields = []string{"rancherKubernetesEngineConfig", "importedConfig", "key"}
	got, err = l.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	body, _ = json.Marshal(got[0])
	for _, secret := range secrets {
		if strings.Contains(string(body), secret) {
			t.Errorf("with extra fields, cluster carries %q: %s", secret, body)
		}
	}
	for _, kept := range []string{"registry.example", "aadClientId", "sshAgentAuth", "/etcd"} {
		if !strings.Contains(string(body), kept) {
			t.Errorf("scrubbing an extra field removed %q too", kept)
		}
	}
}

func TestSensitive(t *testing.T) {
	for field, want := range map[string]bool{
		"password": true, "aadClientSecret": true, "private_key": true, "bearerToken": true, "apiKey": true,
		"credentials": true, "kubeConfig": true, "key": true, "Key": true, "caCert": false, "monkey": false, "name": false, "sshAgentAuth": false, "keyPath": false,
	} {
		if got := rancher.Sensitive(field); got != want {
			t.Errorf("Sensitive(%q) = %t, want %t", field, got, want)
		}
	}
}

func benchLister(b *testing.B, srv *rancherfake.Server) *rancher.Lister { return lister(b, srv, nil) }

// TestRequestsPerScan counts the requests of scans of a 1,000-cluster Rancher: one GET per page
// of the server's page size, ceil(n / page size), at every scan (nothing is cached between
// scans: a listing is complete or fails).
func TestRequestsPerScan(t *testing.T) {
	for _, tt := range []struct{ clusters, pageSize, wantRequests int }{
		{1000, 100, 10},
		{1000, 1000, 1},
		{1001, 100, 11},
	} {
		t.Run(fmt.Sprintf("%d clusters in pages of %d", tt.clusters, tt.pageSize), func(t *testing.T) {
			srv := rancherfake.New(t, "tok-1", tt.pageSize)
			fleet := make([]map[string]any, tt.clusters)
			for i := range fleet {
				fleet[i] = rancherfake.Cluster(fmt.Sprintf("c-%04d", i), fmt.Sprintf("fleet-%04d", i), "active", nil)
			}
			srv.SetClusters(fleet...)
			l := lister(t, srv, nil)
			for scan := range 2 {
				before := len(srv.Requests())
				got, err := l.List(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tt.clusters {
					t.Fatalf("scan %d listed %d clusters, want %d", scan+1, len(got), tt.clusters)
				}
				if n := len(srv.Requests()) - before; n != tt.wantRequests {
					t.Errorf("scan %d: %d requests, want %d", scan+1, n, tt.wantRequests)
				}
			}
		})
	}
}
