package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
)

// config is everything the scanner reads from its environment, validated at start.
type config struct {
	// OperatorNamespace holds the source Secrets and static ConfigMaps (OPERATOR_NAMESPACE,
	// default "enforcement").
	OperatorNamespace string
	// ScanInterval is the time between two scans of every source (SCAN_INTERVAL, default 30s).
	ScanInterval time.Duration
	// GracePeriod is how long a cluster must be absent from complete listings before it is gone
	// (GONE_GRACE_PERIOD, default 10m).
	GracePeriod time.Duration
	// MaxRemovalFraction is the removal breaker's fraction of known clusters per source and scan
	// (MAX_REMOVAL_FRACTION, default 0.1).
	MaxRemovalFraction float64
	// ListTimeout bounds one listing of one source (LIST_TIMEOUT, default 60s); a listing that
	// takes longer is degraded.
	ListTimeout time.Duration
	// RancherIgnoreFields are top-level Rancher cluster fields left out of the attributes besides
	// the built-in volatile ones (RANCHER_IGNORE_FIELDS, comma-separated, default none).
	RancherIgnoreFields []string
	// RancherExtraFields are top-level Rancher cluster fields made attributes besides
	// rancher.AttributeFields (RANCHER_EXTRA_FIELDS, comma-separated, default none); credentials
	// in them are still dropped.
	RancherExtraFields []string
	// EKSRedescribeInterval is how long an ACTIVE or FAILED EKS cluster's description is trusted
	// (EKS_REDESCRIBE_INTERVAL, default 10m).
	EKSRedescribeInterval time.Duration
	// EKSEndpoint and EKSSTSEndpoint override the AWS EKS and STS endpoints (EKS_ENDPOINT,
	// EKS_STS_ENDPOINT; default: the SDK's regional endpoints). For VPC interface endpoints,
	// compatible APIs and tests.
	EKSEndpoint    string
	EKSSTSEndpoint string
	// GKEEndpoint overrides the Google container API endpoint (GKE_ENDPOINT; default the
	// library's). For Private Service Connect, compatible APIs and tests.
	GKEEndpoint string
	// AKS is the AKS lister's configuration (AKS_ENDPOINT, AKS_CA_FILE; aks.go).
	AKS aksConfig
	// LeaderElection (LEADER_ELECTION and its namespace and timings, pkg/service) lets two
	// replicas run: only the one holding the Lease LeaseName scans, consumes and writes the
	// inventory.
	LeaderElection service.LeaderElection
}

// LeaseName is the Lease the scanner's replicas compete for with LEADER_ELECTION.
const LeaseName = "source-scanner.enforcement.globo.com"

// loadConfig reads and validates the configuration; errors name the variable.
func loadConfig(getenv service.Getenv) (config, error) {
	c := config{
		OperatorNamespace: service.String(getenv, "OPERATOR_NAMESPACE", service.DefaultOperatorNamespace),
	}
	var errs []error
	var err error
	if c.ScanInterval, err = service.Duration(getenv, "SCAN_INTERVAL", 30*time.Second); err != nil {
		errs = append(errs, err)
	} else if c.ScanInterval == 0 {
		errs = append(errs, fmt.Errorf("SCAN_INTERVAL=%q: must be greater than zero", getenv("SCAN_INTERVAL")))
	}
	if c.GracePeriod, err = service.Duration(getenv, "GONE_GRACE_PERIOD", 10*time.Minute); err != nil {
		errs = append(errs, err)
	}
	if c.MaxRemovalFraction, err = service.Fraction(getenv, "MAX_REMOVAL_FRACTION", 0.1); err != nil {
		errs = append(errs, err)
	}
	if c.ListTimeout, err = service.Duration(getenv, "LIST_TIMEOUT", time.Minute); err != nil {
		errs = append(errs, err)
	} else if c.ListTimeout == 0 {
		errs = append(errs, fmt.Errorf("LIST_TIMEOUT=%q: must be greater than zero", getenv("LIST_TIMEOUT")))
	}
	c.RancherIgnoreFields = fieldList(getenv("RANCHER_IGNORE_FIELDS"))
	c.RancherExtraFields = fieldList(getenv("RANCHER_EXTRA_FIELDS"))
	if c.EKSRedescribeInterval, err = service.Duration(getenv, eks.EnvRedescribeInterval, eks.DefaultRedescribeInterval); err != nil {
		errs = append(errs, err)
	} else if c.EKSRedescribeInterval == 0 {
		errs = append(errs, fmt.Errorf("%s=%q: must be greater than zero", eks.EnvRedescribeInterval, getenv(eks.EnvRedescribeInterval)))
	}
	for _, e := range []struct {
		name string
		dst  *string
	}{{"EKS_ENDPOINT", &c.EKSEndpoint}, {"EKS_STS_ENDPOINT", &c.EKSSTSEndpoint}, {"GKE_ENDPOINT", &c.GKEEndpoint}} {
		v := strings.TrimSpace(getenv(e.name))
		if v == "" {
			continue
		}
		if u, err := url.Parse(v); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s=%q: want an absolute http(s) URL", e.name, v))
			continue
		}
		*e.dst = v
	}
	if c.AKS, err = loadAKSConfig(getenv); err != nil {
		errs = append(errs, err)
	}
	if c.LeaderElection, err = service.LoadLeaderElection(getenv, c.OperatorNamespace); err != nil {
		errs = append(errs, err)
	}
	// The container client resolves its paths ("v1/projects/...") against the endpoint, which
	// must therefore end with a slash.
	if c.GKEEndpoint != "" && !strings.HasSuffix(c.GKEEndpoint, "/") {
		c.GKEEndpoint += "/"
	}
	return c, errors.Join(errs...)
}

// fieldList splits a comma-separated list of field names, dropping blanks.
func fieldList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
