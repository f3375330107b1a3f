#!/usr/bin/env python3
"""Demo-model pipeline: tokenize -> train target -> quantize/export -> generate
draft data with the quantized target -> train DFlash draft -> measure tau -> pack.

    python3 tools/train/pipeline.py --work DIR [--bundle F] [--stages a,b,..] [--tiny]

Every stage writes its results under --work and is skipped when they exist, so a
crashed or interrupted run resumes where it stopped; removing a stage's output
redoes it. Training runs for a wall-clock budget (--target-seconds,
--draft-seconds): the learning-rate schedule follows the share of the budget
used, so a run fills its budget whatever the machine's speed and fits the GPU
machine's 10-minute commands. --tiny runs the same code on CPU at toy sizes.
"""
import argparse
import csv
import glob
import json
import math
import os
import random
import shutil
import site
import subprocess
import sys
import tarfile
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3 as Q  # noqa: E402
from tok import Tok, chat_text, prompt_text, EOT, IM_END  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SEP = "\n\x1e\n"
STOP = (IM_END, EOT)
T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def args_():
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--bundle", default=os.path.join(ROOT, ".dev/train_bundle/corpus.tar.xz"))
    p.add_argument("--tokenizer", default=os.path.join(ROOT, "models/qwen3-tokenizer/tokenizer.json"))
    p.add_argument("--bench", default=os.path.join(ROOT, "bench/prompts"))
    p.add_argument("--stages", default="tokenize,target,export,gendata,draft,eval")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--target-seconds", type=float, default=140)
    p.add_argument("--draft-seconds", type=float, default=120)
    p.add_argument("--site-bytes", type=int, default=60_000_000)
    p.add_argument("--out", default=os.environ.get("OUT", ""))
    p.add_argument("--xcheck", action="store_true", help="also run tools/reference on the eval prompts")
    p.add_argument("--gen-prompts", type=int, default=16384)
    p.add_argument("--target-dir", default="", help="skip target training; use this target directory")
    p.add_argument("--init-draft", default="", help="start the draft from this draft directory")
    a = p.parse_args()
    a.dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 evaluation must be real fp32
    torch.backends.cudnn.allow_tf32 = False
    if a.tiny:
        a.hp = dict(hidden=64, layers=4, heads=2, kv=1, inter=128, head_dim=32, seq=128, batch=4,
                    lr=3e-3, draft_layers=2, gen_prompts=24, gen_batch=8, gen_new=24, dseq=96,
                    dbatch=4, anchors=4, dlr=2e-3, max_steps=30, max_dsteps=20, eval_new=16, eval_n=2,
                    group=32)
    else:
        a.hp = dict(hidden=256, layers=12, heads=4, kv=2, inter=1024, head_dim=64, seq=1024, batch=16,
                    lr=2e-3, draft_layers=3, gen_prompts=24576, gen_batch=2048, gen_new=256, dseq=512,
                    dbatch=32, anchors=48, dlr=1.5e-3, max_steps=100000, max_dsteps=100000, eval_new=128,
                    eval_n=1000, group=64)
    a.hp["bits"] = 4
    if not a.tiny:
        a.hp["gen_prompts"] = a.gen_prompts
    return a


# =========================================================================== tokenize

MIX = {  # share of training sequences per source (before the repeat cap)
    "chat": 0.42, "py_site": 0.14, "py_stdlib": 0.05, "py_docs": 0.06, "c_kernel": 0.10,
    "c_glibc": 0.06, "prose_austen": 0.04, "prose_moby": 0.02, "prose_sotu": 0.06, "jargon": 0.02,
}


def pieces(doc, n=200_000):
    """Split a long document at line ends into pieces of about n characters."""
    out, i = [], 0
    while i < len(doc):
        j = doc.find("\n", i + n)
        j = len(doc) if j < 0 else j + 1
        out.append(doc[i:j])
        i = j
    return out


def encode_docs(tok, docs):
    ids = []
    batch = []
    for d in docs:
        batch += pieces(d)
        batch.append(None)  # end of document marker
    texts = [b for b in batch if b is not None]
    enc = iter(tok.encode_batch(texts))
    for b in batch:
        if b is None:
            ids.append(EOT)
        else:
            ids.extend(next(enc))
    return np.asarray(ids, dtype=np.uint32)


def stage_tokenize(a):
    tdir = os.path.join(a.work, "tok")
    if os.path.exists(os.path.join(tdir, "DONE")):
        return
    os.makedirs(tdir, exist_ok=True)
    cdir = os.path.join(a.work, "corpus")
    if not os.path.exists(os.path.join(cdir, "chat.jsonl")):
        os.makedirs(cdir, exist_ok=True)
        with tarfile.open(a.bundle) as tf:
            tf.extractall(cdir)
    tok = Tok(a.tokenizer)
    stats = {}
    for f in sorted(glob.glob(os.path.join(cdir, "text", "*.txt"))):
        name = os.path.basename(f)[:-4]
        docs = open(f, encoding="utf-8").read().split(SEP)
        if a.tiny:
            docs = [d[:3000] for d in docs[:3]]
        arr = encode_docs(tok, docs)
        np.save(os.path.join(tdir, name + ".npy"), arr)
        stats[name] = int(arr.size)
        log("tokenized", name, arr.size)
    # Python sources of this machine's own site-packages (no transfer needed)
    files = []
    for sp in site.getsitepackages():
        files += sorted(glob.glob(os.path.join(sp, "**", "*.py"), recursive=True))
    docs, total = [], 0
    cap = 200_000 if a.tiny else a.site_bytes
    for p in files:
        try:
            s = open(p, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        if len(s) > 300_000 or len(s) < 200:
            continue
        docs.append(s)
        total += len(s)
        if total > cap:
            break
    if a.tiny:
        docs = docs[:3]
    arr = encode_docs(tok, docs)
    np.save(os.path.join(tdir, "py_site.npy"), arr)
    stats["py_site"] = int(arr.size)
    log("tokenized py_site", arr.size, "from", len(docs), "files")
    chat = [json.loads(l) for l in open(os.path.join(cdir, "chat.jsonl"), encoding="utf-8")]
    if a.tiny:
        chat = chat[:300]
    texts = [chat_text(c["q"], c["a"]) for c in chat]
    enc = tok.encode_batch(texts)
    flat = []
    for e in enc:
        flat.extend(e)
        flat.append(EOT)
    np.save(os.path.join(tdir, "chat.npy"), np.asarray(flat, dtype=np.uint32))
    stats["chat"] = len(flat)
    # prompts for the draft data: training questions, drawn evenly over kinds
    rng = random.Random(7)
    by_kind = {}
    for c in chat:
        by_kind.setdefault(c["kind"], []).append(c["q"])
    kinds = sorted(by_kind)
    want = a.hp["gen_prompts"]
    qs = []
    for k in kinds:
        rng.shuffle(by_kind[k])
    i = 0
    while len(qs) < want and any(by_kind.values()):
        k = kinds[i % len(kinds)]
        if by_kind[k]:
            qs.append(by_kind[k].pop())
        i += 1
    penc = tok.encode_batch([prompt_text(q) for q in qs])
    penc = [p for p in penc if len(p) <= a.hp["dseq"] // 2]
    torch.save(penc, os.path.join(tdir, "gen_prompts.pt"))
    stats["gen_prompts"] = len(penc)
    json.dump(stats, open(os.path.join(tdir, "stats.json"), "w"), indent=1)
    open(os.path.join(tdir, "DONE"), "w").write("ok\n")
    log("tokenize done", stats)


# =========================================================================== target

class Mixture:
    """Random windows of seq+1 tokens from each source, sources drawn by weight;
    a source's weight is capped so it is seen at most `max_epochs` times."""

    def __init__(self, tdir, seq, planned_tokens, dev, max_epochs=3.0, seed=0):
        self.src, w = [], []
        for name, share in MIX.items():
            f = os.path.join(tdir, name + ".npy")
            if share <= 0 or not os.path.exists(f):
                continue
            arr = np.load(f).astype(np.int64)
            if arr.size < seq + 2:
                arr = np.tile(arr, (seq + 2) // max(arr.size, 1) + 1)
            share = min(share, max_epochs * arr.size / planned_tokens)
            self.src.append((name, torch.from_numpy(arr).to(dev)))
            w.append(share)
        self.w = np.asarray(w) / sum(w)
        self.seq, self.dev = seq, dev
        self.rng = np.random.default_rng(seed)
        self.ar = torch.arange(seq + 1, device=dev)

    def shares(self):
        return {n: round(float(x), 4) for (n, _), x in zip(self.src, self.w)}

    def batch(self, b):
        which = self.rng.choice(len(self.src), size=b, p=self.w)
        rows = []
        for i in which:
            t = self.src[i][1]
            o = int(self.rng.integers(0, t.numel() - self.seq - 1))
            rows.append(t[o:o + self.seq + 1])
        x = torch.stack(rows)
        return x[:, :-1], x[:, 1:]


def lr_at(step, p, peak, warm, floor=0.1):
    """Linear warm-up over `warm` steps, then cosine from peak to floor*peak over
    the progress p in [0, 1] (the share of the time budget used)."""
    if step < warm:
        return peak * (step + 1) / warm
    p = min(1.0, max(0.0, p))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p)))


def progress(a, step, t_start, budget, max_steps):
    """Share of the training budget used: wall-clock on the GPU (the number of
    steps then follows from the machine's speed), steps in --tiny runs."""
    return step / max_steps if a.tiny else (time.time() - t_start) / budget


def make_opt(params, lr, wd):
    decay = [p for p in params if p.dim() >= 2]
    no = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": wd}, {"params": no, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), fused=torch.cuda.is_available())
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))


def stage_target(a):
    if a.target_dir:  # an existing target is used (stage export copies it)
        return
    ck = os.path.join(a.work, "ckpt", "target.pt")
    if os.path.exists(ck) and torch.load(ck, map_location="cpu").get("done"):
        return
    os.makedirs(os.path.dirname(ck), exist_ok=True)
    hp, dev = a.hp, a.dev
    torch.manual_seed(0)
    c = Q.target_config(hp["hidden"], hp["layers"], hp["heads"], hp["kv"], hp["inter"], hp["head_dim"])
    model = Q.Qwen3(c).to(dev)
    opt = make_opt(list(model.parameters()), hp["lr"], 0.1)
    state = {"step": 0, "elapsed": 0.0}
    if os.path.exists(ck):
        s = torch.load(ck, map_location=dev)
        model.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        state = s["state"]
        log("target: resume at step", state["step"])
    nparam = sum(p.numel() for p in model.parameters())
    log("target params", nparam, "config", json.dumps({k: c[k] for k in ("hidden_size", "num_hidden_layers",
                                                                          "intermediate_size")}))
    seq, bsz = hp["seq"], hp["batch"]
    budget = a.target_seconds
    planned = int(budget / 0.05) * bsz * seq if not a.tiny else hp["max_steps"] * bsz * seq
    mix = Mixture(os.path.join(a.work, "tok"), seq, planned, dev, seed=state["step"])
    log("mixture shares", mix.shares())
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    csv_path = os.path.join(a.work, "logs", "target_loss.csv")
    os.makedirs(os.path.dirname(csv_path), exist_ok=True)
    new_csv = not os.path.exists(csv_path) or state["step"] == 0
    fcsv = open(csv_path, "w" if new_csv else "a")
    wcsv = csv.writer(fcsv)
    if new_csv:
        wcsv.writerow(["step", "tokens", "loss", "lr", "seconds", "qat"])
    warm = 150 if not a.tiny else 3
    t_start = time.time() - state["elapsed"]
    model.train()
    while True:
        step = state["step"]
        prog = progress(a, step, t_start, budget, hp["max_steps"])
        if prog >= 1.0:
            break
        qat = prog >= 0.8  # the last 20% train through the 4-bit fake quantizer
        Q.QState.bits, Q.QState.group = (hp["bits"] if qat else 0), hp["group"]
        lr = lr_at(step, prog, hp["lr"], warm)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = mix.batch(bsz)
        h, _ = model(x, dtype=dt)
        logits = model.logits(h)
        loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        state["step"] = step + 1
        if step % 25 == 0 or a.tiny:
            el = time.time() - t_start
            wcsv.writerow([step, step * bsz * seq, f"{loss.item():.4f}", f"{lr:.6f}", f"{el:.1f}", int(qat)])
            fcsv.flush()
            if step % 250 == 0:
                log(f"target step {step} loss {loss.item():.3f} lr {lr:.2e} {el:.0f}s qat={qat}")
        if step and step % 1500 == 0:
            state["elapsed"] = time.time() - t_start
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state}, ck)
    Q.QState.bits = 0
    state["elapsed"] = time.time() - t_start
    fcsv.close()
    torch.save({"model": model.state_dict(), "state": state, "config": c, "done": True,
                "params": nparam}, ck)
    log(f"target done: {state['step']} steps, {state['elapsed']:.0f}s")


# =========================================================================== export

def stage_export(a):
    tdir = os.path.join(a.work, "models", "target")
    if os.path.exists(os.path.join(tdir, "model.safetensors")):
        return
    if a.target_dir:  # use an existing (shipped) target instead of training one
        os.makedirs(tdir, exist_ok=True)
        for f in ("config.json", "generation_config.json", "model.safetensors"):
            shutil.copy(os.path.join(a.target_dir, f), tdir)
        log("export: using target", a.target_dir)
        return
    s = torch.load(os.path.join(a.work, "ckpt", "target.pt"), map_location="cpu")
    model = Q.Qwen3(s["config"])
    model.load_state_dict(s["model"])
    Q.export_target(model, tdir, a.hp["bits"], a.hp["group"])
    # check: the written file dequantizes to the fake-quant weights the last steps trained
    tq = Q.load_target(tdir)
    Q.QState.bits, Q.QState.group = a.hp["bits"], a.hp["group"]
    ref = Q.fake_quant(model.model.embed_tokens.weight.detach(), a.hp["bits"], a.hp["group"])
    Q.QState.bits = 0
    err = (tq.model.embed_tokens.weight - ref).abs().max().item()
    log("export: quantized embedding vs fake-quant max abs diff", err)
    assert err < 1e-6, err
    # an fp32 HF-layout copy of the dequantized model (for transformers / tools/reference)
    hf = os.path.join(a.work, "models", "target_fp32")
    os.makedirs(hf, exist_ok=True)
    Q.save_st(os.path.join(hf, "model.safetensors"), {k: v.float() for k, v in tq.state_dict().items()},
              {"format": "pt"})
    cfg = dict(tq.c)
    cfg["torch_dtype"] = cfg["dtype"] = "float32"
    json.dump(cfg, open(os.path.join(hf, "config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(os.path.dirname(a.tokenizer), f), hf)
        shutil.copy(os.path.join(os.path.dirname(a.tokenizer), f), tdir)
    shutil.copy(os.path.join(tdir, "generation_config.json"), hf)
    log("export done", os.path.getsize(os.path.join(tdir, "model.safetensors")), "bytes")
    # parity with HF transformers (informative; never fatal)
    try:
        from transformers import AutoModelForCausalLM
        hm = AutoModelForCausalLM.from_pretrained(hf, torch_dtype=torch.float32).to(a.dev).eval()
        tq = tq.to(a.dev).eval()
        ids = torch.tensor([[151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271,
                             785, 3974, 13876, 38835]], device=a.dev)
        with torch.no_grad():
            ours = tq.logits(tq(ids)[0])
            theirs = hm(ids).logits
        d = (ours - theirs).abs().max().item()
        log(f"HF transformers parity: max |logit diff| = {d:.2e}; argmax equal:",
            bool((ours.argmax(-1) == theirs.argmax(-1)).all()))
        json.dump({"hf_max_abs_logit_diff": d}, open(os.path.join(a.work, "logs", "hf_parity.json"), "w"))
    except Exception as e:  # noqa: BLE001
        log("HF parity check skipped:", repr(e)[:300])


# =========================================================================== draft data

def left_pad(seqs, pad=EOT):
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad, dtype=torch.long)
    padn = torch.zeros(len(seqs), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, n - len(s):] = torch.tensor(s)
        padn[i] = n - len(s)
    return ids, padn


@torch.no_grad()
def generate(model, prompts, new, temps, dev, dt, topk=20):
    """Batched sampling with a KV cache; prompts left-padded. temps[i]==0 -> greedy.
    Returns list of generated token lists (up to and including a stop token)."""
    c = model.c
    ids, padn = left_pad(prompts)
    ids, padn = ids.to(dev), padn.to(dev)
    B, T = ids.shape
    tmax = T + new
    caches = [[torch.zeros(B, c["num_key_value_heads"], tmax, c["head_dim"], device=dev, dtype=dt),
               torch.zeros(B, c["num_key_value_heads"], tmax, c["head_dim"], device=dev, dtype=dt), 0]
              for _ in range(c["num_hidden_layers"])]
    ar = torch.arange(tmax, device=dev)
    valid = ar[None] >= padn[:, None]  # [B,tmax] key j is a real token
    pos = (ar[None, :T] - padn[:, None]).clamp(min=0)
    causal = ar[:T, None] >= ar[None, :T]
    mask = (causal[None] & valid[:, None, :T]) | torch.eye(T, dtype=torch.bool, device=dev)[None]
    h, _ = model(ids, pos=pos, caches=[tuple(x) for x in caches], mask=mask[:, None], dtype=dt)
    for x in caches:
        x[2] = T
    temps = torch.tensor(temps, device=dev, dtype=torch.float32)
    out = torch.full((B, new), EOT, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    last = h[:, -1]
    cur_pos = pos[:, -1]
    for t in range(new):
        lg = model.logits(last).float()
        greedy = lg.argmax(-1)
        v, ix = lg.topk(topk, -1)
        p = torch.softmax(v / temps.clamp(min=1e-3)[:, None], -1)
        samp = ix.gather(1, torch.multinomial(p, 1)).squeeze(1)
        nxt = torch.where(temps > 0, samp, greedy)
        nxt = torch.where(done, torch.full_like(nxt, EOT), nxt)
        out[:, t] = nxt
        done |= (nxt == IM_END) | (nxt == EOT)
        if bool(done.all()):
            break
        cur_pos = cur_pos + 1
        n = T + t
        m = valid[:, None, None, :n + 1]
        h, _ = model(nxt[:, None], pos=cur_pos[:, None], caches=[(x[0], x[1], n) for x in caches], mask=m,
                     dtype=dt)
        last = h[:, -1]
    res = []
    for row in out.tolist():
        r = []
        for tkn in row:
            r.append(tkn)
            if tkn in STOP:
                break
        res.append(r)
    return res


def stage_gendata(a):
    f = os.path.join(a.work, "draftdata.pt")
    if os.path.exists(f):
        return
    hp, dev = a.hp, a.dev
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    tq = Q.load_target(os.path.join(a.work, "models", "target"), dtype=dt).to(dev).eval()
    prompts = torch.load(os.path.join(a.work, "tok", "gen_prompts.pt"))
    rng = random.Random(3)
    seqs, lmask = [], []
    t0 = time.time()
    nb = hp["gen_batch"]
    lens = []
    for i in range(0, len(prompts), nb):
        ps = prompts[i:i + nb]
        temps = [0.0 if rng.random() < 0.5 else 0.7 for _ in ps]
        gens = generate(tq, ps, hp["gen_new"], temps, dev, dt)
        for p, g in zip(ps, gens):
            s = (p + g)[:hp["dseq"]]
            seqs.append(s)
            lmask.append([0] * len(p) + [1] * (len(s) - len(p)))
            lens.append(len(g))
        log(f"gendata {i + len(ps)}/{len(prompts)} mean new tokens {np.mean(lens):.0f} {time.time() - t0:.0f}s")
    torch.save({"seqs": seqs, "lmask": lmask}, f)
    # a few samples for the card / for eyeballing
    tok = Tok(a.tokenizer)
    with open(os.path.join(a.work, "logs", "gen_samples.txt"), "w") as fo:
        for s, m in list(zip(seqs, lmask))[:24]:
            fo.write(tok.decode(s) + "\n" + "=" * 60 + "\n")
    log("gendata done", len(seqs), "sequences")


# =========================================================================== draft

def block_mask(anchors, keep, S, B):
    """Training mask [Bt,1,N*B,S+N*B]: block n sees context p < anchor_n (strict) and
    all B rows of its own block; nothing else. Invalid blocks see only themselves."""
    Bt, N = anchors.shape
    dev = anchors.device
    qb = torch.arange(N * B, device=dev) // B  # block of each query row
    ctx = torch.arange(S, device=dev)[None, None, :] < anchors[:, :, None]  # [Bt,N,S]
    ctx = ctx & keep[:, :, None]
    ctx = ctx[:, qb]  # [Bt,N*B,S]
    own = (qb[:, None] == qb[None, :])[None].expand(Bt, -1, -1)
    return torch.cat([ctx, own], -1)[:, None]


def stage_draft(a):
    ck = os.path.join(a.work, "ckpt", "draft.pt")
    if os.path.exists(ck) and torch.load(ck, map_location="cpu").get("done"):
        return
    os.makedirs(os.path.dirname(ck), exist_ok=True)
    hp, dev = a.hp, a.dev
    dt = torch.bfloat16 if dev == "cuda" else torch.float32
    tq = Q.load_target(os.path.join(a.work, "models", "target"), dtype=dt).to(dev).eval()
    for p in tq.parameters():
        p.requires_grad_(False)
    dc = Q.draft_config(tq.c, hp["draft_layers"])
    taps = dc["dflash_config"]["target_layer_ids"]
    torch.manual_seed(1)
    draft = Q.Draft(dc).to(dev)
    if a.init_draft:  # continue training a shipped draft
        draft.load_state_dict({k: v.float() for k, v in
                               Q.load_st(os.path.join(a.init_draft, "model.safetensors")).items()})
        log("draft initialised from", a.init_draft)
    nparam = sum(p.numel() for p in draft.parameters())
    log("draft params", nparam, "taps", taps)
    data = torch.load(os.path.join(a.work, "draftdata.pt"))
    seqs, lmask = data["seqs"], data["lmask"]
    S = hp["dseq"]
    X = torch.full((len(seqs), S), EOT, dtype=torch.long)
    M = torch.zeros(len(seqs), S, dtype=torch.bool)
    L = torch.zeros(len(seqs), dtype=torch.long)
    for i, (s, m) in enumerate(zip(seqs, lmask)):
        X[i, :len(s)] = torch.tensor(s)
        M[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
        L[i] = len(s)
    X, M, L = X.to(dev), M.to(dev), L.to(dev)
    E = tq.model.embed_tokens.weight  # frozen, dequantized; also the lm_head
    opt = make_opt(list(draft.parameters()), hp["dlr"], 0.0)
    Bsz, N, B = hp["dbatch"], hp["anchors"], dc["block_size"]
    gamma = 7.0
    wk = torch.exp(-(torch.arange(B, device=dev).float() - 1) / gamma)
    wk[0] = 0
    gen = torch.Generator(device=dev)
    gen.manual_seed(5)
    csv_path = os.path.join(a.work, "logs", "draft_loss.csv")
    fcsv = open(csv_path, "w")
    wcsv = csv.writer(fcsv)
    wcsv.writerow(["step", "loss", "acc_k1", "acc_all", "lr", "seconds"])
    step, t_start = 0, time.time()
    last_save = t_start
    warm = 100 if not a.tiny else 2
    budget = a.draft_seconds
    draft.train()
    while True:
        prog = progress(a, step, t_start, budget, hp["max_dsteps"])
        if prog >= 1.0:
            break
        lr = lr_at(step, prog, hp["dlr"], warm, floor=0.05)
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, X.shape[0], (Bsz,), device=dev, generator=gen)
        s_len = int(L[idx].max())
        x, m = X[idx, :s_len], M[idx, :s_len]
        with torch.no_grad():
            _, feats = tq(x, taps=set(taps), dtype=dt)
            f = torch.cat([feats[t] for t in taps], -1)  # [Bt,S,K*H]
        # anchors: response positions p with a response token at p+1 too
        cand = m.clone()
        cand[:, :-1] &= m[:, 1:]
        cand[:, -1] = False
        score = torch.rand(cand.shape, device=dev, generator=gen).masked_fill(~cand, -1.0)
        top, anc = score.topk(min(N, s_len), -1)
        keep = top >= 0
        anc = anc.masked_fill(~keep, 0)
        anc, order = anc.sort(-1)
        keep = keep.gather(1, order)
        Nn = anc.shape[1]
        offs = torch.arange(B, device=dev)
        bpos = anc[:, :, None] + offs  # [Bt,N,B]
        bids = torch.full_like(bpos, Q.MASK_ID)
        bids[:, :, 0] = x.gather(1, anc)
        lpos = bpos.clamp(max=s_len - 1)
        labels = x.gather(1, lpos.view(Bsz, -1)).view_as(bpos)
        lvalid = (bpos < s_len) & m.gather(1, lpos.view(Bsz, -1)).view_as(bpos) & keep[:, :, None]
        lvalid[:, :, 0] = False
        mask = block_mask(anc, keep, s_len, B)
        ctx_pos = torch.arange(s_len, device=dev)[None].expand(Bsz, -1)
        xin = F.embedding(bids.view(Bsz, -1), E).to(dt)
        hout = draft(f, ctx_pos, xin, bpos.view(Bsz, -1), mask)  # [Bt,N*B,H]
        sel = lvalid.view(-1)
        hv = hout.reshape(-1, hout.shape[-1])[sel]
        lg = F.linear(hv, E.to(hv.dtype)).float()
        tgt = labels.view(-1)[sel]
        w = wk.expand(Bsz, Nn, B).reshape(-1)[sel]
        ce = F.cross_entropy(lg, tgt, reduction="none")
        loss = (ce * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(draft.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or a.tiny:
            with torch.no_grad():
                hit = (lg.argmax(-1) == tgt)
                k = offs.expand(Bsz, Nn, B).reshape(-1)[sel]
                acc1 = hit[k == 1].float().mean().item()
                acca = hit.float().mean().item()
            el = time.time() - t_start
            wcsv.writerow([step, f"{loss.item():.4f}", f"{acc1:.4f}", f"{acca:.4f}", f"{lr:.6f}", f"{el:.1f}"])
            fcsv.flush()
            if step % 250 == 0:
                log(f"draft step {step} loss {loss.item():.3f} acc1 {acc1:.3f} acc {acca:.3f} {el:.0f}s")
        step += 1
        if time.time() - last_save > 120:  # a usable draft even if the machine is lost mid-run
            Q.export_draft(draft, os.path.join(a.work, "models", "draft_partial"))
            last_save = time.time()
    fcsv.close()
    torch.save({"model": draft.state_dict(), "config": dc, "done": True, "steps": step,
                "seconds": time.time() - t_start, "params": nparam}, ck)
    Q.export_draft(draft, os.path.join(a.work, "models", "draft"))
    log(f"draft done: {step} steps {time.time() - t_start:.0f}s")


# =========================================================================== eval

@torch.no_grad()
def greedy_ref(tq, prompt, new):
    """Plain greedy decoding by full recompute (fp32)."""
    ids = list(prompt)
    dev = tq.model.norm.weight.device
    for _ in range(new):
        h, _ = tq(torch.tensor([ids], device=dev))
        t = int(tq.logits(h[:, -1]).argmax(-1))
        ids.append(t)
        if t in STOP:
            break
    return ids[len(prompt):]


@torch.no_grad()
def dflash_ref(tq, draft, prompt, new, block=16):
    """Greedy DFlash loop of spec 3.2 by full recompute (fp32). Returns (tokens, per-round a+1)."""
    dev = tq.model.norm.weight.device
    taps = draft.c["dflash_config"]["target_layer_ids"]
    E = tq.model.embed_tokens.weight
    n = len(prompt)
    h, fs = tq(torch.tensor([prompt], device=dev), taps=set(taps))
    out = list(prompt) + [int(tq.logits(h[:, -1]).argmax(-1))]
    feats = torch.cat([fs[t] for t in taps], -1)  # positions 0..n-1
    s = n
    rounds = []
    while out[-1] not in STOP and len(out) - n < new:
        blk = torch.tensor([[out[s]] + [Q.MASK_ID] * (block - 1)], device=dev)
        hb = draft(feats[:, :s], torch.arange(s, device=dev)[None], F.embedding(blk, E),
                   torch.arange(s, s + block, device=dev)[None])
        d = tq.logits(hb[0, 1:]).argmax(-1).tolist()
        seq = out[:s + 1] + d
        h, fs = tq(torch.tensor([seq], device=dev), taps=set(taps))
        t = tq.logits(h[0, s:]).argmax(-1).tolist()  # t[i] predicts position s+i+1
        acc = 0
        while acc < block - 1 and d[acc] == t[acc]:
            acc += 1
        out = out[:s + 1] + d[:acc] + [t[acc]]
        feats = torch.cat([fs[tp] for tp in taps], -1)[:, :s + acc + 1]
        s = s + acc + 1
        rounds.append(acc + 1)
        gen = out[n:]
        for i, tk in enumerate(gen):
            if tk in STOP:
                out = out[:n + i + 1]
                break
    return out[n:n + new], rounds


def stage_eval(a):
    f = os.path.join(a.work, "logs", "eval.json")
    if os.path.exists(f):
        return
    dev = a.dev
    tq = Q.load_target(os.path.join(a.work, "models", "target"), dtype=torch.float32).to(dev).eval()
    draft = Q.load_draft(os.path.join(a.work, "models", "draft"), dtype=torch.float32).to(dev).eval()
    tok = Tok(a.tokenizer)
    res = {"per_prompt": [], "domains": {}, "max_new": a.hp["eval_new"], "block_size": 16}
    t0 = time.time()
    for dom in ("chat", "math", "code"):
        rows = [json.loads(l) for l in open(os.path.join(a.bench, dom + ".jsonl"))][:a.hp["eval_n"]]
        taus, same = [], 0
        for r in rows:
            p = tok.encode(prompt_text(r["prompt"]))
            g = greedy_ref(tq, p, a.hp["eval_new"])
            d, rounds = dflash_ref(tq, draft, p, a.hp["eval_new"])
            tau = float(np.mean(rounds)) if rounds else 0.0
            taus.append(tau)
            same += int(g == d)
            res["per_prompt"].append({"domain": dom, "prompt": r["prompt"], "prompt_ids": p,
                                      "greedy": g, "dflash": d, "identical": g == d, "tau": tau,
                                      "rounds": rounds, "text": tok.decode(g)})
        res["domains"][dom] = {"n": len(rows), "tau": float(np.mean(taus)), "identical": same,
                               "tau_min": float(np.min(taus)), "tau_max": float(np.max(taus))}
        log(f"eval {dom}: tau {np.mean(taus):.2f} identical {same}/{len(rows)} ({time.time() - t0:.0f}s)")
        json.dump(res, open(f + ".partial", "w"), indent=1)
    res["seconds"] = time.time() - t0
    json.dump(res, open(f, "w"), indent=1)
    if not a.xcheck:
        return
    # optional cross-check with tools/reference/dflash_ref.py when present (never fatal)
    ref = os.path.join(ROOT, "tools", "reference", "dflash_ref.py")
    if os.path.exists(ref):
        try:
            r = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "xcheck_ref.py"),
                                os.path.join(a.work, "models", "target_fp32"),
                                os.path.join(a.work, "models", "draft"), a.bench, f],
                               capture_output=True, text=True, timeout=240)
            open(os.path.join(a.work, "logs", "xcheck_ref.txt"), "w").write(r.stdout[-20000:] + r.stderr[-8000:])
            log("xcheck_ref rc", r.returncode, r.stdout[-600:], r.stderr[-600:])
        except Exception as e:  # noqa: BLE001
            log("xcheck_ref failed:", repr(e)[:300])


# =========================================================================== pack

def stage_pack(a):
    if not a.out:
        return
    os.makedirs(a.out, exist_ok=True)
    m = os.path.join(a.work, "models")
    tgt = os.path.join(m, "target", "model.safetensors")
    data = open(tgt, "rb").read() if os.path.exists(tgt) else b""
    part = 15 * 1024 * 1024
    for i in range(0, len(data), part):
        open(os.path.join(a.out, f"target.st.part{i // part}"), "wb").write(data[i:i + part])
    for d in ("draft", "draft_partial"):  # the finished draft, else the latest partial export
        if os.path.exists(os.path.join(m, d, "model.safetensors")):
            shutil.copy(os.path.join(m, d, "model.safetensors"), os.path.join(a.out, "draft.safetensors"))
            break
    with tarfile.open(os.path.join(a.out, "meta.tar.xz"), "w:xz") as tf:
        for rel in ("models/target/config.json", "models/target/generation_config.json",
                    "models/draft/config.json", "logs", "tok/stats.json"):
            p = os.path.join(a.work, rel)
            if os.path.exists(p):
                tf.add(p, arcname=rel)
        ck = os.path.join(a.work, "ckpt")
        info = {}
        for n in ("target", "draft"):
            p = os.path.join(ck, n + ".pt")
            if os.path.exists(p):
                s = torch.load(p, map_location="cpu")
                info[n] = {k: v for k, v in s.items() if k in ("state", "steps", "seconds", "params", "done")}
        info["sha_target"] = __import__("hashlib").sha256(data).hexdigest()
        p = os.path.join(a.work, "logs", "train_info.json")
        json.dump(info, open(p, "w"), indent=1, default=str)
        tf.add(p, arcname="logs/train_info.json")
    log("packed into", a.out, os.listdir(a.out))


def main():
    a = args_()
    os.makedirs(os.path.join(a.work, "logs"), exist_ok=True)
    log("device", a.dev, torch.__version__, torch.cuda.get_device_name(0) if a.dev == "cuda" else "")
    stages = {"tokenize": stage_tokenize, "target": stage_target, "export": stage_export,
              "gendata": stage_gendata, "draft": stage_draft, "eval": stage_eval, "pack": stage_pack}
    if a.stages == "pack":
        return stage_pack(a)
    for f in ("DONE", "FAILED"):
        if os.path.exists(os.path.join(a.work, f)):
            os.remove(os.path.join(a.work, f))
    open(os.path.join(a.work, "pid"), "w").write(str(os.getpid()))
    try:
        for s in a.stages.split(","):
            t = time.time()
            stages[s](a)
            log(f"stage {s} finished in {time.time() - t:.1f}s")
    except BaseException:
        import traceback
        traceback.print_exc()
        open(os.path.join(a.work, "FAILED"), "w").write(traceback.format_exc())
        raise
    open(os.path.join(a.work, "DONE"), "w").write("ok\n")


if __name__ == "__main__":
    main()
