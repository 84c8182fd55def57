// Package rancherfake is a Rancher-compatible HTTP server for tests: it answers GET /v3/clusters
// with the real v3 collection shape (type, links, pagination with marker/next/partial, data of
// cluster objects with the fields a real Rancher sends), filters by query parameters as Rancher
// does for top-level fields, checks the bearer token, and can be told to fail a page with a
// status, garbage, a hang or a partial answer. It is a fake of a cloud API, which the brief
// allows; NATS and Kubernetes are never faked.
package rancherfake

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Failure modes of a page.
const (
	FailNone    = iota
	FailGarbage // 200 with a body that is not JSON
	FailHang    // never answers until the request is cancelled
	FailPartial // a collection marked partial without a next link
)

// Request is what the server saw of one request.
type Request struct {
	Path          string
	Query         string
	Authorization string
}

// Handler is the fake Rancher's v3 API as an http.Handler, holding the listing and the
// failures a test sets. New serves one over TLS for a test; a program serves one itself (the
// container tests' fake Rancher, with Admin as its control API). Its methods are safe for
// concurrent use.
type Handler struct {
	// Token is the bearer token the API accepts.
	Token string

	mu       sync.Mutex
	clusters []map[string]any
	// listings are the JSON of the clusters each filter matches, by filterKey, computed at
	// the filter's first request after SetClusters: a scan of a large fleet asks for a hundred
	// pages with the same filters, and a fake that filters and encodes the whole fleet for each
	// page spends the CPU the benchmarks measure the services by.
	listings map[string][]json.RawMessage
	pageSize int
	status   map[int]int // page → HTTP status to answer; page 0: every page
	mode     map[int]int // page → Fail* mode
	requests []Request
}

// NewHandler returns the API of a fake Rancher accepting token, with pages of pageSize
// clusters and an empty listing.
func NewHandler(token string, pageSize int) *Handler {
	return &Handler{Token: token, pageSize: pageSize, status: map[int]int{}, mode: map[int]int{}}
}

// Server is a fake Rancher served over TLS for the length of a test: the httptest server and
// its Handler.
type Server struct {
	*httptest.Server
	*Handler
}

// New starts a fake Rancher over TLS (httptest's certificate; use Certificate() as caCert)
// accepting token, with pages of pageSize clusters. It stops when the test ends.
func New(t testing.TB, token string, pageSize int) *Server {
	h := NewHandler(token, pageSize)
	s := &Server{Server: httptest.NewTLSServer(h), Handler: h}
	t.Cleanup(s.Close)
	return s
}

// CACertPEM returns the server certificate in PEM, as a source Secret's caCert.
func (s *Server) CACertPEM() []byte {
	return pemEncode(s.Certificate().Raw)
}

// SetClusters replaces the cluster objects the server lists (in this order). The server reads
// them until the next SetClusters: change a listing by calling it again, not by changing the
// maps it was given.
func (h *Handler) SetClusters(clusters ...map[string]any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clusters = clusters
	h.listings = nil
}

// filterKey is the filters of a query q, the paging parameters left out, in one string.
func filterKey(q url.Values) string {
	f := url.Values{}
	for k, vs := range q {
		if !pagingParameter(k) {
			f[k] = vs
		}
	}
	return f.Encode()
}

// listingFor returns the JSON of the clusters q's filters match, from listings or computed
// anew; h.mu is held.
func (h *Handler) listingFor(q url.Values) []json.RawMessage {
	key := filterKey(q)
	if l, ok := h.listings[key]; ok {
		return l
	}
	l := []json.RawMessage{}
	for _, c := range h.clusters {
		if matches(c, q) {
			data, err := json.Marshal(c)
			if err != nil {
				panic(fmt.Sprintf("rancherfake: cluster %v: %v", c["id"], err)) // tests build clusters of plain values
			}
			l = append(l, data)
		}
	}
	if h.listings == nil {
		h.listings = map[string][]json.RawMessage{}
	}
	h.listings[key] = l
	return l
}

// FailPage makes page (1-based; 0 for every page) answer with an HTTP status (e.g. 500, 401)
// until Heal.
func (h *Handler) FailPage(page, status int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status[page] = status
}

// BreakPage makes page answer in a Fail* mode until Heal.
func (h *Handler) BreakPage(page, mode int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mode[page] = mode
}

// Heal removes every failure.
func (h *Handler) Heal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.status = map[int]int{}
	h.mode = map[int]int{}
}

// Requests returns the requests seen so far.
func (h *Handler) Requests() []Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Request(nil), h.requests...)
}

// Cluster returns a cluster object shaped like Rancher v2.x's /v3/clusters data items, with the
// fields templates use (id, name, state, labels, provider, driver, ...) and volatile ones.
func Cluster(id, name, state string, labels map[string]string) map[string]any {
	l := map[string]any{}
	for k, v := range labels {
		l[k] = v
	}
	return map[string]any{
		"actions":     map[string]any{"generateKubeconfig": "https://rancher/v3/clusters/" + id + "?action=generateKubeconfig"},
		"annotations": map[string]any{"authz.management.cattle.io/creator-role-bindings": "{}"},
		"allocatable": map[string]any{"cpu": "8", "memory": "32Gi", "pods": "330"},
		"baseType":    "cluster",
		"caCert":      "LS0tLS1CRUdJTi...",
		"conditions": []any{map[string]any{"status": "True", "type": "Ready",
			"lastUpdateTime": time.Now().UTC().Format(time.RFC3339)}},
		"created":              "2021-03-01T12:00:00Z",
		"createdTS":            1614600000000,
		"creatorId":            "user-abcde",
		"description":          "",
		"dockerRootDir":        "/var/lib/docker",
		"driver":               "imported",
		"enableNetworkPolicy":  false,
		"id":                   id,
		"internal":             false,
		"istioEnabled":         false,
		"labels":               l,
		"links":                map[string]any{"self": "https://rancher/v3/clusters/" + id},
		"name":                 name,
		"nodeCount":            3,
		"provider":             "rke",
		"requested":            map[string]any{"cpu": strconv.Itoa(int(time.Now().UnixNano()%1000)) + "m"},
		"state":                state,
		"transitioning":        "no",
		"transitioningMessage": "",
		"type":                 "cluster",
		"uuid":                 "uuid-" + id,
		"version":              map[string]any{"gitVersion": "v1.24.17", "major": "1", "minor": "24"},
	}
}

// serveVersion answers GET /k8s/clusters/<id>/version for a cluster the fake lists, in the
// shape of Kubernetes' version.Info; anything else under the proxy is 404, as an unknown cluster.
func (h *Handler) serveVersion(w http.ResponseWriter, r *http.Request, rest string) {
	id, sub, _ := strings.Cut(rest, "/")
	h.mu.Lock()
	known := slices.ContainsFunc(h.clusters, func(c map[string]any) bool { return c["id"] == id })
	h.mu.Unlock()
	if !known || sub != "version" || r.Method != http.MethodGet {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"major":"1","minor":"31","gitVersion":"v1.31.14","gitCommit":"rancherfake","gitTreeState":"clean","buildDate":"2026-01-01T00:00:00Z","goVersion":"go1.26","compiler":"gc","platform":"linux/amd64"}`))
}

// ServeHTTP answers GET /v3/clusters as Rancher v2.x does, one page at a time, and fails as
// told by FailPage and BreakPage. It also answers GET /k8s/clusters/<id>/version, the
// downstream cluster's version through Rancher's proxy, which Argo CD asks before it registers a
// cluster.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.requests = append(h.requests, Request{Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization")})
	h.mu.Unlock()
	id, proxied := strings.CutPrefix(r.URL.Path, "/k8s/clusters/")
	if r.URL.Path != "/v3/clusters" && !proxied {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+h.Token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"error","status":"401","message":"must authenticate"}`))
		return
	}
	if proxied {
		h.serveVersion(w, r, id)
		return
	}
	q := r.URL.Query()
	marker, _ := strconv.Atoi(q.Get("marker"))
	page := marker/max(1, h.pageSize) + 1

	h.mu.Lock()
	status, mode := h.status[page], h.mode[page]
	if status == 0 {
		status = h.status[0]
	}
	matched := h.listingFor(q)
	pageSize := h.pageSize
	h.mu.Unlock()

	switch {
	case status != 0:
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"type":"error","status":"%d","message":"injected"}`, status)
		return
	case mode == FailGarbage:
		_, _ = w.Write([]byte(`<html>502 Bad Gateway</html>`))
		return
	case mode == FailHang:
		<-r.Context().Done()
		return
	}
	end := min(len(matched), marker+pageSize)
	start := min(marker, end)
	pagination := map[string]any{"limit": pageSize, "total": len(matched)}
	if end < len(matched) {
		next := *r.URL
		nq := next.Query()
		nq.Set("marker", strconv.Itoa(end))
		next.RawQuery = nq.Encode()
		pagination["marker"] = strconv.Itoa(end)
		pagination["next"] = "https://" + r.Host + next.RequestURI()
		pagination["partial"] = true
	}
	if mode == FailPartial {
		delete(pagination, "next")
		pagination["partial"] = true
	}
	data := matched[start:end]
	if data == nil {
		data = []json.RawMessage{}
	}
	body := map[string]any{
		"type":         "collection",
		"resourceType": "cluster",
		"links":        map[string]any{"self": "https://" + r.Host + "/v3/clusters"},
		"createTypes":  map[string]any{"cluster": "https://" + r.Host + "/v3/clusters"},
		"actions":      map[string]any{},
		"pagination":   pagination,
		"sort":         map[string]any{"order": "asc", "reverse": "https://" + r.Host + "/v3/clusters?order=desc"},
		"filters":      filtersOf(q),
		"data":         data,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// matches applies Rancher's query filters: every parameter except paging ones must equal the
// top-level field of the same name.
func matches(c map[string]any, q map[string][]string) bool {
	for k, vs := range q {
		if pagingParameter(k) {
			continue
		}
		if fmt.Sprint(c[k]) != vs[0] {
			return false
		}
	}
	return true
}

// pagingParameter reports whether query parameter k pages or orders a listing rather than
// filtering it.
func pagingParameter(k string) bool {
	switch k {
	case "marker", "limit", "order", "sort":
		return true
	}
	return false
}

func filtersOf(q map[string][]string) map[string]any {
	out := map[string]any{}
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = []any{map[string]any{"modifier": "eq", "value": q[k][0]}}
	}
	return out
}

func pemEncode(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
