# crr: the two newcomer commands are `make demo` and `make test` (see README.md).
SHELL := /usr/bin/env bash
CARGO ?= cargo

.PHONY: demo install uninstall bench test deps fmt-check clippy unit cluster-test chaos migration cluster-up cluster-down cluster-smoke crd manifests manifests-check monitoring-check

## demo: show the system working: the local cluster comes up, crr is built and installed from
## manifests/, and a CRR recreates one container of a Deployment's pod in place.
demo: cluster-up
	hack/install.sh
	hack/demo.sh
	@echo "demo: the cluster keeps running; use it with: $$(hack/cluster.sh env); stop it with: make cluster-down"

## bench-scale: crr beside 1,000, 5,000 and 10,000 pods on 100 kwok nodes (bench/scale.sh,
## BENCHMARKS.md): memory and CPU per replica idle and under churn, admission latency, recreate
## latency, bursts, API requests per request, and the operator with 1,000 finished requests.
.PHONY: bench-scale
bench-scale: deps
	bench/scale.sh

## test: everything CI runs: static checks, unit tests, then the cluster tests on the local
## test bed (built and started by hack/, taken down afterwards).
test: deps fmt-check manifests-check monitoring-check deny clippy unit fuzz-smoke cluster-test compat-test

## deps: the Debian packages the build and the test bed need (hack/install-deps.sh).
deps:
	hack/install-deps.sh

## deny: the dependency policy in deny.toml (licenses, banned crates, sources; hack/cargo-deny.sh).
.PHONY: deny
deny:
	hack/cargo-deny.sh

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

cluster-test:
	hack/cluster-test.sh

## compat-test: the compatibility leg: the oldest supported stack (CRR_COMPAT_STACK in
## hack/versions.sh) on a test bed of its own: crr installed, the e2e suite and the chaos
## containerd-restart scenario (README.md, "Supported versions").
.PHONY: compat-test
compat-test:
	hack/cluster-test.sh --compat

## fuzz: each cargo-fuzz target for CRR_FUZZ_SECONDS (600) with the corpus kept across runs;
## fuzz-smoke: a few seconds each from the committed seeds, as CI runs it (fuzz/README.md).
.PHONY: fuzz fuzz-smoke
fuzz:
	hack/fuzz.sh

fuzz-smoke:
	hack/fuzz.sh --smoke

## chaos: the fault suite (tests/e2e/tests/chaos.rs) on the local test bed: starts
## the test bed if none runs and installs crr if it is not installed (both left running), then
## restarts the apiserver and containerd and SIGKILLs crr's processes in the middle of recreates.
## hack/cluster-test.sh (make test, CI) runs it after the e2e suite.
chaos:
	hack/ensure-installed.sh
	. hack/versions.sh && . hack/cluster-env.sh && \
	KUBECONFIG="$$KUBECONFIG_ADMIN" $(CARGO) test -p crr-e2e --test chaos -- --include-ignored

## migration: the switch from OpenKruise by docs/migrating-from-openkruise.md, on the test bed
## (removes crr, stands in OpenKruise, installs crr again). hack/cluster-test.sh runs it last.
migration:
	hack/ensure-installed.sh
	. hack/versions.sh && . hack/cluster-env.sh && \
	KUBECONFIG="$$KUBECONFIG_ADMIN" $(CARGO) test -p crr-e2e --test migration -- --include-ignored

## upgrade: `helm upgrade` from the previous release (CRR_PREVIOUS_RELEASE in hack/versions.sh, built
## by hack/previous-release.sh) to the working tree by docs/upgrading.md, on the test bed, with
## requests waiting in their unready grace (tests/e2e/tests/upgrade.rs). It removes crr and
## installs it again with hack/install.sh at the end. hack/cluster-test.sh runs it before the migration.
.PHONY: upgrade
upgrade:
	hack/ensure-installed.sh
	. hack/versions.sh && . hack/cluster-env.sh && \
	KUBECONFIG="$$KUBECONFIG_ADMIN" $(CARGO) test -p crr-e2e --test upgrade -- --include-ignored

## cluster-up / cluster-down: the local Kubernetes test bed (hack/README.md).
cluster-up: deps
	hack/cluster.sh up

cluster-down:
	hack/cluster.sh down

cluster-smoke:
	hack/cluster-smoke.sh

## install: build crr, load its images into the local cluster and apply manifests/overlays/local.
install:
	hack/install.sh

uninstall:
	hack/uninstall.sh

## crd: regenerate crds/crr.yaml from the Rust types, then the install manifests.
crd:
	$(CARGO) run -q -p crr-crds --bin crdgen crds/crr.yaml
	hack/render-manifests.sh

## manifests: render the Helm chart (the source of truth) into the kustomize base.
manifests:
	hack/render-manifests.sh

manifests-check:
	hack/render-manifests.sh --check

## monitoring-check: the alerting rules (promtool check and unit tests), the test bed's scrape
## configuration, the chart's PrometheusRule and the dashboard's metric names (monitoring/README.md).
monitoring-check: deps
	hack/check-monitoring.sh

## bench: release build on the local cluster, the figures of BENCHMARKS.md (bench/run.sh).
bench: cluster-up
	bench/run.sh
