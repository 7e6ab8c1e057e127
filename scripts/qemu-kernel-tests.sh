#!/usr/bin/env bash
# Runs the cross-built kernel tests (scripts/cross-build.sh) under qemu-user with one CPU model,
# checking the kernel variant that model's features select against the scalar reference:
#   scripts/qemu-kernel-tests.sh aarch64 cortex-a53    neon          (Armv8.0-A: no sdot)
#   scripts/qemu-kernel-tests.sh aarch64 neoverse-n1   neon_dotprod  (sdot + fp16, no SVE,
#                                                                     i8mm or bf16: Kunpeng 920)
#   scripts/qemu-kernel-tests.sh aarch64 max,sve-default-vector-length=16 neon_bf16 neon_i8mm scalar
#                                      (every feature: i8mm, bf16, SVE at 128 bits, too short for sve)
#   scripts/qemu-kernel-tests.sh aarch64 max,sve-default-vector-length=32 sve   (SVE at 256 bits)
#   scripts/qemu-kernel-tests.sh aarch64 a64fx         sve           (SVE at 512 bits, no sdot:
#                                                                     sve over plain neon)
#   (max,sve-default-vector-length=64, qemu-user's default for max, is sve at 512 over neon_bf16)
# Each run also checks that the dispatcher picks, on that model, the first variant it runs
# (KernelDispatch.*, PAGODA_EXPECTED_ISA). A test skipped for a missing feature ("this CPU cannot run") fails the
# run: the model was chosen for the variant, so such a skip means the features were read wrong. Exits 77 (CTest's
# "skipped") without qemu-user or without the cross build.
#
# One OpenMP thread: the thread-split tests (ops_test) are left to the native build, where
# threads run in parallel; the kernels compute the same bits on any row range. (Teams did hang
# under qemu until scripts/qemu-run.sh paired the cross loader with the cross libc.)
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
cpu=${2:-}
shift 2 || { echo "usage: $0 aarch64 CPU VARIANT..." >&2; exit 2; }
variants=("$@")
[ ${#variants[@]} -gt 0 ] || { echo "usage: $0 aarch64 CPU VARIANT..." >&2; exit 2; }
build=build-$arch
tests=(kernel_table_test quant_kernel_test attention_test)
for t in "${tests[@]}"; do
  if [ ! -x "$build/tests/kernels/$t" ]; then
    echo "skipped: $build/tests/kernels/$t is not built (scripts/cross-build.sh $arch)" >&2
    exit 77
  fi
done

filter="KernelDispatch.*"
for v in "${variants[@]}"; do filter+=":*/$v"; done
status=0
for t in "${tests[@]}"; do
  log=$(mktemp)
  set +e
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive PAGODA_EXPECTED_ISA="${variants[0]}" \
    scripts/qemu-run.sh "$arch" --cpu "$cpu" "$build/tests/kernels/$t" --gtest_filter="$filter" \
    >"$log" 2>&1
  rc=$?
  set -e
  [ $rc = 77 ] && { cat "$log"; rm -f "$log"; exit 77; }
  summary=$(grep -E "^\[  (PASSED|FAILED) +\] [0-9]" "$log" | tr '\n' ' ' || true)
  echo "$t on $cpu (${variants[*]}): $summary"
  if [ $rc != 0 ] || grep -q "this CPU cannot run" "$log"; then
    grep -E "Failure|FAILED|cannot run" "$log" | head -40
    status=1
  fi
  rm -f "$log"
done
exit $status
