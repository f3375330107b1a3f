"""Tiny random gpt-oss and Gemma-4 text checkpoints and their reference fixtures
(issue 22: the families dflash does not load yet), from transformers' own
config and modeling classes (GptOssForCausalLM, Gemma4ForCausalLM; float32,
CPU, eager attention).

    python3 tools/reference/make_tiny_zoo2.py --out DIR     (on the GPU machine)

Writes DIR/models/{tiny-gptoss, tiny-gemma4, tiny-gemma4-kv, tiny-gemma4-moe} and
DIR/fixtures/{...}.ref.safetensors (keys as
tests/fixtures/README.md gives for targets), and logs each config class's
defaults: the fields an implementation must read or refuse.

The configs are the classes' defaults with the sizes made tiny (vocab 16384
for the Qwen3 tokenizer's ids, hidden 64, 4 query / 2 key-value heads of 16,
sliding window 8, so the fixture prompts of up to 40 + 24 tokens cross it) and
every family feature the defaults switch on kept on: gpt-oss: alternating
sliding / full layers, attention sinks, attention biases, YaRN RoPE, 4 experts
top-2 with the clamped SwiGLU; Gemma-4: 5 sliding : 1 full layers with the
wider full-layer head, per-layer input embeddings, the sandwich norms, logit
softcapping, and KV sharing in the last layers where the defaults have it.
Weights are drawn by a seeded generator (scaled normals; norm weights the
class's init plus noise; sinks and biases normal) and stored bf16; the HF
model then loads the written directory with from_pretrained (loading problems
fail the run). No independent implementation cross-checks these yet: the
"ref64" of the fixture statistics is the same HF model in float64 (rounding,
not a second reading of the architecture).
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../.."))
sys.path.insert(0, os.path.join(REPO, "tools/reference"))
import st  # noqa: E402
import make_tiny_moe as MM  # noqa: E402
import make_tiny_qwen35 as MQ  # noqa: E402

V, H, NQ, NKV, HD, I = 16384, 64, 4, 2, 16, 128
WINDOW = 8


def log(*a):
    print(*a, flush=True)


def tiny_config(model_type, arch, n_layers, layer_types, extra):
    """The class defaults with the tiny sizes put in where the class has the
    field; returns the config dict as save_pretrained writes it."""
    from transformers import AutoConfig
    default = AutoConfig.for_model(model_type).to_dict()
    log("== %s defaults (transformers):" % model_type)
    log(json.dumps(default, indent=1, sort_keys=True, default=str))
    want = {"vocab_size": V, "hidden_size": H, "intermediate_size": I, "num_hidden_layers": n_layers,
            "num_attention_heads": NQ, "num_key_value_heads": NKV, "head_dim": HD, "sliding_window": WINDOW, "layer_types": layer_types, "pad_token_id": 0, "bos_token_id": 1,
            "eos_token_id": 2, "tie_word_embeddings": True}
    want.update(extra)
    put, skipped = {}, []
    for k, v in want.items():
        if k in default:
            put[k] = v
        else:
            skipped.append(k)
    log("  %s: set %s; not fields of the class: %s" % (model_type, sorted(put), skipped))
    cfg = AutoConfig.for_model(model_type, **put)
    d = cfg.to_dict()
    d["architectures"] = [arch]
    d["dtype"] = "bfloat16"
    return d


def random_weights(cfg, seed, embed_std):
    """A model of cfg from transformers, its parameters redrawn so that logits
    are far from uniform (HF's init gives near-ties everywhere); bf16."""
    from transformers import AutoConfig, AutoModelForCausalLM
    c = AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items()
                                                   if k not in ("model_type", "transformers_version", "architectures")})
    torch.manual_seed(seed)
    m = AutoModelForCausalLM.from_config(c, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    sd = m.state_dict()
    out = {}
    for k, v in sd.items():
        if cfg.get("tie_word_embeddings") and k == "lm_head.weight":
            continue
        if v.dim() == 1 and "norm" in k:
            t = v.float() + 0.1 * torch.randn(v.shape, generator=g)
        elif v.dim() == 1:  # biases, sinks, scalars per head
            t = 0.5 * torch.randn(v.shape, generator=g)
        elif "embed" in k:
            t = embed_std * torch.randn(v.shape, generator=g)
        else:  # [.., out, in]: normal with std 1/sqrt(fan_in)
            t = torch.randn(v.shape, generator=g) / v.shape[-1] ** 0.5
        out[k] = t.to(torch.bfloat16).contiguous()
    log("  %s tensors: %s" % (cfg["model_type"], [(k, tuple(t.shape)) for k, t in out.items()
                                                  if ".layers." not in k or ".layers.0." in k or ".layers.1." in k]))
    return out


def family(name, cfg, w, mdir, fdir, tmp, sentences, stats):
    hf = MQ.hf_load(cfg, w, tmp, name)
    ref = MQ.HFHybrid(MQ.hf_load(cfg, w, tmp, name + "-64").m.double())
    try:
        ref.run([5, 6, 7])
    except RuntimeError as e:  # gpt-oss's expert kernels take no float64
        log("  %s: no float64 run (%s); ref64 is a second float32 model" % (name, e))
        ref = MQ.HFHybrid(MQ.hf_load(cfg, w, tmp, name + "-32").m)
    log("== %s" % name)
    fx, prompts = MM.target_fixture(name, hf, ref, sentences, stats)
    MM.write_model(os.path.join(mdir, name), cfg, w)
    for fn in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(mdir, name, fn), os.path.join(fdir, "%s.%s" % (name, fn)))
    st.save(os.path.join(fdir, name + ".ref.safetensors"), fx,
            {"model": name, "n_prompts": len(prompts), "max_new": MQ.MAX_NEW})


class _Skip(Exception):
    pass


def want(name):
    """ZOO2_ONLY="a,b" makes only those families (default: all)."""
    only = os.environ.get("ZOO2_ONLY")
    return not only or name in only.split(",")


def main():
    out, mdir, fdir, tmp, sentences, stats = MM.start()
    failed = []

    L = 4
    try:
        if not want("tiny-gptoss"):
            raise _Skip
        cfg = tiny_config("gpt_oss", "GptOssForCausalLM", L, ["sliding_attention", "full_attention"] * (L // 2),
                          {"num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": False})
        family("tiny-gptoss", cfg, random_weights(cfg, 41, 1.0), mdir, fdir, tmp, sentences, stats)
    except _Skip:
        pass
    except Exception as e:  # noqa: BLE001  (the other family still runs; the log says why)
        log("tiny-gptoss FAILED: %r" % (e,))
        failed.append("tiny-gptoss")

    L = 6
    try:
        if not want("tiny-gemma4"):
            raise _Skip
        from transformers import AutoConfig
        dflt = AutoConfig.for_model("gemma4_text").to_dict()
        # the full layer's wider head as the defaults give it (per_layer_config: 512 for 256),
        # final logit softcapping on (the class default is off)
        extra = {"per_layer_config": {"05": {"head_dim": 2 * HD}}, "hidden_size_per_layer_input": 8,
                 "vocab_size_per_layer_input": V, "final_logit_softcapping": 30.0, "max_position_embeddings": 512}
        if dflt.get("num_kv_shared_layers"):
            extra["num_kv_shared_layers"] = 2
        cfg = tiny_config("gemma4_text", "Gemma4ForCausalLM", L, ["sliding_attention"] * 5 + ["full_attention"], extra)
        family("tiny-gemma4", cfg, random_weights(cfg, 43, H ** -0.5), mdir, fdir, tmp, sentences, stats)
    except _Skip:
        pass
    except Exception as e:  # noqa: BLE001
        log("tiny-gemma4 FAILED: %r" % (e,))
        failed.append("tiny-gemma4")

    # Gemma-4 31B's attention: full layers with attention_k_eq_v (no v_proj; the values
    # are the keys as projected, v_norm'd, unrotated) and fewer, wider kv heads; two full
    # layers, no per-layer inputs
    L = 6
    if want("tiny-gemma4-kv"):
        try:
            full = {"head_dim": 2 * HD, "num_key_value_heads": 1}
            extra = {"per_layer_config": {"2": full, "5": full}, "attention_k_eq_v": True,
                     "hidden_size_per_layer_input": 0, "final_logit_softcapping": 30.0,
                     "max_position_embeddings": 512}
            types = (["sliding_attention"] * 2 + ["full_attention"]) * 2
            cfg = tiny_config("gemma4_text", "Gemma4ForCausalLM", L, types, extra)
            family("tiny-gemma4-kv", cfg, random_weights(cfg, 47, H ** -0.5), mdir, fdir, tmp, sentences, stats)
        except Exception as e:  # noqa: BLE001
            log("tiny-gemma4-kv FAILED: %r" % (e,))
            failed.append("tiny-gemma4-kv")

    # gemma-4-26B-A4B's layer: the MoE block (enable_moe_block) beside the dense MLP; 4 experts
    # top-2 of width 32, per-layer inputs and softcapping as tiny-gemma4, one full layer
    L = 6
    if want("tiny-gemma4-moe"):
        try:
            extra = {"per_layer_config": {"05": {"head_dim": 2 * HD}}, "hidden_size_per_layer_input": 8,
                     "vocab_size_per_layer_input": V, "final_logit_softcapping": 30.0,
                     "max_position_embeddings": 512, "enable_moe_block": True, "num_experts": 4,
                     "top_k_experts": 2, "moe_intermediate_size": 32}
            cfg = tiny_config("gemma4_text", "Gemma4ForCausalLM", L, ["sliding_attention"] * 5 + ["full_attention"],
                              extra)
            family("tiny-gemma4-moe", cfg, random_weights(cfg, 53, H ** -0.5), mdir, fdir, tmp, sentences, stats)
        except Exception as e:  # noqa: BLE001
            log("tiny-gemma4-moe FAILED: %r" % (e,))
            failed.append("tiny-gemma4-moe")

    MM.finish(out, stats)
    if failed:
        log("FAILED: %s" % failed)
        sys.exit(1)


if __name__ == "__main__":
    main()
