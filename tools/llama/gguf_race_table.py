"""tools/llama/gguf_race_table.py - the tables of tools/llama/gguf_race.sh
(standard library only).

    one TYPE DOMAIN I DIR "N SECONDS" N_ACCEPT "N TOK_S" "N TOK_S" TAU
        one prompt of the race -> one JSON line; DIR holds the outputs:
        lg (llama.cpp greedy), ls (llama.cpp DFlash), dg (dflash greedy),
        ds (dflash DFlash)
    race FILE.jsonl   the race table (markdown)
    speed FILE.jsonl  the speed table (markdown)
"""
import json
import statistics
import sys


def read(path):
    with open(path, "rb") as f:
        return f.read()


def same_prefix(a, b):
    """1 if the shorter of a and b is a prefix of the longer (the engines stop
    at slightly different token counts), else 0."""
    n = min(len(a), len(b))
    return int(n > 0 and a[:n] == b[:n])


def one(args):
    ty, dom, i, d, lsp, lacc, dgs, dss, tau = args
    lg, ls, dg, ds = (read("%s/%s" % (d, n)) for n in ("lg", "ls", "dg", "ds"))
    ln, lsec = lsp.split()
    ln, lsec, lacc = int(ln), float(lsec), int(lacc)
    dgn, dgt = dgs.split()
    dsn, dst = dss.split()
    row = {
        "type": ty, "domain": dom, "prompt": int(i),
        "llama_dflash_tokens": ln, "llama_dflash_tok_s": ln / lsec if lsec > 0 else None,
        "llama_tau": ln / (ln - lacc) if ln > lacc else None,
        "llama_dflash_eq_greedy": same_prefix(ls, lg),
        "dflash_greedy_tok_s": float(dgt), "dflash_tokens": int(dsn), "dflash_dflash_tok_s": float(dst),
        "dflash_tau": float(tau), "dflash_dflash_eq_greedy": int(ds == dg),
        "greedy_same_across_engines": same_prefix(dg, lg),
        "tokens": int(dgn), "bytes": [len(lg), len(ls), len(dg), len(ds)],
    }
    print(json.dumps(row))


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def race(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    tg, ngen = {}, "N"
    for r in rows:
        if r.get("llama_bench") and r.get("n_gen", 0) > 0:
            tg[r["type"]], ngen = r["avg_ts"], r["n_gen"]
    rows = [r for r in rows if not r.get("llama_bench")]
    print("| file | domain | prompts | llama.cpp greedy tok/s | llama.cpp DFlash tok/s | tau | = own greedy "
          "| dflash greedy tok/s | dflash DFlash tok/s | tau | = own greedy |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    groups = []
    for r in rows:
        k = (r["type"], r["domain"])
        if k not in groups:
            groups.append(k)
    for ty in dict.fromkeys(k[0] for k in groups):
        for dom in [k[1] for k in groups if k[0] == ty] + ["all"]:
            rs = [r for r in rows if r["type"] == ty and (dom == "all" or r["domain"] == dom)]
            lg, ls = tg.get(ty, float("nan")), med([r["llama_dflash_tok_s"] for r in rs])
            dg, ds = med([r["dflash_greedy_tok_s"] for r in rs]), med([r["dflash_dflash_tok_s"] for r in rs])
            print("| %s | %s | %d | %.1f | %.1f (%.2fx) | %.2f | %d/%d | %.1f | %.1f (%.2fx) | %.2f | %d/%d |" % (
                ty, dom, len(rs), lg, ls, ls / lg, med([r["llama_tau"] for r in rs]),
                sum(r["llama_dflash_eq_greedy"] for r in rs), len(rs), dg, ds, ds / dg,
                med([r["dflash_tau"] for r in rs]), sum(r["dflash_dflash_eq_greedy"] for r in rs), len(rs)))
    print()
    print("Medians over prompts; tok/s of decode (prompt excluded; llama.cpp's greedy: llama-bench tg%s "
          "on the same file); tau = tokens per target forward. "
          "'= own greedy': the DFlash text equals the engine's own greedy text (llama.cpp: over the shorter "
          "of the two, as its speculative example stops up to a block past -n). "
          "Greedy texts equal across the engines: %d/%d." % (
              ngen, sum(r["greedy_same_across_engines"] for r in rows), len(rows)))


def speed(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    print("| file | engine | decode tok/s (ms/token) | 16-token forward / one step | prefill 512 tok/s |")
    print("| --- | --- | --- | --- | --- |")
    for ty in dict.fromkeys(r["file"] for r in rows):
        lb = [r for r in rows if r["file"] == ty and r["engine"] == "llama.cpp"]
        ms = lambda p: med([r["avg_ns"] / 1e6 for r in lb if r.get("n_prompt") == p and r.get("n_gen") == 0])
        tg = med([r["avg_ts"] for r in lb if r.get("n_gen", 0) > 0 and r.get("n_prompt") == 0])
        pp512 = med([r["avg_ts"] for r in lb if r.get("n_prompt") == 512 and r.get("n_gen") == 0])
        print("| %s | llama.cpp | %.1f (%.2f) | %.2f (pp16 %.2f ms / pp1 %.2f ms) | %.1f |" % (
            ty, tg, 1000 / tg, ms(16) / ms(1), ms(16), ms(1), pp512))
        db = [r for r in rows if r["file"] == ty and r["engine"] == "dflash"]
        dgen = [r for r in rows if r["file"] == ty and r["engine"] == "dflash-gen"]
        c1 = med([r["cost_ms"]["1"] for r in db])
        c16 = med([r["cost_ms"]["16"] for r in db])
        dec = med([r["decode_tok_s"] for r in dgen])
        pre = med([r["prefill_tok_s"] for r in dgen])
        ntok = med([r["prefill_tokens"] for r in dgen])
        print("| %s | dflash | %.1f (%.2f) | %.2f (T=16 %.2f ms / T=1 %.2f ms) | %.1f (%s tokens) |" % (
            ty, dec, 1000 / dec, c16 / c1, c16, c1, pre, ntok))
    reps = max([r.get("rep", 1) for r in rows] or [0])
    print()
    print("Medians of %d alternating runs. llama.cpp: llama-bench -p 1,16,512 -n 128 -fa 1 (pp1/pp16: one "
          "forward of 1/16 tokens at depth 0). dflash: `dflash bench --depth 0` forward costs (greedy step: "
          "forward + argmax), `dflash generate -n 128 --ignore-eos` decode, a 512-token prompt's prefill." % reps)


if __name__ == "__main__":
    {"one": lambda: one(sys.argv[2:]), "race": lambda: race(sys.argv[2]),
     "speed": lambda: speed(sys.argv[2])}[sys.argv[1]]()
