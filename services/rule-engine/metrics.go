package main

import "github.com/prometheus/client_golang/prometheus"

// metrics are the rule engine's own metrics (the consumer's are events.NewMetrics). Labels are
// low-cardinality: intent kind and uninstall reason, cache outcome; never a rule or cluster.
type metrics struct {
	intents      *prometheus.CounterVec
	renders      *prometheus.CounterVec
	renderErrors prometheus.Counter
	statusWrites prometheus.Counter
	clusters     prometheus.Gauge
	rules        prometheus.Gauge
	// removalsHeld counts the cluster removals the rule edit breaker holds, across rules.
	removalsHeld prometheus.Gauge
	// rollouts counts the rules' staged rollouts by phase.
	rollouts *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const p = "enforcement_rule_engine_"
	m := &metrics{
		intents: prometheus.NewCounterVec(prometheus.CounterOpts{Name: p + "intents_published_total",
			Help: "Install and uninstall intents published, by kind and uninstall reason."}, []string{"kind", "reason"}),
		renders: prometheus.NewCounterVec(prometheus.CounterOpts{Name: p + "renders_total",
			Help: "Template renders of a (rule, cluster) pair, by render cache outcome (hit, miss, failed: a remembered stopped render)."}, []string{"cache"}),
		renderErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: p + "template_errors_total",
			Help: "Renders of a (rule, cluster) pair that failed with a template error."}),
		statusWrites: prometheus.NewCounter(prometheus.CounterOpts{Name: p + "status_writes_total",
			Help: "ClusterRule status updates written to the API server."}),
		clusters: prometheus.NewGauge(prometheus.GaugeOpts{Name: p + "clusters",
			Help: "Clusters in the rule engine's view, across sources."}),
		rules: prometheus.NewGauge(prometheus.GaugeOpts{Name: p + "rules",
			Help: "ClusterRules the rule engine evaluates."}),
		removalsHeld: prometheus.NewGauge(prometheus.GaugeOpts{Name: p + "removals_held",
			Help: "Cluster removals the rule edit breaker holds until an operator releases them, across rules."}),
		rollouts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: p + "rollouts",
			Help: "Staged rollouts of rules (spec.rollout), by phase (Progressing, Baking, AwaitingApproval, Halted, Complete)."}, []string{"phase"}),
	}
	if reg != nil {
		reg.MustRegister(m.intents, m.renders, m.renderErrors, m.statusWrites, m.clusters, m.rules, m.removalsHeld, m.rollouts)
	}
	return m
}
