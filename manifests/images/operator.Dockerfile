# crr-operator image for registries, built from the workspace root:
#   docker build -f manifests/images/operator.Dockerfile -t crr-operator:0.1.0 .
# The local test bed builds the same runtime layout without Docker (hack/images.sh).
FROM rust:1.89-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p crr-operator

FROM debian:bookworm-slim
COPY --from=build /src/target/release/crr-operator /usr/local/bin/crr-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/crr-operator"]
