// Package aksfake is an Azure Resource Manager and Microsoft Entra token endpoint compatible
// HTTPS server for tests of the aks lister and of the source-scanner service: the real
// armcontainerservice client and azidentity credentials talk to it (the ARM endpoint and the
// authority host both point at it; azcore sends bearer tokens only over TLS, so it serves
// HTTPS with its own CA, CACertPEM). It is a fake of a cloud API, which the brief allows; NATS
// and Kubernetes are never faked.
package aksfake

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Test credentials the token endpoint accepts.
const (
	TenantID       = "00000000-0000-0000-0000-0000000000aa"
	ClientID       = "11111111-1111-1111-1111-1111111111bb"
	ClientSecret   = "fake-client-secret~value"
	FederatedToken = "fake.federated.service-account-token"
)

// Server reproduces the ARM managedClusters list APIs (per subscription and per resource group,
// paged with an absolute nextLink as ARM does), listClusterUserCredential (a kubeconfig in
// base64), ARM's JSON errors and throttling (429 with Retry-After), and Microsoft Entra's
// OpenID configuration and v2.0 token endpoint (client-credentials grant with a client secret or
// a federated client assertion, as workload identity sends it). The list APIs require the bearer
// token it issued.
//
// Fields are guarded by the server's lock: change them in a Configure callback once it runs.
type Server struct {
	*httptest.Server
	t testing.TB

	mu sync.Mutex
	// Clusters by subscription (lower-case), in list order.
	Clusters map[string][]map[string]any
	// PageSize is the number of clusters per page (default 2, so that paging is exercised).
	PageSize int
	// Token is the bearer token the token endpoint issues; Issued counts how many times.
	Token  string
	Issued int
	// RejectTokens makes ARM answer 401 InvalidAuthenticationToken (revoked).
	RejectTokens bool
	// Fail answers every list of a scope ("<sub>" or "<sub>/<rg>") with this error.
	Fail map[string]Error
	// FailPage answers page n (0-based) of a subscription's list with this error: a listing that
	// breaks in the middle.
	FailPage map[string]PageError
	// Throttle answers the next n lists of a subscription with 429 and Retry-After (seconds).
	Throttle map[string]Throttle
	// Malformed answers a subscription's list with a body that is not JSON.
	Malformed map[string]bool
	// LoopNextLink makes a subscription's pages link back to their own page.
	LoopNextLink map[string]bool
	// CredFail answers listClusterUserCredential of a cluster (by name) with this error.
	CredFail map[string]Error
	// Lists counts list requests by scope; Creds counts credential requests by cluster name.
	Lists map[string]int
	Creds map[string]int
}

// Error is an ARM error answer.
type Error struct {
	Status int
	Code   string
	Msg    string
}

// PageError fails one page.
type PageError struct {
	Page int
	Error
}

// Throttle is a run of 429 answers.
type Throttle struct {
	N          int
	RetryAfter int
}

// New starts a fake ARM and token endpoint over HTTPS. It stops when the test ends.
func New(t testing.TB) *Server {
	f := &Server{
		t: t, Token: "eyJ0eXAiOiJKV1QiLCJhbGciOiJub25lIn0.fake-arm-token.", PageSize: 2,
		Clusters: map[string][]map[string]any{}, Fail: map[string]Error{}, FailPage: map[string]PageError{},
		Throttle: map[string]Throttle{}, Malformed: map[string]bool{}, LoopNextLink: map[string]bool{},
		CredFail: map[string]Error{}, Lists: map[string]int{}, Creds: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{tenant}/v2.0/.well-known/openid-configuration", f.serveOpenID)
	mux.HandleFunc("POST /{tenant}/oauth2/v2.0/token", f.serveToken)
	mux.HandleFunc("GET /subscriptions/{sub}/providers/Microsoft.ContainerService/managedClusters", f.serveList)
	mux.HandleFunc("GET /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters", f.serveList)
	mux.HandleFunc("POST /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerService/managedClusters/{name}/listClusterUserCredential", f.serveCredential)
	f.Server = httptest.NewTLSServer(mux)
	t.Cleanup(f.Close)
	return f
}

// CACertPEM is the PEM of the certificate the server presents (self-signed: its own CA).
func (f *Server) CACertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.Certificate().Raw})
}

// Configure runs fn under the server's lock, to change its fields.
func (f *Server) Configure(fn func(f *Server)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// ClusterCAPEM is the CA certificate PEM the fake's kubeconfig of a cluster carries.
func ClusterCAPEM(name string) []byte {
	sum := sha256.Sum256([]byte(name))
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: append([]byte("fake CA of "+name+" "), sum[:]...)})
}

// Add adds a managed cluster in the shape ARM returns it. The id spells "resourcegroups" in
// lower case, as ARM's list answers often do; provisioningState is e.g. "Succeeded",
// "Creating", "Updating"; powerState "Running" or "Stopped".
func (f *Server) Add(sub, rg, name, provisioningState, powerState string, tags map[string]string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	tg := map[string]any{}
	for k, v := range tags {
		tg[k] = v
	}
	sub = strings.ToLower(sub)
	fqdn := fmt.Sprintf("%s-dns-%08x.hcp.westeurope.azmk8s.io", strings.ToLower(name), len(f.Clusters[sub])+len(name)*1000)
	c := map[string]any{
		"id":       "/subscriptions/" + sub + "/resourcegroups/" + rg + "/providers/Microsoft.ContainerService/managedClusters/" + name,
		"name":     name,
		"type":     "Microsoft.ContainerService/ManagedClusters",
		"location": "westeurope",
		"tags":     tg,
		"sku":      map[string]any{"name": "Base", "tier": "Free"},
		"identity": map[string]any{"type": "SystemAssigned", "principalId": "22222222-0000-0000-0000-000000000001", "tenantId": TenantID},
		"properties": map[string]any{
			"provisioningState":        provisioningState,
			"powerState":               map[string]any{"code": powerState},
			"kubernetesVersion":        "1.30",
			"currentKubernetesVersion": "1.30.5",
			"dnsPrefix":                strings.ToLower(name) + "-dns",
			"fqdn":                     fqdn,
			"azurePortalFQDN":          "portal-" + fqdn,
			"agentPoolProfiles": []any{map[string]any{"name": "nodepool1", "count": 3, "vmSize": "Standard_D2s_v3",
				"provisioningState": provisioningState, "powerState": map[string]any{"code": powerState}, "mode": "System"}},
			"nodeResourceGroup":       "MC_" + rg + "_" + name + "_westeurope",
			"enableRBAC":              true,
			"aadProfile":              map[string]any{"managed": true, "enableAzureRBAC": true, "tenantID": TenantID},
			"oidcIssuerProfile":       map[string]any{"enabled": true, "issuerURL": "https://westeurope.oic.prod-aks.azure.com/" + TenantID + "/" + name + "/"},
			"networkProfile":          map[string]any{"networkPlugin": "azure", "serviceCidr": "10.0.0.0/16", "dnsServiceIP": "10.0.0.10"},
			"servicePrincipalProfile": map[string]any{"clientId": "msi", "secret": "legacy-sp-secret"},
			"windowsProfile":          map[string]any{"adminUsername": "azureuser", "adminPassword": "legacy-windows-password"},
			"resourceUID":             fmt.Sprintf("%024x", len(name)),
			"maxAgentPools":           100,
		},
	}
	f.Clusters[sub] = append(f.Clusters[sub], c)
	return c
}

// SetState changes a cluster's provisioning and power state.
func (f *Server) SetState(sub, name, provisioningState, powerState string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.Clusters[strings.ToLower(sub)] {
		if c["name"] == name {
			p := c["properties"].(map[string]any)
			p["provisioningState"], p["powerState"] = provisioningState, map[string]any{"code": powerState}
		}
	}
}

// Remove deletes a cluster.
func (f *Server) Remove(sub, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sub = strings.ToLower(sub)
	cs := f.Clusters[sub][:0]
	for _, c := range f.Clusters[sub] {
		if c["name"] != name {
			cs = append(cs, c)
		}
	}
	f.Clusters[sub] = cs
}

func (f *Server) serveOpenID(w http.ResponseWriter, r *http.Request) {
	base := f.URL + "/" + r.PathValue("tenant")
	writeJSON(w, http.StatusOK, map[string]any{
		"token_endpoint":         base + "/oauth2/v2.0/token",
		"authorization_endpoint": base + "/oauth2/v2.0/authorize",
		"issuer":                 base + "/v2.0",
	})
}

// serveToken implements the client-credentials grant of Microsoft Entra's v2.0 endpoint: a
// client secret, or a client assertion (the federated token workload identity mounts).
func (f *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	refuse := func(code, desc string) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": code, "error_description": desc, "error_codes": []int{7000215}})
	}
	switch {
	case r.PathValue("tenant") != TenantID:
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "invalid_request", "error_description": "AADSTS90002: Tenant not found."})
		return
	case r.Form.Get("grant_type") != "client_credentials" || r.Form.Get("client_id") != ClientID:
		refuse("unauthorized_client", "AADSTS700016: Application not found in the directory.")
		return
	case r.Form.Get("client_secret") != "":
		if r.Form.Get("client_secret") != ClientSecret {
			refuse("invalid_client", "AADSTS7000215: Invalid client secret provided.")
			return
		}
	case r.Form.Get("client_assertion") != "":
		if r.Form.Get("client_assertion") != FederatedToken || r.Form.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
			refuse("invalid_client", "AADSTS700211: No matching federated identity record found for presented assertion issuer.")
			return
		}
	default:
		refuse("invalid_client", "AADSTS7000216: 'client_assertion', 'client_secret' or 'request' is required.")
		return
	}
	if !slices.ContainsFunc(strings.Fields(r.Form.Get("scope")), func(s string) bool { return strings.HasSuffix(s, "/.default") }) {
		f.t.Errorf("token scope = %q, want <resource>/.default", r.Form.Get("scope"))
	}
	f.Issued++
	writeJSON(w, http.StatusOK, map[string]any{"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599, "access_token": f.Token})
}

func (f *Server) authorized(w http.ResponseWriter, r *http.Request) bool {
	if f.RejectTokens || r.Header.Get("Authorization") != "Bearer "+f.Token {
		writeError(w, Error{http.StatusUnauthorized, "InvalidAuthenticationToken", "The access token is invalid."})
		return false
	}
	if r.URL.Query().Get("api-version") == "" {
		writeError(w, Error{http.StatusBadRequest, "MissingApiVersionParameter", "The api-version query parameter (?api-version=) is required for all requests."})
		return false
	}
	return true
}

func (f *Server) serveList(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sub, rg := strings.ToLower(r.PathValue("sub")), r.PathValue("rg")
	scope := sub
	if rg != "" {
		scope = sub + "/" + strings.ToLower(rg)
	}
	f.Lists[scope]++
	if !f.authorized(w, r) {
		return
	}
	if th := f.Throttle[sub]; th.N > 0 {
		th.N--
		f.Throttle[sub] = th
		w.Header().Set("Retry-After", strconv.Itoa(th.RetryAfter))
		writeError(w, Error{http.StatusTooManyRequests, "TooManyRequests", "The request is being throttled."})
		return
	}
	if e, ok := f.Fail[scope]; ok {
		writeError(w, e)
		return
	}
	if f.Malformed[sub] {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"value": [{"id": "/subscriptions/` + sub + `/res`))
		return
	}
	var all []map[string]any
	for _, c := range f.Clusters[sub] {
		if rg == "" || strings.EqualFold(resourceGroup(c), rg) {
			all = append(all, c)
		}
	}
	page := 0
	if s := r.URL.Query().Get("$skipToken"); s != "" {
		page, _ = strconv.Atoi(s)
	}
	if pe, ok := f.FailPage[sub]; ok && pe.Page == page {
		writeError(w, pe.Error)
		return
	}
	size := max(f.PageSize, 1)
	lo, hi := min(page*size, len(all)), min((page+1)*size, len(all))
	body := map[string]any{"value": all[lo:hi]}
	next := page + 1
	if f.LoopNextLink[sub] {
		next = page
	}
	if hi < len(all) || f.LoopNextLink[sub] {
		q := r.URL.Query()
		q.Set("$skipToken", strconv.Itoa(next))
		body["nextLink"] = f.URL + r.URL.Path + "?" + q.Encode()
	}
	writeJSON(w, http.StatusOK, body)
}

func resourceGroup(c map[string]any) string {
	parts := strings.Split(c["id"].(string), "/")
	return parts[4]
}

func (f *Server) serveCredential(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	name := r.PathValue("name")
	f.Creds[name]++
	if !f.authorized(w, r) {
		return
	}
	if e, ok := f.CredFail[name]; ok {
		writeError(w, e)
		return
	}
	var found map[string]any
	for _, c := range f.Clusters[strings.ToLower(r.PathValue("sub"))] {
		if c["name"] == name && strings.EqualFold(resourceGroup(c), r.PathValue("rg")) {
			found = c
		}
	}
	if found == nil {
		writeError(w, Error{http.StatusNotFound, "ResourceNotFound", "The Resource 'Microsoft.ContainerService/managedClusters/" + name + "' was not found."})
		return
	}
	fqdn := found["properties"].(map[string]any)["fqdn"]
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: %s
    server: https://%s:443
  name: %s
contexts:
- context: {cluster: %s, user: clusterUser_%s}
  name: %s
current-context: %s
users:
- name: clusterUser_%s
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: kubelogin
      args: [get-token, --login, devicecode, --server-id, 6dae42f8-4368-4678-94ff-3960e28e3630]
`, base64.StdEncoding.EncodeToString(ClusterCAPEM(name)), fqdn, name, name, name, name, name, name)
	writeJSON(w, http.StatusOK, map[string]any{"kubeconfigs": []any{map[string]any{
		"name": "clusterUser", "value": base64.StdEncoding.EncodeToString([]byte(kubeconfig)),
	}}})
}

// Scopes returns the listed scopes, sorted (for test messages).
func (f *Server) Scopes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for s := range f.Lists {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func writeError(w http.ResponseWriter, e Error) {
	writeJSON(w, e.Status, map[string]any{"error": map[string]any{"code": e.Code, "message": e.Msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("x-ms-request-id", strconv.FormatInt(time.Now().UnixNano(), 36))
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
