package events

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// The filters derived from the catalog, written out: a changed route shows up here.
func TestConsumerFiltersDeriveFromTheCatalog(t *testing.T) {
	want := map[string][]string{
		ConsumerRuleEngine: {
			"enforcement.cluster.appeared.>", "enforcement.cluster.updated.>", "enforcement.cluster.gone.>",
			"enforcement.source.degraded.>", "enforcement.source.recovered.>", "enforcement.source.listed.>", "enforcement.rule.removals.released.>",
			"enforcement.rule.rollout.approved.>", "enforcement.install.succeeded.>", "enforcement.install.failed.>",
			"enforcement.uninstall.done.>", "enforcement.application.health.>", "enforcement.trigger.delivered.>", "enforcement.trigger.failed.>",
		},
		ConsumerArgoSyncer: {
			"enforcement.intent.install.>", "enforcement.intent.uninstall.>",
			"enforcement.trigger.delivered.>", "enforcement.trigger.failed.>",
		},
		ConsumerTriggerDispatcher: {"enforcement.intent.install.>", "enforcement.install.succeeded.>", "enforcement.install.gated.>"},
		ConsumerSourceScanner:     {"enforcement.removals.released.>"},
	}
	topo := DefaultTopology(TopologyOptions{})
	if len(topo.Consumers) != len(want) {
		t.Fatalf("%d consumers, want %d", len(topo.Consumers), len(want))
	}
	for _, c := range topo.Consumers {
		if !slices.Equal(c.FilterSubjects, want[c.Durable]) {
			t.Errorf("consumer %s filters\n got %q\nwant %q", c.Durable, c.FilterSubjects, want[c.Durable])
		}
	}
	cw := ClaimWriterConsumer("prod.eu-1", TopologyOptions{})
	if cw.Durable != "claim-writer-prod%2Eeu-1" || cw.FilterSubject != "enforcement.compliance.changed.prod%2Eeu-1" || cw.FilterSubjects != nil {
		t.Errorf("claim writer consumer: durable %q, filter %q %q", cw.Durable, cw.FilterSubject, cw.FilterSubjects)
	}
}

// The derived filters select the same events as the filters that were written by hand before the
// routing was declared in the catalog: in particular, neither rule-engine nor argo-syncer
// receives the per-attempt trigger events.
func TestDerivedFiltersSelectWhatTheHandWrittenOnesDid(t *testing.T) {
	handWritten := map[string][]string{
		// install.gated (argo-syncer to trigger-dispatcher) came after the hand-written filters,
		// which gave rule-engine all of enforcement.install.>; it has no use for it. Staged
		// rollouts added the approvals and Argo CD's Application health.
		ConsumerRuleEngine: {"enforcement.cluster.>", "enforcement.source.>", "enforcement.rule.removals.released.>", "enforcement.install.succeeded.>",
			"enforcement.install.failed.>", "enforcement.uninstall.>", "enforcement.rule.rollout.approved.>", "enforcement.application.health.>", "enforcement.trigger.delivered.>", "enforcement.trigger.failed.>"},
		ConsumerArgoSyncer:        {"enforcement.intent.>", "enforcement.trigger.delivered.>", "enforcement.trigger.failed.>"},
		ConsumerTriggerDispatcher: {"enforcement.intent.install.>", "enforcement.install.gated.>", "enforcement.install.succeeded.>"},
		ConsumerClaimWriter:       {"enforcement.compliance.changed.cluster1"},
		ConsumerSourceScanner:     {"enforcement.removals.released.>"},
	}
	configs := map[string]jetstream.ConsumerConfig{ConsumerClaimWriter: ClaimWriterConsumer("cluster1", TopologyOptions{})}
	for _, c := range DefaultTopology(TopologyOptions{}).Consumers {
		configs[c.Durable] = c
	}
	matches := func(subject string, filters []string) bool {
		return slices.ContainsFunc(filters, func(f string) bool { return server.SubjectMatchesFilter(subject, f) })
	}
	others := &ComplianceChanged{Cluster: "cluster2", Namespace: "cluster2", Claim: "c", Value: Compliant, Since: time.Now()}
	for consumer, old := range handWritten {
		cfg := configs[consumer]
		derived := append(slices.Clone(cfg.FilterSubjects), cfg.FilterSubject)
		for _, e := range append(sampleEvents(), others) {
			s := Subject(e)
			if got, want := matches(s, derived), matches(s, old); got != want {
				t.Errorf("consumer %s, %s: derived filters select it: %v, hand-written ones: %v", consumer, s, got, want)
			}
			if got, want := matches(s, derived), slices.Contains(RoutedTo(consumer), e.Type()) && e != others; got != want {
				t.Errorf("consumer %s, %s: selected %v, routed %v", consumer, s, got, want)
			}
		}
	}
}

// On a real server: one event of every type is published, and every consumer receives exactly
// the types the catalog routes to it.
func TestEveryConsumerReceivesExactlyItsRoutedTypes(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	ctx := context.Background()
	claimWriter := ClaimWriterConsumer("cluster1", TopologyOptions{})
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName, claimWriter); err != nil {
		t.Fatal(err)
	}
	samples := sampleEvents()
	if len(samples) != len(catalog) {
		t.Fatalf("%d sample events for %d types", len(samples), len(catalog))
	}
	publish(t, NewPublisher(js, "/test"), samples...)

	durables := map[string]string{ConsumerClaimWriter: claimWriter.Durable}
	for _, c := range sharedConsumers {
		durables[c] = c
	}
	if got := Consumers(); len(got) != len(durables) {
		t.Fatalf("routed consumers %v, the test knows %d", got, len(durables))
	}
	for consumer, durable := range durables {
		cons, err := js.Consumer(ctx, StreamName, durable)
		if err != nil {
			t.Fatal(err)
		}
		batch, err := cons.Fetch(len(samples)+1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for m := range batch.Messages() {
			got = append(got, headerValue(m.Headers(), HeaderType))
			_ = m.Ack()
		}
		if want := RoutedTo(consumer); !slices.Equal(got, want) {
			t.Errorf("consumer %s received\n %q\nwant\n %q", consumer, got, want)
		}
	}
}

// Every consumer of the topology has routes, and every routed consumer has a durable consumer:
// one in DefaultTopology, or the claim writer's per cluster.
func TestEveryRoutedConsumerIsDeclared(t *testing.T) {
	declared := []string{ConsumerClaimWriter}
	for _, c := range DefaultTopology(TopologyOptions{}).Consumers {
		if len(RoutedTo(c.Durable)) == 0 {
			t.Errorf("consumer %s is declared but the catalog routes nothing to it", c.Durable)
		}
		declared = append(declared, c.Durable)
	}
	for _, c := range Consumers() {
		if !slices.Contains(declared, c) {
			t.Errorf("the catalog routes to %s, which has no durable consumer", c)
		}
	}
}

// Every bucket a service opens is declared in the topology, and the topology declares no other.
func TestTopologyDeclaresEveryBucket(t *testing.T) {
	opened := []string{BucketInventory, BucketRenderCache, BucketTriggers, BucketRuleEngineState, BucketInstallGates, BucketLastDecisions}
	var declared []string
	for _, b := range DefaultTopology(TopologyOptions{}).Buckets {
		declared = append(declared, b.Bucket)
	}
	slices.Sort(opened)
	slices.Sort(declared)
	if !slices.Equal(declared, opened) {
		t.Fatalf("topology declares buckets %q, services open %q", declared, opened)
	}
}

func noop[E Event](context.Context, E, Meta) error { return nil }

func TestRouterCheckNamesWhatDiffersFromTheCatalog(t *testing.T) {
	complete := NewRouter(ConsumerTriggerDispatcher, On(noop[*InstallIntent]), On(noop[*InstallGated]), On(noop[*InstallSucceeded]))
	if err := complete.Check(); err != nil {
		t.Fatalf("complete table: %v", err)
	}
	for name, tc := range map[string]struct {
		r    *Router
		want []string
	}{
		"missing handler": {NewRouter(ConsumerTriggerDispatcher, On(noop[*InstallIntent]), On(noop[*InstallGated])),
			[]string{"consumer trigger-dispatcher receives io.enforcement.install.succeeded.v1 but has no handler for it"}},
		"handler never called": {NewRouter(ConsumerTriggerDispatcher, On(noop[*InstallIntent]), On(noop[*InstallGated]), On(noop[*InstallSucceeded]), On(noop[*TriggerAttempted])),
			[]string{"consumer trigger-dispatcher has a handler for io.enforcement.trigger.attempted.v1, which the catalog does not route to it"}},
		"two handlers": {NewRouter(ConsumerTriggerDispatcher, On(noop[*InstallIntent]), On(noop[*InstallIntent]), On(noop[*InstallGated]), On(noop[*InstallSucceeded])),
			[]string{"consumer trigger-dispatcher has two handlers for io.enforcement.intent.install.v1"}},
		"not an event type": {NewRouter(ConsumerTriggerDispatcher, On(noop[Event]), On(noop[*InstallIntent]), On(noop[*InstallGated]), On(noop[*InstallSucceeded])),
			[]string{"want a pointer to an event type"}},
		"unknown consumer": {NewRouter("nobody", On(noop[*InstallIntent])),
			[]string{`consumer "nobody": the catalog routes no event type to it`}},
	} {
		err := tc.r.Check()
		if err == nil {
			t.Errorf("%s: Check passed", name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", name, err, w)
			}
		}
	}
}

func TestRouterHandsEachTypeToItsHandler(t *testing.T) {
	var got []string
	r := NewRouter(ConsumerTriggerDispatcher,
		On(func(_ context.Context, e *InstallIntent, _ Meta) error {
			got = append(got, "intent "+e.SpecHash)
			return nil
		}),
		On(func(_ context.Context, e *InstallGated, _ Meta) error {
			got = append(got, "gated "+e.Application)
			return nil
		}),
		On(func(_ context.Context, e *InstallSucceeded, _ Meta) error {
			got = append(got, "succeeded "+e.Application)
			return nil
		}))
	ctx := context.Background()
	for _, e := range sampleEvents() {
		err := r.Handle(ctx, e, Meta{})
		if routed := slices.Contains(RoutedTo(ConsumerTriggerDispatcher), e.Type()); routed != (err == nil) || !routed && !errors.Is(err, ErrNoHandler) {
			t.Errorf("%s: %v", e.Type(), err)
		}
	}
	if want := []string{"intent a1b2c3", "succeeded prod-eu-1-guestbook-1a2b3c4d", "gated prod-eu-1-guestbook-1a2b3c4d"}; !slices.Equal(got, want) {
		t.Fatalf("handled %q, want %q", got, want)
	}
}

// Router.Consume refuses an incomplete table before binding; an event that reaches a table
// without a handler for it (a filter broader than the routes) is acknowledged, not dead-lettered.
func TestRouterConsumeChecksTheTableAndIgnoresUnroutedEvents(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	ctx := context.Background()
	partial := NewRouter(ConsumerRuleEngine, On(noop[*ClusterAppeared]))
	if _, err := partial.Consume(ctx, js, ConsumerOptions{}); err == nil ||
		!strings.Contains(err.Error(), "consumer rule-engine receives io.enforcement.cluster.gone.v1 but has no handler for it") {
		t.Fatalf("Consume with an incomplete table: %v", err)
	}
	if _, err := Consume(ctx, js, partial.Handle, ConsumerOptions{Name: ConsumerRuleEngine, Routes: partial}); err == nil ||
		!strings.Contains(err.Error(), "consumer rule-engine receives io.enforcement.source.degraded.v1 but has no handler for it") {
		t.Fatalf("Consume with an incomplete table in the options: %v", err)
	}

	seen := make(chan string, 4)
	r := NewRouter(ConsumerRuleEngine, On(func(_ context.Context, e *ClusterAppeared, _ Meta) error {
		seen <- e.Cluster.Key
		return nil
	}))
	consume(t, js, r.Handle, ConsumerOptions{})
	gone := &ClusterGone{Source: testSource, Key: "c1", Name: "c1", Revision: 2, LastSeen: time.Now()}
	publish(t, NewPublisher(js, "/test"), gone, appeared("c2", 1))
	select {
	case k := <-seen:
		if k != "c2" {
			t.Fatalf("handled %s", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the routed event was not handled")
	}
	cons, err := js.Consumer(ctx, StreamName, ConsumerRuleEngine)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.AckFloor.Stream == 2 && info.NumAckPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("consumer did not acknowledge both events: ack floor %d, pending acks %d", info.AckFloor.Stream, info.NumAckPending)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if dls, err := ListDeadLetters(ctx, js, ConsumerRuleEngine); err != nil || len(dls) != 0 {
		t.Fatalf("dead letters %v, %v", dls, err)
	}
}

const routingBegin, routingEnd = "<!-- routing table: generated, see routing_test.go -->\n", "<!-- end of routing table -->\n"

// routingTable renders the catalog's routing as the Markdown table of README.md.
func routingTable() string {
	var b strings.Builder
	b.WriteString("| event type | subject | received by |\n| --- | --- | --- |\n")
	for _, d := range catalog {
		to := "none (kept for audit)"
		if len(d.Consumers) > 0 {
			to = "`" + strings.Join(d.Consumers, "`, `") + "`"
		}
		b.WriteString("| `" + d.Type + "` | `" + strings.Join(d.Subject, ".") + "` | " + to + " |\n")
	}
	return b.String()
}

// TestREADMERoutingTableIsCurrent keeps the routing table of README.md equal to the catalog.
// UPDATE_ASYNCAPI=1 (hack/generate.sh) rewrites it.
func TestREADMERoutingTableIsCurrent(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := bytes.Cut(readme, []byte(routingBegin))
	_, after, ok2 := bytes.Cut(rest, []byte(routingEnd))
	if !ok1 || !ok2 {
		t.Fatalf("README.md has no routing table between %q and %q", routingBegin, routingEnd)
	}
	want := slices.Concat(before, []byte(routingBegin), []byte(routingTable()), []byte(routingEnd), after)
	if os.Getenv("UPDATE_ASYNCAPI") == "1" {
		if err := os.WriteFile("README.md", want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !bytes.Equal(readme, want) {
		t.Fatal("the routing table of README.md is out of date with the catalog: run hack/generate.sh")
	}
}

// An installation whose durable consumers still have the filters written by hand before the
// routing was declared takes the derived ones when the topology is applied at start.
func TestApplyReplacesTheHandWrittenFilters(t *testing.T) {
	_, js := connect(t, startNATS(t, ""), TopologyOptions{})
	ctx := context.Background()
	old, _ := DefaultTopology(TopologyOptions{}).Consumer(ConsumerRuleEngine)
	old.FilterSubjects = []string{"enforcement.cluster.>", "enforcement.source.>", "enforcement.install.>",
		"enforcement.uninstall.>", "enforcement.trigger.delivered.>", "enforcement.trigger.failed.>"}
	if _, err := js.CreateOrUpdateConsumer(ctx, StreamName, old); err != nil {
		t.Fatal(err)
	}
	if err := DefaultTopology(TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatalf("apply over the hand-written filters: %v", err)
	}
	cons, err := js.Consumer(ctx, StreamName, ConsumerRuleEngine)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := DefaultTopology(TopologyOptions{}).Consumer(ConsumerRuleEngine)
	if got := cons.CachedInfo().Config.FilterSubjects; !slices.Equal(got, want.FilterSubjects) {
		t.Fatalf("filters after apply %q, want %q", got, want.FilterSubjects)
	}
}
