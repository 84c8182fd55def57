// Command trigger-dispatcher delivers a ClusterRule's beforeInstall and afterInstall webhooks.
//
// It consumes install intents, gated installs and install outcomes from the ENFORCEMENT stream
// (durable consumer "trigger-dispatcher"), calls the rule's webhooks at the original operator's
// moments (before an Application is created, after it was created; never on updates), and
// publishes every final outcome as a trigger delivered / trigger failed event, which argo-syncer
// waits for before it creates an Application whose rule has a beforeInstall trigger. Delivery records in the
// enforcement-triggers KV bucket make a finished delivery final across redeliveries and restarts.
// The README tells the whole choreography.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// serviceName names the service in logs, metrics, the NATS connection and ce-source.
const serviceName = "trigger-dispatcher"

func main() { service.Main(serviceName, run) }

// run starts the dispatcher and blocks until ctx is cancelled, then shuts down gracefully and
// returns nil. It returns an error when the configuration is invalid or a dependency cannot be
// set up (the HTTP ports, the Kubernetes client, the JetStream topology). /healthz answers while
// NATS is still coming up; /readyz stays 503 until the consumer is bound.
func run(ctx context.Context, getenv service.Getenv, stdout, stderr io.Writer) error {
	_ = stderr // logs go to stdout as JSON; stderr is left for main's fatal error
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	svc, err := service.Start(ctx, service.Options{Name: serviceName, Getenv: getenv, Stdout: stdout,
		Kubernetes: true, NATS: true, Consumers: []string{events.ConsumerTriggerDispatcher}})
	if err != nil {
		return err
	}
	metrics := newMetrics(svc.Registry)
	if err := svc.ConnectNATS(); err != nil {
		return svc.Abort(err)
	}
	d, err := wireDispatcher(cfg, svc, metrics)
	if err != nil {
		return svc.Abort(err)
	}
	svc.OnStop(d.shutdown) // waiting retries give up at once; their messages go back to the server
	// A standby replica stops here, connected and ready: it consumes and calls nothing until it
	// holds the Lease. Delivery records make a redelivered intent's webhook call repeat with the
	// same delivery id, never as a second delivery.
	if err := svc.Lead(cfg.LeaderElection, leaseName); err != nil {
		return svc.Abort(err)
	}
	if err := svc.Consume(consumerOptions(cfg, d), d.handle); err != nil {
		return svc.Abort(err)
	}
	svc.Logger.Info("Started trigger dispatcher", "metrics", svc.MetricsAddr(), "health", svc.HealthAddr())
	svc.Go("blocked retries", func(ctx context.Context) error {
		d.retryBlocked(ctx)
		return nil
	})
	return svc.Wait()
}

// wireDispatcher creates the Kubernetes clients and opens the delivery records, and returns the
// dispatcher that uses them.
func wireDispatcher(cfg config, svc *service.Service, m *metrics) (*dispatcher, error) {
	// No client-side rate limit (pkg/service): client-go's default of 5 requests per second would
	// cap signed deliveries at five per second, since each one reads its signing Secret.
	cs, err := kubernetes.NewForConfig(svc.Kube)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(svc.Kube)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	kv, err := svc.JetStream.KeyValue(svc.Context(), events.BucketTriggers)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", events.BucketTriggers, err)
	}
	return newDispatcher(cfg, dispatcherDeps{
		records:   &recordStore{kv: kv},
		publisher: svc.Publisher(),
		secrets:   cs.CoreV1(),
		rules:     dyn.Resource(clusterRules),
		metrics:   m,
		logger:    svc.Logger,
	}), nil
}

// consumerOptions configures the dispatcher's consumer.
func consumerOptions(cfg config, d *dispatcher) events.ConsumerOptions {
	return events.ConsumerOptions{
		Name:    events.ConsumerTriggerDispatcher,
		Routes:  d.routes,
		Backoff: events.ExponentialBackoff(cfg.ConsumerBackoffBase, 30*time.Second),
		// A handler fails (retryably) only when NATS or Kubernetes do; dead-lettering the event
		// then would skip a delivery that argo-syncer waits for, so it is retried until they are
		// back. Webhook failures are outcomes, not handler errors, and invalid events are
		// dead-lettered at once.
		MaxAttempts:    math.MaxInt32,
		HandlerTimeout: d.handlerTimeout(),
		// Deliveries mostly wait on receivers; a few slow webhooks must not hold up the rest.
		Concurrency: 64,
	}
}

// discardLogger is a logger for code paths that have none (tests, benchmarks).
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
