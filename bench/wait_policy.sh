#!/usr/bin/env bash
# How the OpenMP wait policy changes decode speed on a quiet machine and beside one busy
# neighbour (a process spinning on one core): libgomp's active spin, passive waiting, and a
# bounded spin (GOMP_SPINCOUNT). Prints tokens/s per configuration; docs/engine.md quotes it.
#
#   bench/wait_policy.sh ./build/pagoda MODEL [threads]
# Run it alone on the machine.
set -euo pipefail
pagoda=${1:?pagoda binary}
model=${2:?model directory or GGUF}
threads=${3:-$(nproc)}

policies=(
  "active:OMP_WAIT_POLICY=active"
  "passive:OMP_WAIT_POLICY=passive"
  "default:"
  "spin-10k:GOMP_SPINCOUNT=10000"
  "spin-100k:GOMP_SPINCOUNT=100000"
)

run() {  # prints decode tokens/s of one bench latency run
  env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $1 "$pagoda" bench latency --model "$model" \
    --threads "$threads" --batch-size 1 --input-len 32 --output-len 128 --num-iters 3 --json \
    --kv-cache-space 256MiB --max-model-len 2048 2>/dev/null |
    python3 -c 'import json,sys; print(round(json.load(sys.stdin)["tg_tokens_per_s"], 2))'
}

for load in quiet busy; do
  neighbour=
  if [ "$load" = busy ]; then
    (while :; do :; done) &
    neighbour=$!
  fi
  for p in "${policies[@]}"; do
    name=${p%%:*}
    envs=${p#*:}
    printf '%-6s %-10s %s\n' "$load" "$name" "$(run "$envs")"
  done
  if [ -n "$neighbour" ]; then kill "$neighbour"; wait "$neighbour" 2>/dev/null || true; fi
done
