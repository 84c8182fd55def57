package main

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// The event sink publishes one event per transition: not again while the writer has not acted,
// not again while the writer works through a backlog of earlier events, but again when someone
// else wrote the claim. The claim writer is played by the test, to hold it back at will.
func TestEventSinkPublishesOncePerTransition(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "sink")
	n := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, n.URL())
	ctx := t.Context()
	claim := c.name("sink-claim")
	c.createClaim(claim, events.Compliant)
	m := newMetrics(prometheus.NewRegistry())
	store := newClaimStore(c.dyn, claim)
	sink := &eventSink{
		cfg:    config{ClusterName: "sink", Namespace: c.ns, ClaimName: claim},
		claims: store, publisher: events.NewPublisher(js, "/test"), metrics: m,
		logger: slog.New(slog.NewTextHandler(io.Discard, nil)), now: time.Now,
	}
	decideAndApply := func(value string, wantPublished float64) {
		t.Helper()
		st, err := store.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sink.apply(ctx, decision{Observed: value, Value: value}, observation{Value: value}, st); err != nil {
			t.Fatal(err)
		}
		if got := testutil.ToFloat64(m.published.WithLabelValues("io.enforcement.compliance.changed.v1")); got != wantPublished {
			t.Fatalf("after deciding %s: %v events published, want %v", value, got, wantPublished)
		}
	}
	writerApplies := func(p pendingEvent) {
		t.Helper()
		if _, err := store.apply(ctx, claimChange{Value: p.value, Annotations: map[string]*string{annotationEvent: ptr(p.id)}}); err != nil {
			t.Fatal(err)
		}
	}

	decideAndApply(events.NonCompliant, 1)
	decideAndApply(events.NonCompliant, 1) // nothing happened to the claim: still on its way
	decideAndApply(events.Empty, 2)
	writerApplies(sink.pending[0])       // the writer catches up on the first event only
	decideAndApply(events.Empty, 2)      // the second is still on its way
	c.editClaim(claim, events.Compliant) // a person
	decideAndApply(events.Empty, 3)      // put back
	writerApplies(sink.pending[len(sink.pending)-1])
	decideAndApply(events.Empty, 3)
	if len(sink.pending) != 0 {
		t.Fatalf("pending %v after the claim took the decided value", sink.pending)
	}
}
