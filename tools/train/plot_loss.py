#!/usr/bin/env python3
"""Loss curve as a small standalone SVG from a training CSV (no plotting libraries).

    plot_loss.py CSV OUT.svg XCOL YCOL[,YCOL2...] TITLE [MIN_X]

Rows with XCOL < MIN_X are left out (e.g. the first, untrained step).
"""
import csv
import sys

W, H, L, R, T, B = 640, 360, 60, 20, 36, 44
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def nice_ticks(lo, hi, n=5):
    import math
    span = hi - lo or 1.0
    step = 10 ** math.floor(math.log10(span / n))
    for m in (1, 2, 5, 10):
        if span / (step * m) <= n:
            step *= m
            break
    t = math.ceil(lo / step) * step
    out = []
    while t <= hi + 1e-9:
        out.append(round(t, 10))
        t += step
    return out


def main():
    path, out, xcol, ycols, title = sys.argv[1:6]
    rows = list(csv.DictReader(open(path)))
    if len(sys.argv) > 6:
        rows = [r for r in rows if float(r[xcol]) >= float(sys.argv[6])]
    ycols = ycols.split(",")
    xs = [float(r[xcol]) for r in rows]
    series = [[float(r[c]) for r in rows] for c in ycols]
    x0, x1 = min(xs), max(xs)
    allv = [v for s in series for v in s]
    y0, y1 = min(allv), max(allv)
    y0 = min(0.0, y0) if y1 - y0 > 0.5 * y1 else y0
    px = lambda x: L + (x - x0) / ((x1 - x0) or 1) * (W - L - R)  # noqa: E731
    py = lambda y: H - B - (y - y0) / ((y1 - y0) or 1) * (H - T - B)  # noqa: E731
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
         f'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>']
    for t in nice_ticks(y0, y1):
        o.append(f'<line x1="{L}" x2="{W - R}" y1="{py(t):.1f}" y2="{py(t):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{L - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for t in nice_ticks(x0, x1):
        o.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{T}" y2="{H - B}" stroke="#eee"/>')
        o.append(f'<text x="{px(t):.1f}" y="{H - B + 16}" text-anchor="middle">{t:g}</text>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 8}" text-anchor="middle">{xcol}</text>')
    o.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#333"/>')
    for i, (c, s) in enumerate(zip(ycols, series)):
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, s))
        col = COLORS[i % len(COLORS)]
        o.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
        o.append(f'<text x="{W - R - 8}" y="{T + 16 + 14 * i}" text-anchor="end" fill="{col}">{c}</text>')
    o.append("</svg>")
    open(out, "w").write("\n".join(o) + "\n")


if __name__ == "__main__":
    main()
