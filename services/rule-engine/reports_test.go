package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatedStore holds every pair write until the test opens the gate, telling the test of each as
// it arrives, and fails the writes of one cluster id.
type gatedStore struct {
	store
	arrived chan string // the cluster id of each pair write, as it starts
	gate    chan struct{}
	failCID string
}

func (s *gatedStore) putPair(ctx context.Context, rule, cid string, p *pairState) error {
	s.arrived <- cid
	<-s.gate
	if cid == s.failCID {
		return errors.New("injected: KV unavailable")
	}
	return s.store.putPair(ctx, rule, cid, p)
}

// oneRuleEngine is an engine over st with the rule ns/r (one enforcement, a Rancher source) and
// the named clusters applied; pub records the intents it published.
func oneRuleEngine(t *testing.T, st store, clusters ...string) (*engine, *recordingPublisher) {
	t.Helper()
	pub := &recordingPublisher{}
	e := testEngine(st, pub, newMetrics(nil))
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1], Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}
	if err := e.applyRule(context.Background(), ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	for _, name := range clusters {
		if err := e.applyCluster(context.Background(), testCluster(name, nil, true), 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	return e, pub
}

// TestReportsAreFoldedTogether checks that outcomes and health reports waiting for the engine's
// mutex are folded by whoever gets it: the records of different pairs are stored side by side,
// a report on a pair another report of the batch changes is folded on that one's result, and
// a record that cannot be stored fails its own report only, which its retry then folds.
func TestReportsAreFoldedTogether(t *testing.T) {
	mem := newMemStore()
	e, pub := oneRuleEngine(t, mem, "a", "b", "c")
	ctx := context.Background()
	intents := map[string]*events.InstallIntent{}
	for _, in := range pub.installs() {
		intents[in.Cluster.Name] = in
	}
	succeeded := func(cluster string) *events.InstallSucceeded {
		in := intents[cluster]
		return &events.InstallSucceeded{IntentID: in.ID(), Rule: in.Rule, Cluster: cluster, Enforcement: "guestbook",
			Application: cluster + "-guestbook", Created: true, SpecHash: in.SpecHash}
	}
	healthy := &events.ApplicationHealth{Rule: intents["a"].Rule, Cluster: "a", Enforcement: "guestbook", Application: "a-guestbook",
		SpecHash: intents["a"].SpecHash, Observed: true, ResourceVersion: "7", Health: "Healthy", Sync: "Synced"}
	cid := func(cluster string) string { return clusterID(rancherSource().ID, "c-"+cluster) }
	st := &gatedStore{store: mem, arrived: make(chan string, 8), gate: make(chan struct{}), failCID: cid("b")}
	e.store = st

	// Four reports wait while the mutex is held: three installs and a's health.
	var wg sync.WaitGroup
	errs := map[string]error{}
	var errsMu sync.Mutex
	handle := func(name string, apply func() error) {
		wg.Go(func() {
			err := apply()
			errsMu.Lock()
			errs[name] = err
			errsMu.Unlock()
		})
	}
	e.mu.Lock()
	for _, c := range []string{"a", "b", "c"} {
		handle("installed "+c, func() error { ev := succeeded(c); return e.applyOutcome(ctx, ev, events.Meta{ID: ev.ID()}) })
	}
	handle("healthy a", func() error { return e.applyHealth(ctx, healthy) })
	for waiting := 0; waiting < 4; {
		time.Sleep(time.Millisecond)
		e.reports.mu.Lock()
		waiting = len(e.reports.waiting)
		e.reports.mu.Unlock()
	}
	e.mu.Unlock()

	// One batch: a, b and c are written side by side; a's second report waits for the next round.
	first := map[string]bool{}
	for range 3 {
		select {
		case id := <-st.arrived:
			first[id] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("pair writes in flight together: %v; want a, b and c's side by side", first)
		}
	}
	if !first[cid("a")] || !first[cid("b")] || !first[cid("c")] {
		t.Fatalf("first round wrote %v, want a, b and c", first)
	}
	select {
	case id := <-st.arrived:
		t.Fatalf("a write (%s) started before the first round's were done", id)
	default:
	}
	close(st.gate)
	wg.Wait()
	if got := <-st.arrived; got != cid("a") {
		t.Fatalf("second round wrote %s, want a", got)
	}

	for name, err := range errs {
		if wantErr := name == "installed b"; (err != nil) != wantErr || (wantErr && !strings.Contains(err.Error(), "injected")) {
			t.Errorf("%s: error %v, want one only for b's install, naming the store's failure", name, err)
		}
	}
	_, stored, _ := mem.load(ctx)
	for _, c := range []string{"a", "b", "c"} {
		inMemory := e.pairs["ns/r"][cid(c)].Enforcements.get("guestbook")
		onRecord := stored["ns/r"][cid(c)].Enforcements.get("guestbook")
		if want := c != "b"; inMemory.Installed != want || onRecord.Installed != want {
			t.Errorf("%s: installed %t in memory, %t on record; want %t", c, inMemory.Installed, onRecord.Installed, want)
		}
		if want := c == "a"; (inMemory.Health != nil) != want || (onRecord.Health != nil) != want {
			t.Errorf("%s: health %+v in memory, %+v on record; want it for a only", c, inMemory.Health, onRecord.Health)
		}
	}

	// b's retry, once the store is back, is folded alone.
	st.failCID = ""
	if ev := succeeded("b"); e.applyOutcome(ctx, ev, events.Meta{ID: ev.ID()}) != nil {
		t.Fatal("b's retry failed")
	}
	if !e.pairs["ns/r"][cid("b")].Enforcements.get("guestbook").Installed {
		t.Error("b not installed after its retry")
	}
}

// countingStore counts the pair writes that reach the store.
type countingStore struct {
	store
	mu     sync.Mutex
	writes int
}

func (s *countingStore) putPair(ctx context.Context, rule, cid string, p *pairState) error {
	s.mu.Lock()
	s.writes++
	s.mu.Unlock()
	return s.store.putPair(ctx, rule, cid, p)
}

func (s *countingStore) pairWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// A new Application's first health report, empty because Argo CD has not looked at it yet, is
// not stored while the pair has no health: it says what no report says. Once a report said
// something, an empty one replaces it (an Application recreated), and a real one is stored.
func TestEmptyFirstHealthReportWritesNothing(t *testing.T) {
	st := &countingStore{store: newMemStore()}
	e, pub := oneRuleEngine(t, st, "a")
	ctx := context.Background()
	in := pub.installs()[0]
	report := func(status events.ApplicationHealth) int {
		t.Helper()
		status.Rule, status.Cluster, status.Enforcement = in.Rule, "a", "guestbook"
		status.Application, status.SpecHash = "a-guestbook", in.SpecHash
		before := st.pairWrites()
		if err := e.applyHealth(ctx, &status); err != nil {
			t.Fatal(err)
		}
		return st.pairWrites() - before
	}
	health := func() *appHealth {
		t.Helper()
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, p := range e.pairs["ns/r"] {
			return p.Enforcements.get("guestbook").Health
		}
		t.Fatal("the rule has no pair")
		return nil
	}
	if w := report(events.ApplicationHealth{ResourceVersion: "1"}); w != 0 || health() != nil {
		t.Errorf("an empty first report: %d pair writes and health %+v, want none", w, health())
	}
	if w := report(events.ApplicationHealth{ResourceVersion: "2", Observed: true, Health: "Healthy", Sync: "Synced"}); w != 1 {
		t.Errorf("a Healthy report: %d pair writes, want 1", w)
	}
	if w := report(events.ApplicationHealth{ResourceVersion: "3"}); w != 1 || health() == nil || health().Status() != (healthStatus{}) {
		t.Errorf("an empty report after a Healthy one: %d pair writes and health %+v, want 1 and an empty status", w, health())
	}
}
