package main

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// The service's metrics follow the Prometheus naming conventions.
func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg)
	events.NewMetrics(reg, serviceName)
	m.attempt(events.PhaseBeforeInstall, resultSuccess, 10*time.Millisecond)
	m.delivery(events.PhaseAfterInstall, outcomeDelivered)
	m.blocked.Set(1)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(m.attempts); n != 1 {
		t.Errorf("attempts series = %d, want 1", n)
	}
}
