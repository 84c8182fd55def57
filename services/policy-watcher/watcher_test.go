package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// directEnv is the environment of the service without NATS, as the original ran.
func directEnv(c *cluster, claim string, poll, stable string) map[string]string {
	return map[string]string{
		"KUBECONFIG":          c.kube.Kubeconfig,
		"WATCH_NAMESPACE":     c.ns,
		"TARGET_CLAIM_NAME":   claim,
		"POLL_INTERVAL_SEC":   poll,
		"STABLE_DURATION_SEC": stable,
	}
}

// Every case of the fold, end to end through the API server: the missing claim is created
// (labelled as Enforcement's), and each Policy change is seen through the watch (the poll
// interval is far longer than the test).
func TestAggregationCases(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "fold")
	claim := c.name("fold-claim")
	s := startService(t, directEnv(c, claim, "60", "0"))
	s.WaitReady(10 * time.Second)

	c.waitClaim(claim, events.Empty, 10*time.Second)
	if _, labels := c.claim(claim); labels[labelManagedBy] != managedByValue {
		t.Fatalf("created ClusterClaim labels %v, want %s=%s", labels, labelManagedBy, managedByValue)
	}
	s.waitLog(`"msg":"Watching Policies"`, 10*time.Second)

	steps := []struct {
		name   string
		change func()
		want   string
	}{
		{"one compliant policy", func() { c.createPolicy("a", "Compliant") }, events.Compliant},
		{"a policy without status", func() { c.createPolicy("b", "") }, events.NonCompliant},
		{"status pending", func() { c.setPolicy("b", "Pending") }, events.NonCompliant},
		{"both compliant", func() { c.setPolicy("b", "Compliant") }, events.Compliant},
		{"one noncompliant", func() { c.setPolicy("a", "NonCompliant") }, events.NonCompliant},
		{"noncompliant policy deleted", func() { c.deletePolicy("a") }, events.Compliant},
		{"status removed", func() { c.setPolicy("b", "") }, events.NonCompliant},
		{"last policy deleted", func() { c.deletePolicy("b") }, events.Empty},
	}
	for _, st := range steps {
		st.change()
		c.waitClaim(claim, st.want, 5*time.Second)
		t.Logf("%s: %s", st.name, st.want)
	}
	if v := s.metric(`enforcement_policy_watcher_claim_value{value="empty"}`); v != 1 {
		t.Errorf("claim_value{empty} = %v, want 1", v)
	}
	if v := s.metric(`enforcement_policy_watcher_claim_writes_total{value="compliant"}`); v != 3 {
		t.Errorf("claim_writes_total{compliant} = %v, want 3 (steps 1, 4 and 6)", v)
	}
}

// The debounce on the real API server with a 2 s stable duration and a 60 s poll: compliant
// held shorter is never written, noncompliant and empty are written at once, and compliant held
// longer is written when the stable duration ends (the timer), not at the next poll.
func TestDebounceTimeline(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "debounce")
	claim := c.name("debounce-claim")
	const stable = 2 * time.Second
	c.createPolicy("p", "NonCompliant")
	s := startService(t, directEnv(c, claim, "60", "2"))
	c.waitClaim(claim, events.NonCompliant, 10*time.Second)
	s.waitLog(`"msg":"Watching Policies"`, 10*time.Second)

	// Flapping: compliant for 0.7 s, then noncompliant, then compliant for 0.7 s, then empty.
	c.setPolicy("p", "Compliant")
	c.holdClaim(claim, events.NonCompliant, 700*time.Millisecond, false)
	c.setPolicy("p", "NonCompliant")
	c.holdClaim(claim, events.NonCompliant, 300*time.Millisecond, false)
	c.setPolicy("p", "Compliant")
	c.holdClaim(claim, events.NonCompliant, 700*time.Millisecond, false)
	c.deletePolicy("p")
	start := time.Now()
	_, at := c.waitClaim(claim, events.Empty, 2*time.Second)
	t.Logf("empty written %s after the last policy was deleted", at.Sub(start).Round(time.Millisecond))
	c.holdClaim(claim, events.Empty, stable+500*time.Millisecond, false) // the streak did not survive

	// Held longer: written at the end of the stable duration.
	c.createPolicy("q", "Compliant")
	start = time.Now()
	got, at := c.waitClaim(claim, events.Compliant, stable+3*time.Second)
	late := at.Sub(start)
	if late < stable {
		t.Fatalf("compliant written %s after it began, before the stable duration %s", late, stable)
	}
	t.Logf("compliant written %s after it began (stable %s)", late.Round(time.Millisecond), stable)
	if late > stable+1500*time.Millisecond {
		t.Errorf("compliant written %s after it began: the timer should write it at %s", late, stable)
	}
	if !got.HasSince {
		t.Errorf("the debounce clock annotation is missing after compliant was written")
	}

	// Noncompliant at once, and the clock is removed with it.
	c.setPolicy("q", "NonCompliant")
	start = time.Now()
	got, at = c.waitClaim(claim, events.NonCompliant, 2*time.Second)
	t.Logf("noncompliant written %s after the change", at.Sub(start).Round(time.Millisecond))
	if got.HasSince {
		t.Errorf("the debounce clock annotation survived a noncompliant fold")
	}
}

// A claim edited by hand is put back, and a claim that is right is never written: its
// resourceVersion stays the same across many polls.
func TestPutBackAndNoWriteWhenRight(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "putback")
	claim := c.name("putback-claim")
	c.createPolicy("p", "Compliant")
	s := startService(t, directEnv(c, claim, "300ms", "1"))
	c.waitClaim(claim, events.Compliant, 10*time.Second)

	before := c.holdClaim(claim, events.Compliant, 2*time.Second, true) // about 6 polls
	if n := s.metric(`enforcement_policy_watcher_evaluations_total{result="compliant"}`); n < 5 {
		t.Errorf("only %v evaluations in 2 s with a 300 ms poll", n)
	}
	t.Logf("resourceVersion %s unchanged over 2 s of polls", before.ResourceVersion)

	// By hand to a value of the watcher's, and to a foreign one: both put back. The streak is
	// older than the stable duration, so compliant comes back at once.
	for _, v := range []string{events.NonCompliant, "somebody-else"} {
		c.editClaim(claim, v)
		start := time.Now()
		_, at := c.waitClaim(claim, events.Compliant, 3*time.Second)
		t.Logf("hand edit to %q put back after %s", v, at.Sub(start).Round(time.Millisecond))
	}
	c.holdClaim(claim, events.Compliant, time.Second, true)

	// Deleted: created again, with the value it must hold.
	if err := c.dyn.Resource(claimsGVR).Delete(context.Background(), claim, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, at := c.waitClaim(claim, events.Compliant, 3*time.Second)
	t.Logf("deleted claim created again after %s", at.Sub(start).Round(time.Millisecond))
}

// The debounce clock survives a restart: stopped halfway through the stable duration, the
// restarted service writes compliant when the original streak has lasted the stable duration,
// not a full stable duration after the restart.
func TestRestartKeepsDebounceClock(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "restart")
	claim := c.name("restart-claim")
	c.restartMidDebounce(claim, directEnv(c, claim, "60", "4"), func() {
		if got, _ := c.claim(claim); got.Value != events.NonCompliant || !got.HasSince {
			t.Fatalf("after stopping mid-debounce: %+v", got)
		}
	})
}

// run serves /readyz (the Kubernetes API only, without NATS) and returns nil promptly when
// its context is cancelled.
func TestRunReadyAndShutdown(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "ready")
	s := startService(t, directEnv(c, c.name("ready-claim"), "30", "120"))
	s.WaitReady(10 * time.Second)
	if code, body := httpGet(t, "http://"+s.Health+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz: %d %s", code, body)
	}
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	if code, _ := httpGet(t, "http://"+s.Health+"/readyz"); code != 0 {
		t.Errorf("/readyz still served after shutdown")
	}
}

// With NATS unreachable the service is not ready (its claim writer is not bound), and
// cancelling it while it waits for NATS still returns nil promptly.
func TestRunNotReadyWithoutNATS(t *testing.T) {
	t.Parallel()
	c := newCluster(t, "no-nats")
	env := directEnv(c, c.name("no-nats-claim"), "30", "120")
	env["NATS_URL"] = "nats://" + testenv.FreeAddr(t)
	s := startService(t, env)
	s.waitLog("NATS not reachable yet", 10*time.Second)
	if code, body := httpGet(t, "http://"+s.Health+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "consumer") {
		t.Fatalf("/readyz without NATS: %d %s, want 503 naming the consumer", code, body)
	}
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown while waiting for NATS took %s", d)
	}
}

// A configuration error stops run at once with the variable named.
func TestRunRejectsBadConfig(t *testing.T) {
	err := run(t.Context(), func(k string) string {
		return map[string]string{"POLL_INTERVAL_SEC": "never"}[k]
	}, &testenv.SyncBuffer{}, &testenv.SyncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "POLL_INTERVAL_SEC") {
		t.Fatalf("run with a bad POLL_INTERVAL_SEC: %v", err)
	}
}
