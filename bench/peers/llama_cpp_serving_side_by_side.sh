#!/usr/bin/env bash
# Pagoda and llama.cpp side by side as servers: `pagoda bench serve` (the same client, the same
# prompts) against `llama-server` and `pagoda serve` on the same GGUF file, one server at a time,
# run interleaved (llama.cpp, pagoda, llama.cpp, pagoda, ...) so that drift in the machine's load
# hits both alike. Reports output tokens/s and time to first token (mean, p99) of each engine.
# Both servers listen on 127.0.0.1 only; each is started, waited for (/health), measured and
# stopped by this script. Builds nothing and downloads nothing.
#
# usage: bench/peers/llama_cpp_serving_side_by_side.sh [options] LLAMA_CPP_BIN_DIR MODEL.gguf
#   LLAMA_CPP_BIN_DIR   directory holding llama-server (e.g. /path/to/llama.cpp/build/bin)
#   -c N                concurrent requests, and llama-server's slots (-np) (default 32)
#   --num-prompts N     requests in all (default 64)
#   -p N                prompt tokens per request (default 64)
#   -n N                generated tokens per request (default 32)
#   -t N                threads for both engines (default: nproc)
#   -r N                rounds per engine (default 2)
#   --best              report each engine's best round (by output tokens/s, with that round's
#                       TTFT) instead of the median
#   --port N            first of the two ports used (default 18431; llama-server N, pagoda N+1)
#   --pagoda PATH       the pagoda binary (default: build/pagoda beside this script's repo)
#   --out DIR           keep every run's output and server log there (default: a temporary one)
#   --summary-json FILE also write the printed figures as JSON
# llama-server runs with -np C -c max(8192, C x (p + n + 64)) -t T (continuous batching, its
# default); pagoda serve with --threads T and its defaults otherwise.
set -euo pipefail

concurrency=32
num_prompts=64
prompt_len=64
gen_len=32
threads=$(nproc)
rounds=2
stat=median
port=18431
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
pagoda="$repo/build/pagoda"
out=""
summary_json=""
args=()
while (($#)); do
  case "$1" in
    -c) concurrency=$2; shift 2 ;;
    --num-prompts) num_prompts=$2; shift 2 ;;
    -p) prompt_len=$2; shift 2 ;;
    -n) gen_len=$2; shift 2 ;;
    -t) threads=$2; shift 2 ;;
    -r) rounds=$2; shift 2 ;;
    --best) stat=best; shift ;;
    --port) port=$2; shift 2 ;;
    --pagoda) pagoda=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --summary-json) summary_json=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
if ((${#args[@]} != 2)); then
  echo "usage: $0 [options] LLAMA_CPP_BIN_DIR MODEL.gguf (see --help)" >&2
  exit 2
fi
llama_server="${args[0]}/llama-server"
model="${args[1]}"
[[ -x "$llama_server" ]] || { echo "$llama_server: not an executable" >&2; exit 2; }
[[ -x "$pagoda" ]] || { echo "$pagoda: not an executable (pass --pagoda)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "$model: no such file" >&2; exit 2; }
for n in "$concurrency" "$num_prompts" "$prompt_len" "$gen_len" "$rounds" "$port"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] || { echo "numeric options take positive integers, got '$n'" >&2; exit 2; }
done
command -v curl >/dev/null || { echo "curl is needed to wait for the servers" >&2; exit 2; }
if [[ -z "$out" ]]; then
  out=$(mktemp -d -t pagoda-vs-llama-cpp-serving.XXXXXX)
fi
mkdir -p "$out"
context=$((concurrency * (prompt_len + gen_len + 64)))
((context < 8192)) && context=8192
PY=/usr/bin/python3
base=$(basename "$model")

server_pid=""
stop_server() {
  if [[ -n "$server_pid" ]]; then
    kill -TERM "$server_pid" 2>/dev/null || true
    # A server still busy with a stream may take a while; give it 30 s, then end it.
    for _ in $(seq 300); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
  fi
}
trap stop_server EXIT

# Starts "$@" in the background, logging to $1 (shifted off), and waits until /health on $2
# (shifted off) answers 200: loading a model takes seconds to minutes.
start_server() {  # log port command...
  local log=$1 p=$2
  shift 2
  if curl -s -o /dev/null "http://127.0.0.1:$p/health"; then
    echo "port $p is already in use (pass --port)" >&2
    return 1
  fi
  "$@" >"$log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1200); do
    if ! kill -0 "$server_pid" 2>/dev/null; then
      echo "the server exited while starting (see $log)" >&2
      server_pid=""
      return 1
    fi
    if [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/health") == 200 ]]; then
      return 0
    fi
    sleep 0.5
  done
  echo "the server did not become ready in 10 minutes (see $log)" >&2
  stop_server
  return 1
}

run_client() {  # port result-file
  if ! "$pagoda" bench serve --base-url "http://127.0.0.1:$1" --num-prompts "$num_prompts" \
       --max-concurrency "$concurrency" --input-len "$prompt_len" --output-len "$gen_len" \
       --timeout 1800 --json >"$2" 2>"$2.log"; then
    echo "pagoda bench serve failed or had failed requests (see $2.log)" >&2
  fi
}

for ((round = 0; round < rounds; round++)); do
  echo "round $round: llama-server $base" >&2
  f="$out/llama.$base.$round.json"
  if start_server "$out/llama-server.$round.log" "$port" \
       "$llama_server" -m "$model" -np "$concurrency" -c "$context" -t "$threads" \
       --host 127.0.0.1 --port "$port" --no-webui; then
    run_client "$port" "$f"
    stop_server
  fi
  echo "round $round: pagoda serve $base" >&2
  f="$out/pagoda.$base.$round.json"
  if start_server "$out/pagoda-serve.$round.log" "$((port + 1))" \
       "$pagoda" serve --model "$model" --threads "$threads" --host 127.0.0.1 \
       --port "$((port + 1))"; then
    run_client "$((port + 1))" "$f"
    stop_server
  fi
done

"$PY" - "$out" "$base" "$stat" "$summary_json" <<'PYEOF'
import glob, json, os, statistics, sys
out, base, stat, summary_json = sys.argv[1:5]

def load(engine):
    runs = []
    for f in sorted(glob.glob(os.path.join(out, f"{engine}.{base}.*.json"))):
        try:
            r = json.load(open(f))
        except ValueError:
            continue
        if r.get("completed", 0) > 0:
            runs.append(r)
    return runs

def pick(runs):
    """The best run by output tokens/s (its TTFT with it), or each figure's median."""
    if not runs:
        return None
    fig = lambda r: {"output_tok_s": r["output_throughput"], "ttft_mean_s": r["ttft"]["mean_ms"] / 1e3,
                     "ttft_p99_s": r["ttft"]["p99_ms"] / 1e3, "failed": r["failed"],
                     "completed": r["completed"]}
    if stat == "best":
        return fig(max(runs, key=lambda r: r["output_throughput"]))
    figs = [fig(r) for r in runs]
    return {k: statistics.median(f[k] for f in figs) for k in figs[0]}

l, p = pick(load("llama")), pick(load("pagoda"))
first = (load("llama") + load("pagoda") or [{}])[0]
over = "best of" if stat == "best" else "median over"
print(f"{base}: {first.get('num_prompts')} requests, {first.get('max_concurrency')} concurrent, "
      f"{first.get('input_len')} prompt / {first.get('output_len')} output tokens ({over} rounds)")
print(f"{'engine':10} {'output tok/s':>12} {'TTFT mean s':>12} {'TTFT p99 s':>11} {'failed':>7}")
for name, r in (("llama.cpp", l), ("pagoda", p)):
    if r is None:
        print(f"{name:10} {'failed':>12}")
    else:
        print(f"{name:10} {r['output_tok_s']:12.2f} {r['ttft_mean_s']:12.1f} {r['ttft_p99_s']:11.1f} "
              f"{r['failed']:7.0f}")
if l and p and l["output_tok_s"] > 0:
    print(f"{'ratio':10} {p['output_tok_s'] / l['output_tok_s']:12.2f}")
print(f"raw output: {out}")
if summary_json:
    with open(summary_json, "w") as f:
        json.dump({"model": base, "stat": stat, "num_prompts": first.get("num_prompts"),
                   "max_concurrency": first.get("max_concurrency"),
                   "input_len": first.get("input_len"), "output_len": first.get("output_len"),
                   "llama_cpp": l, "pagoda": p}, f, indent=2)
PYEOF
