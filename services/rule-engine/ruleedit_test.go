package main

import (
	"fmt"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// fleetOf publishes n clusters labelled env=prod of source src, named c00, c01, …, and returns
// the install summaries a rule with the given enforcements over all of them produces.
func (e *env) fleetOf(n int, src events.SourceRef, enforcements ...string) []string {
	e.t.Helper()
	var want []string
	for i := range n {
		c := testCluster(fmt.Sprintf("c%02d", i), map[string]string{"env": "prod"}, true)
		c.Source = src
		e.publish(appeared(c, uint64(i+1)))
		for _, name := range enforcements {
			want = append(want, "install "+c.Name+" "+name)
		}
	}
	return want
}

// setLabels sets the rule's rancher labels (env=value).
func (e *env) setLabels(rule, value string) {
	e.t.Helper()
	e.updateRule(rule, func(cr *v1beta1.ClusterRule) { cr.Spec.Source.Rancher.Labels = map[string]string{"env": value} })
}

// heldCheck checks the RemovalsHeld message: the counts and the release value of generation.
func (e *env) heldCheck(rule string, removals, installed, generation int) func(v1beta1.ClusterRuleStatus) error {
	return func(v1beta1.ClusterRuleStatus) error {
		msg := e.rule(rule).Status.Conditions[0].Message
		for _, want := range []string{fmt.Sprintf("generation %d no longer selects %d of the %d cluster(s)", generation, removals, installed),
			"c00, c01, c02 and 17 more", fmt.Sprintf("%s: generation/%d", ReleaseAnnotation, generation)} {
			if !strings.Contains(msg, want) {
				return fmt.Errorf("message %q lacks %q", msg, want)
			}
		}
		return nil
	}
}

// TestRuleEditRemovalsHeld: a label typo in a rule over 20 clusters would uninstall (Cascade)
// all of them; the breaker (cap 2) holds them: no uninstall intent, RemovalsHeld with counts.
// Reverting the edit drops the hold with no intent at all; the same typo held again survives a
// restart and is released by the annotation on the rule (in OPERATOR_NAMESPACE) into exactly
// those 20 uninstalls, Cascade.
func TestRuleEditRemovalsHeld(t *testing.T) {
	e := newEnv(t)
	e.vars["OPERATOR_NAMESPACE"] = e.ns // releases are accepted from this namespace only
	src := events.SourceRef{Kind: "rancher", ID: events.SourceID("rancher", e.ns, "rancher", nil), SecretNamespace: e.ns, SecretName: "rancher"}
	stop := e.start()
	installs := e.fleetOf(20, src, "guestbook")
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1], DeletionPolicy: events.DeletionCascade,
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"env": "prod"}}}})
	e.waitIntentSet(installs...)

	e.setLabels("fleet", "prdo") // generation 2
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, e.heldCheck("fleet", 20, 20, 2))
	e.waitIntentSet(installs...)

	e.setLabels("fleet", "prod") // generation 3: the typo fixed
	e.waitReady("fleet", v1beta1.ReasonProgressing, nil)
	e.waitIntentSet(installs...)

	e.setLabels("fleet", "prdo") // generation 4
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, e.heldCheck("fleet", 20, 20, 4))
	stop()
	e.start()
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, e.heldCheck("fleet", 20, 20, 4))
	// A cluster event on a held pair does not remove it either.
	c := testCluster("c00", map[string]string{"env": "prod", "team": "a"}, true)
	c.Source = src
	e.publish(&events.ClusterUpdated{Cluster: c, Revision: 21, Changed: []string{"labels"}})
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 0 || e.rule("fleet").Status.Conditions[0].Message == "" {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.waitIntentSet(installs...)

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) {
		cr.Annotations = map[string]string{ReleaseAnnotation: "generation/4"}
	})
	want := installs
	for i := range 20 {
		want = append(want, fmt.Sprintf("uninstall c%02d guestbook NoLongerMatches", i))
	}
	for _, ev := range e.waitIntentSet(want...) {
		if un, ok := ev.(*events.UninstallIntent); ok && (un.DeletionPolicy != events.DeletionCascade || un.Rule.Generation != 4) {
			t.Errorf("released uninstall: %+v", un)
		}
	}
	e.waitReady("fleet", v1beta1.ReasonNoClusters, nil)
}

// TestRuleEditUnderTheCapAndEnforcementRemoval: an edit that lets go of 1 of 20 clusters (cap 2)
// and an enforcement removed from the rule are not held.
func TestRuleEditUnderTheCapAndEnforcementRemoval(t *testing.T) {
	e := newEnv(t)
	e.start()
	want := e.fleetOf(20, rancherSource(), "guestbook", "helm-guestbook")
	e.createRule("fleet", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(),
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{Labels: map[string]string{"env": "prod"}}}})
	e.waitIntentSet(want...)

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Source.Rancher.Ignore = []string{"c07"} })
	want = append(want, "uninstall c07 guestbook NoLongerMatches", "uninstall c07 helm-guestbook NoLongerMatches")
	e.waitIntentSet(want...)

	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) { cr.Spec.Enforcements = cr.Spec.Enforcements[:1] })
	for i := range 20 {
		if i != 7 {
			want = append(want, fmt.Sprintf("uninstall c%02d helm-guestbook EnforcementRemoved", i))
		}
	}
	e.waitIntentSet(want...)
	e.waitReady("fleet", v1beta1.ReasonProgressing, nil)

	// Over the cap on a rule outside OPERATOR_NAMESPACE: the annotation releases nothing.
	e.setLabels("fleet", "prdo") // generation 4
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, nil)
	e.updateRule("fleet", func(cr *v1beta1.ClusterRule) {
		cr.Annotations = map[string]string{ReleaseAnnotation: "generation/4"}
	})
	e.waitReady("fleet", v1beta1.ReasonRemovalsHeld, func(v1beta1.ClusterRuleStatus) error {
		if msg := e.rule("fleet").Status.Conditions[0].Message; !strings.Contains(msg, "19 of the 19") ||
			!strings.Contains(msg, "release-removals "+e.ns+"/fleet generation/4 (the annotation counts only on rules in enforcement)") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})
	e.waitIntentSet(want...)

	// The release event (what `enforcement release-removals` publishes) of another generation
	// releases nothing; of generation 4, exactly its 19 removals.
	e.publish(&events.RuleRemovalsReleased{Rule: events.RuleRef{Namespace: e.ns, Name: "fleet", Generation: 3}})
	e.publish(&events.RuleRemovalsReleased{Rule: events.RuleRef{Namespace: e.ns, Name: "fleet", Generation: 4}, By: "ops"})
	for i := range 20 {
		if i != 7 {
			want = append(want, fmt.Sprintf("uninstall c%02d guestbook NoLongerMatches", i))
		}
	}
	e.waitIntentSet(want...)
	e.waitReady("fleet", v1beta1.ReasonNoClusters, nil)
}
