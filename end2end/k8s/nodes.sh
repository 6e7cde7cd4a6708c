#!/usr/bin/env bash
# Create (or update) N fake GPU nodes in the running test cluster and wait until
# kwok has made them all Ready. Nodes are named gpu-node-0001 ... and are
# managed by kwok because of their annotation kwok.x-k8s.io/node: fake.
#
#   end2end/k8s/nodes.sh [N=4]
#
# GPU_PRODUCT, GPU_COUNT, GPU_MEMORY_MIB, NODE_CPU, NODE_MEMORY, NODE_PODS,
# NODE_PREFIX and NODE_POOL (the label trainyard.dev/pool, default "default")
# change what the nodes advertise.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_cluster_env

n="${1:-4}"
[[ "$n" =~ ^[0-9]+$ ]] && (( n <= 1000 )) || die "node count must be 0..1000, got '$n'"
(( n > 0 )) || exit 0

prefix="${NODE_PREFIX:-gpu-node-}"
gpu_product="${GPU_PRODUCT:-NVIDIA-H100-80GB-HBM3}"
gpu_count="${GPU_COUNT:-8}"
gpu_memory_mib="${GPU_MEMORY_MIB:-81559}"   # as NVIDIA GPU feature discovery reports an H100 80GB
cpu="${NODE_CPU:-224}"
memory="${NODE_MEMORY:-2Ti}"
pods="${NODE_PODS:-110}"
pool="${NODE_POOL:-default}"

# Multi-document files of up to 100 nodes, applied by up to 8 kubectl at once
# (one kubectl sends its objects one after the other). Server-side apply, so
# that re-running this script updates the nodes instead of failing.
dir="$K8S_STATE/nodes"
rm -rf "$dir"; mkdir -p "$dir"
for ((i = 1; i <= n; i++)); do
  name="$(printf '%s%04d' "$prefix" "$i")"
  cat >>"$dir/chunk-$(( (i - 1) / 100 )).yaml" <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    trainyard.dev/pool: $pool
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    node-role.kubernetes.io/gpu: ""
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.product: $gpu_product
    nvidia.com/gpu.count: "$gpu_count"
    nvidia.com/gpu.memory: "$gpu_memory_mib"
status:
  capacity: &resources
    cpu: "$cpu"
    memory: $memory
    pods: "$pods"
    ephemeral-storage: 7Ti
    nvidia.com/gpu: "$gpu_count"
  allocatable: *resources
EOF
done

start=$(now_ms)
printf '%s\0' "$dir"/chunk-*.yaml |
  xargs -0 -n 1 -P 8 kubectl apply --server-side --force-conflicts -o name -f >/dev/null
created=$(now_ms)
log "applied $n nodes in $(( created - start )) ms; waiting for kwok to make them Ready"

# One list per poll (kubectl wait would watch each node separately).
ready=0
deadline=$(( SECONDS + 120 + n / 5 ))
while :; do
  ready="$(kubectl get nodes -l "type=kwok,trainyard.dev/pool=$pool" -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' | grep -c '^True$' || true)"
  (( ready >= n )) && break
  (( SECONDS < deadline )) || die "only $ready of $n nodes Ready after waiting; see $K8S_STATE/logs/kwok.log"
  sleep 0.5
done
log "$n nodes Ready $(( $(now_ms) - start )) ms after the apply started"
