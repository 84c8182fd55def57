package gke

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// fakeGKE reproduces the container/v1 list API (GET /v1/projects/{p}/locations/-/clusters →
// {"clusters": [...], "missingZones": [...]}, errors as Google JSON errors) and an OAuth token
// endpoint that accepts the JWT-bearer grant of a service-account key and issues a bearer token,
// which the list API then requires.
type fakeGKE struct {
	t   testing.TB
	srv *httptest.Server

	mu sync.Mutex
	// clusters by project.
	clusters map[string][]map[string]any
	// missing zones by project.
	missing map[string][]string
	// token is the bearer token the token endpoint issues; issued counts how many times.
	token  string
	issued int
	// rejectTokens makes the list API refuse every token (revoked).
	rejectTokens bool
	// refuseGrant makes the token endpoint answer invalid_grant.
	refuseGrant bool
	// fail answers every list of a project with this error; failN only the next n lists.
	fail  map[string]googleError
	failN map[string]int
	// delay delays list answers (timeouts).
	delay time.Duration
	// lists counts list requests by project.
	lists map[string]int
	// email is the service account the JWT must come from.
	email string
}

type googleError struct {
	code   int
	status string
	msg    string
}

func newFakeGKE(t testing.TB) *fakeGKE {
	f := &fakeGKE{
		t: t, token: "ya29.test-token", email: "lister@proj-a.iam.gserviceaccount.com",
		clusters: map[string][]map[string]any{}, missing: map[string][]string{},
		fail: map[string]googleError{}, failN: map[string]int{}, lists: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", f.serveToken)
	mux.HandleFunc("GET /v1/projects/{project}/locations/{location}/clusters", f.serveList)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeGKE) configure(fn func(f *fakeGKE)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// add adds a cluster in the shape the API returns.
func (f *fakeGKE) add(project, location, name, status string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lbl := map[string]any{}
	for k, v := range labels {
		lbl[k] = v
	}
	ip := fmt.Sprintf("34.1.%d.%d", len(f.clusters[project]), len(name))
	c := map[string]any{
		"name":                  name,
		"description":           "cluster " + name,
		"location":              location,
		"zone":                  location,
		"status":                status,
		"endpoint":              ip,
		"id":                    fmt.Sprintf("%x", sum(project+location+name)),
		"selfLink":              "https://container.googleapis.com/v1/projects/" + project + "/locations/" + location + "/clusters/" + name,
		"currentMasterVersion":  "1.30.5-gke.1014001",
		"currentNodeVersion":    "1.30.5-gke.1014001",
		"initialClusterVersion": "1.29.1-gke.1589018",
		"currentNodeCount":      3,
		"network":               "default",
		"subnetwork":            "default",
		"clusterIpv4Cidr":       "10.4.0.0/14",
		"servicesIpv4Cidr":      "34.118.224.0/20",
		"createTime":            "2024-05-01T10:00:00+00:00",
		"etag":                  "etag-" + name,
		"resourceLabels":        lbl,
		"releaseChannel":        map[string]any{"channel": "REGULAR"},
		"autopilot":             map[string]any{"enabled": strings.HasPrefix(name, "auto")},
		"masterAuth": map[string]any{
			"clusterCaCertificate": base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\nMIIC" + name + "\n-----END CERTIFICATE-----\n")),
			"password":             "legacy-basic-auth-password",
		},
		"nodePools":  []any{map[string]any{"name": "default-pool", "status": "RUNNING", "initialNodeCount": 3}},
		"conditions": []any{map[string]any{"code": "GCE_QUOTA_EXCEEDED", "message": "quota"}},
	}
	f.clusters[project] = append(f.clusters[project], c)
}

func sum(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return h
}

// serveToken implements the OAuth 2.0 JWT-bearer grant (RFC 7523) as Google's token endpoint
// does for service-account keys: it checks the assertion's claims and answers a bearer token.
func (f *fakeGKE) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuseGrant || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "Invalid JWT Signature."})
		return
	}
	parts := strings.Split(r.Form.Get("assertion"), ".")
	if len(parts) != 3 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "not a JWT"})
		return
	}
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Iss, Scope, Aud string
	}
	_ = json.Unmarshal(payload, &claims)
	if claims.Iss != f.email || !strings.Contains(claims.Scope, "https://www.googleapis.com/auth/cloud-platform") || claims.Aud != f.srv.URL+"/token" {
		f.t.Errorf("JWT claims = %+v", claims)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "bad claims"})
		return
	}
	f.issued++
	writeJSON(w, http.StatusOK, map[string]any{"access_token": f.token, "token_type": "Bearer", "expires_in": 3600})
}

func (f *fakeGKE) serveList(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	delay := f.delay
	f.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	project, location := r.PathValue("project"), r.PathValue("location")
	f.lists[project]++
	if f.rejectTokens || r.Header.Get("Authorization") != "Bearer "+f.token {
		googleErr(w, googleError{401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token."})
		return
	}
	if location != "-" {
		f.t.Errorf("listed location %q, want -", location)
	}
	if e, ok := f.fail[project]; ok {
		googleErr(w, e)
		return
	}
	if e, ok := f.fail[project+"#once"]; ok && f.failN[project] > 0 {
		f.failN[project]--
		googleErr(w, e)
		return
	}
	body := map[string]any{}
	if cs := f.clusters[project]; len(cs) > 0 {
		body["clusters"] = cs
	}
	if mz := f.missing[project]; len(mz) > 0 {
		body["missingZones"] = mz
	}
	writeJSON(w, http.StatusOK, body)
}

func googleErr(w http.ResponseWriter, e googleError) {
	writeJSON(w, e.code, map[string]any{"error": map[string]any{"code": e.code, "message": e.msg, "status": e.status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// keyJSON makes a service-account key whose token_uri is the fake's token endpoint.
func (f *fakeGKE) keyJSON(t testing.TB) []byte {
	t.Helper()
	der, err := testKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type":           "service_account",
		"project_id":     "proj-a",
		"private_key_id": "0123456789abcdef",
		"private_key":    string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email":   f.email,
		"client_id":      "1234567890",
		"auth_uri":       "https://accounts.google.com/o/oauth2/auth",
		"token_uri":      f.srv.URL + "/token",
	})
	return b
}

// testKey is one RSA key for the whole test binary (generating one is slow under -race).
var testKey = sync.OnceValues(func() ([]byte, error) {
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKCS8PrivateKey(pk)
})

func newTestLister(t testing.TB, f *fakeGKE, mod func(*Options)) (*Lister, *prometheus.CounterVec) {
	t.Helper()
	creds, err := ParseSecret(map[string][]byte{KeyServiceAccount: f.keyJSON(t)})
	if err != nil {
		t.Fatal(err)
	}
	calls := NewCallsCounter(prometheus.NewRegistry())
	opts := Options{
		Projects:    []string{"proj-a"},
		Credentials: func(context.Context) (Credentials, error) { return creds, nil },
		Endpoint:    f.srv.URL + "/",
		Backoff:     time.Millisecond,
		Calls:       calls,
	}
	if mod != nil {
		mod(&opts)
	}
	return NewLister(opts), calls
}

func listOK(t *testing.T, l *Lister) []events.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clusters, err := l.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return clusters
}

func names(clusters []events.Cluster) []string {
	out := make([]string, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.Name)
	}
	sort.Strings(out)
	return out
}

func TestParseSecret(t *testing.T) {
	f := newFakeGKE(t)
	good := f.keyJSON(t)
	var m map[string]any
	_ = json.Unmarshal(good, &m)
	with := func(k string, v any) []byte {
		c := map[string]any{}
		for kk, vv := range m {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		b, _ := json.Marshal(c)
		return b
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{name: "service-account key", data: good},
		{name: "missing", data: nil, wantErr: `"key.json" is missing`},
		{name: "not JSON", data: []byte("-----BEGIN PRIVATE KEY-----"), wantErr: "not JSON"},
		{name: "external account", data: with("type", "external_account"), wantErr: `type "external_account"`},
		{name: "no email", data: with("client_email", nil), wantErr: "no client_email"},
		{name: "no private key", data: with("private_key", "nope"), wantErr: "no PEM private_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseSecret(map[string][]byte{KeyServiceAccount: tt.data})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "PRIVATE KEY") {
					t.Fatalf("error shows the key: %v", err)
				}
				return
			}
			if err != nil || c.ProjectID != "proj-a" || len(c.KeyJSON) == 0 {
				t.Fatalf("ParseSecret = %v, %v", c, err)
			}
			if s := fmt.Sprintf("%v %+v %#v", c, c, c); strings.Contains(s, "PRIVATE") {
				t.Fatalf("formatting shows the key: %s", s)
			}
		})
	}
}

func TestValidateFilters(t *testing.T) {
	tests := []struct {
		filters map[string]string
		wantErr string
	}{
		{filters: nil},
		{filters: map[string]string{"location": "europe-*", "resourceLabels.env": "prod", "status": "RUNNING", "autopilot.enabled": "true"}},
		{filters: map[string]string{"labels.env": "prod"}, wantErr: `unsupported key "labels.env"`},
		{filters: map[string]string{"resourceLabels.": "x"}, wantErr: `unsupported key "resourceLabels."`},
		{filters: map[string]string{"nodePools.name": "x"}, wantErr: `unsupported key "nodePools.name"`},
		{filters: map[string]string{"name": "[a-"}, wantErr: `key "name": pattern "[a-" is not a valid glob`},
	}
	for _, tt := range tests {
		err := ValidateFilters(tt.filters)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("ValidateFilters(%v) = %v, want %q", tt.filters, err, tt.wantErr)
		}
	}
}

func TestSourceFilters(t *testing.T) {
	got := SourceFilters([]string{"b", "a", "b"}, map[string]string{"location": "eu*"})
	if len(got) != 2 || got["projects"] != "a,b" || got["location"] != "eu*" {
		t.Fatalf("SourceFilters = %v", got)
	}
	if SourceFilters(nil, nil) != nil {
		t.Fatal("SourceFilters(nil, nil) is not nil")
	}
}

func TestEligible(t *testing.T) {
	for status, want := range map[string]bool{
		"RUNNING": true, "RECONCILING": true, "PROVISIONING": false, "DEGRADED": false, "ERROR": false, "STOPPING": false, "": false,
	} {
		if Eligible(status) != want {
			t.Errorf("Eligible(%q) != %t", status, want)
		}
	}
}

// TestListShapeAndToken lists two projects through the real client: the key's JWT is exchanged
// once at the fake token endpoint, the bearer token is sent, and clusters have their shape.
func TestListShapeAndToken(t *testing.T) {
	f := newFakeGKE(t)
	f.add("proj-a", "europe-west1", "prod", "RUNNING", map[string]string{"env": "prod"})
	f.add("proj-a", "europe-west1-b", "building", "PROVISIONING", nil)
	f.add("proj-b", "us-central1", "reconciling", "RECONCILING", nil)
	f.add("proj-b", "us-central1", "broken", "ERROR", nil)
	l, calls := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-b", "proj-a"} })

	clusters := listOK(t, l)
	if got := names(clusters); strings.Join(got, ",") != "broken,building,prod,reconciling" {
		t.Fatalf("names = %v", got)
	}
	listOK(t, l)
	if f.issued != 1 {
		t.Errorf("tokens issued = %d, want 1 (the client keeps its token between scans)", f.issued)
	}
	if f.lists["proj-a"] != 2 || f.lists["proj-b"] != 2 {
		t.Errorf("lists = %v, want one per project and scan", f.lists)
	}
	if got := testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")); got != 4 {
		t.Errorf("counted successes = %v, want 4", got)
	}

	eligible := map[string]bool{}
	var prod events.Cluster
	for _, c := range clusters {
		eligible[c.Name] = c.Eligible
		if c.Name == "prod" {
			prod = c
		}
	}
	if want := map[string]bool{"prod": true, "reconciling": true, "building": false, "broken": false}; fmt.Sprint(eligible) != fmt.Sprint(want) {
		t.Errorf("eligible = %v, want %v", eligible, want)
	}
	if prod.Key != "projects/proj-a/locations/europe-west1/clusters/prod" || prod.URL != "https://34.1.0.4" ||
		prod.State != "RUNNING" || prod.Labels["env"] != "prod" {
		t.Errorf("prod = %+v", prod)
	}
	a := prod.Attributes
	for k, v := range map[string]any{
		"name": "prod", "url": "https://34.1.0.4", "location": "europe-west1", "project": "proj-a",
		"currentMasterVersion": "1.30.5-gke.1014001", "status": "RUNNING", "network": "default",
		"selfLink":               "https://container.googleapis.com/v1/projects/proj-a/locations/europe-west1/clusters/prod",
		AttrArgoCDExecCommand:    "argocd-k8s-auth",
		AttrArgoCDExecAPIVersion: "client.authentication.k8s.io/v1beta1",
	} {
		if a[k] != v {
			t.Errorf("attribute %s = %#v, want %#v", k, a[k], v)
		}
	}
	if a["id"] == "" || a["id"] == nil {
		t.Errorf("attribute id is empty")
	}
	if rl, _ := a["resourceLabels"].(map[string]any); rl["env"] != "prod" {
		t.Errorf("attribute resourceLabels = %#v", a["resourceLabels"])
	}
	if rc, _ := a["releaseChannel"].(map[string]any); rc["channel"] != "REGULAR" {
		t.Errorf("attribute releaseChannel = %#v", a["releaseChannel"])
	}
	if ca, _ := a[AttrArgoCDCAData].(string); !strings.HasPrefix(ca, "LS0tLS1CRUdJTi") {
		t.Errorf("attribute %s = %q", AttrArgoCDCAData, ca)
	}
	if args, _ := a[AttrArgoCDExecArgs].([]any); len(args) != 1 || args[0] != "gcp" {
		t.Errorf("attribute %s = %#v", AttrArgoCDExecArgs, a[AttrArgoCDExecArgs])
	}
	for _, k := range VolatileFields {
		if _, ok := a[k]; ok {
			t.Errorf("volatile attribute %s is set", k)
		}
	}
	if b, _ := json.Marshal(clusters); strings.Contains(string(b), "legacy-basic-auth-password") {
		t.Error("the masterAuth password reached the clusters")
	}
}

// TestFilters: gcloud-style dotted keys with globs; all must match.
func TestFilters(t *testing.T) {
	f := newFakeGKE(t)
	f.add("proj-a", "europe-west1", "prod-eu", "RUNNING", map[string]string{"env": "prod"})
	f.add("proj-a", "europe-west4-a", "dev-eu", "RUNNING", map[string]string{"env": "dev"})
	f.add("proj-a", "us-central1", "prod-us", "RUNNING", map[string]string{"env": "prod"})
	f.add("proj-a", "us-central1", "autopilot-1", "PROVISIONING", nil)
	f.add("proj-b", "europe-west1", "other", "RUNNING", map[string]string{"env": "prod"})
	tests := []struct {
		filters map[string]string
		want    string
	}{
		{nil, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"location": "europe-*"}, "dev-eu,other,prod-eu"},
		{map[string]string{"location": "europe-west?"}, "other,prod-eu"},
		{map[string]string{"resourceLabels.env": "prod"}, "other,prod-eu,prod-us"},
		{map[string]string{"resourceLabels.env": "*"}, "dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"resourceLabels.env": "prod", "location": "us-*"}, "prod-us"},
		{map[string]string{"status": "RUNNING", "name": "*-eu"}, "dev-eu,prod-eu"},
		{map[string]string{"autopilot.enabled": "true"}, "autopilot-1"},
		{map[string]string{"project": "proj-b"}, "other"},
		{map[string]string{"currentMasterVersion": "1.30.*"}, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"releaseChannel.channel": "[RS]*"}, "autopilot-1,dev-eu,other,prod-eu,prod-us"},
		{map[string]string{"name": "nothing"}, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.filters), func(t *testing.T) {
			l, _ := newTestLister(t, f, func(o *Options) { o.Projects = []string{"proj-a", "proj-b"}; o.Filters = tt.filters })
			if got := strings.Join(names(listOK(t, l)), ","); got != tt.want {
				t.Fatalf("listed %q, want %q", got, tt.want)
			}
		})
	}
	l, _ := newTestLister(t, f, func(o *Options) { o.Filters = map[string]string{"labels.env": "prod"} })
	_, err := l.List(context.Background())
	if scanner.ReasonOf(err) != events.DegradedInvalidSpec || !strings.Contains(err.Error(), `"labels.env"`) {
		t.Fatalf("unsupported filter: %v", err)
	}
}

// TestFailures: every failure (and a partial answer) makes the whole listing an error with the
// right reason.
func TestFailures(t *testing.T) {
	tests := []struct {
		name       string
		setup      func(f *fakeGKE)
		projects   []string
		timeout    time.Duration
		wantReason string
		wantMsg    string
		wantLists  int // list requests to proj-a (0: not checked)
	}{
		{name: "missing zones", setup: func(f *fakeGKE) { f.missing["proj-a"] = []string{"us-east1-c", "europe-west1-b"} },
			wantReason: events.DegradedPartial, wantMsg: "misses zones europe-west1-b, us-east1-c"},
		{name: "permission denied", setup: func(f *fakeGKE) {
			f.fail["proj-a"] = googleError{403, "PERMISSION_DENIED", "Required 'container.clusters.list' permission for 'projects/proj-a'."}
		}, wantReason: events.DegradedUnauthorized, wantMsg: "container.clusters.list", wantLists: 1},
		{name: "token not accepted", setup: func(f *fakeGKE) { f.rejectTokens = true },
			wantReason: events.DegradedUnauthorized, wantMsg: "401"},
		{name: "token refused", setup: func(f *fakeGKE) { f.refuseGrant = true },
			wantReason: events.DegradedUnauthorized, wantMsg: "invalid_grant"},
		{name: "throttled beyond the retries", setup: func(f *fakeGKE) {
			f.fail["proj-a"] = googleError{429, "RESOURCE_EXHAUSTED", "Quota exceeded for quota metric 'Read requests'."}
		}, wantReason: events.DegradedListFailed, wantMsg: "Quota exceeded", wantLists: 4},
		{name: "server error", setup: func(f *fakeGKE) {
			f.fail["proj-a"] = googleError{503, "UNAVAILABLE", "The service is currently unavailable."}
		},
			wantReason: events.DegradedListFailed, wantMsg: "503", wantLists: 4},
		{name: "one project of two fails", projects: []string{"proj-a", "proj-b"}, setup: func(f *fakeGKE) {
			f.fail["proj-b"] = googleError{500, "INTERNAL", "Internal error."}
		}, wantReason: events.DegradedPartial, wantMsg: "project proj-b"},
		{name: "not found project", setup: func(f *fakeGKE) { f.fail["proj-a"] = googleError{404, "NOT_FOUND", "Project not found."} },
			wantReason: events.DegradedListFailed, wantMsg: "Project not found", wantLists: 1},
		{name: "timeout", setup: func(f *fakeGKE) { f.delay = 5 * time.Second }, timeout: 300 * time.Millisecond,
			wantReason: events.DegradedListFailed, wantMsg: "deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeGKE(t)
			f.add("proj-a", "europe-west1", "a", "RUNNING", nil)
			f.add("proj-b", "europe-west1", "b", "RUNNING", nil)
			f.configure(tt.setup)
			l, _ := newTestLister(t, f, func(o *Options) {
				if tt.projects != nil {
					o.Projects = tt.projects
				}
			})
			timeout := tt.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			clusters, err := l.List(ctx)
			if err == nil || clusters != nil {
				t.Fatalf("List = %d clusters, %v; want an error only", len(clusters), err)
			}
			t.Logf("error: %v", err)
			if got := scanner.ReasonOf(err); got != tt.wantReason {
				t.Errorf("reason = %s, want %s (%v)", got, tt.wantReason, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), f.token) {
				t.Errorf("error shows a secret: %v", err)
			}
			if tt.wantLists > 0 && f.lists["proj-a"] != tt.wantLists {
				t.Errorf("list requests = %d, want %d", f.lists["proj-a"], tt.wantLists)
			}
		})
	}
}

// TestRetriedThenComplete: a 429 then a 200 is a complete listing, counted as one throttled and
// one successful call.
func TestRetriedThenComplete(t *testing.T) {
	f := newFakeGKE(t)
	f.add("proj-a", "europe-west1", "a", "RUNNING", nil)
	f.configure(func(f *fakeGKE) {
		f.fail["proj-a#once"] = googleError{429, "RESOURCE_EXHAUSTED", "Quota exceeded."}
		f.failN["proj-a"] = 1
	})
	l, calls := newTestLister(t, f, nil)
	if got := len(listOK(t, l)); got != 1 {
		t.Fatalf("listed %d", got)
	}
	if testutil.ToFloat64(calls.WithLabelValues("ListClusters", "throttled")) != 1 || testutil.ToFloat64(calls.WithLabelValues("ListClusters", "success")) != 1 {
		t.Fatalf("calls not counted as throttled + success")
	}
}

// TestProjectDefaultsAndErrors: no project falls back to the key's project_id; the Credentials
// callback's error comes back unchanged.
func TestProjectDefaultsAndErrors(t *testing.T) {
	f := newFakeGKE(t)
	f.add("proj-a", "europe-west1", "a", "RUNNING", nil)
	l, _ := newTestLister(t, f, func(o *Options) { o.Projects = nil })
	if got := names(listOK(t, l)); len(got) != 1 {
		t.Fatalf("names = %v", got)
	}
	want := scanner.Degradedf(events.DegradedSecretInvalid, "Secret ns/gke not found")
	l, _ = newTestLister(t, f, func(o *Options) {
		o.Credentials = func(context.Context) (Credentials, error) { return Credentials{}, want }
	})
	if _, err := l.List(context.Background()); !errors.Is(err, want) {
		t.Fatalf("err = %v", err)
	}
}

// TestApplicationDefaultCredentials: without a Secret the client finds its credentials the
// application-default way (here GOOGLE_APPLICATION_CREDENTIALS naming a key file).
func TestApplicationDefaultCredentials(t *testing.T) {
	f := newFakeGKE(t)
	f.add("proj-a", "europe-west1", "adc", "RUNNING", nil)
	file := filepath.Join(t.TempDir(), "key.json")
	if err := os.WriteFile(file, f.keyJSON(t), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", file)
	l, _ := newTestLister(t, f, func(o *Options) { o.Credentials = nil })
	if got := names(listOK(t, l)); len(got) != 1 || got[0] != "adc" {
		t.Fatalf("names = %v", got)
	}
	if f.issued != 1 {
		t.Fatalf("tokens issued = %d", f.issued)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewCallsCounter(reg).WithLabelValues("ListClusters", "success").Inc()
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}
