#!/usr/bin/env bash
# The whole test suite, as CI runs it: fmt, clippy, the release build, unit and
# integration tests on SQLite and on a throwaway PostgreSQL, the browser tests
# in headless Chromium against the release server, the smoke test of the
# Kubernetes control plane built for tests (end2end/k8s) and the Kubernetes
# executor's tests on it.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$ROOT"

log="$(mktemp)"
work="$(mktemp -d)"
chmod 755 "$work"
k8s_build=""
tools=""
cleanup() {
  # The builds' whole process groups: `go build` and its compilers too.
  [ -z "$k8s_build" ] || kill -- "-$k8s_build" 2>/dev/null || true
  [ -z "$tools" ] || kill -- "-$tools" 2>/dev/null || true
  "$ROOT/scripts/postgres.sh" stop "$work/pg" || true
  rm -rf "$work" "$log"
}
trap cleanup EXIT

# The release build's Rust tools (cargo-leptos, wasm-bindgen) are compiled
# once per machine, about 11 minutes on 2 cores; they compile in the
# background beside the rest of the installs, fmt and clippy (each of which
# leaves a core idle much of the time), and the release build waits for them.
setsid "$ROOT/scripts/bootstrap.sh" tools >"$work/tools.log" 2>&1 &
tools=$!
BOOTSTRAP_TOOLS=0 "$ROOT/scripts/bootstrap.sh" test

# The test cluster's binaries (etcd, the Kubernetes control plane, kwok, …)
# are built from Go modules the first time on a machine (about 12 minutes),
# then cached in ~/.cache/trainyard/k8s. The build runs in the background at
# the lowest priority, using the cores whenever the Rust work leaves them idle;
# the smoke test at the end waits for it.
# In a process group of its own, so that stopping it stops `go build` too.
setsid "$ROOT/end2end/k8s/build.sh" >"$work/k8s-build.log" 2>&1 &
k8s_build=$!

step "cargo fmt --check"
cargo fmt --all --check

step "cargo clippy -D warnings (server crates; frontend for wasm32)"
cargo clippy --locked --workspace --exclude trainyard-frontend --all-targets -- -D warnings
cargo clippy --locked -p trainyard-frontend --target wasm32-unknown-unknown -- -D warnings

step "release build"
if ! wait "$tools"; then
  tools=""
  cat "$work/tools.log"
  die "installing cargo-leptos or wasm-bindgen failed (log above)"
fi
tools=""
cat "$work/tools.log"
BUILD_ALWAYS=1 "$ROOT/scripts/build.sh"
# What later steps run (end2end/k8s/executor.sh builds it when run alone).
export E2E_RELEASE_BUILT=1

# As root (CI), the job limits' tests fail where they cannot make control
# groups, instead of skipping.
[ "$(id -u)" -ne 0 ] || export TEST_CGROUPS_REQUIRED=1

step "the test programs"
# Built apart, to check that they reuse the release build's libraries: a
# feature that differs between the two builds (one only tests turn on)
# would build the app and the server again, minutes on 2 cores.
cargo test --locked --release --workspace --exclude trainyard-frontend --no-run \
  --message-format=json-render-diagnostics >"$work/test-build.json"
rebuilt="$(grep '"reason":"compiler-artifact"' "$work/test-build.json" | grep '"fresh":false' \
  | grep -E '"profile":\{[^}]*"test":false\}' | grep -E '"kind":\["(lib|bin)"\]' | grep -v '#trainyard-test-db@' \
  | sed -n 's/.*"package_id":"[^"#]*#\(trainyard[^"]*\)".*/\1/p' | sort -u || true)"
[ -z "$rebuilt" ] || die "cargo test built again what the release build had just built: $(echo $rebuilt).
A feature (theirs or a dependency's) differs between the two builds; compare
  cargo tree -p trainyard -e normal,build -f '{p} {f}'
  cargo tree --workspace --exclude trainyard-frontend -e normal,build,dev -f '{p} {f}'"
# The test programs, for the cgroup v2 machine below.
grep -E '"profile":\{[^}]*"test":true\}' "$work/test-build.json" | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' >"$work/programs.txt"
echo "$(wc -l <"$work/programs.txt") programs, the release build's libraries reused"

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

step "Kubernetes test cluster: smoke test (end2end/k8s/smoke.sh)"
if ! wait "$k8s_build"; then
  k8s_build=""
  cat "$work/k8s-build.log"
  die "building the test cluster's binaries failed (log above)"
fi
k8s_build=""
"$ROOT/end2end/k8s/smoke.sh" 2>&1 | tee -a "$log"

step "the Kubernetes executor on the test cluster (end2end/k8s/executor.sh)"
"$ROOT/end2end/k8s/executor.sh" 2>&1 | tee "$work/k8s-executor.log"

step "job limits on cgroup v2, in a virtual machine (end2end/cgroup-v2)"
if [ "$(id -u)" -eq 0 ]; then
  # This machine mounts cgroup v1; current distributions mount v2 alone.
  # The test programs built above.
  tests="$(cat "$work/programs.txt")"
  jobs_unit="$(grep '/trainyard_jobs-[0-9a-f]*$' <<<"$tests" || true)"
  jobs_api="$(grep '/deps/it-[0-9a-f]*$' <<<"$tests" || true)"
  [ -n "$jobs_unit" ] && [ -n "$jobs_api" ] || die "the jobs tests' programs were not found in: $tests"
  # Counted apart: these tests ran on the host already, here they run on v2.
  "$ROOT/end2end/cgroup-v2/run.sh" \
    "$jobs_unit" --color never --test-threads 1 cgroups \
    shim::tests::a_job_past_its_memory shim::tests::a_job_runs_inside shim::tests::a_v2 \
    shim::tests::an_environment_is_built_at shim::tests::a_build_past_its_jobs -- \
    "$jobs_api" --color never jobs::each_job_is_held_to 2>&1 | tee "$work/cgroup-v2.log"
else
  echo "skipped: the job limits need root (as does the server to make control groups)"
fi

step "the GPU check (scripts/gpu-check.sh; simulated GPUs where there is no driver)"
"$ROOT/scripts/gpu-check.sh" "$CARGO_TARGET_DIR/release/trainyard" 2>&1 | tee -a "$log"

cargo_passed=$(grep -oE 'test result: ok\. [0-9]+ passed' "$log" | awk '{ s += $4 } END { print s + 0 }')
browser_passed=$(grep -oE '^ +[0-9]+ passed' "$log" | awk '{ s += $1 } END { print s + 0 }')
mlflow_passed=$(grep -oE '^[0-9]+ passed' "$log" | awk '{ s += $1 } END { print s + 0 }')
echo
k8s_passed=$(grep -oE '^smoke: [0-9]+ passed' "$log" | awk '{ s += $2 } END { print s + 0 }')
# Its cargo tests, and its browser test ("  1 passed (9.6s)").
executor_passed=$({ grep -oE 'test result: ok\. [0-9]+ passed|^ +[0-9]+ passed' "$work/k8s-executor.log" 2>/dev/null || true; } |
  awk '{ s += ($1 == "test" ? $4 : $1) } END { print s + 0 }')
v2_passed=$({ grep -oE 'test result: ok\. [0-9]+ passed' "$work/cgroup-v2.log" 2>/dev/null || true; } | awk '{ s += $4 } END { print s + 0 }')
gpu_passed=$(grep -oE '^gpu-check: [0-9]+ passed' "$log" | awk '{ s += $2 } END { print s + 0 }')
echo "cargo: $cargo_passed passed; mlflow client: $mlflow_passed passed; browser: $browser_passed passed; Kubernetes smoke: $k8s_passed passed; Kubernetes executor: $executor_passed passed; job limits on cgroup v2: $v2_passed passed; GPU check: $gpu_passed passed"
echo "$((cargo_passed + mlflow_passed + browser_passed + k8s_passed + executor_passed + v2_passed + gpu_passed)) passed, 0 failed in $((SECONDS / 60)) min $((SECONDS % 60)) s"
