// tokenizer_prompt_ref.mjs - reference ids of plain prompts WITH the tokenizer's special tokens
// (HF's tokenizer(text), add_special_tokens true: the post_processor's TemplateProcessing
// "single" sequence, e.g. Gemma's <bos>), for tests/test_tokenizer.c's plain_prompt_special_tokens.
//
// Uses @lenml/tokenizers 3.7.2 installed outside the repository (see tokenizer_ref.mjs):
//     mkdir -p /tmp/tokref && (cd /tmp/tokref && npm install @lenml/tokenizers@3.7.2)
//     TOKREF=/tmp/tokref node tools/reference/tokenizer_prompt_ref.mjs     # from the repo root
// Writes tests/fixtures/tokenizer/prompt-ids.json: {"texts": [...], "ids": {DIR: [[ids of text 0], ...]}}
// for models/qwen3-tokenizer, models/gptoss-tokenizer and models/gemma3-tokenizer, the texts
// below plus documents 0-7 and 200 of tests/fixtures/tokenizer/corpus.txt.xz.
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";

const tokref = process.env.TOKREF || "/tmp/tokref";
const require = createRequire(path.join(tokref, "package.json"));
const { TokenizerLoader } = require("@lenml/tokenizers");

const texts = [
  "",
  "Hello world",
  " Hello",
  "Once upon a time",
  "<bos>already there",
  "line one\nline two\n\n  indented\ttab",
  "Gr\u00fc\u00dfe, \u4e16\u754c! \ud83d\udc69\u200d\ud83d\udcbb e\u0301",
  "<start_of_turn>user\nHi<end_of_turn>\n",
  "<|im_start|>user\nHi<|im_end|>",
];
const blob = execFileSync("xz", ["-dc", "tests/fixtures/tokenizer/corpus.txt.xz"], { maxBuffer: 1 << 30 });
const dec = new TextDecoder("utf-8", { fatal: true });
const pick = new Set([0, 1, 2, 3, 4, 5, 6, 7, 200]);
for (let pos = 0, k = 0; pos < blob.length && k <= 200; k++) {
  const nl = blob.indexOf(10, pos);
  const n = Number(blob.subarray(pos + 1, nl).toString("latin1"));
  if (pick.has(k)) texts.push(dec.decode(blob.subarray(nl + 1, nl + 1 + n)));
  pos = nl + 1 + n;
}
const out = { generator: "tools/reference/tokenizer_prompt_ref.mjs (@lenml/tokenizers 3.7.2)", texts, ids: {} };
for (const dir of ["models/qwen3-tokenizer", "models/gptoss-tokenizer", "models/gemma3-tokenizer"]) {
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
  });
  out.ids[dir] = texts.map((text) => Array.from(tok.encode(text, { add_special_tokens: true })));
}
writeFileSync("tests/fixtures/tokenizer/prompt-ids.json", JSON.stringify(out, null, 0) + "\n");
console.error(`tests/fixtures/tokenizer/prompt-ids.json: ${texts.length} texts x 3 tokenizers`);
