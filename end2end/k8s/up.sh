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
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes="${1:-4}"
[[ "$nodes" =~ ^[0-9]+$ ]] && (( nodes <= 1000 )) || die "node count must be 0..1000, got '$nodes'"
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
on_exit() {
  if [[ "$started_ok" != true ]]; then
    for f in "$S"/logs/*.log; do
      [[ -f "$f" ]] || continue
      printf '\n--- last lines of %s ---\n' "$f" >&2
      tail -n 15 "$f" >&2
    done
    log "start-up failed; stopping what was started"
    "$K8S_DIR/down.sh" --keep-state >&2 || true
  fi
}
trap on_exit EXIT

# ---------------------------------------------------------------- ports
# pick_port VAR: a free port, random in 20000-52767 (a connect attempt on
# loopback is refused), different from those picked before.
used_ports=" "
pick_port() {
  local p
  while :; do
    p=$(( 20000 + RANDOM % 40000 ))
    [[ "$used_ports" == *" $p "* ]] && continue
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    used_ports+="$p "
    printf -v "$1" '%s' "$p"
    return
  done
}
pick_port etcd_port; pick_port etcd_peer_port; pick_port api_port
pick_port kcm_port; pick_port sched_port; pick_port kwok_port

cat > "$S/env" <<EOF
K8S_BIN=$K8S_BIN
ETCD_PORT=$etcd_port
API_PORT=$api_port
KCM_PORT=$kcm_port
SCHED_PORT=$sched_port
KWOK_PORT=$kwok_port
API_SERVER=https://127.0.0.1:$api_port
EOF

# --------------------------------------------------------- certificates
log "making certificates and keys in $S/pki"
pki="$S/pki"
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

cat > "$S/kubeconfig" <<EOF
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
load_cluster_env

# ------------------------------------------------------------ processes
# start NAME BINARY ARGS...: run in the background, log and pid in the state folder.
start() {
  local name="$1" bin="$2"; shift 2
  nohup "$K8S_BIN/$bin" "$@" >"$S/logs/$name.log" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$S/pids/$name.pid"
  # Until the child has exec'd, its command line is this script's, and
  # component_pid would take it for dead: wait (at most 5 s) until it names
  # the state folder, or has exited.
  local i
  for (( i = 0; i < 100; i++ )); do
    tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$S/" && return 0
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
}
# wait_until NAME TIMEOUT_S COMMAND...: poll COMMAND; fail early if NAME died.
wait_until() {
  local name="$1" timeout="$2"; shift 2
  local deadline=$(( SECONDS + timeout ))
  until "$@" >/dev/null 2>&1; do
    component_pid "$name" >/dev/null || die "$name exited during start-up (log: $S/logs/$name.log)"
    (( SECONDS < deadline )) || die "$name not ready after ${timeout}s (log: $S/logs/$name.log)"
    sleep 0.2
  done
}
https_ok() { [[ "$(curl -sS --max-time 2 --cacert "$pki/ca.crt" "$@")" == ok ]]; }

log "starting etcd on 127.0.0.1:$etcd_port"
# --unsafe-no-fsync: test data, speed over durability.
start etcd etcd --name trainyard --data-dir "$S/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer_port" \
  --initial-cluster "trainyard=http://127.0.0.1:$etcd_peer_port" \
  --unsafe-no-fsync --log-level warn
wait_until etcd 60 bash -c "curl -sS --max-time 2 http://127.0.0.1:$etcd_port/health | grep -q '\"health\":\"true\"'"

log "starting kube-apiserver on https://127.0.0.1:$api_port"
# --endpoint-reconciler-type=none: the "kubernetes" Service would otherwise
#   advertise 127.0.0.1, which Endpoints reject.
# 10.96.0.0/16 is only a range of virtual service IPs: nothing routes to it.
start kube-apiserver kube-apiserver \
  --etcd-servers "http://127.0.0.1:$etcd_port" \
  --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$api_port" \
  --endpoint-reconciler-type none \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --client-ca-file "$pki/ca.crt" \
  --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
  --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-cluster-ip-range 10.96.0.0/16 \
  --authorization-mode RBAC \
  --max-requests-inflight 1000 --max-mutating-requests-inflight 500 \
  --profiling=false
wait_until kube-apiserver 180 https_ok --cert "$pki/admin.crt" --key "$pki/admin.key" "https://127.0.0.1:$api_port/readyz"

log "starting kube-controller-manager, kube-scheduler and kwok"
# Client QPS well above the defaults (20 and 50) so that thousands of pods are
# not throttled on the client side; no leader election (a single instance).
# --node-monitor-period 2s: the node lifecycle controller reacts in seconds.
start kube-controller-manager kube-controller-manager \
  --kubeconfig "$S/kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$kcm_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --leader-elect=false \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --kube-api-qps 1000 --kube-api-burst 2000 \
  --concurrent-job-syncs 10 \
  --node-monitor-period 2s \
  --profiling=false

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
# Without --authentication/authorization-kubeconfig (which would wait for a
# request-header CA that this apiserver does not have) the secure port serves
# only the always-allowed paths: /metrics is added so measure.sh can count
# bindings. The controller-manager serves only /healthz, /readyz, /livez.
start kube-scheduler kube-scheduler \
  --config "$S/kube-scheduler.yaml" \
  --authorization-always-allow-paths /healthz,/readyz,/livez,/metrics \
  --bind-address 127.0.0.1 --secure-port "$sched_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --profiling=false

# kwok's fake kubelets: every node says its address is 127.0.0.1 and its
# kubelet port is kwok's own server, so `kubectl logs/exec` reach kwok on
# loopback. Pod IPs come from 10.244.0.0/16 and are only labels: nothing
# listens there and nothing here routes to them.
# More parallel status updates than kwok's default 4, for 1,000 nodes.
cat > "$S/kwok.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: 16
  nodePlayStageParallelism: 16
  nodeLeaseParallelism: 16
EOF
start kwok kwok \
  --kubeconfig "$S/kubeconfig" \
  --config "$K8S_DIR/kwok-stages.yaml" --config "$S/kwok.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-ip 127.0.0.1 --node-port "$kwok_port" \
  --server-address "127.0.0.1:$kwok_port" \
  --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
  --node-lease-duration-seconds 40 \
  --cidr 10.244.0.0/16

wait_until kube-controller-manager 120 https_ok "https://127.0.0.1:$kcm_port/healthz"
wait_until kube-scheduler 120 https_ok "https://127.0.0.1:$sched_port/healthz"
wait_until kwok 120 https_ok "https://127.0.0.1:$kwok_port/healthz"
# Pods need the namespace's default ServiceAccount (made by the controller-manager).
wait_until kube-controller-manager 120 kubectl get serviceaccount default -n default
log "control plane ready in $(( $(now_ms) - t0 )) ms"

"$K8S_DIR/nodes.sh" "$nodes"

started_ok=true
echo "$(( $(now_ms) - t0 ))" > "$S/startup-ms"
log "cluster up in $(( $(now_ms) - t0 )) ms with $nodes fake GPU nodes; stop it with end2end/k8s/down.sh"
echo "export KUBECONFIG=$S/kubeconfig"
echo "export PATH=$K8S_BIN:\$PATH"
