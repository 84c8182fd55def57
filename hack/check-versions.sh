#!/usr/bin/env bash
# check-versions.sh fails if any module resolves k8s.io/client-go to anything but the v0.31 line
# that github.com/argoproj/argo-cd/v2 v2.14.21 builds with (design.md, "Dependency decisions"),
# and if tools/argocd-server builds another argo-cd/v2 than the one services/argo-syncer uses.
set -euo pipefail
status=0
for m in $(go list -m -f '{{.Dir}}'); do
	v="$(cd "$m" && go list -m -f '{{.Version}}' k8s.io/client-go 2>/dev/null || true)"
	if [[ -n "$v" && "$v" != v0.31.* ]]; then
		echo "$m: k8s.io/client-go $v, want v0.31.x (argo-cd/v2 v2.14.21 pins it)" >&2
		status=1
	fi
done
# tools/argocd-server builds the Argo CD that the API tests run: the one argo-syncer's types are from.
root="$(cd "$(dirname "$0")/.." && pwd)"
argocd_tool="$(GOWORK=off go -C "$root/tools/argocd-server" list -m -f '{{.Version}}' github.com/argoproj/argo-cd/v2)"
argocd_syncer="$(go -C "$root/services/argo-syncer" list -m -f '{{.Version}}' github.com/argoproj/argo-cd/v2)"
if [[ "$argocd_tool" != "$argocd_syncer" ]]; then
	echo "tools/argocd-server builds argo-cd/v2 $argocd_tool, services/argo-syncer uses $argocd_syncer: pin the same" >&2
	status=1
fi
exit $status
