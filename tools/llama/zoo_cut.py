"""tools/llama/zoo_cut.py - the small inputs of zoo_gguf.sh's gpt-oss and Gemma-4 fixtures.

    python3 tools/llama/zoo_cut.py OUT_DIR

From tests/models/tiny-gptoss, tiny-gemma4 and tiny-gemma4-kv (16384-token
vocabularies: their GGUF files would be 2-4 MB) this writes, under OUT_DIR:
  - NAME-v1k: the same checkpoint with the vocabulary cut to its first 1024
    tokens (rows 0..1023 of embed_tokens, lm_head and embed_tokens_per_layer,
    the bytes as they are; vocab_size and vocab_size_per_layer_input 1024);
  - tiny-gptoss-mxfp4-v1k: tiny-gptoss-v1k with its experts in MXFP4 as
    openai's checkpoints store them (gate_up_proj_blocks [E, 2I, H/32, 16]
    output-major, gate and up rows interleaved, element 2j in the low nibble
    of byte j, e8m0 scales [E, 2I, H/32]; down_proj likewise; config
    quantization_config {"quant_method": "mxfp4"}).
  - in each, a stub tokenizer.json (see cut()).
tests/test_gguf.c makes the same checkpoints in C (gguf_zoo2_*) and compares
them with the GGUF files llama.cpp's converter writes from these, so the
encoding below is exact and its rules are the test's: per block of 32 values
(bf16, exact in float64) e is the smallest integer >= -125 with 6 * 2^e >=
max |x| (-20 for an all-zero block), the scale byte e + 127, and each value
the FP4 code c (0..15, table below) nearest to x / 2^e, the lowest c on ties.
Only the Python standard library and numpy.
"""
import json
import os
import struct
import sys

import numpy as np

FP4 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
V = 1024


def read_st(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        out[k] = (v["dtype"], list(v["shape"]), data[a:b])
    return out


def write_st(path, tensors):
    head, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        head[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(head, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def cut(src, dst, extra=None):
    os.makedirs(dst, exist_ok=True)
    t = read_st(os.path.join(src, "model.safetensors"))
    for k, (dt, shape, raw) in list(t.items()):
        if k.endswith(("embed_tokens.weight", "lm_head.weight", "embed_tokens_per_layer.weight")):
            row = len(raw) // shape[0]
            t[k] = (dt, [V] + shape[1:], raw[: V * row])
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["vocab_size"] = V
    if "vocab_size_per_layer_input" in cfg:
        cfg["vocab_size_per_layer_input"] = V
    if extra:
        t, cfg = extra(t, cfg)
    write_st(os.path.join(dst, "model.safetensors"), t)
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    # the converter's Gemma classes count tokenizer.json's tokens to cut
    # token_embd to them: a stub of V tokens keeps all V rows (no merges: it
    # is no tokenizer, and convert.py writes none)
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump({"model": {"vocab": {"t%d" % i: i for i in range(V)}}, "added_tokens": []}, f)


def bf16_to_f64(raw, shape):
    u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
    return u.view(np.float32).astype(np.float64).reshape(shape)


def encode_rows(w):
    """w [rows, cols] float64 -> blocks [rows, cols/32, 16] u8, scales [rows, cols/32] u8"""
    rows, cols = w.shape
    nb = cols // 32
    blk = np.zeros((rows, nb, 16), dtype=np.uint8)
    sc = np.zeros((rows, nb), dtype=np.uint8)
    table = np.array(FP4)
    for r in range(rows):
        for b in range(nb):
            x = w[r, 32 * b: 32 * b + 32]
            amax = float(np.max(np.abs(x)))
            e = -20
            if amax > 0:
                e = -125
                while 6.0 * 2.0 ** e < amax:
                    e += 1
            sc[r, b] = e + 127
            y = x / 2.0 ** e
            codes = [int(np.argmin(np.abs(table - v))) for v in y]
            for j in range(16):
                blk[r, b, j] = codes[2 * j] | codes[2 * j + 1] << 4
    return blk, sc


def to_mxfp4(t, cfg):
    for k in [k for k in t if k.endswith(("experts.gate_up_proj", "experts.down_proj"))]:
        dt, shape, raw = t.pop(k)
        E, cin, cout = shape
        w = bf16_to_f64(raw, shape)  # [E, in, out]
        bl, sl = [], []
        for e in range(E):
            b, s = encode_rows(w[e].T)  # output-major [out, in]
            bl.append(b)
            sl.append(s)
        t[k + "_blocks"] = ("U8", [E, cout, cin // 32, 16], np.stack(bl).tobytes())
        t[k + "_scales"] = ("U8", [E, cout, cin // 32], np.stack(sl).tobytes())
    cfg["quantization_config"] = {"quant_method": "mxfp4"}
    return t, cfg


def main():
    out = sys.argv[1]
    m = "tests/models"
    for name in ("tiny-gptoss", "tiny-gemma4", "tiny-gemma4-kv"):
        cut(os.path.join(m, name), os.path.join(out, name + "-v1k"))
    cut(os.path.join(m, "tiny-gptoss"), os.path.join(out, "tiny-gptoss-mxfp4-v1k"), to_mxfp4)


if __name__ == "__main__":
    main()
