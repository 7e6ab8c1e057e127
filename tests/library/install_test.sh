#!/usr/bin/env bash
# Installs the library component of BUILD into a fresh prefix under WORK, builds the C++ example
# from SOURCE/examples/cpp against it twice (CMake find_package, then pkg-config and a plain
# compiler line) and runs both on MODEL: a program needs nothing of the build tree.
set -euo pipefail
build=$1 source=$2 work=$3 pagoda=$4 model=$5
rm -rf "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" --component library >/dev/null
test -f "$prefix/include/pagoda/engine.h"
test -f "$prefix/lib/cmake/Pagoda/PagodaConfig.cmake"
test -f "$prefix/lib/pkgconfig/pagoda.pc"
# No private header may be reachable from the installed ones.
if grep -rhoE '#include "[^"]+"' "$prefix/include/pagoda" | grep -v '"pagoda/'; then
  echo "an installed header includes something outside include/pagoda/" >&2
  exit 1
fi

expected=$("$pagoda" generate --model "$model" --prompt "Hello" --temperature 0 --max-tokens 16 \
  --max-num-seqs 8 --json 2>/dev/null | sed -E 's/.*"token_ids":\[([0-9,]*)\].*/\1/; s/,/ /g')

check() {  # check NAME BINARY
  local ids
  ids=$("$2" "$model" "Hello" | sed -nE 's/^token_ids: //p')
  if [ "$ids" != "$expected" ]; then
    echo "$1: token ids '$ids', pagoda generate gives '$expected'" >&2
    exit 1
  fi
  echo "$1: ok ($ids)"
}

# CMake: find_package(Pagoda) through CMAKE_PREFIX_PATH.
cmake -S "$source/examples/cpp" -B "$work/cmake-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
check find_package "$work/cmake-build/pagoda_example_generate"
check find_package-stream "$work/cmake-build/pagoda_example_stream"

# pkg-config and a plain compiler command line.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
# shellcheck disable=SC2046  # pkg-config's output is a list of flags
c++ -std=c++20 -o "$work/pkg-config-example" "$source/examples/cpp/generate.cpp" \
  $(pkg-config --cflags --libs pagoda) -Wl,-rpath,"$(pkg-config --variable=libdir pagoda)"
check pkg-config "$work/pkg-config-example"
