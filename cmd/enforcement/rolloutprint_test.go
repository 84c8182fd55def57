package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// Every move of a staged rollout, its approvals and the health argo-syncer reports read as a
// sentence in the local run and `enforcement events`.
func TestNarrateRollout(t *testing.T) {
	rule := events.RuleRef{Namespace: "enforcement", Name: "agent", Generation: 4}
	for _, tt := range []struct {
		ev   events.Event
		want string
	}{
		{&events.RolloutProgressed{Rule: rule, Step: "canary", Phase: events.RolloutStepStarted, Clusters: []string{"c00", "c10"}},
			"Step canary of the rollout of rule enforcement/agent generation 4 started on 2 cluster(s): c00, c10"},
		{&events.RolloutProgressed{Rule: rule, Step: "half", StepIndex: 1, Phase: events.RolloutAwaitingApproval},
			"Step half of the rollout of rule enforcement/agent generation 4 waits for an approval: enforcement approve enforcement/agent half"},
		{&events.RolloutProgressed{Rule: rule, Step: "half", StepIndex: 1, Phase: events.RolloutHalted, Clusters: []string{"c20"},
			Application: "c20-agent", Message: "Degraded: back-off restarting"},
			"The rollout of rule enforcement/agent generation 4 halted at step half: c20-agent on c20 is Degraded: back-off restarting"},
		{&events.RolloutProgressed{Rule: rule, StepIndex: 3, Phase: events.RolloutCompleted},
			"The rollout of rule enforcement/agent generation 4 completed: every cluster runs it"},
		{&events.RolloutApproved{Rule: rule, Step: "half", By: "ana@laptop"},
			"Approved step half of the rollout of rule enforcement/agent generation 4 (by ana@laptop)"},
		{&events.ApplicationHealth{Rule: rule, Cluster: "c20", Enforcement: "agent", Application: "c20-agent", ResourceVersion: "9",
			Health: events.HealthDegraded, Sync: events.SyncSynced, Operation: events.OperationFailed, Message: "back-off restarting"},
			"Argo CD reports Application c20-agent on c20: Degraded, Synced, last sync Failed: back-off restarting"},
	} {
		m, err := events.Encode(tt.ev, "/test", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if got := narrate(m); got != tt.want {
			t.Errorf("narrate(%s %s) = %q, want %q", tt.ev.Type(), tt.ev.ID(), got, tt.want)
		}
	}
}

// A preview of an edit of a rule with spec.rollout shows the rollout it starts, marks each
// change with the step that makes it, and counts the changes that wait for a later step apart.
func TestPrintPreviewOfARollout(t *testing.T) {
	res := &events.PreviewResult{
		Rule: events.RuleRef{Namespace: "enforcement", Name: "agent", Generation: 5},
		Rollout: &events.RolloutView{Generation: 5, StableGeneration: 4, Phase: "Progressing", Step: "canary",
			Steps: []events.RolloutStepView{
				{Name: "canary", Phase: "Progressing", Clusters: []string{"c00"}, BakeSeconds: 1800},
				{Name: "rest", Phase: "Pending", Clusters: []string{"c01", "c02"}, RequireApproval: true},
			}},
		Changes: []events.PreviewChange{
			{Action: events.PreviewUpdate, Application: "c00-agent", Cluster: "c00", Enforcement: "agent", Step: "canary"},
			{Action: events.PreviewUpdate, Application: "c01-agent", Cluster: "c01", Enforcement: "agent", Step: "rest", Staged: true},
			{Action: events.PreviewUpdate, Application: "c02-agent", Cluster: "c02", Enforcement: "agent", Step: "rest", Staged: true},
		},
	}
	var out bytes.Buffer
	if err := printPreview(&out, res); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{
		"Rollout of generation 5: Progressing at step canary; stable generation 4, which the clusters not reached yet run",
		"1. canary (bakes 30m0s): Progressing, 1 cluster(s), 0 updated, 0 healthy: c00",
		"2. rest (requires approval): Pending, 2 cluster(s), 0 updated, 0 healthy: c01, c02",
		"Applications: 0 to create, 1 to update, 0 to delete, 0 held, 0 unchanged",
		"and 2 change(s) later, as the rollout reaches their step",
		"now (step canary): update c00-agent (cluster c00, enforcement agent)",
		"at step rest: update c01-agent (cluster c01, enforcement agent)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the preview does not say %q:\n%s", want, got)
		}
	}
}
