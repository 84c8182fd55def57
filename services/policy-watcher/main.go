// Command policy-watcher folds the compliance of the OCM Policies in one namespace of a managed
// cluster into a ClusterClaim ("compliant", "noncompliant" or "empty"), so that placement rules
// can select clusters by it.
//
// It re-implements the original Python daemon and keeps its interface: the same variables
// (POLL_INTERVAL_SEC, STABLE_DURATION_SEC, TARGET_CLAIM_NAME, WATCH_NAMESPACE), the same fold,
// the same debounce ("compliant" only after it held for the stable duration; the other values at
// once), and it runs with the original's RBAC. Beyond it, it watches Policies where RBAC allows
// (polling remains the fallback and the resync), writes "compliant" when the stable duration
// ends rather than at the next poll, creates a missing claim, and keeps its debounce clock on the
// claim across restarts. With NATS_URL set, every decision travels as a "compliance changed"
// event and the claim writer in this same process applies it and publishes "claim updated";
// without NATS it writes the claim directly, like the original. The README tells the details.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// serviceName names the service in logs, metrics, the NATS connection and ce-source.
const serviceName = "policy-watcher"

func main() { service.Main(serviceName, run) }

// run starts the watcher (and, with NATS, the claim writer) and blocks until ctx is cancelled;
// then it shuts down and returns nil. It returns an error only for what no retry can fix: an
// invalid configuration, a port that cannot be bound, no Kubernetes configuration, or (with
// NATS) a NATS user refused its claim writer consumer. An unreachable API server, or a stream or
// consumer not created yet, is not one of them. With NATS, /readyz waits for the claim writer's
// consumer (its check is registered before /readyz is served); without NATS it follows the
// Kubernetes API alone.
func run(ctx context.Context, getenv service.Getenv, stdout, stderr io.Writer) error {
	_ = stderr // logs go to stdout as JSON; stderr is left for main's fatal error
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	withNATS := cfg.NATSURL != ""
	consumerCfg := events.ClaimWriterConsumer(cfg.ClusterName, events.TopologyOptions{})
	opts := service.Options{Name: serviceName, Getenv: getenv, Stdout: stdout,
		LogAttrs: []any{"claim", cfg.ClaimName, "cluster", cfg.ClusterName}, Kubernetes: true, NATS: withNATS}
	if withNATS {
		opts.Consumers = []string{consumerCfg.Durable}
	}
	svc, err := service.Start(ctx, opts)
	if err != nil {
		return err
	}
	m := newMetrics(svc.Registry)
	dyn, cs, err := kubeClients(svc)
	if err != nil {
		return svc.Abort(err)
	}
	claims := newClaimStore(dyn, cfg.ClaimName)
	var sink claimSink = &directSink{claims: claims, metrics: m, logger: svc.Logger}
	mode := "direct"
	if withNATS {
		if sink, err = startClaimWriter(cfg, consumerCfg, svc, claims, m); err != nil {
			return svc.Abort(err)
		}
		mode = "events"
	}
	svc.Logger.Info("Started policy watcher", "namespace", cfg.Namespace, "mode", mode,
		"pollInterval", cfg.PollInterval.String(), "stableDuration", cfg.StableDuration.String(),
		"metrics", svc.MetricsAddr(), "health", svc.HealthAddr())
	w := newWatcher(cfg, dyn, cs.AuthorizationV1().SelfSubjectAccessReviews(), claims, sink, m, svc.Logger)
	svc.Go("policy watcher", func(ctx context.Context) error {
		w.run(ctx)
		return nil
	})
	return svc.Wait()
}

// waitForConsumer waits until this cluster's claim writer consumer exists. policy-watcher
// creates no JetStream object: the hub services create the stream, and the operator the
// consumer (`enforcement claim-writer <cluster>`, with its NATS user); this cluster's NATS user
// may only bind to it, pull and acknowledge (deploy/nats). Until then it logs what it waits for
// and retries with backoff until the service stops; /readyz stays 503 ("consumer ... not
// bound") meanwhile. Any other error, such as a NATS user without the permission, is returned.
func waitForConsumer(svc *service.Service, name string) error {
	wait := 500 * time.Millisecond
	for {
		_, err := svc.JetStream.Consumer(svc.Context(), events.StreamName, name)
		if err == nil {
			return nil
		}
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			svc.Logger.Warn("Waiting for stream; the hub services create it", "stream", events.StreamName,
				"consumer", name, "wait", wait.String(), "error", err)
		case errors.Is(err, jetstream.ErrConsumerNotFound):
			svc.Logger.Warn("Waiting for claim writer consumer; the operator creates it with enforcement claim-writer",
				"stream", events.StreamName, "consumer", name, "wait", wait.String(), "error", err)
		default:
			return fmt.Errorf("bind consumer %s: %w", name, err)
		}
		select {
		case <-svc.Context().Done():
			return fmt.Errorf("bind consumer %s: %w", name, errors.Join(svc.Context().Err(), err))
		case <-time.After(wait):
		}
		wait = min(wait*2, 10*time.Second)
	}
}

// kubeClients creates the dynamic client (Policies, the ClusterClaim) and the typed one (access
// reviews).
func kubeClients(svc *service.Service) (dynamic.Interface, kubernetes.Interface, error) {
	// No client-side rate limit (pkg/service): client-go's default (5 requests/s, burst 10) would
	// delay the claim read of an evaluation behind the poll's own reads with sub-second poll
	// intervals. The service's steady load is one list and one get per poll.
	dyn, err := dynamic.NewForConfig(svc.Kube)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes dynamic client: %w", err)
	}
	cs, err := kubernetes.NewForConfig(svc.Kube)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return dyn, cs, nil
}

// startClaimWriter connects to NATS (retrying until the service stops), waits for the claim
// writer's durable consumer and binds the claim writer. It returns the event sink for the
// watcher. It never creates a JetStream object; see waitForConsumer.
func startClaimWriter(cfg config, consumerCfg jetstream.ConsumerConfig, svc *service.Service, claims *claimStore, m *metrics) (claimSink, error) {
	if err := svc.ConnectNATSWithoutTopology(); err != nil {
		return nil, err
	}
	if err := waitForConsumer(svc, consumerCfg.Durable); err != nil {
		return nil, err
	}
	publisher := svc.Publisher()
	logger := svc.Logger.With("component", "claim-writer")
	writer := &claimWriter{claimName: cfg.ClaimName, claims: claims, publisher: publisher, metrics: m, logger: logger}
	routes := writer.routes()
	if err := svc.Consume(events.ConsumerOptions{
		Routes:  routes,
		Name:    consumerCfg.Durable,
		Backoff: events.ExponentialBackoff(250*time.Millisecond, 30*time.Second),
		Logger:  logger,
	}, routes.Handle); err != nil {
		return nil, err
	}
	logger.Info("Bound claim writer", "consumer", consumerCfg.Durable, "url", svc.NATS.ConnectedUrlRedacted())
	return &eventSink{cfg: cfg, claims: claims, publisher: publisher, metrics: m, logger: svc.Logger, now: time.Now}, nil
}
