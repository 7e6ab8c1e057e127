#!/usr/bin/env bash
# Cross-builds for another architecture the rooms up to the model (PAGODA_MODEL_ONLY), and of
# the tests only what scripts/qemu-kernel-tests.sh and scripts/qemu-model-tests.sh run: three
# kernel tests, the model and DeepSeek logits drivers, the f16 weights and DeepSeek unit tests;
# not the engine, server or CLI. The rooms compile in batches of files (PAGODA_UNITY_BATCH), and
# the test binaries list their cases only when CTest runs them (PRE_TEST), never here under
# qemu, so that a cold build takes minutes.
#   scripts/cross-build.sh aarch64     → build-aarch64/tests/kernels/{kernel_table,quant_kernel,attention}_test,
#                                        build-aarch64/tests/model/dump_logits,
#                                        build-aarch64/tests/deepseek/deepseek_dump,
#                                        build-aarch64/tests/model/f16_weights_test,
#                                        build-aarch64/tests/deepseek/deepseek_unit_test
# Needs g++-aarch64-linux-gnu and Debian's arm64 libraries (scripts/install_deps.sh --tests);
# run the results with scripts/qemu-run.sh. Exits 77 (CTest's "skipped") when the cross
# compiler is absent.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
case "$arch" in
  aarch64) triple=aarch64-linux-gnu ;;
  *) echo "usage: $0 aarch64" >&2; exit 2 ;;
esac
if ! command -v "$triple-g++" >/dev/null 2>&1; then
  echo "skipped: $triple-g++ is not installed (scripts/install_deps.sh --tests installs it)" >&2
  exit 77
fi

build=build-$arch
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
# No MPI: find_package would find the host's.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/$triple.cmake" -DPAGODA_KERNELS_ONLY=OFF \
  -DPAGODA_MODEL_ONLY=ON -DPAGODA_WITH_MPI=OFF -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=OFF \
  -DPAGODA_UNITY_BATCH=8 -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST \
  -DPAGODA_TESTDATA_DIR="${PAGODA_TESTDATA_DIR:-$PWD/../shared/testdata}" >/dev/null
cmake --build "$build" -j "${PAGODA_BUILD_JOBS:-$(nproc)}" \
  --target kernel_table_test quant_kernel_test attention_test dump_logits deepseek_dump \
  f16_weights_test deepseek_unit_test
