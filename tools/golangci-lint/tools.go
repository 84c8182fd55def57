//go:build tools

// Package tools pins the golangci-lint version that hack/lint.sh builds and runs.
package tools

import _ "github.com/golangci/golangci-lint/v2/cmd/golangci-lint"
