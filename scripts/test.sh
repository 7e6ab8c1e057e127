#!/usr/bin/env bash
# The whole test suite: a Release build running every test through CTest, then an
# ASan+UBSan build running the unit tests. CI calls exactly this script.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
jobs=$(nproc)

# Reference implementations the tests compare against (npm: HF tokenizers, OpenAI SDK).
if [ -f tests/node/package.json ]; then
  (cd tests/node && npm install --no-audit --no-fund --loglevel=error)
fi

echo "== Release build and full suite =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900

echo "== ASan+UBSan build, unit tests =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGODA_SANITIZE=ON -DPAGODA_BUILD_BENCH=OFF
cmake --build build-asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" -L unit --timeout 900
