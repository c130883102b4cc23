# crr: the two newcomer commands are `make demo` and `make test` (see README.md); `make help`
# lists every target. Each target's comment starts `## <target>: <one line>`, which `make help`
# prints; the lines after it say more.
SHELL := /usr/bin/env bash
CARGO ?= cargo

.PHONY: help demo install uninstall bench bench-scale bench-rollout bench-triggers test deps deny fmt-check clippy unit \
	cluster-test compat-test compat-test-full fuzz fuzz-smoke chaos migration upgrade cluster-up cluster-down \
	cluster-smoke crd manifests manifests-check monitoring-check sbom

## help: this list: every target with the first line of its comment.
help:
	@awk '/^## [a-z-]+: / { target = $$2; sub(/:$$/, "", target); line = $$0; \
		sub(/^## [a-z-]+: /, "", line); printf "  %-17s %s\n", target, line }' $(MAKEFILE_LIST)

## demo: bring the local cluster up, install crr and recreate a Deployment pod's container.
## The cluster comes up, crr is built and installed from manifests/, and a CRR recreates one
## container of a Deployment's pod in place.
demo: cluster-up
	hack/install.sh
	hack/demo.sh
	@echo "demo: the cluster keeps running; use it with: $$(hack/cluster.sh env); stop it with: make cluster-down"

## test: everything CI runs: static checks, unit tests, the cluster tests, the compatibility leg.
## hack/test.sh runs each step timed, the stacks' Go builds in the background, and prints the
## table of steps last. The cluster tests run on the local test bed (built and started by hack/,
## taken down afterwards).
test:
	hack/test.sh

## deps: install the Debian packages the build and the test bed need (hack/install-deps.sh).
deps:
	hack/install-deps.sh

## deny: check the dependency policy in deny.toml (licenses, bans, sources; hack/cargo-deny.sh).
deny:
	hack/cargo-deny.sh

## fmt-check: check that the Rust sources are formatted (cargo fmt).
fmt-check:
	$(CARGO) fmt --all -- --check

## clippy: lint the workspace, every target, warnings as errors.
clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## unit: the workspace's tests that need no cluster (cargo test --workspace).
unit:
	$(CARGO) test --workspace

## cluster-test: every cluster suite on the local test bed, newest stack (hack/cluster-test.sh).
cluster-test:
	hack/cluster-test.sh

## compat-test: what differs between stacks, on the oldest supported stack (hack/cluster-test.sh).
## CRR_COMPAT_STACK in hack/versions.sh, on a test bed of its own: the restart-rule and CRI
## scenarios, conversion, the webhook, a rollout, a trigger, a containerd restart (README.md,
## "Supported versions").
compat-test:
	hack/cluster-test.sh --compat

## compat-test-full: the whole e2e suite and the containerd restart on the oldest supported stack.
compat-test-full:
	hack/cluster-test.sh --compat-full

## fuzz: each cargo-fuzz target for CRR_FUZZ_SECONDS (600), the corpus kept (fuzz/README.md).
fuzz:
	hack/fuzz.sh

## fuzz-smoke: each cargo-fuzz target for a few seconds from the committed seeds (not in make test:
## the seeds themselves run in `cargo test`, fuzz/README.md).
fuzz-smoke:
	hack/fuzz.sh --smoke

## chaos: the fault suite (tests/e2e/tests/chaos.rs) on the local test bed.
## Restarts the apiserver and containerd and SIGKILLs crr's processes in the middle of recreates.
## Like migration and upgrade, it starts the test bed if none runs and installs crr if it is not
## installed (both left running); hack/cluster-test.sh (make test, CI) runs it after the e2e suite.
## migration: the switch from OpenKruise by docs/migrating-from-openkruise.md, on the test bed.
## Removes crr, stands in OpenKruise, installs crr again. hack/cluster-test.sh runs it last.
## upgrade: `helm upgrade` from the previous release to the working tree by docs/upgrading.md.
## The previous release is CRR_PREVIOUS_RELEASE in hack/versions.sh (hack/previous-release.sh),
## with requests waiting in their unready grace; crr is installed again at the end.
chaos migration upgrade:
	hack/ensure-installed.sh
	. hack/versions.sh && . hack/cluster-env.sh && \
	KUBECONFIG="$$KUBECONFIG_ADMIN" $(CARGO) test --workspace --test $@ -- --include-ignored

## cluster-up: start the local Kubernetes test bed (hack/README.md).
cluster-up: deps
	hack/cluster.sh up

## cluster-down: stop the test bed and remove every trace of it.
cluster-down:
	hack/cluster.sh down

## cluster-smoke: prove the test bed without crr: a container stopped through containerd restarts.
cluster-smoke:
	hack/cluster-smoke.sh

## install: build crr, load its images into the test bed and apply manifests/overlays/local-client-auth.
install:
	hack/install.sh

## uninstall: remove crr from the test bed (hack/uninstall.sh).
uninstall:
	hack/uninstall.sh

## crd: regenerate crds/crr.yaml and crds/rollout.yaml from the Rust types, then the install manifests.
crd:
	$(CARGO) run -q -p crr-crds --bin crdgen crds/crr.yaml
	$(CARGO) run -q -p crr-crds --bin crdgen -- --rollout crds/rollout.yaml
	hack/render-manifests.sh

## manifests: render the Helm chart (the source of truth) into the kustomize base.
manifests:
	hack/render-manifests.sh

## manifests-check: check that the rendered manifests match the chart.
manifests-check:
	hack/render-manifests.sh --check

## monitoring-check: check the alerting rules, scrape configuration, PrometheusRule and dashboard.
## promtool check and unit tests, the test bed's scrape configuration, the chart's PrometheusRule
## and the dashboard's metric names (monitoring/README.md).
monitoring-check: deps
	hack/check-monitoring.sh

## sbom: CycloneDX SBOMs of the three images into target/sbom/ (hack/sbom.sh), after a release build.
sbom:
	hack/sbom.sh

## bench: the figures of BENCHMARKS.md: a release build on the local cluster (bench/run.sh).
bench: cluster-up
	bench/run.sh

## bench-rollout: a Deployment of 60 pods restarted by kubectl rollout restart, then in place by a ContainerRecreateRollout (bench/rollout.sh).
bench-rollout: deps
	bench/rollout.sh

## bench-triggers: the config-change trigger beside 2,000 ConfigMaps and 200 annotated Deployments on kwok nodes (bench/triggers.sh).
bench-triggers: deps
	bench/triggers.sh

## bench-scale: crr beside 1,000, 5,000 and 10,000 pods on 100 kwok nodes (bench/scale.sh).
## Memory and CPU per replica idle and under churn, admission latency, recreate latency, bursts,
## API requests per request, and the operator with many finished requests (BENCHMARKS.md).
bench-scale: deps
	bench/scale.sh
