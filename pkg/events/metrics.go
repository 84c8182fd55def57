package events

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what a service's consumer does with events. A nil *Metrics records nothing.
type Metrics struct {
	handled  *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the consumer metrics of a service on reg:
//
//	enforcement_<service>_events_handled_total{type,outcome}   outcome: acked, ignored, retried, panicked, dead_lettered, handed_back
//	enforcement_<service>_event_handling_seconds{type}
//
// retried and panicked count handler calls (a panic is also counted once more as dead_lettered
// when its dead letter is stored); the others count messages.
// service is the service name ("rule-engine"); '-' becomes '_'. Labels are low-cardinality:
// event types and outcomes only.
func NewMetrics(reg prometheus.Registerer, service string) *Metrics {
	prefix := "enforcement_" + strings.ReplaceAll(service, "-", "_") + "_"
	m := &Metrics{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: prefix + "events_handled_total",
			Help: "Events handled by the consumer, by event type and outcome.",
		}, []string{"type", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    prefix + "event_handling_seconds",
			Help:    "Time one handler call took, by event type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"type"}),
	}
	reg.MustRegister(m.handled, m.duration)
	return m
}

func (m *Metrics) outcome(eventType, outcome string) {
	if m == nil {
		return
	}
	m.handled.WithLabelValues(eventType, outcome).Inc()
}

func (m *Metrics) observe(eventType string, d time.Duration) {
	if m == nil {
		return
	}
	m.duration.WithLabelValues(eventType).Observe(d.Seconds())
}
