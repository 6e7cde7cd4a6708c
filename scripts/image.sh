#!/usr/bin/env bash
# make image: Trainyard's container image (deploy/Dockerfile) from the
# release build, tagged trainyard:<version> as the Helm chart expects.
#
#   scripts/image.sh [TAG]
#
# Needs a Docker engine (or anything that answers `docker build`).
set -euo pipefail
source "$(dirname "$0")/common.sh"
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)"
tag="${1:-trainyard:$version}"
docker info >/dev/null 2>&1 || die "docker cannot reach an engine (docker info failed); start one, or build deploy/Dockerfile elsewhere"
"$ROOT/scripts/build.sh"
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
cp "$CARGO_TARGET_DIR/release/trainyard" "$context/"
cp -r "$ROOT/target/site" "$context/site"
cp -r "$ROOT/templates" "$context/templates"
docker build -f "$ROOT/deploy/Dockerfile" -t "$tag" "$context"
step "built $tag"
