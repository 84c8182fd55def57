//go:build tools

// Package tools pins the NATS CLI version that hack/bench-bus.sh compiles (build-tools.sh --with nats)
// to run the stock `nats bench` next to pkg/events' benchmarks.
package tools

import _ "github.com/nats-io/natscli/nats"
