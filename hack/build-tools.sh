#!/usr/bin/env bash
# build-tools.sh compiles the real servers the tests run (etcd, kube-apiserver, nats-server) from
# the Go modules pinned under tools/, outside go.work, and caches each binary under
# $ENFORCEMENT_TOOLS_CACHE/<name>-<version>/ (default ~/.cache/enforcement/tools); with
# --with nats it builds the NATS CLI too (for hack/bench-bus.sh only). A warm cache
# costs nothing; a cold one takes a few minutes on two cores. It prints the asset directory that
# envtest's BinaryAssetsDirectory (KUBEBUILDER_ASSETS) expects: etcd and kube-apiserver side by side.
# --with may be given more than once.
#
# --with argocd-server also builds Argo CD's API server (tools/argocd-server, argo-cd/v2 at the
# version services/argo-syncer pins), linked as <cache>/argocd-server: about 3 minutes on two
# cores with the modules downloaded. Only the Argo CD API tests need it (pkg/testenv's
# StartArgoCD asks for it; `make test` builds it up front), so the local run command does not
# wait for it. Those tests also need Debian's redis-server: hack/test-deps.sh installs it.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${ENFORCEMENT_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/enforcement/tools}"

# version_of prints the version a tool module pins for a dependency.
version_of() { GOWORK=off go -C "$root/tools/$1" list -m -f '{{.Version}}' "$2"; }

# build compiles package $3 of tool module $1 as $cache/$1-$2/$1 unless it is already there;
# $4, if given, adds linker flags (such as -X for a version variable).
build() {
	local name="$1" version="$2" pkg="$3" ldflags="-s -w ${4:-}" dir="$cache/$1-$2"
	if [[ -x "$dir/$name" ]]; then return; fi
	mkdir -p "$dir"
	local start=$SECONDS
	CGO_ENABLED=0 GOWORK=off go -C "$root/tools/$name" build -trimpath -ldflags="$ldflags" -o "$dir/$name.tmp" "$pkg"
	mv "$dir/$name.tmp" "$dir/$name"
	echo "built $name $version in $((SECONDS - start))s" >&2
}

etcd_v="$(version_of etcd go.etcd.io/etcd/server/v3)"
kube_v="$(version_of kube-apiserver k8s.io/kubernetes)"
nats_v="$(version_of nats-server github.com/nats-io/nats-server/v2)"

missing=false
with_argocd=false
with_nats=false
while (($# > 0)); do
	case "$1" in
	--missing) missing=true ;;
	--with)
		case "${2:-}" in
		argocd-server) with_argocd=true ;;
		nats) with_nats=true ;;
		*)
			echo "build-tools.sh: --with takes argocd-server or nats (the optional tools), got '${2:-}'" >&2
			exit 2
			;;
		esac
		shift
		;;
	*)
		echo "build-tools.sh: unknown option '$1'; usage: build-tools.sh [--missing] [--with argocd-server] [--with nats]" >&2
		exit 2
		;;
	esac
	shift
done
tools=("etcd $etcd_v go.etcd.io/etcd/server/v3" "kube-apiserver $kube_v k8s.io/kubernetes"
	"nats-server $nats_v github.com/nats-io/nats-server/v2")
if $with_argocd; then
	argocd_v="$(version_of argocd-server github.com/argoproj/argo-cd/v2)"
	tools+=("argocd-server $argocd_v github.com/argoproj/argo-cd/v2")
fi
if $with_nats; then
	natscli_v="$(version_of nats github.com/nats-io/natscli)"
	tools+=("nats $natscli_v github.com/nats-io/natscli")
fi

# --missing builds nothing: it prints "<name> <version> <module>" for every tool not built yet,
# so that a caller can say what a first run is about to compile (cmd/enforcement local does).
if $missing; then
	for tool in "${tools[@]}"; do
		read -r name version module <<<"$tool"
		[[ -x "$cache/$name-$version/$name" ]] || echo "$name $version $module"
	done
	exit 0
fi

# Two test binaries may ask for the tools at once on a cold cache: build under one lock.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

build etcd "$etcd_v" .
build kube-apiserver "$kube_v" k8s.io/kubernetes/cmd/kube-apiserver
build nats-server "$nats_v" github.com/nats-io/nats-server/v2
if $with_argocd; then
	# Argo CD's Makefile stamps the version the same way; /api/version reports it.
	build argocd-server "$argocd_v" . "-X github.com/argoproj/argo-cd/v2/common.version=${argocd_v#v}"
	ln -sf "$cache/argocd-server-$argocd_v/argocd-server" "$cache/argocd-server"
fi

# --with nats also builds the NATS CLI (tools/nats), which only the bus benchmark needs
# (hack/bench-bus.sh runs its stock `nats bench`), linked as $cache/nats.
if $with_nats; then
	build nats "$natscli_v" github.com/nats-io/natscli/nats
	ln -sf "$cache/nats-$natscli_v/nats" "$cache/nats"
fi

# envtest wants both control-plane binaries in one folder.
assets="$cache/envtest-$kube_v-etcd-$etcd_v"
mkdir -p "$assets"
ln -sf "$cache/etcd-$etcd_v/etcd" "$assets/etcd"
ln -sf "$cache/kube-apiserver-$kube_v/kube-apiserver" "$assets/kube-apiserver"
ln -sf "$cache/nats-server-$nats_v/nats-server" "$cache/nats-server"
echo "$assets"
