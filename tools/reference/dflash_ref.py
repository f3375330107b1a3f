"""Reference DFlash speculative decoding in plain PyTorch, written from
the DFlash design (draft, taps, block decoding) (not from any other implementation).

Importable:
    import sys; sys.path.insert(0, "tools/reference")
    import dflash_ref as D
    tgt = D.load_hf_target("path/to/qwen3", device="cuda", dtype=torch.bfloat16)
    drf = D.Draft("path/to/draft", device="cuda", dtype=torch.bfloat16)
    r = D.dflash_generate(tgt, drf, prompt_ids, max_new=256, block_size=16)
    r["tokens"], r["accept"]            # tau = mean(r["accept"])
    D.greedy_generate(tgt, prompt_ids, 256, cached=True)

A *target* is any object with
    run(ids, cache=None) -> (logits [T, V], taps: list of L tensors [T, H])
        taps[l] = output of decoder layer l (residual stream, before the final
        norm); with cache=None the ids start at position 0, otherwise they are
        appended at position cache length and the cache grows by T.
    new_cache(), crop(cache, n), embed(ids) -> [T, H], lm_head(y [T, H]) -> [T, V]
HFTarget wraps a transformers CausalLM; ref_model.RefTarget is an independent
implementation with the same interface (also usable in float64).
"""
import json
import math
import os

import torch
import torch.nn.functional as F


# ----------------------------------------------------------------------------
# math shared by the draft and ref_model.RefTarget

def rms_norm(x, w, eps):
    """x [..., n] / sqrt(mean(x^2) + eps) * w [n], in x's dtype."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_inv_freq(cfg, head_dim):
    """float64 [head_dim/2] inverse frequencies, with llama3 scaling if the config
    asks for it (HF rope_scaling / rope_parameters with rope_type "llama3")."""
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    theta = float(cfg.get("rope_theta", rs.get("rope_theta", 10000.0)))
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv
    if kind != "llama3":
        raise ValueError("rope_type %r not supported" % kind)
    factor = float(rs["factor"])
    lo, hi = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
    old = float(rs["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    out = inv.clone()
    for i in range(inv.numel()):
        if wavelen[i] < old / hi:          # high frequency: unchanged
            continue
        if wavelen[i] > old / lo:          # low frequency: slowed by factor
            out[i] = inv[i] / factor
        else:                              # in between: blend
            smooth = (old / wavelen[i] - lo) / (hi - lo)
            out[i] = (1 - smooth) * inv[i] / factor + smooth * inv[i]
    return out


def rope_cos_sin(inv_freq, pos, dtype):
    """inv_freq float64 [hd/2], pos long [T] -> cos, sin [T, 1, hd] in dtype
    (angles computed in dtype, like HF does in float32)."""
    ang = pos.to(dtype)[:, None] * inv_freq.to(device=pos.device, dtype=dtype)[None, :]
    ang = torch.cat([ang, ang], -1)
    return ang.cos()[:, None, :], ang.sin()[:, None, :]


def apply_rope(x, cos, sin):
    """x [T, heads, hd]; rotate-half (neox) pairs (d, d+hd/2)."""
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], -1)
    return x * cos + rot * sin


def attention(q, k, v, causal_start=None):
    """q [Tq, nq, hd], k, v [Tk, nkv, hd]; q head h reads kv head h // (nq/nkv).
    causal_start=None: no mask (DFlash block); else query i is at absolute
    position causal_start+i and sees keys 0..causal_start+i. -> [Tq, nq*hd]"""
    nq, nkv, hd = q.shape[1], k.shape[1], q.shape[2]
    k = k.repeat_interleave(nq // nkv, dim=1)
    v = v.repeat_interleave(nq // nkv, dim=1)
    s = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(hd)
    if causal_start is not None:
        qi = torch.arange(q.shape[0], device=q.device)[:, None] + causal_start
        kj = torch.arange(k.shape[0], device=q.device)[None, :]
        s = s.masked_fill(kj > qi, float("-inf"))
    p = torch.softmax(s, -1)
    return torch.einsum("hqk,khd->qhd", p, v).reshape(q.shape[0], nq * hd)


def build_target_layer_ids(n_target_layers, n_draft_layers):
    """Spec 2.2 rule (Python round = banker's rounding)."""
    if n_draft_layers == 1:
        return [n_target_layers // 2]
    start, end = 1, n_target_layers - 3
    return [int(round(start + i * (end - start) / (n_draft_layers - 1)))
            for i in range(n_draft_layers)]


# ----------------------------------------------------------------------------
# HF target adapter

class HFTarget:
    """Wraps a transformers *ForCausalLM. Layer outputs are captured with forward
    hooks on the decoder layers (HF's own last hidden_states entry is after the
    final norm)."""

    def __init__(self, model):
        self.m = model.eval()
        self.layers = model.model.layers
        self.n_layers = len(self.layers)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self._taps = None
        for i, layer in enumerate(self.layers):
            layer.register_forward_hook(self._hook(i))

    def _hook(self, i):
        def f(mod, args, out):
            if self._taps is not None:
                h = out[0] if isinstance(out, (tuple, list)) else out
                self._taps[i] = h[0]
        return f

    @torch.no_grad()
    def run(self, ids, cache=None):
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)[None]
        self._taps = [None] * self.n_layers
        if cache is None:
            out = self.m(input_ids=ids, use_cache=False)
        else:
            out = self.m(input_ids=ids, past_key_values=cache, use_cache=True)
        taps, self._taps = self._taps, None
        return out.logits[0], taps

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache()

    def crop(self, cache, n):
        """Keep the first n positions. crop(-k) removes k rows in every
        transformers version (a positive argument is a deprecated absolute
        length, and crop(0) empties the cache before v5.14)."""
        k = cache.get_seq_length() - n
        if k > 0:
            cache.crop(-k)

    @torch.no_grad()
    def embed(self, ids):
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)
        return self.m.get_input_embeddings()(ids)

    @torch.no_grad()
    def lm_head(self, y):
        return self.m.get_output_embeddings()(y.to(self.dtype))


def load_hf_target(path, device="cpu", dtype=torch.float32, attn="eager"):
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation=attn)
    except TypeError:  # transformers 4.x
        m = AutoModelForCausalLM.from_pretrained(path, torch_dtype=dtype, attn_implementation=attn)
    return HFTarget(m.to(device))


# ----------------------------------------------------------------------------
# draft

def _load_tensors(path):
    try:
        from safetensors.torch import load_file
        return load_file(path)
    except ImportError:
        import st
        return st.load(path)[0]


class DraftCache:
    """Persistent per-layer context K/V (after k_norm + RoPE) for committed
    positions 0..n-1. k[l], v[l]: [n, n_kv_heads, head_dim]."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.n = 0


class Draft:
    """DFlash draft (spec 1.2-1.5) loaded from a z-lab style directory:
    config.json (block_size, dflash_config{mask_token_id,target_layer_ids}) and
    model.safetensors with bare names (layers.N.*, fc, hidden_norm, norm)."""

    def __init__(self, path, device="cpu", dtype=torch.float32):
        with open(os.path.join(path, "config.json")) as f:
            cfg = json.load(f)
        self.cfg = cfg
        w = _load_tensors(os.path.join(path, "model.safetensors"))
        w = {(k[6:] if k.startswith("model.") else k): v for k, v in w.items()}
        self.W = {k: v.to(device=device, dtype=dtype) for k, v in w.items()}
        self.device, self.dtype = torch.device(device), dtype
        self.H = cfg["hidden_size"]
        self.nq = cfg["num_attention_heads"]
        self.nkv = cfg["num_key_value_heads"]
        self.hd = cfg.get("head_dim") or self.H // self.nq
        self.eps = cfg["rms_norm_eps"]
        self.n_layers = cfg["num_hidden_layers"]
        dc = cfg.get("dflash_config", {})
        self.block_size = cfg.get("block_size", 16)
        self.mask_id = dc["mask_token_id"]
        self.layer_ids = dc.get("target_layer_ids") or build_target_layer_ids(
            cfg["num_target_layers"], self.n_layers)
        self.inv_freq = rope_inv_freq(cfg, self.hd)
        assert self.W["fc.weight"].shape == (self.H, self.H * len(self.layer_ids))

    def new_cache(self):
        return DraftCache(self.n_layers)

    def features(self, taps):
        """taps: list per target layer [T, H] -> f [T, K*H] (concat in
        target_layer_ids order)."""
        return torch.cat([taps[l] for l in self.layer_ids], -1)

    def context(self, feats):
        """f [N, K*H] -> c [N, H] = hidden_norm(fc f)."""
        f = feats.to(device=self.device, dtype=self.dtype)
        return rms_norm(f @ self.W["fc.weight"].T, self.W["hidden_norm.weight"], self.eps)

    def context_kv(self, feats, start):
        """Context K/V of every layer for feature rows at positions start.. ->
        list of (k, v) [N, nkv, hd]."""
        c = self.context(feats)
        N = c.shape[0]
        pos = torch.arange(start, start + N, device=self.device)
        cos, sin = rope_cos_sin(self.inv_freq, pos, self.dtype)
        out = []
        for l in range(self.n_layers):
            p = "layers.%d.self_attn." % l
            k = (c @ self.W[p + "k_proj.weight"].T).view(N, self.nkv, self.hd)
            k = apply_rope(rms_norm(k, self.W[p + "k_norm.weight"], self.eps), cos, sin)
            v = (c @ self.W[p + "v_proj.weight"].T).view(N, self.nkv, self.hd)
            out.append((k, v))
        return out

    def push(self, cache, feats):
        """Append committed feature rows (positions cache.n ..) to the cache."""
        kv = self.context_kv(feats, cache.n)
        for l, (k, v) in enumerate(kv):
            cache.k[l] = k if cache.k[l] is None else torch.cat([cache.k[l], k])
            cache.v[l] = v if cache.v[l] is None else torch.cat([cache.v[l], v])
        cache.n += feats.shape[0]

    def block_hidden(self, x, s, ctx):
        """x [B, H] block input embeddings at positions s..s+B-1; ctx: list per
        layer of context (k, v) for positions 0..s-1. Non-causal attention over
        context + block. -> final-normed y [B, H]."""
        B = x.shape[0]
        pos = torch.arange(s, s + B, device=self.device)
        cos, sin = rope_cos_sin(self.inv_freq, pos, self.dtype)
        W, eps = self.W, self.eps
        for l in range(self.n_layers):
            p = "layers.%d." % l
            u = rms_norm(x, W[p + "input_layernorm.weight"], eps)
            q = (u @ W[p + "self_attn.q_proj.weight"].T).view(B, self.nq, self.hd)
            k = (u @ W[p + "self_attn.k_proj.weight"].T).view(B, self.nkv, self.hd)
            v = (u @ W[p + "self_attn.v_proj.weight"].T).view(B, self.nkv, self.hd)
            q = apply_rope(rms_norm(q, W[p + "self_attn.q_norm.weight"], eps), cos, sin)
            k = apply_rope(rms_norm(k, W[p + "self_attn.k_norm.weight"], eps), cos, sin)
            ck, cv = ctx[l]
            a = attention(q, torch.cat([ck, k]), torch.cat([cv, v]), causal_start=None)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            u = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            g = F.silu(u @ W[p + "mlp.gate_proj.weight"].T) * (u @ W[p + "mlp.up_proj.weight"].T)
            x = x + g @ W[p + "mlp.down_proj.weight"].T
        return rms_norm(x, W["norm.weight"], eps)

    @torch.no_grad()
    def block_logits(self, target, anchor, s, ctx, block_size=None):
        """Draft logits [B-1, V] for slots 1..B-1 (predictions for positions
        s+1..s+B-1) of the block [anchor, MASK x (B-1)] at positions s..s+B-1."""
        B = block_size or self.block_size
        ids = [int(anchor)] + [self.mask_id] * (B - 1)
        x = target.embed(ids).to(device=self.device, dtype=self.dtype)
        y = self.block_hidden(x, s, ctx)
        return target.lm_head(y[1:].to(target.device)).to(self.dtype)

    @torch.no_grad()
    def logits_uncached(self, target, feats_all, anchor, block_size=None):
        """Context K/V recomputed from all features (rows = positions 0..s-1)."""
        s = feats_all.shape[0]
        return self.block_logits(target, anchor, s, self.context_kv(feats_all, 0), block_size)

    @torch.no_grad()
    def logits_cached(self, target, cache, feats_new, anchor, block_size=None):
        """Push the not-yet-cached rows (positions cache.n..s-1), then draft."""
        self.push(cache, feats_new)
        ctx = list(zip(cache.k, cache.v))
        return self.block_logits(target, anchor, cache.n, ctx, block_size)


# ----------------------------------------------------------------------------
# decoding loops (batch 1, greedy)

def _truncate_stop(gen, stop_ids):
    for i, t in enumerate(gen):
        if t in stop_ids:
            return gen[:i + 1], True
    return gen, False


@torch.no_grad()
def greedy_generate(target, prompt, max_new, cached=False, stop_ids=()):
    """Plain greedy decoding -> list of up to max_new new token ids."""
    prompt = [int(t) for t in prompt]
    stop_ids = set(stop_ids)
    gen = []
    if cached:
        cache = target.new_cache()
        logits, _ = target.run(prompt, cache)
        while True:
            gen.append(int(logits[-1].argmax()))
            if len(gen) >= max_new or gen[-1] in stop_ids:
                return gen
            logits, _ = target.run([gen[-1]], cache)
    while True:
        logits, _ = target.run(prompt + gen)
        gen.append(int(logits[-1].argmax()))
        if len(gen) >= max_new or gen[-1] in stop_ids:
            return gen


@torch.no_grad()
def dflash_generate(target, draft, prompt, max_new, block_size=None, draft_cached=True,
                    target_cached=False, stop_ids=(), keep_trace=False):
    """Greedy DFlash loop of spec 3.2.

    Rounds run while fewer than max_new tokens have been generated (the token
    from the prefill counts); a round is never shortened to fit max_new, the
    result is cut to max_new afterwards (and after the first stop id).
    Returns {"tokens": [...], "accept": [a+1 per round], "trace": [...]}; each
    trace entry (keep_trace) holds s, anchor, draft_logits [B-1,V],
    draft_argmax, verify_logits [B,V], target_argmax, a."""
    B = block_size or draft.block_size
    prompt = [int(t) for t in prompt]
    n = len(prompt)
    stop_ids = set(stop_ids)
    tcache = target.new_cache() if target_cached else None
    logits, taps = target.run(prompt, tcache)
    out = prompt + [int(logits[-1].argmax())]
    feats_all = draft.features(taps)        # rows = positions 0..s-1
    feats_new = feats_all                   # rows not yet in the draft cache
    s = n                                   # position of the anchor out[s]
    dcache = draft.new_cache() if draft_cached else None
    accept, trace = [], []
    while len(out) - n < max_new and not _truncate_stop(out[n:], stop_ids)[1]:
        # draft: one forward over [anchor, MASK x (B-1)] at positions s..s+B-1
        if draft_cached:
            assert dcache.n + feats_new.shape[0] == s
            dl = draft.logits_cached(target, dcache, feats_new, out[s], B)
        else:
            dl = draft.logits_uncached(target, feats_all, out[s], B)
        d = [int(t) for t in dl.argmax(-1)]
        # verify [anchor, d1..d_{B-1}] at positions s..s+B-1 (causal)
        if target_cached:
            vl, vt = target.run([out[s]] + d, tcache)
        else:
            vl, vt = target.run(out[:s + 1] + d)
            vl, vt = vl[s:], [t[s:] for t in vt]
        t = [int(x) for x in vl.argmax(-1)]
        a = 0
        while a < B - 1 and d[a] == t[a]:
            a += 1
        out = out[:s + 1] + d[:a] + [t[a]]
        feats_new = draft.features(vt)[:a + 1]          # positions s..s+a
        feats_all = torch.cat([feats_all[:s], feats_new])
        if target_cached:
            target.crop(tcache, s + a + 1)
        if keep_trace:
            trace.append({"s": s, "anchor": out[s], "draft_logits": dl.float().cpu(),
                          "draft_argmax": d, "verify_logits": vl.float().cpu(),
                          "target_argmax": t, "a": a})
        s += a + 1
        accept.append(a + 1)
    gen, _ = _truncate_stop(out[n:], stop_ids)
    return {"tokens": gen[:max_new], "accept": accept, "trace": trace}
