package main

import (
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Metrics are argo-syncer's own metrics, next to the consumer metrics of pkg/events:
//
//	enforcement_argo_syncer_api_writes_total{kind,verb,result}   kind: Secret, AppProject, Application
//	enforcement_argo_syncer_api_reads_total{kind,reason,result}  reads beside the informers' (reason: drift_check, conflict)
//	enforcement_argo_syncer_intents_total{type,outcome}          outcome: installed, waiting, failed, uninstalled, stale
//	enforcement_argo_syncer_unregistrations_held_total           foreign Applications keep a cluster's AppProject
//
// Labels are low-cardinality: never a cluster or rule name. A nil *Metrics records nothing.
type Metrics struct {
	writes  *prometheus.CounterVec
	reads   *prometheus.CounterVec
	intents *prometheus.CounterVec
	held    prometheus.Counter
	// health counts the ApplicationHealth events published, by health.
	health *prometheus.CounterVec
	// API mode only.
	argocdRequests *prometheus.CounterVec
	argocdLogins   *prometheus.CounterVec
}

// NewMetrics registers argo-syncer's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_api_writes_total",
			Help: "Write requests sent to the Kubernetes API, by object kind, verb and result.",
		}, []string{"kind", "verb", "result"}),
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_api_reads_total",
			Help: "Objects read from the API beside the informers' list and watch, by kind, reason (drift_check: an Application whose cached spec digest is not the rendered one's; conflict: re-read after a write conflict) and result.",
		}, []string{"kind", "reason", "result"}),
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_intents_total",
			Help: "Intents handled, by intent type and outcome.",
		}, []string{"type", "outcome"}),
		argocdRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_argocd_api_requests_total",
			Help: "Requests sent to Argo CD's API server in API mode, by method and gRPC code (OK when it succeeded).",
		}, []string{"method", "code"}),
		argocdLogins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_argocd_api_logins_total",
			Help: "Log-ins to Argo CD's API server in API mode (the first one, then one per expired session), by result.",
		}, []string{"result"}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_unregistrations_held_total",
			Help: "Cluster unregistrations held back because Applications Enforcement does not manage use the cluster's AppProject.",
		}),
		health: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "enforcement_argo_syncer_application_health_published_total",
			Help: "Application health reports published (a change of what Argo CD reports for an owned Application), by health status.",
		}, []string{"health"}),
	}
	reg.MustRegister(m.writes, m.reads, m.intents, m.held, m.argocdRequests, m.argocdLogins, m.health)
	return m
}

func (m *Metrics) write(kind, verb string, err error) {
	if m == nil {
		return
	}
	m.writes.WithLabelValues(kind, verb, resultOf(err)).Inc()
}

func (m *Metrics) read(kind, reason string, err error) {
	if m == nil {
		return
	}
	m.reads.WithLabelValues(kind, reason, resultOf(err)).Inc()
}

func (m *Metrics) argocdRequest(method, code string) {
	if m == nil {
		return
	}
	m.argocdRequests.WithLabelValues(method, code).Inc()
}

func (m *Metrics) argocdLogin(err error) {
	if m == nil {
		return
	}
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.argocdLogins.WithLabelValues(result).Inc()
}

func (m *Metrics) intent(typ, outcome string) {
	if m == nil {
		return
	}
	m.intents.WithLabelValues(typ, outcome).Inc()
}

// resultOf folds an API error into a few values.
func resultOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		return "conflict"
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return "rejected"
	default:
		return "error"
	}
}

func (m *Metrics) unregistrationHeld() {
	if m == nil {
		return
	}
	m.held.Inc()
}

func (m *Metrics) healthPublished(health string) {
	if m == nil {
		return
	}
	if health == "" {
		health = "none"
	}
	m.health.WithLabelValues(health).Inc()
}
