#!/usr/bin/env bash
# Runs the model-level integration checks on the cross-built drivers (scripts/cross-build.sh)
# under qemu-user with one CPU model, so that whole models run on the kernel variant that
# model's features select:
#   scripts/qemu-model-tests.sh aarch64 neoverse-n1 NATIVE_PAGODA
# - stories260K's published greedy continuations, token by token through the KV cache
#   (tests/model/check_stories260k_forced.py on dump_logits);
# - the DeepSeek-V2/V3 logits against PyTorch (tests/deepseek/check_deepseek.py on
#   deepseek_dump): every variant of the family, decode, chunked prefill, a batch and a
#   prefix-cache hit, and the GGUF files that NATIVE_PAGODA (the host's CLI: the file format
#   is the same on every architecture) exports from them;
# - f16 weights too large for the fp16 arithmetic the model's variant may use are widened at
#   load (tests/model/f16_weights_test);
# - int8 W8A8 and int4 W4A8 matrices are packed at load into the lane panels of every table this
#   CPU model runs that reads them (neon_dotprod's 4 x 4, neon_i8mm's 4 x 8), shards included,
#   and give the row-major bits (tests/model/lane_panel_weights_test);
# - GGUF files read, repacked and run as models (tests/loader/gguf_test), Q8_0, Q4_0 and Q4_1
#   models on every panel table packed with the row-major path's tokens;
# - the DeepSeek unit tests (config, MoE router, MLA attention with the fp16 cache).
# One OpenMP thread, as in scripts/qemu-kernel-tests.sh. Exits 77 (CTest's "skipped") without qemu-user or without the cross build.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
cpu=${2:-}
pagoda=${3:-}
[ -n "$pagoda" ] || { echo "usage: $0 aarch64 CPU NATIVE_PAGODA" >&2; exit 2; }
build=$PWD/build-$arch
testdata=${PAGODA_TESTDATA_DIR:-$PWD/../shared/testdata}
command -v "qemu-$arch" >/dev/null 2>&1 ||
  { echo "skipped: qemu-$arch is not installed (scripts/install_deps.sh --tests)" >&2; exit 77; }
for driver in tests/model/dump_logits tests/deepseek/deepseek_dump tests/model/f16_weights_test \
  tests/model/lane_panel_weights_test tests/loader/gguf_test tests/deepseek/deepseek_unit_test; do
  [ -x "$build/$driver" ] ||
    { echo "skipped: $build/$driver is not built (scripts/cross-build.sh $arch)" >&2; exit 77; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The check scripts run a driver as one command: a wrapper puts qemu before it.
for driver in tests/model/dump_logits tests/deepseek/deepseek_dump; do
  cat >"$work/$(basename $driver)" <<EOF
#!/bin/sh
OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive exec "$PWD/scripts/qemu-run.sh" $arch --cpu $cpu \\
  "$build/$driver" "\$@"
EOF
  chmod +x "$work/$(basename $driver)"
done

status=0
for t in model/f16_weights_test model/lane_panel_weights_test loader/gguf_test \
  deepseek/deepseek_unit_test; do
  echo "== $t on $cpu"
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive scripts/qemu-run.sh "$arch" --cpu "$cpu" \
    "$build/tests/$t" --gtest_brief=1 || status=1
done
echo "== stories260K greedy on $cpu"
/usr/bin/python3 tests/model/check_stories260k_forced.py "$work/dump_logits" "$testdata" \
  "$work/stories" || status=1
echo "== DeepSeek logits on $cpu"
/usr/bin/python3 tests/deepseek/check_deepseek.py "$work/deepseek_dump" "$pagoda" \
  "$work/deepseek" || status=1
exit $status
