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
#                                        build-aarch64/tests/model/lane_panel_weights_test,
#                                        build-aarch64/tests/loader/gguf_test,
#                                        build-aarch64/tests/deepseek/deepseek_unit_test
#   scripts/cross-build.sh aarch64 --engine
#                                      → every room up to the engine (PAGODA_ENGINE_ONLY: no
#                                        server, CLI or Python) and the engine tests:
#                                        build-aarch64-engine/tests/engine/*_test
# Needs g++-aarch64-linux-gnu and Debian's arm64 libraries (scripts/install_deps.sh --tests);
# run the results with scripts/qemu-run.sh. Exits 77 (CTest's "skipped") when the cross
# compiler is absent.
#
# The engine links the hub room, and the hub libcurl and nettle. Multiarch installs a package for
# arm64 only at the version the host has for amd64, so on a machine whose amd64 packages are not
# the newest, libcurl4-openssl-dev:arm64 would upgrade sixteen of the host's packages. Instead
# the engine build unpacks the arm64 libcurl and nettle, and those of their dependencies that
# are not installed for arm64, into build-aarch64-engine/sysroot (apt-get download, dpkg -x: no
# root, no change to the host), and its test binaries find them there through their RPATH.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
level=${2:-}
case "$arch" in
  aarch64) triple=aarch64-linux-gnu; debian_arch=arm64 ;;
  *) echo "usage: $0 aarch64 [--engine]" >&2; exit 2 ;;
esac
case "$level" in
  "" | --engine) ;;
  *) echo "usage: $0 aarch64 [--engine]" >&2; exit 2 ;;
esac
if ! command -v "$triple-g++" >/dev/null 2>&1; then
  echo "skipped: $triple-g++ is not installed (scripts/install_deps.sh --tests installs it)" >&2
  exit 77
fi

# Unpacks PACKAGES (for $debian_arch) and the part of their dependency closure not installed for
# $debian_arch into DIR; their .pc files are rewritten to point into DIR (libcurl.pc names its
# include directory in full). DIR/.complete lists the packages, so that a sysroot unpacked for
# another list is unpacked again.
unpack_sysroot() {
  local dir=$1
  shift
  local packages=("$@")
  [ "$(cat "$dir/.complete" 2>/dev/null)" = "${packages[*]}" ] && return 0
  rm -rf "$dir"
  mkdir -p "$dir/debs"
  local wanted=()
  for dep in $(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
      --no-breaks --no-replaces --no-enhances "${packages[@]/%/:$debian_arch}" |
      grep -E "^[a-z0-9].*:$debian_arch\$" | sort -u); do
    dpkg-query -W -f='${Status}' "$dep" 2>/dev/null | grep -q 'ok installed' || wanted+=("$dep")
  done
  if ! (cd "$dir/debs" && apt-get download "${wanted[@]}" >/dev/null); then
    echo "skipped: could not download ${wanted[*]} (no network?)" >&2
    exit 77
  fi
  for deb in "$dir"/debs/*.deb; do dpkg -x "$deb" "$dir"; done
  sed -E -i "s#^(prefix|includedir)=/usr#\1=$dir/usr#" "$dir"/usr/lib/$triple/pkgconfig/*.pc
  echo "${packages[*]}" >"$dir/.complete"
}

export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
# No MPI: find_package would find the host's.
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/$triple.cmake"
  -DPAGODA_KERNELS_ONLY=OFF -DPAGODA_WITH_MPI=OFF -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=OFF
  -DPAGODA_UNITY_BATCH=8 -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST
  -DPAGODA_TESTDATA_DIR="${PAGODA_TESTDATA_DIR:-$PWD/../shared/testdata}")
jobs=${PAGODA_BUILD_JOBS:-$(nproc)}
if [ "$level" = --engine ]; then
  build=build-$arch-engine
  sysroot=$PWD/$build/sysroot
  unpack_sysroot "$sysroot" libcurl4-openssl-dev nettle-dev
  # zlib1g still installs into /lib; DT_RPATH rather than DT_RUNPATH: it also serves libcurl's
  # own dependencies.
  rpath=$sysroot/usr/lib/$triple:$sysroot/lib/$triple
  # Unit tests only: structured_output_ajv_test (integration) needs Node on the guest.
  PKG_CONFIG_PATH=$sysroot/usr/lib/$triple/pkgconfig cmake -S . -B "$build" "${common[@]}" -DPAGODA_ENGINE_ONLY=ON \
    -DPAGODA_UNIT_TESTS_ONLY=ON \
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags,-rpath,$rpath,-rpath-link,$rpath" >/dev/null
  cmake --build "$build" -j "$jobs" --target tests/engine/all
else
  build=build-$arch
  cmake -S . -B "$build" "${common[@]}" -DPAGODA_MODEL_ONLY=ON >/dev/null
  cmake --build "$build" -j "$jobs" \
    --target kernel_table_test quant_kernel_test attention_test dump_logits deepseek_dump \
    f16_weights_test lane_panel_weights_test gguf_test deepseek_unit_test
fi
