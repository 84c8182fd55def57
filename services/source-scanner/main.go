// Command source-scanner discovers clusters. Every SCAN_INTERVAL it lists each source that some
// ClusterRule references (Rancher's /v3/clusters, a static ConfigMap, EKS, GKE, or the
// ManagedClusters of an OCM hub, which are also watched so that a change is scanned at once),
// diffs the complete listing against its inventory in the JetStream KV bucket
// enforcement-inventory, and publishes cluster appeared / updated / gone and source degraded
// events. The deletion safety rules (degraded listings remove nothing, a grace period, a removal
// breaker) live in internal/scanner; the README explains them and how an operator releases held
// removals.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// serviceName names the service in logs, metrics and the NATS connection.
const serviceName = "source-scanner"

// shutdownGrace is how long a scan in progress may finish after the shutdown signal; after it
// the scan is cancelled, which is safe (the next start republishes what it left unannounced).
const shutdownGrace = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "source-scanner:", err)
		os.Exit(1)
	}
}

// run starts the scanner and blocks until ctx ends, then shuts down in order: finish (or cancel)
// the current scan, drain NATS, stop the HTTP servers. Logs go to stdout.
func run(ctx context.Context, getenv service.Getenv, stdout, _ io.Writer) error {
	cfg, err := loadConfig(getenv)
	if err != nil {
		return err
	}
	logger := service.NewLogger(stdout, serviceName, getenv)
	reg := service.NewRegistry()
	metrics := scanner.NewMetrics(reg)
	eksCalls, gkeCalls := eks.NewCallsCounter(reg), gke.NewCallsCounter(reg)
	health := service.NewHealth()

	kubeCfg, err := service.KubeConfig(getenv)
	if err != nil {
		return err
	}
	kubeReachable, err := service.KubeReachable(kubeCfg)
	if err != nil {
		return err
	}
	health.AddCheck("kubernetes", kubeReachable)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1beta1.AddToScheme(scheme); err != nil {
		return err
	}
	kube, err := client.New(kubeCfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	health.AddCheck("nats", func(context.Context) error { return errors.New("not connected yet") })
	healthSrv, err := service.Listen(cfg.HealthAddr, health.Handler(), logger)
	if err != nil {
		return err
	}
	metricsSrv, err := service.Listen(cfg.MetricsAddr, service.MetricsHandler(reg), logger)
	if err != nil {
		_ = healthSrv.Shutdown(context.Background())
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
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
	defer func() { _ = nc.Drain() }()
	health.AddCheck("nats", service.NATSConnected(nc))
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	kv, err := js.KeyValue(ctx, events.BucketInventory)
	if err != nil {
		return fmt.Errorf("open bucket %s: %w", events.BucketInventory, err)
	}
	sc := scanner.New(kv, events.NewPublisher(js, "/enforcement/"+serviceName), scanner.Config{
		GracePeriod:        cfg.GracePeriod,
		MaxRemovalFraction: cfg.MaxRemovalFraction,
		ListTimeout:        cfg.ListTimeout,
	}, metrics, logger)
	logger.Info("Started source scanner", "scanInterval", cfg.ScanInterval.String(),
		"goneGracePeriod", cfg.GracePeriod.String(), "maxRemovalFraction", cfg.MaxRemovalFraction,
		"operatorNamespace", cfg.OperatorNamespace, "health", healthSrv.Addr, "metrics", metricsSrv.Addr)

	// Scans run on a context that outlives the shutdown signal by shutdownGrace.
	scanCtx, cancelScans := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelScans()
	loop := newScanLoop(sc, metrics, cfg, logger)
	loop.deps = listerDeps{kube: kube, kubeCfg: kubeCfg, cfg: cfg, eksCalls: eksCalls, gkeCalls: gkeCalls,
		watchCtx: ctx, trigger: loop.trigger, logger: logger}
	done := make(chan struct{})
	go func() {
		defer close(done)
		loop.run(ctx, scanCtx)
	}()
	<-ctx.Done()
	select {
	case <-done:
	case <-time.After(shutdownGrace):
		cancelScans()
		<-done
	}
	logger.Info("Stopped source scanner")
	return nil
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

	// pending are the source ids triggered since the last triggered pass; wake signals them.
	mu      sync.Mutex
	pending map[string]bool
	wake    chan struct{}
}

func newScanLoop(sc *scanner.Scanner, metrics *scanner.Metrics, cfg config, logger *slog.Logger) *scanLoop {
	return &scanLoop{scanner: sc, metrics: metrics, cfg: cfg, logger: logger,
		listers: map[string]sourceLister{}, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
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
	specs := sourcesFromRules(rules.Items, l.cfg.OperatorNamespace, l.logger)
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
			src := scanner.Source{Ref: spec.Ref, Lister: ls, ReleaseThrough: spec.ReleaseThrough}
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
