"""Summarise an `ncu --csv --metrics gpu__time_duration.sum` log: each
kernel's own duration (profiled one at a time, graph nodes included), per
decode token, grouped by short name. Tokens = the calls of the kernel named
by --per (default k_argmax...: one per greedy step).
usage: python3 ncu_sum.py FILE.csv [PER_SUBSTRING]"""
import csv, io, re, sys
from collections import defaultdict

text = open(sys.argv[1], errors='replace').read()
start = text.find('"ID"')
rows = list(csv.DictReader(io.StringIO(text[start:]))) if start >= 0 else []
per = sys.argv[2] if len(sys.argv) > 2 else 'argmax'
def short(n):
    n = re.sub(r'\(.*', '', n)
    n = re.sub(r'<.*', lambda m: '<' + m.group(0)[1:48] + '>', n)
    return n[:80]
tot = defaultdict(float)
calls = defaultdict(int)
for r in rows:
    if r.get('Metric Name') != 'gpu__time_duration.sum':
        continue
    v = float(r['Metric Value'].replace(',', ''))
    u = r.get('Metric Unit', 'ns')
    v *= {'ns': 1e-3, 'usecond': 1.0, 'us': 1.0, 'msecond': 1e3, 'ms': 1e3, 'nsecond': 1e-3}.get(u, 1e-3)
    n = short(r['Kernel Name'])
    tot[n] += v
    calls[n] += 1
tokens = sum(c for n, c in calls.items() if per in n) or 1
print('%-82s %7s %9s %10s' % ('kernel', 'calls', 'avg us', 'us/token'))
for n in sorted(tot, key=lambda k: -tot[k])[:30]:
    print('%-82s %7d %9.2f %10.1f' % (n, calls[n], tot[n] / calls[n], tot[n] / tokens))
print('kernels: %.3f ms per token over %d tokens (%d kernels profiled; launch gaps not counted)'
      % (sum(tot.values()) / 1e3 / tokens, tokens, sum(calls.values())))
