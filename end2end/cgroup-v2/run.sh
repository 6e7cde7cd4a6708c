#!/usr/bin/env bash
# Runs test binaries inside a small virtual machine whose kernel mounts only
# cgroup v2, as current distributions do, so that the job limits' v2 path is
# tested for real on a machine (like this one) whose own cgroups are v1.
#
#   end2end/cgroup-v2/run.sh BINARY [ARGS...] [-- BINARY [ARGS...]]...
#
# The machine: Debian's kernel (its package unpacked into
# ~/.cache/trainyard/cgroup-v2-vm, never installed), busybox as the init, and
# this machine's own root filesystem shared read-only over 9p, so the binaries
# run with the same libraries, Python and paths. /tmp is a fresh tmpfs; the
# network is loopback only.
#
# The tests run twice: in the root group, and in a group of their own with
# other processes beside them in the root (where the server must move into
# a leaf before it can hand controllers down, as under systemd with
# Delegate=yes). Exits with the first failure's status.
set -euo pipefail
source "$(dirname "$0")/../../scripts/common.sh"

[ $# -gt 0 ] || die "usage: $0 BINARY [ARGS...] [-- BINARY [ARGS...]]..."
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 is missing (scripts/bootstrap.sh test installs it)"
[ -x /bin/busybox ] || die "busybox is missing (Debian's busybox-static; scripts/bootstrap.sh test installs it)"

cache="$HOME/.cache/trainyard/cgroup-v2-vm"
mkdir -p "$cache"
# The kernel package the linux-image-amd64 metapackage names today.
kernel_pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }')"
[ -n "$kernel_pkg" ] || die "apt knows no linux-image-amd64 (run apt-get update)"
kernel_dir="$cache/$kernel_pkg"
if [ ! -d "$kernel_dir" ]; then
  step "fetching Debian's $kernel_pkg for the cgroup v2 machine (once)"
  rm -rf "$kernel_dir.tmp" && mkdir -p "$kernel_dir.tmp"
  (cd "$kernel_dir.tmp" && apt-get download "$kernel_pkg" >/dev/null 2>&1 || apt-get download "$kernel_pkg")
  dpkg-deb -x "$kernel_dir.tmp"/*.deb "$kernel_dir.tmp/root"
  mv "$kernel_dir.tmp/root" "$kernel_dir"
  rm -rf "$kernel_dir.tmp"
fi
# Wherever the package puts them (/boot and /lib, or /usr/lib).
vmlinuz="$(find "$kernel_dir" -name 'vmlinuz-*' -type f | head -1)"
modules="$(find "$kernel_dir" -maxdepth 4 -type d -path '*lib/modules/*' | head -1)"
[ -n "$vmlinuz" ] && [ -n "$modules" ] || die "no kernel or modules in $kernel_pkg (under $kernel_dir)"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
initrd="$work/initrd"
mkdir -p "$initrd"/{bin,mods,proc,sys,dev,host}
cp /bin/busybox "$initrd/bin/busybox"
# 9p over virtio, in the order of their dependencies.
for module in drivers/virtio/virtio_ring drivers/virtio/virtio drivers/virtio/virtio_pci_modern_dev \
  drivers/virtio/virtio_pci_legacy_dev drivers/virtio/virtio_pci fs/netfs/netfs fs/fscache/fscache \
  net/9p/9pnet net/9p/9pnet_virtio fs/9p/9p; do
  file="$(ls "$modules/kernel/$module".ko* 2>/dev/null | head -1)"
  [ -n "$file" ] || continue # built in, in another kernel
  case "$file" in
    *.ko.xz) xz -dc "$file" >"$initrd/mods/$(basename "$module").ko" ;;
    *.ko.zst) zstd -qdc "$file" >"$initrd/mods/$(basename "$module").ko" ;;
    *) cp "$file" "$initrd/mods/" ;;
  esac
  echo "$(basename "$module")" >>"$initrd/mods/order"
done

# What runs in the machine: each command, in the root group, then in a
# group of its own beside another process.
{
  echo "export PATH='$PATH' HOME='$HOME' CARGO_TARGET_DIR='$CARGO_TARGET_DIR' RUST_BACKTRACE=1 TEST_CGROUPS_REQUIRED=1"
  echo "cd '$PWD'"
  echo 'status=0'
  echo 'run() { "$@" || { s=$?; echo "cgroup-v2: FAILED ($s): $*"; [ $status -ne 0 ] || status=$s; }; }'
  cmd=()
  services=0
  flush() {
    [ ${#cmd[@]} -gt 0 ] || return 0
    services=$((services + 1))
    printf 'echo "cgroup-v2: in the root group:"; run'
    printf ' %q' "${cmd[@]}"
    printf '\n'
    # As systemd starts a service with Delegate=yes: the controllers handed
    # down to its group, and the service alone in it.
    printf 'echo "cgroup-v2: in a group of its own:"; run sh -c '\''echo "+memory +cpu +pids" > /sys/fs/cgroup/cgroup.subtree_control && mkdir /sys/fs/cgroup/service-%s && echo $$ > /sys/fs/cgroup/service-%s/cgroup.procs && exec "$@"'\'' sh' "$services" "$services"
    printf ' %q' "${cmd[@]}"
    printf '\n'
    cmd=()
  }
  for arg in "$@"; do
    if [ "$arg" = "--" ]; then flush; else cmd+=("$arg"); fi
  done
  flush
  echo 'echo "cgroup-v2: status $status"'
} >"$initrd/tests.sh"

cat >"$initrd/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
for m in $(/bin/busybox cat /mods/order); do /bin/busybox insmod /mods/$m.ko || exit 1; done
/bin/busybox mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576,cache=loose,ro host /host || exit 1
cd /host
/bin/busybox mount -t proc proc proc
/bin/busybox mount -t sysfs sys sys
/bin/busybox mount -t cgroup2 cgroup2 sys/fs/cgroup
/bin/busybox mount -t devtmpfs dev dev
/bin/busybox mount -t tmpfs tmp tmp
/bin/busybox mkdir -p dev/shm && /bin/busybox mount -t tmpfs shm dev/shm
/bin/busybox mount -t tmpfs run run
/bin/busybox mount -t tmpfs cache var/cache
/bin/busybox ip link set lo up
/bin/busybox cp /tests.sh tmp/tests.sh
echo "cgroup-v2: controllers: $(/bin/busybox cat sys/fs/cgroup/cgroup.controllers)"
/bin/busybox chroot /host /bin/sh /tmp/tests.sh
/bin/busybox poweroff -f
EOF
chmod 755 "$initrd/init"
(cd "$initrd" && find . | /bin/busybox cpio -o -H newc 2>/dev/null) | gzip -1 >"$work/initrd.gz"

# Emulated, not KVM: on the nested virtualisation of these machines a KVM
# guest hangs at its first instructions, and emulation boots in two seconds.
accel=(-accel tcg,thread=multi)
out="$work/console.log"
# A hung machine (a deadlocked test, a stalled share) stops the run instead
# of holding it forever.
limit="${CGROUP_V2_TIMEOUT:-900}"
step "booting the cgroup v2 machine ($kernel_pkg, emulated)"
timeout -k 30 "$limit" qemu-system-x86_64 "${accel[@]}" -m 2048 -smp 2 -nographic -no-reboot \
  -kernel "$vmlinuz" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet loglevel=1 panic=-1 cgroup_no_v1=all" \
  -fsdev local,id=host,path=/,security_model=passthrough,readonly=on,multidevs=remap \
  -device virtio-9p-pci,fsdev=host,mount_tag=host \
  -nic none </dev/null | tee "$out" | sed -u 's/\r$//' || true
status="$(sed -n 's/\r$//; s/^cgroup-v2: status \([0-9]*\)$/\1/p' "$out" | tail -1)"
[ -n "$status" ] || die "the cgroup v2 machine stopped before its tests ended, or ran past ${limit} s (console above)"
exit "$status"
