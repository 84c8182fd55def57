package main

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/events/eventstest"
	"github.com/enforcement-io/enforcement/pkg/testenv"
)

// TestRolloutsAndApprove: rollouts lists the rollouts rule-engine keeps in its state bucket
// (records as rule-engine writes them) with what each waits for, and approve publishes the
// approval of the step a rollout waits at, or of a step ahead, for the generation rolling out;
// an approval that cannot apply is refused with the reason, and nothing is published.
func TestRolloutsAndApprove(t *testing.T) {
	srv := testenv.StartNATS(t)
	_, js := eventstest.Bus(t, srv.URL())
	ctx := context.Background()
	kv, err := js.KeyValue(ctx, events.BucketRuleEngineState)
	if err != nil {
		t.Fatal(err)
	}
	put := func(rule string, rec map[string]any) {
		t.Helper()
		rec["spec"] = map[string]any{"enforcements": []any{map[string]any{"name": "agent", "repo": "https://example/agent"}}}
		putRuleRecord(t, kv, "rollout", rule, rec)
	}
	steps := []string{"canary", "half", "rest"}
	put("team-a/agent", map[string]any{"uid": "u-agent", "generation": 4, "stableGeneration": 3, "stepNames": steps,
		"step": 1, "phase": "AwaitingApproval", "awaiting": "half", "stepStarted": time.Now()})
	put("team-a/ingress", map[string]any{"uid": "u-ingress", "generation": 2, "stableGeneration": 1, "stepNames": steps,
		"step": 0, "phase": "Halted", "halted": map[string]any{"application": "edge-07-ingress", "cluster": "edge-07",
			"enforcement": "ingress", "message": "Degraded: CrashLoopBackOff"}})
	put("team-b/policies", map[string]any{"uid": "u-policies", "generation": 7, "stableGeneration": 7, "stepNames": steps,
		"step": 3, "phase": "Complete"})
	put("team-b/logging", map[string]any{"uid": "u-logging", "generation": 1, "stepNames": steps,
		"step": 0, "phase": "Baking", "bakeStarted": time.Now().Add(-90 * time.Second), "approved": []string{"half"}})

	put("team-b/network", map[string]any{"uid": "u-network", "generation": 1, "stepNames": steps, "step": 0, "phase": "Progressing"})
	put("team-b/storage", map[string]any{"uid": "u-storage", "generation": 2, "stableGeneration": 1, "stepNames": steps,
		"step": 0, "phase": "Progressing", "stepStarted": time.Now()})

	env := map[string]string{"NATS_URL": srv.URL(), "USER": "ops"}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, func(k string) string { return env[k] }, &out, &out)
		return out.String(), err
	}
	reader := eventstest.NewReader(t, js)

	out, err := cli("rollouts")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"RULE             GENERATION  STABLE  PHASE             STEP          NEXT",
		"team-a/agent     4           3       AwaitingApproval  half (2/3)    approval: enforcement approve team-a/agent half",
		"team-a/ingress   2           1       Halted            canary (1/3)  halted by Application edge-07-ingress of cluster edge-07 (Degraded: CrashLoopBackOff)",
		"team-b/logging   1           -       Baking            canary (1/3)  the bake time, started 1m30s ago",
		"team-b/network   1           -       Progressing       canary (1/3)  the rule's source to list its clusters before the step starts",
		"team-b/policies  7           7       Complete          - (3/3)       nothing: every cluster runs generation 7",
		"team-b/storage   2           1       Progressing       canary (1/3)  the step's Applications to report Healthy and Synced",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("rollouts lacks %q:\n%s", want, out)
		}
	}

	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"approve", "team-a/none"}, "rule team-a/none has no rollout"},
		{[]string{"approve", "agent"}, `rule "agent": want <namespace>/<name>`},
		{[]string{"approve", "team-a/agent", "all"}, `has no step "all"; its steps: canary, half, rest`},
		{[]string{"approve", "team-a/agent", "canary"}, "step canary of the rollout of generation 4 of rule team-a/agent is done already"},
		{[]string{"approve", "team-a/ingress"}, "is halted by Application edge-07-ingress (Degraded: CrashLoopBackOff); an approval does not resume it"},
		{[]string{"approve", "team-b/policies", "rest"}, "the rollout of generation 7 of rule team-b/policies is complete"},
		{[]string{"approve", "team-b/logging"}, "waits for no approval (Baking at step canary); name a step to approve it ahead: half, rest"},
		{[]string{"approve", "team-b/logging", "canary"}, "step canary of the rollout of generation 1 of rule team-b/logging is under way already (Baking)"},
	} {
		if _, err := cli(c.args...); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want %q", c.args, err, c.err)
		}
	}
	if out, err := cli("approve", "team-b/logging", "half"); err != nil || !strings.Contains(out, "Step half of generation 1 of rule team-b/logging is approved already") {
		t.Errorf("approving an approved step: %v\n%s", err, out)
	}
	if evs := reader.New(t); len(evs) != 0 {
		t.Fatalf("refused approvals published %d events: %v", len(evs), evs)
	}

	if out, err := cli("approve", "team-a/agent"); err != nil || !strings.Contains(out, "Approved step half of generation 4 of rule team-a/agent") {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if out, err := cli("approve", "team-b/logging", "rest"); err != nil || !strings.Contains(out, "Approved step rest of generation 1 of rule team-b/logging") {
		t.Fatalf("approve ahead: %v\n%s", err, out)
	}
	evs := reader.New(t)
	if len(evs) != 2 {
		t.Fatalf("approvals published %d events, want 2", len(evs))
	}
	want := []*events.RolloutApproved{
		{Rule: events.RuleRef{Namespace: "team-a", Name: "agent", UID: "u-agent", Generation: 4}, Step: "half"},
		{Rule: events.RuleRef{Namespace: "team-b", Name: "logging", UID: "u-logging", Generation: 1}, Step: "rest"},
	}
	for i, ev := range evs {
		got, ok := ev.(*events.RolloutApproved)
		if !ok || !strings.HasPrefix(got.By, "ops@") {
			t.Fatalf("approval %d: %#v", i, ev)
		}
		got.By = ""
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("approval %d: %+v, want %+v", i, got, want[i])
		}
	}
}

// TestRolloutsNone: with no rollout kept, rollouts says so.
func TestRolloutsNone(t *testing.T) {
	srv := testenv.StartNATS(t)
	eventstest.Bus(t, srv.URL())
	var out bytes.Buffer
	if err := run(context.Background(), []string{"rollouts"}, func(k string) string { return map[string]string{"NATS_URL": srv.URL()}[k] }, &out, &out); err != nil ||
		!strings.HasPrefix(out.String(), "No rollouts") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
