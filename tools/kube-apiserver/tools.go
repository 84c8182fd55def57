//go:build tools

// Package tools pins the kube-apiserver version that build-tools.sh compiles for envtest.
package tools

import _ "k8s.io/kubernetes/cmd/kube-apiserver"
