package main

import (
	"context"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestTriggerFailurePhases checks how failurePolicy Fail trigger failures show in the status:
// a beforeInstall failure blocks the install (TriggerBlocked) until a later delivery releases it;
// an afterInstall failure comes after the Application was created, so it never marks the install
// blocked: the Application counts as installed and the failure is an install error with reason
// AfterInstallFailed, which is also the Ready reason.
func TestTriggerFailurePhases(t *testing.T) {
	pub := &recordingPublisher{}
	e := testEngine(newMemStore(), pub, newMetrics(nil))
	ctx := context.Background()
	fail := &v1beta1.Trigger{Endpoint: "http://hooks.example/x", FailurePolicy: "Fail"}
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r", UID: "u1", Generation: 1},
		Spec: v1beta1.ClusterRuleSpec{
			Enforcements: []v1beta1.Enforcement{{Name: "guestbook", Repo: "https://github.com/argoproj/argocd-example-apps", Path: "guestbook"}},
			Source:       v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
			Triggers:     &v1beta1.Triggers{BeforeInstall: fail, AfterInstall: fail},
		}}
	if err := e.applyRule(ctx, ruleFromSpec(cr, "enforcement")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if err := e.applyCluster(ctx, testCluster(name, nil, true), 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	installs := pub.installs()
	if len(installs) != 2 {
		t.Fatalf("%d install intents, want 2", len(installs))
	}
	byCluster := map[string]*events.InstallIntent{}
	for _, in := range installs {
		byCluster[in.Cluster.Name] = in
	}
	a, b := byCluster["a"], byCluster["b"]
	outcome := func(ev events.Event) {
		t.Helper()
		if err := e.applyOutcome(ctx, ev, events.Meta{ID: ev.ID()}); err != nil {
			t.Fatal(err)
		}
	}
	ready := func() (metav1.Condition, v1beta1.ClusterRuleStatus) {
		t.Helper()
		st, _ := e.status("ns/r", 1)
		if len(st.Conditions) != 1 {
			t.Fatalf("conditions %+v", st.Conditions)
		}
		return st.Conditions[0], st
	}
	failed := func(in *events.InstallIntent, phase, delivery string) *events.TriggerFailed {
		return &events.TriggerFailed{DeliveryID: delivery, IntentID: in.ID(), Phase: phase, Rule: in.Rule,
			Cluster: in.Cluster.Name, Enforcement: "guestbook", FailurePolicy: "Fail", StatusCode: 500, Attempts: 5,
			Message: "gave up after 5 attempts: server_error: HTTP 500"}
	}

	// a: created, then its afterInstall fails under Fail.
	outcome(&events.InstallSucceeded{IntentID: a.ID(), Rule: a.Rule, Cluster: "a", Enforcement: "guestbook",
		Application: "a-guestbook", Created: true, SpecHash: a.SpecHash})
	outcome(failed(a, events.PhaseAfterInstall, "d-a-after"))
	outcome(failed(a, events.PhaseAfterInstall, "d-a-after")) // a redelivery counts once
	cond, st := ready()
	if cond.Reason == v1beta1.ReasonTriggerBlocked {
		t.Fatalf("an afterInstall failure marked the install blocked: %+v", cond)
	}
	if cond.Status != "False" || cond.Reason != v1beta1.ReasonAfterInstallFailed || !strings.Contains(cond.Message, "afterInstall") {
		t.Errorf("Ready = %+v, want False %s", cond, v1beta1.ReasonAfterInstallFailed)
	}
	// b is pending, a installed: the afterInstall failure outranks Progressing.
	if st.InstalledApplications != 1 || st.InstallErrorCount != 1 || len(st.InstallErrors) != 1 {
		t.Fatalf("status %+v, want a installed and one install error", st)
	}
	if ie := st.InstallErrors[0]; ie.Cluster != "a" || ie.Enforcement != "guestbook" || ie.Reason != v1beta1.ReasonAfterInstallFailed ||
		ie.Count != 1 || !strings.Contains(ie.Message, "afterInstall trigger: gave up after 5 attempts") {
		t.Errorf("install error %+v", ie)
	}

	// b: its beforeInstall fails under Fail: blocked, which outranks the afterInstall failure.
	outcome(failed(b, events.PhaseBeforeInstall, "d-b-before"))
	if cond, st := ready(); cond.Reason != v1beta1.ReasonTriggerBlocked || !strings.Contains(cond.Message, "1 install(s) held") ||
		!strings.Contains(cond.Message, "beforeInstall trigger") || st.InstallErrorCount != 1 {
		t.Errorf("after b's beforeInstall failed: Ready %+v, status %+v; want TriggerBlocked for one install", cond, st)
	}
	// A later delivery releases b; argo-syncer installs it.
	outcome(&events.TriggerDelivered{DeliveryID: "d-b-before", IntentID: b.ID(), Phase: events.PhaseBeforeInstall, Rule: b.Rule,
		Cluster: "b", Enforcement: "guestbook", StatusCode: 200, Attempts: 6})
	outcome(&events.InstallSucceeded{IntentID: b.ID(), Rule: b.Rule, Cluster: "b", Enforcement: "guestbook",
		Application: "b-guestbook", Created: true, SpecHash: b.SpecHash})
	if cond, st := ready(); cond.Reason != v1beta1.ReasonAfterInstallFailed || st.InstalledApplications != 2 || st.InstallErrorCount != 1 {
		t.Errorf("after b was released and installed: Ready %+v, status %+v; want a's afterInstall failure only", cond, st)
	}
	// An afterInstall failure under Ignore is not reported; a delivered afterInstall clears one.
	ignored := failed(b, events.PhaseAfterInstall, "d-b-after")
	ignored.FailurePolicy = "Ignore"
	outcome(ignored)
	outcome(&events.TriggerDelivered{DeliveryID: "d-a-after", IntentID: a.ID(), Phase: events.PhaseAfterInstall, Rule: a.Rule,
		Cluster: "a", Enforcement: "guestbook", StatusCode: 200, Attempts: 1})
	if cond, st := ready(); cond.Status != "True" || cond.Reason != v1beta1.ReasonInstalled || st.InstallErrorCount != 0 || len(st.InstallErrors) != 0 {
		t.Errorf("Ready %+v, status %+v; want Installed with no errors", cond, st)
	}
}
