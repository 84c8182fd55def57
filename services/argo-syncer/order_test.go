package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// consumeBreaking starts the argo-syncer consumer with fast retries and two attempts, in
// front of which the handler fails every delivery of the event with id broken (as an
// argo-syncer that cannot reach its API server would), so that it is dead-lettered, until the
// returned repair is called.
func (h *harness) consumeBreaking(broken string) (repair func()) {
	h.t.Helper()
	var repaired atomic.Bool
	handle := func(ctx context.Context, e events.Event, m events.Meta) error {
		if e.ID() == broken && !repaired.Load() {
			return errors.New("kubernetes API unavailable")
		}
		return h.handler.Handle(ctx, e, m)
	}
	h.consumeWith(handle, 2)
	return func() { repaired.Store(true) }
}

// deadLetter waits for the argo-syncer dead letter of the event with id and returns it.
func (h *harness) deadLetter(id string) events.DeadLetter {
	h.t.Helper()
	var found events.DeadLetter
	testenv.EventuallyTrue(h.t, 20*time.Second, "dead letter of "+id, func() bool {
		dls, err := events.ListDeadLetters(context.Background(), h.js, events.ConsumerArgoSyncer)
		if err != nil {
			h.t.Fatal(err)
		}
		for _, dl := range dls {
			if dl.EventID == id {
				found = dl
				return true
			}
		}
		return false
	})
	return found
}

// withMetrics gives the harness's handler metrics on a registry of its own.
func (h *harness) withMetrics() *Metrics {
	m := NewMetrics(prometheus.NewRegistry())
	h.handler.metrics = m
	return m
}

// install → uninstall (which fails and is dead-lettered) → reinstall → the operator replays the
// old uninstall: the replay is older than the reinstall, so the Application stays, nothing is
// written and no UninstallDone is published; the skip is counted.
func TestReplayedUninstallDoesNotUndoReinstall(t *testing.T) {
	h := newHarness(t)
	metrics := h.withMetrics()
	in := h.installIntent("baseline", "c1", "agent")
	un := uninstallIntent(in, events.UninstallNoLongerMatches)
	un.Cluster.Revision = 2
	repair := h.consumeBreaking(un.ID())
	h.publish(in)
	h.outcome(succeeded(in.ID()))
	h.publish(un)
	dl := h.deadLetter(un.ID())

	re := h.installIntent("baseline", "c1", "agent")
	re.Cluster.Revision = 3
	re.SpecHash = "h2"
	h.publish(re)
	h.outcome(succeeded(re.ID()))

	repair()
	mark := h.log.mark()
	if _, err := events.ReplayDeadLetter(context.Background(), h.js, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	h.caughtUp()
	h.noOutcome(300*time.Millisecond, uninstalled(un.ID()))
	app := h.app("c1-agent")
	if app == nil || app.DeletionTimestamp != nil || app.Annotations[AnnotationSpecHash] != "h2" {
		t.Fatalf("the replayed uninstall undid the reinstall: %+v", app)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the stale uninstall wrote %d times: %+v", len(w), w)
	}
	if n := testutil.ToFloat64(metrics.intents.WithLabelValues("uninstall", "stale")); n != 1 {
		t.Errorf("stale uninstalls counted %v, want 1", n)
	}
}

// The mirror case: an install fails (its source Secret is missing) and is dead-lettered, the
// rule lets go of the cluster (uninstall), the operator fixes the Secret and replays the old
// install: nothing is created, not even the cluster Secret or AppProject.
func TestReplayedInstallAfterUninstallCreatesNothing(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	in := h.installIntent("baseline", "c1", "agent")
	in.Cluster.Source.SecretName = "rancher-late"
	h.consumeBreaking("")
	h.publish(in)
	dl := h.deadLetter(in.ID())
	un := uninstallIntent(in, events.UninstallNoLongerMatches)
	un.Cluster.Revision = 2
	h.publish(un)
	h.outcome(uninstalled(un.ID()))

	src, err := h.kube.CoreV1().Secrets(h.opNS).Get(ctx, "rancher", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src.ObjectMeta = metav1.ObjectMeta{Name: "rancher-late", Namespace: h.opNS}
	if _, err := h.kube.CoreV1().Secrets(h.opNS).Create(ctx, src, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mark := h.log.mark()
	if _, err := events.ReplayDeadLetter(ctx, h.js, dl.Sequence); err != nil {
		t.Fatal(err)
	}
	h.caughtUp()
	h.noOutcome(300*time.Millisecond, succeeded(in.ID()))
	if h.app("c1-agent") != nil || h.secret("cluster-c1") != nil || h.project("c1") != nil {
		t.Fatal("the replayed install created objects after its uninstall")
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the stale install wrote %d times: %+v", len(w), w)
	}
}

// A beforeInstall outcome releases the waiting install only while no newer decision was acted
// on: an entry left waiting although a newer intent was recorded (a crash between recording
// the newer decision and dropping the entry) is dropped, and nothing is created.
func TestObsoleteWaitingInstallIsNotReleased(t *testing.T) {
	h := newHarness(t)
	h.consume()
	in := h.installIntent("baseline", "c1", "agent")
	in.Triggers = beforeInstall
	seq := h.publish(in)[0]
	h.outcome(gated(in.ID()))
	un := uninstallIntent(in, events.UninstallNoLongerMatches)
	if newer, _, err := h.handler.decisions.admit(context.Background(), decisionKey(in.Rule, "c1", "agent"), uninstallRecord(un, seq+100), false); err != nil || newer != nil {
		t.Fatalf("record a newer decision: %+v %v", newer, err)
	}
	h.publish(delivered(in, "dlv-1", seq))
	h.caughtUp()
	h.noOutcome(300*time.Millisecond, succeeded(in.ID()))
	if h.app("c1-agent") != nil {
		t.Fatal("an obsolete waiting install was released")
	}
	if w := h.waiting(in); w != "" {
		t.Errorf("install %s still waiting", w)
	}
}

// An intent for a pair without Application creates its decision record in one write, and a
// record already there still orders it: a newer one wins, the same one is a redelivery that
// writes nothing, an older one is replaced. Only the record's creation is a pair's first decision.
func TestAdmitLikelyNewKeepsTheOrder(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	d := h.handler.decisions
	in := h.installIntent("baseline", "c1", "agent")
	key := decisionKey(in.Rule, "c1", "agent")
	recorded := func() (uint64, uint64) {
		t.Helper()
		rec, rev, err := service.GetJSON[decisionRecord](ctx, d.kv, key, "decision record")
		if err != nil || rec == nil {
			t.Fatalf("read the record: %+v %v", rec, err)
		}
		return rec.Sequence, rev
	}
	admit := func(seq uint64, likelyNew, wantFirst bool) *decisionRecord {
		t.Helper()
		newer, first, err := d.admit(ctx, key, installRecord(in, seq), likelyNew)
		if err != nil {
			t.Fatalf("admit sequence %d: %v", seq, err)
		}
		if first != wantFirst {
			t.Errorf("admit sequence %d: first decision %v, want %v", seq, first, wantFirst)
		}
		return newer
	}
	if newer := admit(10, true, true); newer != nil {
		t.Fatalf("the first decision was refused for %+v", newer)
	}
	seq, before := recorded()
	if seq != 10 {
		t.Fatalf("recorded sequence %d, want 10", seq)
	}
	if newer := admit(10, true, false); newer != nil {
		t.Fatalf("a redelivery was refused for %+v", newer)
	}
	if _, rev := recorded(); rev != before {
		t.Errorf("a redelivery wrote the record again (revision %d, was %d)", rev, before)
	}
	if newer := admit(5, true, false); newer == nil || newer.Sequence != 10 {
		t.Fatalf("an older decision was admitted over sequence 10: newer %+v", newer)
	}
	if newer := admit(20, true, false); newer != nil {
		t.Fatalf("a newer decision was refused for %+v", newer)
	}
	if seq, _ := recorded(); seq != 20 {
		t.Errorf("recorded sequence %d, want 20", seq)
	}
	// Without the hint, the record is read first; the pair's first decision is still known.
	other := decisionKey(in.Rule, "c2", "agent")
	if newer, first, err := d.admit(ctx, other, installRecord(in, 30), false); err != nil || newer != nil || !first {
		t.Fatalf("first decision of another pair without the hint: newer %+v, first %v, %v", newer, first, err)
	}
}

// The install of a pair argo-syncer never acted on costs the bus one write of its decision
// record and no read: the record is created outright (the cluster has no Application yet), and
// the install gates are not read (no intent of a pair without decision can wait there). An edit
// of an installed pair reads both, as the order and the gates need.
func TestNewPairInstallReadsNoRecord(t *testing.T) {
	h := newHarness(t)
	decisions := eventstest.CountBucketRequests(t, h.natsURL, events.BucketLastDecisions)
	gates := eventstest.CountBucketRequests(t, h.natsURL, events.BucketInstallGates)
	h.consume()
	clusters := []string{"c1", "c2", "c3"}
	for _, c := range clusters {
		in := h.installIntent("baseline", c, "agent")
		h.publish(in)
		h.outcome(succeeded(in.ID()))
	}
	h.caughtUp()
	if r, w := decisions.Reads(), decisions.Writes(); r != 0 || w != int64(len(clusters)) {
		t.Errorf("decision records: %d reads and %d writes for %d new pairs, want 0 and %d", r, w, len(clusters), len(clusters))
	}
	if r, w := gates.Reads(), gates.Writes(); r != 0 || w != 0 {
		t.Errorf("install gates: %d reads and %d writes for %d new pairs, want none", r, w, len(clusters))
	}

	edited := h.installIntent("baseline", "c1", "agent")
	edited.Enforcement.TargetRevision, edited.SpecHash = "v2", "h2"
	h.publish(edited)
	h.outcome(succeeded(edited.ID()))
	h.caughtUp()
	if r := decisions.Reads(); r != 1 {
		t.Errorf("decision records: %d reads for an edit, want 1", r)
	}
	if r := gates.Reads(); r != 1 {
		t.Errorf("install gates: %d reads for an edit, want 1", r)
	}
	if app := h.app(events.ApplicationName("c1", "agent")); app == nil || app.Spec.Source.TargetRevision != "v2" {
		t.Errorf("the edit did not reach the Application: %+v", app)
	}
}
