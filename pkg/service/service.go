package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Options say what one service needs from its lifecycle. Only Name is required.
type Options struct {
	// Name names the service in logs (the "service" attribute), metrics, the NATS connection
	// and the ce-source of what it publishes.
	Name string
	// Getenv reads the environment; nil means os.Getenv.
	Getenv Getenv
	// Stdout receives the JSON logs; nil means os.Stdout.
	Stdout io.Writer
	// LogAttrs are added to every log line (slog key-value pairs), after "service".
	LogAttrs []any
	// Kubernetes loads the Kubernetes client configuration (KUBECONFIG or in-cluster) into
	// Service.Kube and adds the readiness check "kubernetes" (the API server answers /readyz).
	Kubernetes bool
	// NATS adds the readiness check "nats", failing until ConnectNATS has connected. Set it
	// when the service calls ConnectNATS, so that /readyz is never 200 before NATS is up.
	NATS bool
	// Consumers are the durable consumers the service will bind with Consume. The readiness
	// check "consumer" fails until every one of them is bound, and again once the stop begins.
	Consumers []string
}

// Service is one running Enforcement service: its configuration, logger, metrics registry,
// health checks and HTTP servers, and, when asked for, its Kubernetes configuration, NATS
// connection, consumers and background workers. Start creates it; Wait stops it in order (see
// the package documentation for the stop order).
type Service struct {
	// Name is Options.Name.
	Name string
	// Common is the configuration every service reads (NATS_URL, SHUTDOWN_TIMEOUT, ...).
	Common Common
	// Logger is the service's JSON logger (LOG_LEVEL, "service" attribute).
	Logger *slog.Logger
	// Registry is the service's metrics registry, served at METRICS_ADDR /metrics.
	Registry *prometheus.Registry
	// Health holds the readiness checks served at HEALTH_ADDR /readyz; a service may add its own.
	Health *Health
	// Kube is the Kubernetes client configuration (nil unless Options.Kubernetes), without a
	// client-side rate limit: the API server paces the service (see serverPacedKube). A service
	// may set QPS, Burst and UserAgent on it before it creates its clients.
	Kube *rest.Config
	// NATS and JetStream are set by ConnectNATS (nil before).
	NATS      *nats.Conn
	JetStream jetstream.JetStream

	// ctx ends at the stop signal (Start's context) or when a worker fails (its error is the
	// cause); workCtx ends at the worker step of the stop.
	ctx         context.Context
	fail        context.CancelCauseFunc
	workCtx     context.Context
	stopWorkers context.CancelFunc

	healthSrv, metricsSrv, pprofSrv *Server
	nc                              atomic.Pointer[nats.Conn]
	standby, stopping               atomic.Bool

	mu              sync.Mutex
	unbound         map[string]bool // declared consumers not bound yet
	consumers       []*events.Consumer
	consumerMetrics *events.Metrics
	// consumerLag reports the bound consumers' backlog (created with the first Consume).
	consumerLag *events.ConsumerLag
	onStop      []func()
	workers     sync.WaitGroup
	running     map[string]int // workers not returned yet, by name
	failure     error          // the first worker error; it ended the service
	stopOnce    sync.Once
	stopErr     error
	// releaseLease ends the leader election Lead started and releases its Lease (nil without).
	releaseLease func(context.Context) error
}

// Start reads the common configuration, creates the logger and the registry, registers the
// readiness checks Options ask for, starts the health and metrics servers (first, so that a
// service that fails later in its start-up is visible to probes and logs) and, with
// Options.Kubernetes, loads the Kubernetes configuration. It fails on an invalid variable (the
// error names it), a port that cannot be bound, or a missing Kubernetes configuration; it then
// leaves nothing running. ctx is the stop signal: when it ends, Wait stops the service.
func Start(ctx context.Context, opts Options) (*Service, error) {
	if opts.Name == "" {
		return nil, errors.New("service: Options.Name is empty")
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Stdout == nil {
		opts.Stdout = os.Stdout
	}
	common, err := LoadCommon(opts.Getenv)
	if err != nil {
		return nil, err
	}
	s := &Service{
		Name:     opts.Name,
		Common:   common,
		Logger:   NewLogger(opts.Stdout, opts.Name, opts.Getenv).With(opts.LogAttrs...),
		Registry: NewRegistry(),
		Health:   NewHealth(),
		unbound:  map[string]bool{},
		running:  map[string]int{},
	}
	s.ctx, s.fail = context.WithCancelCause(ctx)
	s.workCtx, s.stopWorkers = context.WithCancel(context.WithoutCancel(ctx))
	applyMemoryLimit(opts.Getenv, cgroupRoot, debug.SetMemoryLimit, s.Logger)
	s.registerChecks(opts)

	if s.healthSrv, err = Listen(common.HealthAddr, s.Health.Handler(), s.Logger); err != nil {
		return nil, s.abortStart(err)
	}
	if s.metricsSrv, err = Listen(common.MetricsAddr, MetricsHandler(s.Registry), s.Logger); err != nil {
		return nil, s.abortStart(err)
	}
	if common.PprofAddr != "" {
		if s.pprofSrv, err = Listen(common.PprofAddr, PprofHandler(), s.Logger); err != nil {
			return nil, s.abortStart(fmt.Errorf("PPROF_ADDR: %w", err))
		}
		s.Logger.Info("Serving the Go runtime's profiles", "pprof", s.pprofSrv.Addr)
	}
	if opts.Kubernetes {
		if s.Kube, err = KubeConfig(opts.Getenv); err != nil {
			return nil, s.abortStart(err)
		}
		if err := serverPacedKube(s.Kube, s.Registry, s.Name); err != nil {
			return nil, s.abortStart(err)
		}
		check, err := KubeReachable(s.Kube)
		if err != nil {
			return nil, s.abortStart(err)
		}
		s.Health.AddCheck("kubernetes", check)
	}
	return s, nil
}

// registerChecks adds the checks of opts before /readyz is served, so that it never answers
// 200 for a dependency that is not there yet.
func (s *Service) registerChecks(opts Options) {
	if opts.Kubernetes {
		s.Health.AddCheck("kubernetes", func(context.Context) error { return errors.New("not configured yet") })
	}
	if opts.NATS {
		s.Health.AddCheck("nats", func(ctx context.Context) error {
			nc := s.nc.Load()
			if nc == nil {
				return errors.New("not connected yet")
			}
			return NATSConnected(nc)(ctx)
		})
	}
	if len(opts.Consumers) == 0 {
		return
	}
	for _, name := range opts.Consumers {
		s.unbound[name] = true
	}
	s.Health.AddCheck("consumer", s.consumersBound)
}

// consumersBound is the "consumer" readiness check.
func (s *Service) consumersBound(context.Context) error {
	if s.stopping.Load() {
		return errors.New("stopping")
	}
	if s.standby.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for name := range s.unbound {
		errs = append(errs, fmt.Errorf("consumer %s not bound", name))
	}
	return errors.Join(errs...)
}

// abortStart stops the HTTP servers of a Start that failed.
func (s *Service) abortStart(err error) error {
	sctx, cancel := context.WithTimeout(context.Background(), s.Common.ShutdownTimeout)
	defer cancel()
	return errors.Join(err, s.pprofSrv.Shutdown(sctx), s.metricsSrv.Shutdown(sctx), s.healthSrv.Shutdown(sctx))
}

// Context ends when the service is asked to stop: the context given to Start ended, or a worker
// failed. Start-up steps that wait (for NATS, leadership, a cache) should wait on it.
func (s *Service) Context() context.Context { return s.ctx }

// HealthAddr is the address the health server is bound to (useful with HEALTH_ADDR=:0).
func (s *Service) HealthAddr() string { return s.healthSrv.Addr }

// MetricsAddr is the address the metrics server is bound to.
func (s *Service) MetricsAddr() string { return s.metricsSrv.Addr }

// ConnectNATS connects to NATS_URL (as NATS_USER or with NATS_CREDS), retrying until it
// succeeds or the service's Context ends, creates the JetStream context and applies the default
// topology (streams, buckets, consumers) with STREAM_REPLICAS and STREAM_MAX_BYTES, never
// lowering what exists (events.Topology.Apply). The "nats" readiness check then follows the
// connection. It returns an error when the context ended first or the server refuses the
// topology. The hub services call it; see ConnectNATSWithoutTopology for the managed clusters.
func (s *Service) ConnectNATS() error {
	if err := s.ConnectNATSWithoutTopology(); err != nil {
		return err
	}
	topo := events.DefaultTopology(s.TopologyOptions())
	if err := s.applyTopology(topo); err != nil {
		return err
	}
	s.Go("topology", func(ctx context.Context) error {
		s.keepTopology(ctx, topo)
		return nil
	})
	return nil
}

// applyTopology applies topo, retrying with backoff while JetStream cannot answer yet (a NATS
// cluster electing its leaders after losing a node, a server starting), until the service's
// Context ends. An answer that refuses the topology (replicas a single server cannot keep, a
// permission) is returned at once.
func (s *Service) applyTopology(topo events.Topology) error {
	wait := 200 * time.Millisecond
	for {
		err := topo.Apply(s.ctx, s.JetStream)
		if err == nil {
			return nil
		}
		if !jetStreamUnavailable(err) {
			return fmt.Errorf("apply topology: %w", err)
		}
		s.Logger.Warn("JetStream cannot take the topology yet; retrying", "wait", wait.String(), "error", err)
		select {
		case <-s.ctx.Done():
			return fmt.Errorf("apply topology: %w", errors.Join(s.ctx.Err(), err))
		case <-time.After(wait):
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// Error codes of JetStream answers that say "not now" rather than "no": the cluster has no
// meta leader, a stream has no leader or no quorum yet, a peer for a replica is down.
var unavailableErrorCodes = []jetstream.ErrorCode{10005, 10006, 10008, 10009, 10023, 10118}

// jetStreamUnavailable reports whether err means JetStream could not answer now: no answer at
// all (a timeout, no responders, a connection being re-established) or an answer of
// unavailableErrorCodes.
func jetStreamUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return slices.Contains(unavailableErrorCodes, apiErr.ErrorCode) || apiErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

// publishAckTimeout bounds the wait for the acknowledgement of an asynchronous publish (events
// are published that way, events.Publisher). Without it a publish whose stream leader was lost
// after it took the message (a NATS node killed) waits for an acknowledgement that never
// comes, for as long as its handler's context lasts (2 minutes), and stalls its key and the
// service's stop (seen in TestNATSClusterFailoverUnderLoad). With it the publish fails, and the
// handler retries it with the same event ids, which the server deduplicates.
const publishAckTimeout = 10 * time.Second

// topologyCheckInterval is how often a hub service checks that the stream and the buckets still
// exist (keepTopology).
var topologyCheckInterval = 30 * time.Second

// keepTopology applies the topology again whenever the stream or a bucket is missing, until ctx
// ends: a bucket deleted by hand, or lost with a server's store, is recreated within
// topologyCheckInterval, and the service's writes to it work again (the key-value handles
// address the bucket by name). What the lost bucket held is gone; each service rebuilds what it
// needs (the scanner announces its clusters again, the rule engine rebuilds its cluster view at
// its next start). Errors are logged and retried at the next check: NATS may be down.
func (s *Service) keepTopology(ctx context.Context, topo events.Topology) {
	names := []string{topo.Stream.Name}
	for _, b := range topo.Buckets {
		names = append(names, "KV_"+b.Bucket)
	}
	tick := time.NewTicker(topologyCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		missing := ""
		for _, name := range names {
			if _, err := s.JetStream.Stream(ctx, name); errors.Is(err, jetstream.ErrStreamNotFound) {
				missing = name
				break
			}
		}
		if missing == "" {
			continue
		}
		s.Logger.Warn("Stream missing; applying the topology again", "stream", missing)
		if err := topo.Apply(ctx, s.JetStream); err != nil && ctx.Err() == nil {
			s.Logger.Warn("Could not apply the topology; retrying", "error", err)
		}
	}
}

// TopologyOptions are the topology options of the service's configuration (STREAM_REPLICAS,
// STREAM_MAX_BYTES).
func (s *Service) TopologyOptions() events.TopologyOptions {
	return events.TopologyOptions{Replicas: s.Common.StreamReplicas, MaxBytes: s.Common.StreamMaxBytes}
}

// ConnectNATSWithoutTopology is ConnectNATS without applying the topology: for policy-watcher,
// which runs on every managed cluster and whose NATS user may not create, change or delete the
// stream. It binds only to what the hub services created, so its own steps fail (and retry)
// while the stream does not exist yet.
func (s *Service) ConnectNATSWithoutTopology() error {
	c := s.Common
	nc, err := ConnectNATS(s.ctx, c.NATSURL, s.Name, s.Logger, NATSAuth(c.NATSUser, c.NATSPassword, c.NATSCreds)...)
	if err != nil {
		return err
	}
	s.NATS = nc
	s.nc.Store(nc)
	if s.JetStream, err = jetstream.New(nc, jetstream.WithPublishAsyncTimeout(publishAckTimeout)); err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	return nil
}

// Publisher returns a publisher whose events carry ce-source "/enforcement/<Name>". It needs
// ConnectNATS first.
func (s *Service) Publisher() *events.Publisher {
	return events.NewPublisher(s.JetStream, "/enforcement/"+s.Name)
}

// Consume binds the durable consumer opts.Name (it must exist: the topology creates it) and
// starts handling its messages with h. Unset opts.Logger and opts.Metrics default to the
// service's logger and consumer metrics. Once bound, the consumer counts as bound for the
// "consumer" readiness check, and the stop stops it first. Handler contexts survive the stop
// signal (see events.Consume); each is bounded by opts.HandlerTimeout. It needs ConnectNATS first.
func (s *Service) Consume(opts events.ConsumerOptions, h events.Handler) error {
	if s.JetStream == nil {
		return fmt.Errorf("consume %s: ConnectNATS was not called", opts.Name)
	}
	s.mu.Lock()
	if opts.Metrics == nil {
		if s.consumerMetrics == nil {
			s.consumerMetrics = events.NewMetrics(s.Registry, s.Name)
		}
		opts.Metrics = s.consumerMetrics
	}
	if s.consumerLag == nil {
		s.consumerLag = events.NewConsumerLag(s.Registry, s.Name, s.JetStream)
	}
	s.consumerLag.Add(opts.Name)
	s.mu.Unlock()
	if opts.Logger == nil {
		opts.Logger = s.Logger
	}
	c, err := events.Consume(s.ctx, s.JetStream, h, opts)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.consumers = append(s.consumers, c)
	delete(s.unbound, opts.Name)
	return nil
}

// SetStandby marks the service as waiting on purpose (a replica without leadership): while
// standby, the "consumer" check passes although the consumers are not bound yet.
func (s *Service) SetStandby(standby bool) { s.standby.Store(standby) }

// Go runs the worker run in the background. Its ctx ends at the worker step of the stop, after
// the consumers have stopped, so that in-flight handlers still find what the worker serves (an
// informer cache, a controller); run should then finish its current work and return. A worker
// that returns an error before the stop ends the service: Wait stops it and returns that error.
// A worker that returns nil has simply finished.
func (s *Service) Go(name string, run func(ctx context.Context) error) {
	s.mu.Lock()
	s.running[name]++
	s.mu.Unlock()
	s.workers.Add(1)
	go func() {
		defer s.workers.Done()
		err := run(s.workCtx)
		s.mu.Lock()
		if s.running[name]--; s.running[name] == 0 {
			delete(s.running, name)
		}
		s.mu.Unlock()
		switch {
		case err == nil:
		case s.workCtx.Err() == nil:
			s.failWith(fmt.Errorf("%s: %w", name, err))
		default:
			s.Logger.Warn("Worker stopped with an error", "worker", name, "error", err)
		}
	}()
}

// failWith ends the service with err, the error Wait returns (the first one wins).
func (s *Service) failWith(err error) {
	s.mu.Lock()
	if s.failure == nil {
		s.failure = err
	}
	s.mu.Unlock()
	s.fail(err)
}

// abortWork stops the work at once, for a replica that lost its leadership: another replica
// may lead within LEADER_ELECTION_LEASE_DURATION - LEADER_ELECTION_RENEW_DEADLINE, so nothing may
// finish what it holds (as a stop on a signal lets it). The contexts of the consumers' handlers
// (events.Consumer.Abort) and of the workers end now: Kubernetes and NATS requests in flight
// are cancelled, unfinished messages go back for the next leader, and the stop that follows
// only collects what remains.
func (s *Service) abortWork() {
	s.mu.Lock()
	consumers := s.consumers
	s.mu.Unlock()
	for _, c := range consumers {
		c.Abort()
	}
	s.stopWorkers()
}

// OnStop registers fn to run at the very beginning of the stop, before the consumers stop: to
// tell in-flight work that waits (a retry backoff) to give up and leave its message to the next
// instance. Functions run in the order they were registered and must not block.
func (s *Service) OnStop(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onStop = append(s.onStop, fn)
}

// Wait blocks until the service is asked to stop (Start's context ended or a worker failed),
// stops it in order within SHUTDOWN_TIMEOUT and returns. It returns nil after a clean stop on the
// signal, the worker's error when a worker failed, and joined errors for steps of the stop that
// did not finish in time.
func (s *Service) Wait() error {
	<-s.ctx.Done()
	return s.stop()
}

// Abort ends a start-up that could not complete: it stops what was started, in the stop order,
// and returns err. When the service was asked to stop while starting (err is then usually the
// cancelled wait), it returns what Wait would: nil after the signal, the worker's error after a
// worker failed.
func (s *Service) Abort(err error) error {
	interrupted := s.ctx.Err() != nil
	s.fail(nil)
	stopErr := s.stop()
	if interrupted {
		return stopErr
	}
	return errors.Join(err, stopErr)
}

// stop runs the ordered stop once and returns the worker's failure (if that ended the service)
// joined with the steps that failed.
func (s *Service) stop() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		failure := s.failure
		s.mu.Unlock()
		if failure != nil {
			s.Logger.Info("Stopping", "reason", failure.Error())
		} else {
			s.Logger.Info("Stopping")
		}
		sctx, cancel := context.WithTimeout(context.Background(), s.Common.ShutdownTimeout)
		defer cancel()
		steps := []error{s.stopConsumers(sctx), s.finishWorkers(sctx), s.drainNATS(sctx), s.release(sctx), s.stopHTTP(sctx)}
		for _, err := range steps {
			if err != nil {
				s.Logger.Warn("Stop step did not finish cleanly", "error", err)
			}
		}
		s.stopErr = errors.Join(append([]error{failure}, steps...)...)
		s.Logger.Info("Stopped")
	})
	return s.stopErr
}

// stopConsumers runs the OnStop functions and stops every consumer: pulling ends, in-flight
// handlers finish, unfinished messages go back to the server.
func (s *Service) stopConsumers(ctx context.Context) error {
	s.stopping.Store(true)
	s.mu.Lock()
	hooks, consumers := s.onStop, s.consumers
	s.mu.Unlock()
	for _, fn := range hooks {
		fn()
	}
	var wg sync.WaitGroup
	errs := make([]error, len(consumers))
	for i, c := range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Stop(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w (SHUTDOWN_TIMEOUT %s)", err, s.Common.ShutdownTimeout)
	}
	return nil
}

// finishWorkers cancels the workers' context and waits for them to return.
func (s *Service) finishWorkers(ctx context.Context) error {
	s.stopWorkers()
	done := make(chan struct{})
	go func() { s.workers.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		select {
		case <-done: // the workers returned just as the time ran out
			return nil
		case <-time.After(10 * time.Millisecond):
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		names := make([]string, 0, len(s.running))
		for n := range s.running {
			names = append(names, n)
		}
		return fmt.Errorf("workers %v did not return within SHUTDOWN_TIMEOUT %s", names, s.Common.ShutdownTimeout)
	}
}

// drainNATS drains the connection (subscriptions end, buffered acks and publishes are flushed)
// and waits until it is closed: Drain alone returns before the flush.
func (s *Service) drainNATS(ctx context.Context) error {
	nc := s.nc.Load()
	if nc == nil {
		return nil
	}
	closed := make(chan struct{})
	var once sync.Once
	nc.SetClosedHandler(func(*nats.Conn) { once.Do(func() { close(closed) }) })
	if nc.IsClosed() {
		return nil
	}
	if err := nc.Drain(); err != nil {
		nc.Close()
		return fmt.Errorf("drain NATS: %w", err)
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		nc.Close()
		return fmt.Errorf("drain NATS: not closed within SHUTDOWN_TIMEOUT %s", s.Common.ShutdownTimeout)
	}
}

// release releases the leader election Lease (see Lead), after the work is finished and
// flushed, so that the next leader starts from all of it.
func (s *Service) release(ctx context.Context) error {
	s.mu.Lock()
	release := s.releaseLease
	s.mu.Unlock()
	if release == nil {
		return nil
	}
	return release(ctx)
}

// stopHTTP stops the profile, metrics and health servers, last, so that probes and scrapes see
// the stop.
func (s *Service) stopHTTP(ctx context.Context) error {
	if ctx.Err() != nil { // the stop used up its time: close at once
		var grace context.CancelFunc
		ctx, grace = context.WithTimeout(context.Background(), time.Second)
		defer grace()
	}
	return errors.Join(s.pprofSrv.Shutdown(ctx), s.metricsSrv.Shutdown(ctx), s.healthSrv.Shutdown(ctx))
}

// PprofAddr is the address the profile server is bound to, "" when PPROF_ADDR is unset.
func (s *Service) PprofAddr() string {
	if s.pprofSrv == nil {
		return ""
	}
	return s.pprofSrv.Addr
}
