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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// serviceName names the service in logs, metrics, the NATS connection and ce-source.
const serviceName = "trigger-dispatcher"

// shutdownTimeout bounds the graceful shutdown: in-flight webhook attempts finish (each bounded by
// its trigger's timeout), waiting retries are handed back to the server.
const shutdownTimeout = 30 * time.Second

// natsDrainTimeout bounds the drain of the NATS connection at shutdown.
const natsDrainTimeout = 5 * time.Second

// kubeQPS and kubeBurst bound the dispatcher's Kubernetes API requests (signing Secret reads).
const (
	kubeQPS   = 100
	kubeBurst = 200
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "trigger-dispatcher:", err)
		os.Exit(1)
	}
}

// run starts the dispatcher and blocks until ctx is cancelled, then shuts down gracefully and
// returns nil. It returns an error when the configuration is invalid or a dependency cannot be
// set up (the HTTP ports, the Kubernetes client, the JetStream topology).
func run(ctx context.Context, getenv service.Getenv, stdout, stderr io.Writer) error {
	_ = stderr // logs go to stdout as JSON; stderr is left for main's fatal error
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	logger := service.NewLogger(stdout, serviceName, getenv)
	reg := service.NewRegistry()
	metrics := newMetrics(reg)

	kubeCfg, err := service.KubeConfig(getenv)
	if err != nil {
		return err
	}
	// client-go's default of 5 requests per second (burst 10) would cap signed deliveries at five
	// per second, since each one reads its signing Secret.
	kubeCfg.QPS, kubeCfg.Burst = kubeQPS, kubeBurst
	kubeCheck, err := service.KubeReachable(kubeCfg)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	// Every readiness check is registered before the health server starts (Health does not
	// support adding checks while it serves); the NATS and consumer checks read state that is
	// filled in as start-up proceeds. /healthz answers while NATS is still coming up; /readyz
	// stays 503 until the consumer is bound.
	health := service.NewHealth()
	var bound atomic.Bool
	var conn atomic.Pointer[nats.Conn]
	health.AddCheck("kubernetes", kubeCheck)
	health.AddCheck("nats", func(ctx context.Context) error {
		nc := conn.Load()
		if nc == nil {
			return errors.New("not connected yet")
		}
		return service.NATSConnected(nc)(ctx)
	})
	health.AddCheck("consumer", func(context.Context) error {
		if !bound.Load() {
			return errors.New(events.ConsumerTriggerDispatcher + " not bound")
		}
		return nil
	})
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

	nc, err := service.ConnectNATS(ctx, cfg.NATSURL, cfg.NATSCreds, serviceName, logger)
	if err != nil {
		if ctx.Err() != nil { // cancelled while waiting for NATS: a normal shutdown
			return stopHTTP()
		}
		return errors.Join(err, stopHTTP())
	}
	conn.Store(nc)
	closeNATS := func() error { return drainNATS(nc) }
	// fail ends a start-up that could not complete; a cancelled ctx makes it a normal shutdown.
	fail := func(err error) error {
		cleanup := errors.Join(closeNATS(), stopHTTP())
		if ctx.Err() != nil {
			return cleanup
		}
		return errors.Join(err, cleanup)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(fmt.Errorf("jetstream: %w", err))
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		return fail(fmt.Errorf("apply topology: %w", err))
	}
	kv, err := js.KeyValue(ctx, events.BucketTriggers)
	if err != nil {
		return fail(fmt.Errorf("open bucket %s: %w", events.BucketTriggers, err))
	}

	d := newDispatcher(cfg, dispatcherDeps{
		records:   &recordStore{kv: kv},
		publisher: events.NewPublisher(js, "/enforcement/"+serviceName),
		secrets:   cs.CoreV1(),
		metrics:   metrics,
		logger:    logger,
	})
	consumer, err := events.Consume(ctx, js, d.handle, events.ConsumerOptions{
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
		Metrics:     events.NewMetrics(reg, serviceName),
		Logger:      logger,
	})
	if err != nil {
		return fail(err)
	}
	bound.Store(true)
	logger.Info("Started trigger dispatcher", "metrics", metricsSrv.Addr, "health", healthSrv.Addr)

	blockedDone := make(chan struct{})
	go func() {
		defer close(blockedDone)
		d.retryBlocked(ctx)
	}()

	<-ctx.Done()
	logger.Info("Shutting down")
	bound.Store(false)
	d.shutdown() // waiting retries give up at once; their messages go back to the server
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err = consumer.Stop(sctx)
	<-blockedDone
	err = errors.Join(err, closeNATS(), stopHTTP())
	if err != nil {
		return err
	}
	logger.Info("Stopped")
	return nil
}

// drainNATS drains the connection (pending publishes are flushed, subscriptions finish) and
// waits for it to close, at most natsDrainTimeout; Drain alone returns before that.
func drainNATS(nc *nats.Conn) error {
	if err := nc.Drain(); err != nil {
		nc.Close()
		return fmt.Errorf("drain NATS: %w", err)
	}
	deadline := time.Now().Add(natsDrainTimeout)
	for !nc.IsClosed() {
		if time.Now().After(deadline) {
			nc.Close()
			return fmt.Errorf("drain NATS: not closed within %s", natsDrainTimeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// discardLogger is a logger for code paths that have none (tests, benchmarks).
func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
