#!/usr/bin/env bash
# Installs the Debian packages Pagoda needs.
#   scripts/install_deps.sh           building and running (what scripts/setup.sh needs)
#   scripts/install_deps.sh --tests   that, and what the test suite and benchmarks use: the test
#                                     frameworks, the references the tests compare against
#                                     (PyTorch, jinja2, Node's HF tokenizers and OpenAI SDK),
#                                     promtool, and ccache/mold for fast rebuilds
# Safe to run again: apt-get skips what is already there. Works on amd64 and arm64 Debian 12
# (scripts/check-arm64-install.sh runs it in an arm64 root under qemu).
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
  ccache clang-format                                  # compiler cache, formatting
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-jinja2                 # test references only
  python3-cryptography                                 # the encrypted weight format, re-read
  curl openssl                                         # the tests' HTTPS certificates
  iproute2                                             # ip netns / tc netem: MPI ranks over veth
)
# Test-only packages that a mirror may not carry for this machine's architecture (a partial
# mirror, a port without them): installed where apt has a candidate, otherwise named with what
# goes without them. Each test that needs one checks for it when it runs and skips with a message.
declare -A optional_tests=(
  [python3-torch]="the PyTorch logits checks (model.logits_match_pytorch, deepseek.logits_match_pytorch*) skip"
  [prometheus]="deploy.prometheus skips its promtool checks"
  [mold]="the build links with the default linker (slower links)"
)
# The AArch64 kernels, cross-built and tested under qemu (scripts/cross-build.sh, tests/cross):
# on x86-64 only, with Debian's arm64 libraries through multiarch.
cross_aarch64=(
  g++-aarch64-linux-gnu qemu-user
  libfmt-dev:arm64 libspdlog-dev:arm64 libnuma-dev:arm64 libgtest-dev:arm64
  libpcre2-dev:arm64 libutf8proc-dev:arm64 libssl-dev:arm64  # the model's rooms (tokenizer, crypto)
)

packages=("${build_and_run[@]}")
optional=()
with_tests=0
case "${1:-}" in
  --tests)
    with_tests=1
    packages+=("${tests[@]}")
    optional+=("${!optional_tests[@]}")
    if [ "$(dpkg --print-architecture)" = amd64 ]; then packages+=("${cross_aarch64[@]}"); fi
    ;;
  "") ;;
  *) echo "usage: $0 [--tests]" >&2; exit 2 ;;
esac

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

is_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# apt's candidate for PACKAGE from this machine's sources: empty when apt knows no such package
# for the architecture, "(none)" when it knows one it may not install (pinned to -1, say).
has_candidate() {
  local candidate
  candidate=$(apt-cache policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: //p')
  [ -n "$candidate" ] && [ "$candidate" != "(none)" ]
}

missing=()
for p in "${packages[@]}"; do is_installed "$p" || missing+=("$p"); done
missing_optional=()
for p in "${optional[@]}"; do is_installed "$p" || missing_optional+=("$p"); done
# Node.js runs the reference tokenizer and the OpenAI SDK in tests; keep an existing install.
if [ "$with_tests" = 1 ] && ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi

if [ $((${#missing[@]} + ${#missing_optional[@]})) -eq 0 ]; then exit 0; fi
case " ${missing[*]}" in
  *:arm64*)
    dpkg --print-foreign-architectures | grep -qx arm64 ||
      "${sudo_cmd[@]}" dpkg --add-architecture arm64
    ;;
esac
"${sudo_cmd[@]}" apt-get update -qq

arch=$(dpkg --print-architecture)
unavailable=()
for p in "${missing[@]}"; do has_candidate "$p" || unavailable+=("$p"); done
if [ ${#unavailable[@]} -gt 0 ]; then
  echo "$0: not available for $arch from this machine's apt sources: ${unavailable[*]}" >&2
  echo "  (check /etc/apt/sources.list*: Debian 12 'bookworm', component main, a mirror carrying $arch)" >&2
  exit 1
fi
for p in "${missing_optional[@]}"; do
  if has_candidate "$p"; then
    missing+=("$p")
  else
    echo "not installing $p: not available for $arch from this machine's apt sources; ${optional_tests[$p]}"
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
