#!/usr/bin/env python3
"""Per-category shares of a `perf record` of `pagoda bench latency` (the prefill window only).

Usage: bench/prefill_profile_shares.py PERF_DATA [--by-thread]
  e.g. PAGODA_ISA=avx2 perf record -F 999 -o prefill.data build/pagoda bench latency
         --model FILE.gguf --threads 2 --batch-size 1 --input-len 128 --output-len 1 --num-iters 3
       bench/prefill_profile_shares.py prefill.data
(perf script resolves the symbols from the binary: rebuilding it spoils an older recording.)

The window is from the first to the last sample in a matmul kernel, so model loading (GGUF
repack, page faults of the weight slabs) is left out. Each sample is classified by its leaf
symbol (no call graph needed). libgomp's samples in a prefill are its spin-waits at the
barriers / joins of parallel regions (its pause loops): the time one thread waited for the
other. Prints shares of all samples in the window, and per thread with --by-thread.
"""
import collections
import re
import subprocess
import sys

CATEGORIES = [
    ("panel repack per call", r"repack_lane_panel|repack_.*panel"),
    ("activation quantization", r"quantize_activations|quantize_row|quantize_tokens|activation_sums"),
    # int4 weights (Q4_0, Q4_K: W4A8 tiles) run in matmul_int8_blocks; int8 ones (Q8_0, Q5_0,
    # Q6_K on AVX2: the lane panels) are inlined into simd::matmul.
    ("matmul int4 tiles (Q4_0 Q4_K)", r"matmul_int8_blocks|int4_"),
    ("matmul int8 panels (Q8_0 Q5_0 Q6_K)", r"matmul|int8_|lane_panel|dot_tile|panel_tile|tile_|_tiles?<|quant_kernels"),
    ("attention", r"attention|attend|score_rows|exp_shifted|softmax_rows|reduce_add_each|value_rows"),
    ("rms norm", r"rms_norm"),
    ("rope + kv cache write", r"rope|write_kv|from_f32|narrow"),
    ("silu*mul", r"silu"),
    ("embedding", r"embedding|dequantize_row|to_f32"),
    ("sampler", r"sampl|top_k|top_p|logprob|argmax|penalt"),
    ("copies / memset", r"memcpy|memmove|memset"),
    ("malloc / free", r"malloc|free|mmap|munmap|new|delete"),
]


def classify(sym, dso):
    if "libgomp" in dso:
        return "OpenMP barrier/join spin"
    if dso.startswith("[kernel"):
        return "kernel (faults, scheduler)"
    for name, pattern in CATEGORIES:
        if re.search(pattern, sym):
            return name
    return "other"


def main():
    path = sys.argv[1]
    by_thread = "--by-thread" in sys.argv
    out = subprocess.run(
        ["perf", "script", "-i", path, "-F", "tid,time,ip,sym,dso", "-G"],
        capture_output=True, text=True, check=True).stdout
    line_re = re.compile(r"^\s*(\d+)\s+([\d.]+):\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")
    samples = []
    for line in out.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        tid, t, sym, dso = int(m.group(1)), float(m.group(2)), m.group(3), m.group(4)
        samples.append((tid, t, sym, dso))
    kernel_times = [t for _, t, sym, dso in samples if "pagoda" in dso and "matmul" in sym]
    if not kernel_times:
        sys.exit("no matmul samples: not a prefill profile?")
    begin, end = min(kernel_times), max(kernel_times)
    window = [s for s in samples if begin <= s[1] <= end]
    print(f"{path}: {len(window)} samples in the prefill window ({end - begin:.2f} s) "
          f"of {len(samples)}")
    groups = collections.defaultdict(collections.Counter)
    for tid, _, sym, dso in window:
        groups["all threads"][classify(sym, dso)] += 1
        if by_thread:
            groups[f"thread {tid}"][classify(sym, dso)] += 1
    for group, counts in groups.items():
        total = sum(counts.values())
        print(f"\n{group} ({total} samples)")
        for name, n in counts.most_common():
            print(f"  {100.0 * n / total:6.2f} %  {name}")
    top = collections.Counter((sym, dso) for _, _, sym, dso in window)
    print("\ntop symbols")
    for (sym, dso), n in top.most_common(25):
        print(f"  {100.0 * n / len(window):6.2f} %  {sym[:110]} ({dso.split('/')[-1]})")


if __name__ == "__main__":
    main()
