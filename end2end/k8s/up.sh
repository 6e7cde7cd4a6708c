#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback with N simulated GPU nodes:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built
# from the official Go modules (build.sh; built first if not cached).
#
#   end2end/k8s/up.sh [N=4]          # or: eval "$(end2end/k8s/up.sh)"
#
# State (certificates, etcd data, logs, pid files, kubeconfig) goes to
# ${K8S_STATE:-/tmp/trainyard-k8s}. Progress goes to stderr; stdout gets only
# the export lines for KUBECONFIG and PATH. Stop it all with down.sh.
# K8S_PROFILING=true serves kube-apiserver's /debug/pprof (for benchmarks).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes="${1:-4}"
if ! [[ "$nodes" =~ ^[0-9]+$ ]] || (( nodes > 1000 )); then die "node count must be 0..1000, got '$nodes'"; fi
command -v openssl >/dev/null || die "openssl is needed to make the cluster's certificates"
command -v curl >/dev/null || die "curl is needed for the readiness checks"

t0=$(now_ms)
"$K8S_DIR/build.sh" >/dev/null
k8s_binaries_present || die "build.sh did not produce the binaries in $K8S_BIN"

# Refuse to start over a running cluster; clear what a dead one left.
if [[ -d "$K8S_STATE" ]]; then
  for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
    if component_pid "$c" >/dev/null; then
      die "a cluster is already running from $K8S_STATE ($c is up); stop it with end2end/k8s/down.sh"
    fi
  done
  "$K8S_DIR/down.sh" >/dev/null 2>&1 || true
fi
mkdir -p "$K8S_STATE"/{pki,logs,pids,etcd}
chmod 700 "$K8S_STATE/etcd" "$K8S_STATE/pki"
S="$K8S_STATE"

# If anything below fails: show the logs' tails and stop what was started.
started_ok=false
declare -A pid_of=()       # component -> pid of the process this script started
declare -A started_ms=()   # component -> when it was started
on_exit() {
  if [[ "$started_ok" != true ]]; then
    local f c
    for f in "$S"/logs/*.log; do
      [[ -f "$f" ]] || continue
      printf '\n--- last lines of %s ---\n' "$f" >&2
      tail -n 15 "$f" >&2
    done
    log "start-up failed; stopping what was started"
    # Our children first, by pid: down.sh would not recognise one that has not
    # exec'd yet (its command line is still this script's).
    for c in "${!pid_of[@]}"; do kill -TERM "${pid_of[$c]}" 2>/dev/null || true; done
    "$K8S_DIR/down.sh" --keep-state >&2 || true
  fi
}
trap on_exit EXIT

# ---------------------------------------------------------------- ports
# Ports are picked below the kernel's ephemeral range (ip_local_port_range,
# 32768-60999 by default): a port in that range can become the local end of
# any outgoing connection (curl, the components' clients, other programs),
# which the connect probe below does not see but which makes a later listen on
# that port fail.
read -r eph_lo eph_hi </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || { eph_lo=32768; eph_hi=60999; }
if (( eph_lo - 20000 >= 2000 )); then port_lo=20000; port_hi=$(( eph_lo - 1 ))
elif (( 65535 - eph_hi >= 2000 )); then port_lo=$(( eph_hi + 1 )); port_hi=65535
else port_lo=20000; port_hi=52767   # no room outside it: the retries below cover a clash
fi
# pick_port VAR: a free port (a connect attempt on loopback is refused), random
# in port_lo..port_hi, never one this script picked before.
used_ports=" "
etcd_port="" etcd_peer_port="" api_port="" kcm_port="" sched_port="" kwok_port=""
pick_port() {
  local p
  while :; do
    p=$(( port_lo + (RANDOM * 32768 + RANDOM) % (port_hi - port_lo + 1) ))
    [[ "$used_ports" == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    used_ports+="$p "
    printf -v "$1" '%s' "$p"
    return
  done
}
# component_ports NAME: the names of the variables holding NAME's ports.
component_ports() {
  case "$1" in
    etcd) echo etcd_port etcd_peer_port ;;
    kube-apiserver) echo api_port ;;
    kube-controller-manager) echo kcm_port ;;
    kube-scheduler) echo sched_port ;;
    kwok) echo kwok_port ;;
  esac
}
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kwok; do
  for v in $(component_ports "$c"); do pick_port "$v"; done
done
pki="$S/pki"

# env and kubeconfig; written again whenever a component moves to other ports
# (each replaced at once: a component reading it never sees it half written).
write_cluster_files() {
  cat > "$S/env.tmp" <<EOF
K8S_BIN=$K8S_BIN
ETCD_PORT=$etcd_port
API_PORT=$api_port
KCM_PORT=$kcm_port
SCHED_PORT=$sched_port
KWOK_PORT=$kwok_port
API_SERVER=https://127.0.0.1:$api_port
EOF
  cat > "$S/kubeconfig.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainyard
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $pki/ca.crt
users:
- name: trainyard-admin
  user:
    client-certificate: $pki/admin.crt
    client-key: $pki/admin.key
contexts:
- name: trainyard
  context:
    cluster: trainyard
    user: trainyard-admin
current-context: trainyard
EOF
  mv -f "$S/env.tmp" "$S/env"
  mv -f "$S/kubeconfig.tmp" "$S/kubeconfig"
}
write_cluster_files

# --------------------------------------------------------- certificates
log "making certificates and keys in $S/pki"
ossl() { openssl "$@" 2>>"$S/logs/openssl.log"; }
# sign NAME SUBJECT EXTENSIONS: an EC P-256 key and a certificate signed by the CA.
sign() {
  ossl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "$2"
  ossl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
    -days 365 -out "$pki/$1.crt" -extfile <(printf '%b' "$3")
}
ossl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
  -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 3650 -subj "/CN=trainyard-test-ca"
serving_sans="DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
sign apiserver "/CN=kube-apiserver" \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=$serving_sans"
# One client identity for every component and for the user: system:masters
# needs no RBAC set-up and is exempt from API priority-and-fairness limits,
# so a burst of test objects is never throttled by the server.
sign admin "/O=system:masters/CN=trainyard-admin" \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth"
# Service-account token signing key pair.
ossl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$pki/sa.key"
ossl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub"
chmod 600 "$pki"/*.key

load_cluster_env

# ------------------------------------------------------------ processes
# Config files of the scheduler and kwok.
cat > "$S/kube-scheduler.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $S/kubeconfig
  qps: 2000
  burst: 4000
leaderElection:
  leaderElect: false
EOF
# More parallel status updates than kwok's default 4, for 1,000 nodes.
# Every pod's main container "logs" the lines of pod-logs/main.log (CRI
# format, as a kubelet keeps them), served through the real pods/log path.
mkdir -p "$S/pod-logs"
cat > "$S/pod-logs/main.log" <<EOF
2026-12-01T10:00:00.000000001Z stdout F kwok: epoch 1 loss=0.912
2026-12-01T10:00:00.000000002Z stdout F kwok: epoch 2 loss=0.431
2026-12-01T10:00:00.000000003Z stderr F kwok: epoch 3 loss=0.207
EOF
# kwok follows each streamed log with a file watcher of its own (an inotify
# instance, as a kubelet's log reader does): past Linux's default of 128 per
# user, the streams of further running pods end at once with "failed to
# create fsnotify watcher: too many open files". Raised where this may.
inotify=/proc/sys/fs/inotify/max_user_instances
if (( $(cat "$inotify" 2>/dev/null || echo 8192) < 8192 )) && ! { echo 8192 >"$inotify"; } 2>/dev/null; then
  log "fs.inotify.max_user_instances is $(cat "$inotify"): past that many running pods, kwok ends their log streams (raise it as root)"
fi
cat > "$S/kwok.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 16
  nodeLeaseParallelism: 16
  # Serve pods' logs (ClusterLogs below) through the kubelet API.
  enableDebuggingHandlers: true
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: trainyard-pod-logs
spec:
  selector: {}
  logs:
  - containers: [main]
    logsFile: $S/pod-logs/main.log
    follow: true
EOF

# start NAME: start component NAME on its current ports, in the background,
# log and pid in the state folder.
start() {
  local name="$1"
  local -a cmd
  # (SC2054: the commas in --authorization-always-allow-paths are meant.)
  # shellcheck disable=SC2054
  case "$name" in
    # --unsafe-no-fsync: test data, speed over durability.
    etcd) cmd=(etcd --name trainyard --data-dir "$S/etcd"
      --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port"
      --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port"
      --initial-cluster "trainyard=http://127.0.0.1:$etcd_peer_port"
      --unsafe-no-fsync --log-level warn) ;;
    # --endpoint-reconciler-type=none: the "kubernetes" Service would otherwise
    #   advertise 127.0.0.1, which Endpoints reject.
    # 10.96.0.0/16 is only a range of virtual service IPs: nothing routes to it.
    kube-apiserver) cmd=(kube-apiserver
      --etcd-servers "http://127.0.0.1:$etcd_port"
      --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port"
      --endpoint-reconciler-type none
      --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
      --client-ca-file "$pki/ca.crt"
      --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key"
      --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key"
      --service-account-issuer https://kubernetes.default.svc.cluster.local
      --service-cluster-ip-range 10.96.0.0/16
      --authorization-mode RBAC
      --max-requests-inflight 1000 --max-mutating-requests-inflight 500
      --profiling="${K8S_PROFILING:-false}") ;;
    # Client QPS well above the defaults (20 and 50) so that thousands of pods
    # are not throttled on the client side; no leader election (a single
    # instance). --node-monitor-period 2s: the node lifecycle controller reacts
    # in seconds.
    kube-controller-manager) cmd=(kube-controller-manager
      --kubeconfig "$S/kubeconfig"
      --bind-address 127.0.0.1 --secure-port "$kcm_port"
      --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
      --leader-elect=false
      --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt"
      --service-cluster-ip-range 10.96.0.0/16
      --kube-api-qps 1000 --kube-api-burst 2000
      --concurrent-job-syncs 10
      --node-monitor-period 2s
      --profiling=false) ;;
    # Without --authentication/authorization-kubeconfig (which would wait for a
    # request-header CA that this apiserver does not have) the secure port
    # serves only the always-allowed paths: /metrics is added so measure.sh can
    # count bindings. The controller-manager serves only /healthz, /readyz,
    # /livez.
    kube-scheduler) cmd=(kube-scheduler
      --config "$S/kube-scheduler.yaml"
      --authorization-always-allow-paths /healthz,/readyz,/livez,/metrics
      --bind-address 127.0.0.1 --secure-port "$sched_port"
      --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
      --profiling=false) ;;
    # kwok's fake kubelets: every node says its address is 127.0.0.1 and its
    # kubelet port is kwok's own server, so `kubectl logs/exec` reach kwok on
    # loopback. Pod IPs come from 10.244.0.0/16 and are only labels: nothing
    # listens there and nothing here routes to them.
    kwok) cmd=(kwok
      --kubeconfig "$S/kubeconfig"
      --config "$K8S_DIR/kwok-stages.yaml" --config "$S/kwok.yaml"
      --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake
      --node-ip 127.0.0.1 --node-port "$kwok_port"
      --server-address "127.0.0.1:$kwok_port"
      --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key"
      --node-lease-duration-seconds 40
      --cidr 10.244.0.0/16) ;;
    *) die "no component $name" ;;
  esac
  # One exec, straight from a subshell of this script, so $! is the
  # component's own pid. (nohup used to sit in between: during its exec of the
  # component, /proc/PID/cmdline reads empty for up to milliseconds, and the
  # liveness check, which looked for the state folder there, took the
  # component for dead.) SIGHUP is ignored, as nohup did.
  ( trap '' HUP; exec "$K8S_BIN/${cmd[0]}" "${cmd[@]:1}" ) >"$S/logs/$name.log" 2>&1 </dev/null &
  pid_of[$name]=$!
  started_ms[$name]=$(now_ms)
  echo "$!" >"$S/pids/$name.pid"
}

https_ok() { [[ "$(curl -sS --max-time 2 --cacert "$pki/ca.crt" "$@")" == ok ]]; }
# ready NAME: NAME answers its health check.
ready() {
  case "$1" in
    etcd) [[ "$(curl -sS --max-time 2 "http://127.0.0.1:$etcd_port/health")" == *'"health":"true"'* ]] ;;
    kube-apiserver) https_ok --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port/readyz" ;;
    kube-controller-manager) https_ok "https://127.0.0.1:$kcm_port/healthz" ;;
    kube-scheduler) https_ok "https://127.0.0.1:$sched_port/healthz" ;;
    kwok) https_ok "https://127.0.0.1:$kwok_port/healthz" ;;
  esac
}
# alive NAME: the process started for NAME runs. Our own child, so its pid is
# enough (the shell reaps it when it exits; no command line to inspect).
alive() { kill -0 "${pid_of[$1]}" 2>/dev/null; }

# port_sockets PORT [STATE]: "INODE STATE" of each TCP socket (IPv4 or IPv6,
# any address) whose local port is PORT, in STATE if given (hex as in
# /proc/net/tcp: 0A = listening); sockets without an inode (TIME_WAIT) left out.
port_sockets() {
  local hex
  printf -v hex '%04X' "$1"
  awk -v h="$hex" -v st="${2:-}" 'FNR > 1 { split($2, a, ":")
    if (a[2] == h && $10 != 0 && (st == "" || $4 == st)) print $10, $4 }' /proc/net/tcp /proc/net/tcp6 2>/dev/null || true
}
# port_holders PORT: which processes listen on PORT or, if none does, hold a
# connection from it (the port was handed out as an ephemeral one), as
# "pid N (comm, what)"; empty if none.
port_holders() {
  local ino st f pid what one out="" listeners="" connections=""
  while read -r ino st; do
    case "$st" in
      0A) what=listening ;;
      01) what="connection ESTABLISHED" ;; 02) what="connection SYN_SENT" ;;
      08) what="connection CLOSE_WAIT" ;; *) what="socket in state 0x$st" ;;
    esac
    f="$(find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\[$ino\]" -print -quit 2>/dev/null || true)"
    pid="${f#/proc/}"; pid="${pid%%/*}"
    if [[ -n "$pid" ]]; then
      one="pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null || echo '?'), $what)"
    else
      one="a process not found ($what)"
    fi
    if [[ "$st" == 0A ]]; then listeners+="${listeners:+, }$one"; else connections+="${connections:+, }$one"; fi
  done < <(port_sockets "$1")
  out="${listeners:-$connections}"
  echo "$out"
}
# owns_ports NAME: NAME's process is the one listening on each of its ports
# (not another one that took a port between pick_port and NAME's start and
# answered the health check). When no listening socket can be seen at all, it
# cannot be told: taken as yes.
owns_ports() {
  local v ino st seen
  for v in $(component_ports "$1"); do
    seen=false
    while read -r ino st; do
      seen=true
      [[ -n "$(find "/proc/${pid_of[$1]}/fd" -maxdepth 1 -lname "socket:\[$ino\]" -print -quit 2>/dev/null || true)" ]] && continue 2
    done < <(port_sockets "${!v}" 0A)
    [[ "$seen" == false ]] || return 1
  done
}

# stopped NAME: NAME's process has exited (or answers on a port it does not
# hold: then it is killed). Says how it ended (exit status or signal, after how
# long), whether another process holds one of its ports, and the last lines of
# its log. Succeeds when a port was taken: worth starting it again elsewhere.
stopped() {
  local name="$1" pid="${pid_of[$1]}" st=0 how v held taken="" logf="$S/logs/$1.log"
  if alive "$name"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || st=$?
  if (( st > 128 )); then how="was killed by SIG$(kill -l $(( st - 128 )) 2>/dev/null || echo $(( st - 128 )))"
  else how="exited with status $st"
  fi
  for v in $(component_ports "$name"); do
    held="$(port_holders "${!v}")"
    [[ -z "$held" ]] || taken+=" port ${!v} is held by $held;"
  done
  if [[ -z "$taken" ]] && grep -q 'address already in use' "$logf" 2>/dev/null; then
    taken=" its log says a port was already in use;"
  fi
  log "$name (pid $pid) $how $(( $(now_ms) - ${started_ms[$name]} )) ms after its start;${taken:- no other process holds its ports;} last lines of $logf:"
  if [[ -s "$logf" ]]; then tail -n 8 "$logf" | sed 's/^/    /' >&2; else echo "    (empty)" >&2; fi
  [[ -n "$taken" ]]
}

# bring_up NAME TIMEOUT_S: wait until NAME is ready, on ports of its own. If
# it dies because a port was taken meanwhile (another program, a parallel
# cluster), start it again on fresh ports, up to $start_tries starts in all;
# any other death, or no readiness within TIMEOUT_S, ends the start-up.
start_tries=3
bring_up() {
  local name="$1" timeout="$2" try=1 deadline v ports
  deadline=$(( SECONDS + timeout ))
  while :; do
    if ready "$name" >/dev/null 2>&1; then
      owns_ports "$name" && return 0
      log "$name: its health check was answered by another process"
    elif alive "$name"; then
      (( SECONDS < deadline )) || die "$name not ready after ${timeout}s (log: $S/logs/$name.log)"
      sleep 0.2
      continue
    fi
    stopped "$name" || die "$name exited during start-up (log: $S/logs/$name.log)"
    (( try < start_tries )) || die "$name exited during start-up: a port taken at each of its $try starts (log: $S/logs/$name.log)"
    mv "$S/logs/$name.log" "$S/logs/$name.failed-$try.log"
    try=$(( try + 1 ))
    ports=""
    for v in $(component_ports "$name"); do pick_port "$v"; ports+=" ${!v}"; done
    write_cluster_files
    # A fresh data folder: the last etcd may have written its peer URL there.
    [[ "$name" != etcd ]] || { rm -rf "$S/etcd"; mkdir -m 700 "$S/etcd"; }
    log "starting $name again on port(s)$ports (attempt $try of $start_tries)"
    start "$name"
    deadline=$(( SECONDS + timeout ))
  done
}
# wait_until NAME TIMEOUT_S COMMAND...: poll COMMAND; fail early if NAME died.
wait_until() {
  local name="$1" timeout="$2"; shift 2
  local deadline=$(( SECONDS + timeout ))
  until "$@" >/dev/null 2>&1; do
    alive "$name" || { stopped "$name" || true; die "$name exited during start-up (log: $S/logs/$name.log)"; }
    (( SECONDS < deadline )) || die "$name not ready after ${timeout}s (log: $S/logs/$name.log)"
    sleep 0.2
  done
}

log "starting etcd on 127.0.0.1:$etcd_port"
start etcd
bring_up etcd 60

log "starting kube-apiserver on https://127.0.0.1:$api_port"
start kube-apiserver
bring_up kube-apiserver 180

log "starting kube-controller-manager, kube-scheduler and kwok"
start kube-controller-manager
start kube-scheduler
start kwok
bring_up kube-controller-manager 120
bring_up kube-scheduler 120
bring_up kwok 120
# Pods need the namespace's default ServiceAccount (made by the controller-manager).
wait_until kube-controller-manager 120 kubectl get serviceaccount default -n default
log "control plane ready in $(( $(now_ms) - t0 )) ms"

"$K8S_DIR/nodes.sh" "$nodes"

started_ok=true
echo "$(( $(now_ms) - t0 ))" > "$S/startup-ms"
log "cluster up in $(( $(now_ms) - t0 )) ms with $nodes fake GPU nodes; stop it with end2end/k8s/down.sh"
echo "export KUBECONFIG=$S/kubeconfig"
echo "export PATH=$K8S_BIN:\$PATH"
