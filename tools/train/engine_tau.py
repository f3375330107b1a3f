#!/usr/bin/env python3
"""Compare the C engine's DFlash run with the reference evaluation.

    engine_tau.py [EVAL_JSON] [N_PER_DOMAIN]

Runs ./dflash generate --draft on each prompt of EVAL_JSON (default
docs/demo-models/eval.json, written by pipeline.py) with every round drafting
the full block (--draft-max 15), and prints per domain the engine's tau, the
reference's tau and how many prompts gave the same text and the same tau."""
import json
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", ".."))
sys.path.insert(0, here)
from tok import Tok  # noqa: E402


def main():
    ev = json.load(open(sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "docs/demo-models/eval.json")))
    n_per = int(sys.argv[2]) if len(sys.argv) > 2 else 10 ** 9
    tok = Tok(os.path.join(root, "models/qwen3-tokenizer/tokenizer.json"))
    by, seen = {}, {}
    for p in ev["per_prompt"]:
        dom = p["domain"]
        if seen.get(dom, 0) >= n_per:
            continue
        seen[dom] = seen.get(dom, 0) + 1
        r = subprocess.run([os.path.join(root, "dflash"), "generate", "-m", os.path.join(root, "models/demo/target"),
                            "--draft", os.path.join(root, "models/demo/draft"), "--draft-max", "15", "--chat"] + os.environ.get("ENGINE_ARGS", "").split() + [
                            "-p", p["prompt"], "-n", str(ev["max_new"]), "--stats-json"],
                           capture_output=True, text=True, timeout=600)
        st = json.loads(r.stderr.strip().splitlines()[-1])
        ref_text = tok.decode([t for t in p["greedy"] if t not in (151645, 151643)])
        d = by.setdefault(dom, {"n": 0, "tau_engine": 0.0, "tau_ref": 0.0, "same_text": 0, "same_tau": 0})
        d["n"] += 1
        d["tau_engine"] += st["tau"]
        d["tau_ref"] += p["tau"]
        d["same_text"] += int(r.stdout.rstrip("\n") == ref_text.rstrip("\n"))
        d["same_tau"] += int(abs(st["tau"] - p["tau"]) < 1e-3)
    for d in by.values():
        d["tau_engine"] = round(d["tau_engine"] / d["n"], 3)
        d["tau_ref"] = round(d["tau_ref"] / d["n"], 3)
    print(json.dumps(by, indent=1))


if __name__ == "__main__":
    main()
