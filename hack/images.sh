#!/usr/bin/env bash
# images.sh builds every container image of Enforcement on a machine that cannot pull anything:
# each image is FROM scratch and holds one static binary compiled here first (CGO off), the
# host's CA bundle, Go's time zone database and a passwd entry for the non-root user 65532.
#
#   hack/images.sh                  all images, tagged enforcement/<name>:dev and :<version>
#   hack/images.sh rule-engine etcd only the named images
#
# Images: the five services (services/<name>), the enforcement CLI that also initialises the
# compose demo (cmd/enforcement), and the servers the compose file runs, built by
# hack/build-tools.sh from their Go modules (tools/<name>). Every image has the same Dockerfile,
# written by this script (the function dockerfile below); the images differ only in their
# binary, description, exposed ports and the folders the non-root user writes to.
#
# Everything is staged under dist/ (ignored by git): dist/bin holds the binaries and
# dist/images/<name> one build context per image, its Dockerfile included, so
# `docker build dist/images/<name>` rebuilds one by hand (or in a registry-backed CI). VERSION
# overrides the version label and tag (default: git describe); the revision label is the commit.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dist="$root/dist"
services=(source-scanner rule-engine argo-syncer trigger-dispatcher policy-watcher)
tools=(nats-server etcd kube-apiserver)

version="${VERSION:-$(git -C "$root" describe --tags --always --dirty)}"
revision="$(git -C "$root" rev-parse HEAD)"
created="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

wanted=("$@")
if [[ ${#wanted[@]} -eq 0 ]]; then wanted=("${services[@]}" enforcement "${tools[@]}"); fi

# dockerfile prints the Dockerfile of image $1, or fails for a name that is not an image. The
# build context (stage below) holds the binary named like the image, passwd and group, the CA
# bundle, Go's time zone database, and empty tmp/ and data/ folders.
dockerfile() {
	local name="$1" description ports="8080 8081" writable=""
	case "$name" in
	source-scanner) description="polls cluster sources and publishes cluster appeared, updated and gone events." ;;
	rule-engine) description="the ClusterRule controller: matches clusters to rules and emits install and uninstall intents." ;;
	argo-syncer) description="turns install and uninstall intents into Argo CD clusters, AppProjects and Applications." ;;
	trigger-dispatcher) description="delivers the beforeInstall and afterInstall webhooks of ClusterRules." ;;
	policy-watcher) description="runs on each managed cluster and feeds OCM Policy compliance into a ClusterClaim." ;;
	enforcement)
		description="the operator's command line (dead letters, event watch) and the compose demo's initialiser."
		ports=""
		# crds: the ClusterRule CRD, installed by "enforcement compose-init seed" (CRD_DIR);
		# /shared: the compose demo's volume (certificates, token, kubeconfig).
		writable=$'COPY crds /crds\nCOPY --chown=65532:65532 data /shared'
		;;
	nats-server)
		description="NATS server with JetStream, built from github.com/nats-io/nats-server/v2 (hack/build-tools.sh)."
		ports="4222 8222"
		writable="COPY --chown=65532:65532 data /data" # JetStream storage (mount a volume here)
		;;
	etcd)
		description="etcd, built from go.etcd.io/etcd/server/v3 (hack/build-tools.sh), for the local Kubernetes API."
		ports="2379"
		writable="COPY --chown=65532:65532 data /var/lib/etcd" # etcd data (mount a volume here)
		;;
	kube-apiserver)
		description="kube-apiserver, built from k8s.io/kubernetes (hack/build-tools.sh), for the local Kubernetes API."
		ports="6443"
		;;
	*) return 1 ;;
	esac
	cat <<EOF
# Image of $name: $description
# FROM scratch, so it builds without a registry; written by hack/images.sh with its context.
FROM scratch

ARG VERSION=dev
ARG REVISION=unknown
ARG CREATED
LABEL org.opencontainers.image.title="enforcement/$name" \\
      org.opencontainers.image.description="$description" \\
      org.opencontainers.image.source="https://github.com/enforcement-io/enforcement" \\
      org.opencontainers.image.version="\${VERSION}" \\
      org.opencontainers.image.revision="\${REVISION}" \\
      org.opencontainers.image.created="\${CREATED}"

# A user database with the non-root user, so tools that look the user up find it.
COPY passwd group /etc/
COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
# Go's time zone database; the time package reads the file named by ZONEINFO.
COPY zoneinfo.zip /usr/share/zoneinfo.zip
ENV ZONEINFO=/usr/share/zoneinfo.zip
COPY --chown=65532:65532 tmp /tmp
${writable}
COPY $name /$name

USER 65532:65532
${ports:+EXPOSE $ports}
ENTRYPOINT ["/$name"]
EOF
}

# Compile the project's binaries in one go build (it parallelises across packages).
pkgs=()
for name in "${wanted[@]}"; do
	case "$name" in
	enforcement) pkgs+=(./cmd/enforcement) ;;
	nats-server | etcd | kube-apiserver) ;;
	*)
		pkgs+=("./services/$name")
		;;
	esac
done
for name in "${wanted[@]}"; do
	dockerfile "$name" >/dev/null || { echo "images.sh: unknown image $name" >&2; exit 2; }
done
mkdir -p "$dist/bin"
if [[ ${#pkgs[@]} -gt 0 ]]; then
	start=$SECONDS
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$dist/bin/" "${pkgs[@]}")
	echo "built ${pkgs[*]} in $((SECONDS - start))s" >&2
fi

# The servers come from build-tools.sh's cache (built once per version, static, CGO off).
tool_cache="$(dirname "$("$root/hack/build-tools.sh")")"
nats_v="$(GOWORK=off go -C "$root/tools/nats-server" list -m -f '{{.Version}}' github.com/nats-io/nats-server/v2)"
etcd_v="$(GOWORK=off go -C "$root/tools/etcd" list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
kube_v="$(GOWORK=off go -C "$root/tools/kube-apiserver" list -m -f '{{.Version}}' k8s.io/kubernetes)"

# stage prepares dist/images/$1: the binary $2 plus the files every image needs. Directories
# the non-root user writes to (tmp, data) are staged empty and copied with --chown.
stage() {
	local name="$1" binary="$2" ctx="$dist/images/$1"
	rm -rf "$ctx"
	mkdir -p "$ctx/tmp" "$ctx/data"
	cp "$binary" "$ctx/$name"
	cp /etc/ssl/certs/ca-certificates.crt "$ctx/"
	cp "$(go env GOROOT)/lib/time/zoneinfo.zip" "$ctx/"
	echo 'nonroot:x:65532:65532:nonroot:/tmp:/sbin/nologin' >"$ctx/passwd"
	echo 'nonroot:x:65532:' >"$ctx/group"
	dockerfile "$name" >"$ctx/Dockerfile"
}

for name in "${wanted[@]}"; do
	image_version="$version"
	case "$name" in
	nats-server) stage "$name" "$tool_cache/nats-server-$nats_v/nats-server"; image_version="$nats_v" ;;
	etcd) stage "$name" "$tool_cache/etcd-$etcd_v/etcd"; image_version="$etcd_v" ;;
	kube-apiserver) stage "$name" "$tool_cache/kube-apiserver-$kube_v/kube-apiserver"; image_version="$kube_v" ;;
	enforcement)
		stage "$name" "$dist/bin/enforcement"
		cp -r "$root/deploy/k8s/enforcement-crds/crds" "$dist/images/$name/crds"
		;;
	*) stage "$name" "$dist/bin/$name" ;;
	esac
	# Quiet on success (the legacy builder prints a deprecation notice); the whole log on failure.
	if ! out="$(docker build \
		--build-arg VERSION="$image_version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
		-t "enforcement/$name:dev" -t "enforcement/$name:$image_version" \
		"$dist/images/$name" 2>&1)"; then
		echo "$out" >&2
		echo "images.sh: docker build of $name failed" >&2
		exit 1
	fi
	echo "enforcement/$name:dev ($image_version) $(docker image inspect -f '{{.Size}}' "enforcement/$name:dev" | awk '{printf "%.1f MB", $1/1e6}')"
done
