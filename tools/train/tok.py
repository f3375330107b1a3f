"""Qwen3 tokenizer: HF `tokenizers` when installed (GPU machine), else a slow
pure-Python BPE over the same tokenizer.json (for CPU tests of the pipeline)."""
import json
import unicodedata

IM_START, IM_END, EOT = 151644, 151645, 151643
CHECK_TEXT = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
CHECK_IDS = [151644, 872, 198, 9707, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271]


def prompt_text(q):
    """Qwen3 chat template, one user turn, add_generation_prompt, enable_thinking=False."""
    return f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def chat_text(q, a):
    """Template output for [user q, assistant a] (ends with '<|im_end|>\\n')."""
    return prompt_text(q) + a + "<|im_end|>\n"


class Tok:
    def __init__(self, path):
        try:
            from tokenizers import Tokenizer
            self.hf = Tokenizer.from_file(path)
        except ImportError:
            self.hf = None
            self._slow_init(path)
        got = self.encode(CHECK_TEXT)
        assert got == CHECK_IDS, got

    def encode(self, s):
        if self.hf is not None:
            return self.hf.encode(s, add_special_tokens=False).ids
        return self._slow(s)

    def encode_batch(self, ss):
        if self.hf is not None:
            return [e.ids for e in self.hf.encode_batch(ss, add_special_tokens=False)]
        return [self._slow(s) for s in ss]

    def decode(self, ids):
        if self.hf is not None:
            return self.hf.decode(ids, skip_special_tokens=False)
        bs = bytearray()
        for i in ids:
            t = self.inv.get(i, "")
            if i in self.added_inv:
                bs += t.encode()
            else:
                bs += bytes(self.u2b[ch] for ch in t)
        return bs.decode("utf-8", "replace")

    # slow path (a plain reference BPE)
    def _slow_init(self, path):
        import regex
        t = json.load(open(path))
        self.pat = regex.compile(t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"])
        self.vocab = t["model"]["vocab"]
        self.ranks = {tuple(m): i for i, m in enumerate(t["model"]["merges"])}
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.b2u = {b: chr(c) for b, c in zip(bs, cs)}
        self.u2b = {chr(c): b for b, c in zip(bs, cs)}
        self.added = {a["content"]: a["id"] for a in t["added_tokens"]}
        self.added_inv = {v: k for k, v in self.added.items()}
        self.inv = {v: k for k, v in self.vocab.items()}
        self.inv.update(self.added_inv)
        self.spl = regex.compile("(" + "|".join(regex.escape(k) for k in sorted(self.added, key=len, reverse=True)) + ")")
        self.cache = {}

    def _bpe(self, w):
        if w in self.cache:
            return self.cache[w]
        p = list(w)
        while len(p) > 1:
            r, i = min((self.ranks.get((p[i], p[i + 1]), 1 << 30), i) for i in range(len(p) - 1))
            if r == 1 << 30:
                break
            p[i:i + 2] = [p[i] + p[i + 1]]
        out = [self.vocab[x] for x in p]
        self.cache[w] = out
        return out

    def _slow(self, s):
        out = []
        for seg in self.spl.split(s):
            if not seg:
                continue
            if seg in self.added:
                out.append(self.added[seg])
                continue
            for w in self.pat.findall(unicodedata.normalize("NFC", seg)):
                out += self._bpe("".join(self.b2u[b] for b in w.encode()))
        return out
