# Shared by the scripts: where tools and build outputs live. Source it.
# shellcheck shell=bash

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export ROOT

# Tools installed once per machine, outside the repository.
export PATH="$HOME/.cargo/bin:$ROOT/end2end/node_modules/.bin:$PATH"

# One build cache per machine, shared by every checkout (CI clones reuse it).
# Set CARGO_TARGET_DIR to build elsewhere.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/trainyard/target}"

# cargo-leptos sets this when it builds; leptos reads it at compile time
# (option_env!). Setting it for plain cargo too keeps `cargo test` and
# `cargo leptos build` from invalidating each other's build of leptos.
export LEPTOS_OUTPUT_NAME="trainyard"

# The versions the project is built with.
# cargo-leptos is built from tools/cargo-leptos (0.3.7 with a newer wasm
# splitter; see its Cargo.toml); this is that package's version.
CARGO_LEPTOS_VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/tools/cargo-leptos/Cargo.toml" | head -1)"
WASM_BINDGEN_VERSION="$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print; exit }' "$ROOT/Cargo.lock")"
export CARGO_LEPTOS_VERSION WASM_BINDGEN_VERSION

# The Python environment with the official mlflow client (tests, benchmarks).
MLFLOW_VENV="$HOME/.cache/trainyard/mlflow-venv"
export MLFLOW_VENV

# A step's heading, with the time since the script began (where long runs spend it).
step() { printf '\n\033[1m==> %s\033[0m  (%d:%02d)\n' "$*" $((SECONDS / 60)) $((SECONDS % 60)); }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
