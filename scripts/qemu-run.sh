#!/usr/bin/env bash
# Runs a cross-built binary under qemu-user.
#   scripts/qemu-run.sh aarch64 [--cpu MODEL] BINARY ARGS...
# MODEL is qemu's -cpu (default max: every feature qemu emulates, SVE, i8mm and bf16 included);
# cortex-a53 is plain Armv8.0-A, neoverse-n1 / cortex-a76 have the dot product and fp16 but
# no SVE, i8mm or bf16 (the Kunpeng 920's TaiShan v110 feature set). The guest's libraries:
# the cross toolchain's (/usr/aarch64-linux-gnu) first, then Debian's arm64 multiarch ones.
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
exec "$qemu" -cpu "$cpu" -L "$prefix" "$@"
