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
gz() { { gzip -9c "$1" 2>/dev/null || true; } | wc -c; }
wasm=$(gz "$pkg/trainyard.wasm")
js=$(gz "$pkg/trainyard.js")
split_js=0
for f in "$pkg"/__wasm_split*.js; do [ -f "$f" ] && split_js=$((split_js + $(gz "$f"))); done
css=$(gz "$pkg/trainyard.css")
printf '| file | gzipped |\n|---|---|\n'
printf '| trainyard.wasm | %d KB |\n| trainyard.js + the splitter'"'"'s loader | %d KB |\n| trainyard.css | %d KB |\n' \
  $((wasm / 1024)) $(((js + split_js) / 1024)) $((css / 1024))
printf '| **first visit: wasm + js** | **%d KB** (target ≤ 1024 KB) |\n' $(((wasm + js + split_js) / 1024))
# The pages loaded on demand (app/src/lazy.rs): each one's own chunk, and
# the chunks it shares with others, as the manifest lists them.
if [ -f "$pkg/__wasm_split_manifest.json" ]; then
  page="" total=0
  while IFS= read -r line; do
    case "$line" in
      *'": []'*) ;;
      *'": ['*) page=$(sed 's/^ *"__\(.*\)_route_view_[0-9]*": \[$/\1/' <<<"$line") total=0 ;;
      *'"'*) total=$((total + $(gz "$pkg/$(tr -d ' ",' <<<"$line").wasm"))) ;;
      *']'*) printf '| page %s, loaded when entered | %d KB |\n' "$page" $((total / 1024)) ;;
    esac
  done <"$pkg/__wasm_split_manifest.json"
fi

step "timings in Chromium"
# The server's data (about 1 GB at full scale) goes when the benchmark ends.
data="$(mktemp -d)"
trap 'rm -rf "$data"' EXIT
cd "$ROOT/end2end"
BENCH_DATA_DIR="$data" E2E_TRAINYARD_BIN="$CARGO_TARGET_DIR/release/trainyard" \
  npx playwright test -c playwright.bench.config.ts
