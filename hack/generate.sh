#!/usr/bin/env bash
# generate.sh regenerates what is derived from Go types: the ClusterRule deep-copy functions and
# CRD (controller-gen, built from tools/controller-gen and cached like the other tools) with its
# copy in pkg/api/crds (embedded for Go: the preview validates against it), and the AsyncAPI
# document and the README routing table of pkg/events. Tests fail when the committed files differ
# from these outputs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ENFORCEMENT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enforcement/tools}"
v="$(GOWORK=off go -C "$root/tools/controller-gen" list -m -f '{{.Version}}' sigs.k8s.io/controller-tools)"
cg="$cache/controller-gen-$v"
if [[ ! -x "$cg" ]]; then
	mkdir -p "$cache"
	GOWORK=off CGO_ENABLED=0 go -C "$root/tools/controller-gen" build -o "$cg" sigs.k8s.io/controller-tools/cmd/controller-gen
fi
cd "$root/pkg/api"
"$cg" object paths=./...
"$cg" crd paths=./... output:crd:artifacts:config="$root/deploy/k8s/enforcement-crds/crds"
rm -f "$root"/pkg/api/crds/*.yaml
cp "$root"/deploy/k8s/enforcement-crds/crds/*.yaml "$root/pkg/api/crds/"
cd "$root/pkg/events"
UPDATE_ASYNCAPI=1 go test -run 'TestAsyncAPIDocumentIsCurrent|TestREADMERoutingTableIsCurrent' . >/dev/null
