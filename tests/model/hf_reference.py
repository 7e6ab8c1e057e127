"""Reference forward passes written from the published Hugging Face modeling code
(transformers' modeling_llama.py and modeling_qwen2.py), in PyTorch fp32.

Used by check_logits.py: it writes small random models in the Hugging Face layout, runs these
references and compares Pagoda's logits against them. Nothing here imports Pagoda.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_reference  # noqa: E402

# ---------------------------------------------------------------------------------------------
# safetensors, written by hand so the test does not share code with the engine's loader
# (tests/common/safetensors_reference.py).

save_safetensors = safetensors_reference.save_safetensors
load_safetensors = safetensors_reference.load_safetensors


# ---------------------------------------------------------------------------------------------
# RoPE frequencies: transformers' _compute_{default,linear,dynamic,yarn,llama3}_rope_parameters.
# "dynamic" uses the base for the full extended context (vLLM's rule), as Pagoda documents.

def rope_inv_freq(cfg):
    dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    attention_factor = 1.0

    def default(b):
        return 1.0 / (b ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))

    if kind == "default":
        inv = default(base)
    elif kind == "linear":
        inv = default(base) / rs["factor"]
    elif kind == "dynamic":
        factor = rs["factor"]
        max_pos = cfg["max_position_embeddings"]
        seq_len = max_pos * factor
        b = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
        inv = default(b)
    elif kind == "yarn":
        factor = rs["factor"]
        orig = rs.get("original_max_position_embeddings") or cfg["max_position_embeddings"]
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def get_mscale(scale, mscale=1):
            return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

        attention_factor = rs.get("attention_factor")
        mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
        if attention_factor is None:
            if mscale and mscale_all_dim:
                attention_factor = get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
            else:
                attention_factor = get_mscale(factor)

        def correction_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extrap = 1.0 / pos_freqs
        interp = 1.0 / (factor * pos_freqs)
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extrap_factor = 1 - ramp
        inv = interp * (1 - extrap_factor) + extrap * extrap_factor
    elif kind == "llama3":
        inv = default(base)
        factor = rs["factor"]
        lo, hi = rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        inv = torch.where(medium, smoothed, inv_l)
    else:
        raise ValueError(kind)
    return inv.float(), float(attention_factor)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def llama_forward(cfg, w, ids):
    """Full-sequence logits [len(ids), vocab] for LlamaForCausalLM / Qwen2ForCausalLM."""
    hidden = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or hidden // nh
    eps = cfg["rms_norm_eps"]
    qwen = cfg["architectures"][0] == "Qwen2ForCausalLM"
    bias = qwen or cfg.get("attention_bias", False)
    o_bias = not qwen and cfg.get("attention_bias", False)
    mlp_bias = not qwen and cfg.get("mlp_bias", False)
    T = len(ids)

    inv_freq, attn_factor = rope_inv_freq(cfg)
    pos = torch.arange(T, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos() * attn_factor, emb.sin() * attn_factor

    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)

        def proj(name, x=x):
            y = x @ w[p + f"self_attn.{name}.weight"].T
            if bias:
                y = y + w[p + f"self_attn.{name}.bias"]
            return y

        q = proj("q_proj").view(T, nh, hd).transpose(0, 1)
        k = proj("k_proj").view(T, nkv, hd).transpose(0, 1)
        v = proj("v_proj").view(T, nkv, hd).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(nh // nkv, dim=0)
        v = v.repeat_interleave(nh // nkv, dim=0)
        scores = q @ k.transpose(1, 2) / math.sqrt(hd) + mask
        attn = torch.softmax(scores, dim=-1) @ v
        attn = attn.transpose(0, 1).reshape(T, nh * hd)
        o = attn @ w[p + "self_attn.o_proj.weight"].T
        if o_bias:
            o = o + w[p + "self_attn.o_proj.bias"]
        h = h + o
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = x @ w[p + "mlp.gate_proj.weight"].T
        up = x @ w[p + "mlp.up_proj.weight"].T
        if mlp_bias:
            gate = gate + w[p + "mlp.gate_proj.bias"]
            up = up + w[p + "mlp.up_proj.bias"]
        down = (torch.nn.functional.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
        if mlp_bias:
            down = down + w[p + "mlp.down_proj.bias"]
        h = h + down
    h = rms_norm(h, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight")
    if head is None:
        head = w["model.embed_tokens.weight"]
    return h @ head.T


def random_llama_weights(cfg, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = cfg["hidden_size"]
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or hidden // nh
    inter = cfg["intermediate_size"]
    vocab = cfg["vocab_size"]
    qwen = cfg["architectures"][0] == "Qwen2ForCausalLM"
    bias = qwen or cfg.get("attention_bias", False)

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    w = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        w[p + "self_attn.q_proj.weight"] = mat(nh * hd, hidden)
        w[p + "self_attn.k_proj.weight"] = mat(nkv * hd, hidden)
        w[p + "self_attn.v_proj.weight"] = mat(nkv * hd, hidden)
        w[p + "self_attn.o_proj.weight"] = mat(hidden, nh * hd)
        if bias:
            for name, n in (("q_proj", nh * hd), ("k_proj", nkv * hd), ("v_proj", nkv * hd)):
                w[p + f"self_attn.{name}.bias"] = 0.1 * torch.randn(n, generator=g)
        w[p + "mlp.gate_proj.weight"] = mat(inter, hidden)
        w[p + "mlp.up_proj.weight"] = mat(inter, hidden)
        w[p + "mlp.down_proj.weight"] = mat(hidden, inter)
        if not qwen and cfg.get("attention_bias", False):
            w[p + "self_attn.o_proj.bias"] = 0.1 * torch.randn(hidden, generator=g)
        if not qwen and cfg.get("mlp_bias", False):
            w[p + "mlp.gate_proj.bias"] = 0.1 * torch.randn(inter, generator=g)
            w[p + "mlp.up_proj.bias"] = 0.1 * torch.randn(inter, generator=g)
            w[p + "mlp.down_proj.bias"] = 0.1 * torch.randn(hidden, generator=g)
    w["model.norm.weight"] = norm(hidden)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = mat(vocab, hidden)
    return w
