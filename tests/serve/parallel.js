// parallel.js - continuous batching in `dflash serve --parallel N` through
// the official openai client (run by tests/test_serve_parallel.sh against a
// server with the demo pair and --parallel $SLOTS): every request is first
// sent alone, one at a time; then all of them at once, PAR_ROUNDS times
// (PAR_PER_SLOT requests per slot, default 3: more than the slots, some queue), mixed greedy / sampled with a seed,
// DFlash on and off (draft_max 0), streamed and whole, with logprobs, a
// grammar, and clients that abort mid-stream. Every reply that completes
// must equal its reply alone, text and log-probabilities. /metrics must show
// steps shared by two or more sequences, one tau per slot, and /slots one
// entry per slot. Prints "ok - ..." / "not ok - ..." lines.
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const SLOTS = +(process.env.SLOTS || 4);
const ROUNDS = +(process.env.PAR_ROUNDS || 2);
const { check, failures } = require('./tap');
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const PROMPTS = [
  'Solve for x: 3x + 5 = 20.',
  'What is 15% of 80?',
  'Write a Python function that checks whether a number is prime.',
  'Tell me a short story about a robot.',
  'List three uses of a paperclip.',
];

// request k's settings: a mix over prompts, decoding modes and reply forms
function plan(k) {
  const p = { messages: [{ role: 'user', content: PROMPTS[k % PROMPTS.length] }], max_tokens: 32 + 4 * (k % 5) };
  const mode = k % 6;
  if (mode === 1) p.draft_max = 0;                                          // plain greedy
  if (mode === 2) Object.assign(p, { temperature: 0.7, seed: 100 + k });    // sampled, DFlash
  if (mode === 3) Object.assign(p, { temperature: 0.9, seed: 7 * k, draft_max: 0, logprobs: true, top_logprobs: 2 });
  // greedy DFlash with logprobs, a fixed draft length: draft steps under load
  // whatever the auto control would pick on this machine (under ASan drafting
  // can lose to plain decoding, and auto then drafts nothing)
  if (mode === 4) Object.assign(p, { logprobs: true, top_logprobs: 3, draft_max: 6 });
  if (mode === 5) Object.assign(p, { grammar: 'root ::= [a-z ]+ "."', temperature: 0.5, seed: k });
  return { params: p, stream: k % 2 === 0, abort: k % 4 === 2 }; // the aborting clients stream
}

// one request: { text, logprobs, n, aborted, error }; abort: stop reading
// (and close the connection) after the first content piece
async function run(q) {
  const out = { text: '', logprobs: null, n: 0, aborted: false, error: null };
  const ctl = new AbortController();
  try {
    if (!q.stream) {
      const r = await client.chat.completions.create(q.params, { signal: ctl.signal });
      const c = r.choices[0];
      out.text = c.message.content;
      out.logprobs = c.logprobs ? c.logprobs.content : null;
      out.n = r.usage.completion_tokens;
      return out;
    }
    const s = await client.chat.completions.create({ ...q.params, stream: true, stream_options: { include_usage: true } },
                                                   { signal: ctl.signal });
    for await (const ch of s) {
      if (ch.usage) out.n = ch.usage.completion_tokens;
      if (!ch.choices.length) continue;
      const c = ch.choices[0];
      out.text += c.delta.content || '';
      if (c.logprobs) out.logprobs = (out.logprobs || []).concat(c.logprobs.content);
      if (q.abort && out.text) {
        ctl.abort();
        out.aborted = true;
        return out;
      }
    }
  } catch (e) {
    if (q.abort && (e.name === 'AbortError' || e instanceof OpenAI.APIUserAbortError)) out.aborted = true;
    else out.error = String(e && e.message || e);
  }
  return out;
}

async function metrics() {
  const t = await (await fetch(BASE + '/metrics')).text();
  const get = (n) => { const m = t.match(new RegExp('^dflash:' + n + ' ([0-9.e+-]+)$', 'm')); return m ? Number(m[1]) : NaN; };
  const taus = [...t.matchAll(/^dflash:slot_tau\{slot="(\d+)"\} ([0-9.]+)$/gm)].map((m) => Number(m[2]));
  const draftLens = [...t.matchAll(/^dflash:slot_draft_len\{slot="(\d+)"\} ([0-9.]+)$/gm)].map((m) => Number(m[2]));
  return { slots: get('slots'), maxBatch: get('batch_size_max'), steps: get('batch_steps_total'),
           seqSteps: get('batch_sequence_steps_total'), draftSteps: get('batch_draft_steps_total'),
           draftSeqSteps: get('batch_draft_sequence_steps_total'), maxDraft: get('batch_draft_size_max'),
           unbatched: get('batch_unbatched_steps_total'),
           processing: get('requests_processing'),
           deferred: get('requests_deferred'), cancelled: get('generations_cancelled_total'), taus, draftLens,
           forwardS: get('batch_forward_seconds_total'), draftS: get('batch_draft_seconds_total'),
           argmaxS: get('batch_argmax_seconds_total'), lockS: get('batch_lock_seconds_total'),
           activeS: get('batch_active_seconds_total'), argmaxSteps: get('batch_argmax_steps_total') };
}

async function main() {
  const N = (+process.env.PAR_PER_SLOT || 3) * SLOTS; // more than the slots: some wait in the queue
  const qs = Array.from({ length: N }, (_, k) => plan(k));
  // alone, one at a time, nothing aborted
  const ref = [];
  for (let k = 0; k < N; k++) {
    const r = await run({ ...qs[k], abort: false });
    check(!r.error && r.n > 0, `alone: request ${k}`, r.error);
    ref.push(r);
  }
  const m0 = await metrics();
  for (let round = 0; round < ROUNDS; round++) {
    const got = await Promise.all(qs.map((q) => run(q)));
    const errors = got.filter((r) => r.error), aborted = got.filter((r) => r.aborted);
    check(errors.length === 0, `round ${round}: no errors`, errors.map((r) => r.error).join('; '));
    check(aborted.length === qs.filter((q) => q.abort).length, `round ${round}: the planned clients aborted (${aborted.length})`);
    let bad = [];
    for (let k = 0; k < N; k++) {
      const g = got[k], r = ref[k];
      if (g.error) continue;
      if (g.aborted) { // what came before the abort is the start of the reply alone
        if (!r.text.startsWith(g.text)) bad.push(`#${k} aborted: ${JSON.stringify(g.text)} is not a prefix`);
        continue;
      }
      if (g.text !== r.text || g.n !== r.n) bad.push(`#${k}: ${JSON.stringify(g.text)} vs ${JSON.stringify(r.text)} alone`);
      else if (JSON.stringify(g.logprobs) !== JSON.stringify(r.logprobs)) bad.push(`#${k}: logprobs differ`);
    }
    check(bad.length === 0, `round ${round}: every reply under load equals its reply alone (${N} requests, ${SLOTS} slots)`,
          bad.slice(0, 3).join('; '));
  }
  let m1 = await metrics();
  for (let k = 0; k < 100 && (m1.processing || m1.deferred); k++) { await sleep(50); m1 = await metrics(); }
  check(m1.processing === 0 && m1.deferred === 0, 'afterwards: nothing running or queued', JSON.stringify(m1));
  check(m1.slots === SLOTS && m1.taus.length === SLOTS, `/metrics: ${SLOTS} slots, a tau per slot`, JSON.stringify(m1));
  check(m1.taus.some((t) => t > 1), '/metrics: a slot drafted (tau > 1)', JSON.stringify(m1.taus));
  check(m1.draftLens.length === SLOTS && m1.draftLens.every((d) => d >= 0 && d <= 15),
        `/metrics: a draft length per slot`, JSON.stringify(m1.draftLens));
  const spent = [m1.forwardS - m0.forwardS, m1.draftS - m0.draftS, m1.argmaxS - m0.argmaxS, m1.lockS - m0.lockS];
  check(spent[0] > 0 && spent[1] > 0 && spent[2] > 0 && spent[3] >= 0 && m1.argmaxSteps > m0.argmaxSteps &&
        spent.reduce((a, b) => a + b) <= m1.activeS - m0.activeS,
        '/metrics: seconds in forward, draft and argmax steps and locked, within the active seconds',
        JSON.stringify({ spent, active: m1.activeS - m0.activeS }));
  check(m1.maxBatch >= 2, `/metrics: steps shared by several sequences (most ${m1.maxBatch})`);
  check(m1.cancelled > m0.cancelled, `/metrics: aborted generations were stopped (${m1.cancelled - m0.cancelled})`);
  const mean = (m1.seqSteps - m0.seqSteps) / Math.max(1, m1.steps - m0.steps);
  console.log(`# parallel: ${m1.steps - m0.steps} steps under load, mean batch ${mean.toFixed(2)} sequences, most ${m1.maxBatch}`);
  check(m1.unbatched === m0.unbatched, `/metrics: every step of several sequences was batched (${m1.unbatched - m0.unbatched} not)`);
  const nd = m1.draftSteps - m0.draftSteps;
  check(nd > 0 && m1.draftSeqSteps - m0.draftSeqSteps >= nd, `/metrics: draft blocks ran in draft steps (${nd})`,
        JSON.stringify(m1));
  console.log(`# parallel: ${nd} draft steps under load, mean ${((m1.draftSeqSteps - m0.draftSeqSteps) / nd).toFixed(2)} blocks, most ${m1.maxDraft}`);
  const props = await (await fetch(BASE + '/props')).json();
  check(props.total_slots === SLOTS, `/props: total_slots ${SLOTS}`, JSON.stringify(props.total_slots));
  const slots = await (await fetch(BASE + '/slots')).json();
  check(Array.isArray(slots) && slots.length === SLOTS && slots.every((s, i) => s.id === i && 'tau' in s),
        `/slots: ${SLOTS} slots`, JSON.stringify(slots).slice(0, 200));
}

const timer = setTimeout(() => { console.log('not ok - parallel.js finished in time'); process.exit(1); }, 500000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - parallel.js threw: ' + (e && e.stack || e)); process.exit(1); });
