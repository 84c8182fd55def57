package main

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// hubNATS starts a NATS server with the topology the hub services apply and the claim writer
// consumer of cluster the operator creates (policy-watcher creates neither).
func hubNATS(t *testing.T, cluster string) *testenv.NATS {
	t.Helper()
	n := testenv.StartNATS(t)
	hubCreates(t, n.JetStream(t), cluster)
	return n
}

// hubCreates applies the hub's topology and the claim writer consumer of cluster, as the hub
// services and `enforcement claim-writer <cluster>` do.
func hubCreates(t *testing.T, js jetstream.JetStream, cluster string) {
	t.Helper()
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(t.Context(), js); err != nil {
		t.Fatalf("apply the hub's topology: %v", err)
	}
	if _, err := js.CreateOrUpdateConsumer(t.Context(), events.StreamName, events.ClaimWriterConsumer(cluster, events.TopologyOptions{})); err != nil {
		t.Fatalf("create the claim writer consumer of %s: %v", cluster, err)
	}
}

// streamEvents follows the stream's compliance and claim events of one cluster, as they are
// stored (after the server's duplicate detection), from the beginning.
func streamEvents(t *testing.T, js jetstream.JetStream, cluster string) <-chan events.Event {
	t.Helper()
	ctx := t.Context()
	cons, err := js.OrderedConsumer(ctx, events.StreamName, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{
			"enforcement.compliance.changed." + events.EscapeToken(cluster),
			"enforcement.claim.updated." + events.EscapeToken(cluster),
		},
	})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	ch := make(chan events.Event, 100)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		e, _, err := events.Decode(m.Subject(), m.Headers(), m.Data())
		if err != nil {
			t.Errorf("stored event does not decode: %v", err)
			return
		}
		ch <- e
	})
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Cleanup(cc.Stop)
	return ch
}

// next waits for the next stored event and asserts its type.
func next[T events.Event](t *testing.T, ch <-chan events.Event, timeout time.Duration) T {
	t.Helper()
	select {
	case e := <-ch:
		v, ok := e.(T)
		if !ok {
			t.Fatalf("next event is %s %s, want %T", e.Type(), e.ID(), v)
		}
		return v
	case <-time.After(timeout):
		var zero T
		t.Fatalf("no %T within %s", zero, timeout)
		return zero
	}
}

// none checks that no event is stored for d.
func none(t *testing.T, ch <-chan events.Event, d time.Duration) {
	t.Helper()
	select {
	case e := <-ch:
		t.Fatalf("unexpected event %s %s", e.Type(), e.ID())
	case <-time.After(d):
	}
}

// With NATS_URL every claim transition is a compliance changed event, the claim is written by
// the claim writer from that event, and a claim updated event follows each write. Duplicates
// of an event (republished, or redelivered under another message id) write nothing and store
// no second claim updated.
func TestNATSModeEndToEnd(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "nats-mode")
	claim, cluster := c.name("nats-claim"), "east.cluster-1"
	n := hubNATS(t, cluster)
	c.createPolicy("p", "NonCompliant")
	env := directEnv(c, claim, "60", "1")
	env["NATS_URL"] = n.URL()
	env["CLUSTER_NAME"] = cluster
	s := startService(t, env)
	s.WaitReady(15 * time.Second)

	js := n.JetStream(t)
	if _, err := js.Consumer(t.Context(), events.StreamName, events.ClaimWriterConsumer(cluster, events.TopologyOptions{}).Durable); err != nil {
		t.Fatalf("claim writer consumer: %v", err)
	}
	stored := streamEvents(t, js, cluster)

	// Noncompliant: published, the missing claim created by the writer, then claim updated.
	cc1 := next[*events.ComplianceChanged](t, stored, 10*time.Second)
	if cc1.Value != events.NonCompliant || cc1.Previous != "" || cc1.Claim != claim || cc1.Namespace != c.ns ||
		cc1.Policies != 1 || !slices.Equal(cc1.NonCompliantPolicies, []string{"p"}) {
		t.Fatalf("first compliance changed: %+v", cc1)
	}
	cu1 := next[*events.ClaimUpdated](t, stored, 10*time.Second)
	if cu1.ComplianceID != cc1.ID() || cu1.Value != events.NonCompliant || cu1.Previous != "" {
		t.Fatalf("first claim updated: %+v, want it to follow %s", cu1, cc1.ID())
	}
	got, labels := c.claim(claim)
	if got.Value != events.NonCompliant || got.AppliedEvent != cc1.ID() || labels[labelManagedBy] != managedByValue {
		t.Fatalf("claim after the first event: %+v, labels %v", got, labels)
	}

	// Compliant after the stable duration, through the same path.
	c.setPolicy("p", "Compliant")
	start := time.Now()
	cc2 := next[*events.ComplianceChanged](t, stored, 5*time.Second)
	if since := time.Since(start); since < time.Second || cc2.Value != events.Compliant || cc2.Previous != events.NonCompliant {
		t.Fatalf("second compliance changed after %s: %+v", since, cc2)
	}
	cu2 := next[*events.ClaimUpdated](t, stored, 5*time.Second)
	if cu2.ComplianceID != cc2.ID() || cu2.Value != events.Compliant || cu2.Previous != events.NonCompliant {
		t.Fatalf("second claim updated: %+v", cu2)
	}
	right, _ := c.waitClaim(claim, events.Compliant, time.Second)

	// Duplicates: the same event again is dropped by the server; the same event under another
	// message id (what a redelivery looks like to the writer) is handled and changes nothing.
	pub := events.NewPublisher(js, "/test")
	if res, err := pub.Publish(t.Context(), cc2); err != nil || !res.Duplicate {
		t.Fatalf("republish: %+v %v, want a duplicate", res, err)
	}
	m, err := events.Encode(cc2, "/test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(nats.MsgIdHdr, "redelivery-of-"+cc2.ID())
	if _, err := js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if again := next[*events.ComplianceChanged](t, stored, 5*time.Second); again.ID() != cc2.ID() {
		t.Fatalf("stored %s, want the duplicate of %s", again.ID(), cc2.ID())
	}
	none(t, stored, time.Second)
	if now, _ := c.claim(claim); now.ResourceVersion != right.ResourceVersion {
		t.Fatalf("a duplicate event wrote the claim (resourceVersion %s -> %s)", right.ResourceVersion, now.ResourceVersion)
	}

	// A hand edit is put back in this mode too: a new event, written by the writer.
	c.editClaim(claim, events.NonCompliant)
	cc3 := next[*events.ComplianceChanged](t, stored, 5*time.Second)
	if cc3.Value != events.Compliant || cc3.Previous != events.NonCompliant || cc3.ID() == cc2.ID() {
		t.Fatalf("put-back compliance changed: %+v", cc3)
	}
	if cu3 := next[*events.ClaimUpdated](t, stored, 5*time.Second); cu3.ComplianceID != cc3.ID() {
		t.Fatalf("put-back claim updated: %+v", cu3)
	}
	c.waitClaim(claim, events.Compliant, time.Second)
	none(t, stored, time.Second)

	if v := s.metric(`enforcement_policy_watcher_events_handled_total{outcome="acked",type="io.enforcement.compliance.changed.v1"}`); v != 4 {
		t.Errorf("claim writer acked %v compliance changed events, want 4 (three transitions and one duplicate)", v)
	}
}

// The claim writer dead-letters an event for another claim name instead of writing it.
func TestClaimWriterRejectsForeignClaim(t *testing.T) {
	cw := &claimWriter{claimName: "mine"}
	err := cw.write(context.Background(), &events.ComplianceChanged{Cluster: "c", Claim: "theirs", Value: events.Compliant}, events.Meta{})
	if err == nil || !errorsIsPermanent(err) {
		t.Fatalf("foreign claim: %v, want a permanent error", err)
	}
}

func errorsIsPermanent(err error) bool { return errors.Is(err, events.ErrPermanent) }

// In NATS mode the debounce clock survives a restart of the service too (it is on the claim,
// written by the watcher), and a restart of the NATS server loses nothing: the durable claim
// writer consumer and the stream come back from the server's store.
func TestNATSModeRestartMidDebounce(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "nats-restart")
	n := hubNATS(t, "west")
	claim := c.name("nats-restart-claim")
	env := directEnv(c, claim, "60", "4")
	env["NATS_URL"] = n.URL()
	env["CLUSTER_NAME"] = "west"
	c.restartMidDebounce(claim, env, func() { n.Restart(t) })
	got, _ := c.claim(claim)
	if got.AppliedEvent == "" {
		t.Errorf("compliant was not written by the claim writer: %+v", got)
	}
}
