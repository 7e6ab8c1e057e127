#!/usr/bin/env bash
# Pagoda and llama.cpp side by side on batched decode: llama-batched-bench's one -npl point
# against `pagoda bench latency --batch-size` on the same GGUF file, run interleaved (llama.cpp,
# pagoda, llama.cpp, pagoda, ...) so that drift in the machine's load hits both alike. Both
# prefill the whole batch's prompts first, then decode every sequence one token per step:
# llama-batched-bench's S_PP / S_TG (prompt and generated tokens/s over all sequences) against
# pagoda's pp_tokens_per_s / tg_tokens_per_s. Builds nothing and downloads nothing.
# pagoda's decode figure counts the tokens after each sequence's first (the first comes out of
# the prefill step); llama-batched-bench times -ntg decode steps after its prefill.
#
# usage: bench/peers/llama_cpp_batched_side_by_side.sh [options] LLAMA_CPP_BIN_DIR MODEL.gguf
#   LLAMA_CPP_BIN_DIR   directory holding llama-batched-bench (e.g. /path/to/llama.cpp/build/bin)
#   -b N                sequences in the batch (default 32)
#   -p N                prompt tokens per sequence (default 32)
#   -n N                generated tokens per sequence (default 32)
#   -t N                threads for both engines (default: nproc)
#   -r N                rounds per engine (default 2)
#   --best              report each engine's best round instead of the median
#   --pagoda PATH       the pagoda binary (default: build/pagoda beside this script's repo)
#   --out DIR           keep every run's output there (default: a temporary directory)
#   --summary-json FILE also write the printed figures as JSON
# llama-batched-bench runs with -c 4096 -b 2048 -ub 512 (raised to fit the batch when larger),
# pagoda with --num-iters 1 after its warm-up run.
set -euo pipefail

batch=32
prompt_len=32
gen_len=32
threads=$(nproc)
rounds=2
stat=median
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pagoda="$repo/build/pagoda"
out=""
summary_json=""
args=()
while (($#)); do
  case "$1" in
    -b) batch=$2; shift 2 ;;
    -p) prompt_len=$2; shift 2 ;;
    -n) gen_len=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --best) stat=best; shift ;;
    --pagoda) pagoda=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --summary-json) summary_json=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ((${#args[@]} != 2)); then
  echo "usage: $0 [options] LLAMA_CPP_BIN_DIR MODEL.gguf (see --help)" >&2
  exit 2
fi
batched_bench="${args[0]}/llama-batched-bench"
model="${args[1]}"
[[ -x "$batched_bench" ]] || { echo "$batched_bench: not an executable" >&2; exit 2; }
[[ -x "$pagoda" ]] || { echo "$pagoda: not an executable (pass --pagoda)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "$model: no such file" >&2; exit 2; }
for n in "$batch" "$prompt_len" "$gen_len" "$rounds"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "-b, -p, -n and -r take positive integers, got '$n'" >&2; exit 2; }
done
if [[ -z "$out" ]]; then
  out=$(mktemp -d -t pagoda-vs-llama-cpp-batched.XXXXXX)
fi
mkdir -p "$out"
# llama.cpp's context must hold every sequence whole (its cache is split among -npl sequences).
context=$((batch * (prompt_len + gen_len)))
((context < 4096)) && context=4096
PY=/usr/bin/python3
base=$(basename "$model")

for ((round = 0; round < rounds; round++)); do
  echo "round $round: llama-batched-bench $base" >&2
  f="$out/llama.$base.$round.jsonl"
  if ! "$batched_bench" -m "$model" -c "$context" -b 2048 -ub 512 -npp "$prompt_len" \
       -ntg "$gen_len" -npl "$batch" -t "$threads" --output-format jsonl >"$f.log" 2>&1; then
    echo "llama-batched-bench failed (see $f.log)" >&2
  fi
  grep '^{' "$f.log" >"$f" || rm -f "$f"
  echo "round $round: pagoda bench latency $base" >&2
  f="$out/pagoda.$base.$round.json"
  if ! "$pagoda" bench latency --model "$model" --threads "$threads" --batch-size "$batch" \
       --input-len "$prompt_len" --output-len "$gen_len" --num-iters 1 --json >"$f" 2>"$f.log"; then
    echo "pagoda bench latency failed (see $f.log)" >&2
    rm -f "$f"
  fi
done

"$PY" - "$out" "$base" "$batch" "$prompt_len" "$gen_len" "$threads" "$stat" "$summary_json" <<'PYEOF'
import glob, json, os, statistics, sys
out, base, b, p, n, t, stat, summary_json = sys.argv[1:9]
b, p, n = int(b), int(p), int(n)

def pick(xs):
    if not xs:
        return None
    return max(xs) if stat == "best" else statistics.median(xs)

def fmt(x):
    return "   failed" if x is None else f"{x:9.1f}"

def ratio(a, c):
    return "    -" if a is None or c is None or c == 0 else f"{a / c:5.2f}"

lpp, ltg, ppp, ptg = [], [], [], []
for f in sorted(glob.glob(os.path.join(out, f"llama.{base}.*.jsonl"))):
    for line in open(f):
        e = json.loads(line)
        if e.get("pl") == b and e.get("pp") == p and e.get("tg") == n:
            lpp.append(e["speed_pp"])
            ltg.append(e["speed_tg"])
for f in sorted(glob.glob(os.path.join(out, f"pagoda.{base}.*.json"))):
    r = json.load(open(f))
    ppp.append(r["pp_tokens_per_s"])
    ptg.append(r["tg_tokens_per_s"])
lp, lt, pp, pt = pick(lpp), pick(ltg), pick(ppp), pick(ptg)
over = "best of" if stat == "best" else "median over"
print(f"{base}: {b} sequences x ({p} prompt + {n} generated), {t} threads, tokens/s over all "
      f"sequences ({over} rounds); ratio = pagoda / llama.cpp")
print(f"{'engine':10} {'prompt':>9} {'decode':>9}")
print(f"{'llama.cpp':10} {fmt(lp)} {fmt(lt)}")
print(f"{'pagoda':10} {fmt(pp)} {fmt(pt)}")
print(f"{'ratio':10} {ratio(pp, lp):>9} {ratio(pt, lt):>9}")
print(f"raw output: {out}")
if summary_json:
    with open(summary_json, "w") as f:
        json.dump({"model": base, "batch": b, "prompt_len": p, "gen_len": n, "threads": int(t),
                   "stat": stat,
                   "llama_cpp": {"pp": lp, "tg": lt, "rounds": len(lpp)},
                   "pagoda": {"pp": pp, "tg": pt, "rounds": len(ppp)}}, f, indent=2)
PYEOF
