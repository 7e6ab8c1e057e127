#!/usr/bin/env bash
# Runs the cross-built engine tests (scripts/cross-build.sh aarch64 --engine) under qemu-user
# with one CPU model: the block pool, KV cache manager, scheduler, engine loop, output
# processing, speculative decoding and structured output, on the kernel variant that model's
# features select (the engine has no kernels of its own; its tests run whole tiny models):
#   scripts/qemu-engine-tests.sh aarch64 neoverse-n1    (TaiShan v110's features: Kunpeng 920)
# Prints each binary's counts and the total passed / failed / skipped (from GoogleTest's XML).
# One OpenMP thread, as in scripts/qemu-kernel-tests.sh. Exits 77 (CTest's "skipped") without qemu-user or without the cross build.
set -euo pipefail
cd "$(dirname "$0")/.."

arch=${1:-}
cpu=${2:-}
[ -n "$cpu" ] || { echo "usage: $0 aarch64 CPU" >&2; exit 2; }
build=$PWD/build-$arch-engine
command -v "qemu-$arch" >/dev/null 2>&1 ||
  { echo "skipped: qemu-$arch is not installed (scripts/install_deps.sh --tests)" >&2; exit 77; }
tests=$(find "$build/tests/engine" -maxdepth 1 -name '*_test' -type f -perm -u+x 2>/dev/null | sort)
[ -n "$tests" ] ||
  { echo "skipped: $build/tests/engine is not built (scripts/cross-build.sh $arch --engine)" >&2
    exit 77; }

# qemu-user 7.2 answers madvise() with success and does nothing ("a hint"), so
# MADV_POPULATE_WRITE faults nothing in and the prefault case sees no resident page; the
# prefault runs natively only.
not_under_qemu=-HugeBuffer.PrefaultBringsEveryPageInAndOnlyThen

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in $tests; do
  name=$(basename "$t")
  echo "== $name on $cpu"
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive timeout "${PAGODA_QEMU_TEST_TIMEOUT:-1800}" \
    scripts/qemu-run.sh "$arch" --cpu "$cpu" "$t" --gtest_brief=1 --gtest_filter="$not_under_qemu" \
    --gtest_output="xml:$work/$name.xml" || status=1
done
# A binary that crashed or timed out wrote no XML: it is a failure, named here.
/usr/bin/python3 - "$work" $tests <<'PY' || status=1
import os, sys
import xml.etree.ElementTree as ET
work, binaries = sys.argv[1], sys.argv[2:]
total = {"passed": 0, "failed": 0, "skipped": 0}
missing = []
for path in binaries:
    name = os.path.basename(path)
    xml = os.path.join(work, name + ".xml")
    if not os.path.exists(xml):
        missing.append(name)
        continue
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for case in ET.parse(xml).getroot().iter("testcase"):
        if case.find("failure") is not None:
            counts["failed"] += 1
        elif case.get("result") == "skipped" or case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    for k in total:
        total[k] += counts[k]
    print(f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['skipped']} skipped")
print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped"
      + (f"; no result from {', '.join(missing)}" if missing else ""))
sys.exit(1 if total["failed"] or missing else 0)
PY
exit $status
