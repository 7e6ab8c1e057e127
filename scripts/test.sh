#!/usr/bin/env bash
# The whole test suite: a Release build running every test through CTest, then a lean
# ASan+UBSan build (the rooms, compiled in batches of 8 files, and their unit tests only, -O1)
# running the unit tests. CI calls exactly this script. It prints the time of each phase; JUnit reports land in
# build/ctest-junit.xml and build-asan/ctest-junit.xml.
#
# Compiles go through ccache (installed by install_deps.sh --tests), whose cache lives outside the
# checkout (~/.cache/ccache, or $CCACHE_DIR), so a fresh clone on the same machine reuses it.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
jobs=$(nproc)

phase_names=()
phase_seconds=()
phase_start=0
begin_phase() {
  echo "== $1 =="
  phase_names+=("$1")
  phase_start=$(date +%s)
}
end_phase() {
  local took=$(($(date +%s) - phase_start))
  phase_seconds+=("$took")
  echo "== ${phase_names[-1]} took ${took} s =="
}
print_phases() {
  local total=0 i
  echo "== phase times =="
  for i in "${!phase_seconds[@]}"; do
    printf '%-36s %5d s\n' "${phase_names[$i]}" "${phase_seconds[$i]}"
    total=$((total + phase_seconds[i]))
  done
  printf '%-36s %5d s\n' "total" "$total"
}
trap print_phases EXIT

begin_phase "dependencies (apt, npm)"
./scripts/install_deps.sh --tests
# Reference implementations the tests compare against (npm: HF tokenizers, OpenAI SDK).
if [ -f tests/node/package.json ]; then
  (cd tests/node && npm install --no-audit --no-fund --loglevel=error)
fi
end_phase

# Paths under the checkout are hashed relative to it, so another clone hits the same entries.
export CCACHE_BASEDIR="$repo"
export CCACHE_NOHASHDIR=1
ccache --max-size=5G >/dev/null 2>&1 || true
ccache --zero-stats >/dev/null 2>&1 || true

begin_phase "Release build"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=ON
cmake --build build -j "$jobs"
end_phase

begin_phase "Release: every test"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900 \
  --output-junit "$repo/build/ctest-junit.xml"
end_phase

begin_phase "ASan+UBSan build (unit tests)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DPAGODA_SANITIZE=ON -DPAGODA_UNIT_TESTS_ONLY=ON -DPAGODA_UNITY_BATCH=8
cmake --build build-asan -j "$jobs"
end_phase

begin_phase "ASan+UBSan: unit tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit --timeout 900 \
  --output-junit "$repo/build-asan/ctest-junit.xml"
end_phase

ccache --show-stats 2>/dev/null | grep -iE 'hits|misses' || true
