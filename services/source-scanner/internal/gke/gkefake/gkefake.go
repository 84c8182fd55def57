// Package gkefake is a Google container/v1 API compatible HTTP server for tests of the gke lister
// and of the source-scanner service: the real google.golang.org/api client talks to it through
// option.WithEndpoint, and service-account keys made by KeyJSON get their OAuth token from it.
// It is a fake of a cloud API, which the brief allows; NATS and Kubernetes are never faked.
package gkefake

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server reproduces the container/v1 list API (GET /v1/projects/{p}/locations/-/clusters →
// {"clusters": [...], "missingZones": [...]}, errors as Google JSON errors) and an OAuth token
// endpoint that accepts the JWT-bearer grant of a service-account key and issues a bearer token,
// which the list API then requires.
//
// Fields are guarded by the server's lock: change them in a Configure callback once it runs.
type Server struct {
	*httptest.Server
	t testing.TB

	mu sync.Mutex
	// Clusters by project.
	Clusters map[string][]map[string]any
	// Missing zones by project.
	Missing map[string][]string
	// Token is the bearer token the token endpoint issues; Issued counts how many times.
	Token  string
	Issued int
	// RejectTokens makes the list API refuse every token (revoked).
	RejectTokens bool
	// RefuseGrant makes the token endpoint answer invalid_grant.
	RefuseGrant bool
	// Fail answers every list of a project with this error; FailN only the next n lists of the
	// error under "<project>#once".
	Fail  map[string]Error
	FailN map[string]int
	// Delay delays list answers (timeouts).
	Delay time.Duration
	// Lists counts list requests by project.
	Lists map[string]int
	// Email is the service account the JWT must come from.
	Email string
}

// Error is a Google API error answer: HTTP status code, status name and message.
type Error struct {
	Code   int
	Status string
	Msg    string
}

// New starts a fake container API (plain HTTP; use URL+"/" as the client's endpoint). It stops
// when the test ends.
func New(t testing.TB) *Server {
	f := &Server{
		t: t, Token: "ya29.test-token", Email: "lister@proj-a.iam.gserviceaccount.com",
		Clusters: map[string][]map[string]any{}, Missing: map[string][]string{},
		Fail: map[string]Error{}, FailN: map[string]int{}, Lists: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", f.serveToken)
	mux.HandleFunc("GET /v1/projects/{project}/locations/{location}/clusters", f.serveList)
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// Configure runs fn under the server's lock, to change its fields.
func (f *Server) Configure(fn func(f *Server)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// Add adds a cluster in the shape the API returns.
func (f *Server) Add(project, location, name, status string, labels map[string]string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	lbl := map[string]any{}
	for k, v := range labels {
		lbl[k] = v
	}
	ip := fmt.Sprintf("34.1.%d.%d", len(f.Clusters[project]), len(name))
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
	f.Clusters[project] = append(f.Clusters[project], c)
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
func (f *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.RefuseGrant || r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" {
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
	if claims.Iss != f.Email || !strings.Contains(claims.Scope, "https://www.googleapis.com/auth/cloud-platform") || claims.Aud != f.URL+"/token" {
		f.t.Errorf("JWT claims = %+v", claims)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_grant", "error_description": "bad claims"})
		return
	}
	f.Issued++
	writeJSON(w, http.StatusOK, map[string]any{"access_token": f.Token, "token_type": "Bearer", "expires_in": 3600})
}

func (f *Server) serveList(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	delay := f.Delay
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
	f.Lists[project]++
	if f.RejectTokens || r.Header.Get("Authorization") != "Bearer "+f.Token {
		writeError(w, Error{401, "UNAUTHENTICATED", "Request had invalid authentication credentials. Expected OAuth 2 access token."})
		return
	}
	if location != "-" {
		f.t.Errorf("listed location %q, want -", location)
	}
	if e, ok := f.Fail[project]; ok {
		writeError(w, e)
		return
	}
	if e, ok := f.Fail[project+"#once"]; ok && f.FailN[project] > 0 {
		f.FailN[project]--
		writeError(w, e)
		return
	}
	body := map[string]any{}
	if cs := f.Clusters[project]; len(cs) > 0 {
		body["clusters"] = cs
	}
	if mz := f.Missing[project]; len(mz) > 0 {
		body["missingZones"] = mz
	}
	writeJSON(w, http.StatusOK, body)
}

func writeError(w http.ResponseWriter, e Error) {
	writeJSON(w, e.Code, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Msg, "status": e.Status}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// KeyJSON makes a service-account key whose token_uri is the fake's token endpoint.
func (f *Server) KeyJSON(t testing.TB) []byte {
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
		"client_email":   f.Email,
		"client_id":      "1234567890",
		"auth_uri":       "https://accounts.google.com/o/oauth2/auth",
		"token_uri":      f.URL + "/token",
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
