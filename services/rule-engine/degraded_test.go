package main

import (
	"fmt"
	"strings"
	"testing"

	v1beta1 "github.com/enforcement-io/enforcement/pkg/api/v1beta1"
	"github.com/enforcement-io/enforcement/pkg/events"
)

// TestSourceDegradedSurvivesRestartAndEndsWithRecovered: a degraded source shows on its rules'
// Ready condition, keeps showing after a rule-engine restart (the mark is stored, not only in
// memory), and a "source recovered" event clears it at once, long before SOURCE_DEGRADED_TTL.
func TestSourceDegradedSurvivesRestartAndEndsWithRecovered(t *testing.T) {
	e := newEnv(t)
	e.vars["SOURCE_DEGRADED_TTL"] = "1h"
	stop := e.start()
	e.createRule("dev", v1beta1.ClusterRuleSpec{Enforcements: twoEnforcements()[:1],
		Source: v1beta1.Source{Rancher: &v1beta1.RancherSource{}}})
	e.waitReady("dev", v1beta1.ReasonNoClusters, nil)

	e.publish(&events.SourceDegraded{Source: rancherSource(), Scan: 7, Reason: events.DegradedListFailed, Message: "rancher: 502"})
	e.waitReady("dev", v1beta1.ReasonSourceDegraded, nil)

	stop()
	stop = e.start()
	// A cluster event after the restart makes the status be computed again: the restarted
	// engine must still know the source is degraded (it outranks Progressing).
	e.publish(appeared(testCluster("a", nil, true), 1))
	e.waitReady("dev", v1beta1.ReasonSourceDegraded, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 1 {
			return fmt.Errorf("matched %d clusters, want 1", st.MatchedClusters)
		}
		if msg := st.Conditions[0].Message; !strings.Contains(msg, "rancher: 502") {
			return fmt.Errorf("condition message %q does not carry the degraded report", msg)
		}
		return nil
	})

	e.publish(&events.SourceRecovered{Source: rancherSource(), Scan: 9, DegradedSince: 7, Known: 1})
	e.waitReady("dev", v1beta1.ReasonProgressing, nil)

	// And the recovery is stored too: after another restart the condition does not come back.
	stop()
	e.start()
	e.publish(appeared(testCluster("b", nil, true), 2))
	e.waitReady("dev", v1beta1.ReasonProgressing, func(st v1beta1.ClusterRuleStatus) error {
		if st.MatchedClusters != 2 {
			return fmt.Errorf("matched %d clusters, want 2", st.MatchedClusters)
		}
		return nil
	})
}
