#!/usr/bin/env bash
# bench/spec_decode_moe.sh end to end on a tiny MoE model (tiny-deepseek-v3: 8 routed experts,
# top-2, one MoE layer, one MTP layer), timing nothing: the table has every row, forced
# acceptance 0 accepts nothing and 1 nearly everything, a plain step runs exactly one token's
# 2 experts and a verify step more, and each k gets a break-even line.
# Usage: spec_decode_moe_test.sh PAGODA SOURCE_DIR WORK_DIR
set -euo pipefail
PAGODA=$1
SOURCE=$2
WORK=$3
rm -rf "$WORK"
out=$(PRESET=tiny-deepseek-v3 LAYERS=2 KS="1 3" ACCEPTANCES="0 1" INPUT_LEN=16 OUTPUT_LEN=12 \
  ITERS=1 THREADS=1 QUANT=none "$SOURCE/bench/spec_decode_moe.sh" "$PAGODA" "$WORK")
echo "$out"
python3 - "$out" <<'PY'
import sys
lines = sys.argv[1].splitlines()
rows = [l.split() for l in lines if l.strip() and l.split()[0].isdigit()]
# batch forced first accept k tok/step tok/s speedup step/plain experts/layer uniform
by = {(r[1], r[4]): r for r in rows}
assert len(rows) == 5, rows  # plain, then forced 0 and 1 at k = 1 and 3
plain = by[("plain", "0")]
assert float(plain[9]) == 2.0, plain  # one token alone: its top-2 experts
for k in ("1", "3"):
    zero, one = by[("0", k)], by[("1", k)]
    assert float(zero[2]) == 0.0 and float(zero[3]) == 0.0 and float(zero[5]) == 1.0, zero
    assert float(one[2]) >= 0.9, one
    assert 2.0 < float(zero[9]) <= 8.0, zero  # the union over the 1 + k tokens
breaks = [l for l in lines if l.startswith("batch 1, k=")]
assert len(breaks) == 2, breaks
print("ok")
PY
