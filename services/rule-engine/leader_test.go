package main

import (
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
)

// TestLeaderElection runs two replicas: the second waits (and is ready) while the first leads,
// takes over when the first stops, and carries on from the state the first wrote, with no
// intent sent twice.
func TestLeaderElection(t *testing.T) {
	e := newEnv(t)
	e.vars["LEADER_ELECTION"] = "true"
	e.vars["LEADER_ELECTION_NAMESPACE"] = e.ns
	stopFirst := e.start()
	e.createRule("r", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.publish(appeared(testCluster("a", nil, true), 1))
	e.waitIntents("install a guestbook")

	e.start() // standby: start waits for /readyz, which a standby passes
	stopFirst()
	e.publish(appeared(testCluster("b", nil, true), 2))
	e.waitIntents("install a guestbook", "install b guestbook")
	e.waitReady("r", v1beta1.ReasonProgressing, nil)
}
