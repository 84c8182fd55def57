#!/usr/bin/env bash
# test-deps.sh installs the system packages the tests need that do not come from Go modules:
# Debian's redis-server, the real Redis that pkg/testenv's StartArgoCD runs beside argocd-server
# (Argo CD keeps its cache there; no Go module is a real Redis). It installs nothing when the
# command is on PATH already, so a second run costs nothing. On a machine without apt-get it
# says what to install instead of failing later inside a test.
set -euo pipefail

if command -v redis-server >/dev/null; then
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "test-deps.sh: redis-server is not on PATH and there is no apt-get: install Redis 7 (the redis-server command) and run again" >&2
	exit 1
fi
sudo=()
if [[ "$(id -u)" != 0 ]]; then
	sudo=(sudo)
fi
echo "test-deps.sh: installing Debian's redis-server for the Argo CD API tests" >&2
# Where an init system runs, the package also starts a system redis on port 6379: the tests do
# not use it, each starts its own on a free port without persistence.
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server >/dev/null ||
	{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server >/dev/null; }
command -v redis-server >/dev/null
