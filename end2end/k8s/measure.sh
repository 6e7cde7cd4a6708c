#!/usr/bin/env bash
# Measure the test cluster: cold build time, start-up time, time to create
# 1,000 fake GPU nodes, and how fast 5,000 single-GPU pods (one Job with
# parallelism = completions = 5000) get scheduled onto them. Starts and stops
# its own cluster (K8S_STATE, default /tmp/trainyard-k8s-measure).
#
#   end2end/k8s/measure.sh [NODES=1000] [PODS=5000]
set -euo pipefail
export K8S_STATE="${K8S_STATE:-/tmp/trainyard-k8s-measure}"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes="${1:-1000}"
pods="${2:-5000}"
trap '"$K8S_DIR/down.sh" >&2' EXIT

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
echo "versions: Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION, kubeconform $KUBECONFORM_VERSION"

# Build time: this run's if it had to build, else the one recorded at build time.
if k8s_binaries_present; then
  TIMEFORMAT=%R
  noop="$( { time "$K8S_DIR/build.sh" >/dev/null 2>&1; } 2>&1 )"
  echo "build: cached in $K8S_BIN (recorded build time: $(cat "$K8S_BUILD_DIR/build-seconds" 2>/dev/null || echo '?') s; build.sh now, a no-op: $noop s)"
else
  "$K8S_DIR/build.sh" >/dev/null
  echo "build: built now in $(cat "$K8S_BUILD_DIR/build-seconds") s (cold only if $GOCACHE was empty)"
fi

"$K8S_DIR/up.sh" 0 >/dev/null
load_cluster_env
echo "start-up: control plane ready (certificates, etcd, apiserver, controller-manager, scheduler, kwok) in $(cat "$K8S_STATE/startup-ms") ms"

t=$(now_ms)
"$K8S_DIR/nodes.sh" "$nodes"
echo "nodes: $nodes fake GPU nodes created and Ready in $(( $(now_ms) - t )) ms"

# Bindings done so far, from kube-scheduler's own counter.
scheduled() {
  curl -sS --max-time 5 --cacert "$K8S_STATE/pki/ca.crt" "https://127.0.0.1:$SCHED_PORT/metrics" |
    awk '/^scheduler_schedule_attempts_total\{/ && /result="scheduled"/ { s += $2 } END { print s + 0 }'
}
base=$(scheduled)

# Pods stay Running (run-seconds 1 day) so that none finishes and is replaced.
t0=$(now_ms)
kubectl apply -f - >/dev/null <<EOF
apiVersion: batch/v1
kind: Job
metadata:
  name: measure
spec:
  parallelism: $pods
  completions: $pods
  backoffLimit: 0
  template:
    metadata:
      annotations:
        trainyard.dev/run-seconds: "86400"
    spec:
      restartPolicy: Never
      containers:
      - name: train
        image: trainyard/fake-trainer
        resources:
          limits:
            nvidia.com/gpu: 1
EOF

created_ms="" first_ms="" done_ms=""
deadline=$(( SECONDS + 900 ))
while :; do
  now=$(now_ms)
  n=$(( $(scheduled) - base ))
  [[ -z "$first_ms" ]] && (( n > 0 )) && first_ms=$(( now - t0 ))
  if [[ -z "$created_ms" ]]; then
    active="$(kubectl get job measure -o jsonpath='{.status.active}')"
    (( ${active:-0} >= pods )) && created_ms=$(( now - t0 ))
  fi
  (( n >= pods )) && { done_ms=$(( now - t0 )); break; }
  (( SECONDS < deadline )) || die "only $n of $pods pods scheduled after 900 s"
  sleep 0.25
done

bound="$(kubectl get pods -l job-name=measure -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep -c . || true)"
(( bound >= pods )) || die "scheduler counted $pods bindings but only $bound pods have a node"
echo "pods: $pods single-GPU pods of one Job all bound to nodes ${done_ms} ms after the Job was created" \
     "(first binding at ${first_ms} ms; Job controller had created them all by ${created_ms:-$done_ms} ms)"
awk -v p="$pods" -v d="$done_ms" -v f="$first_ms" 'BEGIN {
  printf "pods/s: %.0f pods scheduled per second from Job creation to the last binding", p / (d / 1000)
  if (d > f) printf " (%.0f per second from the first binding to the last)", p / ((d - f) / 1000)
  printf "\n" }'
