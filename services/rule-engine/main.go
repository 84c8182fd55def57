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
	"slices"
	"strings"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/service/egress"
	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() { service.Main(serviceName, run) }

// serviceName names the service in logs, metrics and the events it publishes.
const serviceName = "rule-engine"

// config is the rule engine's configuration, read from the environment once at start.
type config struct {
	// OperatorNamespace (OPERATOR_NAMESPACE, default "enforcement") holds the source Secrets.
	OperatorNamespace string
	// WatchNamespaces (WATCH_NAMESPACES, comma list) limits the watched namespaces; empty: all.
	WatchNamespaces []string
	// TemplateHTTPAllow (TEMPLATE_HTTP_ALLOW, comma list of hosts) lets templates call
	// requests.get on these hosts; empty: templates have no network.
	TemplateHTTPAllow []string
	// TemplateHTTPEgress is where requests.get may connect, checked on the resolved address of
	// every dial: package egress's default denied networks (loopback, private, link-local,
	// metadata, ...), opened by TEMPLATE_HTTP_ALLOWED_NETWORKS, more refused by
	// TEMPLATE_HTTP_DENIED_NETWORKS (comma lists of CIDRs or addresses).
	TemplateHTTPEgress egress.Policy
	// TemplateHTTPTimeout (TEMPLATE_HTTP_TIMEOUT, default 5s) bounds one requests.get.
	TemplateHTTPTimeout time.Duration
	// TemplateRenderTimeout (TEMPLATE_RENDER_TIMEOUT, default 10s) bounds one render of a
	// rule for a cluster; past it the pair gets a TemplateError.
	TemplateRenderTimeout time.Duration
	// SourceDegradedTTL (SOURCE_DEGRADED_TTL, default 10m) is the upper bound of a source's
	// SourceDegraded / RemovalsHeld condition: a "source recovered" event clears it at once, and
	// the scanner repeats "source degraded" every scan while it lasts, so it expires only when
	// no report came for that long (the source is no longer scanned).
	SourceDegradedTTL time.Duration
	// MaxRemovalFraction (MAX_REMOVAL_FRACTION, default 0.1) sizes the rule edit breaker: the
	// selection removals of one rule generation go through at once only up to max(1, fraction ×
	// the rule's installed pairs); over that they are held (RemovalsHeld). Same name and meaning
	// as source-scanner's.
	MaxRemovalFraction float64
	// LeaderElection (LEADER_ELECTION, default false, and its namespace and timings, see
	// pkg/service) runs the engine only in the replica that holds the Lease leaseName in
	// LEADER_ELECTION_NAMESPACE (default OPERATOR_NAMESPACE); the others wait, ready.
	LeaderElection service.LeaderElection
	// StatusInterval (STATUS_INTERVAL, default 1s): a rule's status is recomputed and written
	// once its notices have paused this long, and at least every statusMaxWaitFactor times this
	// while they keep coming. It bounds status writes per rule.
	StatusInterval time.Duration
	// RuleEventInterval (RULE_EVENT_INTERVAL, default 30s) is the least time between two
	// Kubernetes Events of one kind on one ClusterRule; decisions in between are counted into the
	// next one (kubeevents.go).
	RuleEventInterval time.Duration
}

func loadConfig(getenv service.Getenv) (config, error) {
	c := config{
		OperatorNamespace: service.String(getenv, "OPERATOR_NAMESPACE", service.DefaultOperatorNamespace),
		WatchNamespaces:   commaList(getenv("WATCH_NAMESPACES")),
		TemplateHTTPAllow: commaList(getenv("TEMPLATE_HTTP_ALLOW")),
	}
	var errs []error
	var err error
	if c.LeaderElection, err = service.LoadLeaderElection(getenv, c.OperatorNamespace); err != nil {
		errs = append(errs, err)
	}
	if c.TemplateHTTPEgress, err = egress.FromEnv(getenv, "TEMPLATE_HTTP_ALLOWED_NETWORKS", "TEMPLATE_HTTP_DENIED_NETWORKS"); err != nil {
		errs = append(errs, err)
	}
	if c.MaxRemovalFraction, err = service.Fraction(getenv, "MAX_REMOVAL_FRACTION", 0.1); err != nil {
		errs = append(errs, err)
	}
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
	duration(&c.RuleEventInterval, "RULE_EVENT_INTERVAL", 30*time.Second, false)
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

// run starts the rule engine and blocks until ctx ends (nil) or a component fails. Readiness:
// NATS connected, the consumer bound (which happens only after every rule was evaluated once;
// a standby replica waiting for leadership is ready), and the Kubernetes API reachable. At the
// stop the consumer finishes its in-flight events before the controller stops, so that a status
// notice from an in-flight handler still finds the controller.
func run(ctx context.Context, getenv service.Getenv, stdout, _ io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	svc, err := service.Start(ctx, service.Options{Name: serviceName, Getenv: getenv, Stdout: stdout,
		Kubernetes: true, NATS: true, Consumers: []string{events.ConsumerRuleEngine}})
	if err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(svc.Logger.Handler()))
	svc.SetStandby(cfg.LeaderElection.Enabled)
	if err := svc.ConnectNATS(); err != nil {
		return svc.Abort(err)
	}
	eng, mgr, startManager, err := wireEngine(cfg, svc)
	if err != nil {
		return svc.Abort(err)
	}
	// Every replica answers previews, standbys too: they read the state bucket (preview.go).
	if err := serveAPI(svc, eng, cfg); err != nil {
		return svc.Abort(err)
	}
	// Leadership first (immediate without LEADER_ELECTION), then the controller and the state:
	// a standby reconciles nothing, and one that took over must read what the previous leader
	// wrote. Reconciles wait for the load (engine.loaded).
	if err := svc.Lead(cfg.LeaderElection, leaseName); err != nil {
		return svc.Abort(err)
	}
	startManager()
	if st, ok := eng.store.(*kvStore); ok {
		if err := restoreLostView(svc.Context(), svc.JetStream, st, svc.Logger); err != nil {
			return svc.Abort(err)
		}
	}
	if err := eng.load(svc.Context()); err != nil {
		return svc.Abort(err)
	}
	close(eng.loaded)
	// Every rule is evaluated once before cluster events are consumed, so that a rule whose last
	// evaluation was cut short (intents published, records not yet written) is finished before a
	// cluster event relies on its records.
	if err := evaluateAllRules(svc.Context(), mgr, eng, cfg.OperatorNamespace, cfg.WatchNamespaces, svc.Logger); err != nil {
		return svc.Abort(err)
	}
	routes := eventRoutes(eng)
	if err := svc.Consume(events.ConsumerOptions{Name: events.ConsumerRuleEngine, Routes: routes}, routes.Handle); err != nil {
		return svc.Abort(err)
	}
	svc.Logger.Info("Started", "watchNamespaces", cfg.WatchNamespaces, "operatorNamespace", cfg.OperatorNamespace)
	return svc.Wait()
}

// leaseName is the Lease the replicas compete for with LEADER_ELECTION.
const leaseName = "rule-engine.enforcement.globo.com"

// wireEngine opens the engine's KV bucket, creates the engine and the ClusterRule controller, and
// returns the function that starts the controller's manager as a worker of svc (which stops it
// after the consumer); a standby replica calls it only once it leads.
func wireEngine(cfg config, svc *service.Service) (*engine, ctrl.Manager, func(), error) {
	m := newMetrics(svc.Registry)
	st, err := openKVStore(svc.Context(), svc.JetStream)
	if err != nil {
		return nil, nil, nil, err
	}
	renderer := newRenderer(cfg.TemplateHTTPAllow, cfg.TemplateHTTPTimeout)
	renderer.limit = cfg.TemplateRenderTimeout
	renderer.useEgress(cfg.TemplateHTTPEgress)
	eng := newEngine(svc.Logger, st, svc.Publisher(), renderer, m, cfg.SourceDegradedTTL)
	eng.maxRemovalFraction = cfg.MaxRemovalFraction
	mgr, err := newManager(cfg, svc)
	if err != nil {
		return nil, nil, nil, err
	}
	if eng.kubeEvents, err = newRuleEvents(svc, mgr.GetScheme(), cfg.RuleEventInterval); err != nil {
		return nil, nil, nil, err
	}
	// The status pump and the manager share one context, ended at the worker step of the stop.
	mgrCtx, stopMgr := context.WithCancel(context.WithoutCancel(svc.Context()))
	notify, err := setupController(mgrCtx, mgr, &reconciler{client: mgr.GetClient(), engine: eng,
		secretNamespace: cfg.OperatorNamespace, metrics: m, log: svc.Logger, events: eng.kubeEvents}, cfg.StatusInterval)
	if err != nil {
		stopMgr()
		return nil, nil, nil, err
	}
	eng.mu.Lock()
	eng.notify = notify
	eng.mu.Unlock()
	start := make(chan struct{})
	svc.Go("controller manager", func(ctx context.Context) error {
		context.AfterFunc(ctx, stopMgr)
		select {
		case <-start:
		case <-ctx.Done(): // stopped while standby
			return nil
		}
		if err := mgr.Start(mgrCtx); err != nil {
			return fmt.Errorf("controller manager: %w", err)
		}
		return nil
	})
	return eng, mgr, func() { close(start) }, nil
}

// newManager creates the controller-runtime manager. It only serves the ClusterRule controller:
// its own metrics and probe servers are off (the service's serve the registry and the readiness
// checks), and its cache covers WATCH_NAMESPACES when set.
func newManager(cfg config, svc *service.Service) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	// Grants count only in OPERATOR_NAMESPACE, whether or not it is watched for rules.
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&v1beta1.ClusterRuleGrant{}: {Namespaces: map[string]cache.Config{cfg.OperatorNamespace: {}}}}}
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	grace := svc.Common.ShutdownTimeout
	mgr, err := ctrl.NewManager(svc.Kube, ctrl.Options{
		Scheme:                 scheme,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Leader election is the service's (service.Lead), before the manager starts.
		GracefulShutdownTimeout: &grace,
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	return mgr, nil
}

// eventRoutes is the handler table of the rule-engine consumer: it routes consumed events to
// the engine. Every engine error is transient (NATS or KV unavailable) and retried by the
// consumer; a malformed event never reaches here.
func eventRoutes(eng *engine) *events.Router {
	return events.NewRouter(events.ConsumerRuleEngine,
		events.On(func(ctx context.Context, e *events.ClusterAppeared, m events.Meta) error {
			return eng.applyCluster(ctx, e.Cluster, e.Revision, m.DecisionSequence())
		}),
		events.On(func(ctx context.Context, e *events.ClusterUpdated, m events.Meta) error {
			return eng.applyCluster(ctx, e.Cluster, e.Revision, m.DecisionSequence())
		}),
		events.On(func(ctx context.Context, e *events.ClusterGone, m events.Meta) error {
			return eng.applyClusterGone(ctx, e, m.DecisionSequence())
		}),
		events.On(outcome[*events.SourceDegraded](eng)),
		events.On(outcome[*events.SourceRecovered](eng)),
		events.On(outcome[*events.SourceListed](eng)),
		events.On(func(ctx context.Context, e *events.RuleRemovalsReleased, _ events.Meta) error {
			return eng.releaseRule(ctx, e)
		}),
		events.On(func(ctx context.Context, e *events.RolloutApproved, _ events.Meta) error {
			return eng.approveRollout(ctx, e)
		}),
		events.On(func(ctx context.Context, e *events.ApplicationHealth, _ events.Meta) error {
			return eng.applyHealth(ctx, e)
		}),
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
			r, err := compileWithGrants(ctx, mgr.GetClient(), cr, secretNamespace)
			if err == nil {
				err = eng.applyRule(ctx, r)
			}
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
