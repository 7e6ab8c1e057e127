#!/usr/bin/env bash
# Decode and prefill speed of `pagoda generate` over tensor- and pipeline-parallel layouts on one
# machine, with the communication line rank 0 prints (docs/parallel.md). Pipeline stages run one
# batch at a time, so -pp P is expected to decode no faster than one process; it buys memory.
#
#   bench/parallel_generate.sh ./build/pagoda MODEL [layouts...]
# A layout is "TPxPP" (default: 1x1 2x1 1x2 2x2). Run it alone on the machine.
# MPIRUN="mpirun --oversubscribe" runs each layout as mpirun -np TP*PP (every group and stage
# link over MPI instead of shared memory); a 1x1 layout still runs as one process.
set -euo pipefail
pagoda=${1:?pagoda binary}
model=${2:?model directory or GGUF}
shift 2
layouts=("$@")
[ ${#layouts[@]} -eq 0 ] && layouts=(1x1 2x1 1x2 2x2)

prompt="def quicksort(arr):"
for layout in "${layouts[@]}"; do
  tp=${layout%x*}
  pp=${layout#*x}
  err=$(mktemp)
  launch=()
  if [ -n "${MPIRUN:-}" ] && [ $((tp * pp)) -gt 1 ]; then
    read -r -a launch <<<"$MPIRUN"
    launch+=(-np $((tp * pp)))
  fi
  "${launch[@]}" "$pagoda" generate --model "$model" --prompt "$prompt" --max-tokens 64 \
    --ignore-eos --temperature 0 -tp "$tp" -pp "$pp" >/dev/null 2>"$err"
  echo "== -tp $tp -pp $pp${launch:+ (${launch[*]})}"
  grep -E "^prompt tokens|communication:" "$err" || cat "$err"
  rm -f "$err"
done
