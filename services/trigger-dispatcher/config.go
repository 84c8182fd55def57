package main

import (
	"fmt"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
)

// config is everything the dispatcher reads from its environment, validated at start.
type config struct {

	// DefaultTimeout bounds one attempt of a trigger that sets no timeout
	// (TRIGGER_DEFAULT_TIMEOUT, default 5s, as the original).
	DefaultTimeout time.Duration
	// MaxTimeout caps every attempt's timeout, a trigger's own included (TRIGGER_MAX_TIMEOUT,
	// default 30s, at most 300s): it bounds how long one receiver that never answers holds one
	// of the consumer's slots.
	MaxTimeout time.Duration
	// MaxAttempts bounds the attempts of one delivery, the first included
	// (TRIGGER_MAX_ATTEMPTS, default 5).
	MaxAttempts int
	// BackoffBase and BackoffMax shape the exponential backoff between attempts
	// (TRIGGER_BACKOFF_BASE default 500ms, TRIGGER_BACKOFF_MAX default 30s).
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// BlockedRetryInterval is how often beforeInstall deliveries that failed under
	// failurePolicy Fail are tried again (TRIGGER_BLOCKED_RETRY_INTERVAL, default 1m; 0 disables).
	BlockedRetryInterval time.Duration

	// Egress is the network policy for webhook targets, checked on the resolved address at
	// connection time: the default denied networks of package egress, opened by
	// TRIGGER_ALLOWED_NETWORKS, more refused by TRIGGER_DENIED_NETWORKS.
	Egress egress.Policy

	// ConsumerBackoffBase is the first wait of the event consumer's own retries of a handler that
	// fails for a reason other than the webhook, such as NATS or Kubernetes being unreachable
	// (CONSUMER_BACKOFF_BASE, default 1s, doubling up to 30s).
	ConsumerBackoffBase time.Duration

	// LeaderElection (LEADER_ELECTION and its namespace and timings, pkg/service; the
	// namespace defaults to OPERATOR_NAMESPACE) lets two replicas run: only the one holding
	// the Lease leaseName consumes and calls webhooks, which keeps an intent and its outcomes in
	// order in one process.
	LeaderElection service.LeaderElection
}

// leaseName is the Lease the dispatcher's replicas compete for with LEADER_ELECTION.
const leaseName = "trigger-dispatcher.enforcement.globo.com"

// loadConfig reads and validates the configuration. Errors name the variable.
func loadConfig(getenv service.Getenv) (config, error) {
	c := config{}
	var err error
	if c.DefaultTimeout, err = service.Duration(getenv, "TRIGGER_DEFAULT_TIMEOUT", 5*time.Second); err != nil {
		return c, err
	}
	if c.DefaultTimeout == 0 {
		return c, fmt.Errorf("TRIGGER_DEFAULT_TIMEOUT: must be greater than 0")
	}
	if c.MaxTimeout, err = service.Duration(getenv, "TRIGGER_MAX_TIMEOUT", 30*time.Second); err != nil {
		return c, err
	}
	if c.MaxTimeout == 0 || c.MaxTimeout > maxTriggerTimeout {
		return c, fmt.Errorf("TRIGGER_MAX_TIMEOUT=%s: must be greater than 0 and at most %s", c.MaxTimeout, maxTriggerTimeout)
	}
	if c.DefaultTimeout > c.MaxTimeout {
		return c, fmt.Errorf("TRIGGER_DEFAULT_TIMEOUT=%s: must not be more than TRIGGER_MAX_TIMEOUT=%s", c.DefaultTimeout, c.MaxTimeout)
	}
	if c.MaxAttempts, err = service.PositiveInt(getenv, "TRIGGER_MAX_ATTEMPTS", 5); err != nil {
		return c, err
	}
	if c.BackoffBase, err = service.Duration(getenv, "TRIGGER_BACKOFF_BASE", 500*time.Millisecond); err != nil {
		return c, err
	}
	if c.BackoffMax, err = service.Duration(getenv, "TRIGGER_BACKOFF_MAX", 30*time.Second); err != nil {
		return c, err
	}
	if c.BackoffMax < c.BackoffBase {
		return c, fmt.Errorf("TRIGGER_BACKOFF_MAX=%s: must not be less than TRIGGER_BACKOFF_BASE=%s", c.BackoffMax, c.BackoffBase)
	}
	if c.BlockedRetryInterval, err = service.Duration(getenv, "TRIGGER_BLOCKED_RETRY_INTERVAL", time.Minute); err != nil {
		return c, err
	}
	if c.ConsumerBackoffBase, err = service.Duration(getenv, "CONSUMER_BACKOFF_BASE", time.Second); err != nil {
		return c, err
	}
	if c.ConsumerBackoffBase == 0 {
		return c, fmt.Errorf("CONSUMER_BACKOFF_BASE: must be greater than 0")
	}
	if c.Egress, err = egress.FromEnv(getenv, "TRIGGER_ALLOWED_NETWORKS", "TRIGGER_DENIED_NETWORKS"); err != nil {
		return c, err
	}
	operatorNamespace := service.String(getenv, "OPERATOR_NAMESPACE", service.DefaultOperatorNamespace)
	if c.LeaderElection, err = service.LoadLeaderElection(getenv, operatorNamespace); err != nil {
		return c, err
	}
	return c, nil
}
