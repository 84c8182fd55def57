// Command rule-engine is Enforcement's ClusterRule controller. It keeps a view of the clusters
// every source lists (from cluster events), matches them against ClusterRules, renders each
// rule's enforcements with the cluster's variables, and publishes install and uninstall intents
// for argo-syncer. It folds install, trigger and source outcomes back into each rule's status.
// See README.md for the events, configuration, metrics and design decisions.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "rule-engine:", err)
		os.Exit(1)
	}
}

// serviceName names the service in logs, metrics and the events it publishes.
const serviceName = "rule-engine"

// shutdownTimeout bounds the graceful stop of the consumer, the controller and HTTP.
const shutdownTimeout = 20 * time.Second

// config is the rule engine's configuration, read from the environment once at start.
type config struct {
	service.Common
	// OperatorNamespace (OPERATOR_NAMESPACE, default "enforcement") holds the source Secrets.
	OperatorNamespace string
	// WatchNamespaces (WATCH_NAMESPACES, comma list) limits the watched namespaces; empty: all.
	WatchNamespaces []string
	// TemplateHTTPAllow (TEMPLATE_HTTP_ALLOW, comma list of hosts) lets templates call
	// requests.get on these hosts; empty: templates have no network.
	TemplateHTTPAllow []string
	// TemplateHTTPTimeout (TEMPLATE_HTTP_TIMEOUT, default 5s) bounds one requests.get.
	TemplateHTTPTimeout time.Duration
	// TemplateRenderTimeout (TEMPLATE_RENDER_TIMEOUT, default 10s) bounds one render of a
	// rule for a cluster; past it the pair gets a TemplateError.
	TemplateRenderTimeout time.Duration
	// SourceDegradedTTL (SOURCE_DEGRADED_TTL, default 10m) is how long a "source degraded"
	// event keeps the SourceDegraded / RemovalsHeld condition on the rules of that source.
	SourceDegradedTTL time.Duration
	// LeaderElection (LEADER_ELECTION, default false) runs the engine only in the replica that
	// holds the Lease "rule-engine.enforcement.globo.com" in LeaderElectionNamespace
	// (LEADER_ELECTION_NAMESPACE, default OPERATOR_NAMESPACE); the others wait, ready.
	LeaderElection          bool
	LeaderElectionNamespace string
	// StatusInterval (STATUS_INTERVAL, default 1s) is how long status notices for a rule are
	// collected before its status is recomputed and written: it bounds status writes per rule.
	StatusInterval time.Duration
}

func loadConfig(getenv service.Getenv) (config, error) {
	c := config{
		Common:            service.LoadCommon(getenv),
		OperatorNamespace: service.String(getenv, "OPERATOR_NAMESPACE", service.DefaultOperatorNamespace),
		WatchNamespaces:   commaList(getenv("WATCH_NAMESPACES")),
		TemplateHTTPAllow: commaList(getenv("TEMPLATE_HTTP_ALLOW")),
	}
	var errs []error
	switch v := strings.ToLower(getenv("LEADER_ELECTION")); v {
	case "", "false", "0":
	case "true", "1":
		c.LeaderElection = true
	default:
		errs = append(errs, fmt.Errorf("LEADER_ELECTION=%q: want true or false", v))
	}
	c.LeaderElectionNamespace = service.String(getenv, "LEADER_ELECTION_NAMESPACE", c.OperatorNamespace)
	duration := func(dst *time.Duration, name string, def time.Duration, positive bool) {
		d, err := service.Duration(getenv, name, def)
		switch {
		case err != nil:
			errs = append(errs, err)
		case positive && d == 0:
			errs = append(errs, fmt.Errorf("%s=%q: must be greater than 0", name, getenv(name)))
		}
		*dst = d
	}
	duration(&c.TemplateHTTPTimeout, "TEMPLATE_HTTP_TIMEOUT", 5*time.Second, true)
	duration(&c.TemplateRenderTimeout, "TEMPLATE_RENDER_TIMEOUT", 10*time.Second, true)
	duration(&c.SourceDegradedTTL, "SOURCE_DEGRADED_TTL", 10*time.Minute, false)
	duration(&c.StatusInterval, "STATUS_INTERVAL", time.Second, false)
	return c, errors.Join(errs...)
}

func commaList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// run starts the rule engine and blocks until ctx ends (nil) or a component fails.
func run(ctx context.Context, getenv func(string) string, stdout, _ io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	logger := service.NewLogger(stdout, serviceName, getenv)
	ctrl.SetLogger(logr.FromSlogHandler(logger.Handler()))
	reg := service.NewRegistry()
	m := newMetrics(reg)

	kubeCfg, err := service.KubeConfig(getenv)
	if err != nil {
		return err
	}
	kubeCheck, err := service.KubeReachable(kubeCfg)
	if err != nil {
		return err
	}
	// Readiness: NATS connected, the consumer bound (which happens only after every rule was
	// evaluated once), and the Kubernetes API reachable. The health server starts first so a
	// probe sees which dependency is missing while the service waits for it.
	var natsUp func(context.Context) error
	var consumerBound, standby atomic.Bool
	standby.Store(cfg.LeaderElection)
	health := service.NewHealth()
	health.AddCheck("nats", func(ctx context.Context) error {
		if natsUp == nil {
			return errors.New("not connected yet")
		}
		return natsUp(ctx)
	})
	health.AddCheck("consumer", func(context.Context) error {
		if !consumerBound.Load() && !standby.Load() { // a standby replica is ready: it waits
			return fmt.Errorf("consumer %s not bound", events.ConsumerRuleEngine)
		}
		return nil
	})
	health.AddCheck("kubernetes", kubeCheck)
	healthSrv, err := service.Listen(cfg.HealthAddr, health.Handler(), logger)
	if err != nil {
		return err
	}
	metricsSrv, err := service.Listen(cfg.MetricsAddr, service.MetricsHandler(reg), logger)
	if err != nil {
		return errors.Join(err, healthSrv.Shutdown(context.Background()))
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = metricsSrv.Shutdown(sctx)
		_ = healthSrv.Shutdown(sctx)
	}()

	nc, err := service.ConnectNATS(ctx, cfg.NATSURL, cfg.NATSCreds, serviceName, logger)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer drainNATS(nc, logger)
	natsUp = service.NATSConnected(nc)
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		return err
	}
	// The engine's memory comes back from its KV bucket before anything can change it.
	st, err := openKVStore(ctx, js)
	if err != nil {
		return err
	}
	renderer := newRenderer(cfg.TemplateHTTPAllow, cfg.TemplateHTTPTimeout)
	renderer.limit = cfg.TemplateRenderTimeout
	eng := newEngine(logger, st, events.NewPublisher(js, "/enforcement/"+serviceName), renderer, m, cfg.SourceDegradedTTL)

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	// The controller-runtime manager only serves the ClusterRule controller: its own metrics
	// and probe servers are off (ours serve the registry and the readiness checks), and its
	// cache covers WATCH_NAMESPACES when set.
	cacheOpts := cache.Options{}
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	mgr, err := ctrl.NewManager(kubeCfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Metrics:                       metricsserver.Options{BindAddress: "0"}, // our own /metrics serves reg
		HealthProbeBindAddress:        "0",
		LeaderElection:                cfg.LeaderElection,
		LeaderElectionID:              "rule-engine.enforcement.globo.com",
		LeaderElectionNamespace:       cfg.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true, // a replica stopping hands over at once
		GracefulShutdownTimeout: func() *time.Duration {
			d := shutdownTimeout
			return &d
		}(),
	})
	if err != nil {
		return fmt.Errorf("controller manager: %w", err)
	}
	// The manager gets its own context so that it stops after the consumer: a status notice from
	// an in-flight handler still finds the controller.
	mgrCtx, stopMgr := context.WithCancel(context.WithoutCancel(ctx))
	defer stopMgr()
	notify, err := setupController(mgrCtx, mgr, &reconciler{client: mgr.GetClient(), engine: eng,
		secretNamespace: cfg.OperatorNamespace, metrics: m, log: logger}, cfg.StatusInterval)
	if err != nil {
		return err
	}
	eng.mu.Lock()
	eng.notify = notify
	eng.mu.Unlock()

	mgrErr := make(chan error, 1)
	go func() { mgrErr <- mgr.Start(mgrCtx) }()

	// Leadership first (immediate without LEADER_ELECTION), then the state: a standby that took
	// over must read what the previous leader wrote. Reconciles wait for the load (engine.loaded).
	if cfg.LeaderElection {
		logger.Info("Waiting for leadership", "lease", "rule-engine.enforcement.globo.com", "namespace", cfg.LeaderElectionNamespace)
	}
	select {
	case <-mgr.Elected():
	case <-ctx.Done():
		stopMgr()
		<-mgrErr
		return nil
	case err := <-mgrErr:
		return fmt.Errorf("controller manager: %w", err)
	}
	standby.Store(false)
	if err := eng.load(ctx); err != nil {
		stopMgr()
		<-mgrErr
		return err
	}
	close(eng.loaded)

	// Every rule is evaluated once before cluster events are consumed, so that a rule whose last
	// evaluation was cut short (intents published, records not yet written) is finished before a
	// cluster event relies on its records.
	if err := evaluateAllRules(ctx, mgr, eng, cfg.OperatorNamespace, cfg.WatchNamespaces, logger); err != nil {
		stopMgr()
		<-mgrErr
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	consumer, err := eventRoutes(eng).Consume(ctx, js, events.ConsumerOptions{
		Name: events.ConsumerRuleEngine, Metrics: events.NewMetrics(reg, serviceName), Logger: logger})
	if err != nil {
		stopMgr()
		<-mgrErr
		return err
	}
	consumerBound.Store(true)
	logger.Info("Started", "watchNamespaces", cfg.WatchNamespaces, "operatorNamespace", cfg.OperatorNamespace)

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-mgrErr:
		runErr = fmt.Errorf("controller manager: %w", runErr)
	}

	// Shut down: stop consuming (in-flight handlers finish), then the controller, then NATS.
	consumerBound.Store(false)
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := consumer.Stop(sctx); err != nil {
		logger.Warn("Consumer did not stop cleanly", "error", err)
	}
	stopMgr()
	if runErr == nil {
		select {
		case err := <-mgrErr:
			if err != nil {
				logger.Warn("Controller manager stopped with an error", "error", err)
			}
		case <-sctx.Done():
		}
	}
	logger.Info("Stopped")
	return runErr
}

// eventRoutes is the handler table of the rule-engine consumer: it routes consumed events to
// the engine. Every engine error is transient (NATS or KV unavailable) and retried by the
// consumer; a malformed event never reaches here.
func eventRoutes(eng *engine) *events.Router {
	return events.NewRouter(events.ConsumerRuleEngine,
		events.On(func(ctx context.Context, e *events.ClusterAppeared, _ events.Meta) error {
			return eng.applyCluster(ctx, e.Cluster, e.Revision)
		}),
		events.On(func(ctx context.Context, e *events.ClusterUpdated, _ events.Meta) error {
			return eng.applyCluster(ctx, e.Cluster, e.Revision)
		}),
		events.On(func(ctx context.Context, e *events.ClusterGone, _ events.Meta) error {
			return eng.applyClusterGone(ctx, e)
		}),
		events.On(outcome[*events.SourceDegraded](eng)),
		events.On(outcome[*events.InstallSucceeded](eng)),
		events.On(outcome[*events.InstallFailed](eng)),
		events.On(outcome[*events.TriggerDelivered](eng)),
		events.On(outcome[*events.TriggerFailed](eng)),
		// An uninstall needs no record: the pair was forgotten when its intent was published.
		events.On(func(context.Context, *events.UninstallDone, events.Meta) error { return nil }),
	)
}

// outcome is the handler of an outcome event type: engine.applyOutcome.
func outcome[E events.Event](eng *engine) func(context.Context, E, events.Meta) error {
	return func(ctx context.Context, e E, m events.Meta) error { return eng.applyOutcome(ctx, e, m) }
}

// evaluateAllRules waits for the rule cache and evaluates every rule that is not being deleted,
// retrying one that fails (NATS or KV briefly unavailable) until ctx ends.
func evaluateAllRules(ctx context.Context, mgr ctrl.Manager, eng *engine, secretNamespace string, watchNamespaces []string, logger *slog.Logger) error {
	watched := func(ns string) bool { return len(watchNamespaces) == 0 || slices.Contains(watchNamespaces, ns) }
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("ClusterRule cache did not sync")
	}
	var list v1beta1.ClusterRuleList
	if err := mgr.GetClient().List(ctx, &list); err != nil {
		return fmt.Errorf("list ClusterRules: %w", err)
	}
	for i := range list.Items {
		cr := &list.Items[i]
		if !cr.DeletionTimestamp.IsZero() {
			continue
		}
		for {
			err := eng.applyRule(ctx, ruleFromSpec(cr, secretNamespace))
			if err == nil {
				break
			}
			logger.Warn("Rule evaluation failed; retrying", "rule", cr.Namespace+"/"+cr.Name, "error", err)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
	}
	// Rules deleted while the engine was down with their finalizer removed by hand: their
	// records remain, so their uninstalls are still owed. Only watched namespaces count, so that
	// narrowing WATCH_NAMESPACES never uninstalls anything.
	exists := map[string]bool{}
	for i := range list.Items {
		exists[list.Items[i].Namespace+"/"+list.Items[i].Name] = true
	}
	for _, key := range eng.ruleKeysWithPairs() {
		if exists[key] || !watched(splitKey(key).Namespace) {
			continue
		}
		logger.Info("Rule gone while stopped; uninstalling what it had", "rule", key)
		if err := eng.deleteRule(ctx, key, events.RuleRef{}, ""); err != nil {
			return err
		}
	}
	logger.Info("Evaluated rules", "rules", len(list.Items))
	return nil
}

// drainNATS drains the connection (pending acks and publishes are flushed) and waits for it to
// close, so that the process does not exit with acknowledgements still in its buffers.
func drainNATS(nc *nats.Conn, logger *slog.Logger) {
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	if err := nc.Drain(); err != nil {
		nc.Close()
		return
	}
	select {
	case <-closed:
	case <-time.After(shutdownTimeout):
		logger.Warn("NATS drain did not finish; closing")
		nc.Close()
	}
}
