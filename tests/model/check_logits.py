"""Pagoda's logits vs. a PyTorch reference written from the HF modeling code, on small random
models of each dense architecture and option (GQA, q/k/v bias, tied embeddings, every RoPE
scaling, f32/bf16/f16 storage), through decode, chunked prefill and a mixed batch.

usage: check_logits.py DUMP_LOGITS_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np

try:
    import torch
except ImportError:
    # A partial mirror or a Debian port may lack python3-torch;
    # scripts/install_deps.sh --tests then installs the rest and says so.
    print("skipped: PyTorch is not installed (python3-torch, from scripts/install_deps.sh --tests)")
    sys.exit(77)  # CTest's SKIP_RETURN_CODE for this test

sys.path.insert(0, os.path.dirname(__file__))
import hf_reference as ref  # noqa: E402

# Tolerances, relative to the largest reference logit of the row:
#  f32 weights are computed in fp32, so only summation order differs: 1e-4.
#  bf16/f16 weights may use bf16 dot products, which round the activations to bf16
#  (8 bits of mantissa) at every matmul: 2e-2.
TOLERANCE = {"F32": 1e-4, "BF16": 2e-2, "F16": 2e-2}

BASE = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "max_position_embeddings": 256, "vocab_size": 97, "tie_word_embeddings": False,
    "bos_token_id": 1, "eos_token_id": 2,
}

VARIANTS = {
    "llama_gqa_f32": dict(architectures=["LlamaForCausalLM"], torch_dtype="float32"),
    "llama_mha_tied_f32": dict(architectures=["LlamaForCausalLM"], num_key_value_heads=4,
                               tie_word_embeddings=True, torch_dtype="float32"),
    "llama_linear_bf16": dict(architectures=["LlamaForCausalLM"], torch_dtype="bfloat16",
                              rope_scaling={"type": "linear", "factor": 4.0}),
    "llama_dynamic_f32": dict(architectures=["LlamaForCausalLM"], torch_dtype="float32",
                              rope_scaling={"type": "dynamic", "factor": 2.0}),
    "llama_yarn_f32": dict(architectures=["LlamaForCausalLM"], torch_dtype="float32",
                           rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                         "original_max_position_embeddings": 64}),
    "llama_llama3_f16": dict(architectures=["LlamaForCausalLM"], torch_dtype="float16",
                             rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 32}),
    "llama_biases_f32": dict(architectures=["LlamaForCausalLM"], torch_dtype="float32",
                             attention_bias=True, mlp_bias=True),
    "llama_headdim_f32": dict(architectures=["LlamaForCausalLM"], torch_dtype="float32", head_dim=32),
    "qwen2_bias_f32": dict(architectures=["Qwen2ForCausalLM"], torch_dtype="float32", num_key_value_heads=1),
    "qwen2_bias_bf16": dict(architectures=["Qwen2ForCausalLM"], torch_dtype="bfloat16"),
}

ST_DTYPE = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def run(binary, model_dir, mode, id_lists, vocab):
    out = os.path.join(model_dir, "logits.bin")
    cmd = [binary, model_dir, out, mode] + [",".join(map(str, ids)) for ids in id_lists]
    subprocess.run(cmd, check=True)
    return np.fromfile(out, dtype=np.float32).reshape(-1, vocab)


def compare(name, got, want, tol):
    want = want.numpy()
    scale = np.maximum(np.abs(want).max(axis=1, keepdims=True), 1.0)
    err = (np.abs(got - want) / scale).max()
    status = "ok" if err <= tol else "FAIL"
    print(f"{status} {name}: max relative error {err:.2e} (tolerance {tol:.0e})")
    return err <= tol


def main():
    binary, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    ok = True
    for i, (name, overrides) in enumerate(VARIANTS.items()):
        cfg = dict(BASE, **overrides)
        model_dir = os.path.join(work, name)
        os.makedirs(model_dir, exist_ok=True)
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump(cfg, f)
        st_dtype = ST_DTYPE[cfg["torch_dtype"]]
        weights = ref.random_llama_weights(cfg, seed=1234 + i)
        path = os.path.join(model_dir, "model.safetensors")
        ref.save_safetensors(path, weights, st_dtype)
        stored = ref.load_safetensors(path)  # the reference sees exactly the rounded weights
        tol = TOLERANCE[st_dtype]

        g = torch.Generator().manual_seed(99 + i)
        ids = torch.randint(0, cfg["vocab_size"], (37,), generator=g).tolist()
        other = torch.randint(0, cfg["vocab_size"], (11,), generator=g).tolist()
        with torch.no_grad():
            want = ref.llama_forward(cfg, stored, ids)
            want_other = ref.llama_forward(cfg, stored, other)
        vocab = cfg["vocab_size"]

        ok &= compare(f"{name} decode", run(binary, model_dir, "decode", [ids], vocab), want, tol)
        chunk = 8
        rows = [min(k + chunk, len(ids)) - 1 for k in range(0, len(ids), chunk)]
        ok &= compare(f"{name} chunk:{chunk}", run(binary, model_dir, f"chunk:{chunk}", [ids], vocab),
                      want[rows], tol)
        got = run(binary, model_dir, "batch", [ids, other], vocab)
        ok &= compare(f"{name} batch", got, torch.stack([want[-1], want_other[-1]]), tol)
    if not ok:
        sys.exit(1)
    print("all variants match the reference")


if __name__ == "__main__":
    main()
