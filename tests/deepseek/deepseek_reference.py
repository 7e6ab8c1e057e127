"""A PyTorch fp32 reference for DeepseekV2ForCausalLM / DeepseekV3ForCausalLM, written from the
semantics of the published modeling_deepseek.py (deepseek-ai's DeepSeek-V2 and DeepSeek-V3 /
R1 repositories), plus a writer of random models in the Hugging Face layout.

Deliberately the *expanded* MLA form (kv_b_proj applied to every cached latent, full K and V per
head), so it checks Pagoda's weight-absorbed form rather than repeating it. Nothing here
imports Pagoda or shares its code.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import safetensors_reference  # noqa: E402

# ---------------------------------------------------------------------------------------------
# safetensors, by hand (tests/common/safetensors_reference.py).


def save_safetensors(path, tensors, dtype):
    # Router biases stay fp32, as DeepSeek-V3 checkpoints store e_score_correction_bias.
    safetensors_reference.save_safetensors(
        path, tensors, dtype, keep_f32=lambda name: name.endswith("e_score_correction_bias"))


load_safetensors = safetensors_reference.load_safetensors


def q_head_dim(cfg):
    return cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]


def is_moe_layer(cfg, i):
    return (cfg.get("n_routed_experts") is not None and i >= cfg.get("first_k_dense_replace", 0)
            and i % cfg.get("moe_layer_freq", 1) == 0)


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def softmax_scale(cfg):
    scale = q_head_dim(cfg) ** -0.5
    rs = cfg.get("rope_scaling")
    if rs is not None:
        mscale_all_dim = rs.get("mscale_all_dim", 0)
        if mscale_all_dim:
            m = yarn_get_mscale(rs["factor"], mscale_all_dim)
            scale = scale * m * m
    return scale


def rope_cos_sin(cfg, num_positions):
    """DeepseekV2RotaryEmbedding / DeepseekV2YarnRotaryEmbedding: cos, sin [T, rope_dim]."""
    dim = cfg["qk_rope_head_dim"]
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling")
    arange = torch.arange(0, dim, 2, dtype=torch.float32)
    mscale = 1.0
    if rs is None:
        inv_freq = 1.0 / (base ** (arange / dim))
    else:
        assert rs.get("type", rs.get("rope_type")) == "yarn"
        factor = rs["factor"]
        orig = rs["original_max_position_embeddings"]
        beta_fast, beta_slow = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

        def correction_dim(num_rotations):
            return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        inv_freq_mask = 1.0 - ramp
        freq_extra = 1.0 / (base ** (arange / dim))
        freq_inter = 1.0 / (factor * base ** (arange / dim))
        inv_freq = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask
        mscale = yarn_get_mscale(factor, rs.get("mscale", 1)) / yarn_get_mscale(
            factor, rs.get("mscale_all_dim", 0))
    t = torch.arange(num_positions, dtype=torch.float32)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * mscale, emb.sin() * mscale


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin):
    """HF DeepSeek: de-interleave the stored (2i, 2i+1) pairs, then rotate halves."""
    def deinterleave(x):
        *lead, d = x.shape
        return x.view(*lead, d // 2, 2).transpose(-1, -2).reshape(*lead, d)
    q, k = deinterleave(q), deinterleave(k)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def mlp(w, p, x):
    gate = x @ w[p + "gate_proj.weight"].T
    up = x @ w[p + "up_proj.weight"].T
    return (torch.nn.functional.silu(gate) * up) @ w[p + "down_proj.weight"].T


def moe_gate(cfg, w, p, x):
    """MoEGate.forward: (topk_idx, topk_weight), both [T, top_k]."""
    T = x.shape[0]
    E, top_k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    n_group, topk_group = cfg.get("n_group") or 1, cfg.get("topk_group") or 1
    logits = x.float() @ w[p + "gate.weight"].float().T
    if cfg.get("scoring_func", "softmax") == "softmax":
        scores = logits.softmax(dim=-1, dtype=torch.float32)
    else:
        scores = logits.sigmoid()
    method = cfg.get("topk_method", "greedy")
    if method in ("greedy", "gready"):
        topk_weight, topk_idx = torch.topk(scores, k=top_k, dim=-1, sorted=False)
    elif method == "group_limited_greedy":
        group_scores = scores.view(T, n_group, -1).max(dim=-1).values
        group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, -1)
        tmp = scores.masked_fill(~score_mask.bool(), 0.0)
        topk_weight, topk_idx = torch.topk(tmp, k=top_k, dim=-1, sorted=False)
    elif method == "noaux_tc":
        choice = scores + w[p + "gate.e_score_correction_bias"].unsqueeze(0)
        group_scores = choice.view(T, n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = group_mask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, -1)
        # The published code fills with 0.0; the tests keep every choice score positive, where
        # that equals excluding the masked experts (what Pagoda and DeepSeek's model.py do).
        assert (choice > 0).all()
        tmp = choice.masked_fill(~score_mask.bool(), 0.0)
        _, topk_idx = torch.topk(tmp, k=top_k, dim=-1, sorted=False)
        topk_weight = scores.gather(1, topk_idx)
    else:
        raise ValueError(method)
    rsf = cfg.get("routed_scaling_factor", 1.0)
    norm = top_k > 1 and cfg.get("norm_topk_prob", False)
    if cfg["architectures"][0] == "DeepseekV2ForCausalLM":
        # V2: normalise, or else scale.
        topk_weight = topk_weight / (topk_weight.sum(-1, keepdim=True) + 1e-20) if norm else topk_weight * rsf
    else:
        # V3: normalise if asked, then always scale.
        if norm:
            topk_weight = topk_weight / (topk_weight.sum(-1, keepdim=True) + 1e-20)
        topk_weight = topk_weight * rsf
    return topk_idx, topk_weight


def moe(cfg, w, p, x):
    topk_idx, topk_weight = moe_gate(cfg, w, p + "mlp.", x)
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(topk_idx.shape[1]):
            e = int(topk_idx[t, k])
            y[t] += topk_weight[t, k] * mlp(w, p + f"mlp.experts.{e}.", x[t:t + 1])[0]
    if cfg.get("n_shared_experts"):
        y = y + mlp(w, p + "mlp.shared_experts.", x)
    return y


def attention(cfg, w, p, x, cos, sin):
    T = x.shape[0]
    H = cfg["num_attention_heads"]
    nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    rank, eps = cfg["kv_lora_rank"], cfg["rms_norm_eps"]
    a = p + "self_attn."
    if cfg.get("q_lora_rank") is None:
        q = x @ w[a + "q_proj.weight"].T
    else:
        q = rms_norm(x @ w[a + "q_a_proj.weight"].T, w[a + "q_a_layernorm.weight"], eps) @ w[a + "q_b_proj.weight"].T
    q = q.view(T, H, nope + rope).transpose(0, 1)  # [H, T, qhd]
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    ckv = x @ w[a + "kv_a_proj_with_mqa.weight"].T
    c, k_pe = ckv[:, :rank], ckv[:, rank:]
    k_pe = k_pe.view(1, T, rope)
    kv = (rms_norm(c, w[a + "kv_a_layernorm.weight"], eps) @ w[a + "kv_b_proj.weight"].T)
    kv = kv.view(T, H, nope + vd).transpose(0, 1)  # [H, T, nope + v]
    k_nope, v = kv[..., :nope], kv[..., nope:]
    q_pe, k_pe = apply_rotary_pos_emb(q_pe, k_pe, cos, sin)
    qs = torch.cat([q_nope, q_pe], dim=-1)
    ks = torch.cat([k_nope, k_pe.expand(H, T, rope)], dim=-1)
    mask = torch.full((T, T), float("-inf")).triu(1)
    scores = qs @ ks.transpose(1, 2) * softmax_scale(cfg) + mask
    out = torch.softmax(scores, dim=-1, dtype=torch.float32) @ v  # [H, T, v]
    return out.transpose(0, 1).reshape(T, H * vd) @ w[a + "o_proj.weight"].T


def decoder_layer(cfg, w, i, h, cos, sin):
    """One decoder layer of index i (an MTP layer's index is num_hidden_layers or more)."""
    eps = cfg["rms_norm_eps"]
    p = f"model.layers.{i}."
    h = h + attention(cfg, w, p, rms_norm(h, w[p + "input_layernorm.weight"], eps), cos, sin)
    x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
    moe_layer = is_moe_layer(cfg, i) or (i >= cfg["num_hidden_layers"] and cfg.get("n_routed_experts"))
    return h + (moe(cfg, w, p, x) if moe_layer else mlp(w, p + "mlp.", x))


def deepseek_hidden(cfg, w, ids):
    """The last decoder layer's output [len(ids), hidden], before the final norm."""
    cos, sin = rope_cos_sin(cfg, len(ids))
    h = w["model.embed_tokens.weight"][torch.tensor(ids)]
    for i in range(cfg["num_hidden_layers"]):
        h = decoder_layer(cfg, w, i, h, cos, sin)
    return h


def deepseek_forward(cfg, w, ids):
    """Logits [len(ids), vocab] of one sequence, every position."""
    h = rms_norm(deepseek_hidden(cfg, w, ids), w["model.norm.weight"], cfg["rms_norm_eps"])
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return h @ head.T


def mtp_forward(cfg, w, next_ids, previous_hidden):
    """DeepSeek-V3's first multi-token-prediction module (technical report, section 2.2), over one
    sequence from position 0: row i joins the token after position i (next_ids[i]) with the
    hidden state at i (previous_hidden[i]: the main model's last layer before its norm, or this
    module's own output). Returns (logits, output) [len, vocab] and [len, hidden]; row i of the
    logits predicts the token two after position i."""
    eps, i = cfg["rms_norm_eps"], cfg["num_hidden_layers"]
    p = f"model.layers.{i}."
    emb = w.get(p + "embed_tokens.weight", w["model.embed_tokens.weight"])[torch.tensor(next_ids)]
    joined = torch.cat([rms_norm(emb, w[p + "enorm.weight"], eps),
                        rms_norm(previous_hidden, w[p + "hnorm.weight"], eps)], dim=-1)
    h = joined @ w[p + "eh_proj.weight"].T
    cos, sin = rope_cos_sin(cfg, len(next_ids))
    h = decoder_layer(cfg, w, i, h, cos, sin)
    head = w.get(p + "shared_head.head.weight", w.get("lm_head.weight"))
    return rms_norm(h, w[p + "shared_head.norm.weight"], eps) @ head.T, h


# ---------------------------------------------------------------------------------------------
# Random weights at any shape.

def random_deepseek_weights(cfg, seed, num_mtp_layers=0):
    g = torch.Generator().manual_seed(seed)
    hidden, H = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    rank, qr = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    vocab = cfg["vocab_size"]

    def mat(rows, cols):
        return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    def add_mlp(w, p, inter):
        w[p + "gate_proj.weight"] = mat(inter, hidden)
        w[p + "up_proj.weight"] = mat(inter, hidden)
        w[p + "down_proj.weight"] = mat(hidden, inter)

    w = {"model.embed_tokens.weight": torch.randn(vocab, hidden, generator=g)}
    for i in range(cfg["num_hidden_layers"] + num_mtp_layers):
        p = f"model.layers.{i}."
        a = p + "self_attn."
        w[p + "input_layernorm.weight"] = norm(hidden)
        w[p + "post_attention_layernorm.weight"] = norm(hidden)
        if qr is None:
            w[a + "q_proj.weight"] = mat(H * (nope + rope), hidden)
        else:
            w[a + "q_a_proj.weight"] = mat(qr, hidden)
            w[a + "q_a_layernorm.weight"] = norm(qr)
            w[a + "q_b_proj.weight"] = mat(H * (nope + rope), qr)
        w[a + "kv_a_proj_with_mqa.weight"] = mat(rank + rope, hidden)
        w[a + "kv_a_layernorm.weight"] = norm(rank)
        w[a + "kv_b_proj.weight"] = mat(H * (nope + vd), rank)
        w[a + "o_proj.weight"] = mat(hidden, H * vd)
        if is_moe_layer(cfg, i) or i >= cfg["num_hidden_layers"]:
            E = cfg["n_routed_experts"]
            # Router logits of a few units, so softmax/sigmoid scores are well separated.
            w[p + "mlp.gate.weight"] = 3.0 * mat(E, hidden)
            if cfg.get("topk_method") == "noaux_tc":
                w[p + "mlp.gate.e_score_correction_bias"] = 0.3 * torch.rand(E, generator=g)
            for e in range(E):
                add_mlp(w, p + f"mlp.experts.{e}.", cfg["moe_intermediate_size"])
            if cfg.get("n_shared_experts"):
                add_mlp(w, p + "mlp.shared_experts.", cfg["moe_intermediate_size"] * cfg["n_shared_experts"])
        else:
            add_mlp(w, p + "mlp.", cfg["intermediate_size"])
        if i >= cfg["num_hidden_layers"]:
            # What an MTP layer adds to a decoder layer; its own embedding and head, as the
            # published checkpoints store them (drawn here, so sharing the model's would show).
            w[p + "embed_tokens.weight"] = torch.randn(vocab, hidden, generator=g)
            w[p + "enorm.weight"] = norm(hidden)
            w[p + "hnorm.weight"] = norm(hidden)
            w[p + "eh_proj.weight"] = mat(hidden, 2 * hidden)
            w[p + "shared_head.norm.weight"] = norm(hidden)
            w[p + "shared_head.head.weight"] = mat(vocab, hidden)
    w["model.norm.weight"] = norm(hidden)
    if not cfg.get("tie_word_embeddings", False):
        w["lm_head.weight"] = mat(vocab, hidden)
    return w
