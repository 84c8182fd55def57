package main

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/enforcement-io/enforcement/pkg/service"
)

// defaultDeniedNetworks are refused as webhook targets unless TRIGGER_DENIED_NETWORKS replaces
// them: IPv4 link-local (which holds the AWS, GCP and Azure metadata service 169.254.169.254),
// IPv6 link-local, and the AWS IPv6 metadata address. A rule author can write any endpoint into
// a ClusterRule; without this list a rule could make the dispatcher fetch cloud credentials.
var defaultDeniedNetworks = []string{"169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128"}

// config is everything the dispatcher reads from its environment, validated at start.
type config struct {

	// DefaultTimeout bounds one attempt of a trigger that sets no timeout
	// (TRIGGER_DEFAULT_TIMEOUT, default 5s, as the original).
	DefaultTimeout time.Duration
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

	// Denied and Allowed are the network policy for webhook targets, checked on the resolved
	// address at connection time (TRIGGER_DENIED_NETWORKS, TRIGGER_ALLOWED_NETWORKS).
	Denied  []netip.Prefix
	Allowed []netip.Prefix

	// ConsumerBackoffBase is the first wait of the event consumer's own retries of a handler that
	// fails for a reason other than the webhook, such as NATS or Kubernetes being unreachable
	// (CONSUMER_BACKOFF_BASE, default 1s, doubling up to 30s).
	ConsumerBackoffBase time.Duration
}

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
	denied := getenv("TRIGGER_DENIED_NETWORKS")
	switch denied {
	case "":
		c.Denied, _ = parsePrefixes("", strings.Join(defaultDeniedNetworks, ","))
	case "none":
		c.Denied = nil
	default:
		if c.Denied, err = parsePrefixes("TRIGGER_DENIED_NETWORKS", denied); err != nil {
			return c, err
		}
	}
	if c.Allowed, err = parsePrefixes("TRIGGER_ALLOWED_NETWORKS", getenv("TRIGGER_ALLOWED_NETWORKS")); err != nil {
		return c, err
	}
	return c, nil
}

// parsePrefixes parses a comma-separated list of CIDR prefixes or single addresses (a single
// address is its /32 or /128). An empty list is nil.
func parsePrefixes(name, list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		if !strings.Contains(item, "/") {
			addr, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%s: %q is neither a CIDR prefix nor an IP address", name, item)
			}
			out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR prefix: %w", name, item, err)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
