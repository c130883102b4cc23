# crr-node-daemon image for registries, built from the workspace root:
#   docker build -f manifests/images/node-daemon.Dockerfile -t crr-node-daemon:0.1.0 .
# The local test bed builds the same runtime layout without Docker (hack/images.sh).
FROM rust:1.89-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends protobuf-compiler && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p crr-node-daemon

FROM debian:bookworm-slim
COPY --from=build /src/target/release/crr-node-daemon /usr/local/bin/crr-node-daemon
# Non-root by default. The DaemonSet runs it as root only to open a root-owned runtime socket,
# or as this user with the socket's group (the chart's nodeDaemon.criSocketGroup).
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/crr-node-daemon"]
