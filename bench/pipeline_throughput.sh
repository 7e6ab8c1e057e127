#!/usr/bin/env bash
# Offline throughput (`pagoda bench throughput`) of a two-stage pipeline against one process on
# the same cores, on a generated Llama of DeepSeek-Coder-1.3B's shape (random bf16 weights):
#   pp1 t1   one rank, 1 kernel thread          the baseline per core
#   pp1 t2   one rank, 2 kernel threads         the same two cores as pp2
#   pp2 t1   -pp 2: 2 ranks x 1 thread          stages overlap with two batches in flight
# Output tokens/s is the figure to compare: pp2 should approach pp1 t1 x 2 (the stages run
# different batches at once) and is to be read against pp1 t2. The pipeline line on stderr
# shows "at most 2 of 2 batches in flight" and the link traffic per step.
#
#   bench/pipeline_throughput.sh ./build/pagoda [WORKDIR]
# Run it alone on a machine with at least 2 free cores; the model (2.7 GB) is written to WORKDIR
# once. Extra settings through the environment: PROMPTS (64), INPUT_LEN (128), OUTPUT_LEN (128).
set -euo pipefail
pagoda=${1:?pagoda binary}
work=${2:-/tmp/pagoda-pipeline-bench}
prompts=${PROMPTS:-64}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-128}

model="$work/ds-coder-1.3b-random"
if [ ! -f "$model/config.json" ]; then
  mkdir -p "$work"
  "$pagoda" make-model --preset ds-coder-1.3b --out "$model"
fi

run() {
  local label=$1
  shift
  local err
  err=$(mktemp)
  echo "== $label"
  "$pagoda" bench throughput --model "$model" --num-prompts "$prompts" --input-len "$input_len" \
    --output-len "$output_len" "$@" 2>"$err" || { cat "$err"; rm -f "$err"; return 1; }
  grep -E "communication:" "$err" || true
  rm -f "$err"
}

run "pp1, 1 rank x 1 thread" --threads 1
run "pp1, 1 rank x 2 threads" --threads 2
run "pp2, 2 ranks x 1 thread" --threads 1 -pp 2
