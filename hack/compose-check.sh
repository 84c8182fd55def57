#!/usr/bin/env bash
# compose-check.sh proves the compose demo works on this machine (make compose-check; under
# CI=true, make test runs the same check): it builds the binaries and every image
# (hack/images.sh), brings deploy/compose/compose.yaml up under its own project name
# (enforcement-check, on free host ports, beside any demo a developer runs), waits until the
# demo's Argo CD Applications exist in the containerised Kubernetes API (bounded: three minutes),
# takes everything down with its volumes and fails if any container, volume or network of the
# project is left. The check itself is TestCompose in cmd/enforcement, which prints the time from
# `up` to each milestone.
#
# SKIP_IMAGES=1 reuses the images already built.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
command -v docker-compose >/dev/null || { echo "compose-check: docker-compose not found" >&2; exit 1; }
docker info >/dev/null || { echo "compose-check: no Docker engine" >&2; exit 1; }

cd "$root/cmd/enforcement"
ENFORCEMENT_COMPOSE_CHECK=1 go test -count=1 -run '^TestCompose$' -v -timeout 8m . 2>&1 |
	grep -v '^=== RUN'
exit "${PIPESTATUS[0]}"
