#!/usr/bin/env bash
# The Kubernetes executor's tests (server/tests/it/kubernetes.rs) on the test
# cluster: start it with GPU nodes in four pools, give the server the chart's
# own RBAC (helm/trainyard/templates/rbac.yaml) through a ServiceAccount
# token (TokenRequest), so that a verb the chart lacks fails the tests, run
# them and a job submitted from the browser (end2end/k8s-browser/), and stop
# the cluster again (always, also on failure).
#
#   end2end/k8s/executor.sh [test name filter]
#
# Uses its own state folder (K8S_STATE, default /tmp/trainyard-k8s-executor).
set -euo pipefail
export K8S_STATE="${K8S_STATE:-/tmp/trainyard-k8s-executor}"
unset GPU_PRODUCT GPU_COUNT GPU_MEMORY_MIB NODE_CPU NODE_MEMORY NODE_PODS NODE_PREFIX NODE_POOL
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# One namespace per test server (Job names restart at 1 with each database).
NAMESPACES=15

finish() {
  local rc=$?
  if (( rc != 0 )) && [[ -f "$K8S_STATE/kubeconfig" ]]; then
    echo "--- Jobs, pods and events at the failure ---"
    "$K8S_BIN/kubectl" --kubeconfig "$K8S_STATE/kubeconfig" get nodes,jobs,pods -A -o wide 2>&1 | tail -n 40 || true
    "$K8S_BIN/kubectl" --kubeconfig "$K8S_STATE/kubeconfig" get events -A --sort-by=.lastTimestamp 2>&1 | tail -n 30 || true
  fi
  "$K8S_DIR/down.sh" || rc=1
  exit "$rc"
}
trap finish EXIT

log "starting the cluster (state in $K8S_STATE)"
"$K8S_DIR/up.sh" 0 >/dev/null
load_cluster_env
NODE_POOL=default "$K8S_DIR/nodes.sh" 4
NODE_POOL=evict NODE_PREFIX=evict-node- "$K8S_DIR/nodes.sh" 2
NODE_POOL=busy NODE_PREFIX=busy-node- "$K8S_DIR/nodes.sh" 1
NODE_POOL=gone NODE_PREFIX=gone-node- "$K8S_DIR/nodes.sh" 2
NODE_POOL=agents NODE_PREFIX=agent-node- "$K8S_DIR/nodes.sh" 1

# The server's account, exactly as the chart makes it (release "trainyard" in
# namespace "trainyard"), bound in each test namespace.
kubectl create namespace trainyard >/dev/null
for ns in $(seq -f 'trainyard-test-%g' 1 "$NAMESPACES") trainyard-browser; do
  kubectl create namespace "$ns" >/dev/null
  helm template trainyard "$ROOT/helm/trainyard" --namespace trainyard \
    --set executor=kubernetes --set "kubernetes.namespace=$ns" \
    --set database.url=postgres://unused --show-only templates/rbac.yaml |
    kubectl apply -f - >/dev/null
done
# Checkpoint volumes: a StorageClass without a provisioner and volumes made
# ahead for its claims to bind to (kwok runs no storage driver).
kubectl apply -f - >/dev/null <<EOF
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: trainyard-checkpoints
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: Immediate
EOF
for i in $(seq 1 6); do
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: PersistentVolume
metadata:
  name: checkpoints-$i
spec:
  storageClassName: trainyard-checkpoints
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: /var/lib/trainyard-checkpoints/$i}
EOF
done
# The chart's GPU agents (their account, DaemonSet, and the server's right
# to review their tokens), on the agents' node only.
helm template trainyard "$ROOT/helm/trainyard" --namespace trainyard \
  --set executor=kubernetes --set agent.enabled=true \
  --set 'agent.nodeSelector.trainyard\.dev/pool=agents' \
  --set database.url=postgres://unused --show-only templates/agent.yaml |
  kubectl apply -f - >/dev/null
token="$(kubectl -n trainyard create token trainyard-trainyard --duration 2h)"
ca="$(base64 -w0 <"$K8S_STATE/pki/ca.crt")"
cat >"$K8S_STATE/executor.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: trainyard
  cluster:
    server: $API_SERVER
    certificate-authority-data: $ca
users:
- name: trainyard-executor
  user:
    token: $token
contexts:
- name: executor
  context:
    cluster: trainyard
    user: trainyard-executor
    namespace: trainyard-test-1
current-context: executor
EOF
chmod 600 "$K8S_STATE/executor.kubeconfig"
log "cluster ready: 4 nodes in pool default, 2 in pool evict, 1 in pool busy, 2 in pool gone, 1 in pool agents (with the chart's agent), $NAMESPACES test namespaces"

cd "$ROOT"
export TEST_KUBECONFIG="$K8S_STATE/executor.kubeconfig"
export TEST_KUBE_ADMIN_KUBECONFIG="$K8S_STATE/kubeconfig"
export TEST_KUBECTL="$K8S_BIN/kubectl"
export TEST_K8S_DIR="$K8S_DIR"
export TEST_POD_RESOURCES="$K8S_BIN/kwok-pod-resources"
export TEST_KUBE_NAMESPACES="$NAMESPACES"
# The same selection of packages as scripts/test.sh builds, so that nothing
# is built again. The API outage stops kube-apiserver for everyone: it runs
# alone, after the others.
# Its tests are the ignored ones of the server's test program (tests/it).
tests=(cargo test --locked --release --workspace --exclude trainyard-frontend --test it --)
"${tests[@]}" --ignored --test-threads 4 --skip api_outage "${@:-kubernetes::}"
# The browser: a job submitted from the form runs on the cluster (the
# release server and its site; scripts/test.sh has built them already).
if [[ $# -eq 0 || "browser" == *"$1"* ]]; then
  [[ -n "${E2E_RELEASE_BUILT:-}" ]] || "$ROOT/scripts/build.sh" >/dev/null
  (cd "$ROOT/end2end" && TEST_KUBE_BROWSER_NAMESPACE=trainyard-browser \
    E2E_TRAINYARD_BIN="$CARGO_TARGET_DIR/release/trainyard" \
    npx playwright test -c playwright.k8s.config.ts)
fi
if [[ $# -eq 0 || "api_outage" == *"$1"* ]]; then
  "${tests[@]}" --ignored kubernetes::api_outage
fi
