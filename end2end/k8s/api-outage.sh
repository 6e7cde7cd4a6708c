#!/usr/bin/env bash
# Stops the test cluster's kube-apiserver for SECONDS, then starts it again
# with the same command line, port and state, and waits until it is ready:
# an outage of the Kubernetes API as clients see it (connections refused),
# while etcd, the controllers, the scheduler and kwok keep running.
#
#   end2end/k8s/api-outage.sh SECONDS
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
load_cluster_env

seconds="${1:?usage: api-outage.sh SECONDS}"
[[ "$seconds" =~ ^[0-9]+$ ]] || die "SECONDS must be a whole number, got '$seconds'"
S="$K8S_STATE"
pid="$(component_pid kube-apiserver)" || die "kube-apiserver of $S is not running"
mapfile -d '' argv <"/proc/$pid/cmdline"
(( ${#argv[@]} > 0 )) || die "cannot read the command line of kube-apiserver ($pid)"

# SIGKILL, as a crash or a lost machine: on SIGTERM it would go on serving
# while it drains its requests.
kill -KILL "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
log "kube-apiserver killed; starting it again in ${seconds}s"
sleep "$seconds"

( trap '' HUP; exec "${argv[@]}" ) >>"$S/logs/kube-apiserver.log" 2>&1 </dev/null &
echo "$!" >"$S/pids/kube-apiserver.pid"
deadline=$((SECONDS + 60))
until [[ "$(curl -sS --max-time 2 --cacert "$S/pki/ca.crt" --cert "$S/pki/admin.crt" --key "$S/pki/admin.key" "https://127.0.0.1:$API_PORT/readyz" 2>/dev/null)" == ok ]]; do
  kill -0 "$!" 2>/dev/null || die "kube-apiserver exited while starting again; see $S/logs/kube-apiserver.log"
  (( SECONDS < deadline )) || die "kube-apiserver not ready 60s after starting again"
  sleep 0.2
done
log "kube-apiserver ready again"
