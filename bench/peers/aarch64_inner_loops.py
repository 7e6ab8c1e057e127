#!/usr/bin/env python3
"""Instructions per 32 multiply-adds in the inner loops of the AArch64 kernels, from the
disassembly of the cross-built objects (static counts: no hardware needed).

    bench/peers/aarch64_inner_loops.py [--build build-aarch64] [--peer NAME=OBJ ...]
                                       [--sve-bits 256]

For each kernel it finds the function by its (demangled) name, the loops in it (a branch back to
an earlier address of the same function), and the innermost loop that multiplies. The
multiply-adds an instruction does (sdot 16, smmla 32, fmla .8h 8, fmla .4s 4, smull/smlal .8h 8,
bfdot 8, bfmmla 16) give the loop's work; for decode (one token) a multiply-add is one weight,
so "per 32 MACs" is "per 32 weights" (for the KV-cache value sums, per 32 cache values); smmla
decode on a repeated token counts only the kept half of its multiply-adds.
Two figures:
  inner  the innermost multiplying loop alone: the steady state of a long block (int8 per
         channel: one scale per row and token, so the block is the whole row);
  block  the loop around it, when that inner loop runs once per iteration of its parent: with
         blocks of 32 (Q8_0, every int4 layout) the per-block work (scales, folds, the float
         finish) is paid every 32 columns.
Static counts ignore how often branches inside a loop are taken; prefetches and loads count as
instructions. --peer NAME=OBJ adds objects built elsewhere (e.g. llama.cpp's
ggml-cpu/arch/arm/quants.c or repack.cpp compiled for aarch64): their kernels listed in
PEER_KERNELS are counted the same way. Needs aarch64-linux-gnu-objdump (binutils-aarch64-linux-gnu).

SVE instructions (z registers) do as many multiply-adds as the vector is long, which the code
does not fix: they are counted at --sve-bits (default 256, Neoverse V1 / Graviton 3; an svdot
then does 32, as smmla); at 512 (A64FX) each SVE row's figures halve where the loop is all SVE.
"""
import argparse
import pathlib
import re
import subprocess
import sys

# (label, object stem, regex on the demangled name, mnemonic the loop must contain or None[,
# the share of the instruction's multiply-adds that are useful: smmla decode on a token pair
# whose second token repeats the first does 32 per instruction, of which 16 are kept])
PAGODA_KERNELS = [
    ("Q8_0/int8 decode, sdot (4 rows x 1 token)", "neon_dotprod",
     r"arm::int_tile<[^>]*NeonDotprod, \(pagoda::DType\)3, 1>", "sdot"),
    ("int4 decode, sdot (4 rows x 1 token)", "neon_dotprod",
     r"arm::int_tile<[^>]*NeonDotprod, \(pagoda::DType\)4, 1>", "sdot"),
    ("Q8_0/int8 prefill, sdot (4 rows x 4 tokens)", "neon_dotprod",
     r"arm::int_tile<[^>]*NeonDotprod, \(pagoda::DType\)3, 4>", "sdot"),
    ("int4 prefill, sdot (4 rows x 4 tokens)", "neon_dotprod",
     r"arm::int_tile<[^>]*NeonDotprod, \(pagoda::DType\)4, 4>", "sdot"),
    ("Q8_0/int8 prefill, smmla (4 rows x 8 tokens)", "neon_i8mm",
     r"arm::mmla_tile<[^>]*NeonI8mm, \(pagoda::DType\)3, 4>", "smmla"),
    ("int4 prefill, smmla (4 rows x 8 tokens)", "neon_i8mm",
     r"arm::mmla_tile<[^>]*NeonI8mm, \(pagoda::DType\)4, 4>", "smmla"),
    # The panel tiles have a groups-of-32 instance (Q8_0, Q4_0, Q4_K: a group is one block of
    # one step, so the block is the innermost loop and its "inner" figure includes scales and
    # finish) and one for longer groups (int8 per channel; int4 in groups of 128). PanelValues:
    # 0 int8, 1 symmetric int4 (Q4_0), 2 int4 with mins (Q4_K / Q4_1).
    ("Q8_0 decode, sdot by element on 4x4 panels (4 rows x 1 token)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)0, 1, true>", "sdot"),
    ("int8 per channel decode, sdot on 4x4 panels", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)0, 1, false>", "sdot"),
    ("Q8_0 prefill, sdot by element on 4x4 panels (4 rows x 4 tokens)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)0, 4, true>", "sdot"),
    ("int8 per channel prefill, sdot on 4x4 panels (4 x 4)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)0, 4, false>", "sdot"),
    ("Q4_0 decode, sdot on int4 4x4 panels (4 rows x 1 token)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)1, 1, true>", "sdot"),
    ("Q4_K/Q4_1 decode, sdot on int4 4x4 panels with mins", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)2, 1, true>", "sdot"),
    ("int4 g128 (W4A8) decode, sdot on int4 4x4 panels with mins", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)2, 1, false>", "sdot"),
    ("Q4_0 prefill, sdot on int4 4x4 panels (4 rows x 4 tokens)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)1, 4, true>", "sdot"),
    ("Q4_K/Q4_1 prefill, sdot on int4 4x4 panels with mins (4 x 4)", "neon_dotprod",
     r"arm::sdot_panel_tile<[^>]*NeonDotprod, \(pagoda::arm::PanelValues\)2, 4, true>", "sdot"),
    ("Q8_0 decode, smmla on 4x8 panels (4 rows x 1 token, pair repeated)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)0, 1, true>", "smmla", 0.5),
    ("Q8_0 prefill, smmla on 4x8 panels (4 rows x 8 tokens)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)0, 8, true>", "smmla"),
    ("int8 per channel prefill, smmla on 4x8 panels (4 x 8)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)0, 8, false>", "smmla"),
    ("Q4_0 decode, smmla on int4 4x8 panels (4 rows x 1 token, pair repeated)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)1, 1, true>", "smmla", 0.5),
    ("Q4_K/Q4_1 decode, smmla on int4 4x8 panels with mins (pair repeated)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)2, 1, true>", "smmla", 0.5),
    ("Q4_0 prefill, smmla on int4 4x8 panels (4 rows x 8 tokens)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)1, 8, true>", "smmla"),
    ("Q4_K/Q4_1 prefill, smmla on int4 4x8 panels with mins (4 x 8)", "neon_i8mm",
     r"arm::mmla_panel_tile<[^>]*NeonI8mm, \(pagoda::arm::PanelValues\)2, 8, true>", "smmla"),
    ("Q8_0/int8 decode, Armv8.0 smull/smlal", "neon",
     r"arm::int_tile<[^>]*::Neon, \(pagoda::DType\)3, 1>", None),
    ("f16 decode, fmla .8h (4 rows x 1 token)", "neon_dotprod",
     r"arm::f16_dot_tile<[^>]*NeonDotprod, 4, 1, true>", "fmla"),
    ("f16 prefill, fmla .8h (4 rows x 3 tokens)", "neon_dotprod",
     r"arm::f16_dot_tile<[^>]*NeonDotprod, 4, 3, false>", "fmla"),
    # The decode tile's loop comes in two copies, with and without prefetches: the one with.
    ("bf16 decode, bfdot (4 rows x 1 token)", "neon_bf16",
     r"arm::bf16_dot_tile<[^>]*NeonBf16, 4, 1>", "bfdot+prfm"),
    ("bf16 2 tokens, bfmmla (2 rows x 2 tokens)", "neon_bf16",
     r"arm::bf16_mmla_tile<[^>]*NeonBf16, 1>", "bfmmla"),
    ("bf16 prefill, bfmmla (2 rows x 8 tokens)", "neon_bf16",
     r"arm::bf16_mmla_tile<[^>]*NeonBf16, 4>", "bfmmla"),
    ("fp16 KV values decode, fmla .8h (axpy_rows, 1 row x 32 columns)", "neon_dotprod",
     r"arm::f16_value_tile<[^>]*NeonDotprod, 1, 4, false>", "fmla"),
    ("fp16 KV values prefill, fmla .8h (3 rows x 32 columns)", "neon_dotprod",
     r"arm::f16_value_tile<[^>]*NeonDotprod, 3, 4, false>", "fmla"),
    ("fp16 KV values, widened: fcvtl + fmla .4s (axpy_rows, Armv8.0)", "neon",
     r"simd::axpy_rows<[^>]*::Neon>", "fmla+fcvtl"),
    ("f32/bf16 panel prefill, fmla .4s (sweep tile)", "neon_dotprod",
     r"simd::sweep_panel<[^>]*NeonDotprod>", "fmla"),
    # The float paths the sve table takes over (arm/sve_float_kernels.h), each after the NEON
    # loop it replaces: neon_dotprod's for f32 (every NEON table runs the same fp32 loops), plain
    # neon's for the f16 / bf16 weights and the fp16 cache it widens (A64FX).
    ("f32 decode, fmla .4s (4 rows x 1 token)", "neon_dotprod",
     r"simd::matmul_few_tokens<[^>]*NeonDotprod, \(pagoda::DType\)0>\(", "fmla+prfm"),
    ("SVE f32 decode, fmla (4 rows x 1 token)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)0, 1>", "fmla"),
    ("SVE f32 prefill, fmla (4 rows x 6 tokens)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)0, 6>", "fmla"),
    ("f16 decode, widened: fcvtl + fmla .4s (4 rows x 1 token, Armv8.0)", "neon",
     r"simd::matmul_few_tokens<[^>]*::Neon, \(pagoda::DType\)1>\(", "fmla+prfm+fcvtl"),
    ("SVE f16 decode, widened: ld1h + fcvt + fmla (4 rows x 1 token)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)1, 1>", "fmla"),
    ("SVE f16 prefill, widened (4 rows x 6 tokens)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)1, 6>", "fmla"),
    ("bf16 decode, pair order: shl / and + fmla .4s (4 rows x 1 token, Armv8.0)", "neon",
     r"void pagoda::simd::matmul_bf16_pairs<[^>]*::Neon>", "fmla+prfm"),
    ("SVE bf16 decode, widened: ld1h + lsl + fmla (4 rows x 1 token)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)2, 1>", "fmla"),
    ("SVE bf16 prefill, widened (4 rows x 6 tokens)", "sve",
     r"arm::sve::matmul_tile<[^>]*Sve, \(pagoda::DType\)2, 6>", "fmla"),
    ("SVE bf16 decode, bfdot (4 rows x 1 token)", "sve",
     r"arm::sve::bfdot_tile<[^>]*Sve, 1>", "bfdot"),
    ("SVE bf16 prefill, bfdot (4 rows x 6 tokens)", "sve",
     r"arm::sve::bfdot_tile<[^>]*Sve, 6>", "bfdot"),
    ("f32 KV scores decode, fmla .4s (dot_rows, 4 rows)", "neon_dotprod",
     r"simd::dot_rows_typed<[^>]*NeonDotprod, \(pagoda::DType\)0>", "fmla"),
    ("SVE f32 KV scores decode, fmla (dot_rows, 4 rows)", "sve",
     r"arm::sve::score_tile<[^>]*Sve, \(pagoda::DType\)0, 1, 4>", "fmla"),
    ("bf16 KV scores decode, widened: shll + fmla .4s (dot_rows, 4 rows)", "neon_dotprod",
     r"simd::dot_rows_typed<[^>]*NeonDotprod, \(pagoda::DType\)2>", "fmla"),
    ("SVE bf16 KV scores decode, widened (dot_rows, 4 rows)", "sve",
     r"arm::sve::score_tile<[^>]*Sve, \(pagoda::DType\)2, 1, 4>", "fmla"),
    ("f32 KV scores prefill, fmla .4s (3 queries x 4 rows)", "neon_dotprod",
     r"simd::attention_scores<[^>]*NeonDotprod>.*operator\(\)<\(pagoda::DType\)0>", "fmla"),
    ("SVE f32 KV scores prefill, fmla (3 queries x 4 rows)", "sve",
     r"arm::sve::score_tile<[^>]*Sve, \(pagoda::DType\)0, 3, 4>", "fmla"),
    ("f32 KV values decode, fmla .4s (axpy_rows, 1 row x 8 vectors)", "neon_dotprod",
     r"simd::axpy_rows_typed<[^>]*NeonDotprod, \(pagoda::DType\)0>", "fmla"),
    ("SVE f32 KV values decode, fmla (axpy_rows, 1 row x 4 vectors)", "sve",
     r"arm::sve::axpy_rows_typed<[^>]*Sve, \(pagoda::DType\)0>", "fmla"),
    ("bf16 KV values decode, widened (axpy_rows, 1 row x 8 vectors)", "neon_dotprod",
     r"simd::axpy_rows_typed<[^>]*NeonDotprod, \(pagoda::DType\)2>", "fmla"),
    ("SVE bf16 KV values decode, widened (axpy_rows, 1 row x 4 vectors)", "sve",
     r"arm::sve::axpy_rows_typed<[^>]*Sve, \(pagoda::DType\)2>", "fmla"),
    ("SVE fp16 KV values decode, widened (axpy_rows, 1 row x 4 vectors)", "sve",
     r"arm::sve::axpy_rows_typed<[^>]*Sve, \(pagoda::DType\)1>", "fmla"),
    ("f32 KV values prefill, fmla .4s (attention_values, 3 queries x 4 vectors)", "neon_dotprod",
     r"with_cache_dtype<[^>]*NeonDotprod, pagoda::simd::attention_values", "fmla"),
    ("SVE f32 KV values prefill, fmla (attention_values, 3 queries x 4 vectors)", "sve",
     r"arm::sve::value_tile<[^>]*Sve, \(pagoda::DType\)0, 3>", "fmla"),
    ("SVE bf16 KV values prefill, widened (attention_values, 3 queries x 4 vectors)", "sve",
     r"arm::sve::value_tile<[^>]*Sve, \(pagoda::DType\)2, 3>", "fmla"),
    ("SVE Q8_0/int8 decode, svdot (VL/64 rows x 1 token)", "sve",
     r"arm::sve::svdot_tile<[^>]*Sve, \(pagoda::DType\)3, 1>", "sdot"),
    ("SVE int4 decode, svdot (VL/64 rows x 1 token)", "sve",
     r"arm::sve::svdot_tile<[^>]*Sve, \(pagoda::DType\)4, 1>", "sdot"),
    ("SVE Q8_0/int8 prefill, svdot (VL/64 rows x 4 tokens)", "sve",
     r"arm::sve::svdot_tile<[^>]*Sve, \(pagoda::DType\)3, 4>", "sdot"),
    ("SVE int4 prefill, svdot (VL/64 rows x 4 tokens)", "sve",
     r"arm::sve::svdot_tile<[^>]*Sve, \(pagoda::DType\)4, 4>", "sdot"),
]

# llama.cpp's names (ggml-cpu); which object holds them is given with --peer.
PEER_KERNELS = [
    ("Q8_0 vec_dot (1 row x 1 token)", r"^ggml_vec_dot_q8_0_q8_0$", "sdot"),
    ("Q8_0 vec_dot, i8mm (2 rows x 2 tokens)", r"^ggml_vec_dot_q8_0_q8_0$", "smmla"),
    ("Q4_0 vec_dot (1 row x 1 token)", r"^ggml_vec_dot_q4_0_q8_0$", "sdot"),
    ("Q4_0 vec_dot, i8mm (2 rows x 2 tokens)", r"^ggml_vec_dot_q4_0_q8_0$", "smmla"),
    ("Q4_0 repacked gemv 4x4 (decode)", r"ggml_gemv_q4_0_4x4_q8_0", "sdot"),
    ("Q4_0 repacked gemm 4x4 (prefill)", r"ggml_gemm_q4_0_4x4_q8_0", "sdot"),
    ("Q8_0 repacked gemv 4x4 (decode)", r"ggml_gemv_q8_0_4x4_q8_0", "sdot"),
    ("Q8_0 repacked gemm 4x4 (prefill)", r"ggml_gemm_q8_0_4x4_q8_0", "sdot"),
]

FUNC_RE = re.compile(r"^([0-9a-f]+) <(.*)>:$")
INSN_RE = re.compile(r"^\s+([0-9a-f]+):\s+(\S+)\s*(.*)$")
BRANCH_TARGET_RE = re.compile(r"^(?:b\.\w+|b|cbz|cbnz|tbz|tbnz)$")


SVE_BITS = 256  # --sve-bits


def macs(mnemonic, operands):
    """Multiply-adds one instruction performs (0 for everything else)."""
    if operands.startswith("z"):  # SVE: the element size of the destination, VL wide
        if mnemonic in ("sdot", "udot", "usdot", "sudot"):
            return SVE_BITS // 8
        if mnemonic in ("smmla", "ummla", "usmmla"):
            return 32 * SVE_BITS // 128
        if mnemonic == "bfdot":
            return SVE_BITS // 16
        if mnemonic in ("fmla", "fmls", "fmad", "fmsb"):
            first = operands.split(",")[0]
            return SVE_BITS // (16 if ".h" in first else 64 if ".d" in first else 32)
        return 0
    if mnemonic in ("sdot", "udot", "usdot", "sudot"):
        return 16 if ".4s" in operands else 8
    if mnemonic in ("smmla", "ummla", "usmmla"):
        return 32
    if mnemonic == "bfmmla":
        return 16
    if mnemonic == "bfdot":
        return 8 if ".4s" in operands else 4
    if mnemonic in ("fmla", "fmls"):
        first = operands.split(",")[0]
        return 8 if ".8h" in first else 4 if (".4s" in first or ".4h" in first) else 2 if ".2d" in first else 1
    if mnemonic in ("fmlal", "fmlal2"):
        return 4
    if mnemonic in ("smull", "smull2", "smlal", "smlal2", "umull", "umull2", "umlal", "umlal2"):
        return 8 if ".8h" in operands.split(",")[0] else 4
    return 0


def functions(obj):
    out = subprocess.run(["aarch64-linux-gnu-objdump", "-d", "-C", "--no-show-raw-insn", str(obj)],
                         check=True, capture_output=True, text=True).stdout
    funcs, current = {}, None
    for line in out.splitlines():
        m = FUNC_RE.match(line)
        if m:
            current = []
            funcs[m.group(2)] = current
            continue
        m = INSN_RE.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2), m.group(3)))
    return funcs


def loops(insns):
    """(start, end) address intervals closed by a backward branch."""
    if not insns:
        return []
    lo, hi = insns[0][0], insns[-1][0]
    found = set()
    for addr, mnem, ops in insns:
        if not BRANCH_TARGET_RE.match(mnem):
            continue
        m = re.search(r"\b([0-9a-f]+) <", ops)
        if not m:
            continue
        target = int(m.group(1), 16)
        if lo <= target <= addr <= hi:
            found.add((target, addr))
    return sorted(found, key=lambda iv: iv[1] - iv[0])


def measure(insns, need):
    """(inner count, inner MACs, block count or None) for the innermost multiplying loop."""
    body = lambda iv: [i for i in insns if iv[0] <= i[0] <= iv[1]]
    # With `need` only that instruction's multiply-adds count (an int8 loop's float finish
    # would otherwise add its fmla lanes to the integer work). "fmla+fcvtl": fmla counts, and
    # the loop must hold an fcvtl too (the f16 loop of a function that also has an f32 one).
    need, *also = need.split("+") if need else (None,)
    work = lambda iv: sum(macs(m, o) for _, m, o in body(iv) if need is None or m == need)
    inside = lambda a, b: a != b and b[0] <= a[0] and a[1] <= b[1]
    all_loops = loops(insns)
    has = lambda iv, name: any(m == name for _, m, _ in body(iv))
    candidates = [iv for iv in all_loops
                  if work(iv) > 0 and (need is None or has(iv, need))
                  and all(has(iv, a) for a in also)]
    # Innermost: no multiplying loop inside; of those, the one doing the most work (a main
    # loop rather than its remainder loop).
    innermost = [iv for iv in candidates if not any(inside(o, iv) for o in candidates)]
    if not innermost:
        return None
    iv = max(innermost, key=work)
    parent = min((p for p in all_loops if inside(iv, p)), key=lambda p: p[1] - p[0], default=None)
    return len(body(iv)), work(iv), (len(body(parent)) if parent else None)


def row(label, insns, need, useful=1.0):
    if insns is None:
        return f"| {label} | not found | | | |"
    r = measure(insns, need)
    if r is None:
        return f"| {label} | no multiplying loop | | | |"
    n, work, parent = r
    work = int(work * useful)
    per = lambda k: f"{32.0 * k / work:.1f}"
    return f"| {label} | {n} insns / {work} MACs | {per(n)} | {per(parent) if parent else '-'} |"


def find(funcs, pattern):
    rx = re.compile(pattern)
    hits = [name for name in funcs if rx.search(name)]
    return funcs[min(hits, key=len)] if hits else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-aarch64")
    ap.add_argument("--peer", action="append", default=[], metavar="NAME=OBJ")
    ap.add_argument("--sve-bits", type=int, default=256,
                    help="the SVE vector length the z-register counts assume")
    args = ap.parse_args()
    global SVE_BITS
    SVE_BITS = args.sve_bits
    build = pathlib.Path(args.build)
    objs = {p.name.split(".")[0]: p for p in build.rglob("*.cpp.o")
            if p.parent.name == "arm"}
    if not objs:
        sys.exit(f"no AArch64 kernel objects under {build} (scripts/cross-build.sh aarch64)")
    header = "| kernel | innermost loop | inner / 32 MACs | block loop / 32 MACs |\n|---|---|---|---|"
    print("Pagoda (" + ", ".join(sorted(objs)) + ")")
    print(header)
    cache = {}
    for label, stem, pattern, need, *useful in PAGODA_KERNELS:
        if stem not in objs:
            print(f"| {label} | {stem} not built | | |")
            continue
        funcs = cache.setdefault(stem, functions(objs[stem]))
        print(row(label, find(funcs, pattern), need, *useful))
    for spec in args.peer:
        name, _, obj = spec.partition("=")
        funcs = functions(pathlib.Path(obj))
        print(f"\n{name} ({obj})")
        print(header)
        for label, pattern, need in PEER_KERNELS:
            insns = find(funcs, pattern)
            if insns is not None:
                print(row(label, insns, need))


if __name__ == "__main__":
    main()
