package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
)

// config is everything the scanner reads from its environment, validated at start.
type config struct {
	service.Common
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
}

// loadConfig reads and validates the configuration; errors name the variable.
func loadConfig(getenv service.Getenv) (config, error) {
	c := config{
		Common:            service.LoadCommon(getenv),
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
	for _, f := range strings.Split(getenv("RANCHER_IGNORE_FIELDS"), ",") {
		if f = strings.TrimSpace(f); f != "" {
			c.RancherIgnoreFields = append(c.RancherIgnoreFields, f)
		}
	}
	return c, errors.Join(errs...)
}
