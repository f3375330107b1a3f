// kv_budget.js - `dflash serve --parallel 2 --kv-budget 2` (demo pair,
// context 1024: the demo target's KV page of 16 positions is 192 KiB, so
// the budget holds 10 pages = 160 positions) through the official openai
// client (run by tests/test_serve_parallel.sh): /metrics reports the budget
// and the bytes held; a short request is answered; a request whose
// reservation (prompt + max_tokens + 64 positions) passes the budget - a
// long prompt, or any prompt without max_tokens (the whole context) - gets
// a 400 naming max_tokens and --kv-budget; the short request then gets the
// same reply as before; two requests whose reservations do not fit
// together, the second sent while the first streams, both get their
// replies alone, the second after waiting (kv_cache_waits_total); the bytes held never pass the budget
// (test_batch's kv_budget checks the eviction of idle caches and that every
// reply equals the unlimited model's). Prints "ok - ..." / "not ok - ...".
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const { check, failures } = require('./tap');
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });

async function metrics() {
  const t = await (await fetch(BASE + '/metrics')).text();
  const get = (n) => { const m = t.match(new RegExp('^dflash:' + n + ' ([0-9]+)$', 'm')); return m ? Number(m[1]) : NaN; };
  return { used: get('kv_cache_used_bytes'), peak: get('kv_cache_peak_bytes'), budget: get('kv_cache_budget_bytes'),
           evictions: get('kv_cache_evictions_total'), waiting: get('kv_cache_waiting'),
           waits: get('kv_cache_waits_total') };
}

const short = (q) => ({ messages: [{ role: 'user', content: q }], max_tokens: 16, ignore_eos: true });
const P = short('Solve for x: 3x + 5 = 20.');
const Q = short('What is 15% of 80?');
const LONG = { messages: [{ role: 'user', content: Array.from({ length: 40 }, (_, i) => `Step ${i + 1}: add one.`).join(' ') }],
               max_tokens: 8 };

async function main() {
  const m0 = await metrics();
  check(m0.budget === 2 * 1048576 && m0.used === 0 && m0.evictions === 0, '/metrics: the budget, nothing held yet',
        JSON.stringify(m0));
  const p1 = await client.chat.completions.create(P);
  const m1 = await metrics();
  check(m1.used > 0 && m1.used <= m1.budget, `/metrics: ${m1.used} bytes held after a request`, JSON.stringify(m1));
  const refused = async (req, what) => {
    let err = null;
    try { await client.chat.completions.create(req); } catch (e) { err = e; }
    check(err && err.status === 400 && /reserves [0-9.]+ MiB of KV cache/.test(err.message) &&
          /max_tokens/.test(err.message) && /--kv-budget/.test(err.message),
          `${what}: 400 naming max_tokens and --kv-budget`, err ? err.status + ' ' + err.message : 'no error');
  };
  await refused(LONG, 'a prompt whose reservation passes the budget');
  await refused({ messages: P.messages }, 'a request without max_tokens (it reserves the whole context)');
  const p2 = await client.chat.completions.create(P);
  check(p2.choices[0].message.content === p1.choices[0].message.content, 'the same request after the refusals: the same reply',
        JSON.stringify(p2.choices[0].message.content) + ' vs ' + JSON.stringify(p1.choices[0].message.content));
  // R's max_tokens fills the 10 pages with its prompt and the 64 verify
  // positions, so P cannot run beside it: R streams, and once its first
  // chunk is out P is sent - it waits for R's end (R has ~80 tokens to go)
  const R = { ...Q, max_tokens: 160 - 64 - p1.usage.prompt_tokens };
  const r1 = await client.chat.completions.create(R);
  const w0 = (await metrics()).waits;
  const stream = await client.chat.completions.create({ ...R, stream: true });
  let ra = '', pp = null;
  for await (const c of stream) {
    ra += (c.choices[0] && c.choices[0].delta.content) || '';
    if (!pp) pp = client.chat.completions.create(P);
  }
  const pa = await pp;
  const mw = await metrics();
  check(pa.choices[0].message.content === p1.choices[0].message.content && ra === r1.choices[0].message.content,
        'two whose reservations do not fit together, the second sent while the first streams: each gets its reply alone');
  check(mw.waits === w0 + 1 && mw.waiting === 0, `/metrics: the second waited for its reservation (waits ${w0} -> ${mw.waits})`,
        JSON.stringify(mw));
  const q2 = await client.chat.completions.create({ ...Q, messages: [{ role: 'user', content: 'List three prime numbers.' }] });
  const after = await metrics();
  check(q2.choices[0].message.content.length > 0, 'a request with both slots holding caches is answered');
  check(after.peak > 0 && after.peak <= after.budget && after.used <= after.budget,
        `/metrics: the most held ${after.peak} bytes, within the budget ${after.budget} (evictions ${after.evictions})`);
  console.log(`# kv_budget: held ${after.used} bytes, peak ${after.peak}, evictions ${after.evictions}, waits ${after.waits}`);
}

const timer = setTimeout(() => { console.log('not ok - kv_budget.js finished in time'); process.exit(1); }, 200000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - kv_budget.js threw: ' + (e && e.stack || e)); process.exit(1); });
