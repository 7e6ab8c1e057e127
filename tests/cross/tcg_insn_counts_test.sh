#!/usr/bin/env bash
# bench/peers/tcg_insn_counts.c against a program whose executed instructions are known exactly
# (tcg_known_counts.S): every symbol's count, a translated block that runs across two symbols,
# the on=/off= regions and the per-block listing (blocks=on). Exits 77 (CTest's "skipped")
# without gcc, the aarch64 cross compiler or qemu-user.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
for tool in gcc aarch64-linux-gnu-gcc qemu-aarch64; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "skipped: $tool is not installed (scripts/install_deps.sh --tests)" >&2
    exit 77
  fi
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -fvisibility=hidden \
  -o "$work/plugin.so" "$repo/bench/peers/tcg_insn_counts.c"
aarch64-linux-gnu-gcc -nostdlib -static -o "$work/known" "$here/tcg_known_counts.S"

failures=0
expect() {  # FILE WHAT LINE: LINE must be in FILE
  if ! grep -qxF "$3" "$1"; then
    echo "FAIL ($2): expected \"$3\" in:" >&2
    cat "$1" >&2
    failures=$((failures + 1))
  fi
}

qemu-aarch64 -plugin "$work/plugin.so,out=$work/all.tsv" "$work/known"
for line in $'6006\tspin' $'22\t_start' $'6\tlanding' $'3\tfalls_through' $'3\tcount_on' \
  $'3\tcount_off' '# counted 6043' '# regions 0' '# all 6043'; do
  expect "$work/all.tsv" "every instruction" "$line"
done

qemu-aarch64 -plugin "$work/plugin.so,out=$work/regions.tsv,on=count_on,off=count_off" "$work/known"
for line in $'6006\tspin' $'9\t_start' $'6\tlanding' $'3\tfalls_through' '# counted 6024' \
  '# regions 3' '# all 6043'; do
  expect "$work/regions.tsv" "regions" "$line"
done
# blocks=on: spin's three blocks, each with its count (entry 3 instructions, the loop's 2, ret).
qemu-aarch64 -plugin "$work/plugin.so,out=$work/blocks.tsv,blocks=on" "$work/known"
for line in $'9\tspin@0x[0-9a-f]+\\+3' $'5994\tspin@0x[0-9a-f]+\\+2' $'3\tspin@0x[0-9a-f]+\\+1' \
  $'3\tfalls_through@0x[0-9a-f]+\\+1' $'6\tlanding@0x[0-9a-f]+\\+2' '# all 6043'; do
  if ! grep -qxE "$line" "$work/blocks.tsv"; then
    echo "FAIL (blocks): expected a line matching \"$line\" in:" >&2
    cat "$work/blocks.tsv" >&2
    failures=$((failures + 1))
  fi
done

if grep -q 'count_o' "$work/regions.tsv"; then
  echo "FAIL (regions): the markers' own instructions were counted" >&2
  failures=$((failures + 1))
fi

if ((failures)); then
  echo "$failures failed"
  exit 1
fi
echo "tcg_insn_counts: exact counts per symbol and per region"
