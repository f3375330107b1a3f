"""Summarise an `nsys stats -r cuda_gpu_kern_sum -f csv` file: time per
generated token by kernel (short names), and the sum of all kernels.
usage: python3 kern_sum.py FILE.csv TOKENS"""
import csv, re, sys

rows = list(csv.DictReader(open(sys.argv[1])))
tokens = int(sys.argv[2])
def short(n):
    n = re.sub(r'\(.*', '', n)
    n = re.sub(r'<.*', lambda m: '<' + m.group(0)[1:40] + '>' if len(m.group(0)) > 1 else '', n)
    return n[:70]
tot = 0.0
out = []
for r in rows:
    ns = float(r.get('Total Time (ns)') or r.get('Total Time') or 0)
    calls = int(float(r.get('Instances') or r.get('Count') or 0))
    avg = float(r.get('Avg (ns)') or 0)
    tot += ns
    out.append((ns, calls, avg, short(r.get('Name', '?'))))
out.sort(reverse=True)
print('%-72s %8s %9s %11s' % ('kernel', 'calls', 'avg us', 'us/token'))
for ns, calls, avg, n in out[:30]:
    print('%-72s %8d %9.2f %11.1f' % (n, calls, avg / 1e3, ns / 1e3 / tokens))
print('all kernels: %.3f ms per token (over %d tokens, prefill included)' % (tot / 1e6 / tokens, tokens))
