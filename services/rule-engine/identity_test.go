package main

import (
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestNameConflictShowsInReady: a cluster's provider identity travels into its install intents'
// target, and an install argo-syncer refuses with NameConflict (another cluster of the same name
// owns its Argo CD objects) makes the rule's Ready condition False with reason NameConflict,
// naming the cluster and the identity that owns the name.
func TestNameConflictShowsInReady(t *testing.T) {
	e := newEnv(t)
	e.start()
	e.createRule("names", v1beta1.ClusterRuleSpec{
		Enforcements: twoEnforcements()[:1],
		Source:       v1beta1.Source{Rancher: &v1beta1.RancherSource{}},
	})
	c := testCluster("prod", norman, true)
	c.Identity = "rancher:https://rancher.example/c-prod"
	e.publish(appeared(c, 1))
	in := e.waitIntents("install prod guestbook")[0].(*events.InstallIntent)
	if in.Cluster.Identity != c.Identity {
		t.Fatalf("install intent target identity %q; want the cluster's %q", in.Cluster.Identity, c.Identity)
	}

	owner := "static:enforcement/enforcement-static-clusters/prod"
	e.publish(&events.InstallFailed{IntentID: in.ID(), Rule: in.Rule, Cluster: "prod", Enforcement: "guestbook",
		Application: "prod-guestbook", Reason: "NameConflict", Permanent: true,
		Message: "cluster name prod is taken by cluster " + owner + " (its secret cluster-prod records it); cluster " + c.Identity + " gets nothing under that name"})
	cr := e.waitReady("names", v1beta1.ReasonNameConflict, nil)
	for _, cond := range cr.Status.Conditions {
		if cond.Type == v1beta1.ConditionReady && (!strings.Contains(cond.Message, "guestbook on prod") || !strings.Contains(cond.Message, owner)) {
			t.Errorf("Ready message %q does not name the cluster prod and its owner %s", cond.Message, owner)
		}
	}
}
