#!/usr/bin/env bash
# How long scripts/setup.sh and the extra dependencies of scripts/test.sh take on a clean Debian 12,
# and how much they install. Builds a fresh bookworm root with debootstrap, copies a clean clone of
# this checkout's HEAD into it and times, inside a chroot:
#   (a) scripts/install_deps.sh            the apt part of setup.sh (building and running)
#   (b) scripts/setup.sh                   the rest of setup.sh: configure and build ./build/pagoda
#   (c) scripts/install_deps.sh --tests    the extra apt part of test.sh (test-only packages)
#   (d) npm install in tests/node          the npm part of test.sh's dependency phase
# Each step prints its wall time, the download size (.deb files apt fetched), the growth of the
# root (du, the apt cache excluded) and the sum of dpkg's Installed-Size for the new packages.
#
#   sudo bench/setup_clean_root.sh [--keep]
#
# Needs root and debootstrap (apt-get install debootstrap). The bootstrapped base root
# (scripts/lib/debootstrap_root.sh) is kept in $PAGODA_CHROOT_CACHE (default /work/chroot-cache) so
# a rerun skips debootstrap; each run starts
# from a fresh copy of it, with an empty apt cache, so downloads are measured every time. --keep
# leaves the run's root behind for inspection. Only committed files are measured (a clone of HEAD).
# The build step runs on whatever else the machine is doing: run it on a quiet machine.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
source "$repo/scripts/lib/debootstrap_root.sh"
chroot_require_root
keep=0
case "${1:-}" in
  --keep) keep=1 ;;
  "") ;;
  *) echo "usage: $0 [--keep]" >&2; exit 2 ;;
esac

cache=$chroot_cache
root=$cache/run-root
chroot_ensure_base

cleanup() {
  chroot_unmount_all
  rm -f "$cache/times.before" "$cache/times.after"
  if [ "$keep" = 0 ]; then rm -rf "$root"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # so that the EXIT trap unmounts after Ctrl-C or kill too

chroot_fresh_root "$root"
rm -f "$root"/var/cache/apt/archives/*.deb  # debootstrap's own downloads: not the steps'
# Certificate authorities this host added itself (a TLS-inspecting proxy's): without them npm
# cannot reach its registry from behind such a proxy. An ordinary machine has none.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

git clone -q --no-local "$repo" "$root/root/pagoda"
git -C "$root/root/pagoda" checkout -q "$(git -C "$repo" rev-parse HEAD)"
echo "measuring $(git -C "$root/root/pagoda" log -1 --format='%h %s')"

in_root() {  # runs a command line in the root's checkout, as a login shell would
  # Node reads its own CA list unless told to add the system's (which holds the CAs above).
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt \
    /bin/bash -c "cd /root/pagoda && $1"
}
root_bytes() {  # the root's size without the apt cache and the mounted pseudo file systems
  du -sx --block-size=1 --exclude="$root/var/cache/apt" --exclude="$root/var/lib/apt/lists" "$root" | cut -f1
}
installed_kib() {  # dpkg's Installed-Size summed over installed packages
  chroot "$root" dpkg-query -W -f='${db:Status-Abbrev} ${Installed-Size}\n' |
    awk '$1 == "ii" { s += $2 } END { print s + 0 }'
}
download_bytes() {
  find "$root/var/cache/apt/archives" -name '*.deb' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }'
}
mib() { awk -v b="$1" 'BEGIN { printf "%.0f MiB", b / 1048576 }'; }

results=()
step() {  # step NAME COMMAND
  local name=$1 before_root before_kib before_pkgs start took cpu after_root dl
  before_root=$(root_bytes)
  before_kib=$(installed_kib)
  before_pkgs=$(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii')
  echo "== $name: $2 =="
  # Wall time, and the CPU time (user + system) of everything the step ran, from the shell's
  # `times` before and after: on a busy machine the build's wall time grows with the load, its CPU
  # time much less.
  times >"$cache/times.before"
  start=$(date +%s.%N)
  in_root "$2"
  took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
  times >"$cache/times.after"
  cpu=$(cat "$cache/times.before" "$cache/times.after" | awk '
    function s(t) { split(t, p, /[ms]/); return p[1] * 60 + p[2] }
    NR == 2 { b = s($1) + s($2) } NR == 4 { a = s($1) + s($2) } END { printf "%.0f", a - b }')
  after_root=$(root_bytes)
  dl=$(download_bytes)
  local pkgs kib
  pkgs=$(($(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii') - before_pkgs))
  kib=$(($(installed_kib) - before_kib))
  results+=("$(printf '%-32s %5s s (CPU %5s s)  %3d packages  download %8s  root +%8s  dpkg Installed-Size +%8s' \
    "$name" "$took" "$cpu" "$pkgs" "$(mib "$dl")" "$(mib $((after_root - before_root)))" "$(mib $((kib * 1024)))")")
  echo "${results[-1]}"
  rm -f "$root"/var/cache/apt/archives/*.deb  # the next step's download is its own
}

echo "base root: $(mib "$(root_bytes)"), $(chroot "$root" dpkg-query -W -f='${db:Status-Abbrev}\n' | grep -c '^ii') packages"
step "(a) install_deps.sh" "./scripts/install_deps.sh"
step "(b) setup.sh (configure, build)" "./scripts/setup.sh"
echo "build tree: $(mib "$(du -sx --block-size=1 "$root/root/pagoda/build" | cut -f1)"), pagoda binary: $(mib "$(stat -c %s "$root/root/pagoda/build/pagoda")")"
in_root "./build/pagoda generate --model demo --prompt 'Once upon a time' --max-tokens 8" >/dev/null
echo "demo model runs"
step "(c) install_deps.sh --tests" "./scripts/install_deps.sh --tests"
if [ -f "$root/root/pagoda/tests/node/package.json" ]; then
  step "(d) npm install (tests/node)" "cd tests/node && npm install --no-audit --no-fund --loglevel=error"
fi

echo "== summary ($(nproc) CPUs, $(date -u +%F)) =="
printf '%s\n' "${results[@]}"
