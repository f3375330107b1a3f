#!/usr/bin/env python3
"""CPU checks of the training code (torch >= 1.13): python3 tools/train/test_train.py"""
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen3 as Q  # noqa: E402
import pipeline as P  # noqa: E402

torch.manual_seed(0)


def tiny_target(vocab=151936):
    c = Q.target_config(64, 4, 2, 1, 128, head_dim=32)
    c["vocab_size"] = vocab
    m = Q.Qwen3(c)
    with torch.no_grad():  # bigger weights so that argmax is not flat
        for p in m.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.3)
    return m.eval()


def test_pack():
    q = torch.randint(0, 16, (3, 64))
    w = Q.pack(q, 4)
    assert w.shape == (3, 8)
    for r in range(3):
        for j in range(64):
            word = int(w[r, j // 8]) & 0xFFFFFFFF
            assert (word >> ((j * 4) % 32)) & 15 == int(q[r, j])
    assert torch.equal(Q.unpack(w, 4, 64), q)
    q8 = torch.randint(0, 256, (2, 32))
    assert torch.equal(Q.unpack(Q.pack(q8, 8), 8, 32), q8)
    print("pack ok")


def test_export_roundtrip():
    m = tiny_target()
    with tempfile.TemporaryDirectory() as d:
        Q.export_target(m, d, 4, 32)
        t = Q.load_st(os.path.join(d, "model.safetensors"))
        assert "lm_head.weight" not in t
        assert t["model.embed_tokens.weight"].shape == (151936, 64 * 4 // 32)
        assert t["model.embed_tokens.scales"].dtype == torch.bfloat16
        assert t["model.layers.0.self_attn.q_norm.weight"].dtype == torch.bfloat16
        m2 = Q.load_target(d)
        Q.QState.bits, Q.QState.group = 4, 32
        ids = torch.randint(0, 1000, (2, 9))
        with torch.no_grad():
            h1, _ = m(ids)
            l1 = m.logits(h1)
            Q.QState.bits = 0
            # norms are stored in bf16: round them like the file does
            for n, p in m.named_parameters():
                if p.dim() == 1:
                    p.copy_(p.to(torch.bfloat16).float())
            Q.QState.bits = 4
            h1, _ = m(ids)
            l1 = m.logits(h1)
            Q.QState.bits = 0
            h2, _ = m2(ids)
            l2 = m2.logits(h2)
        assert (l1 - l2).abs().max() < 1e-4, (l1 - l2).abs().max()
    print("export roundtrip ok")


def test_generate_matches_greedy():
    m = tiny_target()
    prompts = [[5, 17, 300, 2], [9, 8], [100, 200, 300, 400, 500, 7]]
    gens = P.generate(m, prompts, 12, [0.0, 0.0, 0.0], "cpu", torch.float32)
    for p, g in zip(prompts, gens):
        r = P.greedy_ref(m, p, 12)
        assert g == r, (g, r)
    print("kv-cache batched generate == greedy ok")


def test_block_mask():
    anc = torch.tensor([[2, 5]])
    keep = torch.tensor([[True, False]])
    m = P.block_mask(anc, keep, 8, 3)[0, 0]  # [6, 8+6]
    assert m.shape == (6, 14)
    assert m[0, :8].tolist() == [1, 1, 0, 0, 0, 0, 0, 0]  # strict: p < 2
    assert m[0, 8:].tolist() == [1, 1, 1, 0, 0, 0]
    assert m[3, :8].sum() == 0 and m[3, 8:].tolist() == [0, 0, 0, 1, 1, 1]
    print("block mask ok")


def test_dflash_lossless():
    m = tiny_target()
    dc = Q.draft_config(m.c, 2)
    assert dc["dflash_config"]["target_layer_ids"] == [1, 1]  # 4 target layers: start 1, end 1
    d = Q.Draft(dc).eval()
    p = [5, 17, 300, 2, 9]
    g = P.greedy_ref(m, p, 20)
    out, rounds = P.dflash_ref(m, d, p, 20)
    assert out == g, (out, g)
    # an oracle draft (returns the target's own hidden states along the greedy
    # continuation) must have every block accepted: tau 16 per full round
    full = p + P.greedy_ref(m, p, 60)

    class Oracle:
        c = dc

        def __call__(self, feats, ctx_pos, x, blk_pos):
            s = int(blk_pos[0, 0])
            h, _ = m(torch.tensor([full[:s + 15]]))
            return h[:, s - 1:s + 15]
    out, rounds = P.dflash_ref(m, Oracle(), p, 40)
    assert out == full[len(p):len(p) + 40], (out, full)
    assert rounds[:2] == [16, 16], rounds
    print("dflash lossless ok, oracle rounds", rounds)


def test_draft_rule():
    assert Q.draft_layer_ids(36, 5) == [1, 9, 17, 25, 33]
    assert Q.draft_layer_ids(28, 5) == [1, 7, 13, 19, 25]
    assert Q.draft_layer_ids(24, 5) == [1, 6, 11, 16, 21]
    assert Q.draft_layer_ids(12, 3) == [1, 5, 9]
    print("layer id rule ok")


def test_draft_context_strict():
    """Training-mask draft output for block n equals inference with context 0..a_n-1."""
    m = tiny_target()
    dc = Q.draft_config(m.c, 2)
    d = Q.Draft(dc).eval()
    x = torch.randint(0, 1000, (1, 12))
    taps = dc["dflash_config"]["target_layer_ids"]
    with torch.no_grad():
        _, fs = m(x, taps=set(taps))
        f = torch.cat([fs[t] for t in taps], -1)
        E = m.model.embed_tokens.weight
        anc = torch.tensor([[3, 7]])
        keep = torch.tensor([[True, True]])
        B = 4
        bpos = anc[:, :, None] + torch.arange(B)
        bids = torch.full_like(bpos, Q.MASK_ID)
        bids[:, :, 0] = x.gather(1, anc)
        mask = P.block_mask(anc, keep, 12, B)
        h = d(f, torch.arange(12)[None], F.embedding(bids.view(1, -1), E), bpos.view(1, -1), mask)
        for n, a in enumerate([3, 7]):
            hi = d(f[:, :a], torch.arange(a)[None], F.embedding(bids[:, n], E), bpos[:, n])
            assert (hi[0] - h[0, n * B:(n + 1) * B]).abs().max() < 1e-4
    print("draft training mask == inference ok")


if __name__ == "__main__":
    test_pack()
    test_draft_rule()
    test_block_mask()
    test_export_roundtrip()
    test_generate_matches_greedy()
    test_dflash_lossless()
    test_draft_context_strict()
    print("all ok")
