#!/usr/bin/env bash
# Builds the release: the server binary and the browser bundle (target/site).
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/bootstrap.sh" run
step "building the release (cargo leptos build --release)"
cd "$ROOT"
cargo leptos build --release
