# crr-operator image for registries, built from the workspace root:
#   docker build -f manifests/images/operator.Dockerfile -t crr-operator:0.1.0 .
# The local test bed builds the same runtime layout without Docker (hack/images.sh).
# The bases, by tag here; pin them by digest where you build (the digests could not be looked up
# where this file was written: no registry is reachable there), e.g.
#   --build-arg BUILD_IMAGE=rust:1.89-bookworm@sha256:<digest> --build-arg RUN_IMAGE=debian:bookworm-slim@sha256:<digest>
ARG BUILD_IMAGE=rust:1.89-bookworm
ARG RUN_IMAGE=debian:bookworm-slim
FROM ${BUILD_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p crr-operator

FROM ${RUN_IMAGE}
COPY --from=build /src/target/release/crr-operator /usr/local/bin/crr-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/crr-operator"]
