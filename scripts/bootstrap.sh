#!/usr/bin/env bash
# Installs what building, running or testing Trainyard needs and is missing.
# Idempotent: a second run installs nothing.
#   scripts/bootstrap.sh tools  the Rust tools of the release build only (cargo-leptos, wasm-bindgen)
#   scripts/bootstrap.sh run    tools to build and serve (Rust target, cargo-leptos, wasm-bindgen, npm packages)
#   scripts/bootstrap.sh test   the same, plus Chromium, PostgreSQL, qemu and busybox from Debian's packages and the mlflow client
#   scripts/bootstrap.sh bench  the same, plus wrk, sqlite3, curl and jq
# BOOTSTRAP_TOOLS=0 leaves cargo-leptos and wasm-bindgen out (scripts/test.sh
# installs them in the background, beside clippy).
set -euo pipefail
source "$(dirname "$0")/common.sh"
what="${1:-run}"

need_cmd() { command -v "$1" >/dev/null 2>&1 || die "$1 is required ($2)"; }
need_cmd cargo "install Rust with rustup"
need_cmd npm "install Node.js 20 or newer with npm"
if [ "$what" = "test" ]; then
  # The test cluster (end2end/k8s) is built from Go modules.
  command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] \
    || die "Go 1.26 or newer is required to build the Kubernetes test cluster (https://go.dev/dl/)"
  need_cmd openssl "install openssl (the test cluster's certificates)"
fi

apt_updated=0
ensure_deb() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  step "installing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  if [ $apt_updated -eq 0 ]; then $sudo apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# The tools are compiled once per machine, at opt-level 1: about 11 minutes
# on 2 cores, a minute or two less than at the release profile's 3, and as
# quick at what the build asks of them (wasm-bindgen writes the same output
# in the same time; the build's time goes to wasm-opt).
install_tools() {
  if ! cargo install --list 2>/dev/null | grep -q "^trainyard-cargo-leptos v$CARGO_LEPTOS_VERSION "; then
    step "installing cargo-leptos $CARGO_LEPTOS_VERSION from tools/cargo-leptos (about 9 minutes on 2 cores, once per machine)"
    # no_downloads (set there): it must not fetch wasm-bindgen or wasm-opt from
    # the internet. --force: it replaces a cargo-leptos installed from crates.io.
    CARGO_TARGET_DIR="$HOME/.cache/trainyard/tools-target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      cargo install --path "$ROOT/tools/cargo-leptos" --locked --force
  fi

  if ! wasm-bindgen --version 2>/dev/null | grep -q " $WASM_BINDGEN_VERSION\$"; then
    step "installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (the version in Cargo.lock)"
    # Its own lock file may name a dependency version the registry here lacks;
    # then let cargo pick the newest compatible ones.
    CARGO_TARGET_DIR="$HOME/.cache/trainyard/tools-target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --locked --force \
      || CARGO_TARGET_DIR="$HOME/.cache/trainyard/tools-target" CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
        cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION" --force
  fi
}
if [ "$what" = "tools" ]; then
  install_tools
  exit 0
fi

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  step "adding the wasm32-unknown-unknown target"
  rustup target add wasm32-unknown-unknown
fi

[ "${BOOTSTRAP_TOOLS:-1}" = 0 ] || install_tools

# npm packages: binaryen's wasm-opt (Debian's is too old: its output fails to
# hydrate) and Playwright.
if [ ! -x "$ROOT/end2end/node_modules/.bin/wasm-opt" ] \
  || [ "$ROOT/end2end/package-lock.json" -nt "$ROOT/end2end/node_modules/.package-lock.json" ]; then
  step "installing the npm packages of end2end/"
  (cd "$ROOT/end2end" && npm ci --no-audit --no-fund)
fi

if [ "$what" = "bench" ]; then
  ensure_deb wrk sqlite3 curl jq
  what=test
fi

if [ "$what" = "test" ]; then
  # qemu and busybox: the cgroup v2 machine of the job limits' tests.
  ensure_deb chromium postgresql qemu-system-x86 busybox-static
  # The official mlflow client, for the compatibility suite and the benchmark.
  req="$ROOT/end2end/mlflow/requirements.txt"
  stamp="$MLFLOW_VENV/.requirements"
  if [ ! -x "$MLFLOW_VENV/bin/python" ] || ! cmp -s "$req" "$stamp"; then
    step "installing the mlflow client into $MLFLOW_VENV"
    python3 -m venv "$MLFLOW_VENV"
    "$MLFLOW_VENV/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$stamp"
  fi
fi
