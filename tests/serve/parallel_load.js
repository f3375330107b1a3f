// parallel_load.js - a bounded load on `dflash serve --parallel $SLOTS` through
// the official openai client (run by tests/test_serve_parallel.sh with 16
// slots): KINDS distinct requests (prompts x decoding: greedy with the
// draft's auto length, a fixed length and none; sampled with a seed, with
// and without the draft, logprobs; streamed and whole) are first sent alone,
// one at a time; then, for each concurrency C of LOAD_CONCS (default
// "16 32": as many clients as slots, then twice as many, half of them
// queued), LOAD_PER_CLIENT C requests (default 2 C) with C in flight at a
// time, the kinds in turn.
// Every reply must equal its reply alone, text and log-probabilities;
// /metrics must show shared steps, none of them run one sequence at a time,
// and nothing left running. Prints "ok - ..." / "not ok - ..." lines and a
// "# " line per concurrency (tok/s and the mean batch: for reading, not
// checked). LOAD_MAX_TOKENS (default 24) sizes the replies.
'use strict';
const OpenAI = require('openai');
const { check, failures } = require('./tap');

const BASE = process.env.BASE;
const SLOTS = +(process.env.SLOTS || 16);
const CONCS = (process.env.LOAD_CONCS || '16 32').split(/\s+/).filter(Boolean).map(Number);
const MAX_TOKENS = +(process.env.LOAD_MAX_TOKENS || 24);
const PER_CLIENT = +(process.env.LOAD_PER_CLIENT || 2);
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 300000 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const PROMPTS = [
  'Solve for x: 3x + 5 = 20.',
  'Write a Python function that checks whether a number is prime.',
  'Explain what a hash table is in two sentences.',
  'Tell me a short story about a robot.',
];
const MODES = [
  {},                                                            // greedy, DFlash auto
  { draft_max: 0 },                                              // greedy, plain
  { draft_max: 3 },                                              // greedy, DFlash 3
  { temperature: 0.7, seed: 11 },                                // sampled, DFlash auto
  { temperature: 0.9, seed: 5, draft_max: 0, logprobs: true, top_logprobs: 2 }, // sampled, plain
  { logprobs: true, top_logprobs: 3 },                           // greedy DFlash with logprobs
];
const KINDS = PROMPTS.length * MODES.length; // 24; a prompt meets every mode

function kind(k) {
  const params = { messages: [{ role: 'user', content: PROMPTS[k % PROMPTS.length] }], max_tokens: MAX_TOKENS,
                   ...MODES[Math.floor(k / PROMPTS.length) % MODES.length] };
  return { params, stream: k % 2 === 1 };
}

async function run(q) {
  const out = { text: '', logprobs: null, n: 0, error: null };
  try {
    if (!q.stream) {
      const r = await client.chat.completions.create(q.params);
      out.text = r.choices[0].message.content;
      out.logprobs = r.choices[0].logprobs ? r.choices[0].logprobs.content : null;
      out.n = r.usage.completion_tokens;
      return out;
    }
    const s = await client.chat.completions.create({ ...q.params, stream: true, stream_options: { include_usage: true } });
    for await (const ch of s) {
      if (ch.usage) out.n = ch.usage.completion_tokens;
      if (!ch.choices.length) continue;
      out.text += ch.choices[0].delta.content || '';
      if (ch.choices[0].logprobs) out.logprobs = (out.logprobs || []).concat(ch.choices[0].logprobs.content);
    }
  } catch (e) {
    out.error = String(e && e.message || e);
  }
  return out;
}

async function metrics() {
  const t = await (await fetch(BASE + '/metrics')).text();
  const get = (n) => { const m = t.match(new RegExp('^dflash:' + n + ' ([0-9.e+-]+)$', 'm')); return m ? Number(m[1]) : NaN; };
  return { maxBatch: get('batch_size_max'), steps: get('batch_steps_total'), seqSteps: get('batch_sequence_steps_total'),
           unbatched: get('batch_unbatched_steps_total'), processing: get('requests_processing'),
           deferred: get('requests_deferred'), slots: get('slots') };
}

async function main() {
  const ref = [];
  for (let k = 0; k < KINDS; k++) {
    const r = await run(kind(k));
    check(!r.error && r.n > 0, `alone: kind ${k}`, r.error);
    ref.push(r);
  }
  for (const C of CONCS) {
    const N = PER_CLIENT * C;
    const m0 = await metrics();
    const got = new Array(N);
    let next = 0, tokens = 0;
    const t0 = performance.now();
    await Promise.all(Array.from({ length: C }, async () => {
      while (next < N) {
        const i = next++;
        got[i] = await run(kind(i % KINDS));
        tokens += got[i].n;
      }
    }));
    const s = (performance.now() - t0) / 1000;
    const m1 = await metrics();
    const errors = got.filter((r) => r.error);
    check(errors.length === 0, `concurrency ${C}: no errors`, errors.map((r) => r.error).slice(0, 3).join('; '));
    const bad = [];
    for (let i = 0; i < N; i++) {
      const g = got[i], r = ref[i % KINDS];
      if (g.error) continue;
      if (g.text !== r.text || g.n !== r.n) bad.push(`#${i} (kind ${i % KINDS}): ${JSON.stringify(g.text)} vs ${JSON.stringify(r.text)} alone`);
      else if (JSON.stringify(g.logprobs) !== JSON.stringify(r.logprobs)) bad.push(`#${i} (kind ${i % KINDS}): logprobs differ`);
    }
    check(bad.length === 0, `concurrency ${C}: every reply equals its reply alone (${N} requests, ${SLOTS} slots)`,
          bad.slice(0, 3).join('; '));
    check(m1.unbatched === m0.unbatched, `concurrency ${C}: every step of several sequences was batched (${m1.unbatched - m0.unbatched} not)`);
    const mean = (m1.seqSteps - m0.seqSteps) / Math.max(1, m1.steps - m0.steps);
    console.log(`# concurrency ${C}: ${N} requests, ${tokens} tokens in ${s.toFixed(2)} s (${(tokens / s).toFixed(1)} tok/s), ` +
                `${m1.steps - m0.steps} steps, mean batch ${mean.toFixed(2)} sequences, most ${m1.maxBatch}`);
  }
  let m = await metrics();
  for (let k = 0; k < 100 && (m.processing || m.deferred); k++) { await sleep(50); m = await metrics(); }
  check(m.processing === 0 && m.deferred === 0, 'afterwards: nothing running or queued', JSON.stringify(m));
  check(m.slots === SLOTS && m.maxBatch >= 2, `/metrics: ${SLOTS} slots, steps shared by several sequences (most ${m.maxBatch})`,
        JSON.stringify(m));
}

const timer = setTimeout(() => { console.log('not ok - parallel_load.js finished in time'); process.exit(1); }, 560000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - parallel_load.js threw: ' + (e && e.stack || e)); process.exit(1); });
