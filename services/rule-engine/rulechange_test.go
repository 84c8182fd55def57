package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestRuleChangesAndDeletionWhileDown covers a spec the schema accepts but the engine cannot use
// (InvalidSpec, nothing touched), a rule moving to another source (its old clusters are let go
// once the new source has listed),
// and rules deleted while the engine is down (the finalizer holds one; the other lost its
// finalizer by hand): the uninstalls follow on start.
func TestRuleChangesAndDeletionWhileDown(t *testing.T) {
	e := newEnv(t)
	stop := e.start()
	gkeSource := events.SourceRef{Kind: "rancher", ID: events.SourceID("rancher", "enforcement", "rancher", map[string]string{"driver": "gke"}),
		SecretNamespace: "enforcement", SecretName: "rancher"}
	a := testCluster("a", nil, true)
	b := testCluster("b", nil, true)
	b.Source = gkeSource
	e.publish(appeared(a, 1), appeared(b, 2))

	// A rule outside WATCH_NAMESPACES is not ours: no finalizer, no status, no intents (the
	// intent sets checked below would show them).
	other := e.kube.Namespace(t, e.ns+"-unwatched")
	if err := e.c.Create(context.Background(), &v1beta1.ClusterRule{ObjectMeta: metav1.ObjectMeta{Namespace: other, Name: "elsewhere"},
		Spec: v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements(), Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}}}); err != nil {
		t.Fatal(err)
	}

	e.createRule("bad", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Near", Values: []string{"x"}}}}})
	e.waitReady("bad", v1beta1.ReasonInvalidSpec, func(v1beta1.ClusterRuleStatus) error {
		if msg := e.rule("bad").Status.Conditions[0].Message; !strings.Contains(msg, "matchExpressions") {
			return fmt.Errorf("message %q", msg)
		}
		return nil
	})

	e.createRule("moving", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitIntents("install a guestbook")
	e.updateRule("moving", func(cr *v1beta1.ClusterRule) {
		cr.Spec.Source.Rancher.Filters = map[string]string{"driver": "gke"}
	})
	e.waitIntentSet("install a guestbook", "install b guestbook") // a waits for the new source's listing
	e.publish(&events.SourceListed{Source: gkeSource, Scan: 1, Known: 1})
	for _, ev := range e.waitIntentSet("install a guestbook", "uninstall a guestbook NoLongerMatches", "install b guestbook") {
		if in, ok := ev.(*events.InstallIntent); ok && in.Cluster.Name == "b" && (in.Cluster.Source != gkeSource || in.Rule.Generation != 2) {
			t.Errorf("install on the new source: %+v", in)
		}
	}

	e.createRule("manual", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[1:],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitIntentSet("install a guestbook", "uninstall a guestbook NoLongerMatches", "install b guestbook", "install a helm-guestbook")
	e.waitReady("manual", v1beta1.ReasonProgressing, nil)

	stop()
	e.deleteRule("moving")
	// manual loses its finalizer by hand and is gone before the engine is back.
	e.updateRule("manual", func(cr *v1beta1.ClusterRule) { cr.Finalizers = nil })
	e.deleteRule("manual")
	if cr := e.rule("moving"); cr.DeletionTimestamp.IsZero() {
		t.Fatal("rule gone without the engine: finalizer missing")
	}
	e.start()
	var elsewhere v1beta1.ClusterRule
	if err := e.c.Get(context.Background(), types.NamespacedName{Namespace: other, Name: "elsewhere"}, &elsewhere); err != nil ||
		len(elsewhere.Finalizers) != 0 || len(elsewhere.Status.Conditions) != 0 {
		t.Errorf("unwatched rule touched: %+v (%v)", elsewhere.ObjectMeta, err)
	}
	e.waitIntentSet("install a guestbook", "uninstall a guestbook NoLongerMatches", "install b guestbook",
		"install a helm-guestbook", "uninstall b guestbook RuleDeleted", "uninstall a helm-guestbook RuleDeleted")
	e.waitRuleGone("moving")
}
