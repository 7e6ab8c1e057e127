#!/usr/bin/env bash
# Installs the Debian packages Pagoda needs.
#   scripts/install_deps.sh           building and running (what scripts/setup.sh needs)
#   scripts/install_deps.sh --tests   that, and what the test suite and benchmarks use: the test
#                                     frameworks, the references the tests compare against
#                                     (PyTorch, jinja2, Node's HF tokenizers and OpenAI SDK),
#                                     promtool, and ccache/mold for fast rebuilds
# Safe to run again: apt-get skips what is already there.
set -euo pipefail

build_and_run=(
  build-essential cmake ninja-build pkg-config git
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libcli11-dev
  libboost1.81-dev libssl-dev                          # HTTP server (Beast/Asio), TLS
  libyaml-cpp-dev                                      # vLLM's --config FILE.yaml
  libpcre2-dev libutf8proc-dev libnuma-dev
  nettle-dev                                           # SHA-256 for prefix-cache block hashes
  libcurl4-openssl-dev                                 # HTTPS downloads of models by name
  libopenmpi-dev openmpi-bin                           # ranks on several machines (mpirun)
  python3-dev pybind11-dev                             # the pagoda Python package
)
tests=(
  ccache mold clang-format                             # compiler cache, fast linker, formatting
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-jinja2 python3-torch   # test references only
  python3-cryptography                                 # the encrypted weight format, re-read
  prometheus                                           # promtool parses /metrics in tests
  curl openssl                                         # the tests' HTTPS certificates
  iproute2                                             # ip netns / tc netem: MPI ranks over veth
)
# The AArch64 kernels, cross-built and tested under qemu (scripts/cross-build.sh, tests/cross):
# on x86-64 only, with Debian's arm64 libraries through multiarch.
cross_aarch64=(
  g++-aarch64-linux-gnu qemu-user
  libfmt-dev:arm64 libspdlog-dev:arm64 libnuma-dev:arm64 libgtest-dev:arm64
  libpcre2-dev:arm64 libutf8proc-dev:arm64 libssl-dev:arm64  # the model's rooms (tokenizer, crypto)
)

packages=("${build_and_run[@]}")
with_tests=0
case "${1:-}" in
  --tests)
    with_tests=1
    packages+=("${tests[@]}")
    if [ "$(dpkg --print-architecture)" = amd64 ]; then packages+=("${cross_aarch64[@]}"); fi
    ;;
  "") ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the reference tokenizer and the OpenAI SDK in tests; keep an existing install.
if [ "$with_tests" = 1 ] && ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  case " ${missing[*]}" in
    *:arm64*)
      dpkg --print-foreign-architectures | grep -qx arm64 ||
        "${sudo_cmd[@]}" dpkg --add-architecture arm64
      ;;
  esac
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
