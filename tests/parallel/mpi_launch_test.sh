#!/usr/bin/env bash
# `mpirun -np 2 pagoda generate/serve ... --tensor-parallel-size 2`: each MPI process one rank.
# The reference is one process: greedy tokens must be identical. Scenarios (one CTest each):
#   generate         both ranks on this machine (Open MPI's shared-memory transport)
#   veth             rank 1 in its own network namespace, joined to rank 0's by a veth pair, so
#                    that every byte between the ranks crosses TCP as between two machines
#   veth-netem       the same with 2 ms of netem delay each way
#   killed-follower  rank 1 killed mid-generation: the job ends non-zero, soon, naming rank 1
#   killed-stage     the same at -pp 2 (rank 1 is the last stage, links queued on both sides)
#   serve            serve answers as one process; rank 1 killed during two long requests (one
#                    streamed): both answered with an OpenAI-style 503 error, a new request
#                    503 or refused, and the server exits non-zero
#   serve-pipeline   the same at -pp 2, with two batches in flight when rank 1 dies
#   size-mismatch    -np 2 with --tensor-parallel-size 3 (or -tp 2 -pp 2) is refused with the reason
#   pipeline         -np 2 -pp 2 and -np 4 -tp 2 -pp 2: stages linked by splits of the MPI world,
#                    P batches in flight (MPI_THREAD_MULTIPLE: the links queue their sends)
#   pipeline-veth    -np 2 -pp 2 with the second stage across the veth pair, 2 batches in flight
#   deepseek         a tiny DeepSeek-V3 (MLA, MoE, an MTP layer in the files) at -np 2 -tp 2
#                    (experts split over MPI ranks) and -np 2 -pp 2
# Exit 77 (skipped, with the reason) where mpirun cannot start ranks, or, for the veth
# scenarios, without root, iproute2 or network namespaces (and netem, for veth-netem).
#   mpi_launch_test.sh MPIEXEC PAGODA SCENARIO
set -u
mpiexec=$1
pagoda=$2
scenario=$3

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# CMA (process_vm_readv) is often forbidden in containers; see run_mpi_test.sh.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpi=("$mpiexec" --oversubscribe)
if [ "$(id -u)" = 0 ]; then mpi+=(--allow-run-as-root); fi

skip() {
  echo "SKIP: $*"
  exit 77
}
die() {
  echo "FAIL: $*"
  exit 1
}

scratch=$(mktemp -d /tmp/pagoda-mpi-launch.XXXXXX)
namespaces=()
cleanup() {
  for ns in "${namespaces[@]}"; do ip netns delete "$ns" 2>/dev/null; done
  rm -rf "$scratch"
}
trap cleanup EXIT

if ! probe=$(timeout 60 "${mpi[@]}" -np 2 true 2>&1); then
  skip "$mpiexec cannot start 2 ranks on this machine: $probe"
fi

model=$scratch/llama
"$pagoda" make-model --out "$model" --arch LlamaForCausalLM --hidden-size 128 \
  --intermediate-size 256 --num-layers 2 --num-heads 4 --num-kv-heads 4 --vocab-size 509 \
  --max-position-embeddings 4096 --seed 11 >/dev/null 2>&1 || die "make-model failed"

generate=(generate --model "$model" --prompt "Once upon" --prompt "a time 7" --max-tokens 16
  --temperature 0 --ignore-eos --json)

# The reference: one process.
reference() {
  timeout 120 "$pagoda" "${generate[@]}" >"$scratch/one.txt" 2>"$scratch/one.err" ||
    die "one process failed: $(cat "$scratch/one.err")"
}

# $1: what ran; the tokens in $scratch/two.txt against one process's. $2: the communication
# summary's title (TP 2 by default); $3: the world size; $4: the stages, whose number of
# batches must have been in flight at once (a pipeline).
expect_same_tokens() {
  local summary=${2:-tensor parallel (2 ranks)} size=${3:-2} stages=${4:-}
  [ "$(wc -l <"$scratch/two.txt")" = 2 ] || die "$1: not two outputs: $(cat "$scratch/two.txt")"
  cmp -s "$scratch/one.txt" "$scratch/two.txt" ||
    die "$1: tokens differ from one process: $(cat "$scratch/one.txt") vs $(cat "$scratch/two.txt")"
  grep -qF "$summary communication" "$scratch/two.err" ||
    die "$1: no communication summary: $(cat "$scratch/two.err")"
  for rank in $(seq 1 $((size - 1))); do
    grep -q "rank $rank of $size over MPI" "$scratch/two.err" ||
      die "$1: rank $rank did not join over MPI: $(cat "$scratch/two.err")"
  done
  if [ -n "$stages" ]; then
    grep -qF "at most $stages of $stages batches in flight" "$scratch/two.err" ||
      die "$1: not $stages batches in flight: $(grep communication "$scratch/two.err")"
  fi
  echo "$1: tokens identical to one process"
  grep "communication" "$scratch/two.err"
}

# The pid of the pagoda process that is MPI rank $1 of this test (its model path is ours).
rank_pid() {
  for pid in $(pgrep -x pagoda); do
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qxF "$model" || continue
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
      echo "$pid" && return 0
  done
  return 1
}

# Waits up to $2 seconds for file $1 to contain $3.
wait_for() {
  for _ in $(seq 1 $(($2 * 10))); do
    grep -q "$3" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

# Rank 1 in namespace B, rank 0 (and mpirun) in namespace A, joined by a veth pair; $1: netem
# delay ("" for none); the rest: the parallel flags (-tp 2 by default). Open MPI starts the remote rank's daemon through a launcher script that
# enters namespace B where ssh would log in to another machine.
run_over_veth() {
  [ "$(id -u)" = 0 ] || skip "network namespaces need root"
  local parallel=("${@:2}")
  [ ${#parallel[@]} -gt 0 ] || parallel=(--tensor-parallel-size 2)
  command -v ip >/dev/null || skip "no ip (iproute2)"
  local a=pgmpi-a-$$ b=pgmpi-b-$$ va=pgva$$ vb=pgvb$$
  ip netns add "$a" 2>"$scratch/ip.err" || skip "cannot create a network namespace: $(cat "$scratch/ip.err")"
  namespaces+=("$a")
  ip netns add "$b" || die "ip netns add $b"
  namespaces+=("$b")
  ip link add "$va" type veth peer name "$vb" 2>"$scratch/ip.err" ||
    skip "cannot create a veth pair: $(cat "$scratch/ip.err")"
  if ! { ip link set "$va" netns "$a" && ip link set "$vb" netns "$b" &&
    ip -n "$a" addr add 10.233.77.1/24 dev "$va" && ip -n "$b" addr add 10.233.77.2/24 dev "$vb" &&
    ip -n "$a" link set "$va" up && ip -n "$b" link set "$vb" up &&
    ip -n "$a" link set lo up && ip -n "$b" link set lo up; }; then
    die "veth setup failed"
  fi
  if [ -n "$1" ]; then
    ip netns exec "$a" tc qdisc add dev "$va" root netem delay "$1" 2>"$scratch/tc.err" ||
      skip "no netem here (tc qdisc add ... netem: $(cat "$scratch/tc.err"))"
    ip netns exec "$b" tc qdisc add dev "$vb" root netem delay "$1" || die "netem on $vb"
    echo "netem: $1 each way between 10.233.77.1 and 10.233.77.2"
  fi
  local agent=$scratch/enter_namespace.sh
  cat >"$agent" <<EOF
#!/bin/sh
# Called by mpirun as ssh would be: [options] HOST COMMAND...; HOST is always rank 1's.
while [ "\${1#-}" != "\$1" ]; do shift; done
shift
exec ip netns exec $b sh -c "\$*"
EOF
  chmod +x "$agent"
  timeout 120 ip netns exec "$a" "${mpi[@]}" -np 2 --host 10.233.77.1:1,10.233.77.2:1 \
    --mca plm_rsh_agent "$agent" --mca btl tcp,self \
    --mca btl_tcp_if_include 10.233.77.0/24 --mca oob_tcp_if_include 10.233.77.0/24 \
    "$pagoda" "${generate[@]}" "${parallel[@]}" --log-level info >"$scratch/two.txt" 2>"$scratch/two.err" ||
    die "mpirun across namespaces failed: $(cat "$scratch/two.err")"
}

# Rank 1 killed with SIGKILL mid-generation; $@: the parallel flags. mpirun must exit non-zero
# within 30 s, naming rank 1.
kill_rank_1_mid_generation() {
  timeout 120 "${mpi[@]}" -np 2 "$pagoda" generate --model "$model" --prompt "Once upon" \
    --max-tokens 4000 --ignore-eos --temperature 0 "$@" --log-level info \
    >"$scratch/two.txt" 2>"$scratch/two.err" &
  job=$!
  wait_for "$scratch/two.err" 60 "KV cache sized" || die "the engine did not start: $(cat "$scratch/two.err")"
  sleep 0.3
  pid=$(rank_pid 1) || die "no rank 1 process"
  kill -9 "$pid"
  start=$(date +%s)
  wait "$job"
  code=$?
  took=$(($(date +%s) - start))
  echo "mpirun exited $code, $took s after rank 1 was killed"
  [ "$code" != 0 ] || die "mpirun exited 0 after rank 1 was killed"
  [ "$code" != 124 ] || die "the job hung after rank 1 was killed: $(cat "$scratch/two.err")"
  [ "$took" -lt 30 ] || die "the job took $took s to stop"
  grep -q "rank 1" "$scratch/two.err" || die "the error does not name rank 1: $(cat "$scratch/two.err")"
}

# serve under mpirun with the parallel flags $@: a completion answers as one process, then rank
# 1 is killed during two long requests (one streamed).
serve_and_kill_rank_1() {
  reference
  timeout 120 "${mpi[@]}" -np 2 "$pagoda" serve "$model" --host 127.0.0.1 --port 0 "$@" \
    --log-level info >"$scratch/serve.out" 2>"$scratch/serve.err" &
  job=$!
  wait_for "$scratch/serve.err" 60 "listening on http://127.0.0.1:" ||
    die "the server did not start: $(cat "$scratch/serve.err")"
  port=$(grep -o "listening on http://127.0.0.1:[0-9]*" "$scratch/serve.err" | head -1 | grep -o "[0-9]*$")
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$port/health")" = 200 ] && break
    sleep 0.1
  done
  body='{"model":"'"$model"'","prompt":"Once upon","max_tokens":16,"temperature":0,"ignore_eos":true}'
  answer=$(curl -sS -m 60 -H "Content-Type: application/json" -d "$body" \
    "http://127.0.0.1:$port/v1/completions") || die "the completion failed: $answer"
  want=$(head -1 "$scratch/one.txt" | python3 -c "import json,sys; print(json.load(sys.stdin)['text'])")
  got=$(echo "$answer" | python3 -c "import json,sys; print(json.load(sys.stdin)['choices'][0]['text'])") ||
    die "not a completion: $answer"
  [ "$got" = "$want" ] || die "served '$got', one process generates '$want'"
  echo "served the text one process generates"
  # Two requests in flight (one streamed) when rank 1 dies: each gets a 503 with an OpenAI
  # error object (the stream: an error event), not a dropped connection.
  long='{"model":"'"$model"'","prompt":"Once upon","max_tokens":4000,"temperature":0,"ignore_eos":true'
  curl -sS -m 60 -o "$scratch/plain.body" -w "%{http_code}" -H "Content-Type: application/json" \
    -d "$long}" "http://127.0.0.1:$port/v1/completions" >"$scratch/plain.code" 2>"$scratch/plain.err" &
  plain=$!
  curl -sS -N -m 60 -o "$scratch/stream.body" -H "Content-Type: application/json" \
    -d "$long"',"stream":true}' "http://127.0.0.1:$port/v1/completions" 2>"$scratch/stream.err" &
  stream=$!
  wait_for "$scratch/stream.body" 30 '"text"' || die "the stream did not start: $(cat "$scratch/stream.err")"
  kill -0 "$plain" 2>/dev/null || die "the long request ended before rank 1 was killed"
  pid=$(rank_pid 1) || die "no rank 1 process"
  kill -9 "$pid"
  start=$(date +%s)
  wait "$plain" || die "the request in flight got no answer: $(cat "$scratch/plain.err")"
  code=$(cat "$scratch/plain.code")
  echo "the request in flight when rank 1 died: HTTP $code $(cat "$scratch/plain.body")"
  [ "$code" = 503 ] || die "the request in flight answered $code: $(cat "$scratch/plain.body")"
  python3 -c "import json,sys; e=json.load(open(sys.argv[1]))['error']; assert e['type']=='ServiceUnavailableError' and 'mpirun' in e['message'], e" \
    "$scratch/plain.body" || die "not an OpenAI error object: $(cat "$scratch/plain.body")"
  # A new request: 503 while the server is still up, or refused once it has exited; never a
  # reset connection or a hang.
  curl -sS -o "$scratch/new.body" -w "%{http_code}" -m 30 -H "Content-Type: application/json" \
    -d "$body" "http://127.0.0.1:$port/v1/completions" >"$scratch/new.code" 2>"$scratch/new.err"
  curl_exit=$?
  code=$(cat "$scratch/new.code")
  echo "a new completion after rank 1 died: HTTP $code (curl exit $curl_exit)"
  [ "$code" = 503 ] || [ "$curl_exit" = 7 ] ||
    die "a new completion after rank 1 died: HTTP $code, curl exit $curl_exit: $(cat "$scratch/new.err")"
  wait "$stream"
  echo "the stream in flight ended with: $(tail -c 300 "$scratch/stream.body")"
  grep -q '"error".*ServiceUnavailableError' "$scratch/stream.body" ||
    die "the stream in flight did not end with an error event: $(tail -c 300 "$scratch/stream.body") $(cat "$scratch/stream.err")"
  wait "$job"
  code=$?
  took=$(($(date +%s) - start))
  echo "mpirun exited $code, $took s after rank 1 was killed"
  [ "$code" != 0 ] && [ "$code" != 124 ] || die "serve exited $code after rank 1 was killed"
  [ "$took" -lt 30 ] || die "the server took $took s to stop"
}

case "$scenario" in
  generate)
    reference
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -tp 2 --log-level info \
      >"$scratch/two.txt" 2>"$scratch/two.err" || die "mpirun failed: $(cat "$scratch/two.err")"
    expect_same_tokens "mpirun -np 2, one machine"
    ;;
  veth)
    reference
    run_over_veth ""
    expect_same_tokens "mpirun -np 2 across a veth pair"
    ;;
  veth-netem)
    reference
    run_over_veth 2ms
    expect_same_tokens "mpirun -np 2 across a veth pair with netem delay"
    ;;
  killed-follower)
    kill_rank_1_mid_generation -tp 2
    ;;
  killed-stage)
    kill_rank_1_mid_generation -pp 2
    ;;
  serve)
    serve_and_kill_rank_1 -tp 2
    ;;
  serve-pipeline)
    serve_and_kill_rank_1 -pp 2
    ;;
  size-mismatch)
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -tp 3 >"$scratch/two.txt" \
      2>"$scratch/two.err" && die "-np 2 with -tp 3 ran"
    grep -q "started as 2 MPI processes, but --tensor-parallel-size is 3" "$scratch/two.err" ||
      die "no reason given: $(cat "$scratch/two.err")"
    echo "refused: $(grep -m1 "started as 2 MPI" "$scratch/two.err")"
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -tp 2 -pp 2 >"$scratch/two.txt" \
      2>"$scratch/two.err" && die "-np 2 with -tp 2 -pp 2 ran"
    grep -q "started as 2 MPI processes, but --tensor-parallel-size 2 x --pipeline-parallel-size 2 is 4" \
      "$scratch/two.err" || die "no reason given: $(cat "$scratch/two.err")"
    echo "refused: $(grep -m1 "started as 2 MPI" "$scratch/two.err")"
    ;;
  pipeline)
    reference
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -pp 2 --log-level info \
      >"$scratch/two.txt" 2>"$scratch/two.err" || die "mpirun -pp 2 failed: $(cat "$scratch/two.err")"
    expect_same_tokens "mpirun -np 2 -pp 2" "pipeline parallel (2 stages x 1 tensor-parallel ranks)" 2 2
    timeout 240 "${mpi[@]}" -np 4 "$pagoda" "${generate[@]}" -tp 2 -pp 2 --log-level info \
      >"$scratch/two.txt" 2>"$scratch/two.err" ||
      die "mpirun -tp 2 -pp 2 failed: $(cat "$scratch/two.err")"
    expect_same_tokens "mpirun -np 4 -tp 2 -pp 2" \
      "pipeline parallel (2 stages x 2 tensor-parallel ranks)" 4 2
    ;;
  deepseek)
    model=$scratch/deepseek
    "$pagoda" make-model --out "$model" --preset tiny-deepseek-v3 --seed 5 >/dev/null 2>&1 ||
      die "make-model failed"
    generate=(generate --model "$model" --prompt "Once upon" --prompt "a time 7" --max-tokens 16
      --temperature 0 --ignore-eos --json)
    reference
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -tp 2 --log-level info \
      >"$scratch/two.txt" 2>"$scratch/two.err" || die "mpirun -tp 2 failed: $(cat "$scratch/two.err")"
    expect_same_tokens "DeepSeek-V3, mpirun -np 2 -tp 2"
    timeout 120 "${mpi[@]}" -np 2 "$pagoda" "${generate[@]}" -pp 2 --log-level info \
      >"$scratch/two.txt" 2>"$scratch/two.err" || die "mpirun -pp 2 failed: $(cat "$scratch/two.err")"
    expect_same_tokens "DeepSeek-V3, mpirun -np 2 -pp 2" \
      "pipeline parallel (2 stages x 1 tensor-parallel ranks)" 2 2
    ;;
  pipeline-veth)
    reference
    run_over_veth "" --pipeline-parallel-size 2
    expect_same_tokens "mpirun -np 2 -pp 2 across a veth pair" \
      "pipeline parallel (2 stages x 1 tensor-parallel ranks)" 2 2
    ;;
  *)
    die "unknown scenario $scenario"
    ;;
esac
echo PASS
