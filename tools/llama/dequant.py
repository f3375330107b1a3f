"""tools/llama/dequant.py - an MLX-quantized Hugging Face directory as a plain
F32 one, for llama.cpp's convert_hf_to_gguf.py (which reads unquantized
weights only). Each weight is fl32(scale * q + bias), the value dflash's
kernels dequantize to; config.json loses its "quantization" keys; the
tokenizer files are copied (symlinks resolved).

    python3 tools/llama/dequant.py IN_DIR OUT_DIR

Needs torch and numpy (the GPU machine has them).
"""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
import st  # noqa: E402 (the path is set above)
from ref_model import load_weights  # noqa: E402


def main() -> None:
    src, dst = sys.argv[1], sys.argv[2]
    cfg, w = load_weights(src)
    os.makedirs(dst, exist_ok=True)
    # load_weights drops the "model." prefix; lm_head sits outside "model."
    tensors = {(k if k.startswith("lm_head") else "model." + k): t.float().contiguous() for k, t in w.items()}
    st.save(os.path.join(dst, "model.safetensors"), tensors)
    for k in ("quantization", "quantization_config"):
        cfg.pop(k, None)
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        p = os.path.join(src, name)
        if os.path.exists(p):
            shutil.copyfile(p, os.path.join(dst, name))
    print("dequant: %s -> %s, %d tensors in F32" % (src, dst, len(tensors)))


if __name__ == "__main__":
    main()
