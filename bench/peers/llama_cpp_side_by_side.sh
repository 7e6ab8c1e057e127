#!/usr/bin/env bash
# Pagoda and llama.cpp side by side on the same GGUF files: llama-bench's pp (prompt tokens/s)
# and tg (generated tokens/s) against `pagoda bench latency`'s pp_tokens_per_s / tg_tokens_per_s
# at batch 1, run interleaved (llama.cpp, pagoda, llama.cpp, pagoda, ...) so that drift in the
# machine's load hits both alike. Builds nothing and downloads nothing.
# llama-bench's tg test generates from an empty cache (depth 0 .. n-1), so pagoda's tg comes from
# its own run with a 1-token prompt (depth 1 .. n), not from after the pp prompt, where every
# step would also read the prompt's KV cache.
#
# usage: bench/peers/llama_cpp_side_by_side.sh [options] LLAMA_CPP_BIN_DIR MODEL.gguf [MODEL.gguf ...]
#   LLAMA_CPP_BIN_DIR   directory holding llama-bench (e.g. /path/to/llama.cpp/build/bin)
#   -p N                prompt tokens (default 512)
#   -n N                generated tokens (default 128)
#   -t N                threads for both engines (default: nproc)
#   -r N                rounds per engine and file (default 2)
#   --pagoda PATH       the pagoda binary (default: build/pagoda beside this script's repo)
#   --out DIR           keep every run's JSON there (default: a temporary directory)
#   --best              report each engine's best round instead of the median (the "best of N"
#                       convention: on a shared machine the best round is the least disturbed)
#   --summary-json FILE also write the printed figures as JSON (for scripts that build a table)
# Prints one line per engine and file: median (or best) pp and tg tokens/s, and pagoda / llama.cpp
# ratios, under the file's type mix as llama-bench names it ("Q4_K - Medium": a K-quant file
# mixes types, e.g. Q4_K with Q6_K and, where a row is not a multiple of 256, Q5_0 / Q8_0).
# Any file both engines load works (F16, BF16, Q8_0, Q5_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K).
set -euo pipefail

prompt_len=512
gen_len=128
threads=$(nproc)
rounds=2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pagoda="$repo/build/pagoda"
out=""
stat=median
summary_json=""
args=()
while (($#)); do
  case "$1" in
    -p) prompt_len=$2; shift 2 ;;
    -n) gen_len=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --pagoda) pagoda=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --best) stat=best; shift ;;
    --summary-json) summary_json=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ((${#args[@]} < 2)); then
  echo "usage: $0 [options] LLAMA_CPP_BIN_DIR MODEL.gguf [MODEL.gguf ...] (see --help)" >&2
  exit 2
fi
llama_bench="${args[0]}/llama-bench"
models=("${args[@]:1}")
[[ -x "$llama_bench" ]] || { echo "$llama_bench: not an executable" >&2; exit 2; }
[[ -x "$pagoda" ]] || { echo "$pagoda: not an executable (pass --pagoda)" >&2; exit 2; }
for m in "${models[@]}"; do [[ -f "$m" ]] || { echo "$m: no such file" >&2; exit 2; }; done
if [[ -z "$out" ]]; then
  out=$(mktemp -d -t pagoda-vs-llama-cpp.XXXXXX)
fi
mkdir -p "$out"
PY=/usr/bin/python3

run_llama() {  # model round
  local f="$out/llama.$(basename "$1").$2.json"
  if "$llama_bench" -m "$1" -t "$threads" -p "$prompt_len" -n "$gen_len" -r 1 -o json >"$f" 2>"$f.log"; then
    echo ok
  else
    echo "llama-bench failed on $1 (see $f.log)" >&2
    rm -f "$f"
  fi
}

run_pagoda() {  # model round test(pp|tg) input_len output_len
  local f="$out/pagoda.$(basename "$1").$2.$3.json"
  if "$pagoda" bench latency --model "$1" --threads "$threads" --batch-size 1 \
       --input-len "$4" --output-len "$5" --num-iters 1 --json >"$f" 2>"$f.log"; then
    echo ok
  else
    echo "pagoda bench latency failed on $1 (see $f.log)" >&2
    rm -f "$f"
  fi
}

for ((round = 0; round < rounds; round++)); do
  for m in "${models[@]}"; do
    echo "round $round: llama.cpp $(basename "$m")" >&2
    run_llama "$m" "$round" >/dev/null
    echo "round $round: pagoda    $(basename "$m")" >&2
    run_pagoda "$m" "$round" pp "$prompt_len" 1 >/dev/null
    run_pagoda "$m" "$round" tg 1 $((gen_len + 1)) >/dev/null
  done
done

# Summary: medians (or the best) over rounds. llama-bench -o json writes one object per test (pp
# then tg) with avg_ts; pagoda writes one object with pp_tokens_per_s and tg_tokens_per_s.
"$PY" - "$out" "$prompt_len" "$gen_len" "$threads" "$stat" "$summary_json" "${models[@]}" <<'PYEOF'
import glob, json, os, statistics, sys
out, p, n, t, stat = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
summary_json, models = sys.argv[6], sys.argv[7:]
summary = {"prompt_len": p, "gen_len": n, "threads": int(t), "stat": stat, "models": {}}

def med(xs):
    if not xs:
        return None
    return max(xs) if stat == "best" else statistics.median(xs)

def fmt(x):
    return "   failed" if x is None else f"{x:9.1f}"

def ratio(a, b):
    return "    -" if a is None or b is None or b == 0 else f"{a / b:5.2f}"

over = "best of" if stat == "best" else "median over"
print(f"pp{p} / tg{n}, {t} threads, tokens/s ({over} rounds); ratio = pagoda / llama.cpp")
print(f"{'model':32} {'engine':10} {'pp':>9} {'tg':>9}")
for m in models:
    base = os.path.basename(m)
    lpp, ltg, ppp, ptg = [], [], [], []
    model_type = None  # llama-bench's name of the file's type mix, e.g. "llama 1B Q4_K - Medium"
    for f in sorted(glob.glob(os.path.join(out, f"llama.{base}.*.json"))):
        for e in json.load(open(f)):
            model_type = e.get("model_type", model_type)
            if e.get("n_prompt") == p and e.get("n_gen") == 0:
                lpp.append(e["avg_ts"])
            elif e.get("n_gen") == n and e.get("n_prompt") == 0:
                ltg.append(e["avg_ts"])
    for f in sorted(glob.glob(os.path.join(out, f"pagoda.{base}.*.pp.json"))):
        ppp.append(json.load(open(f))["pp_tokens_per_s"])
    for f in sorted(glob.glob(os.path.join(out, f"pagoda.{base}.*.tg.json"))):
        ptg.append(json.load(open(f))["tg_tokens_per_s"])
    lp, lt, pp, pt = med(lpp), med(ltg), med(ppp), med(ptg)
    if model_type:
        print(f"{base} ({model_type})")
        base = ""
    print(f"{base:32} {'llama.cpp':10} {fmt(lp)} {fmt(lt)}")
    print(f"{'':32} {'pagoda':10} {fmt(pp)} {fmt(pt)}")
    print(f"{'':32} {'ratio':10} {ratio(pp, lp):>9} {ratio(pt, lt):>9}")
    summary["models"][m] = {"model_type": model_type,
                            "llama_cpp": {"pp": lp, "tg": lt, "rounds": len(lpp)},
                            "pagoda": {"pp": pp, "tg": pt, "rounds": len(ppp)}}
print(f"raw JSON: {out}")
if summary_json:
    with open(summary_json, "w") as f:
        json.dump(summary, f, indent=2)
PYEOF
