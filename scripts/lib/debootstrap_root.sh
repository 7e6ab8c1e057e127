# shellcheck shell=bash
# Sourced by scripts that need a clean Debian 12 root to run something in (bench/setup_clean_root.sh,
# deploy/container/check_runtime_root.sh): a minimal bookworm root made once with debootstrap and
# kept, and a fresh copy of it per run with /proc, /sys and /dev mounted, unmounted again however
# the script ends.
#
#   source scripts/lib/debootstrap_root.sh
#   chroot_require_root                 # exits unless run as root
#   chroot_ensure_base [ARCH]           # debootstrap into $chroot_base unless done before
#   trap 'chroot_unmount_all; ...' EXIT; trap 'exit 130' INT TERM
#   chroot_fresh_root "$chroot_cache/my-root"
#
# Environment: PAGODA_CHROOT_CACHE (default /work/chroot-cache) holds the base root, shared by the
# scripts so that only the first run of either pays for debootstrap; PAGODA_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
#
# ARCH, a Debian architecture other than this machine's (arm64 on an amd64 host), makes a root of
# that architecture in its own directory; its binaries run under qemu-user-static through
# binfmt_misc (chroot_require_binfmt), slowly (scripts/check-arm64-install.sh).

chroot_cache=${PAGODA_CHROOT_CACHE:-/work/chroot-cache}
chroot_mirror=${PAGODA_DEBIAN_MIRROR:-http://deb.debian.org/debian}
chroot_base=$chroot_cache/bookworm-base
chroot_mounts=()

chroot_require_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$0: needs root (debootstrap, chroot, mounts)" >&2
    exit 1
  fi
}

# The base root: a minimal Debian 12 (debootstrap's minbase, what debian:12-slim and other
# container images start from), with the suites of a normal install (updates and security).
# `.complete` marks a base that debootstrap finished; a half-made one is made again.
chroot_ensure_base() {
  local arch=${1:-$(dpkg --print-architecture)}
  if [ "$arch" != "$(dpkg --print-architecture)" ]; then
    chroot_base=$chroot_cache/bookworm-$arch-base
    chroot_require_binfmt "$arch"
  fi
  mkdir -p "$chroot_cache"
  [ -f "$chroot_base/.complete" ] && return 0
  rm -rf "$chroot_base"
  echo "== debootstrap bookworm $arch (once, kept in $chroot_base) =="
  debootstrap --arch="$arch" --variant=minbase bookworm "$chroot_base" "$chroot_mirror"
  cat >"$chroot_base/etc/apt/sources.list" <<SOURCES
deb $chroot_mirror bookworm main
deb $chroot_mirror bookworm-updates main
deb ${chroot_mirror%/debian}/debian-security bookworm-security main
SOURCES
  touch "$chroot_base/.complete"
}

# The kernel runs ARCH's binaries (a chroot's included) through qemu-user-static: binfmt_misc
# mounted and qemu's handler for ARCH enabled (Debian's qemu-user-static and binfmt-support
# register it). The handler is registered with the F flag, so the kernel holds the interpreter
# open and the root needs no copy of it.
chroot_require_binfmt() {
  local qemu_arch
  case "$1" in
    arm64) qemu_arch=aarch64 ;;
    *) echo "$0: no qemu binfmt handler known for $1" >&2; exit 1 ;;
  esac
  [ -e /proc/sys/fs/binfmt_misc/status ] ||
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || {
    echo "$0: cannot mount binfmt_misc (a container without the privilege?)" >&2
    exit 1
  }
  local handler=/proc/sys/fs/binfmt_misc/qemu-$qemu_arch
  if [ ! -e "$handler" ] && command -v update-binfmts >/dev/null; then
    update-binfmts --enable "qemu-$qemu_arch" || true
  fi
  if ! grep -qx enabled "$handler" 2>/dev/null || ! grep -q '^flags:.*F' "$handler"; then
    echo "$0: no enabled qemu-$qemu_arch binfmt handler with the F flag" \
      "(apt-get install qemu-user-static binfmt-support)" >&2
    exit 1
  fi
}

# A fresh copy of the base at $1 (whatever was there is removed), this host's resolver for apt,
# and the pseudo file systems bind-mounted; the mounts are remembered for chroot_unmount_all.
chroot_fresh_root() {
  local root=$1 m
  echo "== fresh root from the base =="
  rm -rf "$root"
  cp -a "$chroot_base" "$root"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  for m in proc sys dev dev/pts; do
    mount --bind "/$m" "$root/$m"
    chroot_mounts+=("$root/$m")
  done
}

# Undoes chroot_fresh_root's mounts, innermost first; for the caller's EXIT trap, before it
# removes the root (rm -rf through a live bind mount of /dev would empty the host's /dev).
chroot_unmount_all() {
  local i
  for ((i = ${#chroot_mounts[@]} - 1; i >= 0; i--)); do
    umount "${chroot_mounts[$i]}" 2>/dev/null || umount -l "${chroot_mounts[$i]}" || true
  done
  chroot_mounts=()
}
