#!/usr/bin/python3
"""`pagoda export-gguf` end to end, checked by the independent numpy reader (gguf_reference.py).

usage: check_export_gguf.py PAGODA_BINARY TESTDATA_DIR WORK_DIR

1. The real stories260K-hf (Llama, SentencePiece-style BPE) exported as f32 and q8_0: metadata,
   tokenizer, and q_proj / k_proj rows permuted per head exactly as llama.cpp's
   convert_hf_to_gguf.py does (w.reshape(n_head, 2, d/2, cols).swapaxes(1, 2)); every other
   matrix byte-identical to the source (f32) or to numpy's Q8_0 of it.
2. A generated Qwen2 model (byte-level BPE, q/k/v biases) exported as q4_0: no permutation,
   biases kept F32, gpt2 tokenizer with merges, padded vocabulary.
Exit 77 (skipped) without the test data.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reference import encode, read_gguf, tensor_bytes  # noqa: E402

pagoda, testdata, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def safetensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        s, t = e["data_offsets"]
        buf = raw[8 + n + s:8 + n + t]
        if e["dtype"] == "F32":
            a = np.frombuffer(buf, "<f4")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(buf, "<u2").astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F16":
            a = np.frombuffer(buf, "<f2").astype(np.float32)
        else:
            raise ValueError(e["dtype"])
        out[name] = a.reshape(e["shape"])
    return out


def export(model, kind, out):
    subprocess.run([pagoda, "export-gguf", "--model", model, "--type", kind, "--out", out],
                   check=True, stdout=subprocess.DEVNULL)
    version, kv, infos, data_start, _, data = read_gguf(out)
    check(version == 3, f"{out}: version {version}")
    tensors = {t["name"]: (t, tensor_bytes(data, data_start, t)) for t in infos}
    return {k: v["value"] for k, v in kv.items()}, tensors


def permute(w, n_head):
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
              "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
              "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}


def gguf_name(hf):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    parts = hf.split(".")  # model.layers.N.<module...>.weight|bias
    return f"blk.{parts[2]}.{GGUF_NAMES['.'.join(parts[3:-1])]}.{parts[-1]}"


def check_tensors(kind_type, src, tensors, config, permute_qk):
    n_head, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    check(len(tensors) == len(src), f"{len(tensors)} tensors, source has {len(src)}")
    for hf, w in src.items():
        name = gguf_name(hf)
        if name not in tensors:
            check(False, f"{name} missing")
            continue
        info, raw = tensors[name]
        check(info["ne"] == list(w.shape[::-1]), f"{name}: ne {info['ne']} for {w.shape}")
        if permute_qk and ".attn_q." in name:
            w = permute(w, n_head)
        elif permute_qk and ".attn_k." in name:
            w = permute(w, n_kv)
        want_type = 0 if w.ndim == 1 else (kind_type if w.shape[-1] % 32 == 0 or kind_type in (0, 1, 30) else 1)
        check(info["type"] == want_type, f"{name}: type {info['type']}, expected {want_type}")
        check(encode(info["type"], w.reshape(-1)) == raw, f"{name}: bytes differ from the source")


def stories():
    model = os.path.join(testdata, "models", "stories260K-hf")
    if not os.path.exists(os.path.join(model, "model.safetensors")):
        return False
    config = json.load(open(os.path.join(model, "config.json")))
    tok = json.load(open(os.path.join(model, "tokenizer.json")))
    src = safetensors(os.path.join(model, "model.safetensors"))
    for kind, type_id in (("f32", 0), ("q8_0", 8)):
        kv, tensors = export(model, kind, os.path.join(work, f"stories-{kind}.gguf"))
        check(kv["general.architecture"] == "llama", "architecture")
        check(kv["general.file_type"] == {"f32": 0, "q8_0": 7}[kind], "file_type")
        for key, want in (("llama.block_count", 5), ("llama.embedding_length", 64),
                          ("llama.feed_forward_length", 172), ("llama.attention.head_count", 8),
                          ("llama.attention.head_count_kv", 4), ("llama.context_length", 512),
                          ("llama.rope.dimension_count", 8), ("llama.vocab_size", 512)):
            check(kv.get(key) == want, f"{key} = {kv.get(key)}, expected {want}")
        check(abs(kv["llama.attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-10, "rms eps")
        check(kv["llama.rope.freq_base"] == 10000.0, "rope base")
        check(kv["tokenizer.ggml.model"] == "llama", "tokenizer model")
        tokens = kv["tokenizer.ggml.tokens"]["values"]
        vocab = sorted(tok["model"]["vocab"].items(), key=lambda e: e[1])
        check(tokens == [t for t, _ in vocab], "tokens are the vocab in id order")
        types = kv["tokenizer.ggml.token_type"]["values"]
        check(types[0] == 2 and types[1] == 3 and types[2] == 3, f"unk/bos/eos types {types[:3]}")
        check(types[3 + 10] == 6 and tokens[13] == "<0x0A>", "byte tokens")
        check(kv["tokenizer.ggml.bos_token_id"] == 1 and kv["tokenizer.ggml.eos_token_id"] == 2,
              "bos/eos ids")
        check(kv["tokenizer.ggml.add_bos_token"] is True, "add_bos_token")
        # the first merge's piece scores highest among merged pieces
        m0 = tok["model"]["merges"][0]
        first = "".join(m0) if isinstance(m0, list) else m0.replace(" ", "")
        scores = kv["tokenizer.ggml.scores"]["values"]
        check(scores[tok["model"]["vocab"][first]] == 0.0, "first merge scores 0")
        check_tensors(type_id, src, tensors, config, permute_qk=True)
    return True


def qwen2():
    model = os.path.join(work, "qwen2")
    subprocess.run([pagoda, "make-model", "--preset", "tiny", "--arch", "Qwen2ForCausalLM",
                    "--out", model], check=True, stdout=subprocess.DEVNULL)
    config = json.load(open(os.path.join(model, "config.json")))
    tok = json.load(open(os.path.join(model, "tokenizer.json")))
    src = safetensors(os.path.join(model, "model.safetensors"))
    kv, tensors = export(model, "q4_0", os.path.join(work, "qwen2-q4_0.gguf"))
    check(kv["general.architecture"] == "qwen2", "qwen2 architecture")
    check(kv["general.file_type"] == 2, "q4_0 file_type")
    check(kv["tokenizer.ggml.model"] == "gpt2", "gpt2 tokenizer")
    check(kv["tokenizer.ggml.pre"] == "gpt-2", f"pre {kv['tokenizer.ggml.pre']}")
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    check(kv["tokenizer.ggml.merges"]["values"] == merges, "merges")
    tokens = kv["tokenizer.ggml.tokens"]["values"]
    check(len(tokens) == config["vocab_size"], f"{len(tokens)} tokens for vocab {config['vocab_size']}")
    n_vocab = len(tok["model"]["vocab"]) + len(tok.get("added_tokens", []))
    if n_vocab < config["vocab_size"]:
        check(tokens[-1] == f"[PAD{config['vocab_size'] - 1}]", f"padding token {tokens[-1]}")
        check(kv["tokenizer.ggml.token_type"]["values"][-1] == 5, "padding is UNUSED")
    check(any(n.endswith("attn_q.bias") for n in tensors), "q bias exported")
    check_tensors(2, src, tensors, config, permute_qk=False)


have_stories = stories()
qwen2()
if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
if not have_stories:
    print("stories260K-hf not in the test data: only the generated Qwen2 model was checked")
print("export-gguf: all checks passed")
