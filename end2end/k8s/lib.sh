# Shared settings for the end2end/k8s scripts. Source it; do not run it.
#
# Everything version-related comes from tools/go.mod, the single place where
# the Kubernetes, etcd, kwok, helm and kubeconform versions are pinned.

K8S_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
K8S_TOOLS="$K8S_DIR/tools"

# Caches live outside the repository.
TRAINYARD_CACHE="${TRAINYARD_CACHE:-$HOME/.cache/trainyard}"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$TRAINYARD_CACHE/go/mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$TRAINYARD_CACHE/go/build}"
# -modcacherw: the module cache stays deletable with rm -rf.
# -mod=readonly: never rewrite go.mod/go.sum while building.
# -buildvcs=false: no git stamping (the tree may be dirty, or not a checkout).
export GOFLAGS="-modcacherw -mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local   # use the installed Go; never download another one
export CGO_ENABLED=0       # static binaries, no C compiler needed

# State of a running cluster (certificates, etcd data, logs, pid files).
K8S_STATE="$(realpath -m "${K8S_STATE:-/tmp/trainyard-k8s}")"
# down.sh removes this folder: refuse obviously wrong values.
case "$K8S_STATE" in
  / | /tmp | /home | /root | "$HOME" | "$K8S_DIR"*) echo "ERROR: unsafe K8S_STATE=$K8S_STATE" >&2; exit 1 ;;
esac

# Find go: on PATH, else the standard install location.
if [[ -z "${GO:-}" ]]; then
  GO="$(command -v go || true)"
  [[ -n "$GO" ]] || GO=/usr/local/go/bin/go
fi

# Version of a module as required in tools/go.mod (e.g. k8s.io/kubernetes -> v1.37.2).
mod_version() {
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }
                 $1 == "require" && $2 == m { print $3; exit }' "$K8S_TOOLS/go.mod"
}

KUBE_VERSION="$(mod_version k8s.io/kubernetes)"
ETCD_VERSION="$(mod_version go.etcd.io/etcd/server/v3)"
KWOK_VERSION="$(mod_version sigs.k8s.io/kwok)"
HELM_VERSION="$(mod_version helm.sh/helm/v4)"
KUBECONFORM_VERSION="$(mod_version github.com/yannh/kubeconform)"

# The binary folder is keyed by the Kubernetes version and a hash of go.mod,
# go.sum and our own commands' sources (tools/cmd), so any version or source
# change rebuilds into a new folder. (After changing the build flags in
# build.sh, delete the folder or bump K8S_BUILD_REV.)
K8S_BUILD_REV=1
K8S_BUILD_KEY="$( (echo "$K8S_BUILD_REV"; cat "$K8S_TOOLS/go.mod" "$K8S_TOOLS/go.sum"
  find "$K8S_TOOLS/cmd" -name '*.go' -type f | LC_ALL=C sort | xargs cat) | sha256sum | cut -c1-12)"
K8S_BUILD_DIR="$TRAINYARD_CACHE/k8s/$KUBE_VERSION-$K8S_BUILD_KEY"
K8S_BIN="$K8S_BUILD_DIR/bin"

K8S_BINARIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kubeconform kwok-pod-resources)

k8s_binaries_present() {
  local b
  for b in "${K8S_BINARIES[@]}"; do
    [[ -x "$K8S_BIN/$b" ]] || return 1
  done
}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# Milliseconds since the epoch (for timings).
now_ms() { date +%s%3N; }
# Seconds since the epoch of RFC 3339 times, one per line (one `date` for all).
epoch() { date -f - +%s; }

# For the benchmarks: the release server with executor = kubernetes on
# loopback PORT, its jobs in NAMESPACE on the nodes of pool `default`, its
# data and log (server.log) in DIR, as the cluster's admin. Sets `server`
# (its pid) and `url`, and returns once it is ready.
serve_trainyard() { # NAMESPACE PORT DIR
  url="http://127.0.0.1:$2"
  TRAINYARD_LISTEN="127.0.0.1:$2" TRAINYARD_DATA_DIR="$3/data" TRAINYARD_LOG="${TRAINYARD_LOG:-warn}" \
    TRAINYARD_TEMPLATES_DIR="$ROOT/templates" TRAINYARD_EXECUTOR=kubernetes \
    TRAINYARD_KUBE_CONFIG="$K8S_STATE/kubeconfig" TRAINYARD_KUBE_NAMESPACE="$1" \
    TRAINYARD_KUBE_NODE_SELECTOR=trainyard.dev/pool=default TRAINYARD_KUBE_TOLERATIONS= \
    "$CARGO_TARGET_DIR/release/trainyard" serve >"$3/server.log" 2>&1 &
  server=$!
  local _
  for _ in $(seq 1 120); do curl -sf "$url/readyz" >/dev/null && return 0; sleep 0.5; done
  die "Trainyard did not start: $(tail -5 "$3/server.log")"
}

# For scripts that talk to a running cluster: KUBECONFIG, the built kubectl on
# PATH, and the ports that up.sh wrote to $K8S_STATE/env.
load_cluster_env() {
  [[ -f "$K8S_STATE/env" ]] || die "no cluster at $K8S_STATE (start one with end2end/k8s/up.sh)"
  # shellcheck disable=SC1091
  source "$K8S_STATE/env"
  export KUBECONFIG="$K8S_STATE/kubeconfig"
  export PATH="$K8S_BIN:$PATH"
}

# Pid of a component started by up.sh, if it is still running (and is ours:
# its command line names the state folder, so a reused pid is not taken).
component_pid() {
  local pid
  pid="$(cat "$K8S_STATE/pids/$1.pid" 2>/dev/null)" || return 1
  [[ -n "$pid" ]] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$K8S_STATE/" || return 1
  echo "$pid"
}

# Pids of any process of ours still running from the state folder (a binary of
# $K8S_BINARIES whose command line names $K8S_STATE/).
state_processes() {
  local dir pid exe
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    exe="$(tr '\0' '\n' 2>/dev/null <"$dir/cmdline" | head -1)" || continue
    [[ " ${K8S_BINARIES[*]} " == *" ${exe##*/} "* ]] || continue
    tr '\0' ' ' 2>/dev/null <"$dir/cmdline" | grep -qF -- "$K8S_STATE/" && echo "$pid"
  done
  return 0
}
