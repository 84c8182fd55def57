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
// about once per maxWait (statusMaxWaitFactor × STATUS_INTERVAL), not once per API round trip or
// per interval. (The controller used to reconcile the update its own status write caused, and
// each of those wrote again as soon as the counts had moved.) The status still follows the
// stream and catches up with the last cluster.
func TestStatusWritesFollowTheInterval(t *testing.T) {
	e := newEnv(t)
	const interval = 300 * time.Millisecond
	const maxWait = statusMaxWaitFactor * interval
	e.vars["STATUS_INTERVAL"] = interval.String()
	s := e.startService()
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(),
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitReady("fleet", v1beta1.ReasonNoClusters, nil)
	before := statusWrites(t, s.Metrics)

	const clusters = 500 // a stream longer than maxWait
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
	// One notice per maxWait at most while the stream lasts, each one reconcile and at most one
	// write, and one more once it has paused.
	if limit := int(elapsed/maxWait) + 2; writes > limit {
		t.Errorf("%d status writes in %s with STATUS_INTERVAL %s, want at most %d", writes, elapsed.Round(time.Millisecond), interval, limit)
	}
	if writes < 2 {
		t.Errorf("%d status writes while %d clusters appeared over %s, want the status to follow them", writes, clusters, elapsed.Round(time.Millisecond))
	}
}

// TestNotifierWaitsForAPauseOrMaxWait drives the notifier's schedule on a clock of its own: a
// rule is passed on an interval after its last notice, or maxWait after its first while notices
// keep coming; each rule keeps its own schedule.
func TestNotifierWaitsForAPauseOrMaxWait(t *testing.T) {
	const interval = time.Second
	n := newNotifier(interval)
	t0 := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	now := t0
	n.now = func() time.Time { return now }
	at := func(d time.Duration) time.Time { return t0.Add(d) }

	// "quiet": one notice, due an interval later.
	n.add("ops/quiet")
	// "busy": a notice every 100 ms for 25 s.
	var passed []time.Duration // when "busy" was passed on
	for step := time.Duration(0); step <= 25*time.Second; step += 100 * time.Millisecond {
		now = at(step)
		n.add("ops/busy")
		keys, next := n.due(now)
		for _, k := range keys {
			switch {
			case k == "ops/busy":
				passed = append(passed, step)
			case k == "ops/quiet" && step != interval:
				t.Errorf("ops/quiet passed on at %s, want %s", step, interval)
			}
		}
		if step < interval && !next.Equal(at(interval)) {
			t.Errorf("at %s the next key is due at %s, want the quiet rule's %s", step, next.Sub(t0), interval)
		}
	}
	// The busy rule's first notice came at 0: due at maxWait, then maxWait after each next first
	// notice (the one just after it was passed on).
	want := []time.Duration{10 * time.Second, 20*time.Second + 100*time.Millisecond}
	if fmt.Sprint(passed) != fmt.Sprint(want) {
		t.Errorf("ops/busy passed on at %v, want %v", passed, want)
	}
	// The notices stop: it is passed on an interval after the last one.
	now = at(25*time.Second + interval - time.Millisecond)
	if keys, next := n.due(now); len(keys) != 0 || !next.Equal(at(25*time.Second+interval)) {
		t.Errorf("just before the pause ends: %v due, next at %s; want none, next at %s", keys, next.Sub(t0), 25*time.Second+interval)
	}
	now = at(25*time.Second + interval)
	if keys, next := n.due(now); fmt.Sprint(keys) != "[ops/busy]" || !next.IsZero() {
		t.Errorf("after the pause: %v due, next at %v; want [ops/busy] and nothing left", keys, next)
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
