"""A tiny random Qwen3-Next checkpoint (qwen3_next: Qwen3-Coder-Next's
family) and its reference fixture (transformers Qwen3NextForCausalLM,
float32, CPU, eager attention, the torch fallbacks of the delta rule).

    python3 tools/reference/make_tiny_qwen3next.py --out DIR     (on the GPU machine)

Writes DIR/models/tiny-qwen3next and DIR/fixtures/tiny-qwen3next.ref.safetensors
(keys as tests/fixtures/README.md gives for targets).

Same sizes as tiny-qwen35moe (make_tiny_qwen35.py: hidden 32, 4 layers
[linear, full, linear, linear], gated attention 4 q / 2 kv heads of 16,
partial rotary 0.5, Gated DeltaNet 2 key / 4 value heads of 16, conv 4,
8 experts top 2 of width 32, shared expert 48, vocab 16384, tied, bf16),
with Qwen3-Next's two fused input projections per linear layer:
  in_proj_qkvz [2*nk*dk + 2*nv*dv, H]: per key head g, rows q_g (dk), k_g (dk),
    then the value and gate rows of its nv/nk value heads (r*dv each);
  in_proj_ba [2*nv, H]: per key head g, b then a of its r value heads.
The weights are drawn in Qwen3.5 names (make_tiny_qwen35.make_weights) and
interleaved into those two; make_tiny_qwen35's float64 implementation, run
on the Qwen3.5 names, must agree with transformers on the Qwen3-Next file
(logged; a large gap stops the run), which checks the interleave itself.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../.."))
if not os.path.isdir(os.path.join(REPO, "tools/reference")):
    REPO = os.getcwd()
sys.path.insert(0, os.path.join(REPO, "tools/reference"))
import st  # noqa: E402
import make_fixtures as MF  # noqa: E402
import make_tiny_moe as MM  # noqa: E402
import make_tiny_qwen35 as Q  # noqa: E402

log = Q.log


def next_config():
    c = Q.qwen35_config(moe=True)
    c.update({"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next",
              "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": True,
              "intermediate_size": Q.I, "partial_rotary_factor": Q.ROT / Q.HD,
              "rope_theta": 1000000.0,
              "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                  "partial_rotary_factor": Q.ROT / Q.HD}})
    return c


def interleave(w35):
    """Qwen3.5 names -> Qwen3-Next's fused in_proj_qkvz / in_proj_ba."""
    NK, NV, DK, DV = Q.NK, Q.NV, Q.DK, Q.DV
    r = NV // NK
    w = {}
    for k, v in w35.items():
        if ".linear_attn.in_proj_" not in k:
            w[k] = v
            continue
        p = k.split("linear_attn.")[0] + "linear_attn."
        if k.endswith("in_proj_qkv.weight"):
            qkv, z = w35[p + "in_proj_qkv.weight"], w35[p + "in_proj_z.weight"]
            q, kk, vv = qkv[:NK * DK], qkv[NK * DK:2 * NK * DK], qkv[2 * NK * DK:]
            rows = []
            for g in range(NK):
                rows += [q[g * DK:(g + 1) * DK], kk[g * DK:(g + 1) * DK],
                         vv[g * r * DV:(g + 1) * r * DV], z[g * r * DV:(g + 1) * r * DV]]
            w[p + "in_proj_qkvz.weight"] = torch.cat(rows).contiguous()
        elif k.endswith("in_proj_b.weight"):
            b, a = w35[p + "in_proj_b.weight"], w35[p + "in_proj_a.weight"]
            rows = []
            for g in range(NK):
                rows += [b[g * r:(g + 1) * r], a[g * r:(g + 1) * r]]
            w[p + "in_proj_ba.weight"] = torch.cat(rows).contiguous()
    return w


def main():
    out, mdir, fdir, tmp, sentences, stats = MM.start()
    cfg, cfg35 = next_config(), Q.qwen35_config(moe=True)
    w35 = Q.make_weights(41, moe=True)
    hf0 = Q.hf_load(cfg, interleave(w35), tmp, "pre")
    ids = list(range(100, 140))
    lh, th = hf0.run(ids)
    lr, tr = Q.RefQwen35(cfg35, w35).run(ids)
    gap = float((lh.double() - lr).abs().max())
    log("  pre: |HF qwen3_next - ref64 on the Qwen3.5 names| logits %.3e taps %.3e"
        % (gap, (torch.stack(th).double() - torch.stack(tr)).abs().max()))
    if gap > 1e-3:
        raise RuntimeError("Qwen3-Next and the Qwen3.5-layout reference disagree: the interleave is wrong")
    MM.relabel_attractor(hf0, w35, "tiny-qwen3next")
    w = interleave(w35)
    d = os.path.join(mdir, "tiny-qwen3next")
    MM.write_model(d, cfg, w)
    hf = Q.hf_load(cfg, w, tmp, "tiny-qwen3next")
    log("== tiny-qwen3next")
    fx, _ = MM.target_fixture("tiny-qwen3next", hf, Q.RefQwen35(cfg35, w35), sentences, stats)
    st.save(os.path.join(fdir, "tiny-qwen3next.ref.safetensors"), fx,
            {"model": "tiny-qwen3next", "n_prompts": len(MF.LENGTHS) + 1, "max_new": Q.MAX_NEW})
    MM.finish(out, stats)


if __name__ == "__main__":
    main()
