package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
)

// TestStatusWritesFollowTheInterval: while clusters keep appearing, a rule's status is written
// about once per STATUS_INTERVAL, not once per API round trip. (The controller used to reconcile
// the update its own status write caused, and each of those wrote again as soon as the counts had
// moved.) The status still catches up with the last cluster.
func TestStatusWritesFollowTheInterval(t *testing.T) {
	e := newEnv(t)
	const interval = 300 * time.Millisecond
	e.vars["STATUS_INTERVAL"] = interval.String()
	s := e.startService()
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(),
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitReady("fleet", v1beta1.ReasonNoClusters, nil)
	before := statusWrites(t, s.Metrics)

	const clusters = 200
	start := time.Now()
	for i := range clusters {
		e.publish(appeared(testCluster(fmt.Sprintf("c%03d", i), norman, true), uint64(i+1)))
		time.Sleep(10 * time.Millisecond) // a steady stream, as a source's first listing is
	}
	e.waitReady("fleet", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != clusters {
			return fmt.Errorf("matched %d clusters, want %d", st.MatchedClusters, clusters)
		}
		return nil
	})
	elapsed := time.Since(start)
	writes := statusWrites(t, s.Metrics) - before
	// One notice per interval at most, each one reconcile and at most one write; one more for
	// the interval that was running when the stream began.
	if limit := int(elapsed/interval) + 2; writes > limit {
		t.Errorf("%d status writes in %s with STATUS_INTERVAL %s, want at most %d", writes, elapsed.Round(time.Millisecond), interval, limit)
	}
	if writes < 2 {
		t.Errorf("%d status writes while %d clusters appeared over %s, want the status to follow them", writes, clusters, elapsed.Round(time.Millisecond))
	}
}

// statusWrites reads enforcement_rule_engine_status_writes_total from the service's metrics.
func statusWrites(t *testing.T, addr string) int {
	t.Helper()
	const name = "enforcement_rule_engine_status_writes_total "
	for line := range strings.Lines(scrape(t, addr)) {
		if v, ok := strings.CutPrefix(line, name); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int(n)
		}
	}
	t.Fatalf("no %s in the metrics", strings.TrimSpace(name))
	return 0
}
