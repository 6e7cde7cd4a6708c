#!/usr/bin/env bash
# The whole test suite, as CI runs it: fmt, clippy, the release build, unit and
# integration tests on SQLite and on a throwaway PostgreSQL, then the browser
# tests in headless Chromium against the release server.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"
"$ROOT/scripts/bootstrap.sh" test

log="$(mktemp)"
work="$(mktemp -d)"
chmod 755 "$work"
cleanup() {
  "$ROOT/scripts/postgres.sh" stop "$work/pg" || true
  rm -rf "$work" "$log"
}
trap cleanup EXIT

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings (server crates; frontend for wasm32)"
cargo clippy --locked --workspace --exclude trainyard-frontend --all-targets -- -D warnings
cargo clippy --locked -p trainyard-frontend --target wasm32-unknown-unknown -- -D warnings

step "release build"
cargo leptos build --release

step "unit and integration tests on SQLite"
cargo test --locked --release --workspace --exclude trainyard-frontend 2>&1 | tee -a "$log"

step "database tests on PostgreSQL"
port="${TEST_POSTGRES_PORT:-$(( 20000 + RANDOM % 20000 ))}"
TEST_DATABASE_URL="$("$ROOT/scripts/postgres.sh" start "$work/pg" "$port")"
echo "PostgreSQL at $TEST_DATABASE_URL"
TEST_DATABASE_URL="$TEST_DATABASE_URL" cargo test --locked --release --workspace --exclude trainyard-frontend 2>&1 | tee -a "$log"

step "the official mlflow client against the release server (SQLite, then PostgreSQL)"
mlflow_suite() {
  (cd "$ROOT/end2end/mlflow" && E2E_TRAINYARD_BIN="$CARGO_TARGET_DIR/release/trainyard" \
    "$MLFLOW_VENV/bin/python" -m pytest -q -p no:cacheprovider "$@")
}
mlflow_suite 2>&1 | tee -a "$log"
psql "$TEST_DATABASE_URL" -qc "CREATE DATABASE mlflow_client"
MLFLOW_TEST_DATABASE_URL="${TEST_DATABASE_URL%/*}/mlflow_client" mlflow_suite 2>&1 | tee -a "$log"

step "browser tests (Playwright, headless Chromium)"
(cd "$ROOT/end2end" && E2E_TRAINYARD_BIN="$CARGO_TARGET_DIR/release/trainyard" npx playwright test) 2>&1 | tee -a "$log"

cargo_passed=$(grep -oE 'test result: ok\. [0-9]+ passed' "$log" | awk '{ s += $4 } END { print s + 0 }')
browser_passed=$(grep -oE '^ +[0-9]+ passed' "$log" | awk '{ s += $1 } END { print s + 0 }')
mlflow_passed=$(grep -oE '^[0-9]+ passed' "$log" | awk '{ s += $1 } END { print s + 0 }')
echo
echo "cargo: $cargo_passed passed; mlflow client: $mlflow_passed passed; browser: $browser_passed passed"
echo "$((cargo_passed + mlflow_passed + browser_passed)) passed, 0 failed"
