#!/usr/bin/env bash
# A real Prometheus (Debian's package, hack/install-deps.sh) for the local test bed.
# It scrapes crr's webhook, operator and node daemon through the API server's pod proxy
# (monitoring/prometheus.yml) and evaluates monitoring/alerts.yaml.
#
#   hack/prometheus.sh up       start it in the background (the test bed must be up), wait until
#                               it is ready; on a running one, rewrite its configuration and reload
#   hack/prometheus.sh down     stop it and remove its data
#   hack/prometheus.sh status   running or not, and `up` of every scrape target
#   hack/prometheus.sh url      prints its URL (http://127.0.0.1:9090)
#
# It listens on 127.0.0.1 only ($CRR_PROMETHEUS_PORT, 9090) and connects to nothing but the
# test bed's API server. Debian builds Prometheus without kubernetes_sd, so a second background
# process of this script (`discover`, ending with Prometheus) lists crr's pods every 5 seconds
# and writes them as file_sd target files. Configuration, targets, data and pidfiles live in
# $CRR_PROMETHEUS_DIR (/var/lib/crr-prometheus), outside the test bed's directory, so `down`
# still finds them after `hack/cluster.sh down` removed /var/lib/crr-cluster; the log is
# /var/lib/crr-cluster/logs/prometheus.log, beside the test bed's. Retention: 6 hours.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
. "$here/versions.sh"
. "$here/cluster-env.sh"

PROM_DIR="${CRR_PROMETHEUS_DIR:-/var/lib/crr-prometheus}"
PROM_PORT="${CRR_PROMETHEUS_PORT:-9090}"
PROM_ADDR="127.0.0.1:$PROM_PORT"
PROM_CONFIG="$PROM_DIR/prometheus.yml"
PROM_DATA="$PROM_DIR/data"
PROM_TARGETS="$PROM_DIR/targets"
PROM_PID="$PROM_DIR/prometheus.pid"
DISCOVERY_PID="$PROM_DIR/discovery.pid"
PROM_LOG="$CLUSTER_DIR/logs/prometheus.log"
PKI="$CLUSTER_DIR/pki"
NAMESPACE="${CRR_NAMESPACE:-crr-system}"
JOBS=(crr-webhook crr-operator crr-node-daemon)

log() { echo "prometheus: $*" >&2; }
die() { log "error: $*"; exit 1; }

# Writes monitoring/prometheus.yml with the test bed's paths to stdout. --pki DIR (ca.crt,
# admin.crt, admin.key), --targets DIR and --rules FILE override them (hack/check-monitoring.sh).
render_config() {
  local apiserver="${APISERVER#https://}" ca="$PKI/ca.crt" cert="$PKI/admin.crt" key="$PKI/admin.key"
  local targets="$PROM_TARGETS" rules="$root/monitoring/alerts.yaml"
  while (( $# )); do
    case "$1" in
      --pki) ca="$2/ca.crt"; cert="$2/admin.crt"; key="$2/admin.key" ;;
      --targets) targets="$2" ;;
      --rules) rules="$2" ;;
      *) die "render_config: unknown $1" ;;
    esac
    shift 2
  done
  sed -e "s|@APISERVER@|$apiserver|g" -e "s|@CA_FILE@|$ca|g" -e "s|@CERT_FILE@|$cert|g" \
    -e "s|@KEY_FILE@|$key|g" -e "s|@TARGETS_DIR@|$targets|g" -e "s|@RULES@|$rules|g" \
    "$root/monitoring/prometheus.yml"
}

# write_targets DIR: one file_sd file per job from the pods of crr in $NAMESPACE (each file
# replaced only when it changes). A pod's metrics port: its --admin-listen argument, else its
# container port named admin, else 8080 (the operator's default). Finished pods are left out.
write_targets() {
  local dir="$1" pods name component node phase args ports port job sep
  pods="$(kubectl --request-timeout=10s -n "$NAMESPACE" get pods -l app.kubernetes.io/part-of=crr -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.metadata.labels.app\.kubernetes\.io/name}{"\t"}{.spec.nodeName}{"\t"}{.status.phase}{"\t"}{.spec.containers[*].args}{"\t"}{.spec.containers[*].ports[?(@.name=="admin")].containerPort}{"\n"}{end}')" ||
    return 1
  mkdir -p "$dir"
  declare -A entries=()
  for job in "${JOBS[@]}"; do entries[$job]=""; done
  while IFS=$'\t' read -r name component node phase args ports; do
    [[ -n "$name" && -n "$component" && -v "entries[$component]" ]] || continue
    [[ $phase == Succeeded || $phase == Failed ]] && continue
    port="$(grep -oE -- '--admin-listen=[^ ",]*' <<<"$args" | head -n 1 | sed 's/.*://')" || true
    [[ -n "$port" ]] || port="${ports%% *}"
    [[ -n "$port" ]] || port=8080
    sep=""; [[ -n "${entries[$component]}" ]] && sep=","
    entries[$component]+="$sep"$'\n'"  {\"targets\": [\"${APISERVER#https://}\"], \"labels\": {\"__metrics_path__\": \"/api/v1/namespaces/$NAMESPACE/pods/$name:$port/proxy/metrics\", \"instance\": \"$name\", \"namespace\": \"$NAMESPACE\", \"pod\": \"$name\""
    [[ $component == crr-node-daemon ]] && entries[$component]+=", \"node\": \"$node\""
    entries[$component]+="}}"
  done <<<"$pods"
  for job in "${JOBS[@]}"; do
    printf '[%s\n]\n' "${entries[$job]}" > "$dir/$job.json.new"
    if cmp -s "$dir/$job.json.new" "$dir/$job.json"; then rm -f "$dir/$job.json.new"
    else mv "$dir/$job.json.new" "$dir/$job.json"; fi
  done
}

# pid_of PIDFILE PATTERN: the pidfile's process if it runs and its command line has PATTERN.
pid_of() {
  local pid
  pid="$(cat "$1" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$2" || return 1
  echo "$pid"
}
prometheus_pid() { pid_of "$PROM_PID" "--config.file=$PROM_CONFIG"; }
discovery_pid() { pid_of "$DISCOVERY_PID" "prometheus.sh discover"; }

# http_get PATH: the body of GET http://$PROM_ADDR/PATH, in a subshell (bash's /dev/tcp: no
# curl assumed; a refused connection fails the subshell, not the script).
http_get() (
  exec 3<>"/dev/tcp/127.0.0.1/$PROM_PORT" || exit 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$1" "$PROM_ADDR" >&3
  IFS=' ' read -r _ status _ <&3 || exit 1
  [[ $status == 200 ]] || exit 1
  sed -e '1,/^\r$/d' <&3
)

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$PROM_PORT") 2>/dev/null; }

cluster_up() {
  [[ -f "$KUBECONFIG_ADMIN" && -f "$PKI/admin.key" ]] && kubectl get --raw /readyz >/dev/null 2>&1
}

# The discovery loop (started by `up`): the target files every 5 seconds while Prometheus runs.
discover() {
  local prom_pid="$1"
  while kill -0 "$prom_pid" 2>/dev/null; do
    write_targets "$PROM_TARGETS" 2>/dev/null || true
    sleep 5
  done
}

start_discovery() {
  discovery_pid >/dev/null && return
  setsid "$here/prometheus.sh" discover "$(prometheus_pid)" >>"$PROM_LOG" 2>&1 </dev/null &
  echo $! > "$DISCOVERY_PID"
}

up() {
  command -v prometheus >/dev/null || die "prometheus not found: run hack/install-deps.sh"
  cluster_up || die "the test bed is not up (hack/cluster.sh up): nothing to scrape, not started"
  mkdir -p "$PROM_DIR" "$PROM_DATA" "$(dirname "$PROM_LOG")"
  write_targets "$PROM_TARGETS" || die "cannot list the pods of $NAMESPACE"
  render_config > "$PROM_CONFIG.new"
  promtool check config "$PROM_CONFIG.new" >/dev/null 2>&1 || { promtool check config "$PROM_CONFIG.new" >&2 || true; die "invalid configuration"; }
  mv "$PROM_CONFIG.new" "$PROM_CONFIG"
  local pid
  if pid="$(prometheus_pid)"; then
    kill -HUP "$pid"
    start_discovery
    log "running (pid $pid): configuration reloaded; $(url)"
    return
  fi
  port_in_use && die "127.0.0.1:$PROM_PORT is taken by another program (set CRR_PROMETHEUS_PORT)"
  # setsid: its own session, so the caller's job control and signals leave it alone. The pidfile
  # is written by the process that then execs prometheus, so from the moment it exists its pid's
  # command line carries --config.file. It used to be `echo $!` here: checked before the forked
  # child had exec'd, that pid still ran `bash prometheus.sh up`, `up` took Prometheus for exited,
  # and cluster-test.sh's EXIT trap (`down`, which found no Prometheus) removed $PROM_DIR under the
  # real one, which then failed on its missing configuration.
  rm -f "$PROM_PID"
  setsid bash -c 'echo $$ > "$0"; exec "$@"' "$PROM_PID" \
    prometheus --config.file="$PROM_CONFIG" --storage.tsdb.path="$PROM_DATA" \
    --storage.tsdb.retention.time=6h --web.listen-address="$PROM_ADDR" \
    --web.external-url="http://$PROM_ADDR/" \
    >>"$PROM_LOG" 2>&1 </dev/null &
  local deadline=$(( SECONDS + 60 )) pid
  until http_get /-/ready >/dev/null 2>&1; do
    # No pidfile yet: still starting, not exited.
    if [[ -s "$PROM_PID" ]] && ! prometheus_pid >/dev/null; then
      tail -n 20 "$PROM_LOG" >&2
      rm -f "$PROM_PID"
      die "prometheus exited (log: $PROM_LOG)"
    fi
    if (( SECONDS >= deadline )); then
      tail -n 20 "$PROM_LOG" >&2
      # Never leave behind a Prometheus that `down` cannot see.
      if pid="$(prometheus_pid)"; then stop "$pid" prometheus; fi
      die "not ready after 60 s (log: $PROM_LOG)"
    fi
    sleep 0.5
  done
  start_discovery
  log "ready (pid $(cat "$PROM_PID")): $(url); log $PROM_LOG"
}

# stop PID NAME: SIGTERM, SIGKILL after 10 seconds.
stop() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || return 0
  for (( i = 0; i < 100; i++ )); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  log "stopped $2 (pid $pid)"
}

down() {
  local pid
  if pid="$(discovery_pid)"; then stop "$pid" discovery; fi
  if pid="$(prometheus_pid)"; then stop "$pid" prometheus; else log "prometheus was not running"; fi
  [[ -n "$PROM_DIR" && "$PROM_DIR" != / ]] && rm -rf "$PROM_DIR"
}

status() {
  local pid
  if ! pid="$(prometheus_pid)"; then
    echo "prometheus: stopped"
    return 1
  fi
  echo "prometheus: running (pid $pid), $(url); discovery $(discovery_pid >/dev/null && echo running || echo stopped)"
  # One line per scrape target: job, pod and up (1: scraped, 0: failing).
  promtool query instant "$(url)" 'sort_desc(up)' || true
}

url() { echo "http://$PROM_ADDR"; }

# Sourced (hack/check-monitoring.sh uses render_config): define the functions only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  url) url ;;
  discover) [[ $# == 2 ]] || die "usage: $0 discover PROMETHEUS_PID"; discover "$2" ;;
  *) echo "usage: $0 up|down|status|url" >&2; exit 2 ;;
esac
