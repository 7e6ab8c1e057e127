#!/usr/bin/python3
"""Does llama.cpp read Pagoda's deepseek2 GGUF files as Pagoda does? For every GGUF file that
tests/deepseek/check_deepseek.py exported (tiny random DeepSeek-V2/V3 models; run that test first
with the same WORK_DIR), evaluates the same 37 tokens with llama.cpp and with Pagoda and prints the
largest difference of their logits from the PyTorch reference and from each other, relative to
the row's largest reference logit. Builds bench/peers/llama_cpp_logits.cpp against LLAMA_DIR.

usage: deepseek_gguf_crosscheck.py LLAMA_DIR DEEPSEEK_DUMP WORK_DIR
  LLAMA_DIR       a llama.cpp checkout built with CMake in LLAMA_DIR/build (libllama.so)
  DEEPSEEK_DUMP   Pagoda's tests/deepseek/deepseek_dump binary
  WORK_DIR        check_deepseek.py's work directory
"""
import os
import subprocess
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "deepseek"))
import check_deepseek as cd  # noqa: E402
import deepseek_reference as ref  # noqa: E402


def main():
    llama, dump, work = sys.argv[1:4]
    lib = os.path.join(llama, "build", "bin")
    tool = os.path.join(work, "llama_cpp_logits")
    subprocess.run(["g++", "-O1", "-std=c++17", os.path.join(HERE, "llama_cpp_logits.cpp"),
                    f"-I{llama}/include", f"-I{llama}/ggml/include", f"-L{lib}", "-lllama",
                    f"-Wl,-rpath,{lib}", "-o", tool], check=True)
    names = list(cd.VARIANTS)
    print(f"{'file':40} {'llama.cpp vs torch':>20} {'pagoda vs torch':>18} "
          f"{'llama.cpp vs pagoda':>20}  (max / 90th percentile)")
    for name, exports in cd.GGUF_EXPORTS.items():
        i = names.index(name)
        cfg = dict(cd.BASE, **cd.VARIANTS[name])
        stored = ref.load_safetensors(os.path.join(work, name, "model.safetensors"))
        g = torch.Generator().manual_seed(77 + i)  # check_deepseek.py's token ids
        ids = torch.randint(0, cfg["vocab_size"], (37,), generator=g).tolist()
        with torch.no_grad():
            want = ref.deepseek_forward(cfg, stored, ids).numpy()
        scale = np.maximum(np.abs(want).max(axis=1), 1.0)
        for export in exports:
            gguf_type, legacy = export.split("/")[0], export.endswith("/legacy")
            path = os.path.join(work, f"{name}.{gguf_type}{'.legacy' if legacy else ''}.gguf")
            out = path + ".llama.bin"
            run = subprocess.run([tool, path, out, ",".join(map(str, ids))], capture_output=True)
            if run.returncode != 0:
                print(f"{os.path.basename(path):40} llama.cpp failed: "
                      f"{run.stderr.decode('utf-8', 'replace').strip().splitlines()[-1]}")
                continue
            llama_logits = np.fromfile(out, np.float32).reshape(-1, cfg["vocab_size"])
            pagoda_logits = cd.run(dump, path, "decode", [ids], cfg["vocab_size"])

            def diff(a, b):
                e = np.abs(a - b).max(axis=1) / scale
                return f"{e.max():.1e} / {np.quantile(e, 0.9):.1e}"
            print(f"{os.path.basename(path):40} {diff(llama_logits, want):>20} "
                  f"{diff(pagoda_logits, want):>18} {diff(llama_logits, pagoda_logits):>20}")


if __name__ == "__main__":
    main()
