package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestRestartMidStream stops the rule engine while it works through a backlog of cluster events,
// publishes more while it is down, and starts it again: every (cluster, enforcement) gets exactly
// one install intent, the clusters that went away exactly one uninstall, and a rule created after
// the restart still sees every cluster (the view survived).
func TestRestartMidStream(t *testing.T) {
	const clusters, gone = 400, 10
	e := newEnv(t)
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(),
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	stop := e.start()
	var backlog []events.Event
	for i := range clusters {
		backlog = append(backlog, appeared(testCluster(fmt.Sprintf("c%03d", i), nil, true), uint64(i+1)))
	}
	if err := e.pub.PublishAll(t.Context(), backlog); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, func() error {
		if n := len(e.intents()); n == 0 {
			return fmt.Errorf("no intents yet")
		}
		return nil
	})
	stop()
	atStop := len(e.intents())
	t.Logf("stopped after %d of %d install intents", atStop, 2*clusters)

	for i := range gone {
		e.publish(&events.ClusterGone{Source: rancherSource(), Key: fmt.Sprintf("c-c%03d", i), Name: fmt.Sprintf("c%03d", i),
			Revision: uint64(clusters + i + 1), LastSeen: time.Now()})
	}
	e.start()
	want := 2*clusters + 2*gone
	testenv.Eventually(t, 60*time.Second, func() error {
		if n := len(e.intents()); n != want {
			return fmt.Errorf("%d intents, want %d", n, want)
		}
		return nil
	})
	e.createRule("late", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitReady("late", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != clusters-gone || len(st.Clusters) != v1beta1.MaxStatusEntries || st.Clusters[0].Name != "c010" {
			return fmt.Errorf("late rule matches %d clusters (%d listed), want %d (%d listed from c010)",
				st.MatchedClusters, len(st.Clusters), clusters-gone, v1beta1.MaxStatusEntries)
		}
		return nil
	})
	want += clusters - gone
	testenv.Eventually(t, 30*time.Second, func() error {
		if n := len(e.intents()); n != want {
			return fmt.Errorf("%d intents, want %d", n, want)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond) // a duplicate would show up now
	seen := map[string]int{}
	for _, ev := range e.intents() {
		s := intentSummary(ev)
		if in, ok := ev.(*events.InstallIntent); ok {
			s = in.Rule.Name + " " + s
		}
		seen[s]++
	}
	var dups []string
	for s, n := range seen {
		if n != 1 {
			dups = append(dups, fmt.Sprintf("%s ×%d", s, n))
		}
	}
	if len(dups) > 0 || len(seen) != want {
		t.Errorf("%d distinct of %d intents; repeated: %s", len(seen), want, strings.Join(dups, ", "))
	}
}

func TestMetricsLint(t *testing.T) {
	reg := newMetricsRegistryForTest()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// TestNATSRestart restarts the NATS server under a running engine: it reconnects, its consumer
// resumes, and the cluster view and records (in the KV bucket) are intact.
func TestNATSRestart(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.createRule("r", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.publish(appeared(testCluster("before", nil, true), 1))
	e.waitIntents("install before guestbook")

	e.nats.Restart(t)
	testenv.Eventually(t, 20*time.Second, func() error {
		if !e.nc.IsConnected() {
			return fmt.Errorf("test client not reconnected")
		}
		return nil
	})
	e.publish(appeared(testCluster("after", nil, true), 2))
	e.waitIntents("install before guestbook", "install after guestbook")
	e.publish(&events.ClusterGone{Source: rancherSource(), Key: "c-before", Name: "before", Revision: 3, LastSeen: time.Now()})
	e.waitIntents("install before guestbook", "install after guestbook", "uninstall before guestbook ClusterGone")
}

// A pair whose cluster the engine's view lacks keeps what it has: only ClusterGone removes.
// The view lacked such a cluster when the engine stopped between deciding for the cluster's
// event and recording the cluster (a SIGTERM while a NATS node was lost, in the failover test):
// the evaluation at the next start then uninstalled the pair, and the install that followed the
// redelivered event carried the first install's id, which NATS dropped as a duplicate, so the
// cluster kept no Application.
func TestPairOfAClusterMissingFromTheViewIsKept(t *testing.T) {
	e := newEnv(t)
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	stop := e.start()
	e.publish(appeared(testCluster("a", nil, true), 1), appeared(testCluster("b", nil, true), 2))
	e.waitIntentsOfClusters("install a guestbook", "install b guestbook")
	stop()

	// The view loses cluster a; its pair stays, as a stop between the two writes left it.
	kv, err := e.js.KeyValue(t.Context(), events.BucketRuleEngineState)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(t.Context(), "cluster."+clusterID(rancherSource().ID, "c-a")); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitReady("fleet", v1beta1.ReasonProgressing, nil)
	time.Sleep(time.Second) // an uninstall decided at the start would be on the stream now
	e.waitIntentsOfClusters("install a guestbook", "install b guestbook")

	// The cluster's event comes again (here as an update): its pair is as it was, nothing to send.
	e.publish(appeared(testCluster("a", map[string]string{"env": "prod"}, true), 3))
	e.waitReady("fleet", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 2 {
			return fmt.Errorf("%d matched clusters, want 2", st.MatchedClusters)
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond)
	e.waitIntentsOfClusters("install a guestbook", "install b guestbook")
}
