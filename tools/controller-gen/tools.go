//go:build tools

// Package tools pins the controller-gen version that hack/generate.sh runs.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
