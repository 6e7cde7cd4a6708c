#!/usr/bin/env bash
# make bench-explorer: the experiment explorer's speed in Chromium (see
# end2end/bench/explorer.bench.ts) and the size of what the browser loads.
# BENCH_RUNS, BENCH_HEAVY_RUNS, BENCH_POINTS and BENCH_REPEAT scale it down.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/bootstrap.sh" test
"$ROOT/scripts/build.sh"

step "what the browser loads (gzip -9)"
pkg="$ROOT/target/site/pkg"
wasm=$(gzip -9c "$pkg/trainyard.wasm" | wc -c)
js=$(gzip -9c "$pkg/trainyard.js" | wc -c)
css=$(gzip -9c "$pkg/trainyard.css" | wc -c)
printf '| file | gzipped |\n|---|---|\n'
printf '| trainyard.wasm | %d KB |\n| trainyard.js | %d KB |\n| trainyard.css | %d KB |\n' \
  $((wasm / 1024)) $((js / 1024)) $((css / 1024))
printf '| wasm + js | %d KB (target ≤ 1024 KB) |\n' $(((wasm + js) / 1024))

step "timings in Chromium"
# The server's data (about 1 GB at full scale) goes when the benchmark ends.
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
cd "$ROOT/end2end"
BENCH_DATA_DIR="$data" E2E_TRAINYARD_BIN="$CARGO_TARGET_DIR/release/trainyard" \
  npx playwright test -c playwright.bench.config.ts
