#!/usr/bin/env bash
# Builds the release: the server binary and the browser bundle (target/site).
# When nothing it is built from has changed since the last build here, it
# says so and builds nothing (cargo-leptos would otherwise run wasm-bindgen,
# the wasm splitter and wasm-opt again, about 80 s). BUILD_ALWAYS=1 builds.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$ROOT/scripts/bootstrap.sh" run
cd "$ROOT"

binary="$CARGO_TARGET_DIR/release/trainyard"
stamp="$ROOT/target/site/.built-from"

# What the build depends on: every file git tracks or would track (name,
# size, modification time) but the tests and the prose, wasm-opt's version
# (end2end's lock file), the tools' versions and the environment's build
# settings. Taken before building, so that a file saved during the build
# makes the next one build again.
sources() {
  git ls-files -z --cached --others --exclude-standard -- . ':!end2end' ':!docs' ':!*.md' \
    | xargs -0 stat -c '%n %s %Y' 2>/dev/null || true
  stat -c '%n %s %Y' end2end/package-lock.json 2>/dev/null || true
  rustc --version
  cargo leptos --version
  wasm-bindgen --version
  echo "$ROOT ${RUSTFLAGS:-} ${CARGO_PROFILE_RELEASE_OPT_LEVEL:-}"
}
# The outputs as the build left them (the binary's folder is shared with
# other checkouts, which may have built it since).
outputs() {
  stat -c '%n %s %Y' "$binary" target/site/pkg/* 2>/dev/null || true
}

in_git=0
git rev-parse --is-inside-work-tree >/dev/null 2>&1 && in_git=1
if [ "${BUILD_ALWAYS:-0}" != 1 ] && [ $in_git = 1 ] && [ -x "$binary" ] && [ -f "$stamp" ] \
  && [ "$( (sources; outputs) | sha256sum)" = "$(cat "$stamp")" ]; then
  step "the release build is up to date (nothing changed since it was built)"
  exit 0
fi

step "building the release (cargo leptos build --release --split)"
rm -f "$stamp"
[ $in_git = 1 ] && before="$(sources)"
# --split: pages most visits never open load as chunks of their own
# (app/src/lazy.rs).
cargo leptos build --release --split
if [ $in_git = 1 ]; then
  (echo "$before"; outputs) | sha256sum >"$stamp"
fi
