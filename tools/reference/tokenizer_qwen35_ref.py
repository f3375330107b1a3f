"""Reference ids for Qwen3.5's pre-tokenizer on the tokenizer corpus.

Qwen3.5's tokenizer.json (248k vocabulary) is not reachable here; its
pre-tokenizer regex is (llama.cpp's tokenizer.ggml.pre "qwen35", in
src/llama-vocab.cpp) Qwen3's with [\\p{L}\\p{M}] for \\p{L}: combining marks
join a word's letters. This script puts that regex into the Qwen3 tokenizer
(models/qwen3-tokenizer) in /tmp/qwen35-regex-tokenizer, runs
tokenizer_ref.mjs (@lenml/tokenizers 3.7.2) on tests/fixtures/tokenizer/
corpus.txt.xz with it, and writes tests/fixtures/tokenizer/ids-qwen35.txt.xz:
one line "DOC ID ID ..." for each document whose ids differ from ids.txt.xz
(DOC counts from 0). From the repository root, after the npm install that
tests/fixtures/tokenizer/README gives:

    TOKREF=/tmp/tokref python3 tools/reference/tokenizer_qwen35_ref.py
"""
import json
import lzma
import os
import shutil
import subprocess

QWEN3_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
            "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
QWEN35_RE = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+"
             "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")
SRC, DIR = "models/qwen3-tokenizer", "/tmp/qwen35-regex-tokenizer"
FIX = "tests/fixtures/tokenizer"

t = json.load(open(os.path.join(SRC, "tokenizer.json"), encoding="utf-8"))
split = t["pre_tokenizer"]["pretokenizers"][0]
assert split["pattern"]["Regex"] == QWEN3_RE, "models/qwen3-tokenizer has another pre-tokenizer"
split["pattern"]["Regex"] = QWEN35_RE
os.makedirs(DIR, exist_ok=True)
json.dump(t, open(os.path.join(DIR, "tokenizer.json"), "w", encoding="utf-8"), ensure_ascii=False)
shutil.copy(os.path.join(SRC, "tokenizer_config.json"), DIR)
subprocess.run(["node", "tools/reference/tokenizer_ref.mjs", f"{FIX}/corpus.txt.xz", "/tmp/ids-qwen35-all.txt.xz",
                DIR], check=True)
new = lzma.open("/tmp/ids-qwen35-all.txt.xz", "rt").read().split("\n")
old = lzma.open(f"{FIX}/ids.txt.xz", "rt").read().split("\n")
assert len(new) == len(old)
lines = [f"{d} {a}" for d, (a, b) in enumerate(zip(new, old)) if a != b]
with lzma.open(f"{FIX}/ids-qwen35.txt.xz", "wt", preset=9 | lzma.PRESET_EXTREME) as f:
    f.write("".join(line + "\n" for line in lines))
print(f"{FIX}/ids-qwen35.txt.xz: {len(lines)} of {len(old) - 1} documents differ from Qwen3's ids")
