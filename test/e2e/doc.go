// Package e2e tests the product whole: the built service binaries run as separate processes,
// configured only through the environment of design.md, against a real NATS server, a real
// kube-apiserver with the real CRDs, and a Rancher-compatible HTTP server (the one fake: the
// cloud API). Each test starts its own system; nothing is shared between tests but the compiled
// binaries.
package e2e
