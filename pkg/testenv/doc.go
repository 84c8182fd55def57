// Package testenv starts the real servers that Enforcement's component tests run against, so
// that a test exercises the same NATS JetStream, kube-apiserver, etcd and CRD schemas as
// production instead of fakes that agree with whatever the code under test assumes.
//
//   - StartNATS runs nats-server in-process with JetStream on a temporary store; Restart keeps
//     the store and the port, so durable state (streams, consumers, KV) survives like it does
//     when a real server restarts. WithAuthorization(t, ShippedAuthorization(t, clusters...))
//     loads the accounts and users the repository ships (deploy/nats) into it.
//   - StartKube (or SharedKube with RunWithSharedKube in TestMain) runs kube-apiserver and etcd
//     through controller-runtime's envtest. The binaries are compiled from Go modules by
//     hack/build-tools.sh and cached, because no registry other than the Go module proxy is
//     reachable.
//   - ArgoCDCRDs and OCMCRDs return the upstream CRDs, copied byte for byte from the pinned
//     module versions (a test checks for drift), so the API server validates Applications,
//     Policies and ClusterClaims exactly as a real cluster with those products would.
//   - StartArgoCD runs Argo CD's API server (argocd-server, built from argo-cd/v2 by
//     hack/build-tools.sh --with argocd-server) and a Debian redis-server for it against a Kube,
//     with the settings it needs in a namespace and a random admin password: the real server for
//     tests of Argo CD's API (login, clusters, projects, Applications; no repo server runs).
//   - StartService runs a service's run function with a map environment, free health and metrics
//     ports and captured logs (shown when the test fails); TypedClient gives a controller-runtime
//     client for the given schemes.
//   - FreeAddr, Eventually, EventuallyTrue and SyncBuffer are the small helpers every test of the
//     workspace uses instead of its own copy; (*NATS).JetStream connects a JetStream client.
//
// Every helper that takes a testing.TB fails the test on error and registers its own cleanup.
// A component test typically reads:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunWithSharedKube(m)) }
//
//	func TestInstall(t *testing.T) {
//		bus := testenv.StartNATS(t)
//		kube := testenv.SharedKube(t)
//		kube.InstallCRDs(t, testenv.ArgoCDCRDs()...)
//		ns := kube.Namespace(t, "install")
//		// run the service against bus.URL() and kube.Kubeconfig, assert on kube.Client
//	}
package testenv
