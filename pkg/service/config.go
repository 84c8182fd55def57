package service

import (
	"fmt"
	"math"
	"strconv"
	"strings"
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
	// PprofAddr (PPROF_ADDR; unset: not served) is where the Go runtime's profiles are served
	// (/debug/pprof/: heap, CPU, goroutines), on a listener of their own. Off by default: a
	// profile shows the process's internals and a CPU profile costs CPU while it runs. Bind it to
	// 127.0.0.1 and reach it through kubectl port-forward.
	PprofAddr string
	// ShutdownTimeout (SHUTDOWN_TIMEOUT, a Go duration, default 30s) bounds the whole stop.
	ShutdownTimeout time.Duration
	// StreamReplicas (STREAM_REPLICAS, default 1; the charts 3) are the replicas of the stream,
	// its consumers and the buckets that ConnectNATS creates or raises; never lowered.
	StreamReplicas int
	// StreamMaxBytes (STREAM_MAX_BYTES, bytes with an optional unit such as 10GiB; unset: no
	// cap) caps the stream's size on creation, or raises a smaller cap; never lowered or added
	// to a stream that exists.
	StreamMaxBytes int64
}

// LoadCommon reads NATS_URL, NATS_CREDS, NATS_USER, NATS_PASSWORD, METRICS_ADDR, HEALTH_ADDR,
// PPROF_ADDR, SHUTDOWN_TIMEOUT, STREAM_REPLICAS and STREAM_MAX_BYTES. A SHUTDOWN_TIMEOUT that is
// not a duration greater than 0, a NATS_USER without NATS_PASSWORD (or the reverse) and NATS_USER
// together with NATS_CREDS are errors naming the variables.
func LoadCommon(getenv Getenv) (Common, error) {
	c := Common{
		NATSURL:      String(getenv, "NATS_URL", DefaultNATSURL),
		NATSCreds:    getenv("NATS_CREDS"),
		NATSUser:     getenv("NATS_USER"),
		NATSPassword: getenv("NATS_PASSWORD"),
		MetricsAddr:  String(getenv, "METRICS_ADDR", DefaultMetricsAddr),
		HealthAddr:   String(getenv, "HEALTH_ADDR", DefaultHealthAddr),
		PprofAddr:    strings.TrimSpace(getenv("PPROF_ADDR")),
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
	if c.StreamReplicas, err = PositiveInt(getenv, "STREAM_REPLICAS", 1); err != nil {
		return Common{}, err
	}
	if c.StreamReplicas > maxStreamReplicas {
		return Common{}, fmt.Errorf("STREAM_REPLICAS=%q: JetStream keeps at most %d replicas", getenv("STREAM_REPLICAS"), maxStreamReplicas)
	}
	if c.StreamMaxBytes, err = Bytes(getenv, "STREAM_MAX_BYTES"); err != nil {
		return Common{}, err
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

// Bool parses true/false (also 1/0, any case); def when unset. Anything else is an error naming
// the variable.
func Bool(getenv Getenv, name string, def bool) (bool, error) {
	switch v := strings.ToLower(getenv(name)); v {
	case "":
		return def, nil
	case "true", "1":
		return true, nil
	case "false", "0":
		return false, nil
	default:
		return false, fmt.Errorf("%s=%q: want true or false", name, getenv(name))
	}
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

// maxStreamReplicas is the most replicas JetStream keeps of a stream.
const maxStreamReplicas = 5

// byteUnits are the units Bytes accepts after the number, by their multiple.
var byteUnits = map[string]int64{
	"": 1, "B": 1,
	"K": 1 << 10, "KB": 1000, "KIB": 1 << 10,
	"M": 1 << 20, "MB": 1000 * 1000, "MIB": 1 << 20,
	"G": 1 << 30, "GB": 1000 * 1000 * 1000, "GIB": 1 << 30,
	"T": 1 << 40, "TB": 1000 * 1000 * 1000 * 1000, "TIB": 1 << 40,
}

// Bytes parses a size: a whole number of bytes, optionally followed by a unit (KB, MB, GB, TB
// are powers of 1000; K, KiB, M, MiB, G, GiB, T, TiB powers of 1024; case does not matter).
// Unset is 0 (no size given). Anything else, or a size below 1, is an error naming the variable.
func Bytes(getenv Getenv, name string) (int64, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	digits := strings.TrimRight(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
	unit, ok := byteUnits[strings.ToUpper(strings.TrimSpace(v[len(digits):]))]
	n, err := strconv.ParseInt(digits, 10, 64)
	if !ok || err != nil || n < 1 || n > math.MaxInt64/unit {
		return 0, fmt.Errorf("%s=%q: want a size in bytes such as 1073741824, 1GiB or 500MB", name, v)
	}
	return n * unit, nil
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
