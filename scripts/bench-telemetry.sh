#!/usr/bin/env bash
# make bench-telemetry: GPU telemetry at cluster scale (server/benches/telemetry.rs).
# 1,000 nodes x 8 GPUs: a simulated day written and compacted, bytes per
# sample on disk, the 24-hour heatmap of every GPU and a node's week drawn
# over HTTP, then every node's agent pushing readings with its own token;
# each figure beside issue 18's target.
# BENCH_NODES, BENCH_GPUS, BENCH_HOURS (default 1000, 8, 24) size it;
# BENCH_SECONDS (60) and BENCH_CLIENTS (32) shape the ingest.
# BENCH_DATABASE=postgres runs it on a throwaway PostgreSQL cluster.
set -euo pipefail
source "$(dirname "$0")/common.sh"

work="$(mktemp -d)"
cleanup() {
  [ -d "$work/pg" ] && "$ROOT/scripts/postgres.sh" stop "$work/pg" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

if [ "${BENCH_DATABASE:-sqlite}" = postgres ]; then
  "$ROOT/scripts/bootstrap.sh" test
  chmod 755 "$work"
  pg_admin="$("$ROOT/scripts/postgres.sh" start "$work/pg" 39540)"
  psql "$pg_admin" -qc "CREATE DATABASE bench_telemetry"
  export BENCH_DATABASE_URL="${pg_admin%/*}/bench_telemetry"
fi
# No site build: the heatmap and charts come from the API, drawn by the server.
cd "$ROOT"
cargo bench --locked -p trainyard --bench telemetry
