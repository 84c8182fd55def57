package main

import (
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestRolloutSpecErrors: a rollout the engine cannot use makes the rule InvalidSpec with the
// field and the reason (its clusters keep what they have), whatever passed the CRD's schema.
func TestRolloutSpecErrors(t *testing.T) {
	pct := func(v int32) *int32 { return &v }
	bad := intstr.FromString("half")
	cases := []struct {
		name    string
		rollout v1beta1.Rollout
		want    string
	}{
		{"no steps", v1beta1.Rollout{}, "spec.rollout.steps: at least one step is required"},
		{"labels and percentage", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{MatchLabels: map[string]string{"a": "b"}, Percentage: pct(10)}}},
			"spec.rollout.steps[0]: a step selects its clusters by labels (matchLabels, matchExpressions) or by percentage: one of the two"},
		{"neither", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{Name: "canary"}}},
			"spec.rollout.steps[0]: a step selects its clusters by labels"},
		{"two steps of one name", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{Name: "a", Percentage: pct(10)}, {Name: "a", Percentage: pct(20)}}},
			`spec.rollout.steps[1].name: "a" names two steps`},
		{"default name taken", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{Name: "step-2", Percentage: pct(10)}, {Percentage: pct(20)}}},
			`spec.rollout.steps[1].name: "step-2" names two steps`},
		{"percentage out of range", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{Percentage: pct(0)}}},
			"spec.rollout.steps[0].percentage: 0 is not within 1 and 100"},
		{"bad expression", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "ring", Operator: "Near"}}}}},
			"spec.rollout.steps[0]: \"Near\" is not a valid label selector operator"},
		{"bad maxUnavailable", v1beta1.Rollout{Steps: []v1beta1.RolloutStep{{Percentage: pct(10)}}, MaxUnavailable: &bad},
			"spec.rollout.maxUnavailable: invalid value for IntOrString: invalid type: string is not a percentage"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "r", Generation: 1},
				Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}, Rollout: &tc.rollout}}
			r := ruleFromSpec(cr, "enforcement")
			if r.invalid == nil || !strings.Contains(r.invalid.Error(), tc.want) {
				t.Errorf("invalid = %v, want %q", r.invalid, tc.want)
			}
		})
	}
}

// TestRolloutPlanSteps: label steps take their clusters, percentage steps fill up to their share
// of the fleet counting the earlier steps, what no step takes comes last, and maxUnavailable
// bounds a step's updating clusters (at least one).
func TestRolloutPlanSteps(t *testing.T) {
	pct := func(v int32) *int32 { return &v }
	e := testEngine(newMemStore(), &recordingPublisher{}, newMetrics(nil))
	for i := range 20 {
		labels := map[string]string{"env": "prod"}
		if i < 2 {
			labels["ring"] = "canary"
		}
		c := testCluster(string(rune('a'+i)), labels, true)
		e.setCluster(clusterID(c.Source.ID, c.Key), &clusterRecord{Cluster: c, Revision: 1})
	}
	two := intstr.FromInt32(2)
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "enforcement", Name: "r", UID: "u", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
			Rollout: &v1beta1.Rollout{MaxUnavailable: &two, Steps: []v1beta1.RolloutStep{
				{Name: "canary", MatchLabels: map[string]string{"ring": "canary"}},
				{Name: "quarter", Percentage: pct(25)},
				{Name: "half", Percentage: pct(50)},
			}}}}
	r := ruleFromSpec(cr, "enforcement")
	if r.invalid != nil {
		t.Fatal(r.invalid)
	}
	st := &rolloutState{rec: newRolloutRecord(r, nil, nil)}
	p := e.plan(r, st)
	if got := []int{len(p.steps[0]), len(p.steps[1]), len(p.steps[2]), len(p.steps[3])}; got[0] != 2 || got[1] != 3 || got[2] != 5 || got[3] != 10 {
		t.Errorf("clusters per step (canary, quarter, half, none) = %v, want [2 3 5 10]", got)
	}
	if len(p.reached) != 0 {
		t.Errorf("before the first step starts, %d clusters reached", len(p.reached))
	}
	st.rec.Step, st.rec.StepStarted = 1, e.now()
	p = e.plan(r, st)
	if len(p.reached) != 4 { // the canaries, and maxUnavailable 2 of the quarter
		t.Errorf("step quarter started: %d clusters reached, want 4", len(p.reached))
	}
	if r.rollout.maxUnavailableOf(3) != 2 || r.rollout.maxUnavailableOf(1) != 2 {
		t.Errorf("maxUnavailable of 3 clusters: %d", r.rollout.maxUnavailableOf(3))
	}
	pctMU := intstr.FromString("10%")
	r.rollout.maxUnavailable = &pctMU
	if got := r.rollout.maxUnavailableOf(5); got != 1 {
		t.Errorf("10%% of 5 clusters rounds down to 0, at least 1: got %d", got)
	}
}
