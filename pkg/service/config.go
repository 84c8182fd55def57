package service

import (
	"fmt"
	"strconv"
	"time"
)

// Getenv reads one environment variable; tests pass a map's lookup instead of os.Getenv.
type Getenv func(string) string

// Defaults of the variables every service reads (design.md, "Fixed interfaces").
const (
	DefaultNATSURL           = "nats://127.0.0.1:4222"
	DefaultMetricsAddr       = ":8080"
	DefaultHealthAddr        = ":8081"
	DefaultOperatorNamespace = "enforcement"
	DefaultArgoCDNamespace   = "argocd"
	// DefaultShutdownTimeout bounds the whole ordered stop (SHUTDOWN_TIMEOUT). Deployments give
	// the pod a terminationGracePeriodSeconds larger than it.
	DefaultShutdownTimeout = 30 * time.Second
)

// Common is the configuration every service reads; Start loads it.
type Common struct {
	NATSURL   string // NATS_URL, default nats://127.0.0.1:4222
	NATSCreds string // NATS_CREDS, optional path of a NATS credentials file (JWT + seed)
	// NATSUser and NATSPassword (NATS_USER, NATS_PASSWORD) are the service's user in the
	// server's authorization configuration (deploy/nats). Both or neither; not with NATS_CREDS.
	NATSUser     string
	NATSPassword string
	MetricsAddr  string // METRICS_ADDR, default :8080
	HealthAddr   string // HEALTH_ADDR, default :8081
	// ShutdownTimeout (SHUTDOWN_TIMEOUT, a Go duration, default 30s) bounds the whole stop.
	ShutdownTimeout time.Duration
}

// LoadCommon reads NATS_URL, NATS_CREDS, NATS_USER, NATS_PASSWORD, METRICS_ADDR, HEALTH_ADDR and
// SHUTDOWN_TIMEOUT. A SHUTDOWN_TIMEOUT that is not a duration greater than 0, a NATS_USER without
// NATS_PASSWORD (or the reverse) and NATS_USER together with NATS_CREDS are errors naming the
// variables.
func LoadCommon(getenv Getenv) (Common, error) {
	c := Common{
		NATSURL:      String(getenv, "NATS_URL", DefaultNATSURL),
		NATSCreds:    getenv("NATS_CREDS"),
		NATSUser:     getenv("NATS_USER"),
		NATSPassword: getenv("NATS_PASSWORD"),
		MetricsAddr:  String(getenv, "METRICS_ADDR", DefaultMetricsAddr),
		HealthAddr:   String(getenv, "HEALTH_ADDR", DefaultHealthAddr),
	}
	if err := checkNATSAuth(c.NATSUser, c.NATSPassword, c.NATSCreds); err != nil {
		return Common{}, err
	}
	var err error
	if c.ShutdownTimeout, err = Duration(getenv, "SHUTDOWN_TIMEOUT", DefaultShutdownTimeout); err != nil {
		return Common{}, err
	}
	if c.ShutdownTimeout == 0 {
		return Common{}, fmt.Errorf("SHUTDOWN_TIMEOUT=%q: must be greater than 0", getenv("SHUTDOWN_TIMEOUT"))
	}
	return c, nil
}

// String returns the variable's value, or def when it is unset or empty.
func String(getenv Getenv, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// Duration parses a Go duration ("30s", "10m"); def when unset. A value that does not parse, or
// a negative one, is an error naming the variable.
func Duration(getenv Getenv, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration (use Go syntax such as 30s or 10m): %w", name, v, err)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s=%q: must not be negative", name, v)
	}
	return d, nil
}

// Seconds parses a whole number of seconds (the original policy-watcher's *_SEC variables);
// def when unset. A non-number or a value below least is an error naming the variable.
func Seconds(getenv Getenv, name string, def time.Duration, least int) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		return 0, fmt.Errorf("%s=%q: want a whole number of seconds >= %d", name, v, least)
	}
	return time.Duration(n) * time.Second, nil
}

// PositiveInt parses a whole number >= 1; def when unset. Anything else is an error naming the
// variable.
func PositiveInt(getenv Getenv, name string, def int) (int, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a whole number >= 1", name, v)
	}
	return n, nil
}

// Fraction parses a number in (0, 1]; def when unset.
func Fraction(getenv Getenv, name string, def float64) (float64, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 || f > 1 {
		return 0, fmt.Errorf("%s=%q: want a number greater than 0 and at most 1", name, v)
	}
	return f, nil
}
