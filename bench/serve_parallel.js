// serve_parallel.js - aggregate output tokens per second of a running
// `dflash serve` (BASE) at one concurrency (CONC): REQS chat requests
// (default 24; 6 prompts, max_tokens MAXTOK, default 64, ignore_eos so each
// gives exactly MAXTOK tokens), greedy (TEMP: that temperature, seeded per
// request), DRAFT_MAX as the request's draft_max
// (unset: the server's default; 0: plain decoding), CONC of them in flight
// at a time, through the official openai client. Prints one JSON line.
// Run by bench/serve_parallel.sh.
'use strict';
const OpenAI = require('openai');
const BASE = process.env.BASE, C = +(process.env.CONC || 1), N = +(process.env.REQS || 24);
const MAXTOK = +(process.env.MAXTOK || 64);
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 300000 });
const PROMPTS = ['Solve for x: 3x + 5 = 20.', 'What is 15% of 80?',
  'Write a Python function that checks whether a number is prime.', 'Explain what a hash table is in two sentences.',
  'Tell me a short story about a robot.', 'List three uses of a paperclip.'];
async function one(k) {
  const p = { messages: [{ role: 'user', content: PROMPTS[k % PROMPTS.length] }], max_tokens: MAXTOK, ignore_eos: true };
  if (process.env.DRAFT_MAX !== undefined) p.draft_max = +process.env.DRAFT_MAX;
  if (process.env.TEMP !== undefined) { p.temperature = +process.env.TEMP; p.seed = 1000 + k; }
  const r = await client.chat.completions.create(p);
  return r.usage.completion_tokens;
}
(async () => {
  await one(0); // warm: the template's head cached in slot 0
  let next = 0, tokens = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) { const k = next++; const n = await one(k); tokens += n; } // (tokens += await ...: reads tokens first)
  }));
  const s = (performance.now() - t0) / 1000;
  console.log(JSON.stringify({ conc: C, reqs: N, tokens, wall_s: +s.toFixed(2), tok_per_s: +(tokens / s).toFixed(1) }));
})().catch((e) => { console.error(e); process.exit(1); });
