"""Tiny random qwen3_moe checkpoints, a DFlash draft for one, and their
reference fixtures (transformers Qwen3MoeForCausalLM, float32, CPU).

    python3 tools/reference/make_tiny_moe.py --out DIR     (on the GPU machine)

Writes DIR/models/{tiny-qwen3moe, tiny-qwen3moe-q4, tiny-qwen3moe-draft} and
DIR/fixtures/{tiny-qwen3moe, tiny-qwen3moe-q4, tiny-qwen3moe-draft}.ref.safetensors
(keys as tests/fixtures/README.md gives for targets; the draft file has
p{i}.ids, p{i}.draft1_logits, p{i}.draft1_argmax, p{i}.dflash, p{i}.accept).

Models (hidden 32, 4 q / 2 kv heads, head_dim 16, vocab 16384, 4 layers,
8 experts, top 2, moe_intermediate_size 64, intermediate_size 64):
- tiny-qwen3moe: bf16, tied, norm_topk_prob true, decoder_sparse_step 1,
  mlp_only_layers [1] (layer 1 dense, 0/2/3 experts), per-expert HF names
  model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight, router mlp.gate.
  Relabelled like tiny-qwen3 (make_tiny.py): the greedy attractor token is
  swapped with id 16383, the draft's mask id, so DFlash rounds accept.
- tiny-qwen3moe-q4: another random model (seed 12), untied lm_head,
  norm_topk_prob false, decoder_sparse_step 2, mlp_only_layers [] (layers 1
  and 3 experts), MLX 4-bit group 32 with bfloat16 scales, experts stacked as
  mlx-lm writes them: model.layers.L.mlp.switch_mlp.{gate,up,down}_proj.
  {weight [E, rows, cols/8] U32, scales, biases [E, rows, cols/32]}; router,
  attention, embedding and lm_head quantized too.
- tiny-qwen3moe-draft: random z-lab DFlash draft (2 layers, block 16, mask
  16383) reading target layers build_target_layer_ids(4, 2).

The HF reference loads float32 per-expert checkpoints (the q4 one
dequantized, exactly) with from_pretrained; loading problems fail the run. A
float64 implementation here (no transformers) cross-checks it. Prompts are
skipped when any stored argmax has a top-1/top-2 gap < 1e-3 or any routing
decision (k-th vs k+1-th router logit, float64) a gap < 1e-3.
"""
import argparse
import collections
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../.."))
if not os.path.isdir(os.path.join(REPO, "tools/reference")):  # run from a copy elsewhere: the cwd
    REPO = os.getcwd()
sys.path.insert(0, os.path.join(REPO, "tools/reference"))
import st  # noqa: E402
import dflash_ref as D  # noqa: E402
import make_fixtures as MF  # noqa: E402
import make_tiny as MT  # noqa: E402
from ref_model import dequantize, quantize  # noqa: E402

V, H, NQ, NKV, HD, L = 16384, 32, 4, 2, 16, 4
E, K, MI, I = 8, 2, 64, 64
MASK = V - 1
MAX_NEW = 24
GAP_MIN = 1e-3


def log(*a):
    print(*a, flush=True)


def moe_config(tied, norm_topk, step, mlp_only):
    c = {
        "architectures": ["Qwen3MoeForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": MT.BOS,
        "decoder_sparse_step": step,
        "eos_token_id": MT.EOS,
        "head_dim": HD,
        "hidden_act": "silu",
        "hidden_size": H,
        "initializer_range": 0.02,
        "intermediate_size": I,
        "max_position_embeddings": 512,
        "max_window_layers": L,
        "mlp_only_layers": mlp_only,
        "model_type": "qwen3_moe",
        "moe_intermediate_size": MI,
        "norm_topk_prob": norm_topk,
        "num_attention_heads": NQ,
        "num_experts": E,
        "num_experts_per_tok": K,
        "num_hidden_layers": L,
        "num_key_value_heads": NKV,
        "output_router_logits": False,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "router_aux_loss_coef": 0.001,
        "sliding_window": None,
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": V,
    }
    return c


def is_moe(cfg, l):
    return l not in cfg["mlp_only_layers"] and cfg["num_experts"] > 0 and (l + 1) % cfg["decoder_sparse_step"] == 0


def make_weights(seed, cfg):
    """HF per-expert names, float32, fixed draw order."""
    g = MT.Gen(seed)
    t = {"model.embed_tokens.weight": g.normal((V, H), 1.0)}
    for l in range(L):
        p = "model.layers.%d." % l
        t[p + "input_layernorm.weight"] = g.norm(H)
        t[p + "self_attn.q_proj.weight"] = g.normal((NQ * HD, H), 0.2)
        t[p + "self_attn.k_proj.weight"] = g.normal((NKV * HD, H), 0.2)
        t[p + "self_attn.v_proj.weight"] = g.normal((NKV * HD, H), 0.2)
        t[p + "self_attn.o_proj.weight"] = g.normal((H, NQ * HD), 0.14)
        t[p + "self_attn.q_norm.weight"] = g.norm(HD)
        t[p + "self_attn.k_norm.weight"] = g.norm(HD)
        t[p + "post_attention_layernorm.weight"] = g.norm(H)
        if is_moe(cfg, l):
            t[p + "mlp.gate.weight"] = g.normal((E, H), 0.5)   # router: spread of a few units
            for e in range(E):
                q = p + "mlp.experts.%d." % e
                t[q + "gate_proj.weight"] = g.normal((MI, H), 0.2)
                t[q + "up_proj.weight"] = g.normal((MI, H), 0.2)
                t[q + "down_proj.weight"] = g.normal((H, MI), 0.14)
        else:
            t[p + "mlp.gate_proj.weight"] = g.normal((I, H), 0.2)
            t[p + "mlp.up_proj.weight"] = g.normal((I, H), 0.2)
            t[p + "mlp.down_proj.weight"] = g.normal((H, I), 0.14)
    t["model.norm.weight"] = g.norm(H)
    if not cfg["tie_word_embeddings"]:
        t["lm_head.weight"] = g.normal((V, H), 1.0)
    return {k: v.to(torch.bfloat16) for k, v in t.items()}


# ----------------------------------------------------------------------------
# float64 reference (no transformers) with routing-gap bookkeeping

class RefMoe:
    def __init__(self, cfg, w, dtype=torch.float64):
        self.cfg, self.dtype = cfg, dtype
        self.W = {(k[6:] if k.startswith("model.") else k): v.to(dtype) for k, v in w.items()}
        self.lm = self.W.get("lm_head.weight", self.W["embed_tokens.weight"])
        self.inv_freq = D.rope_inv_freq(cfg, HD)
        self.n_layers = L
        self.min_route_gap = float("inf")

    def new_cache(self):
        return {"k": [None] * L, "v": [None] * L, "n": 0}

    def crop(self, cache, n):
        cache["k"] = [k[:n] for k in cache["k"]]
        cache["v"] = [v[:n] for v in cache["v"]]
        cache["n"] = n

    def embed(self, ids):
        return self.W["embed_tokens.weight"][torch.as_tensor(ids, dtype=torch.long)]

    def lm_head(self, y):
        return y.to(self.dtype) @ self.lm.T

    def moe(self, p, u):
        logits = u @ self.W[p + "mlp.gate.weight"].T                 # [T, E]
        srt = logits.sort(-1, descending=True).values
        self.min_route_gap = min(self.min_route_gap, float((srt[:, K - 1] - srt[:, K]).min()))
        prob = torch.softmax(logits, -1)
        wv, idx = prob.topk(K, -1)
        if self.cfg["norm_topk_prob"]:
            wv = wv / wv.sum(-1, keepdim=True)
        out = torch.zeros_like(u)
        for t in range(u.shape[0]):
            for j in range(K):
                q = p + "mlp.experts.%d." % int(idx[t, j])
                x = u[t]
                y = (F.silu(x @ self.W[q + "gate_proj.weight"].T) * (x @ self.W[q + "up_proj.weight"].T)) \
                    @ self.W[q + "down_proj.weight"].T
                out[t] += wv[t, j] * y
        return out

    @torch.no_grad()
    def run(self, ids, cache=None):
        ids = torch.as_tensor(ids, dtype=torch.long)
        T = ids.shape[0]
        start = cache["n"] if cache is not None else 0
        cos, sin = D.rope_cos_sin(self.inv_freq, torch.arange(start, start + T), self.dtype)
        W, eps = self.W, self.cfg["rms_norm_eps"]
        x = W["embed_tokens.weight"][ids]
        taps = []
        for l in range(L):
            p = "layers.%d." % l
            u = D.rms_norm(x, W[p + "input_layernorm.weight"], eps)
            q = (u @ W[p + "self_attn.q_proj.weight"].T).view(T, NQ, HD)
            k = (u @ W[p + "self_attn.k_proj.weight"].T).view(T, NKV, HD)
            v = (u @ W[p + "self_attn.v_proj.weight"].T).view(T, NKV, HD)
            q = D.rms_norm(q, W[p + "self_attn.q_norm.weight"], eps)
            k = D.rms_norm(k, W[p + "self_attn.k_norm.weight"], eps)
            q, k = D.apply_rope(q, cos, sin), D.apply_rope(k, cos, sin)
            if cache is not None:
                if cache["k"][l] is not None:
                    k = torch.cat([cache["k"][l], k])
                    v = torch.cat([cache["v"][l], v])
                cache["k"][l], cache["v"][l] = k, v
            a = D.attention(q, k, v, causal_start=start)
            x = x + a @ W[p + "self_attn.o_proj.weight"].T
            u = D.rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
            if is_moe(self.cfg, l):
                x = x + self.moe(p, u)
            else:
                g = F.silu(u @ W[p + "mlp.gate_proj.weight"].T) * (u @ W[p + "mlp.up_proj.weight"].T)
                x = x + g @ W[p + "mlp.down_proj.weight"].T
            taps.append(x)
        if cache is not None:
            cache["n"] += T
        y = D.rms_norm(x, W["norm.weight"], eps)
        return y @ self.lm.T, taps


# ----------------------------------------------------------------------------
# HF reference

def hf_load(cfg, w32, tmp, tag):
    path = os.path.join(tmp, tag)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f)
    st.save(os.path.join(path, "model.safetensors"), {k: v.float() for k, v in w32.items()})
    from transformers import AutoModelForCausalLM
    res = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                               output_loading_info=True)
    m, info = res if isinstance(res, tuple) else (res, {})
    bad = {}
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        v = [x for x in (info.get(k) or []) if not (cfg.get("tie_word_embeddings") and "lm_head" in str(x))]
        if v:
            bad[k] = v
    log("  HF load %s: %s, loading problems: %s" % (tag, type(m).__name__, bad or "none"))
    if bad:  # fill the parameters by hand (fused expert layouts), loudly
        log("  FALLBACK: filling %s's parameters by hand" % tag)
        sd = m.state_dict()
        for key, v in sd.items():
            k2 = key
            if k2 in w32:
                src = w32[k2].float()
            elif k2.endswith("mlp.experts.gate_up_proj") or k2.endswith("mlp.experts.down_proj"):
                p = k2[: k2.index("mlp.experts.")] + "mlp.experts.%d."
                if k2.endswith("gate_up_proj"):
                    src = torch.stack([torch.cat([w32[p % e + "gate_proj.weight"], w32[p % e + "up_proj.weight"]])
                                       for e in range(E)]).float()
                else:
                    src = torch.stack([w32[p % e + "down_proj.weight"] for e in range(E)]).float()
                if tuple(src.shape) != tuple(v.shape):
                    src = src.transpose(1, 2)
            elif "lm_head" in k2 and cfg.get("tie_word_embeddings"):
                src = w32["model.embed_tokens.weight"].float()
            else:
                raise RuntimeError("no source for parameter %s" % key)
            assert tuple(src.shape) == tuple(v.shape), (key, src.shape, v.shape)
            v.copy_(src)
    sd = m.state_dict()
    log("  HF state dict keys of layer 0:", [(k, tuple(v.shape)) for k, v in sd.items() if ".layers.0." in k])
    # what save_pretrained writes in this transformers version (for the report)
    try:
        sp = os.path.join(tmp, tag + "-saved")
        m.save_pretrained(sp)
        from safetensors import safe_open
        names = []
        for fn in sorted(os.listdir(sp)):
            if fn.endswith(".safetensors"):
                with safe_open(os.path.join(sp, fn), framework="pt") as f:
                    names += [(k, tuple(f.get_slice(k).get_shape())) for k in f.keys() if ".layers.0.mlp" in k]
        log("  save_pretrained layer-0 mlp tensors:", sorted(names)[:8], "... (%d)" % len(names))
    except Exception as e:
        log("  save_pretrained check failed: %r" % e)
    return D.HFTarget(m)


def target_fixture(name, tgt, ref64, sentences, stats):
    def check(ids):
        g = D.greedy_generate(tgt, ids, MAX_NEW)
        full = ids + g[:-1]
        logits, _ = tgt.run(full)
        assert [int(x) for x in logits[len(ids) - 1:].argmax(-1)] == g
        m = float(MF.gap(logits).min())
        ref64.min_route_gap = float("inf")
        ref64.run(full)
        r = ref64.min_route_gap
        if m < GAP_MIN:
            return "min gap %.2e" % m
        if r < GAP_MIN:
            return "min routing gap %.2e" % r
        return None

    out, prompts = {}, []
    for i in range(len(MF.LENGTHS) + 1):
        ids = MF.pick(i, sentences, check, name)
        prompts.append(ids)
        T = len(ids)
        logits, taps = tgt.run(ids)
        greedy = D.greedy_generate(tgt, ids, MAX_NEW)
        out["p%d.ids" % i] = torch.tensor(ids, dtype=torch.int32)
        out["p%d.logits" % i] = logits[T - 1:].float().contiguous()  # the last row (size; argmax and taps of all rows)
        out["p%d.argmax" % i] = logits.argmax(-1).to(torch.int32)
        out["p%d.taps" % i] = torch.stack(taps).float().contiguous()
        out["p%d.greedy" % i] = torch.tensor(greedy, dtype=torch.int32)
        full = ids + greedy[:-1]
        lf, tf = tgt.run(full)
        ref64.min_route_gap = float("inf")
        lo, to = ref64.run(full)
        stats.low(name + " min routing gap (float64, prompt+greedy rows)", ref64.min_route_gap)
        stats.low(name + " min top1-top2 gap", MF.gap(lf).min())
        stats.add(name + " logits |fixture-ref64|", (lf.double() - lo).abs().max())
        stats.add(name + " taps |fixture-ref64|", (torch.stack(tf).double() - torch.stack(to)).abs().max())
        og = D.greedy_generate(ref64, ids, MAX_NEW, cached=True)
        if og != greedy:
            log("  WARNING %s p%d: ref64 greedy differs" % (name, i))
            stats.count(name + " greedy mismatches vs ref64")
        hc = D.greedy_generate(tgt, ids, MAX_NEW, cached=True)
        if hc != greedy:
            log("  WARNING %s p%d: HF cached greedy differs" % (name, i))
            stats.count(name + " HF cached vs uncached greedy mismatches")
        stats.add(name + " max |logit|", lf.abs().max())
        log("  %s p%d T=%d greedy=%s" % (name, i, T, greedy))
    return out, prompts


def draft_fixture(tgt, drf, prompts, stats):
    out = {}
    for i, ids in enumerate(prompts):
        r = D.dflash_generate(tgt, drf, ids, MAX_NEW, block_size=16, keep_trace=True)
        greedy = D.greedy_generate(tgt, ids, MAX_NEW)
        assert r["tokens"] == greedy, (r["tokens"], greedy)
        t1 = r["trace"][0]
        m = float("inf")
        for tr in r["trace"]:
            m = min(m, float(MF.gap(tr["draft_logits"]).min()), float(MF.gap(tr["verify_logits"][: tr["a"] + 1]).min()))
        stats.low("draft min gap (draft slots, deciding verify rows)", m)
        out["p%d.ids" % i] = torch.tensor(ids, dtype=torch.int32)
        if i == 0:  # full logits for the first prompt only (fixture size)
            out["p%d.draft1_logits" % i] = t1["draft_logits"][:4].float().contiguous()  # slots 1..4 (size)
        out["p%d.draft1_argmax" % i] = torch.tensor(t1["draft_argmax"], dtype=torch.int32)
        out["p%d.dflash" % i] = torch.tensor(r["tokens"], dtype=torch.int32)
        out["p%d.accept" % i] = torch.tensor(r["accept"], dtype=torch.int32)
        log("  draft p%d accept=%s draft1=%s" % (i, r["accept"], t1["draft_argmax"]))
    return out


# ----------------------------------------------------------------------------

def mlx_q4(w, cfg):
    """MLX 4-bit group 32 (bf16 scales); experts stacked as switch_mlp."""
    q = {}
    for name, t in w.items():
        if name.endswith("_proj.weight") and ".experts." in name:
            continue
        if name.endswith("_proj.weight") or name.endswith("mlp.gate.weight") or name in (
                "model.embed_tokens.weight", "lm_head.weight"):
            pk, sc, bi = quantize(t.float(), 4, 32, torch.bfloat16)
            b = name[: -len(".weight")]
            q[name], q[b + ".scales"], q[b + ".biases"] = pk, sc, bi
        else:
            q[name] = t
    for l in range(L):
        if not is_moe(cfg, l):
            continue
        p = "model.layers.%d.mlp." % l
        for proj in ("gate_proj", "up_proj", "down_proj"):
            parts = [quantize(w[p + "experts.%d.%s.weight" % (e, proj)].float(), 4, 32, torch.bfloat16)
                     for e in range(E)]
            b = p + "switch_mlp." + proj
            q[b + ".weight"] = np.stack([x[0] for x in parts])
            q[b + ".scales"] = torch.stack([x[1] for x in parts])
            q[b + ".biases"] = torch.stack([x[2] for x in parts])
    return q


def dequantized(q, cfg):
    """MLX q4 dict -> float32 per-expert HF dict (exact dequantization)."""
    w = {}
    for name, t in q.items():
        if name.endswith(".scales") or name.endswith(".biases"):
            continue
        b = name[: -len(".weight")]
        if ".switch_mlp." in name:
            p, proj = b.split(".switch_mlp.")
            for e in range(E):
                w[p + ".experts.%d.%s.weight" % (e, proj)] = dequantize(
                    t[e], q[b + ".scales"][e], q[b + ".biases"][e], 4, 32).float()
        elif isinstance(t, np.ndarray):
            w[name] = dequantize(t, q[b + ".scales"], q[b + ".biases"], 4, 32).float()
        else:
            w[name] = t.float()
    return w


def relabel_attractor(hf0, w, name):
    """Swap the token greedy decoding most often ends on (48 random 8-token
    prompts, 32 steps) with MASK, the draft's mask id, in w's embedding (as
    make_tiny.py does for tiny-qwen3), so DFlash rounds can accept."""
    g2 = np.random.RandomState(101)
    ends = collections.Counter()
    for _ in range(48):
        prompt = g2.randint(0, V, size=8).tolist()
        ends[D.greedy_generate(hf0, prompt, 32, cached=True)[-1]] += 1
    top = sorted(ends.items(), key=lambda kv: (-kv[1], kv[0]))
    a = top[0][0]
    log("%s: greedy end tokens (token, count):" % name, top[:5], "-> swap", a, "<->", MASK)
    e = w["model.embed_tokens.weight"].clone()
    e[[a, MASK]] = e[[MASK, a]]
    w["model.embed_tokens.weight"] = e


def write_random_draft(mdir, name, seed, n_target_layers):
    """A random z-lab DFlash draft (MT.DRAFT_LAYERS layers, hidden H) for a
    target of n_target_layers layers, in mdir/name; returns its path."""
    layer_ids = D.build_target_layer_ids(n_target_layers, MT.DRAFT_LAYERS)
    g = MT.Gen(seed)
    dt = {}
    for l in range(MT.DRAFT_LAYERS):
        dt.update(MT.layer_tensors(g, "layers.%d." % l, qk_norm=True, scale=MT.DRAFT_SCALE))
    dt["fc.weight"] = g.normal((H, H * len(layer_ids)), 0.14)
    dt["hidden_norm.weight"] = g.norm(H)
    dt["norm.weight"] = g.norm(H)
    dt = {k: v.to(torch.bfloat16) for k, v in dt.items()}
    dd = os.path.join(mdir, name)
    MT.new_dir(dd, target=False)
    dcfg = MT.draft_config(layer_ids)
    dcfg["num_target_layers"] = n_target_layers
    MT.write_json(os.path.join(dd, "config.json"), dcfg)
    st.save(os.path.join(dd, "model.safetensors"), dt)
    log("== %s, target layers" % name, layer_ids)
    return dd


def write_model(d, cfg, tensors):
    MT.new_dir(d)
    MT.write_json(os.path.join(d, "config.json"), cfg)
    st.save(os.path.join(d, "model.safetensors"), tensors)


def finish(out, stats):
    """The generators' common end: the stats table and every file written."""
    log("== stats (over prompts)")
    for k in sorted(stats.d):
        log("  %-60s %.3e" % (k, stats.d[k]))
    for r, _, fs in os.walk(out):
        for f in sorted(fs):
            p = os.path.join(r, f)
            if not os.path.islink(p):
                log("  %-70s %9d bytes" % (p, os.path.getsize(p)))


def start():
    """The generators' common start: --out DIR parsed, DIR/models and
    DIR/fixtures made, torch set up; returns (out, models dir, fixtures dir,
    a temporary dir, the prompt sentences, a stats table)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(4)
    torch.set_grad_enabled(False)
    import transformers
    log("torch", torch.__version__, "transformers", transformers.__version__)
    mdir, fdir = os.path.join(args.out, "models"), os.path.join(args.out, "fixtures")
    os.makedirs(mdir, exist_ok=True)
    os.makedirs(fdir, exist_ok=True)
    return args.out, mdir, fdir, tempfile.mkdtemp(), MF.sentence_ids(REPO), MF.Stats()


def main():
    out, mdir, fdir, tmp, sentences, stats = start()

    # 1. tiny-qwen3moe (bf16, per-expert names), attractor relabel
    cfg = moe_config(True, True, 1, [1])
    w = make_weights(11, cfg)
    hf0 = hf_load(cfg, w, tmp, "pre")
    relabel_attractor(hf0, w, "tiny-qwen3moe")
    d = os.path.join(mdir, "tiny-qwen3moe")
    write_model(d, cfg, w)
    hf = hf_load(cfg, w, tmp, "tiny-qwen3moe")
    ref64 = RefMoe(cfg, w)
    log("== tiny-qwen3moe")
    fx, prompts = target_fixture("tiny-qwen3moe", hf, ref64, sentences, stats)
    st.save(os.path.join(fdir, "tiny-qwen3moe.ref.safetensors"), fx,
            {"model": "tiny-qwen3moe", "n_prompts": len(prompts), "max_new": MAX_NEW})

    # 2. the draft
    dd = write_random_draft(mdir, "tiny-qwen3moe-draft", 13, L)
    drf = D.Draft(dd, dtype=torch.float32)
    fx = draft_fixture(hf, drf, prompts, stats)
    st.save(os.path.join(fdir, "tiny-qwen3moe-draft.ref.safetensors"), fx,
            {"model": "tiny-qwen3moe-draft", "target": "tiny-qwen3moe", "n_prompts": len(prompts),
             "max_new": MAX_NEW, "block_size": 16})

    # 3. tiny-qwen3moe-q4 (MLX 4-bit, switch_mlp stacked experts)
    cfg4 = moe_config(False, False, 2, [])
    q = mlx_q4(make_weights(12, cfg4), cfg4)
    c4 = dict(cfg4)
    c4["quantization"] = {"group_size": 32, "bits": 4}
    c4["quantization_config"] = {"group_size": 32, "bits": 4}
    write_model(os.path.join(mdir, "tiny-qwen3moe-q4"), c4, q)
    w4 = dequantized(q, cfg4)
    hf4 = hf_load(cfg4, w4, tmp, "tiny-qwen3moe-q4")
    log("== tiny-qwen3moe-q4")
    fx, _ = target_fixture("tiny-qwen3moe-q4", hf4, RefMoe(cfg4, w4), sentences, stats)
    st.save(os.path.join(fdir, "tiny-qwen3moe-q4.ref.safetensors"), fx,
            {"model": "tiny-qwen3moe-q4", "n_prompts": len(MF.LENGTHS) + 1, "max_new": MAX_NEW})

    finish(out, stats)


if __name__ == "__main__":
    main()
