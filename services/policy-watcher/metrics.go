package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/enforcement-io/enforcement/pkg/events"
)

// claimValues are the values the service writes; the claim value gauge has one series for each.
var claimValues = []string{events.Compliant, events.NonCompliant, events.Empty}

// metrics are the service's own series. Labels are bounded: the three values, a handful of
// operations and event types; never a cluster or policy name.
type metrics struct {
	evaluations *prometheus.CounterVec
	claimWrites *prometheus.CounterVec
	clockWrites prometheus.Counter
	claimValue  *prometheus.GaugeVec
	policies    prometheus.Gauge
	apiErrors   *prometheus.CounterVec
	published   *prometheus.CounterVec
}

// newMetrics registers the service's series on reg, with every claim value's series present
// from the start (at 0), so that dashboards and alerts see them before the first write.
func newMetrics(reg prometheus.Registerer) *metrics {
	const p = "enforcement_policy_watcher_"
	m := &metrics{
		evaluations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: p + "evaluations_total",
			Help: "Folds of the namespace's Policies, by observed value (compliant, noncompliant, empty) or error.",
		}, []string{"result"}),
		claimWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: p + "claim_writes_total",
			Help: "Writes of the ClusterClaim's spec.value (creations included), by value written.",
		}, []string{"value"}),
		clockWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: p + "clock_writes_total",
			Help: "Writes of the debounce clock annotation alone on the ClusterClaim.",
		}),
		claimValue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: p + "claim_value",
			Help: "1 for the value the ClusterClaim was last seen holding, 0 for the others (all 0: missing or foreign value).",
		}, []string{"value"}),
		policies: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: p + "policies",
			Help: "Policies folded by the last evaluation.",
		}),
		apiErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: p + "api_errors_total",
			Help: "Kubernetes API calls that failed, by operation; each is logged and retried.",
		}, []string{"operation"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: p + "events_published_total",
			Help: "Events published to NATS, by event type.",
		}, []string{"type"}),
	}
	reg.MustRegister(m.evaluations, m.claimWrites, m.clockWrites, m.claimValue, m.policies, m.apiErrors, m.published)
	for _, v := range claimValues {
		m.claimValue.WithLabelValues(v)
		m.claimWrites.WithLabelValues(v)
	}
	return m
}

// setClaim records the value the claim holds.
func (m *metrics) setClaim(c claimState) {
	for _, v := range claimValues {
		g := 0.0
		if c.Exists && c.Value == v {
			g = 1
		}
		m.claimValue.WithLabelValues(v).Set(g)
	}
}
