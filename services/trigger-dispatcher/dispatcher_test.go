package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// harness is one component-test world: the shared kube-apiserver with Argo CD's CRDs, an
// embedded NATS, a namespace for Applications and one for the rule, a publisher standing in for
// rule-engine and argo-syncer, and a subscription to the dispatcher's outcome events.
type harness struct {
	t        testing.TB
	kube     *testenv.Kube
	nats     *testenv.NATS
	js       jetstream.JetStream
	pub      *events.Publisher
	argoNS   string
	ruleNS   string
	outcomes chan events.Event
	seen     []events.Event
}

var namespaceSeq atomic.Int64

func newHarness(t testing.TB) *harness {
	t.Helper()
	h := &harness{t: t, kube: kubeWithArgoCD(t), nats: testenv.StartNATS(t), outcomes: make(chan events.Event, 256)}
	n := namespaceSeq.Add(1)
	h.argoNS = h.kube.Namespace(t, fmt.Sprintf("argocd-%d-%d", time.Now().UnixNano()%1e6, n))
	h.ruleNS = h.kube.Namespace(t, fmt.Sprintf("rules-%d-%d", time.Now().UnixNano()%1e6, n))
	_, h.js = eventstest.Bus(t, h.nats.URL())
	ctx := context.Background()
	h.pub = events.NewPublisher(h.js, "/test")
	oc, err := h.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"enforcement.trigger.>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		ev, _, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Errorf("decode outcome: %v", err)
			return
		}
		h.outcomes <- ev
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cc.Stop)
	return h
}

// env is the dispatcher's environment for this harness, with overrides.
func (h *harness) env(overrides ...string) map[string]string {
	env := baseEnv(h.nats.URL(), h.kube.Kubeconfig)
	for i := 0; i+1 < len(overrides); i += 2 {
		env[overrides[i]] = overrides[i+1]
	}
	return env
}

// intent is an install intent of rule "baseline" in the harness's rule namespace.
func (h *harness) intent(cluster, spec string, triggers *events.Triggers) *events.InstallIntent {
	return &events.InstallIntent{
		Rule:        events.RuleRef{Namespace: h.ruleNS, Name: "baseline", Generation: 1},
		Cluster:     events.Target{Name: cluster, Key: "id-" + cluster, URL: "https://" + cluster + ".example.com", Revision: 1},
		Enforcement: events.Enforcement{Name: "logging", Repo: "https://git.example.com/logging.git", Path: "chart", Namespace: "default"},
		SpecHash:    spec,
		Triggers:    triggers,
	}
}

// gate is argo-syncer's InstallGated for an intent at stream sequence seq: it holds the intent
// back until its beforeInstall has answered.
func (h *harness) gate(in *events.InstallIntent, seq uint64) *events.InstallGated {
	return &events.InstallGated{IntentID: in.ID(), IntentSequence: seq,
		Application: events.ApplicationName(in.Cluster.Name, in.Enforcement.Name), Intent: *in}
}

// gated publishes an intent for an Application that does not exist and, playing argo-syncer,
// its InstallGated. It returns the InstallGated and the stream sequences of both events.
func (h *harness) gated(in *events.InstallIntent) (g *events.InstallGated, intentSeq, gateSeq uint64) {
	h.t.Helper()
	intentSeq = h.publish(in)
	g = h.gate(in, intentSeq)
	return g, intentSeq, h.publish(g)
}

// publish stores an event and returns its stream sequence.
func (h *harness) publish(e events.Event) uint64 {
	h.t.Helper()
	res, err := h.pub.Publish(context.Background(), e)
	if err != nil {
		h.t.Fatal(err)
	}
	return res.Sequence
}

// redeliver stores the event again under another Nats-Msg-Id, as a redelivery would present it
// to the dispatcher (same ce-id, same payload).
func (h *harness) redeliver(e events.Event) {
	h.t.Helper()
	m, err := events.Encode(e, "/test", time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, e.ID()+":again")
	if _, err := h.js.PublishMsg(context.Background(), m); err != nil {
		h.t.Fatal(err)
	}
}

// waitOutcome waits for the next trigger event of phase for the intent.
func (h *harness) waitOutcome(phase, intentID string) events.Event {
	h.t.Helper()
	for _, e := range h.seen {
		if matches(e, phase, intentID) {
			return e
		}
	}
	timeout := time.After(15 * time.Second)
	for {
		select {
		case e := <-h.outcomes:
			h.seen = append(h.seen, e)
			if matches(e, phase, intentID) {
				return e
			}
		case <-timeout:
			h.t.Fatalf("no %s outcome for intent %s within 15s (seen %d outcomes)", phase, intentID, len(h.seen))
			return nil
		}
	}
}

func matches(e events.Event, phase, intentID string) bool {
	switch ev := e.(type) {
	case *events.TriggerDelivered:
		return ev.Phase == phase && ev.IntentID == intentID
	case *events.TriggerFailed:
		return ev.Phase == phase && ev.IntentID == intentID
	}
	return false
}

// caughtUp waits until the dispatcher has acknowledged everything in the stream.
func (h *harness) caughtUp() {
	h.t.Helper()
	eventstest.CaughtUp(h.t, h.js, events.ConsumerTriggerDispatcher, 15*time.Second)
}

// createApplication does argo-syncer's part: create the Application of (cluster, logging), with
// finalizers if given.
func (h *harness) createApplication(cluster string, finalizers ...string) {
	h.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
		"spec": map[string]any{
			"project":     cluster,
			"source":      map[string]any{"repoURL": "https://git.example.com/logging.git", "path": "chart"},
			"destination": map[string]any{"name": cluster, "namespace": "default"},
		},
	}}
	u.SetNamespace(h.argoNS)
	u.SetName(events.ApplicationName(cluster, "logging"))
	u.SetFinalizers(finalizers)
	if err := h.kube.Client.Create(context.Background(), u); err != nil {
		h.t.Fatalf("create Application: %v", err)
	}
}

// storedAttempt is one TriggerAttempted event as the stream holds it.
type storedAttempt struct {
	*events.TriggerAttempted
	Raw string // subject, headers and body, to check what the event exposes
}

// attempts returns the TriggerAttempted events of a delivery stored so far, in stream order.
func (h *harness) attempts(deliveryID string) []storedAttempt {
	h.t.Helper()
	ctx := context.Background()
	oc, err := h.js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"enforcement.trigger.attempted.>"}})
	if err != nil {
		h.t.Fatal(err)
	}
	var out []storedAttempt
	for {
		batch, err := oc.Fetch(256, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			h.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			a, _, err := events.DecodeAs[*events.TriggerAttempted](m.Subject(), m.Headers(), m.Data())
			if err != nil {
				h.t.Fatalf("decode attempt: %v", err)
			}
			if a.DeliveryID == deliveryID {
				out = append(out, storedAttempt{a, fmt.Sprintf("%s %v %s", m.Subject(), m.Headers(), m.Data())})
			}
		}
		if n == 0 {
			return out
		}
	}
}

// applicationExists reads the Application as a receiver would check it.
func (h *harness) applicationExists(cluster string) (bool, error) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("Application")
	err := h.kube.Client.Get(context.Background(), types.NamespacedName{Namespace: h.argoNS, Name: events.ApplicationName(cluster, "logging")}, u)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// appCheckingReceiver answers 200 and records, while handling each call, whether the
// Application exists.
func (h *harness) appCheckingReceiver(cluster string) (*receiver, func() []bool) {
	var mu sync.Mutex
	var seen []bool
	rc := newReceiver(h.t)
	rc.onCall = func(*http.Request, []byte) {
		exists, err := h.applicationExists(cluster)
		if err != nil {
			h.t.Errorf("receiver: read Application: %v", err)
		}
		mu.Lock()
		seen = append(seen, exists)
		mu.Unlock()
	}
	return rc, func() []bool { mu.Lock(); defer mu.Unlock(); return append([]bool(nil), seen...) }
}

func bodyOf(t testing.TB, c receivedCall) payload {
	t.Helper()
	var p payload
	if err := json.Unmarshal(c.Body, &p); err != nil {
		t.Fatalf("body %s: %v", c.Body, err)
	}
	return p
}

// The whole choreography with argo-syncer played by the test: beforeInstall is delivered on
// InstallGated, while the Application does not exist, its outcome names the intent and its
// stream sequence, and afterInstall is delivered after the Application was created, on Created
// only. A later intent for the existing Application (an update: argo-syncer does not gate it)
// calls neither hook.
func TestChoreographyBeforeAndAfterInstall(t *testing.T) {
	h := newHarness(t)
	svc := startService(t, h.env())
	before, beforeSaw := h.appCheckingReceiver("prod-eu")
	after, afterSaw := h.appCheckingReceiver("prod-eu")

	in := h.intent("prod-eu", "h1", &events.Triggers{
		BeforeInstall: &events.Trigger{Endpoint: before.URL()},
		AfterInstall:  &events.Trigger{Endpoint: after.URL(), TimeoutSeconds: 15},
	})
	_, seq, _ := h.gated(in)
	got, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered)
	if !ok {
		t.Fatalf("beforeInstall outcome is not TriggerDelivered")
	}
	if got.IntentSequence != seq || got.StatusCode != http.StatusOK || got.Attempts != 1 {
		t.Errorf("TriggerDelivered = %+v, want intent sequence %d, status 200, 1 attempt", got, seq)
	}
	if s := beforeSaw(); len(s) != 1 || s[0] {
		t.Fatalf("beforeInstall receiver saw Application existing = %v, want one call while it did not exist", s)
	}
	call := before.Calls()[0]
	p := bodyOf(t, call)
	if p.DeliveryID != got.DeliveryID || call.Header.Get("webhook-id") != got.DeliveryID {
		t.Errorf("delivery id: body %q, header %q, event %q", p.DeliveryID, call.Header.Get("webhook-id"), got.DeliveryID)
	}
	if p.Cluster != (payloadCluster{Name: "prod-eu", ID: "id-prod-eu", URL: "https://prod-eu.example.com"}) ||
		p.Enforcement.Name != "logging" || p.Phase != events.PhaseBeforeInstall || p.Rule.Name != "baseline" {
		t.Errorf("body = %s", call.Body)
	}
	if n := len(after.Calls()); n != 0 {
		t.Fatalf("afterInstall called %d times before the Application was created", n)
	}

	// argo-syncer: create the Application after TriggerDelivered, then report it.
	h.createApplication("prod-eu")
	h.publish(&events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: "prod-eu", Enforcement: "logging",
		Application: events.ApplicationName("prod-eu", "logging"), Created: true, SpecHash: "h1"})
	afterOut, ok := h.waitOutcome(events.PhaseAfterInstall, in.ID()).(*events.TriggerDelivered)
	if !ok {
		t.Fatal("afterInstall outcome is not TriggerDelivered")
	}
	if s := afterSaw(); len(s) != 1 || !s[0] {
		t.Fatalf("afterInstall receiver saw Application existing = %v, want one call while it existed", s)
	}
	if afterOut.DeliveryID == got.DeliveryID || bodyOf(t, after.Calls()[0]).Phase != events.PhaseAfterInstall {
		t.Errorf("afterInstall delivery %q shares the beforeInstall id or has the wrong phase", afterOut.DeliveryID)
	}

	// An update: new spec, the Application exists, argo-syncer reports Created=false.
	upd := h.intent("prod-eu", "h2", in.Triggers)
	h.publish(upd)
	h.publish(&events.InstallSucceeded{IntentID: upd.ID(), Rule: upd.Rule, Cluster: "prod-eu", Enforcement: "logging",
		Application: events.ApplicationName("prod-eu", "logging"), Created: false, SpecHash: "h2"})
	h.caughtUp()
	if b, a := len(before.Calls()), len(after.Calls()); b != 1 || a != 1 {
		t.Errorf("after an update: beforeInstall called %d times, afterInstall %d; want 1 and 1", b, a)
	}

	// Every attempt and outcome is counted.
	svc.wantMetrics(t,
		`enforcement_trigger_dispatcher_attempts_total{phase="beforeInstall",result="success"} 1`,
		`enforcement_trigger_dispatcher_attempts_total{phase="afterInstall",result="success"} 1`,
		`enforcement_trigger_dispatcher_deliveries_total{outcome="delivered",phase="beforeInstall"} 1`,
	)
}

// Every HTTP attempt is a TriggerAttempted event, published as soon as the attempt is classified
// (so before the outcome): its number, result, status code or error, duration and whether a
// retry follows, in one series per handling of the intent. It carries no secret: not the
// signing key, not the signature, not the endpoint (whose query holds a token here).
func TestEveryAttemptIsAnEvent(t *testing.T) {
	h := newHarness(t)
	key := "whsec_" + base64.StdEncoding.EncodeToString([]byte("the attempt events never hold it"))
	if err := h.kube.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ruleNS, Name: "webhook-key"},
		Data:       map[string][]byte{"key": []byte(key)},
	}); err != nil {
		t.Fatal(err)
	}
	svc := startService(t, h.env("TRIGGER_BACKOFF_BASE", "20ms", "TRIGGER_BACKOFF_MAX", "100ms"))
	rc := newReceiver(t, status(http.StatusServiceUnavailable), status(http.StatusBadGateway), status(http.StatusNoContent))
	endpoint := rc.URL() + "/hooks/before?token=s3cr3t-t0ken"
	in := h.intent("attempts", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: endpoint, SigningSecret: "webhook-key"}})
	_, seq, gateSeq := h.gated(in)
	out, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered)
	if !ok || out.Attempts != 3 {
		t.Fatalf("outcome = %+v, want TriggerDelivered after 3 attempts", out)
	}
	// The attempts arrived before the outcome.
	before := 0
	for _, e := range h.seen {
		if a, ok := e.(*events.TriggerAttempted); ok && a.DeliveryID == out.DeliveryID {
			before++
		}
	}
	if before != 3 {
		t.Errorf("%d attempt events arrived before the outcome, want 3", before)
	}

	atts := h.attempts(out.DeliveryID)
	if len(atts) != 3 || len(rc.Calls()) != 3 {
		t.Fatalf("%d attempt events for %d calls, want 3 and 3", len(atts), len(rc.Calls()))
	}
	want := []struct {
		result string
		status int
		retry  bool
	}{{resultServerError, 503, true}, {resultServerError, 502, true}, {resultSuccess, 204, false}}
	series := fmt.Sprintf("event-%d-1", gateSeq)
	for i, a := range atts {
		w := want[i]
		if a.Attempt != i+1 || a.Result != w.result || a.StatusCode != w.status || a.WillRetry != w.retry || a.Error != "" {
			t.Errorf("attempt %d = %+v, want result %s, status %d, will retry %v", i+1, a.TriggerAttempted, w.result, w.status, w.retry)
		}
		if (a.RetryInMillis > 0) != w.retry || a.RetryInMillis > 100 || a.DurationMillis < 0 {
			t.Errorf("attempt %d: retry in %d ms, took %d ms", i+1, a.RetryInMillis, a.DurationMillis)
		}
		if a.Series != series || a.IntentID != in.ID() || a.IntentSequence != seq || a.Phase != events.PhaseBeforeInstall ||
			a.Rule != in.Rule || a.Cluster != "attempts" || a.Enforcement != "logging" {
			t.Errorf("attempt %d identifies %+v, want series %s of intent %s (sequence %d)", i+1, a.TriggerAttempted, series, in.ID(), seq)
		}
		sig := rc.Calls()[i].Header.Get("webhook-signature")
		for _, secret := range []string{"s3cr3t-t0ken", "/hooks/before", key, strings.TrimPrefix(key, "whsec_"), strings.TrimPrefix(sig, "v1,")} {
			if strings.Contains(a.Raw, secret) {
				t.Errorf("attempt %d exposes %q: %s", i+1, secret, a.Raw)
			}
		}
	}

	// An attempt without a response names its error class and the error.
	meta := h.intent("attempts-refused", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "http://169.254.169.254/latest/meta-data/"}})
	h.gated(meta)
	failed, ok := h.waitOutcome(events.PhaseBeforeInstall, meta.ID()).(*events.TriggerFailed)
	if !ok {
		t.Fatal("refused delivery did not fail")
	}
	if r := h.attempts(failed.DeliveryID); len(r) != 1 || r[0].Result != resultRefused || r[0].StatusCode != 0 ||
		r[0].WillRetry || !strings.Contains(r[0].Error, "refused") || strings.Contains(r[0].Raw, "169.254.169.254/latest") {
		t.Errorf("refused attempts = %+v, want one refused attempt with its error and no endpoint", r)
	}

	// And every attempt is a metric.
	svc.wantMetrics(t,
		`enforcement_trigger_dispatcher_attempts_total{phase="beforeInstall",result="server_error"} 2`,
		`enforcement_trigger_dispatcher_attempts_total{phase="beforeInstall",result="success"} 1`,
		`enforcement_trigger_dispatcher_attempts_total{phase="beforeInstall",result="refused"} 1`,
	)
}

// The dispatcher never decides whether an install waits for beforeInstall: argo-syncer does.
// An install intent alone calls no beforeInstall, although no Application exists, and
// InstallGated calls it although an Application of that name exists (argo-syncer gates a
// reinstall once a Cascade uninstall's Application is gone, which a stale read could miss).
// The dispatcher has no Application client at all.
func TestBeforeInstallOnInstallGatedOnly(t *testing.T) {
	h := newHarness(t)
	svc := startService(t, h.env())
	before, beforeSaw := h.appCheckingReceiver("gated-only")
	after, afterSaw := h.appCheckingReceiver("gated-only")
	in := h.intent("gated-only", "h1", &events.Triggers{
		BeforeInstall: &events.Trigger{Endpoint: before.URL()}, AfterInstall: &events.Trigger{Endpoint: after.URL()},
	})
	seq := h.publish(in)
	h.caughtUp()
	if n := len(before.Calls()); n != 0 {
		t.Fatalf("beforeInstall called %d times on an intent argo-syncer did not gate", n)
	}
	h.createApplication("gated-only")
	h.publish(h.gate(in, seq))
	if _, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("beforeInstall outcome is not TriggerDelivered")
	}
	if s := beforeSaw(); len(s) != 1 || !s[0] {
		t.Errorf("beforeInstall calls saw Application existing = %v, want one call on InstallGated alone", s)
	}
	h.publish(&events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: "gated-only", Enforcement: "logging",
		Application: events.ApplicationName("gated-only", "logging"), Created: true, SpecHash: "h1"})
	if _, ok := h.waitOutcome(events.PhaseAfterInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("afterInstall outcome is not TriggerDelivered")
	}
	if s := afterSaw(); len(s) != 1 || !s[0] {
		t.Errorf("afterInstall calls saw Application existing = %v, want one call", s)
	}
	if m := scrape(t, svc.metrics); strings.Contains(m, `outcome="skipped_update"`) {
		t.Error("the dispatcher still judges updates itself")
	}
}

// scrape returns the text of /metrics at addr.
func scrape(t testing.TB, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wantMetrics fails the test for every line of wants that the instance's /metrics lacks.
func (s *instance) wantMetrics(t testing.TB, wants ...string) {
	t.Helper()
	metrics := scrape(t, s.metrics)
	for _, want := range wants {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// A redelivered intent, InstallGated or InstallSucceeded whose delivery is final calls no webhook again, and
// the outcome event is not stored twice.
func TestRedeliveryDoesNotRepeatAFinishedDelivery(t *testing.T) {
	h := newHarness(t)
	startService(t, h.env())
	before, after := newReceiver(t), newReceiver(t)
	in := h.intent("redeliver", "h1", &events.Triggers{
		BeforeInstall: &events.Trigger{Endpoint: before.URL()}, AfterInstall: &events.Trigger{Endpoint: after.URL()},
	})
	g, _, _ := h.gated(in)
	h.waitOutcome(events.PhaseBeforeInstall, in.ID())
	h.createApplication("redeliver")
	done := &events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: "redeliver", Enforcement: "logging", Created: true, SpecHash: "h1"}
	h.publish(done)
	h.waitOutcome(events.PhaseAfterInstall, in.ID())

	h.redeliver(in)
	h.redeliver(g)
	h.redeliver(done)
	h.caughtUp()
	if b, a := len(before.Calls()), len(after.Calls()); b != 1 || a != 1 {
		t.Errorf("after redeliveries: beforeInstall called %d times, afterInstall %d; want 1 and 1", b, a)
	}
	info, err := h.js.Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := info.Info(context.Background(), jetstream.WithSubjectFilter("enforcement.trigger.>"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(msgs.State.Subjects); n == 0 {
		t.Fatal("no trigger events stored")
	}
	outcomes, attempts := uint64(0), uint64(0)
	for subject, c := range msgs.State.Subjects {
		if strings.HasPrefix(subject, "enforcement.trigger.attempted.") {
			attempts += c
		} else {
			outcomes += c
		}
	}
	if outcomes != 2 || attempts != 2 {
		t.Errorf("%d trigger outcomes and %d attempts stored, want 2 and 2 (one of each per phase)", outcomes, attempts)
	}
}

// A dispatcher stopped while a delivery waits for its retry hands the intent back; the next
// instance repeats the delivery with the same id, before the Application exists, and only one
// outcome is published.
func TestRestartDuringRetryRepeatsWithSameID(t *testing.T) {
	h := newHarness(t)
	var failing atomic.Bool
	failing.Store(true)
	before := newReceiver(t, statusWhile(&failing, http.StatusServiceUnavailable))
	first := startService(t, h.env("TRIGGER_BACKOFF_BASE", "1m", "TRIGGER_BACKOFF_MAX", "1m"))
	in := h.intent("restart", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: before.URL(), FailurePolicy: "Fail"}})
	_, _, gateSeq := h.gated(in)
	for len(before.Calls()) == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	first.stop(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("shutdown while a delivery waits took %s", d)
	}
	failing.Store(false)
	startService(t, h.env())
	out, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered)
	if !ok {
		t.Fatal("outcome after restart is not TriggerDelivered")
	}
	calls := before.Calls()
	if len(calls) < 2 {
		t.Fatalf("%d calls, want the failed one and the repeat", len(calls))
	}
	for i, c := range calls {
		if id := c.Header.Get("webhook-id"); id != out.DeliveryID || bodyOf(t, c).DeliveryID != out.DeliveryID {
			t.Errorf("call %d carries id %q, want %q", i+1, id, out.DeliveryID)
		}
	}
	if exists, _ := h.applicationExists("restart"); exists {
		t.Error("Application exists although nobody created it")
	}
	// Every call is an attempt event; the repeat after the restart is a new series (the intent's
	// second delivery), so the server did not deduplicate its first attempt away.
	atts := h.attempts(out.DeliveryID)
	if len(atts) != len(calls) {
		t.Fatalf("%d attempt events for %d calls", len(atts), len(calls))
	}
	initial, last := atts[0], atts[len(atts)-1]
	if initial.Result != resultServerError || initial.StatusCode != http.StatusServiceUnavailable || !initial.WillRetry || initial.Series != fmt.Sprintf("event-%d-1", gateSeq) {
		t.Errorf("first attempt = %+v, want a 503 to retry in series event-%d-1", initial.TriggerAttempted, gateSeq)
	}
	if last.Result != resultSuccess || last.WillRetry || last.Series == initial.Series || last.Attempt != out.Attempts {
		t.Errorf("last attempt = %+v, want the success of a new series numbered as the outcome's %d attempts", last.TriggerAttempted, out.Attempts)
	}
}

// InstallSucceeded{Created} published while the dispatcher is down is delivered as afterInstall
// by the next instance: the armed record and the unacknowledged event survive the restart.
func TestAfterInstallPendingSurvivesRestart(t *testing.T) {
	h := newHarness(t)
	after, afterSaw := h.appCheckingReceiver("survivor")
	first := startService(t, h.env())
	in := h.intent("survivor", "h1", &events.Triggers{AfterInstall: &events.Trigger{Endpoint: after.URL()}})
	h.publish(in)
	h.caughtUp()
	first.stop(t)

	h.createApplication("survivor")
	h.publish(&events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: "survivor", Enforcement: "logging", Created: true, SpecHash: "h1"})
	if n := len(after.Calls()); n != 0 {
		t.Fatalf("afterInstall called %d times while the dispatcher was down", n)
	}
	startService(t, h.env())
	if _, ok := h.waitOutcome(events.PhaseAfterInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("afterInstall outcome is not TriggerDelivered")
	}
	if s := afterSaw(); len(s) != 1 || !s[0] {
		t.Errorf("afterInstall calls saw Application existing = %v, want exactly one call with it existing", s)
	}
}

// afterInstall is not delivered when argo-syncer updated (Created=false) an Application.
func TestAfterInstallNotOnUpdate(t *testing.T) {
	h := newHarness(t)
	startService(t, h.env())
	after := newReceiver(t)
	in := h.intent("updated", "h1", &events.Triggers{AfterInstall: &events.Trigger{Endpoint: after.URL()}})
	h.publish(in)
	h.publish(&events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: "updated", Enforcement: "logging", Created: false, SpecHash: "h1"})
	h.caughtUp()
	if n := len(after.Calls()); n != 0 {
		t.Errorf("afterInstall called %d times on an update", n)
	}
}

// A creation reported by an argo-syncer that carries intents (its event has the intent's
// sequence) and without an intent had no afterInstall trigger: the dispatcher reads no record for
// it. An event of an earlier argo-syncer, without the sequence, is still looked up, and its armed
// afterInstall delivered.
func TestCreationWithoutAfterInstallReadsNoRecord(t *testing.T) {
	h := newHarness(t)
	records := eventstest.CountBucketRequests(t, h.nats.URL(), events.BucketTriggers)
	startService(t, h.env())
	for i, cluster := range []string{"plain-1", "plain-2", "plain-3"} {
		in := h.intent(cluster, "h1", nil)
		h.publish(&events.InstallSucceeded{IntentID: in.ID(), IntentSequence: uint64(10 + i), Rule: in.Rule, Cluster: cluster,
			Enforcement: "logging", Created: true, SpecHash: "h1"})
	}
	h.caughtUp()
	if r, w := records.Reads(), records.Writes(); r != 0 || w != 0 {
		t.Errorf("three creations without afterInstall: %d record reads and %d writes, want none", r, w)
	}

	after := newReceiver(t)
	legacy := h.intent("legacy", "h1", &events.Triggers{AfterInstall: &events.Trigger{Endpoint: after.URL()}})
	h.publish(legacy)
	h.createApplication("legacy")
	h.publish(&events.InstallSucceeded{IntentID: legacy.ID(), Rule: legacy.Rule, Cluster: "legacy", Enforcement: "logging", Created: true, SpecHash: "h1"})
	if _, ok := h.waitOutcome(events.PhaseAfterInstall, legacy.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("the afterInstall armed by the intent was not delivered on an earlier argo-syncer's event")
	}
	if records.Reads() == 0 {
		t.Error("an earlier argo-syncer's creation was not looked up")
	}
}

// A pair's latest-intent marker costs one bucket request an intent: a new pair's is created
// outright, a known pair's next intent updates it at the revision the dispatcher wrote. A marker
// another writer moved meanwhile fails that update and is read again, and a newer intent there
// is kept.
func TestLatestIntentMarkerTakesOneRequest(t *testing.T) {
	h := newHarness(t)
	kv, err := h.js.KeyValue(context.Background(), events.BucketTriggers)
	if err != nil {
		t.Fatal(err)
	}
	records := eventstest.CountBucketRequests(t, h.nats.URL(), events.BucketTriggers)
	startService(t, h.env())
	marker := func(cluster string) latestIntent {
		t.Helper()
		li, _, err := (&recordStore{kv: kv}).latest(context.Background(), pairKey(h.intent(cluster, "", nil).Rule, events.ApplicationName(cluster, "logging")))
		if err != nil || li == nil {
			t.Fatalf("marker of %s: %v, %v", cluster, li, err)
		}
		return *li
	}
	var reads, writes int64 // the counts at the last check
	requests := func(what string, wantReads, wantWrites int64) {
		t.Helper()
		h.caughtUp()
		r, w := records.Reads()-reads, records.Writes()-writes
		if r != wantReads || w != wantWrites {
			t.Errorf("%s: %d reads and %d writes of the bucket, want %d and %d", what, r, w, wantReads, wantWrites)
		}
		reads, writes = records.Reads(), records.Writes()
	}

	for _, cluster := range []string{"new-1", "new-2", "new-3"} {
		h.publish(h.intent(cluster, "h1", nil))
	}
	requests("three new pairs", 0, 3)

	edit := h.intent("new-1", "h2", nil)
	seq := h.publish(edit)
	requests("a known pair's next intent", 0, 1)
	if got := marker("new-1"); got != (latestIntent{IntentID: edit.ID(), Sequence: seq}) {
		t.Errorf("marker after the edit = %+v, want the edit's id and sequence %d", got, seq)
	}
	requests("the test's own read", 1, 0)

	ahead := latestIntent{IntentID: "from-elsewhere", Sequence: 1 << 40}
	data, err := json.Marshal(ahead)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), pairKey(edit.Rule, events.ApplicationName("new-2", "logging")), data); err != nil {
		t.Fatal(err)
	}
	requests("another writer's marker", 0, 1)
	h.publish(h.intent("new-2", "h2", nil))
	requests("a pair whose marker another writer moved", 1, 1) // the failed update, one read
	if got := marker("new-2"); got != ahead {
		t.Errorf("marker moved ahead by another writer = %+v, want it kept: %+v", got, ahead)
	}
}

// An InstallSucceeded that reaches the dispatcher before its intent (a redelivered intent, handed
// back by a replica that lost its leadership, comes after what followed it) still delivers the
// afterInstall, from the intent the event carries, once; the late intent repeats nothing.
func TestAfterInstallWhenSucceededOvertakesIntent(t *testing.T) {
	h := newHarness(t)
	startService(t, h.env())
	after := newReceiver(t)
	in := h.intent("overtaken", "h1", &events.Triggers{AfterInstall: &events.Trigger{Endpoint: after.URL()}})
	h.createApplication("overtaken")
	h.publish(&events.InstallSucceeded{IntentID: in.ID(), IntentSequence: 7, Rule: in.Rule, Cluster: "overtaken",
		Enforcement: "logging", Created: true, SpecHash: "h1", Intent: in})
	delivered, ok := h.waitOutcome(events.PhaseAfterInstall, in.ID()).(*events.TriggerDelivered)
	if !ok {
		t.Fatal("afterInstall outcome is not TriggerDelivered")
	}
	if delivered.IntentSequence != 7 {
		t.Errorf("TriggerDelivered.intentSequence = %d, want the intent's, 7", delivered.IntentSequence)
	}
	h.publish(in)
	h.caughtUp()
	if n := len(after.Calls()); n != 1 {
		t.Errorf("afterInstall called %d times, want 1", n)
	}
	if body := bodyOf(t, after.Calls()[0]); body.Cluster.Name != "overtaken" {
		t.Errorf("afterInstall body names cluster %q, want overtaken", body.Cluster.Name)
	}
}

// A beforeInstall answering 400 fails at once. Under Ignore the outcome says so (argo-syncer
// installs anyway); under Fail it blocks the install until a later retry gets a 2xx, which
// publishes TriggerDelivered with the same delivery id.
func TestFailurePolicies(t *testing.T) {
	h := newHarness(t)
	var reject atomic.Bool
	reject.Store(true)
	rc := newReceiver(t, statusWhile(&reject, http.StatusBadRequest))
	startService(t, h.env("TRIGGER_BLOCKED_RETRY_INTERVAL", "200ms"))

	ignore := h.intent("ignore", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
	h.gated(ignore)
	f, ok := h.waitOutcome(events.PhaseBeforeInstall, ignore.ID()).(*events.TriggerFailed)
	if !ok || f.FailurePolicy != "Ignore" || f.StatusCode != http.StatusBadRequest || f.Attempts != 1 || !strings.Contains(f.Message, "client_error") {
		t.Fatalf("Ignore outcome = %+v, want TriggerFailed Ignore 400 after 1 attempt", f)
	}

	fail := h.intent("fail", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL(), FailurePolicy: "Fail"}})
	_, _, failGateSeq := h.gated(fail)
	ff, ok := h.waitOutcome(events.PhaseBeforeInstall, fail.ID()).(*events.TriggerFailed)
	if !ok || ff.FailurePolicy != "Fail" {
		t.Fatalf("Fail outcome = %+v, want TriggerFailed with Fail", ff)
	}
	time.Sleep(500 * time.Millisecond) // retries still get 400: the install stays blocked
	for _, e := range h.drain() {
		if d, ok := e.(*events.TriggerDelivered); ok {
			t.Fatalf("unexpected TriggerDelivered %+v while the receiver rejects", d)
		}
	}
	reject.Store(false)
	var delivered *events.TriggerDelivered
	for deadline := time.Now().Add(10 * time.Second); delivered == nil && time.Now().Before(deadline); {
		select {
		case e := <-h.outcomes:
			if d, ok := e.(*events.TriggerDelivered); ok && d.IntentID == fail.ID() {
				delivered = d
			}
		case <-time.After(100 * time.Millisecond):
		}
	}
	if delivered == nil {
		t.Fatal("a blocked Fail delivery was not released after the receiver recovered")
	}
	if delivered.DeliveryID != ff.DeliveryID {
		t.Errorf("released delivery id %q, want the blocked one %q", delivered.DeliveryID, ff.DeliveryID)
	}
	// Every retry of the blocked delivery is an attempt event of its own series, numbered on from
	// the first attempt; the last one is the success the outcome reports.
	atts := h.attempts(ff.DeliveryID)
	if len(atts) < 3 || atts[0].Series != fmt.Sprintf("event-%d-1", failGateSeq) || atts[0].Result != resultClientError || atts[0].WillRetry {
		t.Fatalf("attempts of the blocked delivery = %+v, want the first 400 and at least two retries", atts)
	}
	series := map[string]bool{}
	for i, a := range atts {
		if a.Attempt != i+1 {
			t.Errorf("attempt %d numbered %d", i+1, a.Attempt)
		}
		if i > 0 && (!strings.HasPrefix(a.Series, "retry-") || series[a.Series]) {
			t.Errorf("retry attempt %d in series %q, want a new retry-<revision> series", i+1, a.Series)
		}
		series[a.Series] = true
	}
	if last := atts[len(atts)-1]; last.Result != resultSuccess || last.Attempt != delivered.Attempts {
		t.Errorf("last attempt %+v, want the success numbered as the outcome's %d attempts", last.TriggerAttempted, delivered.Attempts)
	}
	// The Ignore failure is final: the blocked-delivery loop never retries it.
	ignored := 0
	for _, c := range rc.Calls() {
		if bodyOf(t, c).Cluster.Name == "ignore" {
			ignored++
		}
	}
	if ignored != 1 {
		t.Errorf("the Ignore delivery was called %d times, want 1", ignored)
	}
}

// drain returns the outcomes received so far without waiting.
func (h *harness) drain() []events.Event {
	var out []events.Event
	for {
		select {
		case e := <-h.outcomes:
			h.seen = append(h.seen, e)
			out = append(out, e)
		default:
			return out
		}
	}
}

// Deliveries are signed with the key of the Secret the trigger names; a missing Secret fails the
// delivery instead of sending it unsigned.
func TestSignedDelivery(t *testing.T) {
	h := newHarness(t)
	secret := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a 32 byte key for the receiver!!"))
	if err := h.kube.Client.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: h.ruleNS, Name: "webhook-key"},
		Data:       map[string][]byte{"key": []byte(secret)},
	}); err != nil {
		t.Fatal(err)
	}
	startService(t, h.env())
	rc := newReceiver(t)
	in := h.intent("signed", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL(), SigningSecret: "webhook-key"}})
	h.gated(in)
	if _, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("signed delivery not delivered")
	}
	call := rc.Calls()[0]
	if err := verifyStandardWebhook(secret, call.Header, call.Body, time.Now()); err != nil {
		t.Errorf("signature does not verify: %v", err)
	}
	if strings.Contains(string(call.Body), secret) {
		t.Error("the body contains the signing key")
	}

	missing := h.intent("unsigned", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL(), SigningSecret: "no-such-secret"}})
	h.gated(missing)
	f, ok := h.waitOutcome(events.PhaseBeforeInstall, missing.ID()).(*events.TriggerFailed)
	if !ok || !strings.Contains(f.Message, "not found") {
		t.Fatalf("outcome with a missing Secret = %+v, want TriggerFailed naming it", f)
	}
	if n := len(rc.Calls()); n != 1 {
		t.Errorf("receiver called %d times, want 1 (no unsigned call)", n)
	}
}

// A trigger without a timeout gets TRIGGER_DEFAULT_TIMEOUT; timeouts are retried up to
// TRIGGER_MAX_ATTEMPTS. A metadata-address endpoint is refused without a retry.
func TestTimeoutDefaultAndRefusedTarget(t *testing.T) {
	h := newHarness(t)
	startService(t, h.env("TRIGGER_DEFAULT_TIMEOUT", "200ms", "TRIGGER_MAX_ATTEMPTS", "2"))
	slow := newReceiver(t, sleepFor(2*time.Second))
	in := h.intent("slow", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: slow.URL()}})
	h.gated(in)
	f, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerFailed)
	if !ok || f.Attempts != 2 || !strings.Contains(f.Message, "no answer within 200ms") {
		t.Fatalf("outcome = %+v, want TriggerFailed after 2 timed-out attempts of 200ms", f)
	}

	// The trigger's own timeout wins over the default: 1 s lets a 500 ms receiver answer.
	patient := newReceiver(t, sleepFor(500*time.Millisecond))
	own := h.intent("patient", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: patient.URL(), TimeoutSeconds: 1}})
	h.gated(own)
	if d, ok := h.waitOutcome(events.PhaseBeforeInstall, own.ID()).(*events.TriggerDelivered); !ok || d.Attempts != 1 {
		t.Fatalf("outcome with timeout 1s = %+v, want TriggerDelivered after 1 attempt", d)
	}

	meta := h.intent("metadata", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "http://169.254.169.254/latest/meta-data/"}})
	h.gated(meta)
	r, ok := h.waitOutcome(events.PhaseBeforeInstall, meta.ID()).(*events.TriggerFailed)
	if !ok || r.Attempts != 1 || !strings.Contains(r.Message, "refused") {
		t.Fatalf("outcome = %+v, want TriggerFailed refused after 1 attempt", r)
	}
}

// A dispatcher that died after recording a delivery but before publishing its outcome leaves a
// final record and an unacknowledged InstallGated: the next instance publishes the recorded
// outcome (with the intent's sequence) and does not call the webhook again.
func TestCrashBetweenRecordAndPublish(t *testing.T) {
	h := newHarness(t)
	rc := newReceiver(t)
	in := h.intent("crashed", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
	_, seq, _ := h.gated(in)
	r, err := newRecord(in, in.ID(), seq, events.PhaseBeforeInstall, *in.Triggers.BeforeInstall)
	if err != nil {
		t.Fatal(err)
	}
	r.State, r.StatusCode, r.Attempts = stateDelivered, http.StatusAccepted, 1
	kv, err := h.js.KeyValue(context.Background(), events.BucketTriggers)
	if err != nil {
		t.Fatal(err)
	}
	if err := (&recordStore{kv: kv}).put(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	startService(t, h.env())
	out, ok := h.waitOutcome(events.PhaseBeforeInstall, in.ID()).(*events.TriggerDelivered)
	if !ok || out.StatusCode != http.StatusAccepted || out.IntentSequence != seq || out.DeliveryID != r.DeliveryID {
		t.Fatalf("outcome = %+v, want the recorded delivery (202, sequence %d)", out, seq)
	}
	h.caughtUp()
	if n := len(rc.Calls()); n != 0 {
		t.Errorf("webhook called %d times for a recorded delivery", n)
	}
}

// argo-syncer's side through its real durable consumer: it crashes after receiving the intent
// and TriggerDelivered (nothing acknowledged), gets both again after its restart, creates the
// Application of the intent it holds and reports it. Nothing is skipped and beforeInstall is
// not called again.
func TestSyncerRestartBetweenHookAndInstall(t *testing.T) {
	h := newHarness(t)
	startService(t, h.env())
	before, after := newReceiver(t), newReceiver(t)
	in := h.intent("syncer", "h1", &events.Triggers{
		BeforeInstall: &events.Trigger{Endpoint: before.URL()}, AfterInstall: &events.Trigger{Endpoint: after.URL()},
	})
	h.gated(in)
	h.waitOutcome(events.PhaseBeforeInstall, in.ID())

	ctx := context.Background()
	syncer, err := h.js.Consumer(ctx, events.StreamName, events.ConsumerArgoSyncer)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func() []jetstream.Msg {
		t.Helper()
		batch, err := syncer.Fetch(3, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		// The intent, then TriggerDelivered, whatever the order of redelivery; InstallGated (its
		// own) and the attempt events are not on the syncer's filter.
		rank := func(m jetstream.Msg) int {
			if strings.HasPrefix(m.Subject(), "enforcement.intent.") {
				return 0
			}
			return 1
		}
		sort.SliceStable(msgs, func(i, j int) bool { return rank(msgs[i]) < rank(msgs[j]) })
		if len(msgs) != 2 || rank(msgs[0]) != 0 || !strings.HasPrefix(msgs[1].Subject(), "enforcement.trigger.delivered.") {
			subjects := make([]string, len(msgs))
			for i, m := range msgs {
				subjects[i] = m.Subject()
			}
			t.Fatalf("argo-syncer consumer got %v, want the intent and TriggerDelivered only", subjects)
		}
		return msgs
	}
	for _, m := range fetch() { // the syncer "crashes": the messages go back unacknowledged
		_ = m.Nak()
	}
	msgs := fetch()
	outcome, _, err := events.DecodeAs[*events.TriggerDelivered](msgs[1].Subject(), msgs[1].Headers(), msgs[1].Data())
	if err != nil {
		t.Fatalf("second message is not TriggerDelivered: %v", err)
	}
	intent, meta, err := events.DecodeAs[*events.InstallIntent](msgs[0].Subject(), msgs[0].Headers(), msgs[0].Data())
	if err != nil || meta.ID != outcome.IntentID {
		t.Fatalf("first message is %v (id %q), want the intent %q", err, meta.ID, outcome.IntentID)
	}
	h.createApplication(intent.Cluster.Name)
	h.publish(&events.InstallSucceeded{IntentID: meta.ID, Rule: intent.Rule, Cluster: intent.Cluster.Name,
		Enforcement: intent.Enforcement.Name, Created: true, SpecHash: intent.SpecHash})
	for _, m := range msgs {
		_ = m.Ack()
	}
	if _, ok := h.waitOutcome(events.PhaseAfterInstall, in.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("afterInstall not delivered")
	}
	h.caughtUp()
	if b, a := len(before.Calls()), len(after.Calls()); b != 1 || a != 1 {
		t.Errorf("beforeInstall called %d times, afterInstall %d; want 1 and 1", b, a)
	}
}

// A blocked beforeInstall (Fail) is not retried once a newer intent for the same Application
// arrived: argo-syncer no longer waits for it, so calling the webhook again would be useless.
func TestBlockedDeliverySupersededByNewerIntent(t *testing.T) {
	h := newHarness(t)
	var reject atomic.Bool
	reject.Store(true)
	rc := newReceiver(t, statusWhile(&reject, http.StatusInternalServerError))
	startService(t, h.env("TRIGGER_BLOCKED_RETRY_INTERVAL", "100ms", "TRIGGER_MAX_ATTEMPTS", "1"))
	old := h.intent("superseded", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL(), FailurePolicy: "Fail"}})
	h.gated(old)
	failed, ok := h.waitOutcome(events.PhaseBeforeInstall, old.ID()).(*events.TriggerFailed)
	if !ok {
		t.Fatal("first outcome is not TriggerFailed")
	}
	h.publish(h.intent("superseded", "h2", nil)) // the rule changed: no trigger any more
	h.caughtUp()
	kv, err := h.js.KeyValue(context.Background(), events.BucketTriggers)
	if err != nil {
		t.Fatal(err)
	}
	store := &recordStore{kv: kv}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, _, err := store.get(context.Background(), failed.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State == stateSuperseded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("record state %s, want %s", r.State, stateSuperseded)
		}
		time.Sleep(50 * time.Millisecond)
	}
	reject.Store(false)
	calls := len(rc.Calls())
	time.Sleep(500 * time.Millisecond) // five retry intervals
	for _, e := range h.drain() {
		if d, ok := e.(*events.TriggerDelivered); ok && d.IntentID == old.ID() {
			t.Fatalf("superseded delivery released: %+v", d)
		}
	}
	if n := len(rc.Calls()); n != calls {
		t.Errorf("receiver called %d more times after the delivery was superseded", n-calls)
	}
}

// TestBlockedDeliveryOfACollidingNameIsNotSuperseded: two clusters of one rule whose
// Application names were crafted to collide under the 32-bit suffix of earlier versions
// (eventstest) are two pairs: a newer intent of one does not supersede the other's blocked
// beforeInstall, which is delivered once its webhook answers.
func TestBlockedDeliveryOfACollidingNameIsNotSuperseded(t *testing.T) {
	h := newHarness(t)
	var reject atomic.Bool
	reject.Store(true)
	rc := newReceiver(t, statusWhile(&reject, http.StatusInternalServerError))
	startService(t, h.env("TRIGGER_BLOCKED_RETRY_INTERVAL", "100ms", "TRIGGER_MAX_ATTEMPTS", "1"))
	blocked := h.intent(eventstest.AppCollidingA, "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL(), FailurePolicy: "Fail"}})
	blocked.Enforcement.Name = eventstest.AppCollidingEnforcement
	h.gated(blocked)
	if _, ok := h.waitOutcome(events.PhaseBeforeInstall, blocked.ID()).(*events.TriggerFailed); !ok {
		t.Fatal("first outcome is not TriggerFailed")
	}
	other := h.intent(eventstest.AppCollidingB, "h2", nil)
	other.Enforcement.Name = eventstest.AppCollidingEnforcement
	h.publish(other)
	h.caughtUp()
	reject.Store(false)
	timeout := time.After(15 * time.Second)
	for done := false; !done; {
		select {
		case e := <-h.outcomes:
			d, ok := e.(*events.TriggerDelivered)
			done = ok && d.IntentID == blocked.ID()
		case <-timeout:
			t.Fatal("the blocked beforeInstall was not delivered within 15s: another pair's intent superseded it")
		}
	}
}

// The dispatcher rides out a restart of the NATS server: deliveries resume afterwards and the
// service is ready again.
func TestNATSRestart(t *testing.T) {
	h := newHarness(t)
	svc := startService(t, h.env())
	rc := newReceiver(t)
	first := h.intent("nats-a", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
	h.gated(first)
	h.waitOutcome(events.PhaseBeforeInstall, first.ID())

	h.nats.Restart(t)
	second := h.intent("nats-b", "h1", &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: rc.URL()}})
	deadline := time.Now().Add(15 * time.Second)
	for { // the test's own connection reconnects too
		if _, err := h.pub.Publish(context.Background(), second); err == nil {
			h.publish(h.gate(second, 0))
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("publish after the NATS restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok := h.waitOutcome(events.PhaseBeforeInstall, second.ID()).(*events.TriggerDelivered); !ok {
		t.Fatal("no TriggerDelivered after the NATS restart")
	}
	resp, err := http.Get("http://" + svc.health + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/readyz = %d after the NATS restart, want 200", resp.StatusCode)
	}
	if n := len(rc.Calls()); n != 2 {
		t.Errorf("receiver called %d times, want 2", n)
	}
}
