package main

import (
	"context"
	"fmt"
	"github.com/enforcement-io/enforcement/pkg/events"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestClusterEventTouchesOnlyItsSourceRules checks the index: an event of one source renders the
// templated rules of that source only, and a re-sent event with the same variables renders
// nothing (the pair's render key is unchanged).
func TestClusterEventTouchesOnlyItsSourceRules(t *testing.T) {
	reg := prometheus.NewRegistry()
	pub := &countingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(reg))
	ctx := context.Background()
	dynamic := loadExampleRule(t, "readme-02-dynamic-rule-jinja.yaml").Spec.Enforcements
	for i, filters := range []map[string]string{nil, {"driver": "gke"}, {"driver": "gke"}} {
		cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: string(rune('a' + i)), UID: types.UID(rune('a' + i)), Generation: 1},
			Spec: v1beta1.ClusterRuleSpec{Enforcements: dynamic, Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Filters: filters}}}}
		if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
			t.Fatal(err)
		}
	}
	misses := func() float64 { return testutil.ToFloat64(e.metrics.renders.WithLabelValues("miss")) }

	gke := testCluster("g", nil, true)
	gke.Source.ID = events.SourceID("rancher", "enforcement", "rancher", map[string]string{"driver": "gke"})
	if err := e.applyCluster(ctx, gke, 1, 0); err != nil {
		t.Fatal(err)
	}
	if misses() != 2 || pub.n != 2 {
		t.Errorf("gke cluster: %v renders, %d intents; want 2 and 2 (rules b and c only)", misses(), pub.n)
	}
	if err := e.applyCluster(ctx, gke, 2, 0); err != nil {
		t.Fatal(err)
	}
	if misses() != 2 || pub.n != 2 {
		t.Errorf("same variables again: %v renders, %d intents; want no new ones", misses(), pub.n)
	}
	other := testCluster("o", nil, true)
	if err := e.applyCluster(ctx, other, 3, 0); err != nil {
		t.Fatal(err)
	}
	if misses() != 3 || pub.n != 3 {
		t.Errorf("default-source cluster: %v renders, %d intents; want 3 and 3 (rule a only)", misses(), pub.n)
	}
	if st, _ := e.status("ns/b", 1); st.MatchedClusters != 1 || st.Clusters[0].Name != "g" {
		t.Errorf("rule b status: %+v", st)
	}
}

// TestRuleChangeReevaluatesOnlyThatRule: a new generation of one rule renders and publishes for
// that rule's pairs alone; a rule over the same clusters is not evaluated again.
func TestRuleChangeReevaluatesOnlyThatRule(t *testing.T) {
	pub := &countingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(prometheus.NewRegistry()))
	ctx := context.Background()
	rule := func(name string, generation int64, path string) *ruleState {
		enforcements := loadExampleRule(t, "readme-02-dynamic-rule-jinja.yaml").Spec.Enforcements
		enforcements[0].Path = path
		return ruleFromSpec(&v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), Generation: generation},
			Spec: v1beta1.ClusterRuleSpec{Enforcements: enforcements, Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}, "enforcement")
	}
	for _, name := range []string{"a", "b"} {
		if err := e.applyRule(ctx, rule(name, 1, "helm-guestbook")); err != nil {
			t.Fatal(err)
		}
	}
	for i, name := range []string{"x", "y", "z"} {
		if err := e.applyCluster(ctx, testCluster(name, nil, true), uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	misses := func() float64 { return testutil.ToFloat64(e.metrics.renders.WithLabelValues("miss")) }
	if misses() != 6 || pub.n != 6 {
		t.Fatalf("2 rules × 3 clusters: %v renders, %d intents; want 6 and 6", misses(), pub.n)
	}
	if err := e.applyRule(ctx, rule("a", 2, "helm-guestbook-v2")); err != nil {
		t.Fatal(err)
	}
	hits := testutil.ToFloat64(e.metrics.renders.WithLabelValues("hit"))
	if misses() != 9 || hits != 0 || pub.n != 9 {
		t.Errorf("rule a changed: %v renders, %v cache hits, %d intents in all; want 9, 0 and 9 (rule a's 3 pairs only; evaluating rule b again would hit the cache)", misses(), hits, pub.n)
	}
}

// TestOldRendersArePurged checks that the render cache keeps only the current generation of a
// templated rule, and nothing once the rule is deleted.
func TestOldRendersArePurged(t *testing.T) {
	st := newMemStore()
	e := testEngine(st, &countingPublisher{}, newMetrics(nil))
	ctx := context.Background()
	if err := e.applyCluster(ctx, testCluster("a", nil, true), 1, 0); err != nil {
		t.Fatal(err)
	}
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1", Generation: 1},
		Spec: loadExampleRule(t, "readme-02-dynamic-rule-jinja.yaml").Spec}
	keys := func() []string {
		st.mu.Lock()
		defer st.mu.Unlock()
		return slices.Sorted(maps.Keys(st.renders))
	}
	for gen := int64(1); gen <= 2; gen++ {
		cr.Generation = gen
		cr.Spec.Enforcements[0].Path = fmt.Sprintf("v%d", gen)
		if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if k := keys(); len(k) != 1 || !strings.HasPrefix(k[0], "u1.2.") {
			return fmt.Errorf("render keys %v, want one of generation 2", k)
		}
		return nil
	})
	if err := e.deleteRule(ctx, "ns/r", events.RuleRef{}, ""); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		if k := keys(); len(k) != 0 {
			return fmt.Errorf("render keys %v after delete", k)
		}
		return nil
	})
}

// TestPairsNamedAcrossRules checks the by-name index outcomes and handovers find pairs by: it is
// kept a cluster name for all rules, and answers for one rule only its own pairs of that name,
// through renames, clashes and removals.
func TestPairsNamedAcrossRules(t *testing.T) {
	e := testEngine(newMemStore(), &countingPublisher{}, newMetrics(nil))
	pair := func(name string) *pairState { return &pairState{Cluster: shareTarget(events.Target{Name: name})} }
	check := func(step, rule, name string, want ...string) {
		t.Helper()
		if got := e.pairsNamed(rule, name); !slices.Equal(got, want) {
			t.Errorf("%s: pairs of rule %s named %q = %v, want %v", step, rule, name, got, want)
		}
	}
	for i := range 3 {
		e.setPair(fmt.Sprintf("ns/r%d", i), "c1", pair("a"))
	}
	e.setPair("ns/r0", "c2", pair("a")) // a clash: another cluster of the same name, for one rule
	check("three rules, one clash", "ns/r0", "a", "c1", "c2")
	check("three rules, one clash", "ns/r1", "a", "c1")
	check("three rules, one clash", "ns/r9", "a")
	if n := len(e.pairByName); n != 1 {
		t.Errorf("%d index entries for one cluster name, want 1", n)
	}

	e.setPair("ns/r1", "c1", pair("b")) // r1's pair of c1 now names the cluster b
	check("renamed for r1", "ns/r1", "a")
	check("renamed for r1", "ns/r1", "b", "c1")
	check("renamed for r1", "ns/r2", "a", "c1")
	check("renamed for r1", "ns/r2", "b") // c1 is listed under b, but r2's pair of it names a

	e.setPair("ns/r1", "c1", pair("b")) // the same pair again counts once
	e.setPair("ns/r1", "c1", nil)
	check("r1's pair gone", "ns/r1", "b")
	if _, ok := e.pairByName["b"]; ok {
		t.Error("the name b is still indexed with no pair left under it")
	}
	for _, rule := range []string{"ns/r0", "ns/r2"} {
		e.setPair(rule, "c1", nil)
	}
	check("c1's pairs gone", "ns/r0", "a", "c2")
	e.setPair("ns/r0", "c2", nil)
	if len(e.pairByName) != 0 || len(e.pairs) != 0 {
		t.Errorf("all pairs gone, yet the index keeps %v and the pairs %v", e.pairByName, e.pairs)
	}
}
