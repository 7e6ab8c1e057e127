# shellcheck shell=bash
# Sourced by scripts that need a clean Debian 12 root to run something in (bench/setup_clean_root.sh,
# deploy/container/check_runtime_root.sh): a minimal bookworm root made once with debootstrap and
# kept, and a fresh copy of it per run with /proc, /sys and /dev mounted, unmounted again however
# the script ends.
#
#   source scripts/lib/debootstrap_root.sh
#   chroot_require_root                 # exits unless run as root
#   chroot_ensure_base                  # debootstrap into $chroot_base unless done before
#   trap 'chroot_unmount_all; ...' EXIT; trap 'exit 130' INT TERM
#   chroot_fresh_root "$chroot_cache/my-root"
#
# Environment: PAGODA_CHROOT_CACHE (default /work/chroot-cache) holds the base root, shared by the
# scripts so that only the first run of either pays for debootstrap; PAGODA_DEBIAN_MIRROR
# (default http://deb.debian.org/debian).

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
  mkdir -p "$chroot_cache"
  [ -f "$chroot_base/.complete" ] && return 0
  rm -rf "$chroot_base"
  echo "== debootstrap bookworm (once, kept in $chroot_base) =="
  debootstrap --variant=minbase bookworm "$chroot_base" "$chroot_mirror"
  cat >"$chroot_base/etc/apt/sources.list" <<SOURCES
deb $chroot_mirror bookworm main
deb $chroot_mirror bookworm-updates main
deb ${chroot_mirror%/debian}/debian-security bookworm-security main
SOURCES
  touch "$chroot_base/.complete"
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
