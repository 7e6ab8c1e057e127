#!/usr/bin/env bash
# Does scripts/install_deps.sh work on an arm64 Debian 12 machine? Checked on an amd64 host
# without one: an arm64 bookworm root (debootstrap, kept in $PAGODA_CHROOT_CACHE like
# bench/setup_clean_root.sh's), whose binaries the kernel runs under qemu-user-static through
# binfmt_misc. Each run takes a fresh copy of that root, clones this checkout's HEAD into it and
# checks, in a chroot:
#   (a) with libnuma-dev pinned out of apt, install_deps.sh names it and stops
#       before installing anything
#   (b) install_deps.sh succeeds, and the toolchain it installed is arm64's (g++ -dumpmachine,
#       the libraries' pkg-config files, pybind11's CMake package)
#   (c) install_deps.sh --tests succeeds with python3-torch pinned out of apt, as on a mirror
#       without it: it names python3-torch as not installed, installs the rest, and the PyTorch
#       checks (tests/model/check_logits.py, tests/deepseek/check_deepseek.py) exit 77
#       ("skipped" to CTest) with a message
#   (d) without the pin, install_deps.sh --tests installs python3-torch and `import torch` works
#   (e) with --build only: configures the Release tree and builds the `pagoda` target natively
#       (-j2), then runs `pagoda generate --model demo`. Under emulation the compiler runs
#       several times slower than natively: hours on a 2-core machine.
#
#   sudo scripts/check-arm64-install.sh [--build] [--keep]
#
# Needs root, debootstrap, qemu-user-static and binfmt-support (apt-get install debootstrap
# qemu-user-static binfmt-support) and a kernel that allows binfmt_misc (not every container
# does). Downloads about 0.7 GB of arm64 packages each run, and dpkg runs emulated: (a) to (c)
# took 51 minutes on a shared 2-core VM (README, "Setup on arm64"). Not part of scripts/test.sh.
# --keep leaves the run's root (with its logs under /root/check-logs) in
# $PAGODA_CHROOT_CACHE/arm64-run-root. Only committed files are checked (a clone of HEAD).
# Exits 0 when every step passed, 1 otherwise; prints one line per step.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/scripts/lib/debootstrap_root.sh"
chroot_require_root
build=0
keep=0
for arg in "$@"; do
  case "$arg" in
    --build) build=1 ;;
    --keep) keep=1 ;;
    *) echo "usage: $0 [--build] [--keep]" >&2; exit 2 ;;
  esac
done

root=$chroot_cache/arm64-run-root
chroot_ensure_base arm64

cleanup() {
  chroot_unmount_all
  if [ "$keep" = 0 ]; then rm -rf "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that the EXIT trap unmounts after Ctrl-C or kill too

chroot_fresh_root "$root"
git clone -q --no-local "$repo" "$root/root/pagoda"
git -C "$root/root/pagoda" checkout -q "$(git -C "$repo" rev-parse HEAD)"
mkdir -p "$root/root/check-logs"
echo "checking $(git -C "$root/root/pagoda" log -1 --format='%h %s')"
echo "in an arm64 root: $(chroot "$root" dpkg --print-architecture), $(chroot "$root" uname -m) under qemu"

in_root() {  # runs a command line in the root's checkout, as a login shell would
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb /bin/bash -o pipefail -c "cd /root/pagoda && $1"
}

results=()
failed=0
# check NAME COMMAND: runs COMMAND in the root, its output in /root/check-logs/NAME.log (and
# here); the step passes when COMMAND exits 0.
check() {
  local name=$1 start took rc=0
  echo "== ($name) $2 =="
  start=$(date +%s)
  in_root "$2" 2>&1 | tee "$root/root/check-logs/$name.log" || rc=$?
  took=$(($(date +%s) - start))
  if [ "$rc" = 0 ]; then
    results+=("PASS ($name) ${took} s")
  else
    results+=("FAIL ($name) ${took} s, exit $rc: see /root/check-logs/$name.log in the root")
    failed=1
  fi
  echo "${results[-1]}"
}

# A package the build needs and apt cannot install: named before apt-get runs, nothing installed.
cat >"$root/etc/apt/preferences.d/no-libnuma-dev" <<'PIN'
Package: libnuma-dev
Pin: version *
Pin-Priority: -1
PIN
check a "rc=0; ./scripts/install_deps.sh 2>/tmp/err.log || rc=\$?; cat /tmp/err.log;
  [ \$rc = 1 ] && grep -q 'not available for arm64 from this machine.s apt sources: libnuma-dev\$' /tmp/err.log &&
  ! dpkg-query -W -f='\${Status}' cmake 2>/dev/null | grep -q 'ok installed'"
rm "$root/etc/apt/preferences.d/no-libnuma-dev"

check b "./scripts/install_deps.sh &&
  test \"\$(g++ -dumpmachine)\" = aarch64-linux-gnu &&
  pkg-config --exists libcurl nettle spdlog fmt yaml-cpp libpcre2-8 libutf8proc numa &&
  test -f /usr/lib/cmake/pybind11/pybind11Config.cmake && cmake --version | head -1 && g++ --version | head -1"

# As on a mirror without python3-torch: apt has no candidate for it.
cat >"$root/etc/apt/preferences.d/no-python3-torch" <<'PIN'
Package: python3-torch
Pin: version *
Pin-Priority: -1
PIN
check c "./scripts/install_deps.sh --tests | tee /tmp/install.log &&
  grep -q '^not installing python3-torch: not available for arm64' /tmp/install.log &&
  ! dpkg-query -W -f='\${Status}' python3-torch 2>/dev/null | grep -q 'ok installed' &&
  for p in libgtest-dev libbenchmark-dev prometheus mold nodejs python3-jinja2; do
    dpkg-query -W -f='\${Status}' \$p | grep -q 'ok installed' || { echo \"\$p not installed\"; exit 1; }
  done &&
  for script in 'tests/model/check_logits.py /bin/false /tmp/logits' \
                'tests/deepseek/check_deepseek.py /bin/false /bin/false /tmp/deepseek'; do
    rc=0; out=\$(/usr/bin/python3 \$script) || rc=\$?
    echo \"\$script: exit \$rc: \$out\"
    [ \$rc = 77 ] && [[ \$out == skipped:* ]] || exit 1
  done"
rm "$root/etc/apt/preferences.d/no-python3-torch"

check d "./scripts/install_deps.sh --tests &&
  python3 -c 'import torch; print(\"torch\", torch.__version__, torch.ones(2, 3).sum().item())'"

if [ "$build" = 1 ]; then
  check e "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_BUILD_TESTS=OFF &&
    cmake --build build -j 2 --target pagoda &&
    ./build/pagoda generate --model demo --prompt 'Once upon a time' --max-tokens 8"
fi

echo "== summary (arm64 root under qemu, $(nproc) host CPUs, $(date -u +%F)) =="
printf '%s\n' "${results[@]}"
exit "$failed"
