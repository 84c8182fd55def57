package main

import (
	"testing"

	"github.com/enforcement-io/enforcement/pkg/events"
	"github.com/enforcement-io/enforcement/pkg/service"
	"github.com/enforcement-io/enforcement/pkg/testenv/monitoring"

	"github.com/enforcement-io/enforcement/services/source-scanner/internal/aks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/eks"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/gke"
	"github.com/enforcement-io/enforcement/services/source-scanner/internal/scanner"
)

// TestDashboardAndAlertsQueryExportedMetrics: every source-scanner metric the Grafana dashboard and the
// alerting rules under deploy/ query is one this service registers: its own metrics (internal/scanner/metrics.go and the EKS, GKE and AKS API call counters) and the
// consumer metrics service.Consume registers (events.NewMetrics, events.NewConsumerLag), on the
// registry service.Start serves.
func TestDashboardAndAlertsQueryExportedMetrics(t *testing.T) {
	reg := service.NewRegistry()
	scanner.NewMetrics(reg)
	eks.NewCallsCounter(reg)
	gke.NewCallsCounter(reg)
	aks.NewCallsCounter(reg)
	events.NewMetrics(reg, serviceName)
	events.NewConsumerLag(reg, serviceName, nil)
	if n := monitoring.CheckExported(t, serviceName, reg); n == 0 {
		t.Errorf("the dashboard and alerts query no metric of %s", serviceName)
	}
}
