package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
)

// The service's metrics follow the Prometheus naming conventions and the project's prefix.
func TestMetricsLint(t *testing.T) {
	reg := service.NewRegistry()
	m := newMetrics(reg)
	events.NewMetrics(reg, serviceName)
	m.evaluations.WithLabelValues(events.Compliant).Inc()
	m.apiErrors.WithLabelValues("get_claim").Inc()
	m.published.WithLabelValues("io.enforcement.compliance.changed.v1").Inc()
	m.setClaim(claimState{Exists: true, Value: events.NonCompliant})

	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		name := f.GetName()
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && !strings.HasPrefix(name, "enforcement_policy_watcher_") {
			t.Errorf("metric %s lacks the enforcement_policy_watcher_ prefix", name)
		}
	}
	// One gauge series per value, exactly one of them set.
	want := `
# HELP enforcement_policy_watcher_claim_value 1 for the value the ClusterClaim was last seen holding, 0 for the others (all 0: missing or foreign value).
# TYPE enforcement_policy_watcher_claim_value gauge
enforcement_policy_watcher_claim_value{value="compliant"} 0
enforcement_policy_watcher_claim_value{value="empty"} 0
enforcement_policy_watcher_claim_value{value="noncompliant"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "enforcement_policy_watcher_claim_value"); err != nil {
		t.Error(err)
	}
	m.setClaim(claimState{Exists: true, Value: "foreign"})
	if got := testutil.ToFloat64(m.claimValue.WithLabelValues(events.NonCompliant)); got != 0 {
		t.Errorf("a foreign value left noncompliant at %v", got)
	}
}

// BenchmarkFold folds a namespace of 1000 Policies, 10 of them failing.
func BenchmarkFold(b *testing.B) {
	policies := make([]*unstructured.Unstructured, 1000)
	for i := range policies {
		state := "Compliant"
		if i%100 == 0 {
			state = "NonCompliant"
		}
		policies[i] = policy(fmt.Sprintf("p%04d", i), state)
	}
	for b.Loop() {
		if fold(policies).Value != events.NonCompliant {
			b.Fatal("wrong fold")
		}
	}
}
