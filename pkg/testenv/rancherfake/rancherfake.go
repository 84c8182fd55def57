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
	"sort"
	"strconv"
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

// Server is a fake Rancher. Its methods are safe for concurrent use.
type Server struct {
	*httptest.Server
	// Token is the bearer token the server accepts.
	Token string

	mu       sync.Mutex
	clusters []map[string]any
	pageSize int
	status   map[int]int // page → HTTP status to answer
	mode     map[int]int // page → Fail* mode
	requests []Request
}

// New starts a fake Rancher over TLS (httptest's certificate; use Certificate() as caCert)
// accepting token, with pages of pageSize clusters. It stops when the test ends.
func New(t testing.TB, token string, pageSize int) *Server {
	s := &Server{Token: token, pageSize: pageSize, status: map[int]int{}, mode: map[int]int{}}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// CACertPEM returns the server certificate in PEM, as a source Secret's caCert.
func (s *Server) CACertPEM() []byte {
	return pemEncode(s.Certificate().Raw)
}

// SetClusters replaces the cluster objects the server lists (in this order).
func (s *Server) SetClusters(clusters ...map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.clusters = clusters
}

// FailPage makes page (1-based) answer with an HTTP status (e.g. 500, 401) until Heal.
func (s *Server) FailPage(page, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[page] = status
}

// BreakPage makes page answer in a Fail* mode until Heal.
func (s *Server) BreakPage(page, mode int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode[page] = mode
}

// Heal removes every failure.
func (s *Server) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = map[int]int{}
	s.mode = map[int]int{}
}

// Requests returns the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
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

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests = append(s.requests, Request{Path: r.URL.Path, Query: r.URL.RawQuery, Authorization: r.Header.Get("Authorization")})
	s.mu.Unlock()
	if r.URL.Path != "/v3/clusters" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.Token {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"type":"error","status":"401","message":"must authenticate"}`))
		return
	}
	q := r.URL.Query()
	marker, _ := strconv.Atoi(q.Get("marker"))
	page := marker/max(1, s.pageSize) + 1

	s.mu.Lock()
	status, mode := s.status[page], s.mode[page]
	var matched []map[string]any
	for _, c := range s.clusters {
		if matches(c, q) {
			matched = append(matched, c)
		}
	}
	pageSize := s.pageSize
	s.mu.Unlock()

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
		data = []map[string]any{}
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
		switch k {
		case "marker", "limit", "order", "sort":
			continue
		}
		if fmt.Sprint(c[k]) != vs[0] {
			return false
		}
	}
	return true
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
