#!/usr/bin/env python3
"""Check the tokenizer fixtures against HF tokenizers itself (the Rust library).

The committed reference ids come from @lenml/tokenizers (JS). This script, run
where the `tokenizers` Python package is installed (the GPU machine has 0.23.2),
  1. encodes every corpus document with HF and counts documents whose ids
     differ from tests/fixtures/tokenizer/ids.txt.xz;
  2. prints HF's ids for the edge strings below (characters the corpus leaves
     out because the JS port handles them differently); tests/test_tokenizer.c
     hard-codes these.
Usage, from the repository root:  python3 tools/reference/tokenizer_hf_check.py
"""
import json
import lzma
import sys

from tokenizers import Tokenizer
import tokenizers

EDGE = [
    "\u0085", "a\u0085b", "x \u0085 y", "a\u0085\u0085 b", " \u0085\n",  # NEL: white space in HF
    "\ufeff", "\ufeffHello", "a\ufeff b", "a \ufeff\ufeff b",  # BOM: not white space in HF
    "it'\u017f", "IT'\u017f here", "'\u017f", "'\u212a",  # long s folds to s: a contraction
    "\u180e", "a\u180e b", "a \u180e\u180e b", "\u180e\u180e  x",  # U+180E: not white space
    "x\u2028y", "\x0b\x0c", "a \u3000 b", "\u00a0\u00a0x",
    "a\U0001E030b", "\u4e2d\U00031350\u6587",  # letters new in Unicode 15 (PCRE2 10.42 has 14.0)
    "'\u017fx", "it'\u017ftop", "'\u017f\u017f", "x'\u017f1",  # is "'\u017f" a contraction?
    "\u30be\u2dfa\u08d3", "a\u0315\u0300", "a\u0300\u0315", "\u0b47\u0b3e",  # NFC: order, compose
    "\U00011347\U0001133e", "\U00011935\U00011930", "e\u1ab0\u0316", "e\u08e3\u0300",
]


def main():
    tok = Tokenizer.from_file("models/qwen3-tokenizer/tokenizer.json")
    print("tokenizers", tokenizers.__version__, file=sys.stderr)
    blob = lzma.open("tests/fixtures/tokenizer/corpus.txt.xz").read()
    ref = lzma.open("tests/fixtures/tokenizer/ids.txt.xz").read().decode().split("\n")
    docs, pos = [], 0
    while pos < len(blob):
        nl = blob.index(b"\n", pos)
        n = int(blob[pos + 1:nl])
        docs.append(blob[nl + 1:nl + 1 + n].decode("utf-8"))
        pos = nl + 1 + n
    bad = 0
    for i, d in enumerate(docs):
        ids = tok.encode(d, add_special_tokens=False).ids
        want = [int(x) for x in ref[i].split()] if ref[i] else []
        if ids != want:
            bad += 1
            if bad <= 5:
                k = next((j for j in range(min(len(ids), len(want))) if ids[j] != want[j]),
                         min(len(ids), len(want)))
                print(f"doc {i}: HF {ids[max(0, k - 3):k + 5]} JS {want[max(0, k - 3):k + 5]}",
                      file=sys.stderr)
    print(f"corpus: {len(docs)} documents, {bad} differ between HF and the JS reference",
          file=sys.stderr)
    out = [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in EDGE]
    print(json.dumps(out, ensure_ascii=True))


if __name__ == "__main__":
    main()
