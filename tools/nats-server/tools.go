//go:build tools

// Package tools pins the nats-server version that build-tools.sh compiles.
package tools

import _ "github.com/nats-io/nats-server/v2"
