"""Tiny random Qwen3.5 (qwen3_5_text: Gated DeltaNet + gated full attention)
checkpoints, a DFlash draft for one, and their reference fixtures
(transformers Qwen3_5ForCausalLM, float32, CPU, eager attention, the torch
fallbacks of the gated delta rule and the causal conv1d).

    python3 tools/reference/make_tiny_qwen35.py --out DIR     (on the GPU machine)

Writes DIR/models/{tiny-qwen35, tiny-qwen35-draft} and
DIR/fixtures/{tiny-qwen35, tiny-qwen35-draft}.ref.safetensors (keys as
tests/fixtures/README.md gives for targets and drafts).

tiny-qwen35: hidden 32, intermediate 64, 4 layers with layer_types
[linear, full, linear, linear]; full attention 4 q / 2 kv heads of 16, q_proj
doubled (query + output gate per head), partial_rotary_factor 0.5 (8 rotary
dims), theta 1e6; Gated DeltaNet 2 key heads / 4 value heads of 16 dims (each
key head serves 2 value heads), conv kernel 4; vocab 16384, tied, bf16. Norm
weights are stored as Qwen3.5 stores them (the model multiplies by
1 + weight; the gated norm inside the DeltaNet by weight). Relabelled like
tiny-qwen3: the greedy attractor token is swapped with id 16383, the draft's
mask id, so DFlash rounds accept.
tiny-qwen35-draft: random z-lab DFlash draft (2 layers, block 16, mask 16383)
reading target layers build_target_layer_ids(4, 2).

The HF model loads the file with from_pretrained (loading problems fail the
run). A float64 implementation here (no transformers, the recurrent form of
the delta rule for every row) cross-checks it. Prompts are skipped when any
stored argmax has a top-1/top-2 gap < 1e-3.
"""
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../.."))
if not os.path.isdir(os.path.join(REPO, "tools/reference")):
    REPO = os.getcwd()
sys.path.insert(0, os.path.join(REPO, "tools/reference"))
import st  # noqa: E402
import dflash_ref as D  # noqa: E402
import make_fixtures as MF  # noqa: E402
import make_tiny as MT  # noqa: E402
import make_tiny_moe as MM  # noqa: E402

V, H, NQ, NKV, HD, L, I = 16384, 32, 4, 2, 16, 4, 64
NK, NV, DK, DV, KC = 2, 4, 16, 16, 4
ROT = 8
LAYER_TYPES = ["linear_attention", "full_attention", "linear_attention", "linear_attention"]
MASK = V - 1
MAX_NEW = 24
CONV = 2 * NK * DK + NV * DV
E, K, MI, SI = 8, 2, 32, 48   # tiny-qwen35moe: experts, top k, expert width, shared expert width


def log(*a):
    print(*a, flush=True)


def qwen35_config(moe=False):
    c = {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": MT.BOS,
        "eos_token_id": MT.EOS,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "layer_types": LAYER_TYPES,
        "linear_conv_kernel_dim": KC,
        "linear_key_head_dim": DK,
        "linear_num_key_heads": NK,
        "linear_num_value_heads": NV,
        "linear_value_head_dim": DV,
        "max_position_embeddings": 512,
        "num_attention_heads": NQ,
        "num_hidden_layers": L,
        "num_key_value_heads": NKV,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": ROT / HD,
                            "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        "tie_word_embeddings": True,
        "dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": V,
    }
    if moe:
        c.update({"architectures": ["Qwen3_5MoeForCausalLM"], "model_type": "qwen3_5_moe_text",
                  "num_experts": E, "num_experts_per_tok": K, "moe_intermediate_size": MI,
                  "shared_expert_intermediate_size": SI, "router_aux_loss_coef": 0.001,
                  "output_router_logits": False})
        del c["intermediate_size"]
    return c


def make_weights(seed, moe=False):
    """HF names, float32 draws in a fixed order, stored bf16."""
    g = MT.Gen(seed)
    z = lambda n: g.norm(n) - 1.0  # noqa: E731  (1 + w is the scale: 0.6..1.4)
    t = {"model.embed_tokens.weight": g.normal((V, H), 1.0)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = z(H)
        if LAYER_TYPES[l] == "full_attention":
            t[p + "self_attn.q_proj.weight"] = g.normal((2 * NQ * HD, H), 0.2)
            t[p + "self_attn.k_proj.weight"] = g.normal((NKV * HD, H), 0.2)
            t[p + "self_attn.v_proj.weight"] = g.normal((NKV * HD, H), 0.2)
            t[p + "self_attn.o_proj.weight"] = g.normal((H, NQ * HD), 0.14)
            t[p + "self_attn.q_norm.weight"] = z(HD)
            t[p + "self_attn.k_norm.weight"] = z(HD)
        else:
            q = p + "linear_attn."
            t[q + "in_proj_qkv.weight"] = g.normal((CONV, H), 0.3)
            t[q + "in_proj_z.weight"] = g.normal((NV * DV, H), 0.3)
            t[q + "in_proj_b.weight"] = g.normal((NV, H), 0.3)
            t[q + "in_proj_a.weight"] = g.normal((NV, H), 0.3)
            t[q + "conv1d.weight"] = g.normal((CONV, 1, KC), 0.5)
            t[q + "dt_bias"] = g.normal((NV,), 0.5)
            # decay rates A in 0.05..2 (exp(A_log)): the state keeps a few steps
            t[q + "A_log"] = torch.from_numpy(np.log(g.rng.uniform(0.05, 2.0, size=NV)).astype(np.float32))
            t[q + "norm.weight"] = g.norm(DV)
            t[q + "out_proj.weight"] = g.normal((H, NV * DV), 0.14)
        t[p + "post_attention_layernorm.weight"] = z(H)
        if moe:  # transformers 5's layout: fused gate_up [E, 2*MI, H], down [E, H, MI]
            t[p + "mlp.gate.weight"] = g.normal((E, H), 0.5)
            t[p + "mlp.experts.gate_up_proj"] = g.normal((E, 2 * MI, H), 0.2)
            t[p + "mlp.experts.down_proj"] = g.normal((E, H, MI), 0.14)
            t[p + "mlp.shared_expert.gate_proj.weight"] = g.normal((SI, H), 0.2)
            t[p + "mlp.shared_expert.up_proj.weight"] = g.normal((SI, H), 0.2)
            t[p + "mlp.shared_expert.down_proj.weight"] = g.normal((H, SI), 0.14)
            t[p + "mlp.shared_expert_gate.weight"] = g.normal((1, H), 0.5)
            continue
        t[p + "mlp.gate_proj.weight"] = g.normal((I, H), 0.2)
        t[p + "mlp.up_proj.weight"] = g.normal((I, H), 0.2)
        t[p + "mlp.down_proj.weight"] = g.normal((H, I), 0.14)
    t["model.norm.weight"] = z(H)
    return {k: v.to(torch.bfloat16) for k, v in t.items()}


# ----------------------------------------------------------------------------
# float64 reference (no transformers): recurrent delta rule row by row

def rms1p(x, w, eps):
    """Qwen3.5's RMSNorm: x / rms(x) * (1 + w)."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)


class RefQwen35:
    def __init__(self, cfg, w, dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        self.W = {(k[6:] if k.startswith("model.") else k): v.to(dtype) for k, v in w.items()}
        self.lm = self.W["embed_tokens.weight"]
        self.inv_freq = 1.0 / (cfg["rope_parameters"]["rope_theta"] ** (torch.arange(0, ROT, 2, dtype=torch.float64) / ROT))
        self.n_layers = L
        self.moe = "num_experts" in cfg
        self.min_route_gap = float("inf")  # k-th vs k+1-th router logit, over every routed row

    def mlp(self, p, u):
        W = self.W
        if not self.moe:
            return (F.silu(u @ W[p + "mlp.gate_proj.weight"].T) * (u @ W[p + "mlp.up_proj.weight"].T)) \
                @ W[p + "mlp.down_proj.weight"].T
        logits = u @ W[p + "mlp.gate.weight"].T
        srt = logits.sort(-1, descending=True).values
        self.min_route_gap = min(self.min_route_gap, float((srt[:, K - 1] - srt[:, K]).min()))
        prob = torch.softmax(logits, -1)
        wv, idx = prob.topk(K, -1)
        wv = wv / wv.sum(-1, keepdim=True)
        out = torch.zeros_like(u)
        gu, dn = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.down_proj"]
        for t in range(u.shape[0]):
            for j in range(K):
                e = int(idx[t, j])
                h = gu[e] @ u[t]
                out[t] += wv[t, j] * (dn[e] @ (F.silu(h[:MI]) * h[MI:]))
        sh = (F.silu(u @ W[p + "mlp.shared_expert.gate_proj.weight"].T) * (u @ W[p + "mlp.shared_expert.up_proj.weight"].T)) \
            @ W[p + "mlp.shared_expert.down_proj.weight"].T
        return out + torch.sigmoid(u @ W[p + "mlp.shared_expert_gate.weight"].T) * sh

    def new_cache(self):
        return {"n": 0, "k": [None] * L, "v": [None] * L,
                "conv": [torch.zeros(KC - 1, CONV, dtype=self.dtype) for _ in range(L)],
                "S": [torch.zeros(NV, DK, DV, dtype=self.dtype) for _ in range(L)]}

    def embed(self, ids):
        return self.W["embed_tokens.weight"][torch.as_tensor(ids, dtype=torch.long)]

    def lm_head(self, y):
        return y.to(self.dtype) @ self.lm.T

    def gdn(self, p, u, cache):
        W, T = self.W, u.shape[0]
        q_ = p + "linear_attn."
        mixed = u @ W[q_ + "in_proj_qkv.weight"].T                          # [T, CONV]
        zg = (u @ W[q_ + "in_proj_z.weight"].T).view(T, NV, DV)
        b = u @ W[q_ + "in_proj_b.weight"].T
        a = u @ W[q_ + "in_proj_a.weight"].T
        cw = W[q_ + "conv1d.weight"][:, 0, :]                                # [CONV, KC]
        hist = torch.cat([cache["conv"], mixed])                            # [KC-1+T, CONV]
        conv = torch.stack([(hist[t:t + KC] * cw.T).sum(0) for t in range(T)])
        cache["conv"] = hist[-(KC - 1):].clone()
        conv = F.silu(conv)
        qq, kk, vv = conv.split([NK * DK, NK * DK, NV * DV], -1)
        qq, kk, vv = qq.view(T, NK, DK), kk.view(T, NK, DK), vv.view(T, NV, DV)
        rep = NV // NK
        qq, kk = qq.repeat_interleave(rep, 1), kk.repeat_interleave(rep, 1)
        qq = qq * torch.rsqrt((qq * qq).sum(-1, keepdim=True) + 1e-6) / DK ** 0.5
        kk = kk * torch.rsqrt((kk * kk).sum(-1, keepdim=True) + 1e-6)
        beta = torch.sigmoid(b)
        g = -W[q_ + "A_log"].exp() * F.softplus(a + W[q_ + "dt_bias"])
        S = cache["S"]
        out = torch.zeros(T, NV, DV, dtype=self.dtype)
        for t in range(T):
            for h in range(NV):
                S[h] = S[h] * torch.exp(g[t, h])
                mem = S[h].T @ kk[t, h]
                delta = (vv[t, h] - mem) * beta[t, h]
                S[h] = S[h] + torch.outer(kk[t, h], delta)
                out[t, h] = S[h].T @ qq[t, h]
        out = out * torch.rsqrt((out * out).mean(-1, keepdim=True) + self.cfg["rms_norm_eps"])
        out = out * W[q_ + "norm.weight"] * F.silu(zg)
        return out.reshape(T, NV * DV) @ W[q_ + "out_proj.weight"].T

    def attn(self, p, u, cache, l, start):
        W, T, eps = self.W, u.shape[0], self.cfg["rms_norm_eps"]
        qg = (u @ W[p + "self_attn.q_proj.weight"].T).view(T, NQ, 2 * HD)
        q, gate = qg[..., :HD], qg[..., HD:].reshape(T, NQ * HD)
        k = (u @ W[p + "self_attn.k_proj.weight"].T).view(T, NKV, HD)
        v = (u @ W[p + "self_attn.v_proj.weight"].T).view(T, NKV, HD)
        q = rms1p(q, W[p + "self_attn.q_norm.weight"], eps)
        k = rms1p(k, W[p + "self_attn.k_norm.weight"], eps)
        pos = torch.arange(start, start + T, dtype=torch.float64)
        fr = pos[:, None] * self.inv_freq[None]
        cos, sin = torch.cat([fr.cos()] * 2, -1).to(self.dtype), torch.cat([fr.sin()] * 2, -1).to(self.dtype)

        def rope(x):
            r, rest = x[..., :ROT], x[..., ROT:]
            x1, x2 = r[..., :ROT // 2], r[..., ROT // 2:]
            rh = torch.cat([-x2, x1], -1)
            return torch.cat([r * cos[:, None] + rh * sin[:, None], rest], -1)

        q, k = rope(q), rope(k)
        if cache["k"][l] is not None:
            k = torch.cat([cache["k"][l], k])
            v = torch.cat([cache["v"][l], v])
        cache["k"][l], cache["v"][l] = k, v
        a = D.attention(q, k, v, causal_start=start)
        a = a * torch.sigmoid(gate)
        return a @ W[p + "self_attn.o_proj.weight"].T

    @torch.no_grad()
    def run(self, ids, cache=None):
        ids = torch.as_tensor(ids, dtype=torch.long)
        if cache is None:
            cache = self.new_cache()
        start = cache["n"]
        W, eps = self.W, self.cfg["rms_norm_eps"]
        x = W["embed_tokens.weight"][ids]
        taps = []
        for l in range(L):
            p = "layers.%d." % l
            u = rms1p(x, W[p + "input_layernorm.weight"], eps)
            if LAYER_TYPES[l] == "linear_attention":
                x = x + self.gdn(p, u, _LayerView(cache, l))
            else:
                x = x + self.attn(p, u, cache, l, start)
            u = rms1p(x, W[p + "post_attention_layernorm.weight"], eps)
            x = x + self.mlp(p, u)
            taps.append(x)
        cache["n"] += ids.shape[0]
        y = rms1p(x, W["norm.weight"], eps)
        return y @ self.lm.T, taps


class _LayerView:
    """cache["conv"][l] / cache["S"][l] as a dict-like for gdn()."""

    def __init__(self, cache, l):
        self.c, self.l = cache, l

    def __getitem__(self, k):
        return self.c[k][self.l]

    def __setitem__(self, k, v):
        self.c[k][self.l] = v


# ----------------------------------------------------------------------------
# HF reference: the model's own cache object, kept across calls

class HFHybrid(D.HFTarget):
    def new_cache(self):
        return {"pkv": None}

    @torch.no_grad()
    def run(self, ids, cache=None):
        if cache is None:
            return D.HFTarget.run(self, ids)
        ids = torch.as_tensor(ids, dtype=torch.long, device=self.device)[None]
        self._taps = [None] * self.n_layers
        out = self.m(input_ids=ids, past_key_values=cache["pkv"], use_cache=True)
        cache["pkv"] = out.past_key_values
        taps, self._taps = self._taps, None
        return out.logits[0], taps


def hf_load(cfg, w, tmp, tag):
    path = os.path.join(tmp, tag)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    st.save(os.path.join(path, "model.safetensors"), {k: v.float() for k, v in w.items()})
    from transformers import AutoModelForCausalLM
    m, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                   output_loading_info=True)
    bad = {k: [x for x in (info.get(k) or []) if "lm_head" not in str(x)]
           for k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    bad = {k: v for k, v in bad.items() if v}
    log("  HF load %s: %s, loading problems: %s" % (tag, type(m).__name__, bad or "none"))
    if bad:
        raise RuntimeError("loading problems: %s" % bad)
    sd = m.state_dict()
    log("  HF state dict, layer 0/1:", [(k, tuple(v.shape)) for k, v in sd.items()
                                       if ".layers.0." in k or ".layers.1." in k])
    return HFHybrid(m)


def main():
    out, mdir, fdir, tmp, sentences, stats = MM.start()

    cfg = qwen35_config()
    w = make_weights(21)
    hf0 = hf_load(cfg, w, tmp, "pre")
    # the float64 reference against HF before anything else (one prompt, cached and not)
    r64 = RefQwen35(cfg, w)
    ids = list(range(100, 140))
    lh, th = hf0.run(ids)
    lr, tr = r64.run(ids)
    log("  pre: |HF - ref64| logits %.3e taps %.3e" % ((lh.double() - lr).abs().max(),
                                                       (torch.stack(th).double() - torch.stack(tr)).abs().max()))
    MM.relabel_attractor(hf0, w, "tiny-qwen35")
    d = os.path.join(mdir, "tiny-qwen35")
    MM.write_model(d, cfg, w)
    hf = hf_load(cfg, w, tmp, "tiny-qwen35")
    ref64 = RefQwen35(cfg, w)
    log("== tiny-qwen35")
    fx, prompts = MM.target_fixture("tiny-qwen35", hf, ref64, sentences, stats)
    st.save(os.path.join(fdir, "tiny-qwen35.ref.safetensors"), fx,
            {"model": "tiny-qwen35", "n_prompts": len(prompts), "max_new": MAX_NEW})

    dd = MM.write_random_draft(mdir, "tiny-qwen35-draft", 23, L)
    drf = D.Draft(dd, dtype=torch.float32)
    fx = MM.draft_fixture(hf, drf, prompts, stats)
    st.save(os.path.join(fdir, "tiny-qwen35-draft.ref.safetensors"), fx,
            {"model": "tiny-qwen35-draft", "target": "tiny-qwen35", "n_prompts": len(prompts),
             "max_new": MAX_NEW, "block_size": 16})

    # tiny-qwen35moe: Qwen3.5-MoE (every MLP an expert block + gated shared expert)
    cfgm = qwen35_config(moe=True)
    wm = make_weights(31, moe=True)
    d = os.path.join(mdir, "tiny-qwen35moe")
    MM.write_model(d, cfgm, wm)
    hfm = hf_load(cfgm, wm, tmp, "tiny-qwen35moe")
    log("== tiny-qwen35moe")
    fx, _ = MM.target_fixture("tiny-qwen35moe", hfm, RefQwen35(cfgm, wm), sentences, stats)
    st.save(os.path.join(fdir, "tiny-qwen35moe.ref.safetensors"), fx,
            {"model": "tiny-qwen35moe", "n_prompts": len(MF.LENGTHS) + 1, "max_new": MAX_NEW})

    MM.finish(out, stats)


if __name__ == "__main__":
    main()
