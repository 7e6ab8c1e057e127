#!/usr/bin/env python3
"""Executed instructions per 32 multiply-adds of one matmul, Pagoda beside llama.cpp, counted under
qemu-user by a TCG plugin (dynamic counts: no AArch64 hardware needed).

    bench/peers/aarch64_dynamic_counts.py [--llama-cpp SRC] [--tokens 1,32,128]
                                          [--shape ROWS,COLS] [--variants NAMES] [--out DIR]
                                          [--threads N] [--reuse]

Builds the plugin (tcg_insn_counts.c) with the host's gcc, and pagoda_matmul_workload in
build-aarch64 (scripts/cross-build.sh aarch64 first if that build does not exist); with
--llama-cpp, also ggml's CPU backend from a llama.cpp (or ggml) checkout, twice (Armv8.2-A with
the dot product and fp16, as GCC's -mcpu=tsv110 for the Kunpeng 920; and with i8mm too; both
with llamafile's sgemm, as llama.cpp's own build has it), into SRC/build-pagoda-counts-*, and
llama_cpp_matmul_workload.cpp against each. Nothing of llama.cpp's is copied here.

Each workload runs one matmul of ROWS x COLS weights (default 2048 x 2048) on TOKENS tokens, on
one thread (--threads: Pagoda's on more), once to warm up and then between two marker functions whose execution switches the
plugin's counting on and off: "call" is every instruction executed in the call (activation
quantization, thread split or graph dispatch, the tiles, the finish, code in shared libraries
included), "kernel" the function that executed the most of them, all instances of a template
together (a tile's shapes, llamafile's edge tiles; the last column names the largest and how
many more), both times 32 / (TOKENS x ROWS x COLS). For one token a multiply-add is a weight:
per 32 weights. The kernels have no data-dependent branches, so one call gives the count, the
same on every run. --reuse reads the counts a run left in --out again (to reformat them).

Variants (--variants, comma-separated; default: dotprod,i8mm,bf16):
  dotprod  qemu -cpu neoverse-n1 (the Kunpeng 920's features: dot product and fp16, no i8mm,
           bf16 or SVE): Pagoda's neon_dotprod, ggml built for armv8.2-a+dotprod+fp16
  i8mm     qemu -cpu max with 128-bit SVE: Pagoda's neon_i8mm, ggml with +i8mm
  bf16     the same CPU: Pagoda's neon_bf16 on bf16 weights (bfdot/bfmmla; its other tiles
           are neon_i8mm's or neon_dotprod's)
  neon     qemu -cpu cortex-a53 (Armv8.0): Pagoda's neon
  sve256   qemu -cpu max with 256-bit SVE: Pagoda's sve
Per-symbol counts of every run are kept in --out (default build-aarch64/tcg-counts), one TSV
each, mangled (c++filt demangles). Needs gcc, g++-aarch64-linux-gnu and qemu-user (7.2 loads
plugins; its plugin header is not needed).
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
PEERS = REPO / "bench" / "peers"

# name: (qemu -cpu, Pagoda --isa, ggml build or None, the weight types run or None for all)
VARIANTS = {
    "dotprod": ("neoverse-n1", "neon_dotprod", "dotprod", None),
    "i8mm": ("max,sve-default-vector-length=16", "neon_i8mm", "i8mm", None),
    # Its int8 and int4 tiles are neon_i8mm's, its f16 and f32 ones neon_dotprod's.
    "bf16": ("max,sve-default-vector-length=16", "neon_bf16", None, ("bf16",)),
    "neon": ("cortex-a53", "neon", None, None),
    "sve256": ("max,sve-default-vector-length=32", "sve", None, None),
}
GGML_ARCH = {"dotprod": "armv8.2-a+dotprod+fp16", "i8mm": "armv8.2-a+dotprod+fp16+i8mm"}

# One row per weight type: the label, Pagoda's cases, llama.cpp's cases (the workloads' case
# names; a new Pagoda layout is its workload case named here).
WEIGHT_TYPES = [
    ("Q8_0", ["q8_0", "q8_0_panels"], ["q8_0", "q8_0_repack"]),
    ("int8 per channel", ["int8", "int8_panels"], []),
    ("Q4_0", ["q4_0", "q4_0_panels"], ["q4_0", "q4_0_repack"]),
    ("Q4_K / Q4_1 (int4 with mins)", ["q4_k", "q4_k_panels"], ["q4_k", "q4_k_repack", "q4_1"]),
    ("f16", ["f16"], ["f16"]),
    ("bf16", ["bf16"], ["bf16"]),
    ("f32", ["f32"], ["f32"]),
]


def run(cmd, **kw):
    """Runs a build step; its output goes to stderr, the table alone to stdout."""
    return subprocess.run(cmd, check=True, stdout=kw.pop("stdout", sys.stderr), **kw)


def build_plugin(out):
    plugin = out / "tcg_insn_counts.so"
    run(["gcc", "-O2", "-Wall", "-Wextra", "-std=gnu11", "-shared", "-fPIC",
         "-fvisibility=hidden", "-o", str(plugin), str(PEERS / "tcg_insn_counts.c")])
    return plugin


def build_pagoda():
    build = REPO / "build-aarch64"
    if not (build / "build.ninja").exists():
        run([str(REPO / "scripts" / "cross-build.sh"), "aarch64"])
    run(["cmake", "-S", str(REPO), "-B", str(build)], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", str(build), "--target", "pagoda_matmul_workload"])
    return build / "bench" / "peers" / "pagoda_matmul_workload"


def build_ggml(src, name):
    """ggml's CPU backend for one architecture level, and the workload linked against it."""
    ggml = src / "ggml" if (src / "ggml" / "CMakeLists.txt").exists() else src
    build = src / f"build-pagoda-counts-{name}"
    launcher = [f"-DCMAKE_{lang}_COMPILER_LAUNCHER=ccache" for lang in ("C", "CXX")
                if shutil.which("ccache")]
    run(["cmake", "-S", str(ggml), "-B", str(build), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
         f"-DCMAKE_TOOLCHAIN_FILE={REPO / 'cmake' / 'aarch64-linux-gnu.cmake'}",
         "-DGGML_NATIVE=OFF", f"-DGGML_CPU_ARM_ARCH={GGML_ARCH[name]}", "-DBUILD_SHARED_LIBS=OFF",
         "-DGGML_BUILD_TESTS=OFF", "-DGGML_BUILD_EXAMPLES=OFF", "-DGGML_BACKEND_DL=OFF",
         # llama.cpp's own CMakeLists turns llamafile's sgemm on for the ggml it builds.
         "-DGGML_LLAMAFILE=ON", *launcher], stdout=subprocess.DEVNULL)
    run(["cmake", "--build", str(build), "--target", "ggml", "ggml-cpu", "ggml-base"])
    libs = [next(build.rglob(f"lib{lib}.a")) for lib in ("ggml", "ggml-cpu", "ggml-base")]
    binary = build / "llama_cpp_matmul_workload"
    run(["aarch64-linux-gnu-g++", "-O2", "-std=c++17", f"-march={GGML_ARCH[name]}",
         f"-I{ggml / 'include'}", "-o", str(binary), str(PEERS / "llama_cpp_matmul_workload.cpp"),
         *map(str, libs), "-fopenmp", "-lpthread", "-lm"])
    return binary


def count(plugin, cpu, binary, args, threads, tsv, reuse):
    """{symbol: instructions} of one workload run's regions, and the number of regions (None
    and 0 when the workload cannot run the case). With reuse, an earlier run's TSV is read."""
    if not (reuse and tsv.exists()):
        run_workload(plugin, cpu, binary, args, threads, tsv)
    counts, regions = {}, 0
    for line in tsv.read_text().splitlines():
        if line.startswith("# regions"):
            regions = int(line.split()[-1])
        elif not line.startswith("#"):
            n, name = line.split("\t", 1)
            counts[name] = int(n)
    return (counts, regions) if regions else (None, 0)


def run_workload(plugin, cpu, binary, args, threads, tsv):
    # qemu-run.sh sets up the guest's libraries; waiting threads sleep (passive): spinning
    # would add instructions that measure timing, not work.
    done = subprocess.run(
        [str(REPO / "scripts" / "qemu-run.sh"), "aarch64", "--cpu", cpu,
         "-E", f"OMP_NUM_THREADS={threads}", "-E", "OMP_WAIT_POLICY=passive",
         "-plugin", f"{plugin},out={tsv},on=tcg_region_on,off=tcg_region_off",
         str(binary), *args], capture_output=True, text=True)
    # 3: the table (or ggml) cannot run this case; the plugin's report then has no region.
    if done.returncode not in (0, 3):
        sys.exit(f"{binary.name} {' '.join(args)} on {cpu} failed:\n{done.stderr}")


def short_names(mangled):
    """Demangled names without parameter lists, clones or Pagoda's namespaces."""
    demangled = subprocess.run(["c++filt"], input="\n".join(mangled), capture_output=True,
                               text=True).stdout.splitlines()
    out = {}
    for key, name in zip(mangled, demangled):
        name = re.sub(r"\[clone [^\]]*\]", "", name)
        name = re.sub(r"pagoda::|detail::|\(anonymous namespace\)::|\(pagoda::DType\)", "", name)
        # Keep the template arguments (they name the tile), drop the parameter list.
        depth, cut = 0, len(name)
        for i, ch in enumerate(name):
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0 and i > 0:
                cut = i
                break
        out[key] = re.sub(r"^void |^\S+ (?=\S+<)", "", name[:cut]).strip()
    return out


def family(name):
    """A function template's name without its last template arguments: the instances of one
    kernel (a tile's shapes, llamafile's gemm<RM, RN> edge tiles) count together."""
    if not name.endswith(">"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {">": 1, "<": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def figures(counts, regions, macs):
    """(call, kernel) instructions per 32 multiply-adds, and the kernel's name: the function
    (all instances of a template together) that executed the most."""
    names = short_names(list(counts))
    families = {}
    for symbol, n in counts.items():
        families.setdefault(family(names[symbol]), []).append((n, names[symbol]))
    top = max(families.values(), key=lambda members: sum(n for n, _ in members))
    members = sorted(top, reverse=True)
    name = members[0][1] + (f" + {len(members) - 1} more" if len(members) > 1 else "")
    per32 = lambda n: 32.0 * n / regions / macs
    return per32(sum(counts.values())), per32(sum(n for n, _ in members)), name


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", type=pathlib.Path, metavar="SRC",
                    help="a llama.cpp or ggml checkout (built here for aarch64)")
    ap.add_argument("--tokens", default="1,32,128")
    ap.add_argument("--shape", default="2048,2048", help="ROWS,COLS of the weight")
    ap.add_argument("--variants", default="dotprod,i8mm,bf16")
    ap.add_argument("--threads", type=int, default=1,
                    help="OpenMP threads of Pagoda's runs (llama.cpp's stay at 1: ggml's "
                         "threads spin at their barriers)")
    ap.add_argument("--out", type=pathlib.Path, default=REPO / "build-aarch64" / "tcg-counts")
    ap.add_argument("--reuse", action="store_true",
                    help="read the per-symbol counts an earlier run left in --out, run nothing")
    args = ap.parse_args()
    for tool in ("gcc", "aarch64-linux-gnu-g++", "qemu-aarch64", "c++filt"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (scripts/install_deps.sh --tests installs the cross "
                     "compiler and qemu-user)")
    tokens = [int(t) for t in args.tokens.split(",")]
    rows, cols = (int(v) for v in args.shape.split(","))
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v} (one of {', '.join(VARIANTS)})")

    args.out.mkdir(parents=True, exist_ok=True)
    # With --reuse nothing is built or run (the binaries' paths are not used).
    plugin = None if args.reuse else build_plugin(args.out)
    pagoda = None if args.reuse else build_pagoda()
    ggml = {}
    if args.llama_cpp:
        for v in variants:
            name = VARIANTS[v][2]
            if name and name not in ggml:
                ggml[name] = None if args.reuse else build_ggml(args.llama_cpp.resolve(), name)

    print(f"Executed instructions per 32 multiply-adds (per 32 weights at 1 token), one "
          f"{rows} x {cols} matmul on {args.threads} thread(s) (llama.cpp: 1); call / kernel "
          "alone (its function)")
    for v in variants:
        cpu, isa, ggml_name, only = VARIANTS[v]
        engines = [("Pagoda " + isa, pagoda, 1, ["--isa", isa], args.threads)]
        if ggml_name in ggml:
            engines.append((f"llama.cpp ({GGML_ARCH[ggml_name]})", ggml[ggml_name], 2, [], 1))
        print(f"\n### {v}: qemu -cpu {cpu}\n")
        print("| weight type | engine, case | " +
              " | ".join(f"{t} tok: call | kernel" for t in tokens) + " | kernel function |")
        print("|---|---|" + "---|---|" * len(tokens) + "---|")
        for label, *cases in WEIGHT_TYPES:
            if only and label not in only:
                continue
            for engine, binary, which, extra, threads in engines:
                for case in cases[which - 1]:
                    cells, kernel_names = [], []
                    for t in tokens:
                        run_name = f"{engine.split()[0].lower()}-{v}-{case}-{t}"
                        if threads > 1:
                            run_name += f"-{threads}threads"
                        counts, regions = count(plugin, cpu, binary,
                                                [case, str(t), str(rows), str(cols), "--calls",
                                                 "1", *extra], threads,
                                                args.out / f"{run_name}.tsv", args.reuse)
                        if counts is None:
                            cells.append("- | -")
                            continue
                        call, kernel, name = figures(counts, regions, t * rows * cols)
                        cells.append(f"{call:.1f} | {kernel:.1f}")
                        if name not in kernel_names:
                            kernel_names.append(name)
                    if all(c == "- | -" for c in cells):
                        continue
                    print(f"| {label} | {engine.split()[0]} {case} | " + " | ".join(cells) +
                          " | " + "; ".join(f"`{n}`" for n in kernel_names) + " |", flush=True)


if __name__ == "__main__":
    main()
