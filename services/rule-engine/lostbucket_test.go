package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// A lost and recreated inventory bucket starts its revisions again at 1. The scanner then
// announces every cluster again with low revisions: the engine still follows them (an update
// changes the pair, a gone cluster is uninstalled), because the stream orders them after what
// it knew. Before, every such event looked older than the engine's record and was ignored: the
// fleet froze until the new revisions passed the old ones.
func TestRecreatedInventoryStillDrivesTheEngine(t *testing.T) {
	e := newEnv(t)
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.start()
	a, b := testCluster("a", nil, true), testCluster("b", nil, true)
	e.publish(appeared(a, 500), appeared(b, 501))
	e.waitIntentSet("install a guestbook", "install b guestbook")

	// The inventory is recreated: revisions from 1 again, a now at another URL, b gone.
	moved := a
	moved.URL = "https://rancher.example/k8s/clusters/c-a-moved"
	e.publish(appeared(moved, 1), &events.ClusterGone{Source: rancherSource(), Key: b.Key, Name: b.Name, Revision: 2, LastSeen: time.Now()})
	got := e.waitIntentSet("install a guestbook", "install b guestbook", "install a guestbook", "uninstall b guestbook ClusterGone")
	last := got[len(got)-2]
	if in, ok := last.(*events.InstallIntent); ok && in.Cluster.URL != moved.URL {
		t.Errorf("install after the recreated inventory targets %s, want %s", in.Cluster.URL, moved.URL)
	}
}

// A lost rule-engine state bucket (recreated empty at the next start) has the cluster view
// rebuilt from the stream: the rule still matches its clusters and nothing is uninstalled.
// Before, the engine started with no cluster and matched none until each changed again.
func TestLostStateBucketIsRebuiltWithoutUninstalls(t *testing.T) {
	e := newEnv(t)
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	stop := e.start()
	e.publish(appeared(testCluster("a", nil, true), 1), appeared(testCluster("b", nil, true), 2),
		appeared(testCluster("c", nil, true), 3),
		&events.ClusterGone{Source: rancherSource(), Key: "c-c", Name: "c", Revision: 4, LastSeen: time.Now()})
	e.waitIntentSet("install a guestbook", "install b guestbook", "install c guestbook", "uninstall c guestbook ClusterGone")
	stop()

	if err := e.js.DeleteKeyValue(context.Background(), events.BucketRuleEngineState); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitReady("fleet", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 2 {
			return fmt.Errorf("rule matches %d clusters after the state bucket was lost, want 2 (a, b)", st.MatchedClusters)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // an uninstall would show up now
	for _, ev := range e.intents() {
		if u, ok := ev.(*events.UninstallIntent); ok && u.Cluster.Name != "c" {
			t.Errorf("uninstall after the state bucket was lost: %s", intentSummary(ev))
		}
	}
	// The rebuilt view keeps following the clusters.
	e.publish(&events.ClusterGone{Source: rancherSource(), Key: "c-b", Name: "b", Revision: 5, LastSeen: time.Now()})
	testenv.Eventually(t, 20*time.Second, func() error {
		for _, ev := range e.intents() {
			if intentSummary(ev) == "uninstall b guestbook ClusterGone" {
				return nil
			}
		}
		return fmt.Errorf("no uninstall of b after it was gone")
	})
}
