package events

// The contract suite: what every service relies on from the bus, checked on a real nats-server
// with JetStream on disk. If one of these fails, at-least-once delivery, ordering or dead
// letters are broken for everyone.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// appeared is a valid event for cluster key with the given revision.
func appeared(key string, rev uint64) *ClusterAppeared {
	return &ClusterAppeared{Revision: rev, Cluster: Cluster{Source: testSource, Key: key, Name: key, URL: "https://" + key, Eligible: true}}
}

// recorder is a handler that records what it saw and answers with a programmable function.
type recorder struct {
	mu     sync.Mutex
	seen   []string // "key@rev#delivery"
	answer func(e *ClusterAppeared, m Meta) error
	signal chan string
}

func newRecorder(answer func(e *ClusterAppeared, m Meta) error) *recorder {
	return &recorder{answer: answer, signal: make(chan string, 1024)}
}

func (r *recorder) handle(_ context.Context, e Event, m Meta) error {
	a := e.(*ClusterAppeared)
	entry := fmt.Sprintf("%s@%d#%d", a.Cluster.Key, a.Revision, m.NumDelivered)
	var err error
	if r.answer != nil {
		err = r.answer(a, m)
	}
	r.mu.Lock()
	r.seen = append(r.seen, entry)
	r.mu.Unlock()
	if err != nil {
		entry += " failed"
	}
	r.signal <- entry
	return err
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// waitFor waits until the handler reported n outcomes.
func (r *recorder) waitFor(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	deadline := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case s := <-r.signal:
			got = append(got, s)
		case <-deadline:
			t.Fatalf("waited for %d handler calls, got %d: %v", n, len(got), got)
		}
	}
	return got
}

func consume(t *testing.T, js jetstream.JetStream, h Handler, o ConsumerOptions) *Consumer {
	t.Helper()
	if o.Name == "" {
		o.Name = ConsumerRuleEngine
	}
	if o.Backoff == nil {
		o.Backoff = func(int) time.Duration { return 20 * time.Millisecond }
	}
	c, err := Consume(context.Background(), js, h, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

func publish(t *testing.T, p *Publisher, evs ...Event) {
	t.Helper()
	if err := p.PublishAll(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
}

func TestContractRepublishIsDeduplicated(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	p := NewPublisher(js, "/test")
	ctx := context.Background()
	first, err := p.Publish(ctx, appeared("c1", 1))
	if err != nil || first.Duplicate {
		t.Fatalf("first publish: %+v, %v", first, err)
	}
	second, err := p.Publish(ctx, appeared("c1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if !second.Duplicate || second.Sequence != first.Sequence {
		t.Fatalf("republish stored again: %+v (first %+v)", second, first)
	}
	publish(t, p, appeared("c1", 1), appeared("c1", 1)) // async republish too
	reappeared, err := p.Publish(ctx, appeared("c1", 2))
	if err != nil || reappeared.Duplicate {
		t.Fatalf("a new revision must not be deduplicated: %+v, %v", reappeared, err)
	}
	s, _ := js.Stream(ctx, StreamName)
	info, _ := s.Info(ctx)
	if info.State.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2", info.State.Msgs)
	}
}

// TestContractLargeBatchOutrunsThePendingLimit: a batch larger than the connection's limit of
// unacknowledged async publishes (here 8, so the limit is reached at once) is stored whole,
// because PublishAll waits for the outstanding acks instead of failing the batch.
func TestContractLargeBatchOutrunsThePendingLimit(t *testing.T) {
	srv := startNATS(t, "")
	connect(t, srv, TopologyOptions{}) // applies the topology
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8), jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	p := NewPublisher(js, "/test")
	p.asyncOpts = []jetstream.PublishOpt{jetstream.WithStallWait(time.Microsecond)}
	if err := p.PublishAll(context.Background(), benchEvents(n, 100)); err != nil {
		t.Fatalf("PublishAll of %d events with 8 pending at most: %v", n, err)
	}
	s, _ := js.Stream(context.Background(), StreamName)
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != n {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, n)
	}
}

// crashWithEventInFlight publishes the appeared event c1@1 on a new server, lets a first
// instance take it and die (its connection closed) before acknowledging it, and returns the
// JetStream client of a second instance on the same server.
func crashWithEventInFlight(t *testing.T, opts TopologyOptions) jetstream.JetStream {
	t.Helper()
	srv := startNATS(t, "")
	nc1, js1 := connect(t, srv, opts)
	publish(t, NewPublisher(js1, "/test"), appeared("c1", 1))
	took := make(chan struct{})
	block := make(chan struct{})
	consume(t, js1, func(context.Context, Event, Meta) error { close(took); <-block; return nil }, ConsumerOptions{})
	t.Cleanup(func() { close(block) }) // before the first consumer stops (cleanups run last first)
	<-took
	nc1.Close()
	_, js2 := connect(t, srv, opts)
	return js2
}

func TestContractUnackedEventIsRedeliveredAfterTheConsumerDies(t *testing.T) {
	js2 := crashWithEventInFlight(t, TopologyOptions{AckWait: time.Second})
	r := newRecorder(nil)
	consume(t, js2, r.handle, ConsumerOptions{})
	got := r.waitFor(t, 1)
	if got[0] != "c1@1#2" {
		t.Fatalf("second instance saw %v, want the event on its second delivery", got)
	}
}

func TestContractPermanentErrorBecomesADeadLetterWithReasonAndEvent(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	ev := appeared("c1", 1)
	publish(t, NewPublisher(js, "/test"), ev)
	r := newRecorder(func(*ClusterAppeared, Meta) error { return Permanent(errors.New("spec.repo is empty")) })
	consume(t, js, r.handle, ConsumerOptions{})
	r.waitFor(t, 1)

	dls := waitDeadLetters(t, js, ConsumerRuleEngine, 1)
	dl := dls[0]
	if !strings.Contains(dl.Reason, "spec.repo is empty") || dl.EventID != ev.ID() || dl.OriginalSubject != Subject(ev) || dl.Attempts != 1 {
		t.Fatalf("dead letter %+v", dl)
	}
	back, _, err := DecodeAs[*ClusterAppeared](dl.OriginalSubject, dl.Header, dl.Data)
	if err != nil || back.Cluster.Key != "c1" {
		t.Fatalf("dead letter does not keep the original event: %v %+v", err, back)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(r.snapshot()); n != 1 {
		t.Fatalf("handler called %d times for a permanent error, want 1", n)
	}
}

func TestContractExhaustedRetriesBecomeADeadLetter(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("c1", 1))
	r := newRecorder(func(*ClusterAppeared, Meta) error { return errors.New("argo cd unavailable") })
	consume(t, js, r.handle, ConsumerOptions{MaxAttempts: 3})
	r.waitFor(t, 3)
	dl := waitDeadLetters(t, js, ConsumerRuleEngine, 1)[0]
	if !strings.Contains(dl.Reason, "gave up after 3 attempts: argo cd unavailable") || dl.Attempts != 3 {
		t.Fatalf("dead letter %+v", dl)
	}
}

func TestContractExhaustedDeliveriesAcrossCrashesBecomeADeadLetter(t *testing.T) {
	js2 := crashWithEventInFlight(t, TopologyOptions{AckWait: 500 * time.Millisecond, MaxDeliver: 2}) // crash on delivery 1
	r := newRecorder(func(*ClusterAppeared, Meta) error { return errors.New("still failing") })
	consume(t, js2, r.handle, ConsumerOptions{MaxAttempts: 10})
	r.waitFor(t, 1) // delivery 2 is the server's last: the consumer must not retry in the dark
	dl := waitDeadLetters(t, js2, ConsumerRuleEngine, 1)[0]
	if !strings.Contains(dl.Reason, "still failing") {
		t.Fatalf("dead letter %+v", dl)
	}
}

func TestContractInvalidEventIsDeadLetteredWhileOthersCarryOn(t *testing.T) {
	nc, js := connect(t, startNATS(t, ""), TopologyOptions{})
	bad := nats.NewMsg("enforcement.cluster.appeared.rancher.x.c0")
	bad.Header.Set(HeaderSpecVersion, "1.0")
	bad.Header.Set(HeaderID, "garbage-1")
	bad.Header.Set(HeaderType, "io.enforcement.cluster.appeared.v1")
	bad.Data = []byte(`{"cluster": "not an object"}`)
	if _, err := js.PublishMsg(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	_ = nc
	publish(t, NewPublisher(js, "/test"), appeared("c1", 1), appeared("c2", 1))
	r := newRecorder(nil)
	consume(t, js, r.handle, ConsumerOptions{})
	got := r.waitFor(t, 2)
	if strings.Join(got, ",") != "c1@1#1,c2@1#1" && strings.Join(got, ",") != "c2@1#1,c1@1#1" {
		t.Fatalf("valid events handled: %v", got)
	}
	dl := waitDeadLetters(t, js, ConsumerRuleEngine, 1)[0]
	if dl.EventID != "garbage-1" || !strings.Contains(dl.Reason, "invalid event") {
		t.Fatalf("dead letter %+v", dl)
	}
}

// TestContractPanicBecomesADeadLetterWhileOthersCarryOn: a handler that panics on one event does
// not end the process; that event becomes a dead letter whose reason is the panic value, and the
// other events, a later one of the same key included, are still handled.
func TestContractPanicBecomesADeadLetterWhileOthersCarryOn(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	poison := appeared("a", 1)
	publish(t, NewPublisher(js, "/test"), poison, appeared("a", 2), appeared("b", 1))
	r := newRecorder(func(e *ClusterAppeared, _ Meta) error {
		if e.Cluster.Key == "a" && e.Revision == 1 {
			panic("template cache is nil")
		}
		return nil
	})
	reg := prometheus.NewRegistry()
	var log lockedBuffer
	consume(t, js, r.handle, ConsumerOptions{Metrics: NewMetrics(reg, "test"), Logger: slog.New(slog.NewJSONHandler(&log, nil))})

	dl := waitDeadLetters(t, js, ConsumerRuleEngine, 1)[0]
	if dl.EventID != poison.ID() || !strings.Contains(dl.Reason, "panic") || !strings.Contains(dl.Reason, "template cache is nil") || dl.Attempts != 1 {
		t.Fatalf("dead letter %+v, want the panicking event with the panic value as reason", dl)
	}
	if strings.Contains(dl.Reason, "goroutine") {
		t.Fatalf("dead letter reason carries the stack: %q", dl.Reason)
	}
	got := r.waitFor(t, 2) // the panicking call never reports, the two others do
	if strings.Join(got, ",") != "a@2#1,b@1#1" && strings.Join(got, ",") != "b@1#1,a@2#1" {
		t.Fatalf("handled after the panic: %v, want a@2 (same key, not blocked) and b@1", got)
	}
	if l := log.String(); !strings.Contains(l, "Recovered panic in handler") || !strings.Contains(l, "goroutine") {
		t.Fatalf("the panic and its stack are not logged: %s", l)
	}
	if n := counterValue(t, reg, "enforcement_test_events_handled_total", poison.Type(), "panicked"); n != 1 {
		t.Fatalf("outcome panicked counted %v times, want 1", n)
	}
	if n := counterValue(t, reg, "enforcement_test_events_handled_total", poison.Type(), "dead_lettered"); n != 1 {
		t.Fatalf("outcome dead_lettered counted %v times, want 1", n)
	}
}

// lockedBuffer is a log destination the consumer's goroutines may write to while a test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// counterValue reads the counter name{type, outcome} from reg; 0 when it has no such series.
func counterValue(t *testing.T, reg *prometheus.Registry, name, eventType, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == eventType && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestContractPerKeyOrderHoldsWhileARetryWaits(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	failures := 2
	var mu sync.Mutex
	r := newRecorder(func(e *ClusterAppeared, _ Meta) error {
		mu.Lock()
		defer mu.Unlock()
		if e.Cluster.Key == "a" && e.Revision == 1 && failures > 0 {
			failures--
			return errors.New("transient")
		}
		return nil
	})
	publish(t, NewPublisher(js, "/test"), appeared("a", 1), appeared("a", 2), appeared("a", 3), appeared("b", 1))
	consume(t, js, r.handle, ConsumerOptions{Backoff: func(int) time.Duration { return 300 * time.Millisecond }})
	got := r.waitFor(t, 6)

	var a []string
	bAt, aDoneAt := -1, -1
	for i, s := range got {
		switch {
		case strings.HasPrefix(s, "a@"):
			a = append(a, s)
			if s == "a@1#1" && aDoneAt < 0 && !strings.HasSuffix(s, "failed") {
				aDoneAt = i
			}
		case strings.HasPrefix(s, "b@"):
			bAt = i
		}
	}
	want := []string{"a@1#1 failed", "a@1#1 failed", "a@1#1", "a@2#1", "a@3#1"}
	if strings.Join(a, ",") != strings.Join(want, ",") {
		t.Fatalf("key a handled as %v, want %v (a later event overtook a retry)", a, want)
	}
	if bAt > aDoneAt {
		t.Fatalf("key b waited for key a's retries: %v", got)
	}
}

// With a single slot, neither a message waiting for its retry nor a handler waiting in Idle holds
// up the other keys: key b, published while key a waits for its retry and key c idles, is
// handled at once, and key a's order still holds.
func TestContractWaitingHoldsNoSlot(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	const wait = 3 * time.Second
	var mu sync.Mutex
	failed, idled := false, false
	waiting := make(chan string, 2)
	r := newRecorder(nil)
	handler := func(ctx context.Context, e Event, m Meta) error {
		a := e.(*ClusterAppeared)
		mu.Lock()
		first := a.Cluster.Key == "a" && a.Revision == 1 && !failed
		idle := a.Cluster.Key == "c" && !idled
		failed, idled = failed || first, idled || idle
		mu.Unlock()
		if first {
			waiting <- "a"
			return errors.New("transient") // retried in place after wait
		}
		if idle {
			Idle(ctx, func() { waiting <- "c"; time.Sleep(wait) }) // the handler's own wait
		}
		return r.handle(ctx, e, m)
	}
	pub := NewPublisher(js, "/test")
	publish(t, pub, appeared("a", 1), appeared("c", 1))
	consume(t, js, handler, ConsumerOptions{Concurrency: 1, Backoff: func(int) time.Duration { return wait }})
	for range 2 {
		select {
		case <-waiting:
		case <-time.After(wait / 2):
			t.Fatal("a and c did not both start waiting at once: the first one's wait held the only slot")
		}
	}
	start := time.Now()
	publish(t, pub, appeared("a", 2), appeared("b", 1))
	if got := r.waitFor(t, 1); got[0] != "b@1#1" || time.Since(start) > wait/2 {
		t.Fatalf("first handled %v after %s; want b at once, while a waits for its retry and c idles", got, time.Since(start))
	}
	got := r.waitFor(t, 3)
	var a []string
	for _, s := range got {
		if strings.HasPrefix(s, "a@") {
			a = append(a, s)
		}
	}
	if strings.Join(a, ",") != "a@1#1,a@2#1" {
		t.Errorf("key a handled as %v, want a@1 then a@2", a)
	}
}

// stopWhileFirstInFlight consumes as the rule engine with a handler that takes hold over the
// first revision, and stops the consumer while that handler runs, once it holds all held
// messages; it reports whether the handler had finished when Stop returned.
func stopWhileFirstInFlight(t *testing.T, js jetstream.JetStream, hold time.Duration, held int) (finished bool) {
	t.Helper()
	started := make(chan struct{})
	var done atomic.Bool
	c, err := Consume(context.Background(), js, func(_ context.Context, e Event, _ Meta) error {
		if e.(*ClusterAppeared).Revision == 1 {
			close(started)
			time.Sleep(hold)
			done.Store(true)
		}
		return nil
	}, ConsumerOptions{Name: ConsumerRuleEngine})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	waitHeld(t, c, held)
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	return done.Load()
}

// waitHeld waits until the consumer holds n messages, in work or queued. A message the server
// is still sending when the pull ends never reaches the consumer: the server queues it for
// redelivery at once, ahead of those Stop hands back (see Consumer.Stop), and the tests of the
// hand-back's order leave that race out.
func waitHeld(t *testing.T, c *Consumer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		held := 0
		for _, q := range c.queues {
			held += q.len()
		}
		c.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer holds %d messages, want %d", held, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestContractStopDrainsInFlightWorkAndHandsBackTheRest(t *testing.T) {
	srv := startNATS(t, "")
	_, js := connect(t, srv, TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("a", 1), appeared("a", 2), appeared("a", 3))
	if !stopWhileFirstInFlight(t, js, 400*time.Millisecond, 3) {
		t.Fatal("Stop returned before the in-flight handler finished")
	}

	// The next instance gets exactly what was not done, in order.
	_, js2 := connect(t, srv, TopologyOptions{})
	r := newRecorder(nil)
	consume(t, js2, r.handle, ConsumerOptions{})
	if got := r.waitFor(t, 2); got[0] != "a@2#2" || got[1] != "a@3#2" {
		t.Fatalf("after restart: %v, want a@2 and a@3 handed back in order", got)
	}
	select {
	case extra := <-r.signal:
		t.Fatalf("a finished event came back: %s", extra)
	case <-time.After(300 * time.Millisecond):
	}
}

// TestContractHandedBackMessagesKeepTheirOrderForALateSuccessor: an instance stops with seven
// messages of one key queued, and the next one starts only after their hand-back delay has
// passed. Until the server drops the stopped instance's pull request, each attempt to deliver
// there puts the key's first message back at the end of the redelivery queue: the successor got
// a@3 … a@8 and then a@2, in every run, before Stop had the server drop it (forgetPulls).
func TestContractHandedBackMessagesKeepTheirOrderForALateSuccessor(t *testing.T) {
	srv := startNATS(t, "")
	_, js := connect(t, srv, TopologyOptions{})
	var evs []Event
	for rev := uint64(1); rev <= 8; rev++ {
		evs = append(evs, appeared("a", rev))
	}
	publish(t, NewPublisher(js, "/test"), evs...)
	stopWhileFirstInFlight(t, js, 300*time.Millisecond, 8)
	time.Sleep(3 * handBackDelay) // the successor starts late: the delay has passed

	_, js2 := connect(t, srv, TopologyOptions{})
	r := newRecorder(nil)
	consume(t, js2, r.handle, ConsumerOptions{})
	got := r.waitFor(t, 7)
	for i, entry := range got {
		if want := fmt.Sprintf("a@%d#2", i+2); entry != want {
			t.Fatalf("after a late restart: %v, want a@2 … a@8, each handed back once, in order", got)
		}
	}
}

// TestContractHandedBackMessagesComeBeforeNewOnes: an instance stops holding a@1 in flight and
// a@2 queued behind it, and a@3 arrives after it stopped pulling. The next instance, started at
// once, handles a@2 before a@3, although a@3 is new to the server and a@2 waits out its
// hand-back delay.
func TestContractHandedBackMessagesComeBeforeNewOnes(t *testing.T) {
	srv := startNATS(t, "")
	_, js := connect(t, srv, TopologyOptions{})
	pub := NewPublisher(js, "/test")
	publish(t, pub, appeared("a", 1), appeared("a", 2))
	started, release := make(chan struct{}), make(chan struct{})
	c, err := Consume(context.Background(), js, func(_ context.Context, e Event, _ Meta) error {
		if e.(*ClusterAppeared).Revision == 1 {
			close(started)
			<-release
		}
		return nil
	}, ConsumerOptions{Name: ConsumerRuleEngine})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	waitHeld(t, c, 2)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Stop(context.Background()) }()
	time.Sleep(200 * time.Millisecond) // Stop ends the pulling first
	publish(t, pub, appeared("a", 3))
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}

	_, js2 := connect(t, srv, TopologyOptions{})
	r := newRecorder(nil)
	consume(t, js2, r.handle, ConsumerOptions{})
	if got := r.waitFor(t, 2); got[0] != "a@2#2" || got[1] != "a@3#1" {
		t.Fatalf("after restart: %v, want a@2 (handed back) before a@3 (new)", got)
	}
}

func TestContractDeadLetterCanBeReplayed(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	publish(t, NewPublisher(js, "/test"), appeared("c1", 1))
	fixed := false
	var mu sync.Mutex
	r := newRecorder(func(*ClusterAppeared, Meta) error {
		mu.Lock()
		defer mu.Unlock()
		if !fixed {
			return Permanent(errors.New("secret rancher not found"))
		}
		return nil
	})
	consume(t, js, r.handle, ConsumerOptions{})
	r.waitFor(t, 1)
	dl := waitDeadLetters(t, js, ConsumerRuleEngine, 1)[0]
	mu.Lock()
	fixed = true
	mu.Unlock()
	if _, err := ReplayDeadLetter(context.Background(), js, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	if got := r.waitFor(t, 1); got[0] != "c1@1#1" {
		t.Fatalf("replayed event handled as %v", got)
	}
	if _, err := ReplayDeadLetter(context.Background(), js, 1); err == nil {
		t.Fatal("replaying a sequence that is not a dead letter succeeded")
	}
}

func TestContractTopologyApplyIsIdempotent(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	ctx := context.Background()
	publish(t, NewPublisher(js, "/test"), appeared("c1", 1))
	for i := 0; i < 2; i++ {
		if err := DefaultTopology(TopologyOptions{}).Apply(ctx, js); err != nil {
			t.Fatalf("apply #%d: %v", i+2, err)
		}
	}
	s, err := js.Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.State.Msgs != 1 || info.Config.Duplicates != 20*time.Minute || info.Config.Storage != jetstream.FileStorage {
		t.Fatalf("stream after re-apply: %d msgs, config %+v", info.State.Msgs, info.Config)
	}
	names := s.ConsumerNames(ctx)
	var n int
	for range names.Name() {
		n++
	}
	if n != len(DefaultTopology(TopologyOptions{}).Consumers) {
		t.Fatalf("%d consumers after re-apply", n)
	}
	for _, b := range DefaultTopology(TopologyOptions{}).Buckets {
		if _, err := js.KeyValue(ctx, b.Bucket); err != nil {
			t.Errorf("bucket %s: %v", b.Bucket, err)
		}
	}
}

func waitDeadLetters(t *testing.T, js jetstream.JetStream, consumer string, n int) []DeadLetter {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		dls, err := ListDeadLetters(context.Background(), js, consumer)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) >= n {
			return dls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, want %d", len(dls), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
