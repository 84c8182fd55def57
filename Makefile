# Enforcement's build and test entry points. The workspace has one module per service, and
# `go test ./...` does not work at a root that holds only go.work, so every target iterates the
# modules that go.work lists.

MODULES := $(shell go list -m -f '{{.Dir}}')
SHELL := /bin/bash

.PHONY: test deps check lint tools fmt vet tidy generate bench build images compose-check fuzz

# FUZZ lists the fuzz targets as <module dir>:<package>:<FuzzName>. Their seeds and the inputs
# found so far (testdata/fuzz/<FuzzName>/ next to each test, committed) run in every go test.
FUZZ := pkg/events:.:FuzzDecode pkg/events:.:FuzzEscapeToken services/rule-engine:.:FuzzRender \
	services/source-scanner:./internal/rancher:FuzzParsePage services/source-scanner:./internal/eks:FuzzConvert \
	services/source-scanner:./internal/gke:FuzzConvert
# FUZZTIME is how long `make fuzz` runs each target; `make test` runs each for FUZZTIME_SHORT,
# a count of inputs (about 1 - 3 s each here). A duration can fail a target that found nothing:
# Go 1.26's fuzzing coordinator may report "context deadline exceeded" as the time runs out
# (golang/go#75804, fixed in Go 1.27), which a count of inputs never sets off.
FUZZTIME ?= 30s
FUZZTIME_SHORT ?= 2000x

# test is the one command CI runs (.ci/run): system packages, tools, hygiene checks, then every
# module's tests with the race detector against the real servers.
test: deps tools check
	@export KUBEBUILDER_ASSETS="$$(hack/build-tools.sh)"; \
	failed=0; \
	for m in $(MODULES); do \
		echo "== go test $$m"; \
		(cd $$m && go test -race -count=1 -timeout 20m ./...) || failed=1; \
	done; \
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_SHORT) || failed=1; \
	exit $$failed

# fuzz runs each fuzz target for FUZZTIME. A failing input is written to the package's
# testdata/fuzz/<FuzzName>/: fix the code, and commit the input so that every go test runs it.
fuzz:
	@failed=0; \
	for t in $(FUZZ); do \
		IFS=: read -r dir pkg name <<< "$$t"; \
		echo "== fuzz $$dir $$pkg $$name ($(FUZZTIME))"; \
		(cd $$dir && go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg) || failed=1; \
	done; \
	exit $$failed

# deps installs what the tests need beyond Go modules: Debian's redis-server (for argocd-server).
deps:
	@hack/test-deps.sh

# tools builds (once, then cached by version) etcd, kube-apiserver, nats-server and argocd-server.
tools:
	@hack/build-tools.sh --with argocd-server >/dev/null

# check fails on unformatted code, vet findings, untidy go.mod files, a k8s.io version other
# than the one argo-cd/v2 pins, generated files that differ from their sources, and lint findings.
check:
	@out="$$(gofmt -l $(MODULES))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done
	@for m in $(MODULES); do (cd $$m && go mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$m"; exit 1; }; done
	@hack/check-versions.sh
	@hack/check-repo.sh
	@hack/generate.sh && git diff --exit-code -- pkg/api deploy/k8s/enforcement-crds pkg/events/asyncapi.yaml \
		|| { echo "generated files are stale: run hack/generate.sh and commit"; exit 1; }
	@$(MAKE) --no-print-directory lint

# lint runs golangci-lint (pinned in tools/golangci-lint, built once and cached by version) with
# .golangci.yml in every module; golangci-lint's own cache makes a second run cheap.
lint:
	@hack/lint.sh $(MODULES)

fmt:
	gofmt -w $(MODULES)

vet:
	@for m in $(MODULES); do (cd $$m && go vet ./...) || exit 1; done

tidy:
	@for m in $(MODULES); do (cd $$m && go mod tidy) || exit 1; done

generate:
	hack/generate.sh

# bench prints the throughput and cost figures quoted in the READMEs (medians of 5 runs; the
# pipeline at 1,000 clusters among them), the pipeline once more at 10,000 clusters with 10 rules,
# then pkg/events' publish and consume figures next to the stock `nats bench` (hack/bench-bus.sh).
# -v keeps the benchmarks' logs whole (without it Go cuts each benchmark's log after ten lines).
bench: tools
	@export KUBEBUILDER_ASSETS="$$(hack/build-tools.sh)"; \
	for m in $(MODULES); do (cd $$m && go test -v -run XXX -bench . -count 5 -timeout 2h ./...) || exit 1; done; \
	cd test/e2e && PIPELINE_CLUSTERS=10000 PIPELINE_RULES=10 go test -v -run XXX -bench Pipeline -benchtime 1x -count 1 -timeout 3h .
	hack/bench-bus.sh

# build compiles every service binary into bin/ (ignored by git).
build:
	@mkdir -p bin
	@for s in services/*/; do CGO_ENABLED=0 go build -o bin/ ./$$s || exit 1; done

# images builds the static binaries and every container image FROM scratch (no registry needed),
# tagged enforcement/<name>:dev and :<version>; the build contexts go to dist/ (ignored by git).
images:
	hack/images.sh

# compose-check builds the images, brings deploy/compose up, waits for the demo's Applications
# and proves that `down -v` leaves no container, volume or network behind.
compose-check:
	hack/compose-check.sh
