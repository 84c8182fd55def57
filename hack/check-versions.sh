#!/usr/bin/env bash
# check-versions.sh fails if any module resolves k8s.io/client-go to anything but the v0.31 line
# that github.com/argoproj/argo-cd/v2 v2.14.21 builds with (design.md, "Dependency decisions").
set -euo pipefail
status=0
for m in $(go list -m -f '{{.Dir}}'); do
	v="$(cd "$m" && go list -m -f '{{.Version}}' k8s.io/client-go 2>/dev/null || true)"
	if [[ -n "$v" && "$v" != v0.31.* ]]; then
		echo "$m: k8s.io/client-go $v, want v0.31.x (argo-cd/v2 v2.14.21 pins it)" >&2
		status=1
	fi
done
exit $status
