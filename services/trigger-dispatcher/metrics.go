package main

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the dispatcher's own metrics, next to the consumer's (events.NewMetrics). Labels
// are low-cardinality: the phase, a fixed set of results and outcomes; never a cluster, rule or
// endpoint.
type metrics struct {
	attempts   *prometheus.CounterVec
	attemptDur *prometheus.HistogramVec
	deliveries *prometheus.CounterVec
	blocked    prometheus.Gauge
}

// Attempt results, the "result" label of the attempt metrics.
const (
	resultSuccess     = "success"      // 2xx
	resultClientError = "client_error" // 4xx other than 429: not retried
	resultRateLimited = "rate_limited" // 429: retried, honouring Retry-After
	resultServerError = "server_error" // 5xx: retried
	resultRedirect    = "redirect"     // 3xx: not followed, not retried
	resultTimeout     = "timeout"      // the trigger's timeout elapsed: retried
	resultConnection  = "connection"   // DNS, connect, TLS or read error: retried
	resultRefused     = "refused"      // the target address is denied by the network policy
	resultInvalid     = "invalid"      // the endpoint is not a usable http(s) URL
)

// Delivery outcomes, the "outcome" label of deliveries_total.
const (
	outcomeDelivered = "delivered"
	outcomeFailed    = "failed"
)

// newMetrics registers the dispatcher's metrics on reg (a non-global registry; registering twice
// panics, as prometheus.MustRegister does).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_trigger_dispatcher_attempts_total",
			Help: "Webhook attempts, by phase and result (success, client_error, rate_limited, server_error, redirect, timeout, connection, refused, invalid).",
		}, []string{"phase", "result"}),
		attemptDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "enforcement_trigger_dispatcher_attempt_duration_seconds",
			Help:    "Time one webhook attempt took until the response headers (or the error), by phase.",
			Buckets: prometheus.ExponentialBuckets(0.005, 3, 9),
		}, []string{"phase"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_trigger_dispatcher_deliveries_total",
			Help: "Final delivery outcomes, by phase and outcome (delivered, failed).",
		}, []string{"phase", "outcome"}),
		blocked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "enforcement_trigger_dispatcher_blocked_deliveries",
			Help: "beforeInstall deliveries that failed under failurePolicy Fail and hold their install, as of the last retry pass.",
		}),
	}
	reg.MustRegister(m.attempts, m.attemptDur, m.deliveries, m.blocked)
	return m
}

// attempt counts one webhook attempt and its duration. A nil *metrics records nothing, so unit
// tests can build a webhookClient without a registry.
func (m *metrics) attempt(phase, result string, d time.Duration) {
	if m == nil {
		return
	}
	m.attempts.WithLabelValues(phase, result).Inc()
	m.attemptDur.WithLabelValues(phase).Observe(d.Seconds())
}

// delivery counts one final outcome.
func (m *metrics) delivery(phase, outcome string) {
	if m == nil {
		return
	}
	m.deliveries.WithLabelValues(phase, outcome).Inc()
}
