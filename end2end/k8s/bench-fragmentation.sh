#!/usr/bin/env bash
# make bench-k8s-fragmentation: where GPUs go when jobs of 1, 2, 4 and 8
# GPUs share a cluster: Trainyard's placement (best fit, pinned with a node
# affinity) beside kube-scheduler's own (its default scoring spreads pods
# over the least allocated nodes), on the same test cluster, one after the
# other, with the same jobs arriving at the same times.
#
#   end2end/k8s/bench-fragmentation.sh [NODES=100] [JOBS=600] [ARRIVAL_SECONDS=60]
#
# The workload is drawn once with a fixed seed: sizes 1/2/4/8 GPUs at
# 40/30/20/10 %, each "running" (kwok) 20-60 s, arriving evenly over
# ARRIVAL_SECONDS, more than the cluster holds at once, so jobs queue.
# Every 2 s the pods are sampled: GPUs held by running pods (occupancy) and
# nodes left wholly free. Printed side by side: occupancy over the run, its
# mean while jobs waited, and how long jobs (the 8-GPU ones apart) waited
# from their arrival to their pod Running.
set -euo pipefail
export K8S_STATE="${K8S_STATE:-/tmp/trainyard-k8s-fragmentation}"
unset GPU_PRODUCT GPU_COUNT GPU_MEMORY_MIB NODE_CPU NODE_MEMORY NODE_PODS NODE_PREFIX NODE_POOL
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes="${1:-100}"
jobs="${2:-600}"
arrival="${3:-60}"
[[ "$nodes" =~ ^[0-9]+$ && "$jobs" =~ ^[0-9]+$ && "$arrival" =~ ^[0-9]+$ ]] ||
  die "usage: bench-fragmentation.sh [NODES] [JOBS] [ARRIVAL_SECONDS]"

"$ROOT/scripts/build.sh" >/dev/null
work="$(mktemp -d)"
server=""
sampler=""
finish() {
  local rc=$?
  [[ -z "$sampler" ]] || kill "$sampler" 2>/dev/null || true
  [[ -z "$server" ]] || kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  "$K8S_DIR/down.sh" >/dev/null || true
  (( rc == 0 )) || { echo "server log:"; tail -20 "$work/server.log" 2>/dev/null || true; }
  rm -rf "$work"
  exit "$rc"
}
trap finish EXIT

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
"$K8S_DIR/up.sh" 0 >/dev/null
load_cluster_env
"$K8S_DIR/nodes.sh" "$nodes" 2>/dev/null

# INDEX GPUS RUN_SECONDS ARRIVAL_MS, one line per job.
awk -v n="$jobs" -v span="$arrival" 'BEGIN {
  srand(42)
  for (i = 1; i <= n; i++) {
    r = rand(); g = r < 0.4 ? 1 : r < 0.7 ? 2 : r < 0.9 ? 4 : 8
    printf "%d %d %d %d\n", i, g, 20 + int(rand() * 41), int((i - 1) * span * 1000 / n)
  }
}' >"$work/workload.txt"
read -r demand eights < <(awk '{ d += $2 * $3; if ($2 == 8) e++ } END { print d, e }' "$work/workload.txt")

# Every 2 s until stopped: "T_MS POD JOB NODE GPUS PHASE READY_TIME" per pod,
# "-" for what it lacks yet (a node, Ready=True: a Pending pod has Ready=False
# with a time of its own).
sample() { # NAMESPACE OUT
  local t
  while :; do
    t=$(now_ms)
    kubectl get pods -n "$1" -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.metadata.labels.trainyard\.dev/job}{"\t"}{.spec.nodeName}{"\t"}{.spec.containers[0].resources.limits.nvidia\.com/gpu}{"\t"}{.status.phase}{"\t"}{.status.conditions[?(@.type=="Ready")].status}{"\t"}{.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}' 2>/dev/null |
      awk -F'\t' -v t="$t" 'NF == 7 && $1 != "" {
        for (i = 1; i <= 5; i++) if ($i == "") $i = "-"
        print t, $1, $2, $3, $4, $5, ($6 == "True" && $7 != "") ? $7 : "-" }' >>"$2"
    sleep 2
  done
}
# Jobs not done yet (all were made when this is asked).
remaining() {
  kubectl get pods -n spread --field-selector=status.phase!=Succeeded,status.phase!=Failed -o name 2>/dev/null | wc -l
}

# Feeds jobs at their arrival times: `feed CMD` runs `CMD FILE` for each
# second's jobs (FILE: their workload lines), in the background.
feed() {
  local start second
  start=$(now_ms)
  for ((second = 0; second <= arrival; second++)); do
    awk -v s="$second" 'int($4 / 1000) == s' "$work/workload.txt" >"$work/second-$second.txt"
    if [[ -s "$work/second-$second.txt" ]]; then
      "$1" "$work/second-$second.txt" &
    fi
    while (( $(now_ms) < start + (second + 1) * 1000 )); do sleep 0.05; done
  done
  wait_feeders
}

# ------------------------------------------------- 1. kube-scheduler's own
kubectl create namespace spread >/dev/null
create_bare() { # FILE
  local i g secs _
  while read -r i g secs _; do
    cat <<EOF
---
apiVersion: batch/v1
kind: Job
metadata: {name: job-$i, namespace: spread}
spec:
  backoffLimit: 0
  template:
    metadata: {labels: {trainyard.dev/job: "$i"}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainyard/fake-trainer
        env: [{name: FAKE_RUN_SECONDS, value: "$secs"}]
        resources: {limits: {nvidia.com/gpu: $g, cpu: 100m, memory: 64Mi}}
EOF
  done <"$1" | kubectl create -o name -f - >/dev/null
  awk -v t="$(now_ms)" '{ print $1, t }' "$1" >>"$work/spread-sent.txt"
}
wait_feeders() { local p; for p in $(jobs -p); do [[ "$p" == "$server" || "$p" == "$sampler" ]] || wait "$p"; done; }
wait_done() {
  local deadline=$((SECONDS + 1800))
  until (( $(remaining) == 0 )); do
    (( SECONDS < deadline )) || die "$(remaining) of $jobs jobs not done after 30 minutes"
    sleep 2
  done
}
# One run, sampled from its first job to its last one done; sets
# NAMESPACE_start and NAMESPACE_end (ms).
measure() { # NAMESPACE FEEDER WHO
  sample "$1" "$work/$1-samples.txt" &
  sampler=$!
  local start end
  start=$(now_ms)
  feed "$2"
  wait_done
  end=$(now_ms)
  kill "$sampler"; wait "$sampler" 2>/dev/null || true; sampler=""
  printf -v "$1_start" %s "$start"
  printf -v "$1_end" %s "$end"
  log "$3: $jobs jobs done in $(( (end - start) / 1000 )) s"
}
measure spread create_bare kube-scheduler
kubectl delete namespace spread --wait=false >/dev/null
until (( $(kubectl get pods -n spread -o name 2>/dev/null | wc -l) == 0 )); do sleep 1; done

# ------------------------------------------------- 2. Trainyard's placement
kubectl create namespace packed >/dev/null
serve_trainyard packed 39621 "$work"
submit_trainyard() { # FILE: "INDEX ID SENT_MS" per job to packed-sent.txt
  local i g secs _ answer sent
  while read -r i g secs _; do
    sent=$(now_ms)
    answer="$(curl -sf -X POST "$url/api/trainyard/v1/jobs" -H 'Content-Type: application/json' \
      -d "{\"name\": \"job-$i\", \"command\": \"python train.py\", \"resources\": {\"gpus\": $g, \"cpus\": 0.1, \"memory\": \"64Mi\"}, \"env\": {\"FAKE_RUN_SECONDS\": \"$secs\"}}")" ||
      { echo "submission of job $i failed" >&2; return 1; }
    echo "$i $(grep -o '"id":[0-9]*' <<<"$answer" | head -1 | cut -d: -f2) $sent" >>"$work/packed-ids.txt"
  done <"$1"
}
# Trainyard removes a Job once it ended (its log is kept): ask its API.
remaining() {
  curl -sf "$url/api/trainyard/v1/jobs?scope=all&state=QUEUED,STARTING,RUNNING&limit=1000" |
    grep -o '"state":"[A-Z]*"' | wc -l
}
measure packed submit_trainyard Trainyard
# Trainyard's job ids → the workload's indices, so both runs read alike.
awk 'NR == FNR { idx[$2] = $1; next } ($3 in idx) { $3 = idx[$3]; print }' \
  "$work/packed-ids.txt" "$work/packed-samples.txt" >"$work/packed.txt"
awk '{ print $1, $3 }' "$work/packed-ids.txt" >"$work/packed-sent.txt"
cp "$work/spread-samples.txt" "$work/spread.txt"

# ------------------------------------------------- 3. side by side
# When each job's pod was first Running (Ready): "INDEX EPOCH_SECONDS".
ready_times() { # SAMPLES
  awk '$7 != "-" && !($3 in r) { r[$3] = 1; print $3, $7 }' "$1" >"$work/ready-raw.txt"
  paste -d' ' <(cut -d' ' -f1 "$work/ready-raw.txt") <(cut -d' ' -f2 "$work/ready-raw.txt" | epoch)
}
# Per sample: "SECONDS_SINCE_START OCCUPANCY_% NODES_WHOLLY_FREE JOBS_WAITING";
# waiting: arrived, its pod not Running yet.
occupancy() { # SAMPLES START_MS SENT READY
  awk -v start="$2" -v nodes="$nodes" '
    FILENAME == ARGV[1] { sent[$1] = $2; next }
    FILENAME == ARGV[2] { ready[$1] = $2 * 1000; next }
    { t = $1; if (!(t in seen)) { seen[t] = 1; times[++n] = t }
      if ($6 == "Running" && $7 != "-") { used[t] += $5; if (!((t, $4) in busy)) { busy[t, $4] = 1; b[t]++ } } }
    END {
      for (i = 1; i <= n; i++) {
        t = times[i]; w = 0
        for (id in sent) if (sent[id] <= t && (!(id in ready) || ready[id] > t)) w++
        printf "%d %.1f %d %d\n", (t - start) / 1000, 100 * used[t] / (nodes * 8), nodes - b[t], w
      }
    }' "$3" "$4" "$1"
}
# "GPUS SECONDS" per job: its arrival to its pod Running.
waits() { # SENT READY
  awk 'FILENAME == ARGV[1] { g[$1] = $2; next }
       FILENAME == ARGV[2] { sent[$1] = $2; next }
       ($1 in sent) { w = $2 - int(sent[$1] / 1000); print g[$1], w < 0 ? 0 : w }' \
    "$work/workload.txt" "$1" "$2"
}
pcts() { # p50 / p90 / max of numbers, one per line
  sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) { print "-"; exit }
    p = int(NR * 0.9); if (p < 1) p = 1; printf "%d / %d / %d", a[int((NR + 1) / 2)], a[p], a[NR] }'
}
for run in spread packed; do
  ready_times "$work/$run.txt" >"$work/$run-ready.txt"
  waits "$work/$run-sent.txt" "$work/$run-ready.txt" >"$work/$run-waits.txt"
done
occupancy "$work/spread.txt" "$spread_start" "$work/spread-sent.txt" "$work/spread-ready.txt" >"$work/spread-occ.txt"
occupancy "$work/packed.txt" "$packed_start" "$work/packed-sent.txt" "$work/packed-ready.txt" >"$work/packed-occ.txt"
mean_busy() { awk '$4 > 0 { s += $2; n++ } END { printf "%.1f", n ? s / n : 0 }' "$1"; }
free_while_waiting() { # mean nodes wholly free while jobs waited
  awk '$4 > 0 { s += $3; n++ } END { printf "%.1f", n ? s / n : 0 }' "$1"
}

echo
printf '%s\n' "$nodes nodes x 8 GPUs; $jobs jobs of 1/2/4/8 GPUs (40/30/20/10 %, $eights of 8) arriving over $arrival s, $demand GPU-seconds"
printf '%-52s %16s %16s\n' "" "Trainyard" "kube-scheduler"
printf '%-52s %16s %16s\n' "mean GPU occupancy while jobs waited (%)" "$(mean_busy "$work/packed-occ.txt")" "$(mean_busy "$work/spread-occ.txt")"
printf '%-52s %16s %16s\n' "mean nodes wholly free while jobs waited" "$(free_while_waiting "$work/packed-occ.txt")" "$(free_while_waiting "$work/spread-occ.txt")"
printf '%-52s %16s %16s\n' "8-GPU jobs' wait, p50 / p90 / max (s)" \
  "$(awk '$1 == 8 { print $2 }' "$work/packed-waits.txt" | pcts)" "$(awk '$1 == 8 { print $2 }' "$work/spread-waits.txt" | pcts)"
printf '%-52s %16s %16s\n' "other jobs' wait, p50 / p90 / max (s)" \
  "$(awk '$1 != 8 { print $2 }' "$work/packed-waits.txt" | pcts)" "$(awk '$1 != 8 { print $2 }' "$work/spread-waits.txt" | pcts)"
printf '%-52s %16s %16s\n' "all jobs done after (s)" "$(( (packed_end - packed_start) / 1000 ))" "$(( (spread_end - spread_start) / 1000 ))"
echo
echo "GPU occupancy over the run (%), every 10 s:"
printf '%6s %10s %15s\n' "s" "Trainyard" "kube-scheduler"
join -a1 -a2 -e - -o 0,1.2,2.2 \
  <(awk '{ b = int($1 / 10) * 10; if (!(b in s)) { s[b] = $2; print b, $2 } }' "$work/packed-occ.txt" | sort -k1,1) \
  <(awk '{ b = int($1 / 10) * 10; if (!(b in s)) { s[b] = $2; print b, $2 } }' "$work/spread-occ.txt" | sort -k1,1) |
  sort -n | awk '{ printf "%6d %10s %15s\n", $1, $2, $3 }'
