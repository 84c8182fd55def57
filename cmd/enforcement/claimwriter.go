package main

import (
	"context"
	"fmt"
	"io"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// runClaimWriter creates (or updates) the durable claim writer consumer of one managed cluster,
// events.ClaimWriterConsumer(cluster): the one JetStream object a cluster's policy-watcher
// uses, and which its NATS user may bind to but not create (deploy/nats). It needs the stream
// (the hub services create it) and a NATS user allowed to create consumers (the operator's).
func runClaimWriter(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) != 1 || args[0] == "" {
		return fmt.Errorf("claim-writer: want one managed cluster name (the policy-watcher's CLUSTER_NAME)")
	}
	nc, js, err := connectJetStream(getenv)
	if err != nil {
		return err
	}
	defer nc.Close()
	stream, err := js.Stream(ctx, events.StreamName)
	if err != nil {
		return fmt.Errorf("read stream %s (the hub services create it): %w", events.StreamName, err)
	}
	// As replicated as the stream it reads (3 on a production NATS cluster).
	cfg := events.ClaimWriterConsumer(args[0], events.TopologyOptions{Replicas: stream.CachedInfo().Config.Replicas})
	if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamName, cfg); err != nil {
		return fmt.Errorf("create consumer %s on stream %s: %w", cfg.Durable, events.StreamName, err)
	}
	fmt.Fprintf(stdout, "Created consumer %s on stream %s (filter %s)\n", cfg.Durable, events.StreamName, cfg.FilterSubject)
	return nil
}
