#!/usr/bin/env bash
# lint.sh runs golangci-lint, built from the version pinned in tools/golangci-lint (outside
# go.work) and cached like the other tools as $ENFORCEMENT_TOOLS_CACHE/golangci-lint-<version>/
# (default ~/.cache/enforcement/tools; a warm cache costs nothing), with the repository's
# .golangci.yml in every module go.work lists, or in the module folders given as arguments.
# golangci-lint keeps its own analysis cache (GOLANGCI_LINT_CACHE, default
# ~/.cache/golangci-lint), so a second run only re-analyses what changed.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ENFORCEMENT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enforcement/tools}"

version="$(GOWORK=off go -C "$root/tools/golangci-lint" list -m -f '{{.Version}}' github.com/golangci/golangci-lint/v2)"
dir="$cache/golangci-lint-$version"
bin="$dir/golangci-lint"

if [[ ! -x "$bin" ]]; then
	mkdir -p "$cache"
	exec 9>"$cache/.lock"
	flock 9
	if [[ ! -x "$bin" ]]; then
		mkdir -p "$dir"
		start=$SECONDS
		CGO_ENABLED=0 GOWORK=off go -C "$root/tools/golangci-lint" build -trimpath -ldflags='-s -w' \
			-o "$bin.tmp" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
		mv "$bin.tmp" "$bin"
		echo "built golangci-lint $version in $((SECONDS - start))s" >&2
	fi
	exec 9>&-
fi

if (($# == 0)); then
	mapfile -t modules < <(cd "$root" && go list -m -f '{{.Dir}}')
else
	modules=("$@")
fi

status=0
for m in "${modules[@]}"; do
	(cd "$m" && "$bin" run --config "$root/.golangci.yml" ./...) || status=1
done
exit $status
