#!/usr/bin/env bash
# Runs a cross-built binary under qemu-user.
#   scripts/qemu-run.sh aarch64 [--cpu MODEL] BINARY ARGS...
# MODEL is qemu's -cpu (default max: every feature qemu emulates, SVE, i8mm and bf16 included);
# cortex-a53 is plain Armv8.0-A, neoverse-n1 / cortex-a76 have the dot product and fp16 but
# no SVE, i8mm or bf16 (the Kunpeng 920's TaiShan v110 feature set). The guest's libraries:
# the cross toolchain's (/usr/aarch64-linux-gnu) first, then Debian's arm64 multiarch ones.
#
# The loader is the cross toolchain's (-L), so libc must be too: the loader finds libc.so.6
# through the host's ld.so.cache, which lists multiarch's /lib/aarch64-linux-gnu/libc.so.6, a
# glibc of another Debian build (2.36-9+deb12uN against the cross 2.36-8) whose private layout
# of the loader's data differs. With that pair pthread_create walked the loader's thread-stack
# list forever: every program that starts a thread (an OpenMP team, the engine thread) spun at
# 100 % CPU before its first clone. LD_LIBRARY_PATH=/lib (qemu maps it to the cross lib folder)
# is searched before the cache, so libc, libm, libstdc++ and libgomp all come from there.
# Exits 77 (CTest's "skipped") when qemu-user is absent.
set -euo pipefail

arch=${1:-}
shift || true
case "$arch" in
  aarch64) qemu=qemu-aarch64; prefix=/usr/aarch64-linux-gnu ;;
  *) echo "usage: $0 aarch64 [--cpu MODEL] BINARY ARGS..." >&2; exit 2 ;;
esac
cpu=max
if [ "${1:-}" = --cpu ]; then
  cpu=$2
  shift 2
fi
if ! command -v "$qemu" >/dev/null 2>&1; then
  echo "skipped: $qemu is not installed (scripts/install_deps.sh --tests installs qemu-user)" >&2
  exit 77
fi
exec "$qemu" -cpu "$cpu" -L "$prefix" -E LD_LIBRARY_PATH=/lib "$@"
