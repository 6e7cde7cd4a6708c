#!/usr/bin/env bash
# make bench-k8s-executor: the Kubernetes executor against the bare control
# plane, in one run on the test cluster (end2end/k8s).
#
#   end2end/k8s/bench-executor.sh [NODES=1000] [JOBS=5000]
#
# 1. The reference: JOBS one-GPU Jobs created straight with the API (kubectl,
#    8 at a time), from the first create to every pod Running.
# 2. Trainyard (release build, SQLite, executor = kubernetes): JOBS one-GPU
#    jobs submitted through the REST API (8 at a time); for each, submit →
#    its Job created and submit → its pod Running (p50, p99), and jobs
#    started per second from the first submission to the last pod Running.
# 3. The check: no node holds more than its 8 GPUs of our pods.
# 4. Trainyard's objects without Trainyard: the Jobs and Secrets of phase 2,
#    each Job on the node Trainyard placed it on, made with kubectl (8 at a
#    time): what the Job's shape costs the cluster, apart from Trainyard.
# 5. The reference again, once Trainyard's phase is over: the rate before and
#    after are both shown, and Trainyard's against their mean.
# 6. What each job cost in CPU, in each phase: each part of the cluster's
#    above its idle use, and the client's (Trainyard's server, kubectl).
#
# kwok's pods run until deleted (FAKE_RUN_SECONDS = 1 day). Times from
# Kubernetes have its one-second resolution; submissions are timed here in
# milliseconds.
set -euo pipefail
export K8S_STATE="${K8S_STATE:-/tmp/trainyard-k8s-bench}"
unset GPU_PRODUCT GPU_COUNT GPU_MEMORY_MIB NODE_CPU NODE_MEMORY NODE_PODS NODE_PREFIX NODE_POOL
source "$(dirname "${BASH_SOURCE[0]}")/../../scripts/common.sh"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes="${1:-1000}"
jobs="${2:-5000}"
[[ "$nodes" =~ ^[0-9]+$ && "$jobs" =~ ^[0-9]+$ ]] || die "usage: bench-executor.sh [NODES] [JOBS]"
(( jobs <= nodes * 8 )) || die "$jobs one-GPU jobs do not fit on $nodes nodes of 8 GPUs"

"$ROOT/scripts/bootstrap.sh" bench >/dev/null   # jq, for phase 4
"$ROOT/scripts/build.sh" >/dev/null
work="$(mktemp -d)"
server=""
finish() {
  local rc=$?
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

# p50 and p99 of numbers, one per line.
percentiles() { sort -n | awk '{ a[NR] = $1 } END { if (NR == 0) { print "- -"; exit } i = int(NR * 0.99); if (i < 1) i = 1; print a[int((NR + 1) / 2)], a[i] }'; }
running_pods() {
  kubectl get pods -n "$1" --field-selector=status.phase=Running -o name 2>/dev/null | wc -l
}
# Polled every 5 s: a list of thousands of pods each second cost the API
# server a tenth of its time, and more in the longer phase.
wait_running() { # NAMESPACE COUNT
  local deadline=$((SECONDS + 1800))
  until (( $(running_pods "$1") >= $2 )); do
    (( SECONDS < deadline )) || die "only $(running_pods "$1") of $2 pods Running in $1 after 30 minutes"
    sleep 5
  done
}
# When the last pod of NAMESPACE became Ready, in ms: Kubernetes keeps
# seconds, so the middle of that second.
last_ready_ms() {
  kubectl get pods -n "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}' |
    epoch | sort -n | tail -1 | awk '{ printf "%.0f\n", $1 * 1000 + 500 }'
}

# CPU time in ms: cpu_ms PID... sums those processes' own (user and system);
# children_ms is what this shell's waited-for children used (kubectl, curl).
# Each phase is charged from its first create until the poll sees every pod
# Running: each part of the cluster (kwok stands for the nodes' kubelets,
# and serves the pods' logs) above what it uses idle (1,000 nodes' leases
# and status: measured for 10 s before each phase, or the longer phase
# would be charged more of it), and the client (kubectl and its xargs, or
# Trainyard's server and the curl submitters).
hz=$(getconf CLK_TCK)
parts=(kube-apiserver etcd kube-controller-manager kube-scheduler kwok)
cpu_ms() {
  local p t=0 v
  for p in "$@"; do
    v=$(awk '{ print $14 + $15 }' "/proc/$p/stat" 2>/dev/null) || v=0
    t=$((t + ${v:-0}))
  done
  echo $((t * 1000 / hz))
}
children_ms() { awk -v hz="$hz" '{ printf "%.0f\n", ($16 + $17) * 1000 / hz }' "/proc/$$/stat"; }
part_ms() { cpu_ms "$(cat "$K8S_STATE/pids/$1.pid")"; }
declare -A marked idle_rate used
mark() { local p; for p in "${parts[@]}"; do marked[$p]=$(part_ms "$p"); done; mark_ms=$(now_ms); }
# idle: sets idle_rate[PART], CPU ms a second over 10 s.
idle() {
  local p ms
  mark
  sleep 10
  ms=$(($(now_ms) - mark_ms))
  for p in "${parts[@]}"; do
    idle_rate[$p]=$(awk -v c=$(($(part_ms "$p") - ${marked[$p]})) -v ms="$ms" 'BEGIN { printf "%.1f", c / ms * 1000 }')
  done
}
# charge PHASE: sets used[PHASE PART], CPU ms since the mark above idle, and
# used[PHASE idle], the idle rate of them all.
charge() {
  local p ms=$(($(now_ms) - mark_ms)) all=0
  for p in "${parts[@]}"; do
    used["$1 $p"]=$(awk -v c=$(($(part_ms "$p") - ${marked[$p]})) -v r="${idle_rate[$p]}" -v ms="$ms" 'BEGIN { v = c - r * ms / 1000; printf "%.0f", v < 0 ? 0 : v }')
    all=$(awk -v a="$all" -v r="${idle_rate[$p]}" 'BEGIN { print a + r }')
  done
  used["$1 idle"]=$(awk -v a="$all" 'BEGIN { printf "%.0f", a }')
}
# per_job MS: milliseconds a job, to one decimal.
per_job() { awk -v ms="$1" -v n="$jobs" 'BEGIN { printf "%.1f", ms / n }'; }

# settle NAMESPACE: deletes it and waits until it is gone. Not only its pods:
# deleting thousands of Jobs (their pods' finalizers, the garbage collector,
# the events) keeps the control plane busy for a minute after the last pod
# went, and a phase that began then was measured on a cluster still at that
# work (bare Jobs begun then: 23 pods Running a second, against 57 before).
settle() {
  local began=$SECONDS
  kubectl delete namespace "$1" --timeout=20m >/dev/null
  log "$1: deleted in $((SECONDS - began)) s"
}

# made_by NAMESPACE DIR COMMAND...: the files in DIR given to COMMAND, one
# each, 8 at a time (each makes its share of the phase's JOBS Jobs), timed
# from the first create to every pod Running and charged (above); sets
# phase_client (the creators' CPU ms), phase_rate (pods Running a second)
# and phase_made (Jobs made a second).
made_by() {
  local ns="$1" dir="$2" start created done cl0
  shift 2
  idle
  mark
  cl0=$(children_ms)
  start=$(now_ms)
  printf '%s\0' "$dir"/* | xargs -0 -n 1 -P 8 "$@" >/dev/null
  created=$(now_ms)
  phase_client=$(($(children_ms) - cl0))
  wait_running "$ns" "$jobs"
  charge "$ns"
  done=$(last_ready_ms "$ns")
  phase_rate=$(awk -v n="$jobs" -v ms=$((done - start)) 'BEGIN { printf "%.0f", n / (ms / 1000) }')
  phase_made=$(awk -v n="$jobs" -v ms=$((created - start)) 'BEGIN { printf "%.0f", n / (ms / 1000) }')
  log "$ns: $jobs Jobs made in $((created - start)) ms, all pods Running after $((done - start)) ms"
}

# ------------------------------------------------------------ 1. bare Jobs
# bare_phase NAMESPACE: JOBS one-GPU Jobs created with kubectl (8 at a time),
# timed from the first create to every pod Running; sets bare_rate and
# bare_made. The namespace goes afterwards (settle), unless it is the last.
bare_phase() {
  local ns="$1" dir="$work/$1" i
  kubectl create namespace "$ns" >/dev/null
  mkdir "$dir"
  for ((i = 1; i <= jobs; i++)); do
    cat >>"$dir/chunk-$(( (i - 1) / 100 )).yaml" <<EOF
---
apiVersion: batch/v1
kind: Job
metadata: {name: bare-$i, namespace: $ns}
spec:
  backoffLimit: 0
  template:
    metadata: {annotations: {trainyard.dev/run-seconds: "86400"}}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: trainyard/fake-trainer
        resources: {limits: {nvidia.com/gpu: 1, cpu: 100m, memory: 64Mi}}
EOF
  done
  made_by "$ns" "$dir" kubectl create -o name -f
  bare_client=$phase_client bare_rate=$phase_rate bare_made=$phase_made
  [[ "${2:-}" == last ]] || settle "$ns"
}
bare_phase bare
bare_before=$bare_rate
bare_made_before=$bare_made
bare_client_before=$bare_client

# ------------------------------------------------------------ 2. Trainyard
kubectl create namespace bench >/dev/null
serve_trainyard bench 39620 "$work"

body='{"name": "bench", "command": "python train.py", "resources": {"gpus": 1, "cpus": 0.1, "memory": "64Mi"}, "env": {"FAKE_RUN_SECONDS": "86400"}}'
printf '%s' "$body" >"$work/body.json"
# Eight clients, each one curl that sends its share of the jobs one after
# another on one kept-alive connection (as the bare path's kubectl sends a
# file of Jobs), so that the machine's two cores are not spent on a process
# per submission. curl prints each answer and its time on a line; a job's
# submission is the client's start plus the times of the answers before it.
per=$(( (jobs + 7) / 8 ))
for w in $(seq 0 7); do
  n=$(( jobs - w * per )); (( n > per )) && n=$per; (( n > 0 )) || continue
  for ((i = 0; i < n; i++)); do
    printf 'url = "%s/api/trainyard/v1/jobs"\nheader = "Content-Type: application/json"\ndata-binary = "@%s"\nwrite-out = " %%{http_code} %%{time_total}\\n"\n' \
      "$url" "$work/body.json"
    (( i + 1 < n )) && echo next
  done >"$work/submit-$w.curl"
done
idle
mark
cl0=$(children_ms) sv0=$(cpu_ms "$server")
ty_start=$(now_ms)
for w in $(seq 0 7); do
  [[ -f "$work/submit-$w.curl" ]] || continue
  { echo "start $(now_ms)"; curl -s --config "$work/submit-$w.curl"; } >"$work/answers-$w.txt" &
done
wait_submitters() { local p; for p in $(jobs -p); do [[ "$p" == "$server" ]] || wait "$p"; done; }
wait_submitters
ty_submitted=$(now_ms) sv_submitted=$(cpu_ms "$server")
# "ID SENT_MS" per job.
for w in $(seq 0 7); do
  [[ -f "$work/answers-$w.txt" ]] || continue
  awk '/^start / { t = $2; next }
       { code = $(NF - 1); took = $NF
         if (code != 201 && code != 200) { print "submission answered " code ": " $0 > "/dev/stderr"; exit 1 }
         if (!match($0, /"id":[0-9]+/)) { print "no job id in: " $0 > "/dev/stderr"; exit 1 }
         printf "%s %.0f\n", substr($0, RSTART + 5, RLENGTH - 5), t; t += took * 1000 }' "$work/answers-$w.txt"
done | sort -n >"$work/sent.txt"
(( $(wc -l <"$work/sent.txt") == jobs )) || die "not every submission was answered"
ty_curl=$(($(children_ms) - cl0))
wait_running bench "$jobs"
charge bench
ty_client=$(($(cpu_ms "$server") - sv0 + ty_curl))
ty_done=$(last_ready_ms bench)
ty_rate=$(awk -v n="$jobs" -v ms=$((ty_done - ty_start)) 'BEGIN { printf "%.0f", n / (ms / 1000) }')

# Per job: when its Job was made and when its pod became Ready (Running).
kubectl get jobs -n bench -o jsonpath='{range .items[*]}{.metadata.labels.trainyard\.dev/job} {.metadata.creationTimestamp}{"\n"}{end}' | sort -n >"$work/jobs.txt"
kubectl get pods -n bench -o jsonpath='{range .items[*]}{.metadata.labels.trainyard\.dev/job} {.status.conditions[?(@.type=="Ready")].lastTransitionTime}{"\n"}{end}' | sort -n >"$work/pods.txt"
latency() { # FILE: "ID TIME" → seconds after its submission, one per line
  paste -d' ' <(cut -d' ' -f1 "$1") <(cut -d' ' -f2 "$1" | epoch) |
    awk 'NR == FNR { sent[$1] = $2; next }
         $1 in sent { d = $2 - int(sent[$1] / 1000); if (d < 0) d = 0; print d }' "$work/sent.txt" -
}
latency "$work/jobs.txt" >"$work/created.txt"
# Jobs made a second: from the first submission to the last Job's creation
# (a time of Kubernetes, to the second: counted to the end of its second).
last_made=$(cut -d' ' -f2 "$work/jobs.txt" | epoch | sort -n | tail -1)
ty_made=$(awk -v n="$jobs" -v ms=$(( (last_made + 1) * 1000 - ty_start )) 'BEGIN { printf "%.0f", n / (ms / 1000) }')
latency "$work/pods.txt" >"$work/running.txt"
for f in created running; do
  (( $(wc -l <"$work/$f.txt") == jobs )) || die "$f: times of $(wc -l <"$work/$f.txt") of $jobs jobs"
done
read -r created_p50 created_p99 < <(percentiles <"$work/created.txt")
read -r running_p50 running_p99 < <(percentiles <"$work/running.txt")

# ------------------------------------------------------------ 3. the check
most=$(kubectl get pods -n bench -o jsonpath='{range .items[*]}{.spec.nodeName} {.spec.containers[0].resources.limits.nvidia\.com/gpu}{"\n"}{end}' |
  awk '{ g[$1] += $2 } END { m = 0; for (n in g) if (g[n] > m) m = g[n]; print m }')
(( most <= 8 )) || die "a node holds $most GPUs of Trainyard's pods"

# ------------------------------------------------------------ 4. Trainyard's objects, straight
# What the Job the issue asks for costs apart from Trainyard: the same
# objects as Trainyard's phase made (its Job, on the node it placed each on,
# then the Job's Secret, owned by it), made with kubectl 8 at a time. What
# separates this phase from the bare Jobs is the objects' shape; what
# separates Trainyard's phase from this one is Trainyard (its submissions,
# its watches, the logs it follows).
first_job=$(kubectl get jobs -n bench -o jsonpath='{.items[0].metadata.name}')
kubectl get job -n bench "$first_job" -o json >"$work/ty-job.json"
kubectl get secret -n bench "$first_job" -o json >"$work/ty-secret.json"
kubectl get pods -n bench -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' >"$work/placed.txt"
(( $(grep -c . "$work/placed.txt") == jobs )) || die "Trainyard's pods: $(grep -c . "$work/placed.txt") placed of $jobs"

kill "$server" 2>/dev/null || true
wait "$server" 2>/dev/null || true
server=""
settle bench

# shaped_chunk FILE: its Jobs, then a Secret for each, owned by it.
shaped_chunk() {
  kubectl create -f "$1" -o jsonpath='{.metadata.namespace} {.metadata.name} {.metadata.uid}{"\n"}' |
    jq -R -s -c --slurpfile t "$work/ty-secret.json" '
      split("\n") | map(select(length > 0) | split(" ") as [$ns, $name, $uid]
        | $t[0] | {apiVersion, kind, type, immutable, data}
        + {metadata: {namespace: $ns, name: $name, labels: $t[0].metadata.labels,
            ownerReferences: [$t[0].metadata.ownerReferences[0] + {name: $name, uid: $uid}]}})
      | {apiVersion: "v1", kind: "List", items: .}' |
    kubectl create -f - -o name >/dev/null
}
export -f shaped_chunk
export work
shaped_phase() {
  local ns=shaped dir="$work/shaped"
  kubectl create namespace "$ns" >/dev/null
  mkdir "$dir"
  # The Job as the API gave it back, less what the API fills in.
  jq -c --rawfile placed "$work/placed.txt" --argjson n "$jobs" --arg ns "$ns" '
    ($placed | split("\n") | map(select(length > 0))) as $nodes
    | del(.status, .metadata.uid, .metadata.resourceVersion, .metadata.creationTimestamp,
          .metadata.generation, .metadata.managedFields, .spec.selector)
    | (.metadata.labels, .spec.template.metadata.labels) |= with_entries(select(.key | test("controller-uid|job-name") | not))
    | . as $job
    | range(0; $n) as $i | "shaped-\($i)" as $name
    | $job
    | .metadata.name = $name | .metadata.namespace = $ns
    | .spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values = [$nodes[$i]]
    | .spec.template.spec.containers |= map(.env |= map(if .valueFrom.secretKeyRef then .valueFrom.secretKeyRef.name = $name else . end))' \
    "$work/ty-job.json" | split -l 100 - "$dir/part-"
  for f in "$dir"/part-*; do jq -s '{apiVersion: "v1", kind: "List", items: .}' "$f" >"$f.json" && rm "$f"; done
  made_by "$ns" "$dir" bash -c 'shaped_chunk "$0"'
  shaped_client=$phase_client shaped_rate=$phase_rate shaped_made=$phase_made
  (( $(kubectl get secrets -n "$ns" -o name | grep -c '^secret/shaped-') == jobs )) || die "shaped: not every Secret was made"
  settle "$ns"
}
shaped_phase

# ------------------------------------------------------------ 5. bare Jobs again
# The same reference after the phases above (Trainyard's server stopped, its
# Jobs gone), on a cluster that has seen as much as Trainyard's phase saw:
# one run of either moves by a third on this shared machine, so both are
# shown.
bare_phase bare-after last
bare_after=$bare_rate
ratio=$(awk -v t="$ty_rate" -v a="$bare_before" -v b="$bare_after" 'BEGIN { printf "%.2f", t / ((a + b) / 2) }')
shaped_ratio=$(awk -v t="$ty_rate" -v s="$shaped_rate" 'BEGIN { printf "%.2f", t / s }')

echo
row() { printf '%-58s %12s %12s %16s\n' "$@"; }
row "$nodes nodes x 8 GPUs, $jobs one-GPU jobs" "Trainyard" "its objects" "bare Jobs"
row "" "" "by kubectl" "before / after"
row "jobs (pods) Running per second, first create to last pod" "$ty_rate" "$shaped_rate" "$bare_before / $bare_after"
row "Trainyard / bare (the mean of before and after)" "$ratio"
row "Trainyard / its objects made by kubectl" "$shaped_ratio"
row "Jobs made per second, first create to last Job made" "$ty_made" "$shaped_made" "$bare_made_before / $bare_made"
row "submit -> Job created, p50 / p99 (s)" "$created_p50 / $created_p99"
row "submit -> pod Running, p50 / p99 (s)" "$running_p50 / $running_p99"
row "REST submissions answered (8 at a time), jobs/s" \
  "$(awk -v n="$jobs" -v ms=$((ty_submitted - ty_start)) 'BEGIN { printf "%.0f", n / (ms / 1000) }')"
for p in "${parts[@]}"; do
  row "CPU ms a job, above idle: $p" "$(per_job "${used[bench $p]}")" "$(per_job "${used[shaped $p]}")" \
    "$(per_job "${used[bare $p]}") / $(per_job "${used[bare-after $p]}")"
done
row "CPU ms a job: the client (Trainyard and curl / kubectl)" "$(per_job "$ty_client")" "$(per_job "$shaped_client")" \
  "$(per_job "$bare_client_before") / $(per_job "$bare_client")"
row "  of which Trainyard while the submissions came" "$(per_job $((sv_submitted - sv0)))"
row "the cluster idle ($nodes nodes' leases), CPU ms a second" "${used[bench idle]}" "${used[shaped idle]}" \
  "${used[bare idle]} / ${used[bare-after idle]}"
row "most GPUs of our pods on one node" "$most"
echo "target: >= 100 jobs/s and within 20 % of the bare path; no node over 8 GPUs"
