// tokenizer_ref.mjs - reference token ids for tests/fixtures/tokenizer/corpus.txt.xz.
//
// Uses @lenml/tokenizers 3.7.2 (a JS port of the HF tokenizers pipeline),
// installed OUTSIDE the repository:
//     mkdir -p /tmp/tokref && (cd /tmp/tokref && npm install @lenml/tokenizers@3.7.2)
//     TOKREF=/tmp/tokref node tools/reference/tokenizer_ref.mjs            # from the repo root
// Reads the corpus (documents as "#<nbytes>\n<bytes>") and models/qwen3-tokenizer/,
// writes tests/fixtures/tokenizer/ids.txt.xz (or OUT.xz): one line per document, the ids
// of tok.encode(doc, {add_special_tokens: false}) separated by spaces.
// Optional arguments: CORPUS.xz OUT.xz TOKENIZER_DIR (gpt-oss: ... ids-gptoss.txt.xz models/gptoss-tokenizer;
// Gemma 3: ... ids-gemma3.txt.xz models/gemma3-tokenizer).
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

const tokref = process.env.TOKREF || "/tmp/tokref";
const require = createRequire(path.join(tokref, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const corpus = process.argv[2] || "tests/fixtures/tokenizer/corpus.txt.xz";
const out = process.argv[3] || "tests/fixtures/tokenizer/ids.txt.xz";
const dir = process.argv[4] || "models/qwen3-tokenizer";

const tok = TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});

const blob = execFileSync("xz", ["-dc", corpus], { maxBuffer: 1 << 30 });
const dec = new TextDecoder("utf-8", { fatal: true });
const lines = [];
let pos = 0;
while (pos < blob.length) {
  const nl = blob.indexOf(10, pos);
  if (blob[pos] !== 35 /* # */ || nl < 0) throw new Error(`bad header at byte ${pos}`);
  const n = Number(blob.subarray(pos + 1, nl).toString("latin1"));
  const text = dec.decode(blob.subarray(nl + 1, nl + 1 + n));
  pos = nl + 1 + n;
  lines.push(tok.encode(text, { add_special_tokens: false }).join(" "));
}
const xz = execFileSync("xz", ["-9e", "-c"], { input: lines.join("\n") + "\n", maxBuffer: 1 << 30 });
writeFileSync(out, xz);
console.error(`${out}: ${lines.length} documents, ${lines.reduce((a, l) => a + (l ? l.split(" ").length : 0), 0)} ids`);
