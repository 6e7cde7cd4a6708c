#!/usr/bin/env bash
# Build etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kwok, helm, kubeconform and kwok-pod-resources from the official Go modules pinned in tools/go.mod,
# into $HOME/.cache/trainyard/k8s/<kube-version>-<hash>/bin (printed on stdout).
# Does nothing when the binaries are already there.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if k8s_binaries_present; then
  log "binaries cached in $K8S_BIN"
  echo "$K8S_BIN"
  exit 0
fi

[[ -x "$GO" ]] || die "go not found (set GO=/path/to/go)"
log "building Kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION, helm $HELM_VERSION, kubeconform $KUBECONFORM_VERSION with $("$GO" version)"
log "GOMODCACHE=$GOMODCACHE GOCACHE=$GOCACHE"

# Version stamps that the upstream release builds set with -X (without them
# kube-apiserver and kubectl report v0.0.0-master).
kube_minor="${KUBE_VERSION#v1.}"; kube_minor="${kube_minor%%.*}"
build_date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$build_date"
done
ldflags+=" -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION"
ldflags+=" -X main.version=$KUBECONFORM_VERSION"   # kubeconform's main

packages=(
  ./cmd/etcd                                   # wraps go.etcd.io/etcd/server/v3/etcdmain
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  sigs.k8s.io/kwok/cmd/kwok
  helm.sh/helm/v4/cmd/helm
  github.com/yannh/kubeconform/cmd/kubeconform
  ./cmd/kwok-pod-resources                     # the kubelet's pod-resources server for a kwok node
)

mkdir -p "$K8S_BUILD_DIR"
tmp="$(mktemp -d "$K8S_BUILD_DIR/bin.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

start=$(now_ms)
# One go build for all nine: packages shared between them compile once.
# nice: these builds take minutes of both cores; keep the machine responsive.
(cd "$K8S_TOOLS" && nice -n 19 "$GO" build -trimpath -ldflags="$ldflags" -o "$tmp/" "${packages[@]}")
secs=$(( ($(now_ms) - start + 500) / 1000 ))

rm -rf "$K8S_BIN"
chmod 755 "$tmp"   # mktemp makes it 0700
mv "$tmp" "$K8S_BIN"
trap - EXIT
echo "$secs" > "$K8S_BUILD_DIR/build-seconds"
log "built in ${secs}s (cold build time when GOCACHE/GOMODCACHE were empty): $(du -sh "$K8S_BIN" | cut -f1) in $K8S_BIN"
echo "$K8S_BIN"
