# crr-webhook image for registries, built from the workspace root:
#   docker build -f manifests/images/webhook.Dockerfile -t crr-webhook:0.1.0 .
# The local test bed builds the same runtime layout without Docker (hack/images.sh).
FROM rust:1.89-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p crr-webhook

FROM debian:bookworm-slim
COPY --from=build /src/target/release/crr-webhook /usr/local/bin/crr-webhook
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/crr-webhook"]
