#!/usr/bin/env bash
# Smoke test of the test cluster: start it with 4 fake GPU nodes, check that
# GPU pods are scheduled, run, succeed or fail, that an oversized pod stays
# Pending, that pods leave a node that is tainted NoExecute or deleted, and
# stop it again (always, also on failure).
#
#   end2end/k8s/smoke.sh
#
# Uses its own state folder (K8S_STATE, default /tmp/trainyard-k8s-smoke) so it
# does not collide with a cluster started by hand.
set -euo pipefail
export K8S_STATE="${K8S_STATE:-/tmp/trainyard-k8s-smoke}"
# The checks below expect nodes.sh's default nodes (8 x NVIDIA-H100-80GB-HBM3).
unset GPU_PRODUCT GPU_COUNT GPU_MEMORY_MIB NODE_CPU NODE_MEMORY NODE_PODS NODE_PREFIX
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

passed=0
t_start=$SECONDS
finish() {
  local rc=$?
  if (( rc != 0 )); then
    echo "smoke: $passed passed, 1 failed"
    if [[ -f "$K8S_STATE/kubeconfig" ]]; then
      echo "--- pods and events at the failure ---"
      "$K8S_BIN/kubectl" --kubeconfig "$K8S_STATE/kubeconfig" get nodes,pods,jobs -A -o wide 2>&1 | tail -n 30 || true
      "$K8S_BIN/kubectl" --kubeconfig "$K8S_STATE/kubeconfig" get events -A --sort-by=.lastTimestamp 2>&1 | tail -n 20 || true
    fi
  fi
  "$K8S_DIR/down.sh" || rc=1
  exit "$rc"
}
trap finish EXIT

pass() { passed=$((passed + 1)); echo "PASS: $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
# within TIMEOUT_S DESCRIPTION COMMAND...: poll COMMAND until it succeeds.
within() {
  local timeout="$1" what="$2"; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    (( SECONDS < deadline )) || fail "$what: not seen within ${timeout}s"
    sleep 0.5
  done
}
jpath() { kubectl get "$1" -o jsonpath="$2" 2>/dev/null; }
gone() { ! kubectl get "$1" >/dev/null 2>&1; }
phase_is() { [[ "$(jpath "pod/$1" '{.status.phase}')" == "$2" ]]; }

log "starting the cluster (state in $K8S_STATE)"
"$K8S_DIR/up.sh" 4 >/dev/null
load_cluster_env
echo "cluster: Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, up in $(cat "$K8S_STATE/startup-ms") ms"

# 1. The nodes: 4 Ready kwok nodes that advertise 8 GPUs and the GPU labels.
gpus="$(jpath nodes '{range .items[*]}{.status.allocatable.nvidia\.com/gpu}/{.metadata.labels.nvidia\.com/gpu\.product}/{.metadata.annotations.kwok\.x-k8s\.io/node}{"\n"}{end}')"
[[ "$(grep -c '^8/NVIDIA-H100-80GB-HBM3/fake$' <<<"$gpus")" == 4 ]] || fail "expected 4 fake nodes with 8 GPUs, got: $gpus"
pass "4 fake GPU nodes Ready, each with allocatable nvidia.com/gpu=8 and nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3"

# Long-running pods (restartPolicy Always) pinned to the nodes that go away
# below. Node removal is started early because the pod GC waits ~40-80 s.
pinned_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
spec:
  nodeSelector:
    kubernetes.io/hostname: $2
  containers:
  - name: main
    image: trainyard/fake-trainer
    resources:
      limits:
        nvidia.com/gpu: 1
EOF
}
{ pinned_pod on-deleted-node gpu-node-0004; echo ---; pinned_pod on-tainted-node gpu-node-0003; } | kubectl apply -f - >/dev/null
within 30 "pinned pods Running" bash -c "[[ \$(kubectl get pods on-deleted-node on-tainted-node -o jsonpath='{.items[*].status.phase}') == 'Running Running' ]]"
kubectl delete node gpu-node-0004 >/dev/null
t_node_deleted=$SECONDS
# NoExecute: the taint-eviction controller deletes pods that do not tolerate it.
kubectl taint node gpu-node-0003 trainyard.dev/broken=true:NoExecute >/dev/null
t_tainted=$SECONDS
echo "      (deleted node gpu-node-0004 and tainted gpu-node-0003 NoExecute; their pods are checked below)"

# 2. A Job asking for one GPU is scheduled onto a fake GPU node, runs, completes.
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: batch/v1
kind: Job
metadata:
  name: one-gpu
spec:
  backoffLimit: 0
  template:
    metadata:
      annotations:
        trainyard.dev/run-seconds: "2"
    spec:
      restartPolicy: Never
      containers:
      - name: train
        image: trainyard/fake-trainer
        resources:
          limits:
            nvidia.com/gpu: 1
EOF
within 30 "Job one-gpu pod Running" bash -c "[[ \$(kubectl get pods -l job-name=one-gpu -o jsonpath='{.items[0].status.phase}') == Running ]]"
node="$(kubectl get pods -l job-name=one-gpu -o jsonpath='{.items[0].spec.nodeName}')"
[[ "$(jpath "node/$node" '{.metadata.labels.nvidia\.com/gpu\.present}')" == true ]] || fail "Job pod landed on '$node', not a GPU node"
within 60 "Job one-gpu condition Complete" bash -c "[[ \$(kubectl get job one-gpu -o jsonpath='{.status.conditions[?(@.type==\"Complete\")].status}') == True ]]"
pass "Job one-gpu (1 nvidia.com/gpu) scheduled on $node, Running, then Complete (pod Succeeded after its run-seconds=2)"

# 3. A pod that asks to fail (trainyard.dev/fail) ends Failed with exit code 1.
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: asks-to-fail
  annotations:
    trainyard.dev/fail: "true"
    trainyard.dev/run-seconds: "1"
spec:
  restartPolicy: Never
  containers:
  - name: train
    image: trainyard/fake-trainer
    resources:
      limits:
        nvidia.com/gpu: 1
EOF
within 30 "pod asks-to-fail Failed" phase_is asks-to-fail Failed
code="$(jpath pod/asks-to-fail '{.status.containerStatuses[0].state.terminated.exitCode}')"
[[ "$code" == 1 ]] || fail "asks-to-fail: exit code '$code', expected 1"
pass "pod annotated trainyard.dev/fail=true ended Failed (exit code 1)"

# 4. A pod asking for 9 GPUs fits no node: Pending, PodScheduled=False/Unschedulable.
kubectl apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata:
  name: nine-gpus
spec:
  restartPolicy: Never
  containers:
  - name: train
    image: trainyard/fake-trainer
    resources:
      limits:
        nvidia.com/gpu: 9
EOF
within 30 "pod nine-gpus Unschedulable" bash -c "[[ \$(kubectl get pod nine-gpus -o jsonpath='{.status.conditions[?(@.type==\"PodScheduled\")].status}/{.status.conditions[?(@.type==\"PodScheduled\")].reason}') == False/Unschedulable ]]"
sleep 2   # and it stays so
phase_is nine-gpus Pending || fail "nine-gpus left Pending"
[[ -z "$(jpath pod/nine-gpus '{.spec.nodeName}')" ]] || fail "nine-gpus got a node"
pass "pod asking for 9 GPUs stays Pending: $(jpath pod/nine-gpus '{.status.conditions[?(@.type=="PodScheduled")].message}')"

# 5. Taint eviction: the pod on the NoExecute-tainted node is deleted.
within 60 "pod on-tainted-node removed" gone pod/on-tainted-node
pass "pod on gpu-node-0003 removed $((SECONDS - t_tainted))s after the node was tainted NoExecute (taint eviction)"

# 6. Pod GC: the pod bound to the deleted node is removed. The pod GC controller
# runs every 20 s and waits 40 s for a missing node to come back (constants in
# kube-controller-manager, no flag), hence 40-80 s.
within 120 "pod on-deleted-node removed" gone pod/on-deleted-node
pass "pod on deleted node gpu-node-0004 removed $((SECONDS - t_node_deleted))s after the node was deleted (pod GC)"

echo "smoke: all checks passed in $((SECONDS - t_start))s (cluster start included)"
echo "smoke: $passed passed, 0 failed"
