// Command fakerancher is a Rancher-compatible server for the container tests: the one fake in
// them, standing in for the cloud API that no test machine can reach. It runs in a FROM scratch
// image on the tests' private network, so the source-scanner container lists it exactly as it
// would list a real Rancher: over TLS, with a bearer token, at GET /v3/clusters.
//
// Two listeners:
//
//	API_ADDR   (default :8443)  TLS, the Rancher v3 API: GET /v3/clusters, filtered by query
//	                            parameters on top-level string fields, as Rancher filters them
//	ADMIN_ADDR (default :8080)  plain HTTP, for the test only (published on the host):
//	                            PUT /clusters  a JSON array of cluster objects: the new listing
//	                            PUT /fail      {"status": 503} answers every API call with that
//	                                           status; {"status": 0} heals
//	GET /ca        the PEM certificate of the API listener (the Secret's caCert)
//	GET /requests  how many API listings were answered (any status), so a test can wait for
//	                            the scanner to have seen a change
//
// TOKEN (required) is the bearer token the API accepts. The serving certificate is
// self-signed, made at start for the names in CERT_NAMES (default "rancher,localhost").
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, getenv func(string) string) error {
	token := getenv("TOKEN")
	if token == "" {
		return errors.New("TOKEN: required")
	}
	names := strings.Split(valueOr(getenv("CERT_NAMES"), "rancher,localhost"), ",")
	cert, certPEM, err := selfSigned(names)
	if err != nil {
		return err
	}
	s := &server{token: token, clusters: []map[string]any{}}

	api := &http.Server{
		Addr:              valueOr(getenv("API_ADDR"), ":8443"),
		Handler:           http.HandlerFunc(s.list),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	admin := &http.Server{
		Addr:              valueOr(getenv("ADMIN_ADDR"), ":8080"),
		Handler:           s.adminMux(certPEM),
		ReadHeaderTimeout: 5 * time.Second,
	}
	errc := make(chan error, 2)
	go func() { errc <- api.ListenAndServeTLS("", "") }()
	go func() { errc <- admin.ListenAndServe() }()
	log.Printf("Serving the Rancher API on %s (TLS, names %v) and the admin API on %s", api.Addr, names, admin.Addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(api.Shutdown(shutdown), admin.Shutdown(shutdown))
}

// server holds what the test set: the listing, a forced failure status and a request count.
type server struct {
	token string

	mu       sync.Mutex
	clusters []map[string]any
	status   int
	requests int
}

// list answers GET /v3/clusters as Rancher v2.x does: one page holding every cluster whose
// top-level fields equal the query parameters.
func (s *server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.requests++
	status, clusters := s.status, s.clusters
	s.mu.Unlock()

	if r.URL.Path != "/v3/clusters" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+s.token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"type": "error", "status": "401", "message": "must authenticate"})
		return
	}
	if status != 0 {
		writeJSON(w, status, map[string]any{"type": "error", "status": fmt.Sprint(status), "message": "failure set by the test"})
		return
	}
	data := []map[string]any{}
	for _, c := range clusters {
		if matches(c, r.URL.Query()) {
			data = append(data, c)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"type":         "collection",
		"resourceType": "cluster",
		"links":        map[string]any{"self": "https://" + r.Host + r.URL.RequestURI()},
		"pagination":   map[string]any{"limit": 1000, "total": len(data)},
		"data":         data,
	})
}

// matches reports whether every query parameter equals the cluster's top-level field of that
// name (Rancher's filter semantics for plain fields; paging parameters are not filters).
func matches(cluster map[string]any, query map[string][]string) bool {
	for key, values := range query {
		switch key {
		case "limit", "marker", "order", "sort":
			continue
		}
		if len(values) == 0 || fmt.Sprint(cluster[key]) != values[0] {
			return false
		}
	}
	return true
}

func (s *server) adminMux(certPEM []byte) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /clusters", func(w http.ResponseWriter, r *http.Request) {
		var clusters []map[string]any
		if err := json.NewDecoder(r.Body).Decode(&clusters); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.clusters = clusters
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /fail", func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Status int `json:"status"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.status = body.Status
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /ca", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-pem-file")
		_, _ = w.Write(certPEM)
	})
	mux.HandleFunc("GET /requests", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		n := s.requests
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]int{"requests": n})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// selfSigned makes a certificate for names (DNS names or IP addresses) that is its own CA, so
// its PEM is all a client needs as caCert.
func selfSigned(names []string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "fake-rancher"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if n != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("create certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	return cert, certPEM, err
}

func valueOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
