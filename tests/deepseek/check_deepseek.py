"""Pagoda's DeepSeek-V2/V3 logits vs. the PyTorch reference (deepseek_reference.py) on tiny
random models covering every option of the family: q_lora on and off, dense first layers and
moe_layer_freq, greedy / group_limited_greedy / noaux_tc routing, softmax and sigmoid scores,
norm_topk_prob with both scaling rules, shared experts, YaRN with mscale / mscale_all_dim, MTP
layers in the checkpoint, f32 and bf16 storage; through decode, chunked prefill, a mixed batch
followed by a batched decode step, and a prefix-cache hit.

usage: check_deepseek.py DEEPSEEK_DUMP_BINARY WORK_DIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
import deepseek_reference as ref  # noqa: E402

# Relative to the row's largest reference logit. F32 weights are computed in fp32, so only the
# summation order differs (absorbed vs expanded MLA included): 1e-4. BF16 weights may be
# multiplied with bf16-rounded activations: 2e-2.
TOLERANCE = {"F32": 1e-4, "BF16": 2e-2}

BASE = {
    "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4,
    "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 12, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
    "max_position_embeddings": 256, "vocab_size": 97, "tie_word_embeddings": False,
    "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu", "attention_bias": False,
    "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
    "moe_intermediate_size": 24, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "topk_method": "greedy", "n_group": 1, "topk_group": 1, "scoring_func": "softmax",
    "norm_topk_prob": False, "routed_scaling_factor": 1.0, "rope_scaling": None,
}

V2 = ["DeepseekV2ForCausalLM"]
V3 = ["DeepseekV3ForCausalLM"]
YARN_V3 = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 16, "beta_fast": 32,
           "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}
YARN_V2_LITE = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 16,
                "beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}

VARIANTS = {
    # V2-Lite's choices: no q compression, greedy softmax routing, 2 shared experts, dense layer 0.
    "v2lite_greedy_f32": dict(architectures=V2, torch_dtype="float32", n_shared_experts=2,
                              topk_method="gready"),
    # V2's choices: q_lora, group-limited greedy by the group's best score, routed scaling.
    "v2_qlora_grouped_f32": dict(architectures=V2, torch_dtype="float32", q_lora_rank=24,
                                 topk_method="group_limited_greedy", n_group=4, topk_group=2,
                                 num_experts_per_tok=3, routed_scaling_factor=2.0,
                                 first_k_dense_replace=0, moe_layer_freq=2),
    # V2 with norm_topk_prob: normalised weights are not scaled (V2 rule).
    "v2_norm_yarn_f32": dict(architectures=V2, torch_dtype="float32", norm_topk_prob=True,
                             routed_scaling_factor=16.0, rope_scaling=YARN_V2_LITE),
    # V3 / R1: sigmoid + noaux_tc with the bias, normalised then scaled, YaRN, one MTP layer.
    "v3_noaux_yarn_f32": dict(architectures=V3, torch_dtype="float32", q_lora_rank=24,
                              scoring_func="sigmoid", topk_method="noaux_tc", n_group=4,
                              topk_group=2, num_experts_per_tok=3, norm_topk_prob=True,
                              routed_scaling_factor=2.5, rope_scaling=YARN_V3,
                              num_nextn_predict_layers=1),
    # No experts at all (n_routed_experts null): every layer dense.
    "v3_dense_only_f32": dict(architectures=V3, torch_dtype="float32", n_routed_experts=None,
                              num_experts_per_tok=None, n_shared_experts=None),
    "v3_noaux_bf16": dict(architectures=V3, torch_dtype="bfloat16", q_lora_rank=24,
                          scoring_func="sigmoid", topk_method="noaux_tc", n_group=2, topk_group=1,
                          num_experts_per_tok=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                          rope_scaling=YARN_V3),
}

ST_DTYPE = {"float32": "F32", "bfloat16": "BF16"}


def run(binary, model_dir, mode, id_lists, vocab):
    out = os.path.join(model_dir, "logits.bin")
    cmd = [binary, model_dir, out, mode] + [",".join(map(str, ids)) for ids in id_lists]
    subprocess.run(cmd, check=True)
    return np.fromfile(out, dtype=np.float32).reshape(-1, vocab)


def compare(name, got, want, tol):
    want = want.numpy()
    if got.shape != want.shape:
        print(f"FAIL {name}: got {got.shape} rows, want {want.shape}")
        return False
    scale = np.maximum(np.abs(want).max(axis=1, keepdims=True), 1.0)
    err = (np.abs(got - want) / scale).max()
    same_argmax = bool((got.argmax(axis=1) == want.argmax(axis=1)).all())
    ok = err <= tol and same_argmax
    print(f"{'ok' if ok else 'FAIL'} {name}: max relative error {err:.2e} (tolerance {tol:.0e}), "
          f"greedy tokens {'identical' if same_argmax else 'DIFFER'}")
    return ok


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
        weights = ref.random_deepseek_weights(cfg, seed=4321 + i,
                                              num_mtp_layers=cfg.get("num_nextn_predict_layers", 0))
        path = os.path.join(model_dir, "model.safetensors")
        ref.save_safetensors(path, weights, st_dtype)
        stored = ref.load_safetensors(path)  # the reference sees exactly the rounded weights
        tol = TOLERANCE[st_dtype]

        g = torch.Generator().manual_seed(77 + i)
        ids = torch.randint(0, cfg["vocab_size"], (37,), generator=g).tolist()
        other = torch.randint(0, cfg["vocab_size"], (11,), generator=g).tolist()
        branch = ids[:21] + torch.randint(0, cfg["vocab_size"], (6,), generator=g).tolist()
        with torch.no_grad():
            want = ref.deepseek_forward(cfg, stored, ids)
            want_next = ref.deepseek_forward(cfg, stored, ids + [3])[-1]
            want_other = ref.deepseek_forward(cfg, stored, other)[-1]
            want_other_next = ref.deepseek_forward(cfg, stored, other + [3])[-1]
            want_branch = ref.deepseek_forward(cfg, stored, branch)[-1]
        vocab = cfg["vocab_size"]

        ok &= compare(f"{name} decode", run(binary, model_dir, "decode", [ids], vocab), want, tol)
        chunk = 8
        rows = [min(k + chunk, len(ids)) - 1 for k in range(0, len(ids), chunk)]
        ok &= compare(f"{name} chunk:{chunk}", run(binary, model_dir, f"chunk:{chunk}", [ids], vocab),
                      want[rows], tol)
        got = run(binary, model_dir, "batch", [ids, other], vocab)
        ok &= compare(f"{name} batch", got,
                      torch.stack([want[-1], want_other, want_next, want_other_next]), tol)
        got = run(binary, model_dir, "prefix", [ids, branch], vocab)
        ok &= compare(f"{name} prefix-hit", got, torch.stack([want[-1], want_branch]), tol)
    if not ok:
        sys.exit(1)
    print("all DeepSeek variants match the reference")


if __name__ == "__main__":
    main()
