// Command argo-syncer turns Enforcement's install and uninstall intents into Argo CD objects:
// a cluster Secret per registered cluster, an AppProject per cluster and an Application per
// (cluster, enforcement), written declaratively through the Kubernetes API of the Argo CD
// namespace. It consumes the durable consumer "argo-syncer" (intents and trigger outcomes) and
// publishes install gated / succeeded / failed and uninstall done. See README.md.
package main

import (
	"context"
	"fmt"
	"io"

	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"k8s.io/client-go/kubernetes"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

const serviceName = "argo-syncer"

func main() { service.Main(serviceName, run) }

// run starts the service and blocks until ctx ends; it returns nil after a clean shutdown.
// Start-up order: probes first (so that a failing start is visible), then the Argo CD caches
// (intents are only useful once argo-syncer can read what exists), then NATS, then (with
// LEADER_ELECTION) the Lease, then the consumer and the workers that write.
// /readyz turns green when the consumer is bound. At the stop the consumer finishes its
// in-flight intents before the informers stop (see pkg/service for the whole order).
func run(ctx context.Context, getenv service.Getenv, stdout, _ io.Writer) error {
	cfg, err := LoadConfig(getenv)
	if err != nil {
		return err
	}
	svc, err := service.Start(ctx, service.Options{Name: serviceName, Getenv: getenv, Stdout: stdout,
		Kubernetes: true, NATS: true, Consumers: []string{events.ConsumerArgoSyncer}})
	if err != nil {
		return err
	}
	metrics := NewMetrics(svc.Registry)
	syncer, err := newSyncer(cfg, svc, metrics)
	if err != nil {
		return svc.Abort(err)
	}
	// A failure to sync the caches ends the service, since every decision reads them.
	cachesReady, leading := make(chan struct{}), make(chan struct{})
	svc.Go("Argo CD caches", func(ctx context.Context) error { return syncer.Run(ctx, cachesReady, leading) })
	select {
	case <-cachesReady:
	case <-svc.Context().Done():
		return svc.Abort(svc.Context().Err())
	}
	svc.Logger.Info("Synced Argo CD caches", "namespace", cfg.ArgoCDNamespace)

	if err := svc.ConnectNATS(); err != nil {
		return svc.Abort(err)
	}
	h, err := newHandler(svc, syncer, metrics)
	if err != nil {
		return svc.Abort(err)
	}
	// A standby replica stops here, its caches warm, connected and ready: it consumes and writes
	// nothing until it holds the Lease. The new leader resumes from the durable consumer (what
	// the previous one did not acknowledge is redelivered) and from the gates and decisions
	// buckets, which make a repeated intent a no-op.
	if err := svc.Lead(cfg.LeaderElection, LeaseName); err != nil {
		return svc.Abort(err)
	}
	close(leading)
	svc.Go("Application health", func(ctx context.Context) error { return syncer.ReportHealth(ctx, svc.Publisher()) })
	// Installs that waited for their beforeInstall trigger under a legacy key must be found by
	// the trigger's outcome, which the consumer may bring at once.
	moved, err := h.gates.moveLegacyKeys(svc.Context())
	if err != nil {
		return svc.Abort(err)
	}
	if moved > 0 {
		svc.Logger.Info("Moved installs waiting for beforeInstall to 64-bit names", "count", moved)
	}
	opts := events.ConsumerOptions{Name: events.ConsumerArgoSyncer, Concurrency: cfg.Concurrency, Routes: h.Routes()}
	if err := svc.Consume(opts, h.Handle); err != nil {
		return svc.Abort(err)
	}
	svc.Go("resync", func(ctx context.Context) error { return h.RunResync(ctx, cfg.ResyncInterval) })
	svc.Logger.Info("Started", "health", svc.HealthAddr(), "metrics", svc.MetricsAddr())
	return svc.Wait()
}

// newSyncer creates the Kubernetes and Argo CD clients, which share one rate limit (they talk
// to the same API server), and the Syncer that writes through them. In API mode the Argo CD
// objects go through Argo CD's API server instead (argocdapi.go); the Kubernetes client still
// reads the source Secrets. The session is checked once here, so that a wrong password is an
// error in the log at start as well as in /readyz (check "argocd") until it is fixed.
func newSyncer(cfg Config, svc *service.Service, metrics *Metrics) (*Syncer, error) {
	if cfg.KubeQPS > 0 { // otherwise none: the API server paces the writes
		svc.Kube.QPS, svc.Kube.Burst = cfg.KubeQPS, cfg.KubeBurst
	}
	svc.Kube.UserAgent = serviceName
	kube, err := kubernetes.NewForConfig(svc.Kube)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	var opts SyncerOptions
	var argo argoclient.Interface
	if cfg.ArgoAPI.Enabled() {
		session, err := newArgoSession(cfg.ArgoAPI, metrics)
		if err != nil {
			return nil, err
		}
		svc.Health.AddCheck("argocd", session.Ready)
		if _, err := session.clients(svc.Context()); err != nil {
			svc.Logger.Error("Argo CD API not usable; retrying", "url", cfg.ArgoAPI.URL, "error", err)
		} else {
			svc.Logger.Info("Connected to Argo CD API", "url", cfg.ArgoAPI.URL)
		}
		argo, opts.ClusterSecrets = argoAPIClients(session, cfg.ArgoCDNamespace, cfg.ArgoAPI.PollInterval, svc.Logger)
		opts.APIMode = true
	} else if argo, err = argoclient.NewForConfig(svc.Kube); err != nil {
		return nil, fmt.Errorf("argo cd client: %w", err)
	}
	return NewSyncer(kube, argo, SyncerOptions{
		ArgoCDNamespace:   cfg.ArgoCDNamespace,
		OperatorNamespace: cfg.OperatorNamespace,
		Project: ProjectSettings{
			AnyRepo:          cfg.ProjectSourceRepos == SourceReposAny,
			ClusterResources: cfg.ProjectClusterResources == ClusterResAll,
		},
		SourceSecretTTL: cfg.SourceSecretTTL,
		Logger:          svc.Logger,
		Metrics:         metrics,
		ClusterSecrets:  opts.ClusterSecrets,
		APIMode:         opts.APIMode,
	}), nil
}

// newHandler opens argo-syncer's buckets (install gates, last decisions) and returns the
// consumer's handler.
// Outcomes are published with the deterministic ids of pkg/events, so a retried handler that
// publishes again is deduplicated by the stream.
func newHandler(svc *service.Service, syncer *Syncer, metrics *Metrics) (*Handler, error) {
	gates, err := svc.JetStream.KeyValue(svc.Context(), events.BucketInstallGates)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", events.BucketInstallGates, err)
	}
	decisions, err := svc.JetStream.KeyValue(svc.Context(), events.BucketLastDecisions)
	if err != nil {
		return nil, fmt.Errorf("open bucket %s: %w", events.BucketLastDecisions, err)
	}
	return &Handler{
		syncer:    syncer,
		pub:       svc.Publisher(),
		gates:     &gateStore{kv: gates},
		decisions: &decisionStore{kv: decisions},
		logger:    svc.Logger,
		metrics:   metrics,
	}, nil
}
