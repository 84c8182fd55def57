package main

import (
	"context"
	"fmt"
	"math/rand/v2"
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
