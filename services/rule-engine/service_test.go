package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func testCluster(name string, labels map[string]string, eligible bool) events.Cluster {
	return events.Cluster{Source: rancherSource(), Key: "c-" + name, Name: name,
		URL: "https://rancher.example/k8s/clusters/c-" + name, Labels: labels, State: "active", Eligible: eligible,
		Attributes: map[string]any{"id": "c-" + name, "driver": "gke"}}
}

func (e *env) createRule(name string, spec v1beta1.ClusterRuleSpec) *v1beta1.ClusterRule {
	e.t.Helper()
	cr := &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name}, Spec: spec}
	if err := e.c.Create(context.Background(), cr); err != nil {
		e.t.Fatal(err)
	}
	return cr
}

func (e *env) updateRule(name string, mutate func(*v1beta1.ClusterRule)) {
	e.t.Helper()
	eventually(e.t, 10*time.Second, func() error {
		cr := e.rule(name)
		mutate(cr)
		return e.c.Update(context.Background(), cr)
	})
}

var norman = map[string]string{"cattle.io/creator": "norman", "env": "prod"}

func twoEnforcements() []v1beta1.Enforcement {
	return []v1beta1.Enforcement{
		{Name: "guestbook", Repo: "https://github.com/argoproj/argocd-example-apps", Path: "guestbook"},
		{Name: "helm-guestbook", Repo: "https://github.com/argoproj/argocd-example-apps", Path: "helm-guestbook",
			Helm: &v1beta1.Helm{Parameters: map[string]apiextensionsJSON{"replicaCount": raw("1")}}},
	}
}

// TestMatchingIntentsAndStatus walks one rule through every intent case: new match, ignore,
// labels, label selector, eligibility, no longer matching, changed spec, removed and added
// enforcements, cluster gone, install outcomes in the status, and rule deletion through the finalizer.
func TestMatchingIntentsAndStatus(t *testing.T) {
	e := newEnv(t)
	e.vars["SOURCE_DEGRADED_TTL"] = "3s"
	e.start()
	e.createRule("dev", v1beta1.ClusterRuleSpec{
		Enforcements: twoEnforcements(),
		Source: v1beta1.Source{
			Rancher:          &v1beta1.RancherSource{Labels: map[string]string{"cattle.io/creator": "norman"}, Ignore: []string{"ignored"}},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn, Values: []string{"prod", "stage"}}},
		},
		DeletionPolicy: events.DeletionCascade,
		Triggers:       &v1beta1.Triggers{AfterInstall: &v1beta1.Trigger{Endpoint: "http://hooks.example/after", FailurePolicy: "Fail"}},
	})
	e.waitReady("dev", v1beta1.ReasonNoClusters, nil)
	if cr := e.rule("dev"); len(cr.Finalizers) != 1 || cr.Finalizers[0] != Finalizer {
		t.Errorf("finalizers = %v, want [%s]", cr.Finalizers, Finalizer)
	}

	a := testCluster("a", norman, true)
	e.publish(
		appeared(a, 1),
		appeared(testCluster("ignored", norman, true), 2),
		appeared(testCluster("admin", map[string]string{"cattle.io/creator": "admin", "env": "prod"}, true), 3),
		appeared(testCluster("dev-env", map[string]string{"cattle.io/creator": "norman", "env": "dev"}, true), 4),
		appeared(testCluster("prov", norman, false), 5),
	)
	got := e.waitIntents("install a guestbook", "install a helm-guestbook")
	in := got[1].(*events.InstallIntent)
	if in.DeletionPolicy != events.DeletionCascade || in.Triggers == nil || in.Triggers.AfterInstall.TimeoutSeconds != 5 ||
		in.Triggers.AfterInstall.FailurePolicy != "Fail" || in.Enforcement.HelmParameters[0].Value != "1" {
		t.Errorf("install intent = %+v", in)
	}
	if in.Cluster.Source != rancherSource() || in.Cluster.URL != a.URL || in.Cluster.Revision != 1 {
		t.Errorf("intent target = %+v", in.Cluster)
	}
	e.waitReady("dev", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 2 || len(st.Clusters) != 2 || st.Clusters[0].Name != "a" || st.Clusters[1].Name != "prov" {
			return fmt.Errorf("matched %d %v, want a and prov", st.MatchedClusters, st.Clusters)
		}
		return nil
	})

	// Outcomes: one succeeded, one failed twice; then a trigger holds it.
	i0, i1 := got[0].(*events.InstallIntent), got[1].(*events.InstallIntent)
	e.publish(&events.InstallSucceeded{IntentID: i0.ID(), Rule: i0.Rule, Cluster: "a", Enforcement: "guestbook",
		Application: "a-guestbook", Created: true, SpecHash: i0.SpecHash})
	e.publish(&events.InstallFailed{IntentID: i1.ID(), Rule: i1.Rule, Cluster: "a", Enforcement: "helm-guestbook",
		Reason: "Invalid", Message: "Application.argoproj.io is invalid", Permanent: true})
	e.publish(&events.InstallFailed{IntentID: i1.ID(), Rule: i1.Rule, Cluster: "a", Enforcement: "helm-guestbook",
		Reason: "Unavailable", Message: "argocd down"})
	e.waitReady("dev", v1beta1.ReasonInstallFailed, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 1 || st.InstallErrorCount != 1 || len(st.InstallErrors) != 1 ||
			st.InstallErrors[0] != (v1beta1.InstallError{Cluster: "a", Enforcement: "helm-guestbook", Reason: "Unavailable", Message: "argocd down", Count: 2}) {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})
	e.publish(&events.TriggerFailed{DeliveryID: "d1", IntentID: i1.ID(), Phase: events.PhaseBeforeInstall, Rule: i1.Rule,
		Cluster: "a", Enforcement: "helm-guestbook", FailurePolicy: "Fail", StatusCode: 500, Attempts: 3, Message: "HTTP 500"})
	e.waitReady("dev", v1beta1.ReasonTriggerBlocked, nil)
	e.publish(&events.InstallSucceeded{IntentID: i1.ID(), Rule: i1.Rule, Cluster: "a", Enforcement: "helm-guestbook",
		Application: "a-helm-guestbook", SpecHash: i1.SpecHash})
	e.waitReady("dev", v1beta1.ReasonInstalled, func(st v1beta1.ClusterRuleStatus) error {
		if st.InstalledApplications != 2 || st.InstallErrorCount != 0 {
			return fmt.Errorf("status %+v", st)
		}
		return nil
	})

	// The source degrades: condition; then the breaker holds removals.
	e.publish(&events.SourceDegraded{Source: rancherSource(), Scan: 7, Reason: events.DegradedListFailed, Message: "rancher: 502"})
	e.waitReady("dev", v1beta1.ReasonSourceDegraded, nil)
	e.publish(&events.SourceDegraded{Source: rancherSource(), Scan: 8, Reason: events.DegradedRemovalsHeld, Message: "3 of 5", HeldRemovals: []string{"x", "y", "z"}})
	e.waitReady("dev", v1beta1.ReasonRemovalsHeld, nil)
	// With no further degraded event the condition expires after SOURCE_DEGRADED_TTL.
	e.waitReady("dev", v1beta1.ReasonInstalled, nil)

	want := []string{"install a guestbook", "install a helm-guestbook"}
	// An ineligible cluster that becomes eligible gets its installs; going back keeps them.
	e.publish(&events.ClusterUpdated{Cluster: testCluster("prov", norman, true), Revision: 6, Changed: []string{"eligible"}})
	want = append(want, "install prov guestbook", "install prov helm-guestbook")
	e.waitIntents(want...)
	e.publish(&events.ClusterUpdated{Cluster: testCluster("prov", norman, false), Revision: 7, Changed: []string{"eligible"}})

	// a stops matching (label), then matches again: uninstall with the rule's policy, reinstall.
	e.publish(&events.ClusterUpdated{Cluster: testCluster("a", map[string]string{"cattle.io/creator": "norman", "env": "dev"}, true), Revision: 8})
	want = append(want, "uninstall a guestbook NoLongerMatches", "uninstall a helm-guestbook NoLongerMatches")
	got = e.waitIntents(want...)
	if u := got[len(got)-1].(*events.UninstallIntent); u.DeletionPolicy != events.DeletionCascade || u.Cluster.Gone {
		t.Errorf("uninstall = %+v", u)
	}
	e.publish(&events.ClusterUpdated{Cluster: a, Revision: 9})
	want = append(want, "install a guestbook", "install a helm-guestbook")
	e.waitIntents(want...)

	// Rule edit: drop helm-guestbook, change guestbook's path.
	e.updateRule("dev", func(cr *v1beta1.ClusterRule) {
		cr.Spec.Enforcements = cr.Spec.Enforcements[:1]
		cr.Spec.Enforcements[0].Path = "guestbook-v2"
	})
	// Pairs are evaluated in map order; compare as sets per cluster.
	want = append(want, "install a guestbook", "uninstall a helm-guestbook EnforcementRemoved")
	eventually(t, 20*time.Second, func() error { return sameIntentSet(e.intents(), want, "prov") })

	// Rule edit: an enforcement added is installed where the rule matches, and only it.
	e.updateRule("dev", func(cr *v1beta1.ClusterRule) {
		cr.Spec.Enforcements = append(cr.Spec.Enforcements, v1beta1.Enforcement{Name: "monitoring", Repo: "https://github.com/example/monitoring", Path: "agent"})
	})
	want = append(want, "install a monitoring")
	eventually(t, 20*time.Second, func() error { return sameIntentSet(e.intents(), want, "prov") })

	// a is gone: ClusterGone, orphaning, target marked gone.
	e.publish(&events.ClusterGone{Source: rancherSource(), Key: "c-a", Name: "a", Revision: 10, LastSeen: time.Now()})
	want = append(want, "uninstall a guestbook ClusterGone", "uninstall a monitoring ClusterGone")
	eventually(t, 20*time.Second, func() error { return sameIntentSet(e.intents(), want, "prov") })
	all := e.intents()
	var gone *events.UninstallIntent
	for _, ev := range all {
		if u, ok := ev.(*events.UninstallIntent); ok && u.Reason == events.UninstallClusterGone {
			gone = u
		}
	}
	if gone == nil || !gone.Cluster.Gone || gone.DeletionPolicy != events.DeletionOrphan || gone.Cluster.Revision != 10 {
		t.Errorf("gone uninstall = %+v", gone)
	}

	// Deleting the rule uninstalls everything it still has (prov, ineligible now) and lets go.
	if err := e.c.Delete(context.Background(), e.rule("dev")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() error {
		err := e.c.Get(context.Background(), types.NamespacedName{Namespace: e.ns, Name: "dev"}, &v1beta1.ClusterRule{})
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("rule still there (err %w)", err)
		}
		return nil
	})
	var deleted []string
	for _, ev := range e.intents() {
		if u, ok := ev.(*events.UninstallIntent); ok && u.Reason == events.UninstallRuleDeleted {
			deleted = append(deleted, u.Cluster.Name+" "+u.Enforcement+" "+u.DeletionPolicy)
		}
	}
	// prov was installed at generation 1 with two enforcements and went ineligible before the
	// edit, so it keeps both until the rule is deleted.
	if strings.Join(deleted, ",") != "prov guestbook Cascade,prov helm-guestbook Cascade" {
		t.Errorf("rule deleted uninstalls = %v", deleted)
	}
}

// sameIntentSet compares intents with want ignoring order between clusters and ignoring the
// cluster skip entirely (its intents are checked elsewhere).
func sameIntentSet(got []events.Event, want []string, skip string) error {
	count := map[string]int{}
	for _, w := range want {
		if !strings.Contains(w, " "+skip+" ") {
			count[w]++
		}
	}
	for _, ev := range got {
		s := intentSummary(ev)
		if strings.Contains(s, " "+skip+" ") {
			continue
		}
		count[s]--
	}
	for k, v := range count {
		if v != 0 {
			return fmt.Errorf("intent %q: %+d", k, v)
		}
	}
	return nil
}
