package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
)

// ConnectNATS connects to url, retrying with backoff until it succeeds or ctx ends, so a service
// may start before NATS. Once connected the client reconnects forever. creds, if set, is a NATS
// credentials file. The logger records disconnects and reconnects.
func ConnectNATS(ctx context.Context, url, creds, name string, logger *slog.Logger) (*nats.Conn, error) {
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
	}
	if creds != "" {
		opts = append(opts, nats.UserCredentials(creds))
	}
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

// NATSConnected is a readiness check: the connection is up.
func NATSConnected(nc *nats.Conn) Check {
	return func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("NATS %s", nc.Status())
		}
		return nil
	}
}
