// Command fakerancher serves pkg/testenv/rancherfake for the container tests: the one fake in
// them, standing in for the cloud API that no test machine can reach. It runs in a FROM scratch
// image on the tests' private network, so the source-scanner container lists it exactly as it
// would list a real Rancher: over TLS, with a bearer token, at GET /v3/clusters.
//
// Two listeners:
//
//	API_ADDR   (default :8443)  TLS, the Rancher v3 API (rancherfake.Handler), every listing
//	                            on one page
//	ADMIN_ADDR (default :8080)  plain HTTP, for the test only (published on the host): the
//	                            listing, a forced status, the CA and the request count
//	                            (rancherfake.Handler.Admin)
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
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/enforcement-io/enforcement/pkg/testenv/rancherfake"
)

// pageSize puts every listing the tests set on one page.
const pageSize = 1000

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv); err != nil {
		slog.Error("Fake Rancher stopped", "error", err)
		os.Exit(1)
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
	fake := rancherfake.NewHandler(token, pageSize)
	api := &http.Server{
		Addr:              valueOr(getenv("API_ADDR"), ":8443"),
		Handler:           fake,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 5 * time.Second,
	}
	admin := &http.Server{
		Addr:              valueOr(getenv("ADMIN_ADDR"), ":8080"),
		Handler:           fake.Admin(certPEM),
		ReadHeaderTimeout: 5 * time.Second,
	}
	errc := make(chan error, 2)
	go func() { errc <- api.ListenAndServeTLS("", "") }()
	go func() { errc <- admin.ListenAndServe() }()
	slog.Info("Serving the Rancher API", "addr", api.Addr, "names", names, "admin", admin.Addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(api.Shutdown(shutdown), admin.Shutdown(shutdown))
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
