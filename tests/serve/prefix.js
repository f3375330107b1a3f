// prefix.js - prompt prefixes across the slots of `dflash serve --parallel N`
// (N >= 3) through the official openai client (run by
// tests/test_serve_parallel.sh). Requests B (greedy DFlash) and C (sampled
// with a seed, plain, logprobs) share a long system prompt (~450 tokens)
// with A. Each is first sent alone. Then A' (the same system prompt,
// streamed, 400 tokens) runs on the slot that holds the prefix; once its
// first token is out (its prompt is in its cache), B and C are sent: the
// slot that holds the prefix is busy, so they land on other slots and copy
// the prefix from it. Both must report cached_tokens > 0 (the shared
// prefix, nearly all of it) in usage and timings.cache_n, /metrics
// prompt_tokens_copied_total must grow, and each reply must equal its reply
// alone, text and log-probabilities. Prints "ok - ..." / "not ok - ...".
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const { check, failures } = require('./tap');
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });

const SYSTEM = Array.from({ length: 12 }, (_, i) =>
  `Rule ${i + 1}: answer in plain words, keep every number exact, show each step of the working on its own line, ` +
  `and never skip a unit or a sign.`).join(' ');

const msgs = (q) => [{ role: 'system', content: SYSTEM }, { role: 'user', content: q }];
const A = { messages: msgs('Solve for x: 3x + 5 = 20.'), max_tokens: 400, ignore_eos: true };
const B = { messages: msgs('What is 15% of 80?'), max_tokens: 24 };
const C = { messages: msgs('List three prime numbers.'), max_tokens: 24, temperature: 0.8, seed: 11, draft_max: 0,
            logprobs: true, top_logprobs: 2 };

async function whole(p) {
  const r = await client.chat.completions.create(p);
  return { text: r.choices[0].message.content, logprobs: r.choices[0].logprobs ? r.choices[0].logprobs.content : null,
           cached: r.usage.prompt_tokens_details.cached_tokens, prompt: r.usage.prompt_tokens,
           cacheN: r.timings && r.timings.cache_n };
}

async function copied() {
  const t = await (await fetch(BASE + '/metrics')).text();
  const m = t.match(/^dflash:prompt_tokens_copied_total ([0-9]+)$/m);
  return m ? Number(m[1]) : NaN;
}

async function main() {
  const refB = await whole(B), refC = await whole(C);
  check(refB.prompt > 400 && refC.prompt > 400, `the prompts are long (${refB.prompt}, ${refC.prompt} tokens)`);
  const m0 = await copied();
  check(Number.isFinite(m0), '/metrics: dflash:prompt_tokens_copied_total', String(m0));
  // A' on the slot that holds the prefix (the longest cached: B's and C's
  // slot), still generating while B and C come
  const ctl = new AbortController();
  const s = await client.chat.completions.create({ ...A, stream: true }, { signal: ctl.signal });
  let started = null;
  const firstToken = new Promise((r) => { started = r; });
  const drained = (async () => {
    try { for await (const ch of s) if (ch.choices.length && ch.choices[0].delta.content) started(); }
    catch (e) { /* aborted below */ }
    started(); // an early end: the checks below say what went wrong
  })();
  await firstToken;
  const [gotB, gotC] = await Promise.all([whole(B), whole(C)]);
  ctl.abort();
  await drained;
  const m1 = await copied();
  for (const [name, got, ref] of [['B', gotB, refB], ['C', gotC, refC]]) {
    check(got.cached > 0 && got.cached >= got.prompt - 40 && got.cacheN === got.cached,
          `${name} on another slot: cached_tokens ${got.cached} of ${got.prompt} (timings.cache_n ${got.cacheN})`);
    check(got.text === ref.text, `${name}: the reply equals its reply alone`,
          JSON.stringify(got.text) + ' vs ' + JSON.stringify(ref.text));
    check(JSON.stringify(got.logprobs) === JSON.stringify(ref.logprobs), `${name}: the logprobs equal those alone`);
  }
  check(m1 - m0 > 400, `/metrics: prompt tokens copied from another slot (${m1 - m0})`);
  console.log(`# prefix: B cached ${gotB.cached} / ${gotB.prompt}, C cached ${gotC.cached} / ${gotC.prompt}, ` +
              `copied ${m1 - m0}`);
}

const timer = setTimeout(() => { console.log('not ok - prefix.js finished in time'); process.exit(1); }, 300000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - prefix.js threw: ' + (e && e.stack || e)); process.exit(1); });
