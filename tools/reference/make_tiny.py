"""Deterministic tiny random checkpoints for the C engine's tests (HF layout).

    python3 tools/reference/make_tiny.py [--out tests/models]

Writes tiny-qwen3, tiny-llama3 (sharded), tiny-qwen3-q8, tiny-qwen3-q4 (MLX
affine layout) and tiny-draft (z-lab DFlash layout). Needs torch + numpy only
(no transformers); weights come from numpy's legacy RandomState, whose streams
are frozen, so the files are the same on any machine.

Sizes: hidden 32, intermediate 64, 6 layers, 4 q heads, 2 kv heads, head_dim 16
(q dim 64 != hidden), vocab 16384. Init: embeddings std 1, projections std
0.2 (fan-in 32) / 0.14 (fan-in 64), every norm weight uniform in [0.6, 1.4]:
logits have a spread of several units, so top-1/top-2 gaps are clear.

tiny-qwen3 relabel: random models fall into greedy loops; the token that ends
most greedy runs (an attractor) is swapped with id 16383 (the draft's
mask_token_id). Swapping two rows of a tied embedding only renames a token,
so the model stays a random model, but the target now likes to emit 16383 and
the draft - whose mask slots start from E[16383] - predicts 16383 on many
slots: DFlash rounds then accept several tokens, which exercises the accept
path (KV crop, multi-row feature push) in the tests. DRAFT_SCALE 1.1 puts the
draft where about half of its predictions are 16383 (at <= 1.0 it predicts
16383 everywhere, at >= 1.3 almost never, measured on prompts ending in 16383).
"""
import argparse
import collections
import json
import os
import shutil

import numpy as np
import torch

import st
from dflash_ref import build_target_layer_ids, greedy_generate
from ref_model import RefTarget, dequantize, quantize

V, H, I, L, NQ, NKV, HD = 16384, 32, 64, 6, 4, 2, 16
MASK = V - 1
DRAFT_LAYERS = 2
DRAFT_SCALE = 1.1       # draft projections = DRAFT_SCALE x target init (see below)
BOS, EOS = 151643, 151645
TOK_DIR = "../../../models/qwen3-tokenizer"


class Gen:
    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)

    def normal(self, shape, std):
        return torch.from_numpy(self.rng.standard_normal(shape).astype(np.float32) * np.float32(std))

    def norm(self, n):
        return torch.from_numpy(self.rng.uniform(0.6, 1.4, size=n).astype(np.float32))


def layer_tensors(g, prefix, qk_norm, scale=1.0):
    """One decoder layer, HF names, float32; draw order fixed."""
    t = {}
    t[prefix + "input_layernorm.weight"] = g.norm(H)
    t[prefix + "self_attn.q_proj.weight"] = g.normal((NQ * HD, H), 0.2 * scale)
    t[prefix + "self_attn.k_proj.weight"] = g.normal((NKV * HD, H), 0.2 * scale)
    t[prefix + "self_attn.v_proj.weight"] = g.normal((NKV * HD, H), 0.2 * scale)
    t[prefix + "self_attn.o_proj.weight"] = g.normal((H, NQ * HD), 0.14 * scale)
    if qk_norm:
        t[prefix + "self_attn.q_norm.weight"] = g.norm(HD)
        t[prefix + "self_attn.k_norm.weight"] = g.norm(HD)
    t[prefix + "post_attention_layernorm.weight"] = g.norm(H)
    t[prefix + "mlp.gate_proj.weight"] = g.normal((I, H), 0.2 * scale)
    t[prefix + "mlp.up_proj.weight"] = g.normal((I, H), 0.2 * scale)
    t[prefix + "mlp.down_proj.weight"] = g.normal((H, I), 0.14 * scale)
    return t


def bf16(tensors):
    return {k: v.to(torch.bfloat16) for k, v in tensors.items()}


def qwen3_config():
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": 512,
        "max_window_layers": L,
        "model_type": "qwen3",
        "num_attention_heads": NQ,
        "num_hidden_layers": L,
        "num_key_value_heads": NKV,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }


def llama3_config():
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": 512,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": NQ,
        "num_hidden_layers": L,
        "num_key_value_heads": NKV,
        "pretraining_tp": 1,
        "rms_norm_eps": 1e-06,
        "rope_scaling": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "vocab_size": V,
    }


def draft_config(layer_ids):
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "attention_bias": False,
        "attention_dropout": 0.0,
        "block_size": 16,
        "bos_token_id": BOS,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": layer_ids},
        "dtype": "bfloat16",
        "eos_token_id": EOS,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_types": ["full_attention"] * DRAFT_LAYERS,
        "max_position_embeddings": 512,
        "max_window_layers": DRAFT_LAYERS,
        "model_type": "qwen3",
        "num_attention_heads": NQ,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_key_value_heads": NKV,
        "num_target_layers": L,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }


GEN_CONFIG = {"bos_token_id": BOS, "do_sample": False, "eos_token_id": [EOS, BOS],
              "pad_token_id": BOS, "transformers_version": "4.51.0"}


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def new_dir(path, target=True):
    if os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)
    if target:
        write_json(os.path.join(path, "generation_config.json"), GEN_CONFIG)
        for fn in ("tokenizer.json", "tokenizer_config.json"):
            os.symlink(TOK_DIR + "/" + fn, os.path.join(path, fn))


def make_qwen3():
    g = Gen(1)
    t = {"model.embed_tokens.weight": g.normal((V, H), 1.0)}
    for l in range(L):
        t.update(layer_tensors(g, "model.layers.%d." % l, qk_norm=True))
    t["model.norm.weight"] = g.norm(H)
    t = bf16(t)
    # attractor relabel (see module doc); search in float32 with the plain model
    w = {k[6:]: v.float() for k, v in t.items()}
    ref = RefTarget(cfg=qwen3_config(), weights=w)
    g2 = np.random.RandomState(101)
    ends = collections.Counter()
    for _ in range(48):
        prompt = g2.randint(0, V, size=8).tolist()
        ends[greedy_generate(ref, prompt, 32, cached=True)[-1]] += 1
    top = sorted(ends.items(), key=lambda kv: (-kv[1], kv[0]))
    a = top[0][0]
    print("tiny-qwen3: greedy end tokens (token, count):", top[:5], "-> swap", a, "<->", MASK)
    e = t["model.embed_tokens.weight"].clone()
    e[[a, MASK]] = e[[MASK, a]]
    t["model.embed_tokens.weight"] = e
    return t


def make_llama3():
    g = Gen(2)
    t = {"model.embed_tokens.weight": g.normal((V, H), 1.0)}
    for l in range(L):
        t.update(layer_tensors(g, "model.layers.%d." % l, qk_norm=False))
    t["model.norm.weight"] = g.norm(H)
    t["lm_head.weight"] = g.normal((V, H), 1.0)
    return bf16(t)


def make_draft():
    g = Gen(3)
    t = {}
    for l in range(DRAFT_LAYERS):
        t.update(layer_tensors(g, "layers.%d." % l, qk_norm=True, scale=DRAFT_SCALE))
    t["fc.weight"] = g.normal((H, H * 2), 0.14)
    t["hidden_norm.weight"] = g.norm(H)
    t["norm.weight"] = g.norm(H)
    return bf16(t)


def quantized(t, bits, scale_dtype):
    """MLX layout: every Linear weight and the embedding quantized, norms kept."""
    q, worst, neg = {}, 0.0, 0
    for name, w in t.items():
        if name.endswith("_proj.weight") or name == "model.embed_tokens.weight":
            packed, sc, bi = quantize(w.float(), bits, 32, scale_dtype)
            base = name[: -len(".weight")]
            q[name], q[base + ".scales"], q[base + ".biases"] = packed, sc, bi
            err = (dequantize(packed, sc, bi, bits, 32) - w.double()).abs()
            step = sc.double().abs().repeat_interleave(32, 1)
            worst = max(worst, float((err / step).max()))
            neg += int((sc < 0).sum())
        else:
            q[name] = w
    print("q%d: max |dequant - w| = %.3f quantization steps; %d groups with negative scale"
          % (bits, worst, neg))
    assert worst < 1.5   # <= 0.5 step, or about 1 at an extreme clipped by the zero-exact scale
    return q


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/models")
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)

    qw = make_qwen3()
    d = os.path.join(out, "tiny-qwen3")
    new_dir(d)
    write_json(os.path.join(d, "config.json"), qwen3_config())
    st.save(os.path.join(d, "model.safetensors"), qw)

    for bits, sdt in ((8, torch.float16), (4, torch.bfloat16)):
        d = os.path.join(out, "tiny-qwen3-q%d" % bits)
        new_dir(d)
        cfg = qwen3_config()
        cfg["quantization"] = {"group_size": 32, "bits": bits}
        cfg["quantization_config"] = {"group_size": 32, "bits": bits}
        write_json(os.path.join(d, "config.json"), cfg)
        st.save(os.path.join(d, "model.safetensors"), quantized(qw, bits, sdt))

    d = os.path.join(out, "tiny-llama3")
    new_dir(d)
    write_json(os.path.join(d, "config.json"), llama3_config())
    st.save_sharded(d, make_llama3(), 3)

    layer_ids = build_target_layer_ids(L, DRAFT_LAYERS)
    assert layer_ids == [1, 3], layer_ids
    d = os.path.join(out, "tiny-draft")
    new_dir(d, target=False)
    write_json(os.path.join(d, "config.json"), draft_config(layer_ids))
    st.save(os.path.join(d, "model.safetensors"), make_draft())

    for name in sorted(os.listdir(out)):
        p = os.path.join(out, name)
        if os.path.isdir(p):
            size = sum(os.path.getsize(os.path.join(p, f)) for f in os.listdir(p)
                       if not os.path.islink(os.path.join(p, f)))
            print("%-16s %9d bytes" % (name, size))


if __name__ == "__main__":
    main()
