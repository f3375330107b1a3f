"""A tiny Hugging Face Qwen3.5 / Qwen3.5-MoE / Qwen3-Next checkpoint as mlx-lm
converts it (`mlx_lm.convert --hf-path IN -q --q-bits B --q-group-size G`),
for the engine's MLX-layout tests. numpy only (mlx is not needed, nor torch).

    python3 tools/reference/make_tiny_mlx.py IN OUT [--bits 4|8|0] [--group 32]

--bits 0 writes the unquantized MLX layout (mlx_lm.convert without -q).
The steps follow mlx-lm's source (ml-explore/mlx-lm, read at d78bf58e),
each stated where it is done below:

  mlx_lm/models/qwen3_5.py      Model.sanitize, TextModel.sanitize,
                                TextModel.quant_predicate, cast_predicate
  mlx_lm/models/qwen3_5_moe.py  Model.sanitize (fused experts -> switch_mlp)
  mlx_lm/models/qwen3_next.py   Model.sanitize, quant_predicate
  mlx_lm/convert.py             convert (dtype cast)
  mlx_lm/utils.py               quantize_model, save_model

mlx-lm has no module for model_type "qwen3_5_text" / "qwen3_5_moe_text" (the
text-only configs of tests/models/tiny-qwen35*): it loads the published
multimodal checkpoints (model_type "qwen3_5", a text_config, weights under
model.language_model.). So a Qwen3.5 input is first put in that published
layout (no vision tower), then converted; a Qwen3-Next one with fused
experts (transformers 5's save) is first split into one tensor per expert,
as the published checkpoints are (mlx-lm's sanitize takes only those).

mlx-lm quantizes MoE routers (mlp.gate, shared_expert_gate) at 8 bits,
group 64, which fails on the tiny models' 32 columns: their MoE
conversions can only be made with --bits 0.

The quantizer is MLX's affine rule as tools/reference/ref_model.py states it
(there in torch; here in numpy float64, scales and biases rounded to the
weights' dtype, bf16).
"""
import argparse
import json
import os
import struct

import numpy as np


# ---- safetensors (bf16 kept as uint16 bit patterns) ----------------------------
_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "U32": np.uint32, "I32": np.int32}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], np.frombuffer(data[a:b], dtype=_NP[v["dtype"]]).reshape(v["shape"]).copy())
    return out


def save(path, tensors):
    """mx.save_safetensors(..., metadata={"format": "mlx"}) (utils.py save_model)."""
    hdr, blobs, off = {"__metadata__": {"format": "mlx"}}, [], 0
    for k in sorted(tensors):
        dt, a = tensors[k]
        raw = np.ascontiguousarray(a).astype(_NP[dt]).tobytes()
        hdr[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hb = json.dumps(hdr, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))


def bf16_to_f32(u):
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x):
    """round to nearest even (what MLX's bfloat16 cast does)"""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def to_float(dt, a):
    return bf16_to_f32(a) if dt == "BF16" else a.astype(np.float32)


def from_float(dt, x):
    return ("BF16", f32_to_bf16(x)) if dt == "BF16" else (dt, x.astype(_NP[dt]))


# ---- MLX affine quantization -----------------------------------------------
def quantize(w, bits, group):
    """w float [.., out, in] -> packed uint32 [.., out, in*bits/32], scales and
    biases float64 [.., out, in/group] (ref_model.py quantize: the extreme of
    larger magnitude is the bias and is hit exactly, so 0.0 is representable;
    the scale is negative when that edge is the maximum)."""
    nb = (1 << bits) - 1
    shp = w.shape
    g = w.astype(np.float64).reshape(-1, shp[-1] // group, group)
    wmin, wmax = g.min(-1), g.max(-1)
    lo_edge = np.abs(wmin) > np.abs(wmax)
    sc = np.maximum((wmax - wmin) / nb, 1e-7)
    sc = np.where(lo_edge, sc, -sc)
    edge = np.where(lo_edge, wmin, wmax)
    q0 = np.round(edge / sc)
    sc = np.where(q0 != 0, edge / np.where(q0 != 0, q0, 1), sc)
    bi = np.where(q0 == 0, 0.0, edge)
    return g, sc, bi, nb


def quantize_stored(w, bits, group, dt):
    g, sc, bi, nb = quantize(w, bits, group)
    sc_s, bi_s = from_float(dt, sc), from_float(dt, bi)
    scf, bif = to_float(*sc_s).astype(np.float64), to_float(*bi_s).astype(np.float64)
    q = np.clip(np.round((g - bif[..., None]) / scf[..., None]), 0, nb).astype(np.uint64)
    per = 32 // bits
    q = q.reshape(-1, w.shape[-1] // per, per)
    packed = np.zeros(q.shape[:2], dtype=np.uint64)
    for e in range(per):
        packed |= q[:, :, e] << np.uint64(e * bits)
    lead = w.shape[:-1]
    return (("U32", packed.astype(np.uint32).reshape(*lead, -1)),
            (sc_s[0], sc_s[1].reshape(*lead, -1)), (bi_s[0], bi_s[1].reshape(*lead, -1)))


# ---- the conversion -------------------------------------------------------------
NORM_KEYS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
             ".q_norm.weight", ".k_norm.weight")


def sanitize_text(w, tie, shift_norms):
    """qwen3_5.py TextModel.sanitize / the tail of qwen3_next.py Model.sanitize:
    mtp.* dropped, a tied lm_head dropped, conv1d [C, 1, K] -> [C, K, 1]
    (moveaxis(2, 1)), and - when the checkpoint had the HF conv1d layout
    (qwen3_5) / always (qwen3_next's branch for HF checkpoints) - 1.0 added
    to every 1-D weight named by NORM_KEYS, in the weight's own dtype (bf16:
    the sum rounded to bf16). linear_attn.norm is not among them."""
    w = {k: v for k, v in w.items() if "mtp." not in k}
    if tie:
        w = {k: v for k, v in w.items() if not k.endswith("lm_head.weight")}
    for k, (dt, a) in list(w.items()):
        if "conv1d.weight" in k and a.shape[-1] != 1:
            w[k] = (dt, np.moveaxis(a, 2, 1))
        if shift_norms and any(k.endswith(s) for s in NORM_KEYS) and a.ndim == 1:
            w[k] = from_float(dt, to_float(dt, a) + np.float32(1.0))
    return w


def convert(src, bits, group):
    cfg = json.load(open(os.path.join(src, "config.json")))
    w = load(os.path.join(src, "model.safetensors"))
    mt = cfg["model_type"]
    if mt in ("qwen3_5_text", "qwen3_5_moe_text"):
        # the published multimodal layout (see the module docstring)
        moe = mt == "qwen3_5_moe_text"
        text = dict(cfg)
        text.pop("architectures", None)
        cfg = {"architectures": ["Qwen3_5MoeForConditionalGeneration" if moe else "Qwen3_5ForConditionalGeneration"],
               "model_type": "qwen3_5_moe" if moe else "qwen3_5", "text_config": text,
               "tie_word_embeddings": text.get("tie_word_embeddings", False)}
        w = {("model.language_model." + k[len("model."):] if k.startswith("model.") else k): v for k, v in w.items()}
        # qwen3_5.py / qwen3_5_moe.py Model.sanitize: vision keys dropped,
        # model.language_model -> language_model.model, anything else
        # prefixed with language_model.
        w2 = {}
        for k, v in w.items():
            if k.startswith("vision_tower") or k.startswith("model.visual"):
                continue
            if k.startswith("model.language_model"):
                k = k.replace("model.language_model", "language_model.model")
            elif not k.startswith("language_model."):
                k = "language_model." + k
            w2[k] = v
        w = w2
        tc = cfg["text_config"]
        if moe:  # qwen3_5_moe.py: experts.gate_up_proj [E, 2I, H] split at the middle row
            for l in range(tc["num_hidden_layers"]):
                p = "language_model.model.layers.%d.mlp" % l
                if p + ".experts.gate_up_proj" in w:
                    dt, gu = w.pop(p + ".experts.gate_up_proj")
                    mid = gu.shape[-2] // 2
                    w[p + ".switch_mlp.gate_proj.weight"] = (dt, gu[..., :mid, :])
                    w[p + ".switch_mlp.up_proj.weight"] = (dt, gu[..., mid:, :])
                    w[p + ".switch_mlp.down_proj.weight"] = w.pop(p + ".experts.down_proj")
        unsanitized = any("conv1d.weight" in k and a.shape[-1] != 1 for k, (_, a) in w.items())
        w = sanitize_text(w, tc.get("tie_word_embeddings", False), unsanitized)
        n_experts, tdt = tc.get("num_experts", 0), tc.get("dtype")
    elif mt == "qwen3_next":
        tc = cfg
        # The published Qwen3-Next checkpoints keep one tensor per expert;
        # transformers 5 saves them fused (tests/models/tiny-qwen3next), which
        # mlx-lm's sanitize does not take (it returns such weights as they
        # are). So fused experts are first split into the published layout.
        for l in range(cfg["num_hidden_layers"]):
            p = "model.layers.%d.mlp.experts" % l
            if p + ".gate_up_proj" in w:
                dt, gu = w.pop(p + ".gate_up_proj")
                dt2, dn = w.pop(p + ".down_proj")
                mid = gu.shape[-2] // 2
                for e in range(gu.shape[0]):
                    w["%s.%d.gate_proj.weight" % (p, e)] = (dt, gu[e, :mid, :])
                    w["%s.%d.up_proj.weight" % (p, e)] = (dt, gu[e, mid:, :])
                    w["%s.%d.down_proj.weight" % (p, e)] = (dt2, dn[e])
        if "model.layers.0.mlp.experts.0.up_proj.weight" in w:  # qwen3_next.py Model.sanitize
            w = {k: v for k, v in w.items() if "mtp." not in k}
            for l in range(cfg["num_hidden_layers"]):
                p = "model.layers.%d.mlp" % l
                for n in ("up_proj", "down_proj", "gate_proj"):
                    parts = [w.pop("%s.experts.%d.%s.weight" % (p, e, n)) for e in range(cfg["num_experts"])]
                    w["%s.switch_mlp.%s.weight" % (p, n)] = (parts[0][0], np.stack([a for _, a in parts]))
            w = sanitize_text(w, cfg.get("tie_word_embeddings", False), True)
        n_experts, tdt = cfg["num_experts"], None
    else:
        raise SystemExit("model_type %s: not a Qwen3.5 / Qwen3-Next text checkpoint" % mt)

    # convert.py: floating parameters cast to torch_dtype (or text_config's
    # dtype), except A_log (cast_predicate). The tiny checkpoints are bf16.
    dtype = cfg.get("torch_dtype") or tdt or tc.get("torch_dtype")
    want = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}.get(dtype)
    if want:
        for k, (dt, a) in list(w.items()):
            if dt in ("BF16", "F16", "F32") and dt != want and not k.endswith("A_log"):
                w[k] = from_float(want, to_float(dt, a))

    if bits:
        # utils.py quantize_model: every module with to_quantized (Linear,
        # Embedding, SwitchLinear) whose weight's last dim is a multiple of the
        # group; the model's quant_predicate (MoE ones) asks 8 bits group 64 of
        # mlp.gate and shared_expert_gate, recorded per path in the config.
        q = {"group_size": group, "bits": bits, "mode": "affine"}
        # (the weights of those modules: every weight of 2 or more dims but
        # conv1d's; norms are 1-D, A_log and dt_bias have no ".weight")
        for k, (dt, a) in sorted(w.items()):
            if not k.endswith(".weight") or "conv1d" in k or a.ndim < 2 or a.shape[-1] % group:
                continue
            path = k[: -len(".weight")]
            b, g = bits, group
            if n_experts > 0 and (path.endswith("mlp.gate") or path.endswith("shared_expert_gate")):
                b, g = 8, 64
                if a.shape[-1] % g:
                    raise SystemExit("%s: %d columns, not a multiple of 64: mlx-lm's 8-bit group-64 quantization "
                                     "of MoE gates fails on it (use --bits 0)" % (path, a.shape[-1]))
                q[path] = {"group_size": g, "bits": b}
            packed, sc, bi = quantize_stored(to_float(dt, a), b, g, dt)
            w[k], w[path + ".scales"], w[path + ".biases"] = packed, sc, bi
        cfg["quantization"] = q
        cfg["quantization_config"] = dict(q)
    return cfg, w


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--bits", type=int, default=4, choices=(0, 4, 8))
    ap.add_argument("--group", type=int, default=32, choices=(32, 64, 128))
    a = ap.parse_args()
    cfg, w = convert(a.src, a.bits, a.group)
    os.makedirs(a.out, exist_ok=True)
    save(os.path.join(a.out, "model.safetensors"), w)
    # utils.py save_model writes the index beside a single file too
    size = sum(x.nbytes for _, x in w.values())
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": size},
                   "weight_map": {k: "model.safetensors" for k in sorted(w)}}, f, indent=4)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=4)
        f.write("\n")
    for name in ("generation_config.json",):
        p = os.path.join(a.src, name)
        if os.path.exists(p):
            open(os.path.join(a.out, name), "w").write(open(p).read())
    for name in ("tokenizer.json", "tokenizer_config.json"):
        p = os.path.join(a.src, name)
        d = os.path.join(a.out, name)
        if os.path.islink(p) and not os.path.lexists(d):
            os.symlink(os.readlink(p), d)
    print("%s: %d tensors, %d bytes" % (a.out, len(w), size))


if __name__ == "__main__":
    main()
