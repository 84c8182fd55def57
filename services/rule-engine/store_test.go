package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKVStore round-trips the state and the render cache through real JetStream KV buckets.
func TestKVStore(t *testing.T) {
	n := testenv.StartNATS(t)
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := events.DefaultTopology(events.TopologyOptions{}).Apply(ctx, js); err != nil {
		t.Fatal(err)
	}
	st, err := openKVStore(ctx, js)
	if err != nil {
		t.Fatal(err)
	}
	cid := clusterID("src", "arn:aws:eks:us-east-1:1:cluster/a b")
	rec := &clusterRecord{Cluster: testCluster("a", nil, true), Revision: 4}
	if err := st.putCluster(ctx, cid, rec); err != nil {
		t.Fatal(err)
	}
	p := &pairState{Rule: events.RuleRef{Namespace: "ns", Name: "r"}, RenderKey: "k", Enforcements: map[string]*enfState{"g": {SpecHash: "h", Installed: true}}}
	if err := st.putPair(ctx, "ns/r", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.putPair(ctx, "ns/gone", cid, p); err != nil {
		t.Fatal(err)
	}
	if err := st.deletePair(ctx, "ns/gone", cid); err != nil {
		t.Fatal(err)
	}
	clusters, pairs, err := st.load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(clusters) != 1 || clusters[cid].Revision != 4 || len(pairs) != 1 || !pairs["ns/r"][cid].Enforcements["g"].Installed {
		t.Errorf("load: clusters %v, pairs %v", clusters, pairs)
	}

	for _, key := range []string{"u1.1.aaaa", "u1.2.aaaa", "u2.1.aaaa"} {
		if _, err := st.putRender(ctx, key, []events.Enforcement{{Name: key}}); err != nil {
			t.Fatal(err)
		}
	}
	// The first render of a key wins: a second one (another input rendering at the same time)
	// gets the first back.
	if got, err := st.putRender(ctx, "u2.1.aaaa", []events.Enforcement{{Name: "second"}}); err != nil || got[0].Name != "u2.1.aaaa" {
		t.Errorf("second putRender = %v, %v; want the first render", got, err)
	}
	if err := st.putFailure(ctx, "u1.1.failed-00", "loop"); err != nil {
		t.Fatal(err)
	}
	if msg, ok, err := st.getFailure(ctx, "u1.1.failed-00"); err != nil || !ok || msg != "loop" {
		t.Errorf("getFailure = %q, %t, %v", msg, ok, err)
	}
	if err := st.purgeRenders(ctx, "u1", 2); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.getFailure(ctx, "u1.1.failed-00"); err != nil || ok {
		t.Errorf("failure of an old generation not purged (%t, %v)", ok, err)
	}
	for key, want := range map[string]bool{"u1.1.aaaa": false, "u1.2.aaaa": true, "u2.1.aaaa": true} {
		got, ok, err := st.getRender(ctx, key)
		if err != nil || ok != want || (ok && got[0].Name != key) {
			t.Errorf("render %s: %v %v %v, want present=%v", key, got, ok, err, want)
		}
	}
}

// failingStore fails the first putPair calls, as if the engine died after publishing and before
// its records were written.
type failingStore struct {
	store
	failures int
}

func (s *failingStore) putPair(ctx context.Context, rule, cid string, p *pairState) error {
	if s.failures > 0 {
		s.failures--
		return errors.New("injected: KV unavailable")
	}
	return s.store.putPair(ctx, rule, cid, p)
}

// TestPublishThenPersistFailureIsRepublishedOnce checks the crash-safety order on real NATS: the
// intents are published, the records fail to persist, the event is retried, and the stream
// still holds each intent once (same deterministic ids, deduplicated by the server); a fresh
// engine loading the state then has nothing left to send.
func TestPublishThenPersistFailureIsRepublishedOnce(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kv, err := openKVStore(ctx, e.js)
	if err != nil {
		t.Fatal(err)
	}
	st := &failingStore{store: kv, failures: 1}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	eng := newEngine(logger, st, e.pub, newRenderer(nil, time.Second), newMetrics(nil), time.Minute)
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}
	if err := eng.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	c := testCluster("a", nil, true)
	if err := eng.applyCluster(ctx, c, 1, 0); err == nil {
		t.Fatal("persist failure not reported")
	}
	if n := len(e.intents()); n != 2 {
		t.Fatalf("%d intents after the failed attempt, want 2 (published before the persist)", n)
	}
	if err := eng.applyCluster(ctx, c, 1, 0); err != nil { // the redelivery
		t.Fatal(err)
	}
	if got := e.intents(); len(got) != 2 {
		t.Fatalf("%d intents after the retry, want the same 2", len(got))
	}

	restarted := newEngine(logger, kv, e.pub, newRenderer(nil, time.Second), newMetrics(nil), time.Minute)
	if err := restarted.load(ctx); err != nil {
		t.Fatal(err)
	}
	if err := restarted.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	if err := restarted.applyCluster(ctx, c, 1, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(e.intents()); n != 2 {
		t.Errorf("%d intents after a restart, want still 2", n)
	}
}
