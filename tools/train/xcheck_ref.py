#!/usr/bin/env python3
"""Re-run the demo evaluation with tools/reference (dflash_ref.py + ref_model.py)
and compare with pipeline.py's own numbers.

    xcheck_ref.py TARGET_DIR DRAFT_DIR BENCH_DIR EVAL_JSON [OUT_JSON]

TARGET_DIR may be the MLX-quantized target (ref_model dequantizes it).
Prints tau per domain from the reference and the share of prompts whose tokens
and per-round acceptances equal pipeline.py's; writes OUT_JSON (default
EVAL_JSON with .ref.json) with the reference's tokens and acceptances."""
import json
import os
import sys
import time

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "reference"))
import dflash_ref as D  # noqa: E402
import ref_model as R  # noqa: E402


def main():
    tdir, ddir, bench, evf = sys.argv[1:5]
    out_f = sys.argv[5] if len(sys.argv) > 5 else evf[:-5] + ".ref.json"
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    ours = json.load(open(evf))
    tgt = R.RefTarget(tdir, device=dev, dtype=torch.float32)
    drf = D.Draft(ddir, device=dev, dtype=torch.float32)
    stop = (151645, 151643)
    res, by = [], {}
    t0 = time.time()
    for p in ours["per_prompt"]:
        ids = p["prompt_ids"]
        r = D.dflash_generate(tgt, drf, ids, ours["max_new"], block_size=16, stop_ids=stop)
        tau = sum(r["accept"]) / max(1, len(r["accept"]))
        same_tok = r["tokens"] == p["dflash"]
        same_acc = r["accept"] == p["rounds"]
        d = by.setdefault(p["domain"], {"n": 0, "tau": 0.0, "same_tokens": 0, "same_accept": 0})
        d["n"] += 1
        d["tau"] += tau
        d["same_tokens"] += int(same_tok)
        d["same_accept"] += int(same_acc)
        res.append({"domain": p["domain"], "tokens": r["tokens"], "accept": r["accept"], "tau": tau})
    for d in by.values():
        d["tau"] /= max(1, d["n"])
    json.dump({"domains": by, "per_prompt": res, "seconds": time.time() - t0}, open(out_f, "w"), indent=1)
    print(json.dumps(by, indent=1))


if __name__ == "__main__":
    main()
