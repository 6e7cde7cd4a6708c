#!/usr/bin/env bash
# make bench-tracking: Trainyard (release, SQLite) and an MLflow 3.17 tracking
# server (SQLite, 2 workers) side by side on loopback, the same workloads on
# both, driven by wrk (not the Python client), figures printed side by side.
#   (a) runs/log-batch ingest, 1,000 points per request, 4 connections
#   (b) metrics/get-history of a 1,000,000-point series
#   (c) a downsampled read of 100 runs x 100,000 points to 1,000 points each
#       (Trainyard's /api/trainyard/v1/series; MLflow's get-history-bulk-interval)
#   (d) runs/search with a filter and an order over 10,000 runs
#   (e) evaluation datasets (mlflow.genai.datasets): 10,000 records with
#       500-character contexts merged in one request as merge_records sends
#       them, the same merged again (every one an update), and read back
#       whole a page of 1,000 at a time as to_df reads them
#   (f) OTLP span ingest (/v1/traces): OTLP/JSON exports of one new trace of
#       10 spans each, as an OpenTelemetry SDK sends them, 4 connections
# Read workloads seed MLflow's database with SQL (its ingest is too slow to
# seed 10 million points); Trainyard is seeded through its API, and read once
# its background compaction has settled, as a finished run would be.
# BENCH_SECONDS (default 10) sets the ingest durations; BENCH_WORKLOADS
# (default "a b c d e f") picks workloads. MLflow's slowest reads are timed once.
# BENCH_DATABASE=postgres runs Trainyard on a throwaway PostgreSQL cluster
# instead of SQLite (MLflow stays on SQLite, its reference setup).
# BENCH_MLFLOW=0 measures Trainyard alone (a quick check while developing;
# the reference figures need MLflow).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/bootstrap.sh" bench
"$ROOT/scripts/build.sh"

seconds="${BENCH_SECONDS:-10}"
workloads=" ${BENCH_WORKLOADS:-a b c d e f} "
wants() { [[ "$workloads" == *" $1 "* ]]; }
with_mlflow() { [ "${BENCH_MLFLOW:-1}" != 0 ]; }
work="$(mktemp -d)"
ty_port=39510
ml_port=39520
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ty="http://127.0.0.1:$ty_port"
ml="http://127.0.0.1:$ml_port"
lua="$ROOT/scripts/bench/log-batch.lua"

engine="${BENCH_DATABASE:-sqlite}"
ty_db_url="sqlite://$work/ty/trainyard.db"
if [ "$engine" = postgres ]; then
  chmod 755 "$work"
  pg_admin="$("$ROOT/scripts/postgres.sh" start "$work/pg" 39530)"
  psql "$pg_admin" -qc "CREATE DATABASE bench"
  ty_db_url="${pg_admin%/*}/bench"
  trap '"$ROOT/scripts/postgres.sh" stop "$work/pg" || true; cleanup' EXIT
fi
ty_sql() { # runs SQL from stdin on Trainyard's database
  if [ "$engine" = postgres ]; then psql -q "$ty_db_url" >/dev/null; else sqlite3 "$work/ty/trainyard.db"; fi
}
ty_query() { # prints the result of SQL from stdin on Trainyard's database
  if [ "$engine" = postgres ]; then psql -qtA "$ty_db_url"; else sqlite3 "$work/ty/trainyard.db"; fi
}

step "starting Trainyard ($ty, $engine) and MLflow ($ml)"
mkdir -p "$work/ty"
TRAINYARD_LISTEN="127.0.0.1:$ty_port" TRAINYARD_DATA_DIR="$work/ty" TRAINYARD_LOG=warn \
  TRAINYARD_DATABASE_URL="$ty_db_url" "$CARGO_TARGET_DIR/release/trainyard" serve >"$work/ty.log" 2>&1 &
ty_pid=$!
pids+=("$ty_pid")
mkdir -p "$work/ml"
if with_mlflow; then
  MLFLOW_DISABLE_TELEMETRY=true "$MLFLOW_VENV/bin/mlflow" server \
    --backend-store-uri "sqlite:///$work/ml/mlflow.db" --artifacts-destination "$work/ml/artifacts" \
    --host 127.0.0.1 --port "$ml_port" --workers 2 >"$work/ml.log" 2>&1 &
  pids+=("$!")
fi
for _ in $(seq 1 120); do
  curl -sf "$ty/healthz" >/dev/null && { ! with_mlflow || curl -sf "$ml/health" >/dev/null; } && break
  sleep 1
done
curl -sf "$ty/healthz" >/dev/null || die "Trainyard did not start: $(tail -5 "$work/ty.log")"
! with_mlflow || curl -sf "$ml/health" >/dev/null || die "MLflow did not start: $(tail -5 "$work/ml.log")"
# MLflow answers its health check while its worker processes are still
# importing; let them finish, so they do not share the CPUs with the first
# measurement.
mlflow_ticks() { # CPU time used so far by MLflow's processes, in clock ticks
  local total=0 pid
  for pid in $(pgrep -f 'mlflow|huey' || true); do
    [ -r "/proc/$pid/stat" ] || continue
    total=$(( total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0) ))
  done
  echo "$total"
}
if with_mlflow; then
  for _ in $(seq 1 60); do
    before=$(mlflow_ticks); sleep 1; after=$(mlflow_ticks)
    [ $(( after - before )) -lt 5 ] && break
  done
fi

new_run() { # base-url experiment-id -> run id
  curl -sf -X POST "$1/api/2.0/mlflow/runs/create" -H 'Content-Type: application/json' \
    -d "{\"experiment_id\": \"$2\", \"start_time\": 1700000000000}" | grep -oE '"run_id": ?"[0-9a-f]{32}"' | grep -oE '[0-9a-f]{32}'
}
new_experiment() { # base-url name -> experiment id
  curl -sf -X POST "$1/api/2.0/mlflow/experiments/create" -H 'Content-Type: application/json' \
    -d "{\"name\": \"$2\"}" | grep -oE '"experiment_id": ?"[0-9]+"' | grep -oE '[0-9]+"$' | tr -d '"'
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
time_get() { # url -> median seconds of 3 (one try when it takes over 10 s)
  local first
  first=$(curl -sf -o /dev/null --max-time 900 -w '%{time_total}\n' "$1")
  if awk -v t="$first" 'BEGIN { exit !(t > 10) }'; then echo "$first"; return; fi
  { echo "$first"; for _ in 1 2; do curl -sf -o /dev/null -w '%{time_total}\n' "$1"; done; } | median
}
time_pages() { # url with max_results -> seconds to read every page, as the Python client does
  local total=0 token="" t
  while :; do
    t=$(curl -sf -o "$work/page.json" -w '%{time_total}' "$1${token:+&page_token=$token}") || die "paging $1 failed"
    total=$(awk -v a="$total" -v b="$t" 'BEGIN { print a + b }')
    token=$(tail -c 300 "$work/page.json" | grep -oE '"next_page_token": ?"[^"]+"' | sed -E 's/.*"([^"]+)"$/\1/' | sed 's/=/%3D/g; s/+/%2B/g; s#/#%2F#g') || true
    [ -n "$token" ] || break
  done
  echo "$total"
}
settle() { # waits until background compaction has merged the chunks just written
  local before after
  after=$(echo "SELECT COUNT(*) FROM metric_chunks;" | ty_query)
  while :; do
    before=$after
    sleep 3
    after=$(echo "SELECT COUNT(*) FROM metric_chunks;" | ty_query)
    [ "$before" != "$after" ] || break
  done
  echo "compaction settled at $after chunks" >&2
}
time_post() { # url body -> median seconds of 5
  for _ in 1 2 3 4 5; do
    curl -sf -o /dev/null -w '%{time_total}\n' -X POST "$1" -H 'Content-Type: application/json' -d "$2"
  done | median
}
wrk_points() { # url run-ids -> points per second
  local out
  out="$(RUN_IDS="$2" KEYS=10 wrk -t2 -c4 -d"${seconds}s" --timeout 30s -s "$lua" "$1")"
  echo "$out" | grep '^WRK' >&2
  echo "$out" | awk '/^WRK/ { split($2, r, "="); split($3, f, "="); split($4, s, "="); printf "%.0f\n", (r[2] - f[2]) * 1000 / s[2] }'
}
seed_points() { # url run-ids batches-per-thread keys
  local batches duration
  batches="$3"
  # Long enough for both threads at the ingest rate measured (or a guess).
  duration=$(( batches * 2 * 1000 / ${ty_ingest_guess:-150000} + 5 ))
  RUN_IDS="$2" KEYS="$4" LIMIT="$batches" wrk -t2 -c4 -d"${duration}s" --timeout 60s -s "$lua" "$1" | grep '^WRK' >&2
}

ty_ds_insert=0 ty_ds_merge=0 ty_ds_read=0 ml_ds_insert=0 ml_ds_merge=0 ml_ds_read=0
ty_ingest=0 ml_ingest=0 ty_hist=0 ty_hist_paged=0 ml_hist=0 ty_hist_n=0 ty_down=0 ml_down=0 ty_search=0 ml_search=0 ty_rss_kb=0 ty_anon_kb=0 ty_file_kb=0
if wants a; then
step "(a) ingest: runs/log-batch, 1,000 points per request, 4 connections, ${seconds}s"
ty_ingest=$(wrk_points "$ty" "$(new_run "$ty" 0)")
ty_ingest_guess=$ty_ingest
ty_rss_kb=$(awk '/VmHWM/ { print $2 }' "/proc/$ty_pid/status")
ty_anon_kb=$(awk '/RssAnon/ { print $2 }' "/proc/$ty_pid/status")
ty_file_kb=$(awk '/RssFile/ { print $2 }' "/proc/$ty_pid/status")
with_mlflow && ml_ingest=$(wrk_points "$ml" "$(new_run "$ml" 0)")
fi

if wants b; then
step "(b) get-history of a 1,000,000-point series"
ty_hist_run=$(new_run "$ty" 0)
# wrk may build one request per thread that it never sends: ask for one more.
seed_points "$ty" "$ty_hist_run" 501 1
settle
ty_hist_n=$(curl -sf "$ty/api/2.0/mlflow/metrics/get-history?run_id=$ty_hist_run&metric_key=loss" | grep -o '"step"' | wc -l)
ty_hist=$(time_get "$ty/api/2.0/mlflow/metrics/get-history?run_id=$ty_hist_run&metric_key=loss")
ty_hist_paged=$(time_pages "$ty/api/2.0/mlflow/metrics/get-history?run_id=$ty_hist_run&metric_key=loss&max_results=25000")
if with_mlflow; then
ml_hist_run=$(new_run "$ml" 0)
sqlite3 "$work/ml/mlflow.db" >/dev/null <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 999999)
INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)
  SELECT 'loss', (x % 997) / 997.0, 1700000000000 + x, '$ml_hist_run', x, 0 FROM c;
INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid)
  VALUES ('loss', 0.5, 1700000999999, 999999, 0, '$ml_hist_run');
COMMIT;
SQL
ml_hist=$(time_get "$ml/api/2.0/mlflow/metrics/get-history?run_id=$ml_hist_run&metric_key=loss")
fi
fi

if wants c; then
step "(c) downsampled read: 100 runs x 100,000 points -> 1,000 points each"
ty_runs=()
ml_runs=()
for _ in $(seq 1 100); do ty_runs+=("$(new_run "$ty" 0)"); done
seed_points "$ty" "$(IFS=,; echo "${ty_runs[*]}")" 5001 1
settle
ids_json=$(printf '"%s",' "${ty_runs[@]}")
ty_down=$(time_post "$ty/api/trainyard/v1/series" "{\"run_ids\": [${ids_json%,}], \"keys\": [\"loss\"], \"points\": 1000}")
if with_mlflow; then
for _ in $(seq 1 100); do ml_runs+=("$(new_run "$ml" 0)"); done
{
  echo "PRAGMA journal_mode=WAL; BEGIN;"
  for run in "${ml_runs[@]}"; do
    echo "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 99999)
      INSERT INTO metrics (key, value, timestamp, run_uuid, step, is_nan)
      SELECT 'loss', (x % 997) / 997.0, 1700000000000 + x, '$run', x, 0 FROM c;"
  done
  echo "COMMIT;"
} | sqlite3 "$work/ml/mlflow.db" >/dev/null
ml_query=$(printf 'run_ids=%s&' "${ml_runs[@]}")
ml_down=$(time_get "$ml/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval?${ml_query}metric_key=loss&max_results=1000")
fi
fi

if wants d; then
step "(d) runs/search over 10,000 runs with a filter and an order"
ty_exp=$(new_experiment "$ty" search)
if [ "$engine" = postgres ]; then hex="lpad(to_hex(x), 32, '0')"; else hex="printf('%032x', x)"; fi
ty_sql <<SQL
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 9999)
INSERT INTO runs (id, experiment_id, name, status, start_time, lifecycle_stage, artifact_uri, user_name)
  SELECT $hex, $ty_exp, 'run-' || x, 'FINISHED', 1700000000000 + x, 'active', '', 'bench' FROM c;
INSERT INTO params (run_id, key, value) SELECT id, 'lr', CASE WHEN CAST(substr(name, 5) AS INTEGER) % 3 = 0 THEN '0.01' ELSE '0.1' END FROM runs WHERE experiment_id = $ty_exp;
INSERT INTO tags (run_id, key, value) SELECT id, 'mlflow.runName', name FROM runs WHERE experiment_id = $ty_exp;
INSERT INTO latest_metrics (run_id, key, value, timestamp, step) SELECT id, 'acc', (CAST(substr(name, 5) AS INTEGER) % 1000) / 1000.0, 0, 0 FROM runs WHERE experiment_id = $ty_exp;
COMMIT;
-- Fresh statistics, as autovacuum would gather them after a bulk load.
ANALYZE;
SQL
search='"filter": "metrics.acc > 0.5 and params.lr = '"'"'0.01'"'"'", "order_by": ["metrics.acc DESC"], "max_results": 100'
ty_search=$(time_post "$ty/api/2.0/mlflow/runs/search" "{\"experiment_ids\": [\"$ty_exp\"], $search}")
if with_mlflow; then
ml_exp=$(new_experiment "$ml" search)
sqlite3 "$work/ml/mlflow.db" >/dev/null <<SQL
BEGIN;
WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 9999)
INSERT INTO runs (run_uuid, name, source_type, source_name, entry_point_name, user_id, status, start_time, end_time, source_version, lifecycle_stage, artifact_uri, experiment_id)
  SELECT printf('%032x', x), 'run-' || x, 'LOCAL', '', '', 'bench', 'FINISHED', 1700000000000 + x, NULL, '', 'active', '', $ml_exp FROM c;
INSERT INTO params (key, value, run_uuid) SELECT 'lr', CASE WHEN CAST(substr(name, 5) AS INTEGER) % 3 = 0 THEN '0.01' ELSE '0.1' END, run_uuid FROM runs WHERE experiment_id = $ml_exp;
INSERT INTO tags (key, value, run_uuid) SELECT 'mlflow.runName', name, run_uuid FROM runs WHERE experiment_id = $ml_exp;
INSERT INTO latest_metrics (key, value, timestamp, step, is_nan, run_uuid) SELECT 'acc', (CAST(substr(name, 5) AS INTEGER) % 1000) / 1000.0, 0, 0, 0, run_uuid FROM runs WHERE experiment_id = $ml_exp;
COMMIT;
SQL
ml_search=$(time_post "$ml/api/2.0/mlflow/runs/search" "{\"experiment_ids\": [\"$ml_exp\"], $search}")
fi
fi

if wants e; then
step "(e) evaluation datasets: merge 10,000 records, merge them again, read them all"
jq -n '{records: ([range(10000) | {inputs: {question: "q\(.)", context: ("c" * 500)}, expectations: {answer: "a\(.)"}}] | tojson)}' >"$work/records.json"
dataset_bench() { # base-url -> seconds to insert, to merge again, to read every page
  local id insert merge total=0 token="" t
  id=$(curl -sf -X POST "$1/api/3.0/mlflow/datasets/create" -H 'Content-Type: application/json' \
    -d '{"name": "bench"}' | jq -r .dataset.dataset_id)
  post() {
    curl -sf -o "$work/upsert.json" -w '%{time_total}' -X POST "$1/api/3.0/mlflow/datasets/$id/records" \
      -H 'Content-Type: application/json' --data-binary @"$work/records.json" || die "merging records into $1 failed"
  }
  insert=$(post "$1")
  [ "$(jq .inserted_count "$work/upsert.json")" = 10000 ] || die "$1 inserted $(cat "$work/upsert.json")"
  merge=$(post "$1")
  [ "$(jq .updated_count "$work/upsert.json")" = 10000 ] || die "$1 updated $(cat "$work/upsert.json")"
  local got=0
  while :; do
    t=$(curl -sf -o "$work/page.json" -w '%{time_total}' \
      "$1/api/3.0/mlflow/datasets/$id/records?max_results=1000${token:+&page_token=$token}") || die "reading records of $1 failed"
    total=$(awk -v a="$total" -v b="$t" 'BEGIN { print a + b }')
    got=$(( got + $(jq -r '.records | fromjson | length' "$work/page.json") ))
    token=$(jq -r '.next_page_token // empty | @uri' "$work/page.json")
    [ -n "$token" ] || break
  done
  [ "$got" = 10000 ] || die "$1 gave back $got records of 10000"
  echo "$insert $merge $total"
}
# Into a variable first: a failure inside stops the script (set -e), where
# `read <<<"$(…)"` would pass over it.
ds_out=$(dataset_bench "$ty")
read -r ty_ds_insert ty_ds_merge ty_ds_read <<<"$ds_out"
if with_mlflow; then
  ds_out=$(dataset_bench "$ml")
  read -r ml_ds_insert ml_ds_merge ml_ds_read <<<"$ds_out"
fi
fi

ty_otlp=0 ml_otlp=0
if wants f; then
step "(f) OTLP span ingest: /v1/traces, one trace of 10 spans per request, 4 connections, ${seconds}s"
wrk_spans() { # url experiment -> spans per second
  local out
  out="$(SPANS=10 EXPERIMENT="$2" wrk -t2 -c4 -d"${seconds}s" --timeout 30s -s "$ROOT/scripts/bench/otlp.lua" "$1")"
  echo "$out" | grep '^WRK' >&2
  echo "$out" | awk '/^WRK/ { split($2, r, "="); split($3, f, "="); split($4, s, "="); printf "%.0f\n", (r[2] - f[2]) * 10 / s[2] }'
}
ty_otlp_exp=$(new_experiment "$ty" otlp)
ty_otlp=$(wrk_spans "$ty" "$ty_otlp_exp")
# What was sent is kept and searched: traces found by a span's name and type.
found=$(curl -sf -X POST "$ty/api/3.0/mlflow/traces/search" -H 'Content-Type: application/json' \
  -d "{\"locations\": [{\"type\": \"MLFLOW_EXPERIMENT\", \"mlflow_experiment\": {\"experiment_id\": \"$ty_otlp_exp\"}}], \"filter\": \"span.name = 'step_7' AND span.type = 'TOOL'\", \"max_results\": 1}" \
  | jq '.traces | length')
[ "$found" = 1 ] || die "Trainyard's OTLP traces are not found by their spans"
with_mlflow && ml_otlp=$(wrk_spans "$ml" "$(new_experiment "$ml" otlp)")
fi

ratio() { awk -v a="$1" -v b="$2" -v hi="$3" 'BEGIN { if (a <= 0 || b <= 0) { print "-"; exit } r = hi ? a / b : b / a; printf "%.1fx\n", r }'; }
ms() { awk -v s="$1" 'BEGIN { if (s <= 0) print "skipped"; else printf "%.1f", s * 1000 }'; }
echo
printf '%-58s %14s %14s %8s\n' "workload (Trainyard on $engine, MLflow on SQLite)" "Trainyard" "MLflow 3.17" "ratio"
printf '%-58s %14s %14s %8s\n' "(a) log-batch ingest, points/s" "$ty_ingest" "$ml_ingest" "$(ratio "$ty_ingest" "$ml_ingest" 1)"
printf '%-58s %14s %14s %8s\n' "(b) get-history, 1,000,000 points, ms (Trainyard: $ty_hist_n)" "$(ms "$ty_hist")" "$(ms "$ml_hist")" "$(ratio "$ty_hist" "$ml_hist" 0)"
printf '%-58s %14s %14s %8s\n' "(b) the same, in pages of 25,000 like the Python client, ms" "$(ms "$ty_hist_paged")" "-" "-"
printf '%-58s %14s %14s %8s\n' "(c) 100 runs x 100,000 points -> 1,000 each, ms" "$(ms "$ty_down")" "$(ms "$ml_down")" "$(ratio "$ty_down" "$ml_down" 0)"
printf '%-58s %14s %14s %8s\n' "(d) search 10,000 runs, filter + order, 100 results, ms" "$(ms "$ty_search")" "$(ms "$ml_search")" "$(ratio "$ty_search" "$ml_search" 0)"
printf '%-58s %14s %14s %8s\n' "(e) dataset: merge 10,000 new records, ms" "$(ms "$ty_ds_insert")" "$(ms "$ml_ds_insert")" "$(ratio "$ty_ds_insert" "$ml_ds_insert" 0)"
printf '%-58s %14s %14s %8s\n' "(e) the same again (10,000 updates), ms" "$(ms "$ty_ds_merge")" "$(ms "$ml_ds_merge")" "$(ratio "$ty_ds_merge" "$ml_ds_merge" 0)"
printf '%-58s %14s %14s %8s\n' "(e) read all 10,000, pages of 1,000, ms" "$(ms "$ty_ds_read")" "$(ms "$ml_ds_read")" "$(ratio "$ty_ds_read" "$ml_ds_read" 0)"
printf '%-58s %14s %14s %8s\n' "(f) OTLP span ingest, spans/s (10-span traces)" "$ty_otlp" "$ml_otlp" "$(ratio "$ty_otlp" "$ml_otlp" 1)"
printf '%-58s %14s\n' "Trainyard peak memory (VmHWM) after ingest, MB" "$((ty_rss_kb / 1024))"
printf '%-58s %14s\n' "  then: private (RssAnon), MB" "$((ty_anon_kb / 1024))"
printf '%-58s %14s\n' "  then: file-backed (binary, SQLite map; RssFile), MB" "$((ty_file_kb / 1024))"
echo "targets: ingest >= 50x MLflow and >= 250,000 points/s; (b) <= 1000 ms; (c) <= 100 ms; (d) <= 50 ms; memory <= 200 MB"
