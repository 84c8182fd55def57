// Command argo-syncer turns Enforcement's install and uninstall intents into Argo CD objects:
// a cluster Secret per registered cluster, an AppProject per cluster and an Application per
// (cluster, enforcement), written declaratively through the Kubernetes API of the Argo CD
// namespace. It consumes the durable consumer "argo-syncer" (intents and trigger outcomes) and
// publishes install gated / succeeded / failed and uninstall done. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

const serviceName = "argo-syncer"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "argo-syncer:", err)
		os.Exit(1)
	}
}

// run starts the service and blocks until ctx ends; it returns nil after a clean shutdown.
func run(ctx context.Context, getenv func(string) string, stdout, _ io.Writer) error {
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	// Start-up order: logger and probes first (so a failing start is visible), then the Argo CD
	// caches (intents are only useful once argo-syncer can read what exists), then NATS and the
	// consumer. /readyz turns green when the consumer is bound.
	logger := service.NewLogger(stdout, serviceName, getenv)
	reg := service.NewRegistry()
	health := service.NewHealth()
	metrics := NewMetrics(reg)

	kubeCfg, err := service.KubeConfig(getenv)
	if err != nil {
		return err
	}
	// One rate limit shared by both clients: they talk to the same API server.
	kubeCfg.QPS, kubeCfg.Burst = cfg.KubeQPS, cfg.KubeBurst
	kubeCfg.UserAgent = serviceName
	kube, err := kubernetes.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	argo, err := argoclient.NewForConfig(kubeCfg)
	if err != nil {
		return fmt.Errorf("argo cd client: %w", err)
	}
	kubeCheck, err := service.KubeReachable(kubeCfg)
	if err != nil {
		return err
	}
	health.AddCheck("kubernetes", kubeCheck)
	consumerBound := make(chan struct{})
	health.AddCheck("consumer", func(context.Context) error {
		select {
		case <-consumerBound:
			return nil
		default:
			return errors.New("argo-syncer consumer not bound yet")
		}
	})

	healthSrv, err := service.Listen(cfg.HealthAddr, health.Handler(), logger)
	if err != nil {
		return err
	}
	metricsSrv, err := service.Listen(cfg.MetricsAddr, service.MetricsHandler(reg), logger)
	if err != nil {
		return errors.Join(err, healthSrv.Shutdown(context.Background()))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
		defer cancel()
		_ = metricsSrv.Shutdown(sctx)
		_ = healthSrv.Shutdown(sctx)
	}()

	syncer := NewSyncer(kube, argo, SyncerOptions{
		ArgoCDNamespace:   cfg.ArgoCDNamespace,
		OperatorNamespace: cfg.OperatorNamespace,
		Project: ProjectSettings{
			AnyRepo:          cfg.ProjectSourceRepos == SourceReposAny,
			ClusterResources: cfg.ProjectClusterResources == ClusterResAll,
		},
		SourceSecretTTL: cfg.SourceSecretTTL,
		Logger:          logger,
		Metrics:         metrics,
	})
	// The informers and the unregistration queue run until ctx ends; a failure to sync the caches
	// ends start-up, since every decision reads them.
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	cachesReady := make(chan struct{})
	syncDone := make(chan error, 1)
	go func() { syncDone <- syncer.Run(syncCtx, cachesReady) }()
	select {
	case <-cachesReady:
	case err := <-syncDone:
		return err
	case <-ctx.Done():
		return nil
	}
	logger.Info("Synced Argo CD caches", "namespace", cfg.ArgoCDNamespace)

	nc, err := service.ConnectNATS(ctx, cfg.NATSURL, cfg.NATSCreds, serviceName, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() { _ = nc.Drain() }()
	health.AddCheck("nats", service.NATSConnected(nc))
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		return err
	}
	gates, err := js.KeyValue(ctx, events.BucketInstallGates)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", events.BucketInstallGates, err)
	}
	// Outcomes are published with the deterministic ids of pkg/events, so a retried handler that
	// publishes again is deduplicated by the stream.
	h := &Handler{
		syncer:  syncer,
		pub:     events.NewPublisher(js, "/enforcement/"+serviceName),
		gates:   &gateStore{kv: gates},
		logger:  logger,
		metrics: metrics,
	}
	consumer, err := events.Consume(ctx, js, h.Handle, events.ConsumerOptions{
		Name:        events.ConsumerArgoSyncer,
		Routes:      h.Routes(),
		Concurrency: cfg.Concurrency,
		Logger:      logger,
		Metrics:     events.NewMetrics(reg, serviceName),
	})
	if err != nil {
		return err
	}
	close(consumerBound)
	logger.Info("Started", "health", healthSrv.Addr, "metrics", metricsSrv.Addr)

	// Shutdown: stop pulling and let in-flight handlers finish (Stop drains), then the deferred
	// calls drain NATS and stop the HTTP servers.
	select {
	case <-ctx.Done():
	case err := <-syncDone:
		if err != nil {
			logger.Error("Cache sync stopped", "error", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := consumer.Stop(sctx); err != nil {
		logger.Warn("Consumer did not stop cleanly", "error", err)
	}
	logger.Info("Stopped")
	return nil
}
