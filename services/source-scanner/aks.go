package main

// This file wires the AKS lister (internal/aks) into the service: its configuration and how a
// source's lister is built.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/aks"
)

// aksConfig is the AKS part of the configuration.
type aksConfig struct {
	// Endpoint overrides the Azure Resource Manager endpoint (AKS_ENDPOINT; default
	// https://management.azure.com). For sovereign clouds, Azure Stack Hub and tests; the
	// Microsoft Entra authority host is azidentity's own AZURE_AUTHORITY_HOST.
	Endpoint string
	// HTTPClient sends the ARM and token requests: the system's roots plus the PEM bundle of
	// AKS_CA_FILE (a private cloud's CA), when set.
	HTTPClient *http.Client
}

// loadAKSConfig reads AKS_ENDPOINT and AKS_CA_FILE; errors name the variable.
func loadAKSConfig(getenv service.Getenv) (aksConfig, error) {
	var c aksConfig
	if v := strings.TrimSpace(getenv("AKS_ENDPOINT")); v != "" {
		// azcore sends bearer tokens over TLS only.
		if u, err := url.Parse(v); err != nil || u.Scheme != "https" || u.Host == "" {
			return c, fmt.Errorf("AKS_ENDPOINT=%q: want an absolute https URL", v)
		}
		c.Endpoint = v
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	// The CA fetches of a first scan run 8 at a time against one host: keep their connections.
	transport.MaxIdleConnsPerHost = 16
	if path := strings.TrimSpace(getenv("AKS_CA_FILE")); path != "" {
		pemData, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("AKS_CA_FILE=%q: %w", path, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pemData) {
			return c, fmt.Errorf("AKS_CA_FILE=%q: holds no PEM certificate", path)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	c.HTTPClient = &http.Client{Transport: transport, Timeout: time.Minute}
	return c, nil
}

// aksLister is the lister of an aks source: one aks.Lister (its token and the clusters' CAs
// live across scans), its identity "aks:<lower-case ARM id>".
func (s *sourceSpec) aksLister(d listerDeps) sourceLister {
	ref := s.Ref
	return newIdentifiedPages("aks:", aks.NewLister(aks.Options{
		Subscriptions:  s.Subscriptions,
		ResourceGroups: s.ResourceGroups,
		Endpoint:       d.cfg.AKS.Endpoint,
		HTTPClient:     d.cfg.AKS.HTTPClient,
		Calls:          d.aksCalls,
		// No Secret: the ambient identity (workload identity, AZURE_* environment, managed
		// identity).
		Credentials: func(ctx context.Context) (aks.Credentials, error) {
			return secretCredentials(ctx, d.kube, ref, true, events.ParseAKSSecret)
		},
	}))
}
