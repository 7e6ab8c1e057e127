#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a Release build in ./build, with the library
# (libpagoda.so, headers, CMake package, pagoda.pc) and the `pagoda` Python package installed
# under /usr/local, where Debian's python3 finds the package (docs/python.md, docs/library.md).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=OFF
cmake --build build --target pagoda pagoda_python
echo "built ./build/pagoda"

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
"${sudo_cmd[@]}" cmake --install build --component library
"${sudo_cmd[@]}" cmake --install build --component python
"${sudo_cmd[@]}" ldconfig
echo "installed libpagoda.so and the pagoda Python package under $(
  sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' build/CMakeCache.txt)"
