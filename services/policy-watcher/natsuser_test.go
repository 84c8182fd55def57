package main

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// connectAs connects to n as user of the shipped authorization, the way the services do
// (service.NATSAuth: the user's password and its own inbox prefix). Permission violations the
// server reports asynchronously are sent to violations.
func connectAs(t *testing.T, n *testenv.NATS, user string, violations chan<- error) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	opts := append(service.NATSAuth(user, testenv.NATSPassword(user), ""), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case violations <- err:
		default:
		}
	}))
	nc, err := nats.Connect(n.URL(), opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Until the hub services have created the stream and the operator the claim writer consumer,
// policy-watcher waits (it creates no JetStream object): it says what it waits for, retries, and
// is not ready; once both exist it binds its claim writer and the compliance loop runs.
func TestWaitsForTheStreamAndConsumer(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "no-stream")
	n := testenv.StartNATS(t)
	claim := c.name("no-stream-claim")
	c.createPolicy("p", "NonCompliant")
	env := directEnv(c, claim, "60", "0")
	env["NATS_URL"] = n.URL()
	env["CLUSTER_NAME"] = "late"
	s := startService(t, env)
	s.waitLog("Waiting for stream; the hub services create it", 10*time.Second)
	notReady := func() {
		t.Helper()
		if code, body := httpGet(t, "http://"+s.Health+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "claim-writer-late") {
			t.Fatalf("/readyz: %d %s, want 503 naming the consumer", code, body)
		}
	}
	notReady()
	js := n.JetStream(t)
	if _, err := js.Stream(t.Context(), events.StreamName); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("policy-watcher created the stream (or it cannot be read): %v", err)
	}

	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(t.Context(), js); err != nil {
		t.Fatal(err)
	}
	s.waitLog("Waiting for claim writer consumer; the operator creates it with enforcement claim-writer", 30*time.Second)
	notReady()
	if _, err := js.Consumer(t.Context(), events.StreamName, "claim-writer-late"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("policy-watcher created its consumer (or it cannot be read): %v", err)
	}

	hubCreates(t, js, "late")
	s.WaitReady(30 * time.Second)
	got, _ := c.waitClaim(claim, events.NonCompliant, 15*time.Second)
	if got.AppliedEvent == "" {
		t.Fatalf("claim not written by the claim writer: %+v", got)
	}
}

// On a NATS server with the shipped authorization (deploy/nats), the policy-watcher of a managed
// cluster runs with its own account and user (made from the template as the operator would)
// and closes its compliance loop; the same credential, in a compromised cluster's hands, cannot
// publish an intent, read another cluster's events, create a consumer, have JetStream deliver
// into the hub's subjects, nor change or delete the stream. Each refusal is checked on the
// server's side too: nothing was stored, nothing was created, nothing was removed.
func TestManagedClusterNATSUser(t *testing.T) {
	t.Parallel()
	const cluster, other = "spoke-1", "spoke-2"
	n := testenv.StartNATS(t, testenv.WithAuthorization(t, testenv.ShippedAuthorization(t, cluster, other)))
	if _, err := nats.Connect(n.URL()); err == nil {
		t.Fatal("a client without a user was let in")
	}
	// The hub's services apply the topology with their own users; the operator's user reads.
	_, hub := connectAs(t, n, "rule-engine", make(chan error, 1))
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(t.Context(), hub); err != nil {
		t.Fatalf("rule-engine's user applies the topology: %v", err)
	}
	_, ops := connectAs(t, n, "enforcement-operator", make(chan error, 1))
	hubCreates(t, ops, cluster) // `enforcement claim-writer spoke-1`
	otherCfg := events.ClaimWriterConsumer(other, events.TopologyOptions{})
	if _, err := ops.CreateOrUpdateConsumer(t.Context(), events.StreamName, otherCfg); err != nil {
		t.Fatal(err)
	}

	// policy-watcher of spoke-1 works with its user.
	c := newCluster(t, "nats-user")
	claim := c.name("nats-user-claim")
	c.createPolicy("p", "NonCompliant")
	env := directEnv(c, claim, "60", "0")
	user := "policy-watcher-" + cluster
	env["NATS_URL"], env["NATS_USER"], env["NATS_PASSWORD"], env["CLUSTER_NAME"] = n.URL(), user, testenv.NATSPassword(user), cluster
	s := startService(t, env)
	s.WaitReady(30 * time.Second)
	stored := streamEvents(t, ops, cluster)
	cc := next[*events.ComplianceChanged](t, stored, 15*time.Second)
	if cu := next[*events.ClaimUpdated](t, stored, 15*time.Second); cu.ComplianceID != cc.ID() {
		t.Fatalf("claim updated %+v does not follow %s", cu, cc.ID())
	}
	if got, _ := c.waitClaim(claim, events.NonCompliant, 5*time.Second); got.AppliedEvent != cc.ID() {
		t.Fatalf("claim %+v, want it written by the claim writer from %s", got, cc.ID())
	}

	// The same credential, used by hand. Each refusal is the server's: it reports a permissions
	// violation naming the refused subject (or, for a new consumer, a subject that begins so).
	violations := make(chan error, 100)
	nc, js := connectAs(t, n, user, violations)
	pub := events.NewPublisher(js, "/attacker")
	refused := func(what, subject string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: allowed, want refused", what)
			return
		}
		deadline := time.After(5 * time.Second)
		for {
			select {
			case v := <-violations:
				if strings.Contains(v.Error(), "Permissions Violation") && strings.Contains(v.Error(), `"`+subject) {
					t.Logf("%s: refused: %v", what, v)
					return
				}
			case <-deadline:
				t.Errorf("%s: %v, but the server reported no permissions violation for %s", what, err, subject)
				return
			}
		}
	}
	attempt := func() context.Context {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	consumersBefore := consumerNames(t, ops)

	// Its own compliance: allowed.
	own := &events.ComplianceChanged{Cluster: cluster, Namespace: c.ns, Claim: claim, Value: events.NonCompliant, Since: time.Now()}
	if _, err := pub.Publish(attempt(), own); err != nil {
		t.Fatalf("publish its own compliance: %v", err)
	}

	// An intent, or another cluster's compliance: refused, and not stored.
	intentSubject := "enforcement.intent.install." + other + ".enforcement.rule"
	_, err := js.Publish(attempt(), intentSubject, []byte(`{}`))
	refused("publish an install intent", intentSubject, err)
	otherSubject := "enforcement.compliance.changed." + other
	_, err = pub.Publish(attempt(), &events.ComplianceChanged{Cluster: other, Namespace: "x", Claim: claim, Value: events.Compliant, Since: time.Now()})
	refused("publish another cluster's compliance", otherSubject, err)
	for _, subject := range []string{intentSubject, otherSubject} {
		if _, err := mustStream(t, ops).GetLastMsgForSubject(t.Context(), subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("a message on %s was stored (%v)", subject, err)
		}
	}

	// Another cluster's events: not by subscribing, not through its consumer, not through a new one.
	sub, err := nc.SubscribeSync("enforcement.>")
	if err != nil {
		t.Fatal(err)
	}
	refused("subscribe to every event", "enforcement.>", errors.New("subscribed"))
	if m, err := sub.NextMsg(500 * time.Millisecond); err == nil {
		t.Errorf("received %s through a refused subscription", m.Subject)
	}
	_, err = js.Consumer(attempt(), events.StreamName, otherCfg.Durable)
	refused("bind "+otherCfg.Durable, "$JS.API.CONSUMER.INFO.ENFORCEMENT."+otherCfg.Durable, err)
	mine := events.ClaimWriterConsumer(cluster, events.TopologyOptions{})
	_, err = js.CreateOrUpdateConsumer(attempt(), events.StreamName, mine)
	refused("create or change its own consumer", "$JS.API.CONSUMER.CREATE.ENFORCEMENT."+mine.Durable, err)
	mine.FilterSubject = otherSubject
	_, err = js.CreateOrUpdateConsumer(attempt(), events.StreamName, mine)
	refused("its own consumer with another cluster's filter", "$JS.API.CONSUMER.CREATE.ENFORCEMENT."+mine.Durable, err)
	oc, err := js.OrderedConsumer(attempt(), events.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"enforcement.>"}})
	if err == nil {
		_, err = oc.Fetch(1, jetstream.FetchMaxWait(time.Second))
	}
	refused("an ordered consumer on every event", "$JS.API.CONSUMER.CREATE.ENFORCEMENT", err)
	if after := consumerNames(t, ops); !slices.Equal(after, consumersBefore) {
		t.Errorf("consumers %v after the attempts, want %v", after, consumersBefore)
	}

	// JetStream delivers a pull request's messages to the reply subject the puller names: naming
	// an intent subject there must not turn this cluster's own (freely written) compliance
	// events into intents in the stream. Its account keeps the delivery to itself.
	forged := "enforcement.intent.install.spoke-2.enforcement.forged"
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT.ENFORCEMENT."+mine.Durable, forged, []byte(`{"batch":10,"expires":1000000000}`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // the pull request's expiry, and then some
	if _, err := mustStream(t, ops).GetLastMsgForSubject(t.Context(), forged); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Errorf("a pull with reply subject %s stored a message there (%v)", forged, err)
	}

	// The stream: not deleted, not purged, not changed.
	refused("delete the stream", "$JS.API.STREAM.DELETE.ENFORCEMENT", js.DeleteStream(attempt(), events.StreamName))
	_, err = nc.RequestWithContext(attempt(), "$JS.API.STREAM.PURGE.ENFORCEMENT", nil)
	refused("purge the stream", "$JS.API.STREAM.PURGE.ENFORCEMENT", err)
	_, err = js.UpdateStream(attempt(), jetstream.StreamConfig{Name: events.StreamName, Subjects: []string{"enforcement.>"}, MaxAge: time.Second})
	refused("shorten the stream's retention", "$JS.API.STREAM.UPDATE.ENFORCEMENT", err)
	info, err := mustStream(t, ops).Info(t.Context())
	if err != nil || info.State.Msgs < 3 || info.Config.MaxAge != 30*24*time.Hour {
		t.Errorf("stream after the attempts: %+v %v, want it unchanged with its events", info, err)
	}
}

func mustStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	st, err := js.Stream(t.Context(), events.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func consumerNames(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var names []string
	l := mustStream(t, js).ConsumerNames(t.Context())
	for name := range l.Name() {
		names = append(names, name)
	}
	slices.Sort(names)
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}
