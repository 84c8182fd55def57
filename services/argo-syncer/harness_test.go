package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	argov1 "github.com/argoproj/argo-cd/v2/pkg/apis/application/v1alpha1"
	argoclient "github.com/argoproj/argo-cd/v2/pkg/client/clientset/versioned"
	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // envtest's CRD installer logs through controller-runtime
	os.Exit(testenv.RunWithSharedKube(m))
}

// request is one API request seen by the counting transport.
type request = testenv.Request

// requestLog records every request of the harness's clients, so tests can count the API
// requests a batch of intents costs and check the order of deletes.
type requestLog struct{ testenv.RequestLog }

func (l *requestLog) wrap(cfg *rest.Config) *rest.Config {
	cfg = l.Wrap(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit in tests
	// Argo CD's finalizer name is not domain-qualified; the API server warns on every write.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg
}

// mark returns the current position; since returns the requests after it.
func (l *requestLog) mark() int { return l.Mark() }

func (l *requestLog) since(mark int) []request { return l.Since(mark) }

// writes filters the requests that change something.
func writes(reqs []request) []request {
	var out []request
	for _, r := range reqs {
		if r.Method != http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

// harness runs a Syncer and its consumer against real NATS and the shared real API server, in
// a namespace of its own.
type harness struct {
	t        testing.TB
	ns, opNS string
	kube     kubernetes.Interface
	argo     argoclient.Interface
	log      *requestLog
	syncer   *Syncer
	handler  *Handler
	gates    *gateStore
	js       jetstream.JetStream
	pub      *events.Publisher
	outcomes chan events.Event
	seen     []events.Event
	// syncerArgo is what the Syncer writes Argo CD's objects through, and syncerKube its
	// Kubernetes client (cluster Secrets, source Secrets); in API mode (withArgoAPI) argocd is
	// the server and session the Syncer's session.
	syncerArgo argoclient.Interface
	syncerKube kubernetes.Interface
	argocd     *testenv.ArgoCD
	session    *argoSession
	metrics    *Metrics
	registry   *prometheus.Registry
	natsURL    string
}

var nsCounter atomic.Int64

// harnessOption changes the harness before its Syncer is built: the Syncer's options, and the
// clients it writes through (syncerArgo and syncerKube, the harness's own by default).
type harnessOption func(h *harness, o *SyncerOptions)

func newHarness(t testing.TB, opts ...harnessOption) *harness {
	t.Helper()
	k := testenv.SharedKube(t)
	k.InstallCRDs(t, testenv.ArgoCDCRDs()...)
	id := nsCounter.Add(1)
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	if len(name) > 40 {
		name = name[:40]
	}
	h := &harness{t: t, log: &requestLog{}, outcomes: make(chan events.Event, 10000)}
	h.ns = k.Namespace(t, fmt.Sprintf("argocd-%d-%s", id, strings.Trim(name, "-")))
	h.opNS = k.Namespace(t, fmt.Sprintf("op-%d", id))
	cfg := h.log.wrap(k.Config)
	h.kube = kubernetes.NewForConfigOrDie(cfg)
	h.argo = argoclient.NewForConfigOrDie(cfg)

	// The rancher source Secret the intents reference.
	_, err := h.kube.CoreV1().Secrets(h.opNS).Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "rancher", Namespace: h.opNS},
		Data:       map[string][]byte{"url": []byte("https://rancher.example"), "token": []byte("token-s3cr3t"), "caCert": testCAPEMParsable(t)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	so := SyncerOptions{
		ArgoCDNamespace: h.ns, OperatorNamespace: h.opNS,
		Project:         ProjectSettings{ClusterResources: true},
		SourceSecretTTL: time.Minute,
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	h.syncerArgo, h.syncerKube = h.argo, h.kube
	for _, o := range opts {
		o(h, &so)
	}
	h.syncer = NewSyncer(h.syncerKube, h.syncerArgo, so)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { _ = h.syncer.Run(ctx, ready, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("caches did not sync")
	}

	srv := testenv.StartNATS(t)
	h.natsURL = srv.URL()
	var nc *nats.Conn
	nc, h.js = eventstest.Bus(t, srv.URL())
	sub, err := nc.Subscribe("enforcement.>", func(m *nats.Msg) {
		if strings.HasPrefix(m.Subject, "enforcement.install.") || strings.HasPrefix(m.Subject, "enforcement.uninstall.") {
			if ev, _, err := events.Decode(m.Subject, m.Header, m.Data); err == nil {
				h.outcomes <- ev
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	h.pub = events.NewPublisher(h.js, "/enforcement/test")
	gates, err := h.js.KeyValue(context.Background(), events.BucketInstallGates)
	if err != nil {
		t.Fatal(err)
	}
	h.gates = &gateStore{kv: gates}
	decisions, err := h.js.KeyValue(context.Background(), events.BucketLastDecisions)
	if err != nil {
		t.Fatal(err)
	}
	h.handler = &Handler{syncer: h.syncer, pub: events.NewPublisher(h.js, "/enforcement/argo-syncer"), gates: h.gates,
		decisions: &decisionStore{kv: decisions}, logger: so.Logger}
	return h
}

// consume starts the argo-syncer consumer with fast retries.
func (h *harness) consume() {
	h.t.Helper()
	h.consumeWith(h.handler.Handle, 3)
}

// consumeWith starts the argo-syncer consumer with handle in front, fast retries and at most
// maxAttempts deliveries of a message; the consumer stops at the end of the test.
func (h *harness) consumeWith(handle events.Handler, maxAttempts int) {
	h.t.Helper()
	c, err := events.Consume(context.Background(), h.js, handle, events.ConsumerOptions{
		Name: events.ConsumerArgoSyncer, Concurrency: 16, MaxAttempts: maxAttempts,
		Backoff: func(int) time.Duration { return 20 * time.Millisecond },
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
}

// publish publishes events and returns their stream sequences.
func (h *harness) publish(evs ...events.Event) []uint64 {
	h.t.Helper()
	var seqs []uint64
	for _, e := range evs {
		r, err := h.pub.Publish(context.Background(), e)
		if err != nil {
			h.t.Fatal(err)
		}
		seqs = append(seqs, r.Sequence)
	}
	return seqs
}

// handle calls the handler directly, as a (re)delivery would.
func (h *harness) handle(e events.Event) {
	h.t.Helper()
	if err := h.handler.Handle(context.Background(), e, events.Meta{}); err != nil {
		h.t.Fatalf("handle %s: %v", e.ID(), err)
	}
}

// outcome returns the first outcome event matching f, waiting up to 20 s for it. Events that
// do not match are kept for later calls.
func (h *harness) outcome(f func(events.Event) bool) events.Event {
	h.t.Helper()
	for i, e := range h.seen {
		if f(e) {
			h.seen = append(h.seen[:i:i], h.seen[i+1:]...)
			return e
		}
	}
	timeout := time.After(20 * time.Second)
	for {
		select {
		case e := <-h.outcomes:
			if f(e) {
				return e
			}
			h.seen = append(h.seen, e)
		case <-timeout:
			h.t.Fatal("no matching outcome event within 20s")
			return nil
		}
	}
}

// noOutcome asserts that no outcome matching f arrives within d.
func (h *harness) noOutcome(d time.Duration, f func(events.Event) bool) {
	h.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e := <-h.outcomes:
			if f(e) {
				h.t.Fatalf("unexpected outcome %s %s", e.Type(), e.ID())
			}
			h.seen = append(h.seen, e)
		case <-timeout:
			return
		}
	}
}

func succeeded(intentID string) func(events.Event) bool {
	return func(e events.Event) bool {
		s, ok := e.(*events.InstallSucceeded)
		return ok && s.IntentID == intentID
	}
}

func failed(intentID string) func(events.Event) bool {
	return func(e events.Event) bool {
		s, ok := e.(*events.InstallFailed)
		return ok && s.IntentID == intentID
	}
}

func uninstalled(intentID string) func(events.Event) bool {
	return func(e events.Event) bool {
		s, ok := e.(*events.UninstallDone)
		return ok && s.IntentID == intentID
	}
}

// getOrNil returns the object get reads under name, or nil when there is none; any other error
// fails the test.
func getOrNil[T any](t testing.TB, get func(context.Context, string, metav1.GetOptions) (*T, error), name string) *T {
	t.Helper()
	obj, err := get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func (h *harness) app(name string) *argov1.Application {
	h.t.Helper()
	return getOrNil(h.t, h.argo.ArgoprojV1alpha1().Applications(h.ns).Get, name)
}

func (h *harness) project(name string) *argov1.AppProject {
	h.t.Helper()
	return getOrNil(h.t, h.argo.ArgoprojV1alpha1().AppProjects(h.ns).Get, name)
}

func (h *harness) secret(name string) *corev1.Secret {
	h.t.Helper()
	return getOrNil(h.t, h.kube.CoreV1().Secrets(h.ns).Get, name)
}

// eventually waits up to 10 s until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.EventuallyTrue(t, 10*time.Second, what, cond)
}

// installIntent is an intent of rule ns/rule for cluster with the harness's source Secret.
func (h *harness) installIntent(rule, cluster, enforcement string) *events.InstallIntent {
	in := intent(cluster, enforcement)
	in.Rule.Name = rule
	in.Rule.UID = "uid-" + rule
	in.Cluster.Source = events.SourceRef{Kind: "rancher", ID: "src1", SecretNamespace: h.opNS, SecretName: "rancher"}
	return in
}

func uninstallIntent(in *events.InstallIntent, reason string) *events.UninstallIntent {
	return &events.UninstallIntent{Rule: in.Rule, Cluster: in.Cluster, Enforcement: in.Enforcement.Name, Reason: reason,
		DeletionPolicy: in.DeletionPolicy}
}
