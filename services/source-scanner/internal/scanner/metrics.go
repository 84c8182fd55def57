package scanner

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Scan results, the "result" label of the scans counter.
const (
	ResultComplete = "complete" // a complete listing was diffed against the inventory
	ResultDegraded = "degraded" // the listing could not be trusted; nothing was removed
	ResultError    = "error"    // the scanner itself failed (NATS, KV); retried next scan
)

// Metrics are the scanner's Prometheus metrics. Labels are the source kind and the source id
// (one per distinct source of the ClusterRules, a handful), never a cluster name.
type Metrics struct {
	Scans           *prometheus.CounterVec
	ListingDuration *prometheus.HistogramVec
	Degraded        *prometheus.CounterVec
	ClustersKnown   *prometheus.GaugeVec
	RemovalsHeld    *prometheus.GaugeVec
	Events          *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Scans: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_source_scanner_scans_total",
			Help: "Scans of a source, by source kind and result (complete, degraded, error).",
		}, []string{"kind", "result"}),
		ListingDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "enforcement_source_scanner_listing_duration_seconds",
			Help:    "Time to list every cluster of a source, including failed listings.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"kind"}),
		Degraded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_source_scanner_degraded_total",
			Help: "Source degraded events published, by source kind and reason.",
		}, []string{"kind", "reason"}),
		ClustersKnown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "enforcement_source_scanner_clusters_known",
			Help: "Clusters the inventory holds for a source (listed or missing, not yet gone).",
		}, []string{"kind", "source"}),
		RemovalsHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "enforcement_source_scanner_removals_held",
			Help: "Cluster removals the breaker holds for a source until an operator releases them.",
		}, []string{"kind", "source"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_source_scanner_events_published_total",
			Help: "Cluster events published (appeared, updated, gone), including republished ones.",
		}, []string{"kind", "event"}),
	}
	reg.MustRegister(m.Scans, m.ListingDuration, m.Degraded, m.ClustersKnown, m.RemovalsHeld, m.Events)
	return m
}

// Forget removes the per-source series of a source no rule uses any more.
func (m *Metrics) Forget(kind, source string) {
	m.ClustersKnown.DeleteLabelValues(kind, source)
	m.RemovalsHeld.DeleteLabelValues(kind, source)
}

// NewAPICallsCounter registers with reg and returns a cloud lister's counter of API calls, named
// name, with the labels operation and outcome (success, throttled, error).
func NewAPICallsCounter(reg prometheus.Registerer, name, help string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"operation", "outcome"})
	reg.MustRegister(c)
	return c
}
