# crr: the two newcomer commands are `make demo` and `make test` (see README.md).
SHELL := /usr/bin/env bash
CARGO ?= cargo

.PHONY: demo test fmt-check clippy unit crd

## demo: show the system working. Until the local cluster lands (issue 4) this runs the real
## admission + conversion code on the upstream sample CRR against a two-container pod.
demo:
	$(CARGO) run -q -p crr-webhook --example admit-sample

## test: everything CI runs.
test: fmt-check clippy unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

## crd: regenerate crds/crr.yaml from the Rust types.
crd:
	$(CARGO) run -q -p crr-crds --bin crdgen crds/crr.yaml
