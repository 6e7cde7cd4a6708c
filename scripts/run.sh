#!/usr/bin/env bash
# One command from a fresh clone to a running Trainyard on http://127.0.0.1:3000
# with the embedded SQLite database in ./data. Settings: see the README.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/build.sh"
cd "$ROOT"
step "starting Trainyard (Ctrl-C stops it)"
exec "$CARGO_TARGET_DIR/release/trainyard" serve "$@"
