#!/usr/bin/env bash
# Installs every Debian package Pagoda builds, tests and benchmarks with.
# Safe to run again: apt-get skips what is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  ccache mold                                          # compiler cache, fast linker (tests)
  nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libfmt-dev libcli11-dev
  libboost1.81-dev libssl-dev                          # HTTP server (Beast/Asio), TLS
  libyaml-cpp-dev                                      # vLLM's --config FILE.yaml
  libpcre2-dev libutf8proc-dev libnuma-dev
  nettle-dev                                           # SHA-256 for prefix-cache block hashes
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-numpy python3-jinja2 python3-torch   # test references only
  prometheus                                           # promtool parses /metrics in tests
  curl
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the reference tokenizer and the OpenAI SDK in tests; keep an existing install.
if ! command -v node >/dev/null 2>&1; then missing+=(nodejs npm); fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
