package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMatchedClustersFollowTheView checks the status' matched clusters, which are kept between
// status computations, against the view as clusters of the rule's source appear, change labels
// and go, and that a status computed twice without such a change counts them once.
func TestMatchedClustersFollowTheView(t *testing.T) {
	e := prodRuleEngine(t)
	ctx := context.Background()
	matched := func(want ...string) {
		t.Helper()
		st, _ := e.status("ns/r", 1)
		var names []string
		for _, c := range st.Clusters {
			names = append(names, c.Name)
		}
		if int(st.MatchedClusters) != len(want) || strings.Join(names, ",") != strings.Join(want, ",") {
			t.Fatalf("matched %d: %v; want %v", st.MatchedClusters, names, want)
		}
	}
	prod, dev := map[string]string{"env": "prod"}, map[string]string{"env": "dev"}
	for i, c := range []events.Cluster{testCluster("b", prod, true), testCluster("a", dev, true)} {
		if err := e.applyCluster(ctx, c, uint64(i+1), 0); err != nil {
			t.Fatal(err)
		}
	}
	matched("b")
	kept := e.rules["ns/r"].matched
	matched("b")
	if e.rules["ns/r"].matched != kept {
		t.Error("matched clusters counted again without a change of the view")
	}
	if err := e.applyCluster(ctx, testCluster("a", prod, true), 3, 0); err != nil {
		t.Fatal(err)
	}
	matched("a", "b")
	if err := e.applyClusterGone(ctx, &events.ClusterGone{Source: rancherSource(), Key: "c-b", Name: "b", Revision: 4, LastSeen: time.Now()}, 0); err != nil {
		t.Fatal(err)
	}
	matched("a")
}

// TestMatchedViewStaysExact changes the view at random, beyond the status' list of
// v1beta1.MaxStatusEntries names: clusters appear, change labels and names (names shared by
// several clusters among them), come again with only another label, and go. After each change the kept matched view must equal a
// count from scratch; and most changes must be mended in place rather than counted again.
func TestMatchedViewStaysExact(t *testing.T) {
	e := prodRuleEngine(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	present := map[string]events.Cluster{}
	kept := 0
	const steps = 600
	for step := range steps {
		key := fmt.Sprintf("k-%03d", rng.IntN(150))
		rev := uint64(step + 1)
		c, ok := present[key]
		switch roll := rng.IntN(4); {
		case ok && roll == 0:
			if err := e.applyClusterGone(ctx, &events.ClusterGone{Source: rancherSource(), Key: key, Revision: rev, LastSeen: time.Now()}, 0); err != nil {
				t.Fatal(err)
			}
			delete(present, key)
			c = events.Cluster{}
		case ok && roll == 1:
			c.Labels = map[string]string{"env": c.Labels["env"], "seen": strconv.Itoa(step)}
		default:
			env := []string{"prod", "prod", "dev"}[rng.IntN(3)]
			c = events.Cluster{Source: rancherSource(), Key: key, Name: fmt.Sprintf("n-%03d", rng.IntN(120)),
				URL: "https://rancher.example/k8s/clusters/" + key, Labels: map[string]string{"env": env}, State: "active", Eligible: true}
		}
		if c.Key != "" {
			if err := e.applyCluster(ctx, c, rev, 0); err != nil {
				t.Fatal(err)
			}
			present[key] = c
		}
		r := e.rules["ns/r"]
		before := r.matched
		st, _ := e.status("ns/r", 1)
		if before != nil && r.matched == before {
			kept++
		}
		full := e.countMatched(r)
		if st.MatchedClusters != full.count || !slices.Equal(statusNames(st.Clusters), statusNames(full.first)) {
			t.Fatalf("step %d: kept view counts %d: %v; counted from scratch %d: %v",
				step, st.MatchedClusters, statusNames(st.Clusters), full.count, statusNames(full.first))
		}
	}
	if kept < steps/2 {
		t.Errorf("the matched view was mended in place after %d of %d changes, want most", kept, steps)
	}
}

// TestEnforcementTallyStaysExact drives a rule's pairs at random through what changes their
// count: clusters appear (selected or not), come back at a new revision and go, and each
// outcome an enforcement can have arrives for a pair's current intent (installed, failed, by a
// name conflict among them, a beforeInstall trigger blocking it and then delivered, an
// afterInstall trigger failing and then delivered). After each step the tally kept as the
// pairs changed must equal one counted from scratch over all of them.
func TestEnforcementTallyStaysExact(t *testing.T) {
	e := prodRuleEngine(t)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	const steps = 800
	for step := range steps {
		key := fmt.Sprintf("k-%02d", rng.IntN(60))
		p := e.pairs["ns/r"][clusterID(rancherSource().ID, key)]
		var ev events.Event
		switch roll := rng.IntN(10); {
		case roll == 0:
			ev = &events.ClusterGone{Source: rancherSource(), Key: key, Revision: uint64(step + 1), LastSeen: time.Now()}
		case roll <= 3 || p == nil:
			env := []string{"prod", "prod", "dev"}[rng.IntN(3)]
			c := testCluster(key, map[string]string{"env": env}, true)
			c.Key, c.URL = key, "https://rancher.example/k8s/clusters/"+key+"/"+strconv.Itoa(rng.IntN(2))
			ev = &events.ClusterAppeared{Revision: uint64(step + 1), Cluster: c}
		default:
			st := p.Enforcements[0]
			rule, cluster, id := p.Rule.Value(), p.Cluster.Value().Name, st.intentID()
			switch roll {
			case 4, 5:
				ev = &events.InstallSucceeded{IntentID: id, Rule: rule, Cluster: cluster, Enforcement: st.Name,
					Application: cluster + "-" + st.Name, Created: true, SpecHash: st.SpecHash}
			case 6:
				reason := []string{"ApplyFailed", v1beta1.ReasonNameConflict}[rng.IntN(2)]
				ev = &events.InstallFailed{IntentID: id, Rule: rule, Cluster: cluster, Enforcement: st.Name,
					Reason: reason, Message: "step " + strconv.Itoa(step)}
			case 7:
				ev = &events.TriggerFailed{DeliveryID: "d" + strconv.Itoa(step), IntentID: id, Rule: rule, Cluster: cluster,
					Enforcement: st.Name, Phase: []string{events.PhaseBeforeInstall, events.PhaseAfterInstall}[rng.IntN(2)],
					FailurePolicy: "Fail", Attempts: 3, Message: "hook down"}
			default:
				ev = &events.TriggerDelivered{DeliveryID: "d" + strconv.Itoa(step), IntentID: id, Rule: rule, Cluster: cluster,
					Enforcement: st.Name, Phase: []string{events.PhaseBeforeInstall, events.PhaseAfterInstall}[rng.IntN(2)],
					StatusCode: 200, Attempts: 1}
			}
		}
		var err error
		switch ev := ev.(type) {
		case *events.ClusterAppeared:
			err = e.applyCluster(ctx, ev.Cluster, ev.Revision, 0)
		case *events.ClusterGone:
			err = e.applyClusterGone(ctx, ev, 0)
		default:
			err = e.applyOutcome(ctx, ev, events.Meta{ID: fmt.Sprintf("outcome-%d", step)})
		}
		if err != nil {
			t.Fatalf("step %d (%T): %v", step, ev, err)
		}
		checkTally(t, e, "ns/r", fmt.Sprintf("step %d (%T)", step, ev))
	}
	got := e.tallies["ns/r"].enfTally()
	if got.installed == 0 || got.pending == 0 || got.installFailed == 0 || got.nameConflicts == 0 || got.blocked == 0 || got.afterFailed == 0 {
		t.Errorf("the steps did not reach every count: %+v", got)
	}
}

// checkTally fails t if the tally kept for rule differs from one counted over all of its pairs.
// Which blocked enforcement's message a tally keeps depends on the order of the walk, so
// only whether there is one is compared.
func checkTally(t *testing.T, e *engine, rule, when string) {
	t.Helper()
	kept, full := e.tallies[rule].enfTally(), tallyEnforcements(e.pairs[rule])
	if (kept.blockedMsg == "") != (full.blockedMsg == "") {
		t.Fatalf("%s: kept tally blocked by %q, counted from scratch by %q", when, kept.blockedMsg, full.blockedMsg)
	}
	kept.blockedMsg, full.blockedMsg = "", ""
	if !reflect.DeepEqual(kept, full) {
		t.Fatalf("%s: kept tally %+v, counted from scratch %+v", when, kept, full)
	}
	if _, ok := e.tallies[rule]; ok != (len(e.pairs[rule]) > 0) {
		t.Fatalf("%s: a tally kept: %v, with %d pairs", when, ok, len(e.pairs[rule]))
	}
}

func statusNames(cs []v1beta1.ClusterStatus) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.Name
	}
	return names
}

// prodRuleEngine is an engine with one rule, ns/r, which installs one package on the clusters
// of the Rancher source labelled env=prod.
func prodRuleEngine(t *testing.T) *engine {
	t.Helper()
	e := testEngine(newMemStore(), &recordingPublisher{}, newMetrics(nil))
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
			Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"env": "prod"}}}}}
	if err := e.applyRule(context.Background(), ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	return e
}
