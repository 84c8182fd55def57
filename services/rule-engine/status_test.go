package main

import (
	"context"
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
	e := testEngine(newMemStore(), &recordingPublisher{}, newMetrics(nil))
	ctx := context.Background()
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
			Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"env": "prod"}}}}}
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
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
