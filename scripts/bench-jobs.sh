#!/usr/bin/env bash
# make bench-jobs: submit-to-start latency of the local executor. Starts
# Trainyard (release, SQLite) on loopback, submits jobs one after another
# through the REST API and takes, for each, the time from sending the
# submission to the first instruction of the job's command (which writes the
# clock). The reference beside it is the floor: starting `/bin/sh -c` directly
# from this script, measured the same way in the same run. Python environment
# creation is not counted (the jobs have no requirements.txt).
# BENCH_JOBS (default 30) sets how many jobs are submitted.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/build.sh"

jobs="${BENCH_JOBS:-30}"
work="$(mktemp -d)"
# As root, jobs run as uids of their own (job_uids = auto): they need a way
# through this folder and a place they may write their start stamps to.
chmod 711 "$work"
mkdir -m 1777 "$work/stamps"
# As root each job also runs in a control group of its own (job_limits).
if [ "$(id -u)" = 0 ]; then
  job_uids=60000-60999 runs_as="each job as a uid of its own ($job_uids), in a control group of its own"
  job_limits=cgroup
else
  job_uids=none runs_as="jobs as this user, without control groups"
  job_limits=none
fi
port=39610
url="http://127.0.0.1:$port"
pid=""
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

step "starting Trainyard ($url, SQLite)"
TRAINYARD_LISTEN="127.0.0.1:$port" TRAINYARD_DATA_DIR="$work/data" TRAINYARD_LOG=warn TRAINYARD_JOB_UIDS="$job_uids" TRAINYARD_JOB_LIMITS="$job_limits" \
  TRAINYARD_TEMPLATES_DIR="$ROOT/templates" "$CARGO_TARGET_DIR/release/trainyard" serve >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do curl -sf "$url/readyz" >/dev/null && break; sleep 0.5; done
curl -sf "$url/readyz" >/dev/null || die "Trainyard did not start: $(tail -5 "$work/server.log")"

now_ns() { date +%s%N; }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

step "submitting $jobs jobs, one at a time"
: >"$work/trainyard.txt"
for i in $(seq 1 "$jobs"); do
  stamp="$work/stamps/started-$i"
  body="{\"name\": \"latency $i\", \"command\": \"date +%s%N > $stamp\", \"resources\": {\"memory\": \"64Mi\"}}"
  sent=$(now_ns)
  curl -sf -o /dev/null -X POST "$url/api/trainyard/v1/jobs" -H 'Content-Type: application/json' -d "$body" \
    || die "submission $i failed"
  for _ in $(seq 1 200); do [ -s "$stamp" ] && break; sleep 0.05; done
  [ -s "$stamp" ] || die "job $i did not start within 10 s: $(tail -5 "$work/server.log")"
  echo $(( ($(cat "$stamp") - sent) / 1000 )) >>"$work/trainyard.txt"
done

step "the floor: /bin/sh -c started directly, $jobs times"
: >"$work/floor.txt"
for i in $(seq 1 "$jobs"); do
  sent=$(now_ns)
  started=$(/bin/sh -c 'date +%s%N')
  echo $(( (started - sent) / 1000 )) >>"$work/floor.txt"
done

ms() { awk -v us="$1" 'BEGIN { printf "%.1f", us / 1000 }'; }
ty=$(median <"$work/trainyard.txt")
ty_max=$(sort -n "$work/trainyard.txt" | tail -1)
floor=$(median <"$work/floor.txt")
echo
printf '%-52s %12s %12s\n' "submit to process start ($jobs jobs)" "Trainyard" "sh -c alone"
printf '%-52s %12s %12s\n' "median, ms" "$(ms "$ty")" "$(ms "$floor")"
printf '%-52s %12s\n' "slowest, ms" "$(ms "$ty_max")"
echo "(the server runs $runs_as)"
echo "target: median <= 500 ms (not counting Python environment creation)"
