#!/usr/bin/env bash
# Offline throughput (`pagoda bench throughput`) of a two-stage pipeline against one process on
# the same cores, on a generated Llama of DeepSeek-Coder-1.3B's shape (random bf16 weights):
#   pp1 t1        one rank, 1 kernel thread          the baseline per core
#   pp1 t2        one rank, 2 kernel threads         the same two cores as pp2
#   pp2 t1 shm    -pp 2: 2 ranks x 1 thread, the ranks and links over shared memory
#   pp2 t1 mpi    the same under mpirun -np 2: groups and links over MPI (on one machine Open
#                 MPI's shared-memory transport; the links queue their sends when MPI gives
#                 MPI_THREAD_MULTIPLE)
# Output tokens/s is the figure to compare, pp2 against pp1 t1 x 2 (the stages run different
# batches at once) and against pp1 t2: where steps are compute-bound pp2 approaches both, where
# they stream weights (few requests) each pp2 stage streams its half once per batch, twice per
# round, and pp2 stays nearer pp1 t1 (docs/parallel.md). Each pipeline run's line on
# stderr shows "at most 2 of 2 batches in flight" and the link traffic per step; the last lines
# are a table of output tokens/s and their ratio to pp1 t1.
#
#   bench/pipeline_throughput.sh ./build/pagoda [WORKDIR]
# Run it alone on a machine with at least 2 free cores; the model (2.7 GB) is written to WORKDIR
# once. Settings through the environment:
#   PROMPTS (64), INPUT_LEN (128), OUTPUT_LEN (128)
#   PRESET     the make-model preset (ds-coder-1.3b); MAKE_MODEL_ARGS: extra make-model flags
#              (a smoke test: PRESET=ds-coder-1.3b MAKE_MODEL_ARGS="--hidden-size 128 ...")
#   MPIRUN     the launcher of the MPI run ("mpirun"; "none" leaves that run out). As root
#              --allow-run-as-root is added. Open MPI's CMA single copy is off unless
#              OMPI_MCA_btl_vader_single_copy_mechanism says otherwise (containers forbid it).
set -euo pipefail
pagoda=${1:?pagoda binary}
work=${2:-/tmp/pagoda-pipeline-bench}
prompts=${PROMPTS:-64}
input_len=${INPUT_LEN:-128}
output_len=${OUTPUT_LEN:-128}
preset=${PRESET:-ds-coder-1.3b}
read -r -a make_model_args <<<"${MAKE_MODEL_ARGS:-}"
mpirun_command=${MPIRUN:-mpirun}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}

model="$work/$preset-random${MAKE_MODEL_ARGS:+-custom}"
if [ ! -f "$model/config.json" ]; then
  mkdir -p "$work"
  "$pagoda" make-model --preset "$preset" "${make_model_args[@]}" --out "$model"
fi

labels=()
rates=()
# $1: the label; $2: the launcher ("" for none); the rest: bench throughput's flags.
run() {
  local label=$1 launcher=$2
  shift 2
  local out err
  out=$(mktemp)
  err=$(mktemp)
  local launch=()
  [ -n "$launcher" ] && read -r -a launch <<<"$launcher"
  echo "== $label${launcher:+ ($launcher)}"
  if ! "${launch[@]}" "$pagoda" bench throughput --model "$model" --num-prompts "$prompts" \
    --input-len "$input_len" --output-len "$output_len" "$@" >"$out" 2>"$err"; then
    cat "$out" "$err"
    rm -f "$out" "$err"
    return 1
  fi
  cat "$out"
  grep -E "communication:|MPI_THREAD" "$err" || true
  labels+=("$label")
  rates+=("$(grep -o '[0-9.]* output tok/s' "$out" | cut -d' ' -f1)")
  rm -f "$out" "$err"
}

run "pp1 t1: 1 rank x 1 thread" "" --threads 1
run "pp1 t2: 1 rank x 2 threads" "" --threads 2
run "pp2 t1 shm: 2 ranks x 1 thread" "" --threads 1 -pp 2
if [ "$mpirun_command" != none ]; then
  mpi="$mpirun_command -np 2"
  [ "$(id -u)" = 0 ] && mpi+=" --allow-run-as-root"
  run "pp2 t1 mpi: 2 ranks x 1 thread" "$mpi" --threads 1 -pp 2
fi

echo "== output tokens/s (ratio to pp1 t1)"
for i in "${!labels[@]}"; do
  awk -v label="${labels[$i]}" -v rate="${rates[$i]}" -v base="${rates[0]}" \
    'BEGIN { printf "%-34s %10.1f  %5.2f\n", label, rate, rate / base }'
done
