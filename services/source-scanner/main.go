// Command source-scanner discovers clusters. Every SCAN_INTERVAL it lists each source that some
// ClusterRule references (Rancher's /v3/clusters, a static ConfigMap, EKS, GKE, AKS, or the
// ManagedClusters of an OCM hub, which are also watched so that a change is scanned at once),
// diffs the complete listing against its inventory in the JetStream KV bucket
// enforcement-inventory, and publishes cluster appeared / updated / gone and source degraded
// events. The deletion safety rules (degraded listings remove nothing, a grace period, a removal
// breaker) live in internal/scanner; the README explains them and how an operator releases held
// removals (a release annotation on a rule in OPERATOR_NAMESPACE, or the removals released event
// this service consumes, published by `enforcement release-removals`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/aks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// serviceName names the service in logs, metrics and the NATS connection.
const serviceName = "source-scanner"

func main() { service.Main(serviceName, run) }

// run starts the scanner (with LEADER_ELECTION, once this replica leads) and blocks until ctx
// ends, then shuts down in order (pkg/service): the scan loop starts no new pass and the current
// one finishes (within SHUTDOWN_TIMEOUT; a scan cut short is safe, the next start republishes
// what it left unannounced), NATS is drained until closed, the Lease is released, the HTTP
// servers stop. Logs go to stdout.
func run(ctx context.Context, getenv service.Getenv, stdout, _ io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	svc, err := service.Start(ctx, service.Options{Name: serviceName, Getenv: getenv, Stdout: stdout,
		Kubernetes: true, NATS: true, Consumers: []string{events.ConsumerSourceScanner}})
	if err != nil {
		return err
	}
	metrics := scanner.NewMetrics(svc.Registry)
	deps, err := newListerDeps(cfg, svc)
	if err != nil {
		return svc.Abort(err)
	}
	if err := svc.ConnectNATS(); err != nil {
		return svc.Abort(err)
	}
	kv, err := svc.JetStream.KeyValue(svc.Context(), events.BucketInventory)
	if err != nil {
		return svc.Abort(fmt.Errorf("open bucket %s: %w", events.BucketInventory, err))
	}
	// A standby replica stops here, connected and ready: it scans, consumes and writes nothing
	// until it holds the Lease. The new leader's scanner then loads the inventory the previous
	// one wrote (the bucket's compare-and-set fails a writer with a stale memory).
	if err := svc.Lead(cfg.LeaderElection, LeaseName); err != nil {
		return svc.Abort(err)
	}
	sc := scanner.New(kv, svc.Publisher(), scanner.Config{
		GracePeriod:        cfg.GracePeriod,
		MaxRemovalFraction: cfg.MaxRemovalFraction,
		ListTimeout:        cfg.ListTimeout,
		OperatorNamespace:  cfg.OperatorNamespace,
	}, metrics, svc.Logger)
	svc.Logger.Info("Started source scanner", "scanInterval", cfg.ScanInterval.String(),
		"goneGracePeriod", cfg.GracePeriod.String(), "maxRemovalFraction", cfg.MaxRemovalFraction,
		"operatorNamespace", cfg.OperatorNamespace, "health", svc.HealthAddr(), "metrics", svc.MetricsAddr())

	loop := newScanLoop(sc, metrics, cfg, svc.Logger)
	if loop.recorder, err = newRecorder(svc); err != nil {
		return svc.Abort(err)
	}
	deps.trigger = loop.trigger
	loop.deps = deps
	routes := releaseRoutes(sc, loop.trigger)
	if err := svc.Consume(events.ConsumerOptions{Name: events.ConsumerSourceScanner, Routes: routes}, routes.Handle); err != nil {
		return svc.Abort(err)
	}
	svc.Go("scan loop", func(ctx context.Context) error {
		// Scans run on a context that outlives the stop of the loop: the current one finishes.
		loop.run(ctx, context.WithoutCancel(ctx))
		return nil
	})
	return svc.Wait()
}

// releaseRoutes is the handler table of the source-scanner consumer: an operator's release of
// one trip (enforcement release-removals) is recorded in the inventory and the source is scanned
// soon, which removes what the trip holds. A release of a trip that holds nothing is a dead
// letter with the reason; a bucket error is retried.
func releaseRoutes(sc *scanner.Scanner, trigger func(sourceID string)) *events.Router {
	return events.NewRouter(events.ConsumerSourceScanner,
		events.On(func(ctx context.Context, e *events.RemovalsReleased, _ events.Meta) error {
			err := sc.Release(ctx, e.Source, e.Trip)
			if errors.Is(err, scanner.ErrNotHeld) {
				return events.Permanent(err)
			}
			if err == nil {
				trigger(e.Source.ID)
			}
			return err
		}))
}

// newRecorder returns the recorder of the Kubernetes Events the scanner writes on a ClusterRule
// whose release annotation it ignores, so that the rule's author sees why (kubectl describe).
// Events are best effort: the broadcaster drops what it cannot write, and stops with the service.
func newRecorder(svc *service.Service) (record.EventRecorder, error) {
	scheme := runtime.NewScheme()
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(svc.Kube)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	svc.Go("kubernetes events", func(ctx context.Context) error {
		<-ctx.Done()
		b.Shutdown()
		return nil
	})
	return b.NewRecorder(scheme, corev1.EventSource{Component: serviceName}), nil
}

// newListerDeps creates the Kubernetes client the listers read ClusterRules and source Secrets
// with, and the cloud API call counters.
func newListerDeps(cfg config, svc *service.Service) (listerDeps, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return listerDeps{}, err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return listerDeps{}, err
	}
	kube, err := client.New(svc.Kube, client.Options{Scheme: scheme})
	if err != nil {
		return listerDeps{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return listerDeps{kube: kube, kubeCfg: svc.Kube, cfg: cfg,
		eksCalls: eks.NewCallsCounter(svc.Registry), gkeCalls: gke.NewCallsCounter(svc.Registry),
		aksCalls: aks.NewCallsCounter(svc.Registry),
		watchCtx: svc.Context(), logger: svc.Logger}, nil
}

// watchDebounce is how long a triggered scan waits for more changes of the same burst (a
// ManagedCluster and its status are often written in quick succession).
const watchDebounce = 200 * time.Millisecond

// scanLoop scans every source referenced by the ClusterRules, every ScanInterval, and the
// sources whose watch triggered (OCM) in between.
type scanLoop struct {
	scanner *scanner.Scanner
	metrics *scanner.Metrics
	cfg     config
	logger  *slog.Logger
	deps    listerDeps
	// listers holds one lister per source id in use (only the loop goroutine touches it).
	listers map[string]sourceLister
	// active are the sources of the previous full pass, to drop the metrics of sources no rule
	// uses.
	active map[string]string

	// ignoredReleases are the release annotations warned about, rule → value, so that a standing
	// one is logged once rather than at every pass; recorder tells the rule's author too.
	ignoredReleases map[string]string
	recorder        record.EventRecorder

	// pending are the source ids triggered since the last triggered pass; wake signals them.
	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{}
}

func newScanLoop(sc *scanner.Scanner, metrics *scanner.Metrics, cfg config, logger *slog.Logger) *scanLoop {
	return &scanLoop{scanner: sc, metrics: metrics, cfg: cfg, logger: logger,
		listers: map[string]sourceLister{}, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// warnIgnored logs the release annotations that release nothing, once per rule and value.
func (l *scanLoop) warnIgnored(ignored []ignoredRelease) {
	seen := make(map[string]string, len(ignored))
	for _, ig := range ignored {
		seen[ig.Rule] = ig.Value
		if v, ok := l.ignoredReleases[ig.Rule]; ok && v == ig.Value {
			continue
		}
		l.logger.Warn("Ignored release annotation", "rule", ig.Rule, "annotation", scanner.ReleaseAnnotation,
			"value", ig.Value, "reason", ig.Why)
		if l.recorder != nil && ig.Object != nil {
			l.recorder.Eventf(ig.Object, corev1.EventTypeWarning, "ReleaseIgnored", "%s=%s releases nothing: %s",
				scanner.ReleaseAnnotation, ig.Value, ig.Why)
		}
	}
	l.ignoredReleases = seen
}

// trigger asks for a scan of a source soon (safe from any goroutine, never blocks).
func (l *scanLoop) trigger(sourceID string) {
	l.mu.Lock()
	l.pending[sourceID] = true
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func (l *scanLoop) takePending() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.pending
	l.pending = map[string]bool{}
	return p
}

// run scans at once and then every interval until ctx ends, and in between the sources that
// triggered; scans use scanCtx. On return the listers are closed (their watches stop).
func (l *scanLoop) run(ctx, scanCtx context.Context) {
	defer func() {
		for id, ls := range l.listers {
			ls.Close()
			delete(l.listers, id)
		}
	}()
	ticker := time.NewTicker(l.cfg.ScanInterval)
	defer ticker.Stop()
	for {
		l.takePending() // a full pass scans them anyway
		l.pass(scanCtx, nil)
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
				break wait
			case <-l.wake:
				select {
				case <-ctx.Done():
					return
				case <-time.After(watchDebounce):
				}
				l.pass(scanCtx, l.takePending())
			}
		}
	}
}

// pass lists the ClusterRules and scans their sources concurrently (one goroutine per source;
// a slow source does not delay the others). With only set, it scans only those source ids (a
// triggered pass) and leaves the bookkeeping of unused sources to the next full pass.
func (l *scanLoop) pass(ctx context.Context, only map[string]bool) {
	var rules v1beta1.ClusterRuleList
	if err := l.deps.kube.List(ctx, &rules); err != nil {
		l.logger.Error("Could not list ClusterRules; scanning nothing this time", "error", err)
		return
	}
	// Without the grants, tenants' rules count as granted nothing: their sources are not scanned
	// this time (the rule engine would not act on them either).
	var grants v1beta1.ClusterRuleGrantList
	if err := l.deps.kube.List(ctx, &grants, client.InNamespace(l.cfg.OperatorNamespace)); err != nil {
		l.logger.Error("Could not list ClusterRuleGrants; scanning only the sources of rules in the operator namespace", "error", err)
	}
	specs, ignored := sourcesFromRules(rules.Items, grants.Items, l.cfg.OperatorNamespace, l.logger)
	l.warnIgnored(ignored)
	active := make(map[string]string, len(specs))
	var wg sync.WaitGroup
	for _, spec := range specs {
		active[spec.Ref.ID] = spec.Ref.Kind
		if only != nil && !only[spec.Ref.ID] {
			continue
		}
		ls, ok := l.listers[spec.Ref.ID]
		if !ok {
			ls = spec.lister(l.deps)
			l.listers[spec.Ref.ID] = ls
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			src := scanner.Source{Ref: spec.Ref, Lister: ls, Releases: spec.Releases, LegacyName: legacyNames(spec.Ref.Kind)}
			if _, err := l.scanner.ScanOnce(ctx, src); err != nil && ctx.Err() == nil {
				l.logger.Error("Scan failed; retrying next interval", "source", spec.Ref.ID, "kind", spec.Ref.Kind, "error", err)
			}
		}()
	}
	wg.Wait()
	if only != nil {
		return
	}
	for id, kind := range l.active {
		if _, ok := active[id]; !ok {
			l.metrics.Forget(kind, id)
		}
	}
	for id, ls := range l.listers {
		if _, ok := active[id]; !ok {
			ls.Close()
			delete(l.listers, id)
		}
	}
	l.active = active
}
