#!/usr/bin/env bash
# Speculative decoding at forced acceptance rates (docs/speculative_decoding.md, "Measuring").
# Random weights accept nothing, so the drafts are built from the target (`pagoda make-draft`):
#   copy       the target itself                       acceptance 1, costs a target step per draft
#   noise=X    the target + X * rms(w) * N(0,1)        acceptance falls as X grows (~0.9, ~0.5)
#   Nl         the target's first N layers (cheap)     whatever they agree on
#   Nl+noise   the same with noise
#   random     N layers of unrelated weights           acceptance ~0 (`make-draft --randomize`)
# For each: decode tok/s with and without --speculative-config (pagoda bench latency, greedy,
# batch 1), the acceptance rate, the tok/s ratio, and the step cost relative to a plain step.
# From the random draft's step cost (acceptance 0: a verification of k drafts plus k steps of
# the small draft) it prints the break-even acceptance of each draft size, under the usual
# independent-acceptance model (expected tokens per step (1 - a^(k+1)) / (1 - a)).
#
# Run on a quiet machine:
#   bench/spec_decode_acceptance.sh ./build/pagoda /work/bench-models/dsc13 /tmp/specbench dense
#   bench/spec_decode_acceptance.sh ./build/pagoda "" /tmp/specbench moe        # generates it
# Environment: K (drafts per step, 4), THREADS (--threads, all), OUTPUT_LEN (128),
# INPUT_LEN (64), ITERS (3), NOISES ("0.02 0.05 0.1 0.2 0.4"), DRAFT_LAYERS (2),
# QUANT (-q value, none), KS (k sweep with the random draft, "1 2 4 8").
set -euo pipefail

PAGODA=${1:?usage: $0 PAGODA TARGET_DIR WORK_DIR dense|moe}
TARGET=${2:-}
WORK=${3:?work directory}
SHAPE=${4:-dense}
K=${K:-4}
OUTPUT_LEN=${OUTPUT_LEN:-128}
INPUT_LEN=${INPUT_LEN:-64}
ITERS=${ITERS:-3}
NOISES=${NOISES:-"0.02 0.05 0.1 0.2 0.4"}
DRAFT_LAYERS=${DRAFT_LAYERS:-2}
KS=${KS:-"1 2 4 8"}
mkdir -p "$WORK"

engine_flags=(--max-model-len $((INPUT_LEN + OUTPUT_LEN + 16)))
[[ -n "${THREADS:-}" ]] && engine_flags+=(--threads "$THREADS")
[[ -n "${QUANT:-}" ]] && engine_flags+=(-q "$QUANT")

if [[ -z "$TARGET" ]]; then
  TARGET=$WORK/target-$SHAPE
  if [[ ! -f $TARGET/config.json ]]; then
    if [[ $SHAPE == moe ]]; then
      # DeepSeek-V2-Lite's MLA and MoE (64 routed experts, 6 per token, 2 shared), 4 layers.
      "$PAGODA" make-model --preset deepseek-v2-lite --num-layers ${MOE_LAYERS:-4} --out "$TARGET"
    else
      "$PAGODA" make-model --preset ds-coder-1.3b --out "$TARGET"
    fi
  fi
fi
layers=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" \
  "$TARGET/config.json")

make_draft() {  # name, make-draft flags...
  local dir=$WORK/draft-$SHAPE-$1
  shift
  [[ -f $dir/model.safetensors ]] || "$PAGODA" make-draft --from "$TARGET" --out "$dir" "$@" >&2
  echo "$dir"
}

latency() {  # out.json [--speculative-config JSON]
  local out=$1
  shift
  "$PAGODA" bench latency --model "$TARGET" "${engine_flags[@]}" --batch-size 1 \
    --input-len "$INPUT_LEN" --output-len "$OUTPUT_LEN" --num-iters "$ITERS" --json "$@" \
    2>/dev/null | sed -n '/^{/,/^}/p' > "$out"
}

spec() {  # draft dir, k
  printf '{"method": "draft_model", "model": "%s", "num_speculative_tokens": %d}' "$1" "$2"
}

results=$WORK/results-$SHAPE.tsv
: > "$results"
run_case() {  # label, draft dir, k
  local json=$WORK/$SHAPE-$1-k$3.json
  latency "$json" --speculative-config "$(spec "$2" "$3")"
  local bytes
  bytes=$(du -bc "$2"/*.safetensors | tail -1 | cut -f1)
  printf '%s\t%s\t%s\t%s\n' "$1" "$3" "$bytes" "$json" >> "$results"
}

latency "$WORK/$SHAPE-plain.json"
target_bytes=$(du -bc "$TARGET"/*.safetensors | tail -1 | cut -f1)
run_case copy "$TARGET" "$K"
for noise in $NOISES; do
  run_case "noise=$noise" "$(make_draft "noise$noise" --noise "$noise" --seed 1)" "$K"
done
small=$(make_draft "${DRAFT_LAYERS}l" --num-layers "$DRAFT_LAYERS")
run_case "${DRAFT_LAYERS}l" "$small" "$K"
for noise in $NOISES; do
  run_case "${DRAFT_LAYERS}l+noise=$noise" \
    "$(make_draft "${DRAFT_LAYERS}l-noise$noise" --num-layers "$DRAFT_LAYERS" --noise "$noise" \
      --seed 1)" "$K"
done
# The target's shape, scale and tokenizer, DRAFT_LAYERS layers, unrelated weights.
random=$(make_draft "${DRAFT_LAYERS}l-random" --num-layers "$DRAFT_LAYERS" --randomize --seed 99)
for k in $KS; do run_case random "$random" "$k"; done
# Plain again at the end: the drift between the two bounds what the ratios can say.
latency "$WORK/$SHAPE-plain-again.json"

python3 - "$WORK/$SHAPE-plain.json" "$WORK/$SHAPE-plain-again.json" "$results" "$target_bytes" \
  "$K" "$layers" <<'PY'
import json, sys
plain = json.load(open(sys.argv[1]))["tg_tokens_per_s"]
again = json.load(open(sys.argv[2]))["tg_tokens_per_s"]
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[3])]
target_bytes = float(sys.argv[4]); K = int(sys.argv[5]); layers = int(sys.argv[6])
print(f"target {layers} layers, {target_bytes / 1e9:.2f} GB of weights; plain decode "
      f"{plain:.2f} tok/s (again at the end: {again:.2f})")
plain_experts = json.load(open(sys.argv[1])).get("decode_routed_experts_per_layer")
if plain_experts is not None:
    print(f"plain decode step: {plain_experts:.1f} distinct routed experts per MoE layer")
print(f"{'draft':<22}{'k':>3}{'draft/target':>14}{'accept':>8}{'mean len':>9}"
      f"{'tok/s':>9}{'ratio':>7}{'step/plain':>11}{'experts':>8}")
def expected(a, k):
    return k + 1 if a >= 1 else (1 - a ** (k + 1)) / (1 - a)
step_cost = {}
for label, k, bytes_, path in rows:
    r = json.load(open(path)); k = int(k)
    a = r.get("spec_acceptance_rate", 0.0); m = r.get("spec_mean_accepted_length", 1.0)
    tg = r["tg_tokens_per_s"]
    # A step makes m tokens in m / tg seconds; a plain step makes one in 1 / plain.
    step = (m / tg) * plain
    size = float(bytes_) / target_bytes
    # MoE targets: distinct routed experts per MoE layer and verify step (plain: plain_experts).
    experts = r.get("verify_routed_experts_per_layer")
    experts = f"{experts:>8.1f}" if experts is not None else f"{'-':>8}"
    print(f"{label:<22}{k:>3}{size:>14.3f}{a:>8.3f}{m:>9.2f}{tg:>9.2f}{tg / plain:>7.2f}"
          f"{step:>11.2f}{experts}")
    if label == "random":
        step_cost[k] = (step, size)
if K in step_cost:
    step, size = step_cost[K]
    # The random draft's step: verify k (v) + k draft steps costing `size` of a target step
    # each, if the draft is bandwidth-bound like the target.
    verify = step - K * size
    print(f"\nk={K}: a step with the random {size:.3f}-size draft costs {step:.2f} plain steps; "
          f"verification alone ~{verify:.2f} (draft steps taken as {size:.3f} each)")
    for name, c in [("free draft", 0.0), (f"{size:.3f}-size draft", size), ("copy (1.0)", 1.0)]:
        need = verify + K * c
        lo, hi = 0.0, 1.0
        if expected(1.0, K) < need:
            print(f"  break-even, {name}: never ({K + 1} tokens a step < {need:.2f} steps)")
            continue
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if expected(mid, K) < need else (lo, mid)
        print(f"  break-even acceptance, {name}: {hi:.3f}")
PY
