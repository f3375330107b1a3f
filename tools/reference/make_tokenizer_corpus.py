#!/usr/bin/env python3
"""Build the tokenizer test corpus: tests/fixtures/tokenizer/corpus.txt.xz.

Run from the repository root (needs only the Python standard library):
    python3 tools/reference/make_tokenizer_corpus.py
then make the reference ids with tools/reference/tokenizer_ref.mjs (see
tests/fixtures/tokenizer/README).

The corpus is a list of documents, each written as a header line "#<nbytes>\n"
followed by exactly nbytes of UTF-8. Sources, about 1.1 MB in all:
  - C code (/usr/include), Python code (the Python stdlib), English prose
    (/usr/share/common-licenses), picked with a fixed seed;
  - generated text: CJK, emoji with ZWJ sequences, decomposed letters and
    Hangul jamo that NFC composes, white-space of every kind (U+180E, U+3000,
    NBSP, CRLF, tabs, long runs), digit runs, contractions, added-token strings
    and near misses inside text, random assigned code points, long pieces.

A few characters are left out because the reference (@lenml/tokenizers, a JS
port) and HF tokenizers disagree on them: U+0085 and U+FEFF (JS \\s differs
from Unicode White_Space), U+017F (case folding in "(?i:'s)"), code points
unassigned in Unicode 14 (PCRE2 10.42's tables; the JS engine knows newer
ones), and the combining characters newer than Unicode 9.0 (HF's NFC tables
are Unicode 9.0, JS uses ICU's). Those characters are tested against HF
directly in tests/test_tokenizer.c (ids from tools/reference/tokenizer_hf_check.py).
"""
import glob
import os
import random
import sys
import lzma
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/fixtures/tokenizer/corpus.txt.xz")
EXCLUDE = {"\u0085", "\ufeff", "\u017f"}
# NFC_NEWER_THAN_9 in src/tokenizer.c
NEWER_THAN_9 = [
    (0x07FD, 0x07FD), (0x0898, 0x089F), (0x08CA, 0x08D3), (0x09FE, 0x09FE), (0x0C3C, 0x0C3C),
    (0x0D3B, 0x0D3C), (0x0EBA, 0x0EBA), (0x1715, 0x1715), (0x1ABF, 0x1ACE), (0x1DF6, 0x1DFA),
    (0xA82C, 0xA82C), (0x10D24, 0x10D27), (0x10EAB, 0x10EAC), (0x10EFD, 0x10EFF), (0x10F46, 0x10F50),
    (0x10F82, 0x10F85), (0x11070, 0x11070), (0x1133B, 0x1133B), (0x1145E, 0x1145E), (0x11839, 0x1183A),
    (0x11930, 0x11930), (0x11935, 0x11935), (0x11938, 0x11938), (0x1193D, 0x1193E), (0x11943, 0x11943),
    (0x119E0, 0x119E0), (0x11A34, 0x11A34), (0x11A47, 0x11A47), (0x11A99, 0x11A99), (0x11D42, 0x11D42),
    (0x11D44, 0x11D45), (0x11D97, 0x11D97), (0x11F41, 0x11F42), (0x16FF0, 0x16FF1), (0x1E08F, 0x1E08F),
    (0x1E130, 0x1E136), (0x1E2AE, 0x1E2AE), (0x1E2EC, 0x1E2EF), (0x1E4EC, 0x1E4EF)]
EXCLUDE |= {chr(c) for lo, hi in NEWER_THAN_9 for c in range(lo, hi + 1)}

rng = random.Random(20261129)


def clean(s):
    return "".join(c for c in s if c not in EXCLUDE and unicodedata.category(c) not in ("Cn", "Cs"))


def read_text(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def file_docs(paths, budget, chunk):
    """Up to `budget` characters from the files, at most `chunk` per file, cut at a line end."""
    docs, total = [], 0
    for p in paths:
        s = read_text(p)
        if not s or not s.strip():
            continue
        if len(s) > chunk:
            start = rng.randrange(0, len(s) - chunk)
            start = s.rfind("\n", 0, start) + 1
            s = s[start:start + chunk]
            end = s.rfind("\n")
            if end > chunk // 2:
                s = s[:end + 1]
        docs.append(clean(s))
        total += len(s)
        if total >= budget:
            break
    return docs


def pick(pattern_list, n):
    paths = []
    for pat in pattern_list:
        paths += glob.glob(pat, recursive=True)
    paths = sorted(set(p for p in paths if os.path.isfile(p) and not os.path.islink(p)))
    rng.shuffle(paths)
    return paths[:n]


# ---------------------------------------------------------------- generated text

def rch(lo, hi):
    return chr(rng.randint(lo, hi))


def word(alpha_lo, alpha_hi, a=2, b=8):
    return "".join(rch(alpha_lo, alpha_hi) for _ in range(rng.randint(a, b)))


ASCII_WORDS = ("the of and to in is it you that he was for on are with as I his they be at one "
               "have this from or had by hot word but what some we can out other were all there "
               "when up use your how said an each she which do their time if will way about many "
               "then them write would like so these her long make thing see him two has look more "
               "day could go come did number sound no most people my over know water than call "
               "first who may down side been now find any new work part take get place made live "
               "where after back little only round man year came show every good me give our under "
               "Paris London HTTP JSON UTF-8 iPhone McDonald O'Brien naïve café résumé").split()

CJK_PUNCT = "，。！？、：；「」『』（）《》【】…—"


def gen_cjk():
    out = []
    for _ in range(rng.randint(20, 60)):
        k = rng.random()
        if k < 0.35:
            out.append("".join(rch(0x4E00, 0x9FA5) for _ in range(rng.randint(1, 12))))
        elif k < 0.5:
            out.append("".join(rch(0x3041, 0x3093) for _ in range(rng.randint(1, 8))))
        elif k < 0.6:
            out.append("".join(rch(0x30A1, 0x30F6) for _ in range(rng.randint(1, 8))))
        elif k < 0.75:
            out.append("".join(rch(0xAC00, 0xD7A3) for _ in range(rng.randint(1, 5))))
            out.append(" ")
        elif k < 0.82:
            out.append("".join(rch(0xFF01, 0xFF5E) for _ in range(rng.randint(1, 4))))
        elif k < 0.88:
            out.append(rng.choice(ASCII_WORDS) + rng.choice(["", " ", "\u3000"]))
        elif k < 0.94:
            out.append(str(rng.randint(0, 10 ** rng.randint(1, 8))))
        else:
            out.append(rng.choice(["\u3000", "\n", " ", "\u3000\u3000", "\r\n"]))
        out.append(rng.choice(CJK_PUNCT) if rng.random() < 0.4 else "")
    return "".join(out)


EMOJI = ([chr(c) for c in range(0x1F600, 0x1F650)] + [chr(c) for c in range(0x1F300, 0x1F330)] +
         [chr(c) for c in range(0x1F680, 0x1F6A0)] + ["\u2764\ufe0f", "\u2600", "\u2615", "\u26a1",
                                                      "\u2705", "\u274c", "\u2b50"])
ZWJ = ["\U0001F468\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466",  # family
       "\U0001F469\u200D\U0001F4BB",  # woman technologist
       "\U0001F3F3\uFE0F\u200D\U0001F308",  # rainbow flag
       "\U0001F441\uFE0F\u200D\U0001F5E8\uFE0F",  # eye in speech bubble
       "\U0001F9D1\U0001F3FD\u200D\U0001F680",  # astronaut, skin tone
       "\U0001F468\U0001F3FB\u200D\u2764\uFE0F\u200D\U0001F468\U0001F3FF",
       "\U0001F1FA\U0001F1F8", "\U0001F1EF\U0001F1F5", "\U0001F1E9\U0001F1EA",  # flags
       "1\ufe0f\u20e3", "#\ufe0f\u20e3", "\U0001F44D\U0001F3FC", "\U0001F44B\U0001F3FF"]


def gen_emoji():
    out = []
    for _ in range(rng.randint(30, 90)):
        k = rng.random()
        if k < 0.35:
            out.append(rng.choice(EMOJI) * rng.randint(1, 3))
        elif k < 0.6:
            out.append(rng.choice(ZWJ))
        elif k < 0.85:
            out.append(rng.choice([" ", "", "\n"]) + rng.choice(ASCII_WORDS))
        else:
            out.append(rng.choice(["!", "!!", "...", " :)", "\n\n", " - "]))
        if rng.random() < 0.3:
            out.append(" ")
    return "".join(out)


def gen_combining():
    """Decomposed text that NFC changes, plus marks NFC must reorder."""
    out = []
    for _ in range(rng.randint(40, 120)):
        k = rng.random()
        if k < 0.35:  # base + 1..3 combining marks from U+0300..U+036F in random order
            w = []
            for _ in range(rng.randint(1, 6)):
                w.append(rng.choice("aeiouycnsACEINOUZwxzgh"))
                for _ in range(rng.choice([0, 1, 1, 1, 2, 3])):
                    w.append(rch(0x0300, 0x036F))
            out.append("".join(w))
        elif k < 0.5:  # conjoining jamo: L V (T)
            for _ in range(rng.randint(1, 4)):
                out.append(rch(0x1100, 0x1112) + rch(0x1161, 0x1175) +
                           (rch(0x11A8, 0x11C2) if rng.random() < 0.5 else ""))
        elif k < 0.6:  # singletons and compatibility-looking characters NFC changes
            out.append(rng.choice(["\u212B", "\u2126", "\u212A", "\u0344", "\u0340", "\u0341",
                                   "\u0374", "\u037E", "\u0387", "\u1FEE", "\u2000", "\u2001",
                                   "\uF900", "\uFA10", "\u0958", "\u09DC", "\u0F43"]))
        elif k < 0.7:  # Vietnamese / Greek / precomposed Latin
            out.append(rng.choice(["Tiếng Việt", "Nguyễn", "đường", "ἀνὴρ", "Ἀθῆναι", "ŒUVRE",
                                   "Ångström", "Ærø", "İstanbul", "ǅemal", "ﬁnance", "ﬀ"]))
        elif k < 0.8:  # Arabic with harakat, Hebrew with points, Devanagari
            out.append(rng.choice(["مَرْحَبًا", "السَّلَامُ عَلَيْكُمْ", "שָׁלוֹם", "בְּרֵאשִׁית",
                                   "नमस्ते", "क़िला", "हिन्दी", "ภาษาไทย", "ข้าว"]))
        elif k < 0.9:  # marks right after spaces, digits, punctuation, or at the start
            out.append(rng.choice([" ", "1", ".", "'", "\n", "", "<"]) + rch(0x0300, 0x036F))
        else:
            out.append(rng.choice(ASCII_WORDS))
        out.append(rng.choice([" ", " ", "", "\n", ", ", "\t"]))
    return "".join(out)


SPACES = [" ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\u00a0", "\u1680", "\u180e", "\u2000",
          "\u2003", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b"]


def gen_whitespace():
    out = []
    for _ in range(rng.randint(40, 120)):
        k = rng.random()
        if k < 0.3:
            out.append(rng.choice(SPACES) * rng.randint(1, 12))
        elif k < 0.5:
            out.append("".join(rng.choice(SPACES) for _ in range(rng.randint(2, 8))))
        elif k < 0.6:
            out.append(" " * rng.randint(1, 40))
        elif k < 0.65:
            out.append("\r\n" * rng.randint(1, 5))
        elif k < 0.9:
            out.append(rng.choice(ASCII_WORDS + ["123", "4", "(", ")", "{", "};", "#", "--", "中文"]))
        else:
            out.append(rng.choice(["\u180e", "\u3000", "\u00a0"]) + rng.choice(ASCII_WORDS))
    if rng.random() < 0.5:
        out.append(rng.choice(SPACES) * rng.randint(1, 6))  # trailing white space
    return "".join(out)


DIGITS = ["0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669",
          "\u0966\u0967\u0968\u0969", "\uff10\uff11\uff12\uff13\uff19", "\u00b2\u00b3\u00b9\u00bc\u00bd\u00be",
          "\u2160\u2161\u2162\u216b\u2180", "\u2460\u2461\u2473", "\u3007\u4e00", "\U0001D7CE\U0001D7D9"]


def gen_digits():
    out = []
    for _ in range(rng.randint(40, 100)):
        k = rng.random()
        if k < 0.4:
            out.append(str(rng.randint(0, 10 ** rng.randint(1, 30))))
        elif k < 0.55:
            out.append("".join(rng.choice(rng.choice(DIGITS)) for _ in range(rng.randint(1, 10))))
        elif k < 0.7:
            out.append(rng.choice(["3.14159", "1,000,000", "0x7fff", "1e-9", "v2.0.1", "2024-11-29",
                                   "12:30:45", "+49 30 1234567", "$19.99", "50%", "x86_64", "IPv6",
                                   "abc123def", "1st", "2nd", "H2O", "CO\u2082"]))
        else:
            out.append(rng.choice(ASCII_WORDS))
        out.append(rng.choice([" ", " ", "", "\n", ", ", "-", "."]))
    return "".join(out)


CONTR = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'vE", "'M", "'LL",
         "'lL", "'Ll", "'D", "'x", "'", "''", "'ss", "'dd", "\u2019s", "\u2019ll"]


def gen_contractions():
    out = []
    for _ in range(rng.randint(50, 120)):
        w = rng.choice(ASCII_WORDS + ["don", "can", "I", "you", "they", "he", "JOHN", "it"])
        out.append(w + rng.choice(CONTR) + rng.choice(["", "", "s", "a", "123", "\u00e9"]))
        out.append(rng.choice([" ", " ", "\n", "  ", " '", "' ", ". "]))
    return "".join(out)


ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
         "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
         "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
         "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
NEAR = ["<|im_start", "<|im_end|", "im_end|>", "<think", "</think", "< think>", "<Think>", "<|IM_END|>",
        "<|im_start |>", "<<|im_end|>>", "<|<|im_end|>|>", "<tool_call", "<|", "|>", "<>", "</",
        "<|endoftext|", "<thinking>", "</think >"]


def gen_added():
    out = []
    for _ in range(rng.randint(30, 80)):
        k = rng.random()
        if k < 0.4:
            out.append(rng.choice(ADDED))
        elif k < 0.55:
            out.append(rng.choice(NEAR))
        elif k < 0.65:  # combining mark or emoji glued to an added token
            out.append(rng.choice(ADDED) + rng.choice(["\u0301", "\u0308\u0301", "\U0001F600", "\u200d"]))
        elif k < 0.7:
            out.append(rng.choice("aeoun") + rng.choice(ADDED) + "\u0301")
        else:
            out.append(rng.choice(ASCII_WORDS + ["user", "assistant", "system", "\u4e2d\u6587"]))
        out.append(rng.choice(["", "", "\n", " ", "\n\n", "  "]))
    return "".join(out)


def gen_scripts():
    """Words from many scripts (letters only from long-assigned blocks)."""
    blocks = [(0x0410, 0x044F), (0x0391, 0x03C9), (0x05D0, 0x05EA), (0x0627, 0x064A), (0x0905, 0x0939),
              (0x0E01, 0x0E2E), (0x10D0, 0x10FA), (0x0531, 0x0556), (0x1200, 0x1248), (0x0C85, 0x0CB9),
              (0x0B85, 0x0B9A), (0x1E00, 0x1EFF), (0x0100, 0x017E), (0x0180, 0x024F)]
    out = []
    for _ in range(rng.randint(40, 100)):
        lo, hi = rng.choice(blocks)
        out.append(word(lo, hi, 1, 10))
        out.append(rng.choice([" ", " ", "\n", ", ", ". ", " - ", "?", "\u061f", "\u0964"]))
    return "".join(out)


def gen_soup():
    """Random assigned code points of every category (control characters included)."""
    out, n = [], rng.randint(300, 1500)
    while len(out) < n:
        r = rng.random()
        if r < 0.05:
            c = rng.randint(0, 0x7F)
        elif r < 0.7:
            c = rng.randint(0x80, 0xFFFF)
        else:
            c = rng.randint(0x10000, 0x2FFFF)
        ch = chr(c)
        if unicodedata.category(ch) in ("Cn", "Cs") or ch in EXCLUDE:
            continue
        out.append(ch)
        if rng.random() < 0.1:
            out.append(" ")
    return "".join(out)


def gen_long():
    """Long pieces: the BPE must stay fast and exact on them."""
    k = rng.randrange(9)
    n = rng.randint(300, 6000)
    if k == 0:
        return "a" * n
    if k == 1:
        return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n))
    if k == 2:
        return "".join(rng.choice("0123456789") for _ in range(n))
    if k == 3:
        return rng.choice("=-*#_~") * n + "\n"
    if k == 4:
        alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        return "data:image/png;base64," + "".join(rng.choice(alpha) for _ in range(n)) + "=="
    if k == 5:
        return " " * n + "x"
    if k == 6:
        return "\u4e2d" * (n // 3) + "\u6587" * (n // 5)
    if k == 7:
        return "".join(rng.choice(["\t", " ", "\n", "\r\n"]) for _ in range(n)) + "end"
    return "https://example.com/" + "/".join(rng.choice(ASCII_WORDS) for _ in range(n // 8)) + "?q=1&r=2"


SMALL = ["", " ", "\n", "a", "'s", "<|im_end|>", "<think>\n\n</think>\n\n", "\u180e", "\u3000",
         "\u00a0", "e\u0301", "\r\n", "  \n", "123", "\U0001F468\u200D\U0001F469\u200D\U0001F467",
         "Hello", " Hello", "Hello ", "hello world", "\t\tx", "x\t\t", "\u180ex", "x\u180e", " \u180e ",
         "\u3000x", "a\u00a0b", "\x00", "a\x00b", "\x7f", "\u0301", "\u0301\u0301"]


def main():
    docs = list(SMALL)
    c_paths = pick(["/usr/include/**/*.h", "/usr/include/**/*.c"], 400)
    docs += file_docs(c_paths, 300_000, 12_000)
    py_paths = pick(["/root/.pyenv/versions/3.11.7/lib/python3.11/*.py",
                     "/root/.pyenv/versions/3.11.7/lib/python3.11/*/*.py",
                     "/root/.pyenv/versions/3.11.7/lib/python3.11/*/*/*.py"], 400)
    docs += file_docs(py_paths, 300_000, 12_000)
    lic = sorted(p for p in glob.glob("/usr/share/common-licenses/*") if not os.path.islink(p))
    docs += file_docs(lic, 300_000, 40_000)
    gens = [gen_cjk, gen_emoji, gen_combining, gen_whitespace, gen_digits, gen_contractions,
            gen_added, gen_scripts, gen_soup]
    for i in range(260):
        docs.append(gens[i % len(gens)]())
    for _ in range(12):
        docs.append(gen_long())
    # a few documents glued from pieces of the others, so kinds of text meet at boundaries
    for _ in range(20):
        parts = [rng.choice(docs[len(SMALL):]) for _ in range(4)]
        docs.append("".join(p[:rng.randint(0, 400)] for p in parts))
    docs = [clean(d) for d in docs]
    blob = bytearray()
    for d in docs:
        b = d.encode("utf-8")
        blob += b"#%d\n" % len(b) + b
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with lzma.open(OUT, "wb", preset=9 | lzma.PRESET_EXTREME) as f:
        f.write(bytes(blob))
    print(f"{OUT}: {len(docs)} documents, {len(blob)} bytes before xz", file=sys.stderr)


if __name__ == "__main__":
    main()
