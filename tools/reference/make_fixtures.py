"""PyTorch reference fixtures for the C engine's forward-pass and DFlash tests.

    python3 tools/reference/make_fixtures.py [--models tests/models] [--out tests/fixtures]
                                             [--backend hf|ref]

--backend hf (default; needs transformers + tokenizers): the reference is the
HF model in float32 on the CPU (eager attention); ref_model.RefTarget in
float32 and float64 cross-checks it. --backend ref: RefTarget float32 is the
reference (for machines without transformers; development only).

Writes tests/fixtures/<model>.ref.safetensors for tiny-qwen3, tiny-llama3,
tiny-qwen3-q8, tiny-qwen3-q4 and tiny-draft; keys in tests/fixtures/README.md.
Prompts come from seeded RNG streams; a candidate prompt is skipped when any
argmax the fixture stores or depends on has a top-1/top-2 logit gap below
GAP_MIN, so float32 rounding in another engine cannot flip it.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402
import dflash_ref as D  # noqa: E402
from ref_model import RefTarget, load_weights  # noqa: E402

V = 16384
MASK = V - 1
MAX_NEW = 24
BLOCK = 16
GAP_MIN = 1e-3
LENGTHS = [1, 2, 7, 13, 40]
TAIL = {2: 3, 3: 2}          # slot -> number of trailing mask ids
SENTENCES = [
    "Hello, world! It's a small test of the engine.",
    "The cat sat on the mat and looked at the door.",
    "It is a good day to write some code.",
]
SENTENCE_FALLBACK = [9707, 11, 1879, 0, 1084, 594]   # "Hello, world! It's" (ids other tokenizers agree on)
TARGETS = ["tiny-qwen3", "tiny-llama3", "tiny-qwen3-q8", "tiny-qwen3-q4"]


def log(*a):
    print(*a, flush=True)


def gap(logits):
    """top-1 minus top-2 per row -> float64 tensor [rows]."""
    t = logits.double().topk(2, -1).values
    return t[..., 0] - t[..., 1]


# ----------------------------------------------------------------------------
# prompts

def sentence_ids(repo):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        log("tokenizers not available: sentence prompt = fallback ids", SENTENCE_FALLBACK)
        return [SENTENCE_FALLBACK]
    tok = Tokenizer.from_file(os.path.join(repo, "models/qwen3-tokenizer/tokenizer.json"))
    check = tok.encode("Hello, world! It's", add_special_tokens=False).ids
    assert check == SENTENCE_FALLBACK, check
    out = []
    for s in SENTENCES:
        ids = tok.encode(s, add_special_tokens=False).ids
        log("sentence %r -> %s" % (s, ids))
        if max(ids) < V:
            out.append(ids)
    assert out, "no sentence has all ids < %d" % V
    return out


def candidates(slot, sentences):
    """Seeded candidate stream for prompt slot 0..5. Slots 2 and 3 (lengths 7
    and 13) end in three / two mask ids (16383): the relabeled tiny-qwen3 then
    tends to emit runs of 16383, which the draft accepts (see make_tiny.py)."""
    if slot == len(LENGTHS):
        for ids in sentences:
            yield list(ids)
        return
    rng = np.random.RandomState(1000 + slot)
    n = LENGTHS[slot]
    while True:
        ids = rng.randint(0, V, size=n).tolist()
        if slot in TAIL:
            ids[-TAIL[slot]:] = [MASK] * TAIL[slot]
        yield ids


def pick(slot, sentences, ok, what):
    for k, ids in enumerate(candidates(slot, sentences)):
        why = ok(ids)
        if why is None:
            return ids
        log("  %s p%d: candidate %d skipped (%s)" % (what, slot, k, why))
        if k >= 50:
            raise RuntimeError("no acceptable prompt for slot %d" % slot)
    raise RuntimeError("candidates exhausted for slot %d" % slot)


# ----------------------------------------------------------------------------
# targets

def hf_target(model_dir, tmp):
    """HF float32 target on CPU. Quantized (MLX) dirs: dequantize (exact
    fl32(scale*q + bias)) into a plain float32 checkpoint and load that."""
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    path = model_dir
    if "quantization" in cfg or "quantization_config" in cfg:
        path = os.path.join(tmp, os.path.basename(model_dir) + "-deq")
        os.makedirs(path, exist_ok=True)
        cfg.pop("quantization", None)
        cfg.pop("quantization_config", None)
        with open(os.path.join(path, "config.json"), "w") as f:
            json.dump(cfg, f)
        _, w = load_weights(model_dir)
        st.save(os.path.join(path, "model.safetensors"),
                {"model." + k: v.float() for k, v in w.items()})
    from transformers import AutoModelForCausalLM
    res = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    m, info = res if isinstance(res, tuple) else (res, {})
    bad = {}
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        v = [x for x in (info.get(k) or []) if not (cfg.get("tie_word_embeddings") and "lm_head" in str(x))]
        if v:
            bad[k] = v
    log("  HF load %s: %s, loading problems: %s" % (os.path.basename(model_dir), type(m).__name__, bad or "none"))
    assert not bad, bad
    rot = getattr(m.model, "rotary_emb", None)
    if getattr(rot, "inv_freq", None) is not None:
        mine = D.rope_inv_freq(cfg, cfg["head_dim"])
        log("  HF inv_freq vs ours: max rel diff %.2e" % ((rot.inv_freq.double() - mine).abs() / mine).max())
    return D.HFTarget(m)


def forward_rows(tgt, ids):
    logits, taps = tgt.run(ids)
    return logits.double(), torch.stack([t.double() for t in taps])


# ----------------------------------------------------------------------------

class Stats:
    """Named maxima / minima / counts over all prompts."""

    def __init__(self):
        self.d = {}

    def add(self, key, val):
        self.d[key] = max(self.d.get(key, float(val)), float(val))

    def low(self, key, val):
        self.d[key] = min(self.d.get(key, float(val)), float(val))

    def count(self, key, n=1):
        self.d[key] = self.d.get(key, 0) + n


def target_fixture(name, tgt, ref32, ref64, sentences, stats):
    def check(ids):
        g = D.greedy_generate(tgt, ids, MAX_NEW)
        full = ids + g[:-1]
        logits, _ = tgt.run(full)
        assert [int(x) for x in logits[len(ids) - 1:].argmax(-1)] == g
        m = float(gap(logits).min())
        return None if m >= GAP_MIN else "min gap %.2e" % m

    out = {}
    for i in range(len(LENGTHS) + 1):
        ids = pick(i, sentences, check, name)
        T = len(ids)
        logits, taps = tgt.run(ids)
        greedy = D.greedy_generate(tgt, ids, MAX_NEW)
        out["p%d.ids" % i] = torch.tensor(ids, dtype=torch.int32)
        out["p%d.logits" % i] = logits[T - 1:].float().contiguous()  # the last row (size; argmax and taps of all rows)
        out["p%d.argmax" % i] = logits.argmax(-1).to(torch.int32)
        out["p%d.taps" % i] = torch.stack(taps).float().contiguous()
        out["p%d.greedy" % i] = torch.tensor(greedy, dtype=torch.int32)
        # cross-checks on prompt + greedy rows
        full = ids + greedy[:-1]
        lf, tf = forward_rows(tgt, full)
        stats.low(name + " min top1-top2 gap (prompt+greedy rows)", gap(lf).min())
        rows = {}
        for tag, other in (("ref32", ref32), ("ref64", ref64)):
            if other is None:
                continue
            lo, to = forward_rows(other, full)
            rows[tag] = lo
            stats.add("%s logits |fixture-%s|" % (name, tag), (lf - lo).abs().max())
            stats.add("%s taps |fixture-%s|" % (name, tag), (tf - to).abs().max())
            og = D.greedy_generate(other, ids, MAX_NEW, cached=True)
            if og != greedy:
                log("  WARNING %s p%d: %s greedy differs: %s vs %s" % (name, i, tag, og, greedy))
                stats.count(name + " greedy mismatches vs " + tag)
        if len(rows) == 2:
            stats.add(name + " logits |ref32-ref64|", (rows["ref32"] - rows["ref64"]).abs().max())
        stats.add(name + " max |logit|", lf.abs().max())
        if getattr(tgt, "m", None) is not None:   # HF: hooks == hidden_states[l+1] for l < L-1
            try:
                o = tgt.m(input_ids=torch.tensor([ids]), output_hidden_states=True, use_cache=False)
                hs = torch.stack([h[0] for h in o.hidden_states[1:-1]])
                stats.add(name + " |hooks - hidden_states[l+1]|, l < L-1",
                          (hs.double() - torch.stack(taps)[:-1].double()).abs().max())
            except Exception as e:
                log("  hidden_states check failed: %r" % e)
        log("  %s p%d T=%d greedy=%s" % (name, i, T, greedy))
    return out


def draft_fixture(tgt, drf, tgt64, drf64, sentences, stats):
    def run(ids, **kw):
        return D.dflash_generate(tgt, drf, ids, MAX_NEW, block_size=BLOCK, keep_trace=True, **kw)

    def check(ids, slot):
        r = run(ids)
        # tiny-draft p2 must accept a whole block (a = B-1) in some round,
        # p3 a partial one (2 <= a < B-1): both paths of the loop get tested.
        if slot == 2 and BLOCK not in r["accept"]:
            return "accept %s: wants a round with a = %d" % (r["accept"], BLOCK - 1)
        if slot == 3 and not any(3 <= x < BLOCK for x in r["accept"]):
            return "accept %s: wants a round with 2 <= a < %d" % (r["accept"], BLOCK - 1)
        # p1, p4: the first draft block must not be all mask ids, so its argmax
        # says something about the draft forward (the mask id dominates often).
        if slot in (1, 4) and MASK in r["trace"][0]["draft_argmax"]:
            return "draft1 has mask ids"
        logits, _ = tgt.run(ids)
        m = float(gap(logits[-1:]).min())
        for k, tr in enumerate(r["trace"]):
            m = min(m, float(gap(tr["draft_logits"]).min()), float(gap(tr["verify_logits"][: tr["a"] + 1]).min()))
        return None if m >= GAP_MIN else "min gap %.2e" % m

    out = {}
    for i in range(len(LENGTHS) + 1):
        ids = pick(i, sentences, lambda c: check(c, i), "tiny-draft")
        r = run(ids)                                  # cached draft (default)
        ru = run(ids, draft_cached=False)
        greedy = D.greedy_generate(tgt, ids, MAX_NEW)
        assert r["tokens"] == greedy, (r["tokens"], greedy)
        assert ru["tokens"] == r["tokens"] and ru["accept"] == r["accept"]
        for a, b in zip(r["trace"], ru["trace"]):
            assert a["draft_argmax"] == b["draft_argmax"]
            stats.add("draft logits |cached-uncached|", (a["draft_logits"] - b["draft_logits"]).abs().max())
        try:
            rt = run(ids, target_cached=True)
            same = rt["tokens"] == r["tokens"] and rt["accept"] == r["accept"]
            stats.count("dflash with target KV cache: runs differing", int(not same))
        except Exception as e:  # optional path (HF DynamicCache API)
            log("  target-cached DFlash path failed: %r" % e)
            stats.count("dflash with target KV cache: runs failing")
        assert len(r["trace"]) >= 2
        t1, t2 = r["trace"][0], r["trace"][1]
        assert t1["s"] == len(ids) and t1["anchor"] == greedy[0]
        out["p%d.ids" % i] = torch.tensor(ids, dtype=torch.int32)
        out["p%d.draft1_argmax" % i] = torch.tensor(t1["draft_argmax"], dtype=torch.int32)
        if i == 0:  # full logits for the first prompt only (fixture size)
            out["p%d.draft1_logits" % i] = t1["draft_logits"][:4].float().contiguous()  # slots 1..4 (size)
        out["p%d.draft2_argmax" % i] = torch.tensor(t2["draft_argmax"], dtype=torch.int32)
        out["p%d.dflash" % i] = torch.tensor(r["tokens"], dtype=torch.int32)
        out["p%d.accept" % i] = torch.tensor(r["accept"], dtype=torch.int32)
        if tgt64 is not None:
            r64 = D.dflash_generate(tgt64, drf64, ids, MAX_NEW, block_size=BLOCK, keep_trace=True)
            if r64["tokens"] != r["tokens"]:
                log("  WARNING tiny-draft p%d: float64 DFlash differs" % i)
            for k in (0, 1):
                if k < len(r64["trace"]) and r64["trace"][k]["s"] == r["trace"][k]["s"]:
                    stats.add("draft logits |fixture-ref64| (rounds 1-2)",
                              (r64["trace"][k]["draft_logits"].double() - r["trace"][k]["draft_logits"].double()).abs().max())
        stats.add("draft max |logit|", t1["draft_logits"].abs().max())
        log("  tiny-draft p%d T=%d accept=%s draft1=%s draft2=%s" % (
            i, len(ids), r["accept"], t1["draft_argmax"], t2["draft_argmax"]))
    return out


def verify_files(paths):
    """Read back every written file with the safetensors package (if present)."""
    try:
        from safetensors import safe_open
    except ImportError:
        log("safetensors package not available: read-back check skipped")
        return
    bad = 0
    for p in paths:
        try:
            _verify_one(safe_open, p)
        except Exception as e:
            log("  READ-BACK FAILED %s: %r" % (p, e))
            bad += 1
    log("safetensors package read back %d files, %d failed" % (len(paths), bad))


def _verify_one(safe_open, p):
    mine, _ = st.load(p)
    with safe_open(p, framework="pt") as f:
        keys = sorted(f.keys())
        assert keys == sorted(mine), p
        for k in keys:
            t, m = f.get_tensor(k), mine[k]
            if isinstance(m, np.ndarray):   # U32: compare the bits
                assert np.array_equal(t.view(torch.int32).numpy().view(np.uint32), m), (p, k)
            else:
                assert t.dtype == m.dtype and torch.equal(t, m), (p, k)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="tests/models")
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--backend", default="hf", choices=["hf", "ref"])
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    repo = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    os.makedirs(args.out, exist_ok=True)
    sentences = sentence_ids(repo)
    stats = Stats()
    tmp = tempfile.mkdtemp()
    written = []
    try:
        written += [os.path.join(r, f) for r, _, fs in os.walk(args.models) for f in fs
                    if f.endswith(".safetensors")]
        verify_files(sorted(written))
        for name in TARGETS:
            mdir = os.path.join(args.models, name)
            log("== %s" % name)
            ref32 = RefTarget(mdir, dtype=torch.float32)
            ref64 = RefTarget(mdir, dtype=torch.float64)
            tgt = hf_target(mdir, tmp) if args.backend == "hf" else ref32
            fx = target_fixture(name, tgt, ref32 if args.backend == "hf" else None, ref64, sentences, stats)
            path = os.path.join(args.out, name + ".ref.safetensors")
            st.save(path, fx, {"model": name, "n_prompts": len(LENGTHS) + 1, "max_new": MAX_NEW,
                               "backend": args.backend})
            written.append(path)
        log("== tiny-draft")
        mdir = os.path.join(args.models, "tiny-qwen3")
        tgt = hf_target(mdir, tmp) if args.backend == "hf" else RefTarget(mdir)
        drf = D.Draft(os.path.join(args.models, "tiny-draft"), dtype=torch.float32)
        tgt64 = RefTarget(mdir, dtype=torch.float64)
        drf64 = D.Draft(os.path.join(args.models, "tiny-draft"), dtype=torch.float64)
        fx = draft_fixture(tgt, drf, tgt64, drf64, sentences, stats)
        path = os.path.join(args.out, "tiny-draft.ref.safetensors")
        st.save(path, fx, {"model": "tiny-draft", "target": "tiny-qwen3", "n_prompts": len(LENGTHS) + 1,
                           "max_new": MAX_NEW, "block_size": BLOCK, "backend": args.backend})
        written.append(path)
        verify_files([p for p in written if p.startswith(args.out)])
    finally:
        shutil.rmtree(tmp)
    log("== stats (max over prompts)")
    for k in sorted(stats.d):
        log("  %-55s %.3e" % (k, stats.d[k]))
    for p in written:
        if p.startswith(args.out):
            log("  %-50s %8d bytes" % (p, os.path.getsize(p)))


if __name__ == "__main__":
    main()
