package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
)

// Defaults of the original policy-watcher (its README and deployment.yaml), kept so that users
// can swap the image without touching their configuration.
const (
	defaultPollInterval   = 30 * time.Second
	defaultStableDuration = 120 * time.Second
	defaultClaimName      = "policy-watcher-claim"
	defaultNamespace      = "default"
)

// config is the whole configuration, read once from the environment at start-up.
type config struct {
	// PollInterval (POLL_INTERVAL_SEC, 30): how often the Policies are folded again even when no
	// change was seen. With a watch it is the resync period; without one it is the only trigger.
	PollInterval time.Duration
	// StableDuration (STABLE_DURATION_SEC, 120): how long "compliant" must hold, without
	// interruption, before it is written.
	StableDuration time.Duration
	// ClaimName (TARGET_CLAIM_NAME, policy-watcher-claim): the cluster-scoped ClusterClaim written.
	ClaimName string
	// Namespace (WATCH_NAMESPACE, default): where the Policies are folded.
	Namespace string
	// ClusterName (CLUSTER_NAME, default WATCH_NAMESPACE): the cluster the events are about. The
	// original deployment sets WATCH_NAMESPACE to the managed cluster's name, hence the default.
	ClusterName string
	// NATSURL (NATS_URL, unset): when set, compliance changes travel as events and the claim
	// writer applies them; when unset the watcher writes the claim itself, like the original.
	NATSURL string
}

// loadConfig reads and validates the configuration. Every error names its variable.
func loadConfig(getenv service.Getenv) (config, error) {
	var errs []error
	poll, err := seconds(getenv, "POLL_INTERVAL_SEC", defaultPollInterval, 100*time.Millisecond)
	errs = append(errs, err)
	stable, err := seconds(getenv, "STABLE_DURATION_SEC", defaultStableDuration, 0)
	errs = append(errs, err)
	ns := service.String(getenv, "WATCH_NAMESPACE", defaultNamespace)
	cfg := config{
		PollInterval:   poll,
		StableDuration: stable,
		ClaimName:      service.String(getenv, "TARGET_CLAIM_NAME", defaultClaimName),
		Namespace:      ns,
		ClusterName:    service.String(getenv, "CLUSTER_NAME", ns),
		NATSURL:        getenv("NATS_URL"),
	}
	if len(cfg.ClaimName) > 253 {
		errs = append(errs, fmt.Errorf("TARGET_CLAIM_NAME=%q: longer than 253 characters", cfg.ClaimName))
	}
	return cfg, errors.Join(errs...)
}

// seconds reads a *_SEC variable. The original took a whole number of seconds ("30"); a Go
// duration ("1500ms", "2m") is accepted too, as the other services' durations are. A value below
// least, or one that is neither, is an error naming the variable.
func seconds(getenv service.Getenv, name string, def, least time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	var d time.Duration
	if n, err := strconv.Atoi(v); err == nil {
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(v); err != nil {
		return 0, fmt.Errorf("%s=%q: want a whole number of seconds or a Go duration such as 90s", name, v)
	}
	if d < least {
		return 0, fmt.Errorf("%s=%q: must be at least %s", name, v, least)
	}
	return d, nil
}
