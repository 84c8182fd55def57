package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// ConnectNATS connects to url, retrying with backoff until it succeeds or ctx ends, so a service
// may start before NATS. Once connected the client reconnects forever. auth are the options that
// authenticate the connection (NATSAuth). The logger records disconnects and reconnects. A server
// that refuses the credentials is retried too (its error is logged, the password never is): the
// operator may be adding the user.
func ConnectNATS(ctx context.Context, url, name string, logger *slog.Logger, auth ...nats.Option) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() { // the service's own drain or close at the stop
				return
			}
			logger.Warn("Disconnected from NATS", "error", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("Reconnected to NATS", "url", nc.ConnectedUrlRedacted())
		}),
		// What the server reports outside a reply: a permissions violation (a subject the
		// service's NATS user is not allowed) or a slow consumer.
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				logger.Warn("NATS reported an error", "error", err, "subscription", sub.Subject)
				return
			}
			logger.Warn("NATS reported an error", "error", err)
		}),
	}
	opts = append(opts, auth...)
	wait := 200 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			logger.Info("Connected to NATS", "url", nc.ConnectedUrlRedacted())
			return nc, nil
		}
		logger.Warn("NATS not reachable yet; retrying", "wait", wait.String(), "error", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to NATS: %w", errors.Join(ctx.Err(), err))
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// NATSAuth returns the options that authenticate a connection: as user with password (the
// users of the authorization configuration in deploy/nats), or with the credentials file creds
// (JWT and seed, for servers in operator mode); none when all are empty. With a user the
// connection's reply subjects live under InboxPrefix(user), the only inboxes the configuration
// lets that user subscribe to, so that no user reads another's replies (JetStream deliveries to
// pull consumers and API answers among them).
func NATSAuth(user, password, creds string) []nats.Option {
	var opts []nats.Option
	if user != "" {
		opts = append(opts, nats.UserInfo(user, password), nats.CustomInboxPrefix(InboxPrefix(user)))
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
	return opts
}

// NATSAuthFromEnv reads NATS_USER, NATS_PASSWORD and NATS_CREDS (as LoadCommon does, with its
// checks) and returns NATSAuth's options; for the command line tools that connect as an operator.
func NATSAuthFromEnv(getenv Getenv) ([]nats.Option, error) {
	user, password, creds := getenv("NATS_USER"), getenv("NATS_PASSWORD"), getenv("NATS_CREDS")
	if err := checkNATSAuth(user, password, creds); err != nil {
		return nil, err
	}
	return NATSAuth(user, password, creds), nil
}

// InboxPrefix is the prefix of the reply subjects of a connection as user: "_INBOX.<user>", the
// user escaped as one subject token (events.EscapeToken). The authorization configuration gives
// each user subscribe permission on "_INBOX.<user>.>" only.
func InboxPrefix(user string) string {
	return "_INBOX." + events.EscapeToken(user)
}

// checkNATSAuth refuses a user without a password (or the reverse) and two ways of
// authenticating at once, naming the variables.
func checkNATSAuth(user, password, creds string) error {
	switch {
	case user != "" && password == "":
		return errors.New("NATS_USER is set but NATS_PASSWORD is empty: set both, or neither")
	case user == "" && password != "":
		return errors.New("NATS_PASSWORD is set but NATS_USER is empty: set both, or neither")
	case user != "" && creds != "":
		return errors.New("NATS_USER and NATS_CREDS are both set: authenticate with a user and password or with a credentials file, not both")
	}
	return nil
}

// NATSConnected is a readiness check: the connection is up.
func NATSConnected(nc *nats.Conn) Check {
	return func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("NATS %s", nc.Status())
		}
		return nil
	}
}
