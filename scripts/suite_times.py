#!/usr/bin/env python3
"""Where the test suite's time goes: compile and link time per target from a build directory's
.ninja_log, and run time per test and per room from the JUnit report scripts/test.sh writes.

    scripts/suite_times.py build build-asan        # after ./scripts/test.sh
    scripts/suite_times.py --top 20 build

Compile time is summed per target over its objects (CPU seconds, not wall: ninja runs -j jobs
at once); a ccache hit shows as the time the hit took.
"""
import argparse
import collections
import os
import re
import xml.etree.ElementTree as ET


def ninja_steps(build_dir):
    """(seconds, output) of each step of the last build (.ninja_log v5 keeps older runs too)."""
    latest = {}
    with open(os.path.join(build_dir, ".ninja_log")) as log:
        for line in log:
            if line.startswith("#"):
                continue
            start, end, _mtime, output, _hash = line.rstrip("\n").split("\t")
            latest[output] = (int(end) - int(start)) / 1000.0
    return [(seconds, output) for output, seconds in latest.items()]


def target_of(output):
    """(target, kind) for a ninja output path."""
    m = re.search(r"CMakeFiles/([^/]+)\.dir/", output)
    if m:
        return m.group(1), "compile"
    name = os.path.basename(output)
    if name.endswith("_tests.cmake"):  # gtest_discover_tests listing the cases
        return re.sub(r"\[\d+\]_tests\.cmake$", "", name), "discover"
    if name.endswith(".a"):
        return re.sub(r"^lib(.*)\.a$", r"\1", name), "link"
    return name, "link"


def print_build(build_dir, top):
    per_target = collections.defaultdict(lambda: collections.Counter())
    for seconds, output in ninja_steps(build_dir):
        target, kind = target_of(output)
        per_target[target][kind] += seconds
    rows = sorted(per_target.items(), key=lambda kv: -sum(kv[1].values()))
    totals = collections.Counter()
    for _, kinds in rows:
        totals.update(kinds)
    print(f"## {build_dir}: {len(rows)} targets, compile {totals['compile']:.0f} s, "
          f"link {totals['link']:.0f} s, test discovery {totals['discover']:.0f} s (CPU)")
    print(f"{'target':40} {'compile':>8} {'link':>6} {'discover':>8}")
    for target, kinds in rows[:top]:
        print(f"{target:40} {kinds['compile']:8.1f} {kinds['link']:6.1f} {kinds['discover']:8.1f}")


def print_tests(build_dir, top):
    path = os.path.join(build_dir, "ctest-junit.xml")
    if not os.path.exists(path):
        print(f"## {build_dir}: no ctest-junit.xml (run scripts/test.sh)")
        return
    cases = ET.parse(path).getroot().findall(".//testcase")
    statuses = collections.Counter(c.get("status") for c in cases)
    per_room = collections.Counter()
    count = collections.Counter()
    for c in cases:
        room = c.get("name").split(".")[0]
        per_room[room] += float(c.get("time"))
        count[room] += 1
    total = sum(per_room.values())
    print(f"## {build_dir}: {len(cases)} tests ({dict(statuses)}), {total:.0f} s summed")
    print(f"{'room':16} {'tests':>6} {'seconds':>8}")
    for room, seconds in per_room.most_common():
        print(f"{room:16} {count[room]:6} {seconds:8.1f}")
    print(f"slowest {top}:")
    for c in sorted(cases, key=lambda c: -float(c.get("time")))[:top]:
        print(f"  {float(c.get('time')):7.2f}  {c.get('name')[:100]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build_dirs", nargs="+")
    parser.add_argument("--top", type=int, default=15, help="rows per table")
    args = parser.parse_args()
    for build_dir in args.build_dirs:
        print_build(build_dir, args.top)
        print()
        print_tests(build_dir, args.top)
        print()


if __name__ == "__main__":
    main()
