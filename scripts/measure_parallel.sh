#!/usr/bin/env bash
# The measured inputs of docs/parallel.md's communication model, on a quiet machine:
#   1. memory read bandwidth (bench_bandwidth; bound to NUMA node 0 too, where numactl and
#      several nodes exist): what one rank's decode step streams its weights at;
#   2. all-reduce time by size over shared memory (bench_allreduce --ranks 2): alpha (the small
#      sizes) and bandwidth (the large ones) between ranks on one machine;
#   3. the same over MPI with TCP (bench_allreduce --mpi): over loopback, or across machines
#      when HOSTS=h1,h2 names them (pagoda built at the same path on each);
#   4. pagoda generate -tp 1 and -tp 2 on a ds-coder-1.3b-shaped model quantized to int8, batch
#      1 and 8: decode tok/s, and the bytes, collectives and milliseconds per decode step and per
#      prefill token that CountingCommunicator counts.
# Usage: scripts/measure_parallel.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, parallel-results)
# Runs for a few minutes; needs nothing else running, as every figure is a timing.
set -euo pipefail

build=${1:-build}
out=${2:-parallel-results}
mkdir -p "$out"
pagoda=$build/pagoda
allreduce=$build/bench/bench_allreduce
bandwidth=$build/bench/bench_bandwidth
for f in "$pagoda" "$allreduce" "$bandwidth"; do
  [ -x "$f" ] || { echo "missing $f: cmake --build $build --target pagoda bench_allreduce bench_bandwidth" >&2; exit 2; }
done
mpi=(mpirun --oversubscribe)
if [ "$(id -u)" = 0 ]; then mpi+=(--allow-run-as-root); fi
export OMPI_MCA_btl_vader_single_copy_mechanism=none

echo "== machine" | tee "$out/summary.txt"
{ lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)|Socket"; uname -r; } | tee -a "$out/summary.txt"

echo "== 1. memory read bandwidth" | tee -a "$out/summary.txt"
"$bandwidth" | tee "$out/bandwidth.txt" | tee -a "$out/summary.txt"
nodes=$(lscpu | awk -F: '/NUMA node\(s\)/ {gsub(/ /, "", $2); print $2}')
if command -v numactl >/dev/null && [ "${nodes:-1}" -gt 1 ]; then
  echo "-- bound to NUMA node 0 (one rank's share)" | tee -a "$out/summary.txt"
  numactl --cpunodebind=0 --membind=0 "$bandwidth" | tee "$out/bandwidth_node0.txt" |
    tee -a "$out/summary.txt"
fi

echo "== 2. all-reduce over shared memory, 2 ranks (fp32)" | tee -a "$out/summary.txt"
"$allreduce" --ranks 2 --min-bytes 64 --max-mib 16 | tee "$out/allreduce_shm.txt" |
  tee -a "$out/summary.txt"

echo "== 3. all-reduce over MPI/TCP, 2 ranks (fp32)" | tee -a "$out/summary.txt"
if [ -n "${HOSTS:-}" ]; then
  where=(--host "$HOSTS" --mca btl tcp,self)
else
  where=(--mca btl tcp,self --mca btl_tcp_if_include lo)
fi
"${mpi[@]}" -np 2 "${where[@]}" "$allreduce" --mpi --min-bytes 64 --max-mib 16 |
  tee "$out/allreduce_mpi_tcp.txt" | tee -a "$out/summary.txt"

echo "== 4. pagoda generate, ds-coder-1.3b shape, int8" | tee -a "$out/summary.txt"
model=$out/ds-coder-1.3b
[ -f "$model/config.json" ] || "$pagoda" make-model --out "$model" --preset ds-coder-1.3b >/dev/null
prompts=()
for i in 1 2 3 4 5 6 7 8; do prompts+=(--prompt "def function_$i(arr):"); done
for tp in 1 2; do
  for batch in 1 8; do
    echo "-- -tp $tp, batch $batch" | tee -a "$out/summary.txt"
    "$pagoda" generate --model "$model" -q int8 "${prompts[@]:0:$((2 * batch))}" \
      --max-tokens 64 --ignore-eos --temperature 0 -tp "$tp" >/dev/null \
      2>"$out/generate_tp${tp}_b${batch}.err"
    grep -E "decode:|communication" "$out/generate_tp${tp}_b${batch}.err" | tee -a "$out/summary.txt"
  done
done
echo "results in $out/ (summary.txt)"
