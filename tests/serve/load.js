// load.js - a bounded load test of `dflash serve` (run by
// tests/test_serve_load.sh): LOAD_N requests (default 200), LOAD_C at a time
// (default 8), mixed streaming / whole replies, DFlash / plain decoding,
// greedy / seeded sampling, some clients aborting mid-stream. Every reply
// that completes must equal the reply the same request gets alone. Then a
// SIGTERM during a stream: the stream must finish, new connections are
// refused. Prints "ok"/"not ok" lines and "# " result lines; writes the
// numbers as JSON to $LOAD_OUT when set.
'use strict';
const fs = require('fs');

const BASE = process.env.BASE;
const N = +(process.env.LOAD_N || 200), C = +(process.env.LOAD_C || 8);
const MAX_TOKENS = 24;
const PROMPTS = [
  'Solve for x: 3x + 5 = 20.',
  'What is 15% of 80?',
  'Write a Python function that checks whether a number is prime.',
  'Explain what a hash table is in two sentences.',
  'Tell me a short story about a robot.',
  'List three uses of a paperclip.',
];

const { check, failures } = require('./tap');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function body(p, variant, stream) {
  const b = { messages: [{ role: 'user', content: PROMPTS[p] }], max_tokens: MAX_TOKENS };
  if (variant === 'plain') b.draft_max = 0;
  if (variant === 'sampled') Object.assign(b, { temperature: 0.5, seed: 1000 + p });
  if (stream) Object.assign(b, { stream: true, stream_options: { include_usage: true } });
  return b;
}

// One request. abort: 'stream' (after the first content delta) or 'early'
// (20 ms after sending). Resolves {text, tokens, ms, ttft, aborted, error}.
async function request(p, variant, stream, abort) {
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), 120000);
  const t0 = performance.now();
  const res = { text: '', tokens: 0, ms: 0, ttft: null, aborted: false, error: null };
  try {
    if (abort === 'early') setTimeout(() => ctl.abort(), 20);
    const r = await fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                           body: JSON.stringify(body(p, variant, stream)), signal: ctl.signal });
    if (r.status !== 200) {
      res.error = 'HTTP ' + r.status + ' ' + (await r.text()).slice(0, 200);
      return res;
    }
    if (!stream) {
      const j = await r.json();
      res.text = j.choices[0].message.content;
      res.tokens = j.usage.completion_tokens;
    } else {
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '', done = false;
      while (!done) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buf += dec.decode(chunk.value, { stream: true });
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const ev = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          if (!ev.startsWith('data: ')) throw new Error('bad event ' + ev);
          const d = ev.slice(6);
          if (d === '[DONE]') { done = true; break; }
          const j = JSON.parse(d);
          if (j.error) throw new Error(j.error.message);
          if (j.usage) res.tokens = j.usage.completion_tokens;
          const c = j.choices[0];
          if (c && c.delta.content) {
            if (res.ttft === null) res.ttft = performance.now() - t0;
            res.text += c.delta.content;
            if (abort === 'stream') { ctl.abort(); await reader.cancel().catch(() => {}); throw Object.assign(new Error('aborted'), { name: 'AbortError' }); }
          }
        }
      }
      if (!done) res.error = 'stream ended without [DONE]';
    }
  } catch (e) {
    if (e.name === 'AbortError' && abort) res.aborted = true;
    else res.error = String(e && e.message || e);
  } finally {
    clearTimeout(timer);
    res.ms = performance.now() - t0;
  }
  return res;
}

const pct = (xs, q) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(q * s.length))] : 0;
};

async function metrics() {
  const t = await (await fetch(BASE + '/metrics')).text();
  const get = (n) => { const m = t.match(new RegExp('^dflash:' + n + ' ([0-9.e+-]+)$', 'm')); return m ? Number(m[1]) : NaN; };
  return { gens: get('generations_total'), cancelled: get('generations_cancelled_total'),
           deferred: get('requests_deferred'), processing: get('requests_processing'),
           drafts: get('spec_decode_num_drafts_total'), accepted: get('spec_decode_num_accepted_tokens_total'),
           draftTokens: get('spec_decode_num_draft_tokens_total') };
}

async function main() {
  // references: each prompt alone, greedy and sampled
  const ref = {};
  for (let p = 0; p < PROMPTS.length; p++) {
    for (const v of ['greedy', 'sampled']) {
      const r = await request(p, v, false, null);
      check(!r.error && r.text.length > 0, `reference ${v} ${p}`, r.error);
      ref[p + v] = r.text;
    }
  }
  const m0 = await metrics();
  // the plan: request i
  const plan = [];
  for (let i = 0; i < N; i++) {
    const p = i % PROMPTS.length;
    const variant = i % 5 === 4 ? 'sampled' : i % 3 === 1 ? 'plain' : 'greedy';
    const stream = i % 2 === 0;
    const abort = i % 10 === 6 ? 'stream' : i % 20 === 13 ? 'early' : null;
    plan.push({ i, p, variant, stream, abort });
  }
  const results = new Array(N);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: C }, async () => {
    while (next < N) {
      const job = plan[next++];
      results[job.i] = { ...job, ...(await request(job.p, job.variant, job.stream, job.abort)) };
    }
  }));
  const wall = (performance.now() - t0) / 1000;

  const done = results.filter((r) => !r.aborted && !r.error);
  const errors = results.filter((r) => r.error);
  const wrong = done.filter((r) => r.text !== ref[r.p + (r.variant === 'sampled' ? 'sampled' : 'greedy')]);
  const aborted = results.filter((r) => r.aborted);
  const planned = plan.filter((x) => x.abort === 'stream').length;
  check(errors.length === 0, `load: no errors (${errors.length})`, errors.slice(0, 3).map((r) => r.i + ': ' + r.error).join('; '));
  check(wrong.length === 0, `load: every reply equals the single-request reply (${done.length} compared)`,
        wrong.slice(0, 2).map((r) => `#${r.i} ${r.variant} ${r.stream ? 'stream' : 'whole'}: ${JSON.stringify(r.text)} vs ${JSON.stringify(ref[r.p + (r.variant === 'sampled' ? 'sampled' : 'greedy')])}`).join('; '));
  check(aborted.length >= planned, `load: clients aborted mid-stream (${aborted.length})`);
  check(done.length + aborted.length === N, 'load: every request answered or aborted');

  // the server has settled: nothing queued or running, aborts were noticed
  let m1 = await metrics();
  for (let k = 0; k < 100 && (m1.processing || m1.deferred); k++) { await sleep(50); m1 = await metrics(); }
  check(m1.processing === 0 && m1.deferred === 0, 'load: queue empty afterwards', JSON.stringify(m1));
  check(m1.cancelled - m0.cancelled >= planned, `load: aborted generations were stopped (${m1.cancelled - m0.cancelled})`);
  check(m1.gens - m0.gens >= done.length, 'load: generations counted');
  const health = await fetch(BASE + '/health');
  check(health.status === 200, 'load: server healthy afterwards');

  const lat = done.map((r) => r.ms), ttft = done.filter((r) => r.ttft !== null).map((r) => r.ttft);
  const tokens = done.reduce((s, r) => s + r.tokens, 0);
  const out = {
    requests: N, concurrency: C, max_tokens: MAX_TOKENS, completed: done.length, aborted: aborted.length,
    wall_s: +wall.toFixed(2), req_per_s: +(N / wall).toFixed(2), completion_tok_per_s: +(tokens / wall).toFixed(1),
    latency_ms: { p50: +pct(lat, 0.5).toFixed(1), p90: +pct(lat, 0.9).toFixed(1), p99: +pct(lat, 0.99).toFixed(1),
                  max: +Math.max(...lat).toFixed(1) },
    ttft_ms: { p50: +pct(ttft, 0.5).toFixed(1), p90: +pct(ttft, 0.9).toFixed(1), p99: +pct(ttft, 0.99).toFixed(1) },
    tau: m1.drafts > m0.drafts ? +(1 + (m1.accepted - m0.accepted) / (m1.drafts - m0.drafts)).toFixed(2) : 0,
  };
  console.log('# load: ' + JSON.stringify(out));
  if (process.env.LOAD_OUT) fs.writeFileSync(process.env.LOAD_OUT, JSON.stringify(out, null, 1) + '\n');

  // graceful shutdown: SIGTERM while a stream runs; it must complete
  const pid = +process.env.SV_PID;
  if (pid) {
    const long = { messages: [{ role: 'user', content: PROMPTS[0] }], max_tokens: 200, ignore_eos: true, stream: true,
                   stream_options: { include_usage: true } };
    const r = await fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                                           body: JSON.stringify(long), signal: AbortSignal.timeout(120000) });
    const reader = r.body.getReader();
    let text = '', signalled = false;
    for (;;) {
      const c = await reader.read();
      if (c.done) break;
      text += Buffer.from(c.value).toString();
      if (!signalled && text.split('"content":"').length > 3) { process.kill(pid, 'SIGTERM'); signalled = true; }
    }
    const usage = text.match(/"completion_tokens":(\d+)/);
    check(signalled && text.trimEnd().endsWith('data: [DONE]') && usage && +usage[1] === 200,
          'SIGTERM during a stream: the stream finishes (200 tokens, [DONE])', text.slice(-200));
    await sleep(300);
    let refused = false;
    try { await fetch(BASE + '/health', { signal: AbortSignal.timeout(5000) }); } catch (e) { refused = true; }
    check(refused, 'after SIGTERM: new connections refused');
  }
}

const timer = setTimeout(() => { console.log('not ok - load.js finished in time'); process.exit(1); }, 560000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - load.js threw: ' + (e && e.stack || e)); process.exit(1); });
