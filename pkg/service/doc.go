// Package service holds the plumbing every Enforcement service shares, so that each service's
// main.go is only its own story: configuration read from the environment into typed values with
// errors that name the variable, a JSON slog logger with a "service" attribute, the metrics
// (:8080 /metrics) and health (:8081 /healthz, /readyz) servers, a NATS connection that retries,
// and the Kubernetes client configuration (KUBECONFIG or in-cluster).
package service
