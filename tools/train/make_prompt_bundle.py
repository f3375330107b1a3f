#!/usr/bin/env python3
"""Cut the training bundle down to what a draft-only run needs: the chat
questions (no answers, no pre-training text), so that the shipped models,
the tokenizer and the bundle fit the GPU machine's 64 MiB upload together.

    make_prompt_bundle.py [FULL_BUNDLE] [OUT] [N]

FULL_BUNDLE defaults to .dev/train_bundle/corpus.tar.xz (tools/train/make_bundle.sh),
OUT to .dev/prompt_bundle/corpus.tar.xz, N (questions kept) to 44000. Questions
are taken round-robin over the chat kinds, each kind shuffled with a fixed
seed, as pipeline.py's tokenize stage draws its generation prompts; held-out
bench prompts never entered chat.jsonl, so none can enter here."""
import collections
import io
import json
import os
import random
import sys
import tarfile

root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, ".dev/train_bundle/corpus.tar.xz")
out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(root, ".dev/prompt_bundle/corpus.tar.xz")
want = int(sys.argv[3]) if len(sys.argv) > 3 else 44000

with tarfile.open(src) as tf:
    chat = tf.extractfile("./chat.jsonl").read().decode("utf-8")
    manifest = tf.extractfile("./manifest.json").read()
by = collections.defaultdict(list)
for line in chat.splitlines():
    r = json.loads(line)
    by[r["kind"]].append(r["q"])
rng = random.Random(7)
kinds = sorted(by)
for k in kinds:
    rng.shuffle(by[k])
picked, i = [], 0
while len(picked) < want and any(by.values()):
    k = kinds[i % len(kinds)]
    if by[k]:
        picked.append((k, by[k].pop()))
    i += 1
body = "".join(json.dumps({"kind": k, "q": q, "a": ""}, ensure_ascii=False) + "\n" for k, q in picked).encode()
os.makedirs(os.path.dirname(out), exist_ok=True)
with tarfile.open(out, "w:xz", preset=9) as tf:
    for name, data in (("./chat.jsonl", body), ("./manifest.json", manifest)):
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    d = tarfile.TarInfo("./text")
    d.type = tarfile.DIRTYPE
    tf.addfile(d)
print(f"{out}: {len(picked)} questions, {os.path.getsize(out)} bytes")
