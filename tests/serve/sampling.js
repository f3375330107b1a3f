// sampling.js - the logit controls and log-probabilities of `dflash serve`
// through the official openai client: logprobs / top_logprobs (chat),
// logprobs N (completions) and llama-server's n_probs in OpenAI's shapes,
// streaming and not, with the draft and without (draft_max 0) identical;
// min_p, repeat_penalty + repeat_last_n, frequency_penalty,
// presence_penalty and logit_bias each change the output, and DFlash output
// with them equals plain output, greedy and sampled; every bad value is a
// 400 naming its field. Run by tests/test_serve.sh against a server with
// the demo pair (--api-key $API_KEY). Prints "ok - ..." / "not ok - ...".
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const MODEL = 'target';
const PROMPTS = ['Solve for x: 3x + 5 = 20.', 'Tell me a story about a cat.'];

const { check, failures } = require('./tap');
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

async function raw(path, body) {
  const r = await fetch(BASE + path, { method: 'POST', body: JSON.stringify(body),
    headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, json, text };
}

// one chat request, streamed or not: { text, logprobs (content entries or null), finish }
async function chat(q, extra, stream) {
  const params = { model: MODEL, messages: [{ role: 'user', content: q }], max_tokens: 40, ...extra };
  if (!stream) {
    const r = await client.chat.completions.create(params);
    const c = r.choices[0];
    return { text: c.message.content, logprobs: c.logprobs ? c.logprobs.content : null, finish: c.finish_reason,
             n: r.usage.completion_tokens };
  }
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = '', lps = null, finish = null;
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    const c = ch.choices[0];
    text += c.delta.content || '';
    if (c.logprobs) lps = (lps || []).concat(c.logprobs.content);
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, logprobs: lps, finish };
}

async function completion(prompt, extra, stream) {
  const params = { model: MODEL, prompt, max_tokens: 32, ...extra };
  if (!stream) {
    const r = await client.completions.create(params);
    return { text: r.choices[0].text, logprobs: r.choices[0].logprobs };
  }
  const s = await client.completions.create({ ...params, stream: true });
  let text = '';
  const lp = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    text += ch.choices[0].text;
    const l = ch.choices[0].logprobs;
    if (l) for (const k of Object.keys(lp)) lp[k] = lp[k].concat(l[k]);
  }
  return { text, logprobs: lp };
}

async function main() {
  // ---- chat logprobs: shape, draft == plain, stream == whole ---------------------
  for (const q of PROMPTS) {
    for (const temp of [0, 0.8]) {
      const ex = { logprobs: true, top_logprobs: 3, temperature: temp, seed: 7 };
      const a = await chat(q, ex, false), b = await chat(q, { ...ex, draft_max: 0 }, false);
      const c = await chat(q, ex, true), d = await chat(q, { ...ex, draft_max: 0 }, true);
      const tag = `"${q.slice(0, 12)}" temp ${temp}`;
      check(Array.isArray(a.logprobs) && a.logprobs.length === a.n, `chat logprobs ${tag}: one entry per token`,
            `${a.logprobs && a.logprobs.length} entries, ${a.n} tokens`);
      check(a.logprobs && a.logprobs.map((e) => e.token).join('') === a.text, `chat logprobs ${tag}: tokens join to the content`);
      const shape = a.logprobs && a.logprobs.every((e) => typeof e.logprob === 'number' && e.logprob <= 0 &&
        Array.isArray(e.bytes) && e.top_logprobs.length === 3 &&
        e.top_logprobs.every((t, i) => typeof t.token === 'string' && Array.isArray(t.bytes) &&
                                       (i === 0 || t.logprob <= e.top_logprobs[i - 1].logprob)) &&
        e.logprob <= e.top_logprobs[0].logprob + 1e-9 &&
        (temp > 0 || (e.token === e.top_logprobs[0].token && e.logprob === e.top_logprobs[0].logprob)));
      check(shape, `chat logprobs ${tag}: OpenAI's entry shape, top 3 descending` + (temp ? '' : ', greedy = the top one'),
            JSON.stringify(a.logprobs && a.logprobs[0]));
      check(a.text === b.text && same(a.logprobs, b.logprobs), `chat logprobs ${tag}: DFlash == plain (text and every number)`);
      check(c.text === a.text && same(c.logprobs, a.logprobs) && d.text === a.text && same(d.logprobs, a.logprobs),
            `chat logprobs ${tag}: streamed == whole, with and without the draft`);
    }
  }
  const np = await chat(PROMPTS[0], { n_probs: 3 }, false), lp3 = await chat(PROMPTS[0], { logprobs: true, top_logprobs: 3 }, false);
  check(same(np.logprobs, lp3.logprobs), "llama-server's n_probs 3 == logprobs + top_logprobs 3");
  const nolp = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 });
  check(nolp.choices[0].logprobs === null, 'no logprobs asked: "logprobs": null');
  const lp0 = await chat(PROMPTS[0], { logprobs: true }, false);
  check(lp0.logprobs.every((e) => e.top_logprobs.length === 0), 'logprobs true alone: no alternatives');
  // a stop string: entries only for the tokens whose text is all in the content
  const full = await chat(PROMPTS[0], { logprobs: true }, false);
  const cut = full.text.indexOf(' ', 10);
  if (cut > 0) {
    const stop = full.text.slice(cut, cut + 3);
    for (const stream of [false, true]) {
      const s = await chat(PROMPTS[0], { logprobs: true, stop: [stop] }, stream);
      const joined = s.logprobs.map((e) => e.token).join('');
      check(s.text === full.text.slice(0, full.text.indexOf(stop)) && s.text.startsWith(joined) &&
            same(s.logprobs, full.logprobs.slice(0, s.logprobs.length)),
            `stop string ${stream ? 'streamed' : 'whole'}: logprobs of the tokens before the cut`, JSON.stringify([stop, s.text, joined]));
    }
  }

  // ---- completions logprobs N ----------------------------------------------------------
  for (const stream of [false, true]) {
    const a = await completion('Once upon a time', { logprobs: 2 }, stream);
    const b = await completion('Once upon a time', { logprobs: 2, draft_max: 0 }, !stream);
    const l = a.logprobs;
    check(l && l.tokens.join('') === a.text && l.token_logprobs.length === l.tokens.length &&
          l.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2) &&
          l.text_offset[0] === 0 && l.text_offset.every((o, i) => i === 0 || o >= l.text_offset[i - 1]),
          `completions logprobs 2 ${stream ? 'streamed' : 'whole'}: tokens, token_logprobs, top_logprobs, text_offset`,
          JSON.stringify(l).slice(0, 300));
    check(a.text === b.text && same(a.logprobs, b.logprobs),
          `completions logprobs ${stream ? 'streamed' : 'whole'} == plain ${stream ? 'whole' : 'streamed'}`);
  }

  // ---- the controls: they change the output; DFlash == plain; stream == whole ---------
  const tokOf = async (s) => (await raw('/tokenize', { content: s })).json.tokens;
  const off = {};
  for (const temp of [0, 0.8]) { // one request at a time: the server runs with --queue 1
    off[temp] = [];
    for (const q of PROMPTS) off[temp].push(await chat(q, { temperature: temp, seed: 11 }, false));
  }
  const firstTok = (await tokOf(off[0][0].text))[0];
  const controls = [
    ['frequency_penalty 1', { frequency_penalty: 1 }],
    ['frequency_penalty -1', { frequency_penalty: -1 }],
    ['presence_penalty 1.5', { presence_penalty: 1.5 }],
    ['repeat_penalty 1.5, repeat_last_n 32', { repeat_penalty: 1.5, repeat_last_n: 32 }],
    ['repeat_penalty 1.3, repeat_last_n -1', { repeat_penalty: 1.3, repeat_last_n: -1 }],
    ['min_p 0.3', { min_p: 0.3 }, 'sampled only'],
    ['logit_bias: the first greedy token -100', { logit_bias: { [firstTok]: -100 } }],
  ];
  for (const [name, ex, only] of controls) {
    for (const temp of only ? [0.8] : [0, 0.8]) {
      let changed = 0, lossless = true, streamed = true;
      for (let i = 0; i < PROMPTS.length; i++) {
        const p = { ...ex, temperature: temp, seed: 11 };
        const a = await chat(PROMPTS[i], p, false), b = await chat(PROMPTS[i], { ...p, draft_max: 0 }, false);
        const c = await chat(PROMPTS[i], p, true);
        changed += a.text !== off[temp][i].text;
        lossless = lossless && a.text === b.text;
        streamed = streamed && c.text === a.text;
        if (name.startsWith('logit_bias') && i === 0) { // the emitted tokens, from their logprobs entries
          const banned = (await raw('/detokenize', { tokens: [firstTok] })).json.content;
          const e = await chat(PROMPTS[i], { ...p, logprobs: true }, false);
          check(e.text === a.text && !e.logprobs.some((x) => x.token === banned),
                `${name}, temp ${temp}: the banned token ${JSON.stringify(banned)} is not emitted`);
        }
      }
      check(changed > 0, `${name}, temp ${temp}: changes the output`);
      check(lossless, `${name}, temp ${temp}: DFlash == plain`);
      check(streamed, `${name}, temp ${temp}: streamed == whole`);
    }
  }
  const cb = await completion('Once upon a time', { frequency_penalty: 1.5, logit_bias: { 13: 3 }, logprobs: 1 }, false);
  const cbp = await completion('Once upon a time', { frequency_penalty: 1.5, logit_bias: { 13: 3 }, logprobs: 1, draft_max: 0 }, false);
  check(cb.text === cbp.text && same(cb.logprobs, cbp.logprobs), 'completions with penalties and logit_bias: DFlash == plain');

  // ---- bad values: 400 naming the field ---------------------------------------------------
  const msg = [{ role: 'user', content: 'hi' }];
  const bad = [
    ['/v1/chat/completions', { messages: msg, frequency_penalty: 3 }, 'frequency_penalty'],
    ['/v1/chat/completions', { messages: msg, presence_penalty: -2.5 }, 'presence_penalty'],
    ['/v1/chat/completions', { messages: msg, presence_penalty: 'x' }, 'presence_penalty'],
    ['/v1/chat/completions', { messages: msg, min_p: 1.5 }, 'min_p'],
    ['/v1/chat/completions', { messages: msg, repeat_penalty: 0 }, 'repeat_penalty'],
    ['/v1/chat/completions', { messages: msg, repeat_last_n: -2 }, 'repeat_last_n'],
    ['/v1/chat/completions', { messages: msg, logit_bias: { abc: 1 } }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logit_bias: { 5: 101 } }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logit_bias: { 99999999: 1 } }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logit_bias: { '-1': 1 } }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logit_bias: { 5: 'x' } }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logit_bias: [[5, 1]] }, 'logit_bias'],
    ['/v1/chat/completions', { messages: msg, logprobs: 'yes' }, 'logprobs'],
    ['/v1/chat/completions', { messages: msg, logprobs: true, top_logprobs: 21 }, 'top_logprobs'],
    ['/v1/chat/completions', { messages: msg, top_logprobs: 2 }, 'top_logprobs'],
    ['/v1/chat/completions', { messages: msg, n_probs: 21 }, 'n_probs'],
    ['/v1/chat/completions', { messages: msg, logprobs: true, top_logprobs: 2, n_probs: 3 }, 'n_probs'],
    ['/v1/completions', { prompt: 'a', logprobs: 21 }, 'logprobs'],
    ['/v1/completions', { prompt: 'a', logprobs: true }, 'logprobs'],
    ['/v1/completions', { prompt: 'a', top_logprobs: 2 }, 'top_logprobs'],
  ];
  for (const [path, body, param] of bad) {
    const r = await raw(path, body);
    const e = r.json && r.json.error;
    check(r.status === 400 && e && e.param === param && e.message.length > 0,
          `400 naming ${param}: ${JSON.stringify(body).slice(0, 80)}`, r.status + ' ' + r.text.slice(0, 200));
  }
}

const timer = setTimeout(() => { console.log('not ok - sampling.js finished in time'); process.exit(1); }, 280000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - sampling.js threw: ' + (e && e.stack || e)); process.exit(1); });
