"""tools/llama/convert.py - llama.cpp's convert_hf_to_gguf.py for dflash synth checkpoints.

    python3 tools/llama/convert.py LLAMA_CPP_DIR [convert_hf_to_gguf.py arguments...]

Runs the converter shipped in the trimmed llama.cpp source (its gguf-py, no
pip install) with two fallbacks that only matter for timing runs, where
llama-bench feeds random token ids and never tokenizes text:
- a tokenizer whose pre-tokenizer hash the converter does not know is written
  as "qwen2" (the Qwen3 tokenizer's pre-tokenizer) instead of stopping;
- if the tokenizer cannot be read at all, the GGUF gets no tokenizer
  ("none") and vocab_size dummy tokens, which llama.cpp loads (for the
  Qwen3, Qwen3-MoE, Qwen3.5, Qwen3.5-MoE, Qwen3-Next, gpt-oss and Gemma-4
  classes);
- a Qwen3-MoE checkpoint's dense layers (mlp_only_layers: the tiny test
  model has one) get the dense names blk.L.ffn_{gate,up,down}: the
  converter's qwen3moe tensor map has no name for them and stops otherwise.
  llama.cpp cannot run such a file (its qwen3moe wants experts in every
  layer); dflash reads a layer without ffn_gate_inp as a dense one.
- without transformers (a Debian machine with python3-torch and
  python3-numpy only), a stand-in module whose AutoConfig and AutoTokenizer
  raise: the converter then reads config.json itself, and the tokenizer
  takes the fallback above.
Each prints a warning naming what was done.
"""
import logging
import os
import sys


def main() -> None:
    llama_dir = os.path.abspath(sys.argv[1])
    sys.path.insert(0, llama_dir)
    sys.path.insert(1, os.path.join(llama_dir, "gguf-py"))
    log = logging.getLogger("dflash-convert")
    try:
        import transformers  # noqa: F401 (only whether it is there)
    except ImportError:
        import types

        class Unavailable:
            @staticmethod
            def from_pretrained(*args, **kwargs):
                raise RuntimeError("transformers is not installed")

        stand_in = types.ModuleType("transformers")
        stand_in.AutoConfig = stand_in.AutoTokenizer = Unavailable
        sys.modules["transformers"] = stand_in
        log.warning("dflash: no transformers: config.json read directly, no tokenizer conversion")
    import torch
    for name in ("float8_e4m3fn", "float8_e5m2"):  # torch < 2.1 (Debian 12's): no float8, none in our files
        if not hasattr(torch, name):
            setattr(torch, name, torch.uint8)
            log.warning("dflash: torch %s has no %s (aliased to uint8)", torch.__version__, name)
    import conversion.base as base  # noqa: E402 (the path is set above)

    pre_orig = base.TextModel.get_vocab_base_pre

    def vocab_base_pre(self, tokenizer):
        try:
            return pre_orig(self, tokenizer)
        except NotImplementedError:
            log.warning("dflash: pre-tokenizer hash not known: written as qwen2")
            return "qwen2"

    base.TextModel.get_vocab_base_pre = vocab_base_pre

    from conversion import get_model_class  # noqa: E402
    import convert_hf_to_gguf  # noqa: E402

    def no_tokenizer_fallback(cls):
        set_vocab_orig = cls.set_vocab

        def set_vocab(self):
            try:
                set_vocab_orig(self)
            except Exception as e:  # the tokenizer could not be read: timing and logit tests need none
                log.warning("dflash: tokenizer not converted (%s: %s): vocab 'none' with %d dummy tokens",
                            type(e).__name__, e, self.hparams["vocab_size"])
                self.gguf_writer.add_tokenizer_model("none")
                self.gguf_writer.add_vocab_size(self.hparams["vocab_size"])

        cls.set_vocab = set_vocab

    for arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                 "Qwen3NextForCausalLM", "GptOssForCausalLM", "Gemma4ForCausalLM"):
        no_tokenizer_fallback(get_model_class(arch))

    import gguf  # noqa: E402 (the converter's own gguf-py, on the path above)
    moe = gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN3MOE]
    dense = [gguf.MODEL_TENSOR.FFN_GATE, gguf.MODEL_TENSOR.FFN_UP, gguf.MODEL_TENSOR.FFN_DOWN]
    if any(t not in moe for t in dense):
        log.warning("dflash: qwen3moe tensor map extended with blk.L.ffn_{gate,up,down} (dense layers of "
                    "mlp_only_layers; llama.cpp cannot run such a file)")
        moe.extend(t for t in dense if t not in moe)
    sys.argv = [os.path.join(llama_dir, "convert_hf_to_gguf.py")] + sys.argv[2:]
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
