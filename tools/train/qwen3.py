"""Qwen3 target and DFlash draft in plain PyTorch, MLX affine quantization, safetensors I/O.

The target's module tree copies HF `Qwen3ForCausalLM` (same parameter names,
same maths: fp32 RMSNorm, q/k-norm per head before neox RoPE, GQA, SiLU MLP,
tied lm_head), so its state_dict is an HF checkpoint. The draft follows
the DFlash design (draft architecture) and carries z-lab's bare tensor names.
Runs on torch 1.13 (CPU, for tests) and torch 2.x (GPU).
"""
import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F

MASK_ID = 151669
IM_END = 151645
EOT = 151643


# --------------------------------------------------------------------------- building blocks

class RMSNorm(nn.Module):
    def __init__(self, n, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight.to(dt) * x.to(dt)


def rope_cos_sin(pos, head_dim, theta, dtype):
    """pos [B,T] int -> cos, sin [B,1,T,head_dim] (HF 'default' rope, neox halves)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=pos.device, dtype=torch.float32) / head_dim))
    f = pos.float()[..., None] * inv  # [B,T,hd/2]
    emb = torch.cat([f, f], -1)
    return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def rot_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def apply_rope(x, cos, sin):
    return x * cos + rot_half(x) * sin


def attend(q, k, v, mask=None, causal=False):
    """q [B,H,Tq,d], k/v [B,Hkv,Tk,d]; mask bool [B|1,1,Tq,Tk] True = may attend."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal and mask is None)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal and mask is None:
        tq, tk = q.shape[2], k.shape[2]
        mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(tk - tq)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


# Fake quantization (straight-through) switch: when set, every Linear weight and
# the embedding go through quantize->dequantize in the forward pass.
class QState:
    bits = 0
    group = 64


def qw(w):
    if not QState.bits:
        return w
    return w + (fake_quant(w, QState.bits, QState.group) - w).detach()


class Linear(nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(o, i))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x):
        return F.linear(x, qw(self.weight).to(x.dtype))


class MLP(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = Linear(h, i), Linear(h, i), Linear(i, h)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, hd = c["hidden_size"], c["head_dim"]
        self.nh, self.nkv, self.hd = c["num_attention_heads"], c["num_key_value_heads"], hd
        self.q_proj = Linear(h, self.nh * hd)
        self.k_proj = Linear(h, self.nkv * hd)
        self.v_proj = Linear(h, self.nkv * hd)
        self.o_proj = Linear(self.nh * hd, h)
        self.q_norm = RMSNorm(hd, c["rms_norm_eps"])
        self.k_norm = RMSNorm(hd, c["rms_norm_eps"])

    def qkv(self, x, cos, sin):
        B, T, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(B, T, self.nh, self.hd)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, T, self.nkv, self.hd)).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd).transpose(1, 2)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v

    def out(self, a):
        B, H, T, d = a.shape
        return self.o_proj(a.transpose(1, 2).reshape(B, T, H * d))


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = MLP(c["hidden_size"], c["intermediate_size"])
        self.input_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])

    def forward(self, x, cos, sin, cache=None, mask=None):
        """cache: None (causal over x) or (K, V, n): K/V [B,Hkv,Tmax,d] buffers
        holding n committed rows; x's rows are written at n.. and attend per mask."""
        q, k, v = self.self_attn.qkv(self.input_layernorm(x), cos, sin)
        if cache is None:
            a = attend(q, k, v, mask, causal=True)
        else:
            K, V, n = cache
            K[:, :, n:n + k.shape[2]] = k
            V[:, :, n:n + k.shape[2]] = v
            a = attend(q, K[:, :, :n + k.shape[2]], V[:, :, :n + k.shape[2]], mask, causal=mask is None)
        x = x + self.self_attn.out(a)
        return x + self.mlp(self.post_attention_layernorm(x))


class Embedding(nn.Module):
    def __init__(self, n, h):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, h))
        nn.init.normal_(self.weight, std=0.02)


class Qwen3Body(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])


class Qwen3(nn.Module):
    """HF-compatible Qwen3ForCausalLM with tied embeddings (state_dict keys model.*)."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        self.model = Qwen3Body(c)
        self._ecache = [None]  # a list, so that nn.Module does not register it

    def emb_weight(self):
        return qw(self.model.embed_tokens.weight)

    def forward(self, ids, pos=None, caches=None, mask=None, taps=(), dtype=None):
        """ids [B,T] -> (final normed hidden [B,T,H], {layer: output of that layer}).
        caches: list per layer of (K, V, n) or None; dtype: activation dtype
        (parameters stay as they are and are cast per use)."""
        B, T = ids.shape
        if pos is None:
            pos = torch.arange(T, device=ids.device)[None].expand(B, T)
        E = self.emb_weight()
        self._ecache[0] = E  # reused by logits() in the same step (fake-quant is costly)
        x = F.embedding(ids, E)
        dt = dtype or x.dtype
        x = x.to(dt)
        cos, sin = rope_cos_sin(pos, self.c["head_dim"], self.c["rope_theta"], dt)
        feats = {}
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, None if caches is None else caches[i], mask)
            if i in taps:
                feats[i] = x
        return self.model.norm(x), feats

    def logits(self, h):
        E = self._ecache[0]
        if E is None or not QState.bits:
            E = self.emb_weight()
        self._ecache[0] = None
        return F.linear(h, E.to(h.dtype))


class DraftLayer(Layer):
    def forward_block(self, x, c, cos_b, sin_b, cos_c, sin_c, mask):
        """x [B,Q,H] block rows, c [B,S,H] fused context; keys = [context | block]."""
        at = self.self_attn
        q, kb, vb = at.qkv(self.input_layernorm(x), cos_b, sin_b)
        B, S, _ = c.shape
        kc = at.k_norm(at.k_proj(c).view(B, S, at.nkv, at.hd)).transpose(1, 2)
        kc = apply_rope(kc, cos_c, sin_c)
        vc = at.v_proj(c).view(B, S, at.nkv, at.hd).transpose(1, 2)
        a = attend(q, torch.cat([kc, kb], 2), torch.cat([vc, vb], 2), mask)
        x = x + at.out(a)
        return x + self.mlp(self.post_attention_layernorm(x))


class Draft(nn.Module):
    """DFlash draft (spec 1.2-1.5); tensor names as z-lab: fc, hidden_norm, layers.N.*, norm."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        K, H = len(c["dflash_config"]["target_layer_ids"]), c["hidden_size"]
        self.fc = Linear(K * H, H)
        self.hidden_norm = RMSNorm(H, c["rms_norm_eps"])
        self.layers = nn.ModuleList([DraftLayer(c) for _ in range(c["num_hidden_layers"])])
        self.norm = RMSNorm(H, c["rms_norm_eps"])

    def forward(self, feats, ctx_pos, x, blk_pos, mask=None):
        """feats [B,S,K*H] target features, x [B,Q,H] block embeddings,
        positions [B,S]/[B,Q]; mask [B,1,Q,S+Q] or None (all visible).
        Returns normed block hidden states [B,Q,H]."""
        c = self.hidden_norm(self.fc(feats))
        hd, th = self.c["head_dim"], self.c["rope_theta"]
        cos_c, sin_c = rope_cos_sin(ctx_pos, hd, th, x.dtype)
        cos_b, sin_b = rope_cos_sin(blk_pos, hd, th, x.dtype)
        for layer in self.layers:
            x = layer.forward_block(x, c, cos_b, sin_b, cos_c, sin_c, mask)
        return self.norm(x)


def draft_layer_ids(n_target, n_draft):
    """Spec 2.2 (build_target_layer_ids)."""
    if n_draft == 1:
        return [n_target // 2]
    start, end = 1, n_target - 3
    return [int(round(start + i * (end - start) / (n_draft - 1))) for i in range(n_draft)]


# --------------------------------------------------------------------------- configs

def target_config(hidden, layers, heads, kv_heads, inter, head_dim=64):
    return {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 151936, "hidden_size": hidden, "intermediate_size": inter,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
        "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "attention_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
        "use_cache": True, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": layers, "layer_types": ["full_attention"] * layers,
        "bos_token_id": 151643, "eos_token_id": 151645, "torch_dtype": "bfloat16",
        "dtype": "bfloat16", "initializer_range": 0.02,
    }


def draft_config(tc, n_layers, block_size=16):
    ids = draft_layer_ids(tc["num_hidden_layers"], n_layers)
    return {
        "architectures": ["DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3", "block_size": block_size,
        "dflash_config": {"mask_token_id": MASK_ID, "target_layer_ids": ids},
        "num_target_layers": tc["num_hidden_layers"], "num_hidden_layers": n_layers,
        "hidden_size": tc["hidden_size"], "intermediate_size": tc["intermediate_size"],
        "num_attention_heads": tc["num_attention_heads"], "num_key_value_heads": tc["num_key_value_heads"],
        "head_dim": tc["head_dim"], "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "rope_scaling": None,
        "max_position_embeddings": tc["max_position_embeddings"], "vocab_size": 151936,
        "layer_types": ["full_attention"] * n_layers, "sliding_window": None, "use_sliding_window": False,
        "attention_bias": False, "attention_dropout": 0.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "dtype": "bfloat16",
        "initializer_range": 0.02,
    }


# --------------------------------------------------------------------------- MLX affine quantization

def quant_params(w, bits, group):
    """w [out, in] -> q uint8-valued int tensor [out, in], scales, biases [out, in/group] (bf16).
    w ~= scales * q + biases per group; scales/biases are rounded to bf16 first and q is
    chosen against the rounded values, so dequantizing the stored tensors is exact."""
    o, i = w.shape
    assert i % group == 0, (w.shape, group)
    g = w.float().reshape(o, i // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    n = (1 << bits) - 1
    scale = ((hi - lo) / n).clamp(min=1e-8).to(torch.bfloat16)
    bias = lo.to(torch.bfloat16)
    s, b = scale.float()[..., None], bias.float()[..., None]
    q = torch.round((g - b) / s).clamp(0, n)
    return q.reshape(o, i).to(torch.int32), scale, bias


def dequant(q, scale, bias, group):
    o, i = q.shape
    w = q.float().reshape(o, i // group, group) * scale.float()[..., None] + bias.float()[..., None]
    return w.reshape(o, i)


def fake_quant(w, bits, group):
    q, s, b = quant_params(w.detach(), bits, group)
    return dequant(q, s, b, group).to(w.dtype)


def pack(q, bits):
    """q [out, in] ints < 2^bits -> int32 [out, in*bits/32]; element j at bit (j*bits)%32 of word j*bits/32."""
    o, i = q.shape
    per = 32 // bits
    q = q.to(torch.int64).reshape(o, i // per, per)
    sh = (torch.arange(per, dtype=torch.int64) * bits).to(q.device)
    words = (q << sh).sum(-1)  # < 2^32
    words = torch.where(words >= 2 ** 31, words - 2 ** 32, words)
    return words.to(torch.int32)


def unpack(words, bits, n_in):
    o = words.shape[0]
    per = 32 // bits
    w = words.to(torch.int64) & 0xFFFFFFFF
    sh = (torch.arange(per, dtype=torch.int64) * bits).to(w.device)
    q = (w[..., None] >> sh) & ((1 << bits) - 1)
    return q.reshape(o, -1)[:, :n_in]


# --------------------------------------------------------------------------- safetensors (own reader/writer)

_DT = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int32: "I32"}
_TD = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32,
       "U32": torch.int32}


def save_st(path, tensors, meta=None, u32=()):
    """tensors {name: tensor}; names in u32 are int32 tensors stored as U32."""
    hdr, off, blobs = {}, 0, []
    for k in sorted(tensors):
        t = tensors[k].detach().cpu().contiguous()
        b = t.view(torch.int16).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes()
        hdr[k] = {"dtype": "U32" if k in u32 else _DT[t.dtype], "shape": list(t.shape),
                  "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    if meta:
        hdr["__metadata__"] = meta
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def load_st(path):
    import numpy as np
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = _TD[v["dtype"]]
        raw = data[a:b]
        if dt == torch.bfloat16:
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16)
        else:
            npdt = {torch.float32: np.float32, torch.float16: np.float16, torch.int32: np.int32}[dt]
            t = torch.from_numpy(np.frombuffer(raw, dtype=npdt).copy())
        out[k] = t.reshape(v["shape"])
    return out


# --------------------------------------------------------------------------- export / import

QUANT_SKIP = ("norm",)  # norms stay bf16


def export_target(model, out_dir, bits, group, gen_cfg=True):
    """Write config.json + model.safetensors in the MLX affine layout (bits>0) or bf16."""
    os.makedirs(out_dir, exist_ok=True)
    c = dict(model.c)
    sd = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    out, u32 = {}, []
    for k, w in sd.items():
        if bits and w.dim() == 2 and not any(s in k.split(".")[-2] for s in QUANT_SKIP):
            base = k[: -len(".weight")]
            q, s, b = quant_params(w, bits, group)
            out[base + ".weight"] = pack(q, bits)
            out[base + ".scales"] = s
            out[base + ".biases"] = b
            u32.append(base + ".weight")
        else:
            out[k] = w.to(torch.bfloat16)
    if bits:
        c["quantization"] = {"group_size": group, "bits": bits}
        c["quantization_config"] = {"group_size": group, "bits": bits}
    save_st(os.path.join(out_dir, "model.safetensors"), out, {"format": "mlx" if bits else "pt"}, u32)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    if gen_cfg:
        with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
            json.dump({"bos_token_id": 151643, "eos_token_id": [IM_END, EOT], "pad_token_id": EOT,
                       "do_sample": False}, f, indent=2)


def load_target(model_dir, dtype=torch.float32):
    """Load a target directory (bf16 or MLX-quantized) into Qwen3, dequantizing in fp32."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    t = load_st(os.path.join(model_dir, "model.safetensors"))
    qc = c.get("quantization")
    sd = {}
    for k, v in t.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        base = k[: -len(".weight")]
        if qc and base + ".scales" in t:
            bits, g = qc["bits"], qc["group_size"]
            n_in = t[base + ".scales"].shape[1] * g
            v = dequant(unpack(v, bits, n_in), t[base + ".scales"], t[base + ".biases"], g)
        sd[k] = v.to(dtype)
    c = {k: v for k, v in c.items() if k not in ("quantization", "quantization_config")}
    m = Qwen3(c)
    m.load_state_dict(sd, strict=True)
    return m.to(dtype)


def export_draft(draft, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16) for k, v in draft.state_dict().items()}
    save_st(os.path.join(out_dir, "model.safetensors"), sd, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(draft.c, f, indent=2)


def load_draft(model_dir, dtype=torch.float32):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    d = Draft(c)
    d.load_state_dict({k: v.to(dtype) for k, v in load_st(os.path.join(model_dir, "model.safetensors")).items()})
    return d.to(dtype)
