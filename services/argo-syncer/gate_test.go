package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
)

// caughtUp waits until the argo-syncer consumer has acknowledged everything in the stream.
func (h *harness) caughtUp() {
	h.t.Helper()
	eventstest.CaughtUp(h.t, h.js, events.ConsumerArgoSyncer, 20*time.Second)
}

var beforeInstall = &events.Triggers{BeforeInstall: &events.Trigger{Endpoint: "https://hooks.example/before", TimeoutSeconds: 5}}

// waitingIntent publishes an install intent with a beforeInstall trigger for an Application that
// does not exist yet, and waits until argo-syncer announces that it waits (InstallGated).
func (h *harness) waitingIntent(rule, cluster, enforcement string) *events.InstallIntent {
	h.t.Helper()
	in := h.installIntent(rule, cluster, enforcement)
	in.Triggers = beforeInstall
	h.publish(in)
	h.outcome(gated(in.ID()))
	return in
}

func delivered(in *events.InstallIntent, deliveryID string, seq uint64) *events.TriggerDelivered {
	return &events.TriggerDelivered{DeliveryID: deliveryID, IntentID: in.ID(), IntentSequence: seq, Phase: events.PhaseBeforeInstall,
		Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name, StatusCode: 200, Attempts: 1}
}

// The late-delivery case: install A waits for its beforeInstall trigger, A is uninstalled, then
// another enforcement B of the same rule and cluster is uninstalled, and only then does A's
// TriggerDelivered arrive. A is no longer wanted: nothing is created, not even the cluster's
// Secret or AppProject.
func TestLateBeforeInstallOutcomeAfterTwoUninstallsCreatesNothing(t *testing.T) {
	h := newHarness(t)
	h.consume()
	a := h.installIntent("baseline", "late", "agent")
	a.Triggers = beforeInstall
	seq := h.publish(a)[0]
	h.caughtUp()
	ua := uninstallIntent(a, events.UninstallNoLongerMatches)
	h.publish(ua)
	h.outcome(uninstalled(ua.ID()))
	b := h.installIntent("baseline", "late", "other")
	ub := uninstallIntent(b, events.UninstallEnforcementRemoved)
	h.publish(ub)
	h.outcome(uninstalled(ub.ID()))

	mark := h.log.mark()
	h.publish(delivered(a, "dlv-late", seq))
	h.caughtUp()
	h.noOutcome(300*time.Millisecond, succeeded(a.ID()))
	if h.app("late-agent") != nil || h.secret("cluster-late") != nil || h.project("late") != nil {
		t.Fatal("a late beforeInstall outcome recreated an uninstalled install")
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Errorf("the late outcome caused %d writes: %+v", len(w), w)
	}
}

func failedTrigger(in *events.InstallIntent, deliveryID, policy string) *events.TriggerFailed {
	return &events.TriggerFailed{DeliveryID: deliveryID, IntentID: in.ID(), Phase: events.PhaseBeforeInstall,
		Rule: in.Rule, Cluster: in.Cluster.Name, Enforcement: in.Enforcement.Name, FailurePolicy: policy, Attempts: 3, Message: "500"}
}

func gated(intentID string) func(events.Event) bool {
	return func(e events.Event) bool {
		g, ok := e.(*events.InstallGated)
		return ok && g.IntentID == intentID
	}
}

// waiting returns the intent id waiting for the rule's Application of in, or "".
func (h *harness) waiting(in *events.InstallIntent) string {
	h.t.Helper()
	e, _, err := h.gates.get(context.Background(), gateKey(in.Rule, events.ApplicationName(in.Cluster.Name, in.Enforcement.Name)))
	if err != nil {
		h.t.Fatal(err)
	}
	if e == nil {
		return ""
	}
	return e.IntentID
}

// applicationWrites counts the write requests to Applications among reqs.
func applicationWrites(reqs []request) int { return len(applicationRequests(reqs)) }

// TestBeforeInstallGate follows the gate through the consumer: a new Application with a
// beforeInstall trigger waits (recorded, announced with the whole intent, nothing written) and
// is created after TriggerDelivered or TriggerFailed under Ignore; under Fail it keeps waiting
// until a retried delivery succeeds; an update of an existing Application never waits.
func TestBeforeInstallGate(t *testing.T) {
	h := newHarness(t)
	h.consume()

	// Delivered: announced, then created only after TriggerDelivered.
	mark := h.log.mark()
	a := h.installIntent("baseline", "c1", "agent")
	a.Triggers = beforeInstall
	seq := h.publish(a)[0]
	g := h.outcome(gated(a.ID())).(*events.InstallGated)
	if g.Application != "c1-agent" || g.IntentSequence != seq || g.Intent.ID() != a.ID() ||
		g.Intent.Triggers == nil || *g.Intent.Triggers.BeforeInstall != *beforeInstall.BeforeInstall || g.Intent.Cluster.URL != a.Cluster.URL {
		t.Errorf("InstallGated = %+v, want the whole intent %s at sequence %d", g, a.ID(), seq)
	}
	if w := writes(h.log.since(mark)); len(w) != 0 {
		t.Fatalf("wrote %d objects before the beforeInstall trigger was delivered: %+v", len(w), w)
	}
	if got := h.waiting(a); got != a.ID() {
		t.Fatalf("waiting intent %q, want %q", got, a.ID())
	}
	h.publish(delivered(a, "d1", seq))
	if s := h.outcome(succeeded(a.ID())).(*events.InstallSucceeded); !s.Created {
		t.Error("released install not reported as Created")
	}
	h.caughtUp()
	if got := h.waiting(a); got != "" {
		t.Errorf("intent %q still waiting after its release", got)
	}

	// Failed with policy Fail: nothing, and the intent keeps waiting; the dispatcher's retry of
	// the blocked delivery succeeds later and releases it.
	b := h.waitingIntent("baseline", "c2", "agent")
	h.publish(failedTrigger(b, "d2", "Fail"))
	h.caughtUp()
	h.noOutcome(200*time.Millisecond, succeeded(b.ID()))
	if h.app("c2-agent") != nil {
		t.Fatal("installed although the beforeInstall trigger failed with policy Fail")
	}
	if got := h.waiting(b); got != b.ID() {
		t.Fatalf("blocked intent no longer waiting (%q)", got)
	}
	h.publish(delivered(b, "d2", 0))
	if s := h.outcome(succeeded(b.ID())).(*events.InstallSucceeded); !s.Created {
		t.Error("install released by a retried delivery not reported as Created")
	}

	// Failed with policy Ignore: installed.
	c := h.waitingIntent("baseline", "c3", "agent")
	h.publish(failedTrigger(c, "d3", "Ignore"))
	h.outcome(succeeded(c.ID()))
	if h.app("c3-agent") == nil {
		t.Fatal("no Application after TriggerFailed with policy Ignore")
	}

	// An update of an existing Application does not wait.
	u := h.installIntent("baseline", "c1", "agent")
	u.Triggers = beforeInstall
	u.SpecHash = "h2"
	u.Enforcement.Path = "charts/v2"
	h.publish(u)
	if s := h.outcome(succeeded(u.ID())).(*events.InstallSucceeded); s.Created {
		t.Error("update reported Created")
	}
	h.caughtUp()
	h.noOutcome(100*time.Millisecond, gated(u.ID()))
	if app := h.app("c1-agent"); app == nil || app.Spec.Source.Path != "charts/v2" {
		t.Errorf("update not applied: %+v", app)
	}

	// Released after an uninstall of the same Application: nothing.
	d := h.waitingIntent("baseline", "c4", "agent")
	ud := uninstallIntent(d, events.UninstallNoLongerMatches)
	h.publish(ud)
	h.outcome(uninstalled(ud.ID()))
	h.publish(delivered(d, "d4", 0))
	h.caughtUp()
	h.noOutcome(200*time.Millisecond, succeeded(d.ID()))
	if h.app("c4-agent") != nil {
		t.Fatal("installed a released intent that an uninstall superseded")
	}
}

// A redelivered TriggerDelivered creates the Application once, and a release that stopped
// after creating the Application but before reporting it reports the creation when repeated.
func TestRedeliveredReleaseCreatesOnce(t *testing.T) {
	h := newHarness(t)
	a := h.installIntent("baseline", "again", "agent")
	a.Triggers = beforeInstall
	h.handle(a)
	h.outcome(gated(a.ID()))
	mark := h.log.mark()
	out := delivered(a, "d1", 0)
	h.handle(out)
	if s := h.outcome(succeeded(a.ID())).(*events.InstallSucceeded); !s.Created {
		t.Fatal("release not reported as Created")
	}
	h.handle(out) // redelivered
	h.noOutcome(200*time.Millisecond, succeeded(a.ID()))
	if n := applicationWrites(h.log.since(mark)); n != 1 {
		t.Errorf("%d Application writes for one release delivered twice, want 1", n)
	}

	// The release wrote the Application and the process died before it reported: the entry is
	// still there, and the redelivered outcome reports Created without writing again.
	b := h.installIntent("baseline", "crash", "agent")
	b.Triggers = beforeInstall
	h.handle(b)
	h.outcome(gated(b.ID()))
	if _, err := h.syncer.Install(context.Background(), b, false); err != nil {
		t.Fatal(err)
	}
	mark = h.log.mark()
	h.handle(delivered(b, "d2", 0))
	if s := h.outcome(succeeded(b.ID())).(*events.InstallSucceeded); !s.Created {
		t.Error("repeated release after a crash not reported as Created (afterInstall would be skipped)")
	}
	if n := applicationWrites(h.log.since(mark)); n != 0 {
		t.Errorf("repeated release wrote the Application %d more times", n)
	}
	if got := h.waiting(b); got != "" {
		t.Errorf("intent %q still waiting", got)
	}

	// A redelivered intent that waits records the same entry and announces it under the same id.
	c := h.installIntent("baseline", "twice", "agent")
	c.Triggers = beforeInstall
	h.publish(c)
	h.consume()
	h.outcome(gated(c.ID()))
	h.handle(c)
	h.caughtUp()
	stream, err := h.js.Stream(context.Background(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	subject := events.Subject(&events.InstallGated{Intent: *c})
	info, err := stream.Info(context.Background(), jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if n := info.State.Subjects[subject]; n != 1 {
		t.Errorf("%d InstallGated events stored for one intent handled twice, want 1", n)
	}
}

// A newer intent for the same Application replaces the waiting one (the older one's outcome
// then creates nothing), and a newer intent that installs at once removes it.
func TestNewerIntentReplacesWaitingOne(t *testing.T) {
	h := newHarness(t)
	h.consume()
	old := h.waitingIntent("baseline", "newer", "agent")
	cur := h.installIntent("baseline", "newer", "agent")
	cur.Triggers = beforeInstall
	cur.SpecHash, cur.Enforcement.Path = "h2", "charts/v2"
	h.publish(cur)
	h.outcome(gated(cur.ID()))
	if got := h.waiting(cur); got != cur.ID() {
		t.Fatalf("waiting intent %q, want the newer %q", got, cur.ID())
	}
	h.publish(delivered(old, "d-old", 0))
	h.caughtUp()
	h.noOutcome(200*time.Millisecond, succeeded(old.ID()))
	if h.app("newer-agent") != nil {
		t.Fatal("the replaced intent's outcome created the Application")
	}
	h.publish(delivered(cur, "d-new", 0))
	h.outcome(succeeded(cur.ID()))
	if app := h.app("newer-agent"); app == nil || app.Spec.Source.Path != "charts/v2" {
		t.Fatalf("Application %+v, want the newer intent's", app)
	}

	// The rule dropped its trigger: the new intent installs at once and the old one stops waiting.
	waits := h.waitingIntent("baseline", "direct", "agent")
	direct := h.installIntent("baseline", "direct", "agent")
	direct.SpecHash, direct.Enforcement.Path = "h2", "charts/v2"
	h.publish(direct)
	h.outcome(succeeded(direct.ID()))
	h.caughtUp()
	if got := h.waiting(waits); got != "" {
		t.Fatalf("intent %q still waiting after a newer one installed", got)
	}
	mark := h.log.mark()
	h.publish(delivered(waits, "d-late", 0))
	h.caughtUp()
	h.noOutcome(200*time.Millisecond, succeeded(waits.ID()))
	if n := applicationWrites(h.log.since(mark)); n != 0 {
		t.Errorf("the older intent's late outcome wrote the Application %d times", n)
	}
	if app := h.app("direct-agent"); app == nil || app.Spec.Source.Path != "charts/v2" {
		t.Errorf("Application %+v, want the newer intent's spec kept", app)
	}
}

// An intent that arrives while its Application is being deleted (a Cascade uninstall waiting
// for Argo CD) is a creation: it is retried until the Application is gone and then waits for its
// beforeInstall like any new Application.
func TestInstallOverTerminatingApplicationWaitsForBeforeInstall(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	c := h.installIntent("baseline", "term", "agent")
	c.DeletionPolicy = events.DeletionCascade
	h.handle(c)
	h.outcome(succeeded(c.ID()))
	h.handle(uninstallIntent(c, events.UninstallRuleDeleted))
	eventually(t, "cache sees the Application terminating", func() bool {
		_, ok, terminating := h.syncer.apps.get("term-agent")
		return ok && terminating
	})
	re := h.installIntent("baseline", "term", "agent")
	re.Triggers = beforeInstall
	re.SpecHash = "h-re"
	if err := h.handler.Handle(ctx, re, events.Meta{}); err == nil || !strings.Contains(err.Error(), ReasonTerminating) {
		t.Fatalf("install over a terminating Application: %v, want a retried %s", err, ReasonTerminating)
	}
	h.noOutcome(100*time.Millisecond, gated(re.ID()))
	if _, err := h.argo.ArgoprojV1alpha1().Applications(h.ns).Patch(ctx, "term-agent", types.MergePatchType,
		[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "cache sees the Application gone", func() bool {
		_, ok, _ := h.syncer.apps.get("term-agent")
		return !ok
	})
	h.handle(re)
	h.outcome(gated(re.ID()))
	if h.app("term-agent") != nil {
		t.Fatal("created before the beforeInstall trigger answered")
	}
	h.handle(delivered(re, "d-term", 0))
	if s := h.outcome(succeeded(re.ID())).(*events.InstallSucceeded); !s.Created {
		t.Error("reinstall after the deletion not reported as Created")
	}
}

// An install that created its Application and stopped before its outcome was stored (a crash,
// or the acknowledgement of the publish lost with a NATS node) reports the creation when the
// intent is handled again, without writing again: its afterInstall trigger is not lost.
func TestRepeatedInstallAfterALostReportStillReportsCreated(t *testing.T) {
	h := newHarness(t)
	in := h.installIntent("baseline", "lost-report", "agent")
	if res, err := h.syncer.Install(context.Background(), in, true); err != nil || !res.Created {
		t.Fatalf("first run: %+v, %v; want Created", res, err)
	}
	mark := h.log.mark()
	h.handle(in) // the redelivered intent
	if s := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded); !s.Created {
		t.Error("install handled again after a lost report not reported as Created (afterInstall would be skipped)")
	}
	if n := applicationWrites(h.log.since(mark)); n != 0 {
		t.Errorf("the repeated install wrote the Application %d more times", n)
	}

	// A later intent's update is no creation. The record stays (the creation holds it by an
	// update, which a later apply does not undo: writeApplication) and names the first intent
	// only, which is older than the Application's last decision from then on.
	next := h.installIntent("baseline", "lost-report", "agent")
	next.Enforcement.TargetRevision = "v2"
	next.SpecHash = "h2"
	h.handle(next)
	if s := h.outcome(succeeded(next.ID())).(*events.InstallSucceeded); s.Created {
		t.Error("update reported Created")
	}
	if app := h.app("lost-report-agent"); app == nil || app.Spec.Source.TargetRevision != "v2" || app.Annotations[AnnotationCreatedBy] != in.ID() {
		t.Errorf("after the update the Application is %v; want revision v2 and the record of %s", app, in.ID())
	}
}

// The InstallSucceeded of a creation carries the intent when it has an afterInstall trigger (so
// that trigger-dispatcher can deliver from that event alone, whatever order a redelivery brings),
// and the intent's stream sequence; an update carries no intent.
func TestCreationOutcomeCarriesTheAfterInstallIntent(t *testing.T) {
	h := newHarness(t)
	h.consume()
	afterInstall := &events.Triggers{AfterInstall: &events.Trigger{Endpoint: "https://hooks.example.com/after"}}

	in := h.installIntent("baseline", "c1", "agent")
	in.Triggers = afterInstall
	seq := h.publish(in)[0]
	s := h.outcome(succeeded(in.ID())).(*events.InstallSucceeded)
	if !s.Created || s.IntentSequence != seq || s.Intent == nil || s.Intent.ID() != in.ID() ||
		s.Intent.Triggers == nil || s.Intent.Triggers.AfterInstall == nil {
		t.Errorf("creation outcome = %+v (intent %+v), want Created with intent %s at sequence %d", s, s.Intent, in.ID(), seq)
	}

	up := h.installIntent("baseline", "c1", "agent")
	up.Triggers = afterInstall
	up.SpecHash = "h2"
	up.Enforcement.Path = "charts/v2"
	h.publish(up)
	if s := h.outcome(succeeded(up.ID())).(*events.InstallSucceeded); s.Created || s.Intent != nil {
		t.Errorf("update outcome = %+v, want not Created and no intent", s)
	}
}
