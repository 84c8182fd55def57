package main

import (
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/testenv/monitoring"
)

// TestDashboardQueriesExportedMetrics: every policy-watcher metric the Grafana dashboard and the
// alerting rules under deploy/ query is one this service registers: its own metrics (metrics.go)
// and the consumer metrics service.Consume registers for the claim writer (events.NewMetrics,
// events.NewConsumerLag), on the registry service.Start serves.
func TestDashboardAndAlertsQueryExportedMetrics(t *testing.T) {
	reg := service.NewRegistry()
	newMetrics(reg)
	events.NewMetrics(reg, serviceName)
	events.NewConsumerLag(reg, serviceName, nil)
	if n := monitoring.CheckExported(t, serviceName, reg); n == 0 {
		t.Errorf("the dashboard and alerts query no metric of %s", serviceName)
	}
}
