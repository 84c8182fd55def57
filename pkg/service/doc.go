// Package service is the lifecycle every Enforcement service shares, so that each service's
// main.go holds only its own wiring.
//
// # Start
//
// Start reads the configuration common to all services (Common: NATS_URL, NATS_USER,
// NATS_PASSWORD, NATS_CREDS, METRICS_ADDR, HEALTH_ADDR, PPROF_ADDR, LOG_LEVEL and
// SHUTDOWN_TIMEOUT), creates the JSON slog logger with a "service" attribute and the prometheus
// registry, registers the readiness checks the Options ask for, and starts the health (/healthz,
// /readyz) and metrics (/metrics) servers, and the profile server (/debug/pprof/) when
// PPROF_ADDR is set, before anything else, so that a service stuck later in its start-up is visible.
// Unless GOMEMLIMIT is set, it sets the Go runtime's soft memory limit to 90 % of the
// container's memory limit (memlimit.go), so that a service nearing its limit collects harder
// instead of being killed with garbage in its heap. With
// Options.Kubernetes it loads the Kubernetes configuration (KUBECONFIG or in-cluster) and checks
// that the API server answers. A service then wires its own parts:
//
//	svc, err := service.Start(ctx, service.Options{Name: "argo-syncer", Getenv: getenv,
//		Stdout: stdout, Kubernetes: true, NATS: true, Consumers: []string{events.ConsumerArgoSyncer}})
//	if err != nil {
//		return err
//	}
//	if err := svc.ConnectNATS(); err != nil { // retries until NATS is up; applies the topology
//		return svc.Abort(err)
//	}
//	svc.Go("informers", syncer.Run)   // a background worker
//	if err := svc.Consume(events.ConsumerOptions{Name: events.ConsumerArgoSyncer}, h.Handle); err != nil {
//		return svc.Abort(err)
//	}
//	return svc.Wait()
//
// That code is the service's run function, and its main is one line, service.Main(name, run):
// run gets a context that SIGINT and SIGTERM cancel, and an error from it ends the process with
// status 1 after "<name>: <error>" on stderr.
//
// Readiness: "kubernetes" (Options.Kubernetes) passes while the API server answers; "nats"
// (Options.NATS) fails until ConnectNATS connected and while the connection is down; "consumer"
// (Options.Consumers) fails until every declared consumer is bound by Consume, passes while
// SetStandby(true), and fails again once the stop begins. All are registered before /readyz is
// served.
//
// # Replicas
//
// A service whose work must happen in one place at a time (per-key order, one writer) runs
// several replicas with leader election: LoadLeaderElection reads LEADER_ELECTION and its
// namespace and timings, and Lead blocks until this replica holds the service's Lease
// (client-go leaderelection, a coordination.k8s.io Lease). A service calls it after the steps
// that only connect or read (caches, NATS, buckets) and before it consumes or writes, so that
// the standby consumes and writes nothing and a takeover is quick. A leader that cannot renew
// its Lease ends with ErrLeadershipLost.
//
// # Stop
//
// Wait returns when Start's context ends (SIGTERM) or a worker started with Go fails. The stop
// runs these steps in order, all of them within one SHUTDOWN_TIMEOUT (default 30s; the pod's
// terminationGracePeriodSeconds must be larger):
//
//  1. "Stopping" is logged, the "consumer" check fails, and the OnStop functions run.
//  2. Every consumer stops: pulling ends, in-flight handlers finish (their contexts survive the
//     signal), messages not started are handed back to the server.
//  3. The workers' context is cancelled and the service waits for them to return.
//  4. The NATS connection is drained and the service waits until it is closed, so that the acks
//     and publishes of the handlers are on the server before the process exits.
//  5. A replica that leads (Lead) releases its Lease, so that the standby takes over at once
//     and starts from everything this one acknowledged and wrote.
//  6. The metrics and health servers shut down; "Stopped" is logged.
//
// A step that does not finish in time is cut short (the connection closed, the servers
// closed) and reported in Wait's error; messages not acknowledged are then redelivered to the
// next instance after their AckWait. Wait returns nil after a clean stop on the signal, and the
// worker's error when a worker ended the service.
package service
