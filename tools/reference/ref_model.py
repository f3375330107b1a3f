"""Independent Qwen3 / Llama forward pass (no transformers), used to cross-check
the HF reference and to run it in float64, plus the MLX-style affine
quantization used by the tiny-qwen3-q8/q4 test checkpoints.

RefTarget has the target interface of dflash_ref (run/new_cache/crop/embed/
lm_head). It reads HF layouts: single or sharded safetensors, tied or untied
embeddings, q_norm/k_norm when present (Qwen3), llama3 RoPE scaling, and MLX
quantized weights (NAME.weight uint32 + NAME.scales + NAME.biases).
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F

import st
from dflash_ref import apply_rope, attention, rms_norm, rope_cos_sin, rope_inv_freq


# ----------------------------------------------------------------------------
# MLX affine quantization: w = scales * q + biases per group of `group`
# consecutive input elements; q packed little end first into uint32 words
# (element j of a row at bit (j*bits) % 32 of word (j*bits) / 32).

def quantize(w, bits, group, scale_dtype):
    """w float [out, in] -> (packed uint32 np [out, in*bits/32], scales, biases
    [out, in/group] in scale_dtype). Scale/bias follow MLX's rule: the extreme
    of larger magnitude is the bias ("edge") and is hit exactly by an integer
    q0, so 0.0 is representable; the scale is negative when that edge is the
    maximum. q is then rounded against the stored (rounded) scale and bias."""
    out_f, in_f = w.shape
    nb = (1 << bits) - 1
    g = w.double().reshape(out_f, in_f // group, group)
    wmin, wmax = g.min(-1).values, g.max(-1).values
    lo_edge = wmin.abs() > wmax.abs()
    sc = ((wmax - wmin) / nb).clamp_min(1e-7)
    sc = torch.where(lo_edge, sc, -sc)
    edge = torch.where(lo_edge, wmin, wmax)
    q0 = torch.round(edge / sc)
    sc = torch.where(q0 != 0, edge / q0, sc)
    bi = torch.where(q0 == 0, torch.zeros_like(edge), edge)
    sc_s, bi_s = sc.to(scale_dtype), bi.to(scale_dtype)
    q = torch.round((g - bi_s.double()[..., None]) / sc_s.double()[..., None]).clamp(0, nb)
    q = q.reshape(out_f, in_f).to(torch.int64).numpy().astype(np.uint64)
    per = 32 // bits
    q = q.reshape(out_f, in_f // per, per)
    packed = np.zeros((out_f, in_f // per), dtype=np.uint64)
    for e in range(per):
        packed |= q[:, :, e] << np.uint64(e * bits)
    return packed.astype(np.uint32), sc_s, bi_s


def unpack(packed, bits):
    """uint32 np [out, in*bits/32] -> int64 torch [out, in]."""
    per = 32 // bits
    p = packed.astype(np.uint64)
    cols = [(p >> np.uint64(e * bits)) & np.uint64((1 << bits) - 1) for e in range(per)]
    q = np.stack(cols, -1).reshape(packed.shape[0], packed.shape[1] * per)
    return torch.from_numpy(q.astype(np.int64))


def dequantize(packed, scales, biases, bits, group):
    """-> float64 [out, in]; exact (scale*q and the sum fit in float64), so
    casting to float32 gives the correctly rounded fl32(scale*q + bias)."""
    q = unpack(packed, bits).double()
    out_f, in_f = q.shape
    q = q.reshape(out_f, in_f // group, group)
    w = scales.double()[..., None] * q + biases.double()[..., None]
    return w.reshape(out_f, in_f)


def load_weights(model_dir):
    """-> (config dict, {name without 'model.' prefix: float64/float tensor})
    with quantized weights dequantized (float64)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    raw = st.load_dir(model_dir)
    qc = cfg.get("quantization") or cfg.get("quantization_config")
    w = {}
    for name, t in raw.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        if isinstance(t, np.ndarray):
            base = name[: -len(".weight")]
            t = dequantize(t, raw[base + ".scales"], raw[base + ".biases"], qc["bits"], qc["group_size"])
        w[name[6:] if name.startswith("model.") else name] = t
    return cfg, w


# ----------------------------------------------------------------------------

class RefTarget:
    """Causal decoder (Qwen3 or Llama) in plain torch, any float dtype."""

    def __init__(self, model_dir=None, device="cpu", dtype=torch.float32, cfg=None, weights=None):
        if model_dir is not None:
            cfg, weights = load_weights(model_dir)
        self.cfg = cfg
        self.device, self.dtype = torch.device(device), dtype
        self.W = {k: v.to(device=device, dtype=dtype) for k, v in weights.items()}
        self.H = cfg["hidden_size"]
        self.nq = cfg["num_attention_heads"]
        self.nkv = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or self.H // self.nq
        self.eps = cfg["rms_norm_eps"]
        self.n_layers = cfg["num_hidden_layers"]
        self.qk_norm = "layers.0.self_attn.q_norm.weight" in self.W
        self.lm = self.W.get("lm_head.weight", self.W["embed_tokens.weight"])
        if cfg.get("tie_word_embeddings", False):
            assert "lm_head.weight" not in weights or torch.equal(weights["lm_head.weight"], weights["embed_tokens.weight"])
        self.inv_freq = rope_inv_freq(cfg, self.hd)

    def new_cache(self):
        return {"k": [None] * self.n_layers, "v": [None] * self.n_layers, "n": 0}

    def crop(self, cache, n):
        cache["k"] = [k[:n] for k in cache["k"]]
        cache["v"] = [v[:n] for v in cache["v"]]
        cache["n"] = n

    def embed(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        return self.W["embed_tokens.weight"][ids]

    def lm_head(self, y):
        return y.to(self.dtype) @ self.lm.T

    @torch.no_grad()
    def run(self, ids, cache=None):
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        T = ids.shape[0]
        start = cache["n"] if cache is not None else 0
        pos = torch.arange(start, start + T, device=self.device)
        cos, sin = rope_cos_sin(self.inv_freq, pos, self.dtype)
        W, eps = self.W, self.eps
        x = W["embed_tokens.weight"][ids]
        taps = []
        for l in range(self.n_layers):
            p = "layers.%d." % l
            u = rms_norm(x, W[p + "input_layernorm.weight"], eps)
            q = (u @ W[p + "self_attn.q_proj.weight"].T).view(T, self.nq, self.hd)
            k = (u @ W[p + "self_attn.k_proj.weight"].T).view(T, self.nkv, self.hd)
            v = (u @ W[p + "self_attn.v_proj.weight"].T).view(T, self.nkv, self.hd)
            if self.qk_norm:
                q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if cache is not None:
                if cache["k"][l] is not None:
                    k = torch.cat([cache["k"][l], k])
                    v = torch.cat([cache["v"][l], v])
                cache["k"][l], cache["v"][l] = k, v
            a = attention(q, k, v, causal_start=start)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            u = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            g = F.silu(u @ W[p + "mlp.gate_proj.weight"].T) * (u @ W[p + "mlp.up_proj.weight"].T)
            x = x + g @ W[p + "mlp.down_proj.weight"].T
            taps.append(x)
        if cache is not None:
            cache["n"] += T
        y = rms_norm(x, W["norm.weight"], eps)
        return y @ self.lm.T, taps
