#!/usr/bin/env bash
# Stop the test cluster that up.sh started from ${K8S_STATE:-/tmp/trainyard-k8s},
# check that none of its processes is left, and remove the state folder.
#
#   end2end/k8s/down.sh [--keep-state]   # --keep-state: keep logs and data
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

keep_state=false
[[ "${1:-}" == --keep-state ]] && keep_state=true

# SIGTERM to all components at once (each takes 1-3 s to shut down; their data
# is thrown away, so the order does not matter), then SIGKILL after 10 s.
if [[ -d "$K8S_STATE" ]]; then
  declare -A pids=()
  for c in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    pid="$(component_pid "$c")" || continue
    pids[$c]=$pid
    kill -TERM "$pid" 2>/dev/null || true
  done
  for ((i = 0; i < 100 && ${#pids[@]} > 0; i++)); do   # up to 10 s
    for c in "${!pids[@]}"; do
      kill -0 "${pids[$c]}" 2>/dev/null || unset "pids[$c]"
    done
    (( ${#pids[@]} == 0 )) || sleep 0.1
  done
  for c in "${!pids[@]}"; do
    log "$c (pid ${pids[$c]}) ignored SIGTERM for 10 s; killing it"
    kill -KILL "${pids[$c]}" 2>/dev/null || true
  done
  rm -f "$K8S_STATE"/pids/*.pid
fi

# Anything of ours still running from this state folder (a pid file lost, a
# second up.sh that failed half-way...): kill it, then make sure it is gone.
left="$(state_processes)"
if [[ -n "$left" ]]; then
  log "killing leftover processes from $K8S_STATE: $(echo $left)"
  kill -KILL $left 2>/dev/null || true
  sleep 0.5
  left="$(state_processes)"
  [[ -z "$left" ]] || die "processes from $K8S_STATE still running: $(echo $left)"
fi

if [[ "$keep_state" == true ]]; then
  log "cluster stopped; state kept in $K8S_STATE"
else
  rm -rf "$K8S_STATE"
  log "cluster stopped; no process left; $K8S_STATE removed"
fi
