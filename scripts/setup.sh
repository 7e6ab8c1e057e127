#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a Release build in ./build.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=OFF
cmake --build build --target pagoda
echo "built ./build/pagoda"
