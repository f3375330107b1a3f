// kv_budget.js - `dflash serve --parallel 2 --kv-budget 2` (demo pair,
// context 1024: the demo target's KV page of 16 positions is 192 KiB, so
// the budget holds 10 pages) through the official openai client (run by
// tests/test_serve_parallel.sh): /metrics reports the budget and the bytes
// held; a short request is answered; a prompt longer than the budget fails
// with a 500 whose message names --kv-budget; the short request then gets
// the same reply as before; two requests at once on the two slots and a
// third after them are answered, and the bytes held never pass the budget
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
           evictions: get('kv_cache_evictions_total') };
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
  let err = null;
  try { await client.chat.completions.create(LONG); } catch (e) { err = e; }
  check(err && err.status === 500 && /KV cache budget exhausted/.test(err.message) && /--kv-budget/.test(err.message),
        'a prompt past the budget: 500 naming --kv-budget', err ? err.status + ' ' + err.message : 'no error');
  const p2 = await client.chat.completions.create(P);
  check(p2.choices[0].message.content === p1.choices[0].message.content, 'the same request after the refusal: the same reply',
        JSON.stringify(p2.choices[0].message.content) + ' vs ' + JSON.stringify(p1.choices[0].message.content));
  // two at once: both slots take pages; then a third request drops an idle cache
  await Promise.all([client.chat.completions.create(P), client.chat.completions.create(Q)]);
  const q2 = await client.chat.completions.create({ ...Q, messages: [{ role: 'user', content: 'List three prime numbers.' }] });
  const after = await metrics();
  check(q2.choices[0].message.content.length > 0, 'a request with both slots holding caches is answered');
  check(after.peak > 0 && after.peak <= after.budget && after.used <= after.budget,
        `/metrics: the most held ${after.peak} bytes, within the budget ${after.budget} (evictions ${after.evictions})`);
  console.log(`# kv_budget: held ${after.used} bytes, peak ${after.peak}, evictions ${after.evictions}`);
}

const timer = setTimeout(() => { console.log('not ok - kv_budget.js finished in time'); process.exit(1); }, 200000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - kv_budget.js threw: ' + (e && e.stack || e)); process.exit(1); });
