#!/usr/bin/env bash
# libpagoda.so exports Pagoda's public API and nothing else of Pagoda: every dynamic symbol in
# namespace pagoda belongs to a class or function that include/pagoda/ marks PAGODA_API. (Other
# symbols, e.g. the standard library's template instantiations, are the toolchain's.)
set -euo pipefail
library=$1
public='^(pagoda::(Engine|Error|AsyncEngine|AsyncEngineObserver|EngineBackend|EngineUnavailableError|OutputQueue)(::|$)|pagoda::make_engine_backend\(|pagoda::run_tensor_parallel_follower\(|pagoda::version\(\)|pagoda::log_to_stderr\()'
symbols=$(nm -D --defined-only -C "$library" | cut -d' ' -f3- | sed -E 's/^(typeinfo name for|typeinfo for|vtable for) //')
leaked=$(grep -E '^pagoda::' <<<"$symbols" | grep -vE "$public" || true)
if [ -n "$leaked" ]; then
  echo "libpagoda.so exports private Pagoda symbols:" >&2
  echo "$leaked" | head -20 >&2
  exit 1
fi
for needed in 'pagoda::Engine::Engine(' 'pagoda::Engine::generate(' 'pagoda::Error' \
    'pagoda::AsyncEngine::submit(' 'pagoda::make_engine_backend('; do
  grep -qF "$needed" <<<"$symbols" || { echo "libpagoda.so does not export $needed" >&2; exit 1; }
done
echo "exported: $(grep -cE '^pagoda::' <<<"$symbols") public Pagoda symbols, no private ones"
