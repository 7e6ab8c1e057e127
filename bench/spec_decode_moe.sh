#!/usr/bin/env bash
# Speculative decoding on a DeepSeek MoE shape at forced acceptance rates, with method mtp
# (docs/speculative_decoding.md, "Measuring").
#
# One generated model (random weights, PRESET's full widths, LAYERS decoder layers + one MTP
# layer) is rewritten in place by `pagoda make-draft --mtp-acceptance A` for each rate A: its
# outputs and cost stay the same, and its MTP layer's drafts are right about a fraction A of
# the time. For each batch size, plain decoding once, then for each A and each k in KS,
# `pagoda bench latency` (greedy) with {"method": "mtp", "num_speculative_tokens": k}.
#
# The table: the forced rate; the measured rate of first drafts being right (what the forced
# rate sets); vLLM's acceptance rate, accepted / drafted tokens (lower: a draft after a
# rejected one never counts, (a + a^2 + ... + a^k) / k); k; tokens per step; decode tok/s;
# speedup over plain; the step's cost in plain steps; the distinct routed experts a MoE layer
# ran per step (measured, and what independent uniform routing of the step's tokens would give,
# E * (1 - (1 - K/E)^n)). From the acceptance-0 rows (one token a step) it derives each k's
# break-even acceptance: expected tokens per step (1 - a^(k+1)) / (1 - a) = step cost.
#
# Run on a quiet machine (V2-Lite shape, 4 layers: ~6.5 GB of bf16 files, ~3.4 GB at int8):
#   bench/spec_decode_moe.sh ./build/pagoda /tmp/specmoe
# Environment: PRESET (deepseek-v2-lite), LAYERS (4), KS ("1 2 3 4"),
# ACCEPTANCES ("0 0.5 0.9 1"), BATCHES ("1"), INPUT_LEN (64), OUTPUT_LEN (64), ITERS (2),
# THREADS (--threads, all), QUANT (-q value, int8; "none" for the bf16 weights).
# The end-to-end check on a tiny model: PRESET=tiny-deepseek-v3 LAYERS=2 (tests/cli).
set -euo pipefail

PAGODA=${1:?usage: $0 PAGODA WORK_DIR}
WORK=${2:?work directory}
PRESET=${PRESET:-deepseek-v2-lite}
LAYERS=${LAYERS:-4}
KS=${KS:-"1 2 3 4"}
ACCEPTANCES=${ACCEPTANCES:-"0 0.5 0.9 1"}
BATCHES=${BATCHES:-1}
INPUT_LEN=${INPUT_LEN:-64}
OUTPUT_LEN=${OUTPUT_LEN:-64}
ITERS=${ITERS:-2}
QUANT=${QUANT:-int8}
mkdir -p "$WORK"

TARGET=$WORK/$PRESET-${LAYERS}l-mtp
if [[ ! -f $TARGET/config.json ]]; then
  "$PAGODA" make-model --preset "$PRESET" --num-layers "$LAYERS" --mtp-layers 1 \
    --out "$TARGET" >&2
fi

engine_flags=(--max-model-len $((INPUT_LEN + OUTPUT_LEN + 16)))
[[ -n "${THREADS:-}" ]] && engine_flags+=(--threads "$THREADS")
[[ $QUANT != none ]] && engine_flags+=(-q "$QUANT")

latency() {  # out.json batch [--speculative-config JSON]
  local out=$1 batch=$2
  shift 2
  "$PAGODA" bench latency --model "$TARGET" "${engine_flags[@]}" --batch-size "$batch" \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --num-iters "$ITERS" --json "$@" \
    2>"$out.log" | sed -n '/^{/,/^}/p' > "$out"
  [[ -s $out ]] || { echo "bench latency failed, see $out.log" >&2; exit 1; }
}

results=$WORK/results.tsv
: > "$results"
for batch in $BATCHES; do
  # Plain decoding never reads the MTP layer, so one rewrite serves every rate; the first
  # rate's rewrite also zeroes what makes the model predictable (the same for every rate).
  first=true
  for a in $ACCEPTANCES; do
    "$PAGODA" make-draft --from "$TARGET" --mtp-acceptance "$a" --seed 1 >&2
    if $first; then
      latency "$WORK/b$batch-plain.json" "$batch"
      printf '%s\t%s\t%s\t%s\n' "$batch" - 0 "$WORK/b$batch-plain.json" >> "$results"
      first=false
    fi
    for k in $KS; do
      json=$WORK/b$batch-a$a-k$k.json
      latency "$json" "$batch" --speculative-config \
        "{\"method\": \"mtp\", \"num_speculative_tokens\": $k}"
      printf '%s\t%s\t%s\t%s\n' "$batch" "$a" "$k" "$json" >> "$results"
    done
  done
done

python3 - "$results" "$TARGET/config.json" <<'PY'
import json, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
config = json.load(open(sys.argv[2]))
E, K = config["n_routed_experts"], config["num_experts_per_tok"]
print(f"{config['architectures'][0]}, hidden {config['hidden_size']}, {E} routed experts "
      f"top-{K}, {config['num_hidden_layers']} layers + 1 MTP layer")
def uniform_union(n):  # distinct experts of n tokens routed independently and uniformly
    return E * (1 - (1 - K / E) ** n)
def expected(a, k):  # tokens per step when each draft is accepted with probability a
    return k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
print(f"{'batch':>5}{'forced':>7}{'first':>7}{'accept':>8}{'k':>3}{'tok/step':>9}{'tok/s':>9}"
      f"{'speedup':>8}{'step/plain':>11}{'experts/layer':>14}{'uniform':>8}")
plain = {}
zero_cost = {}
for batch, forced, k, path in rows:
    r = json.load(open(path)); batch = int(batch); k = int(k)
    tg = r["tg_tokens_per_s"]
    kind = "verify" if k > 0 else "decode"
    experts = r.get(f"{kind}_routed_experts_per_layer", 0.0)
    tokens = r.get(f"{kind}_tokens_per_step", 0.0)
    if k == 0:
        plain[batch] = tg
        forced = "plain"
    a = r.get("spec_acceptance_rate", 0.0)
    first = (r.get("spec_acceptance_per_pos") or [0.0])[0]
    m = r.get("spec_mean_accepted_length", 1.0)
    # A step makes m tokens per request in batch * m / tg seconds; a plain one batch / plain.
    step = m * plain[batch] / tg
    print(f"{batch:>5}{forced:>7}{first:>7.3f}{a:>8.3f}{k:>3}{m:>9.2f}{tg:>9.2f}"
          f"{tg / plain[batch]:>8.2f}{step:>11.2f}{experts:>14.1f}{uniform_union(tokens):>8.1f}")
    if k > 0 and float(forced) == 0.0:
        zero_cost[(batch, k)] = step
print()
for (batch, k), cost in sorted(zero_cost.items()):
    if expected(1.0, k) < cost:
        print(f"batch {batch}, k={k}: a step costs {cost:.2f} plain steps at acceptance 0; "
              f"never pays ({k + 1} tokens a step at most)")
        continue
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid, k) < cost else (lo, mid)
    print(f"batch {batch}, k={k}: a step costs {cost:.2f} plain steps at acceptance 0; "
          f"break-even acceptance {hi:.3f}")
PY
