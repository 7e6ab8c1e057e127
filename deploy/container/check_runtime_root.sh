#!/usr/bin/env bash
# The container image's runtime stage without a container engine: a minimal Debian 12 root
# (debootstrap's minbase, what debian:12-slim is made from) gets exactly the packages and the user
# that deploy/container/Containerfile's runtime stage installs, and a `pagoda` binary built on
# Debian 12; then, inside it (chroot, as the image's user):
#   - ldd finds every library the binary links,
#   - no compiler and no Python are there,
#   - `pagoda serve` starts with the demo model and the image's HEALTHCHECK command passes,
#   - SIGTERM (the image's STOPSIGNAL) stops it cleanly.
#
#   sudo deploy/container/check_runtime_root.sh [PAGODA_BINARY]     (default: build/pagoda)
#
# Needs root, debootstrap and the Debian mirror; minutes, not part of the test suite. The base
# root comes from scripts/lib/debootstrap_root.sh, shared with bench/setup_clean_root.sh
# ($PAGODA_CHROOT_CACHE, default /work/chroot-cache), so a second run skips debootstrap.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
source "$repo/scripts/lib/debootstrap_root.sh"
chroot_require_root
binary=$(realpath "${1:-$repo/build/pagoda}")
[ -x "$binary" ] || { echo "$0: no binary at $binary (build it: cmake --build build --target pagoda)" >&2; exit 1; }
recipe=$repo/deploy/container/Containerfile
root=$chroot_cache/runtime-root
chroot_ensure_base

cleanup() {
  chroot_unmount_all
  rm -rf "$root"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

chroot_fresh_root "$root"
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin LANG=C.UTF-8 "$@"; }

# The runtime stage's RUN lines, as the recipe has them: its continuation lines joined, comments
# dropped, between `FROM ... AS runtime` and the binary's COPY.
runtime_runs=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$recipe" | grep -v '^\s*#' |
  awk '/^FROM .* AS runtime/ { on = 1; next } on && /^COPY --from=build/ { exit } on && /^RUN / { sub(/^RUN /, ""); print }')
[ -n "$runtime_runs" ] || { echo "$0: no RUN lines in the runtime stage of $recipe" >&2; exit 1; }
while IFS= read -r line; do
  echo "== RUN $line =="
  in_root /bin/sh -c "$line"
done <<<"$runtime_runs"

echo "== the binary, as COPY --from=build puts it =="
install -D -m 0755 "$binary" "$root/usr/local/bin/pagoda"
uid=$(sed -n 's/.*useradd .*--uid \([0-9]*\).*/\1/p' "$recipe")
port=$(sed -n 's/^EXPOSE \([0-9]*\)$/\1/p' "$recipe")

echo "== checks =="
if in_root ldd /usr/local/bin/pagoda | grep 'not found'; then
  echo "FAIL: libraries missing from the runtime packages" >&2
  exit 1
fi
for tool in gcc g++ cc c++ python3 python; do
  if in_root /bin/sh -c "command -v $tool" >/dev/null; then
    echo "FAIL: $tool is in the runtime root" >&2
    exit 1
  fi
done
in_root setpriv --reuid="$uid" --regid="$uid" --clear-groups /usr/local/bin/pagoda --version

# The image's default command on the demo model (the recipe's HOME is the user's home, where the
# demo model is generated), and the health check exactly as HEALTHCHECK runs it; in a network
# namespace of its own, so that nothing else on this machine's port answers for it.
health=$(sed -n 's/^ *CMD \["curl", \(.*\)\]$/\1/p' "$recipe" | tr -d '",')
[ -n "$health" ] || { echo "$0: no HEALTHCHECK curl command in $recipe" >&2; exit 1; }
export root uid port health
unshare --net /bin/bash -c '
  set -euo pipefail
  ip link set lo up
  env_root=(chroot "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/var/lib/pagoda LANG=C.UTF-8)
  "${env_root[@]}" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
    /usr/local/bin/pagoda serve --model demo --host 127.0.0.1 --port "$port" --kv-cache-space 64MiB &
  server=$!
  healthy=0
  for _ in $(seq 1 300); do
    if "${env_root[@]}" curl $health 2>/dev/null; then healthy=1; break; fi
    sleep 0.2
  done
  if [ "$healthy" != 1 ]; then kill -KILL "$server"; echo "FAIL: the health check never passed" >&2; exit 1; fi
  echo "health check passed: curl $health"
  kill -TERM "$server"
  if wait "$server"; then status=0; else status=$?; fi
  [ "$status" = 0 ] || { echo "FAIL: pagoda exited with $status after SIGTERM" >&2; exit 1; }
'
echo "PASS: the runtime stage runs pagoda as uid $uid, health check on port $port, clean SIGTERM"
