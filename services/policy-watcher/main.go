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
	"log/slog"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// serviceName names the service in logs, metrics, the NATS connection and ce-source.
const serviceName = "policy-watcher"

// shutdownTimeout bounds the graceful shutdown (the claim writer's in-flight write, NATS drain,
// HTTP servers).
const shutdownTimeout = 15 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, serviceName+":", err)
		os.Exit(1)
	}
}

// run starts the watcher (and, with NATS, the claim writer) and blocks until ctx is cancelled;
// then it shuts down and returns nil. It returns an error only for what no retry can fix: an
// invalid configuration, a port that cannot be bound, no Kubernetes configuration, or (with
// NATS) a topology the server refuses. An unreachable API server is not one of them.
func run(ctx context.Context, getenv service.Getenv, stdout, stderr io.Writer) error {
	_ = stderr // logs go to stdout as JSON; stderr is left for main's fatal error
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := service.NewLogger(stdout, serviceName, getenv).With("claim", cfg.ClaimName, "cluster", cfg.ClusterName)
	reg := service.NewRegistry()
	m := newMetrics(reg)

	health := service.NewHealth()
	if cfg.NATSURL != "" {
		// With NATS, not ready until the claim writer is bound (startNATS replaces this check):
		// registered before /readyz is served, so that it never answers 200 on the Kubernetes
		// check alone in the moment before startNATS runs.
		health.AddCheck("consumer", func(context.Context) error { return errors.New("claim writer not started yet") })
	}
	healthSrv, err := service.Listen(cfg.HealthAddr, health.Handler(), logger)
	if err != nil {
		return err
	}
	metricsSrv, err := service.Listen(cfg.MetricsAddr, service.MetricsHandler(reg), logger)
	if err != nil {
		return errors.Join(err, healthSrv.Shutdown(context.Background()))
	}
	stopHTTP := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return errors.Join(metricsSrv.Shutdown(sctx), healthSrv.Shutdown(sctx))
	}

	kubeCfg, err := service.KubeConfig(getenv)
	if err != nil {
		return errors.Join(err, stopHTTP())
	}
	// client-go's default limit (5 requests/s, burst 10) would delay the claim read of an
	// evaluation behind the poll's own reads with sub-second poll intervals, and so delay the
	// write the debounce timer asks for. The service's steady load is one list and one get per
	// poll; this only lifts the cap.
	kubeCfg.QPS, kubeCfg.Burst = 50, 100
	kubeCheck, err := service.KubeReachable(kubeCfg)
	if err != nil {
		return errors.Join(err, stopHTTP())
	}
	health.AddCheck("kubernetes", kubeCheck)
	dyn, err := dynamic.NewForConfig(kubeCfg)
	if err != nil {
		return errors.Join(fmt.Errorf("kubernetes dynamic client: %w", err), stopHTTP())
	}
	cs, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return errors.Join(fmt.Errorf("kubernetes client: %w", err), stopHTTP())
	}
	claims := newClaimStore(dyn, cfg.ClaimName)

	var sink claimSink = &directSink{claims: claims, metrics: m, logger: logger}
	stopNATS := func() error { return nil }
	if cfg.NATSURL != "" {
		var natsErr error
		sink, stopNATS, natsErr = startNATS(ctx, cfg, claims, health, reg, m, logger)
		if natsErr != nil {
			if ctx.Err() != nil { // cancelled while waiting for NATS: a normal shutdown
				return stopHTTP()
			}
			return errors.Join(natsErr, stopHTTP())
		}
	}

	mode := "direct"
	if cfg.NATSURL != "" {
		mode = "events"
	}
	logger.Info("Started policy watcher", "namespace", cfg.Namespace, "mode", mode,
		"pollInterval", cfg.PollInterval.String(), "stableDuration", cfg.StableDuration.String(),
		"metrics", metricsSrv.Addr, "health", healthSrv.Addr)
	w := newWatcher(cfg, dyn, cs.AuthorizationV1().SelfSubjectAccessReviews(), claims, sink, m, logger)
	w.run(ctx)

	logger.Info("Stopping policy watcher")
	return errors.Join(stopNATS(), stopHTTP())
}

// startNATS connects to NATS (retrying until ctx ends), applies the topology and the claim
// writer's durable consumer, and starts the claim writer. It returns the event sink for the
// watcher and the function that stops the writer and drains the connection.
func startNATS(ctx context.Context, cfg config, claims *claimStore, health *service.Health,
	reg *prometheus.Registry, m *metrics, logger *slog.Logger) (claimSink, func() error, error) {
	consumerCfg := events.ClaimWriterConsumer(cfg.ClusterName, events.TopologyOptions{})
	// Not ready until the claim writer is bound: added before connecting, so that /readyz does
	// not answer 200 on the Kubernetes check alone while NATS is still coming up.
	var bound atomic.Bool
	health.AddCheck("consumer", func(context.Context) error {
		if !bound.Load() {
			return errors.New("consumer " + consumerCfg.Durable + " not bound")
		}
		return nil
	})
	nc, err := service.ConnectNATS(ctx, cfg.NATSURL, cfg.NATSCreds, serviceName, logger)
	if err != nil {
		return nil, nil, err
	}
	health.AddCheck("nats", service.NATSConnected(nc))
	closeNATS := func() error {
		if err := nc.Drain(); err != nil {
			nc.Close()
			return fmt.Errorf("drain NATS: %w", err)
		}
		return nil
	}
	fail := func(err error) (claimSink, func() error, error) { return nil, nil, errors.Join(err, closeNATS()) }
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		return fail(fmt.Errorf("apply topology: %w", err))
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamName, consumerCfg); err != nil {
		return fail(fmt.Errorf("apply consumer %s: %w", consumerCfg.Durable, err))
	}
	publisher := events.NewPublisher(js, "/enforcement/"+serviceName)
	writer := &claimWriter{claimName: cfg.ClaimName, claims: claims, publisher: publisher, metrics: m,
		logger: logger.With("component", "claim-writer")}
	consumer, err := writer.routes().Consume(ctx, js, events.ConsumerOptions{
		Name:    consumerCfg.Durable,
		Backoff: events.ExponentialBackoff(250*time.Millisecond, 30*time.Second),
		Metrics: events.NewMetrics(reg, serviceName),
		Logger:  logger.With("component", "claim-writer"),
	})
	if err != nil {
		return fail(err)
	}
	bound.Store(true)
	logger.Info("Bound claim writer", "consumer", consumerCfg.Durable, "url", nc.ConnectedUrlRedacted())
	sink := &eventSink{cfg: cfg, claims: claims, publisher: publisher, metrics: m, logger: logger, now: time.Now}
	stop := func() error {
		bound.Store(false)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return errors.Join(consumer.Stop(sctx), closeNATS())
	}
	return sink, stop, nil
}
