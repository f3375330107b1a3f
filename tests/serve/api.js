// api.js - `dflash serve` through the official openai client and raw HTTP:
// chat, streaming, stop strings, seeds, usage and timings, DFlash == plain,
// completions, prompt-cache reuse, tokenize, metrics, every error case, the
// queue limit and clients that go away. Run by tests/test_serve.sh against
// a server started with --api-key $API_KEY --queue 1 --ctx-size 1024.
// Prints "ok - ..." / "not ok - ..." lines.
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const MODEL = 'target';
const MATH = 'Solve for x: 3x + 5 = 20.';

const { check, failures } = require('./tap');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });
const auth = { Authorization: 'Bearer ' + KEY };

// raw request: body is an object (sent as JSON), a string or a Buffer
async function http(method, path, body, headers = {}, signal) {
  const h = { ...auth, ...headers };
  let data = body;
  if (body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body) && !(body instanceof ReadableStream)) {
    data = JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const opts = { method, headers: h, body: data, signal: signal || AbortSignal.timeout(120000) };
  if (body instanceof ReadableStream) opts.duplex = 'half';
  const r = await fetch(BASE + path, opts);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, type: r.headers.get('content-type'), text, json };
}

const chat = (q, extra = {}) => client.chat.completions.create({
  model: MODEL, messages: [{ role: 'user', content: q }], max_tokens: 48, ...extra });

async function streamChat(params) {
  const stream = await client.chat.completions.create({ model: MODEL, stream: true, ...params });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}
const deltas = (chunks) => chunks.filter((c) => c.choices.length && c.choices[0].delta.content)
  .map((c) => c.choices[0].delta.content);

async function metric(name) {
  const r = await http('GET', '/metrics');
  const m = r.text.match(new RegExp('^dflash:' + name + ' ([0-9.e+-]+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}

async function main() {
  // ---- models, health --------------------------------------------------------
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === MODEL, 'models.list: one model "target"',
        JSON.stringify(models.data));
  const health = await http('GET', '/health', undefined, { Authorization: '' });
  check(health.status === 200 && health.json && health.json.status === 'ok', 'GET /health without a key: ok');

  // ---- chat, non-streaming ---------------------------------------------------
  const r1 = await chat(MATH);
  const text1 = r1.choices[0].message.content;
  check(r1.object === 'chat.completion' && /^chatcmpl-/.test(r1.id) && typeof r1.created === 'number' &&
        r1.model === MODEL, 'chat: id, object, created, model', JSON.stringify(r1).slice(0, 200));
  check(r1.choices.length === 1 && r1.choices[0].message.role === 'assistant' && text1.length > 0,
        'chat: one assistant message', text1);
  check(['stop', 'length'].includes(r1.choices[0].finish_reason), 'chat: finish_reason', r1.choices[0].finish_reason);
  const u = r1.usage;
  check(u.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens,
        'chat: usage adds up', JSON.stringify(u));
  const tm = r1.timings;
  check(tm && tm.predicted_n === u.completion_tokens && tm.prompt_n + tm.cache_n === u.prompt_tokens &&
        tm.predicted_ms > 0 && tm.predicted_per_second > 0, 'chat: timings (llama-server fields)', JSON.stringify(tm));
  check(tm.draft_n > 0 && tm.draft_n_accepted > 0 && tm.tau > 1, 'chat: DFlash drafted and was accepted (tau > 1)',
        JSON.stringify(tm));
  const lenReply = await chat(MATH, { max_tokens: 5 });
  check(lenReply.choices[0].finish_reason === 'length' && lenReply.usage.completion_tokens === 5,
        'max_tokens 5: finish_reason length, 5 tokens', JSON.stringify(lenReply.usage));
  const mct = await chat(MATH, { max_tokens: undefined, max_completion_tokens: 7 });
  check(mct.usage.completion_tokens === 7, 'max_completion_tokens 7', mct.usage.completion_tokens);

  // ---- DFlash vs plain decoding ----------------------------------------------
  const plain = await chat(MATH, { draft_max: 0 });
  check(plain.choices[0].message.content === text1, 'greedy: plain decoding (draft_max 0) == DFlash text',
        plain.choices[0].message.content);
  check(plain.timings.draft_n === 0, 'draft_max 0: no drafts', JSON.stringify(plain.timings));
  const fixed = await chat(MATH, { draft_max: 3 });
  check(fixed.choices[0].message.content === text1, 'greedy: draft_max 3 == DFlash auto text');
  for (const q of ['Write a Python function that reverses a string.', 'What is 12 times 7?']) {
    const a = await chat(q, { max_tokens: 40 }), b = await chat(q, { max_tokens: 40, draft_max: 0 });
    check(a.choices[0].message.content === b.choices[0].message.content, 'greedy: DFlash == plain for "' + q + '"');
  }

  // ---- sampling and seeds ------------------------------------------------------
  const samp = (seed, extra = {}) => chat('Tell me a story about a cat.',
    { temperature: 0.9, top_p: 0.95, seed, max_tokens: 32, ...extra }).then((r) => r.choices[0].message.content);
  const s42a = await samp(42), s42b = await samp(42), s42plain = await samp(42, { draft_max: 0 }), s43 = await samp(43);
  check(s42a === s42b, 'seed 42 twice: same text', s42a + ' | ' + s42b);
  check(s42a === s42plain, 'seed 42: DFlash sampling == plain sampling', s42a + ' | ' + s42plain);
  check(s42a !== s43, 'seed 43 differs from seed 42');

  // ---- streaming -----------------------------------------------------------------
  const chunks = await streamChat({ messages: [{ role: 'user', content: MATH }], max_tokens: 48,
                                    stream_options: { include_usage: true } });
  const pieces = deltas(chunks);
  check(chunks[0].choices[0].delta.role === 'assistant', 'stream: first chunk carries the role');
  check(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === chunks[0].id),
        'stream: chunk object and one id');
  check(pieces.join('') === text1, 'stream: deltas join to the non-streamed text', pieces.join(''));
  const fin = chunks.filter((c) => c.choices.length && c.choices[0].finish_reason);
  check(fin.length === 1 && fin[0].choices[0].finish_reason === r1.choices[0].finish_reason,
        'stream: one finish chunk with the same finish_reason');
  const last = chunks[chunks.length - 1];
  check(last.choices.length === 0 && last.usage && last.usage.completion_tokens === u.completion_tokens,
        'stream: usage chunk last, with choices []', JSON.stringify(last));
  check(chunks.indexOf(fin[0]) === chunks.length - 2, 'stream: finish chunk right before the usage chunk');
  check(!pieces.join('').includes('\ufffd'), 'stream: no replacement characters');

  const raw = await http('POST', '/v1/chat/completions', { messages: [{ role: 'user', content: MATH }], max_tokens: 8,
                                                         stream: true });
  const events = raw.text.split('\n\n').filter((e) => e.length);
  check(/^text\/event-stream/.test(raw.type), 'raw SSE: content type text/event-stream', raw.type);
  check(events.every((e) => e.startsWith('data: ')) && events[events.length - 1] === 'data: [DONE]',
        'raw SSE: data events ending with [DONE]', events.slice(-2).join(' | '));
  check(!raw.text.includes('"usage":{'), 'raw SSE: no usage chunk unless asked');

  // ---- stop strings ----------------------------------------------------------------
  // a stop string across a token boundary: the end of one streamed piece and
  // the start of the next; its first occurrence decides the cut
  let stop = null;
  for (let i = 2; i + 1 < pieces.length && !stop; i++) {
    if (pieces[i].length < 2 || pieces[i + 1].length < 2) continue;
    const s = pieces[i].slice(-2) + pieces[i + 1].slice(0, 2);
    if (text1.indexOf(s) > 0) stop = s;
  }
  check(stop !== null, 'found a stop string spanning two tokens', JSON.stringify(pieces));
  if (stop) {
    const want = text1.slice(0, text1.indexOf(stop));
    const ns = await chat(MATH, { stop: [stop] });
    check(ns.choices[0].message.content === want && ns.choices[0].finish_reason === 'stop',
          'stop across tokens: cut exactly, finish_reason stop', JSON.stringify([stop, ns.choices[0].message.content]));
    const ss = await streamChat({ messages: [{ role: 'user', content: MATH }], max_tokens: 48, stop });
    check(deltas(ss).join('') === want, 'stop (a string) while streaming: never shown, held back across tokens',
          JSON.stringify(deltas(ss)));
    const sp = await chat(MATH, { stop: [stop], draft_max: 0 });
    check(sp.choices[0].message.content === want, 'stop with plain decoding: same cut');
  }
  const never = await chat(MATH, { stop: ['ZZZ never'] });
  check(never.choices[0].message.content === text1, 'stop string that never occurs: whole text');
  const first = await chat(MATH, { stop: ['ZZZ never', text1.slice(3, 6)] });
  check(first.choices[0].message.content === text1.slice(0, text1.indexOf(text1.slice(3, 6))),
        'several stop strings: the first to occur cuts');

  // ---- text completions -----------------------------------------------------------
  const c1 = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 24 });
  check(c1.object === 'text_completion' && /^cmpl-/.test(c1.id) && c1.choices[0].text.length > 0 &&
        c1.usage.completion_tokens > 0, 'completions: text and usage', JSON.stringify(c1).slice(0, 300));
  const cs = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 24, stream: true });
  let ctext = '';
  for await (const c of cs) if (c.choices.length) ctext += c.choices[0].text;
  check(ctext === c1.choices[0].text, 'completions stream: same text', ctext);
  const ids = (await http('POST', '/tokenize', { content: 'Once upon a time' })).json.tokens;
  const cids = await http('POST', '/v1/completions', { prompt: ids, max_tokens: 24 });
  check(cids.status === 200 && cids.json.choices[0].text === c1.choices[0].text,
        'completions: token-id prompt == text prompt', cids.text.slice(0, 200));

  // ---- prompt cache: a second turn reuses the first -----------------------------------
  const sys = { role: 'system', content: 'You are a careful maths tutor. Show each step of your work on its own line.' };
  const t1 = await client.chat.completions.create({ model: MODEL, max_tokens: 32, messages: [sys, { role: 'user', content: MATH }] });
  const t2 = await client.chat.completions.create({ model: MODEL, max_tokens: 16, messages: [
    sys, { role: 'user', content: MATH }, { role: 'assistant', content: t1.choices[0].message.content },
    { role: 'user', content: 'Now solve 2x - 4 = 10.' }] });
  const cached = t2.usage.prompt_tokens_details.cached_tokens;
  check(cached >= t1.usage.prompt_tokens - 8 && t2.timings.cache_n === cached &&
        t2.timings.prompt_n === t2.usage.prompt_tokens - cached,
        'multi-turn: the second turn reuses the first turn\'s KV (n_reused)',
        `turn 1 prompt ${t1.usage.prompt_tokens}, turn 2 prompt ${t2.usage.prompt_tokens}, cached ${cached}`);

  // ---- thinking switch ----------------------------------------------------------------
  const pt = async (extra) => (await chat('Hi', { max_tokens: 1, ...extra })).usage.prompt_tokens;
  const off = await pt({}), on = await pt({ chat_template_kwargs: { enable_thinking: true } });
  const offx = await pt({ think: false }), onx = await pt({ think: true });
  check(off > on && off === offx && on === onx, 'thinking switch: enable_thinking / think change the prompt',
        [off, on, offx, onx].join(' '));

  // ---- tokenize / detokenize ------------------------------------------------------------
  const tk = await http('POST', '/tokenize', { content: 'Hello world' });
  check(tk.status === 200 && JSON.stringify(tk.json.tokens) === '[9707,1879]', '/tokenize', tk.text);
  const dt = await http('POST', '/detokenize', { tokens: [9707, 1879] });
  check(dt.status === 200 && dt.json.content === 'Hello world', '/detokenize', dt.text);
  const uni = 'caf\u00e9 \u65e5\u672c \ud83d\ude00';
  const tku = await http('POST', '/tokenize', { content: uni, with_pieces: true });
  const dtu = await http('POST', '/detokenize', { tokens: tku.json.tokens.map((t) => t.id) });
  check(dtu.json && dtu.json.content === uni, 'tokenize + detokenize round trip (UTF-8)', dtu.text);

  // ---- metrics ------------------------------------------------------------------------------
  const met = await http('GET', '/metrics');
  check(met.status === 200 && /^text\/plain/.test(met.type), '/metrics: Prometheus text');
  for (const n of ['spec_decode_num_drafts_total', 'spec_decode_num_draft_tokens_total',
                   'spec_decode_num_accepted_tokens_total', 'generation_tokens_total', 'prompt_tokens_total']) {
    check((await metric(n)) > 0, '/metrics: dflash:' + n + ' > 0');
  }
  check(/^dflash:spec_decode_num_accepted_tokens_per_pos\{position="0"\} [1-9]/m.test(met.text),
        '/metrics: accepted tokens per position');
  check(/^dflash:requests_total\{code="200"\} [1-9]/m.test(met.text), '/metrics: requests by status');

  // ---- errors ---------------------------------------------------------------------------------
  const msg = [{ role: 'user', content: 'hi' }];
  const cases = [
    ['no API key', 'POST', '/v1/chat/completions', { messages: msg }, { Authorization: '' }, 401, 'authentication_error'],
    ['wrong API key', 'POST', '/v1/chat/completions', { messages: msg }, { Authorization: 'Bearer nope' }, 401, 'authentication_error'],
    ['metrics need the key', 'GET', '/metrics', undefined, { Authorization: '' }, 401, 'authentication_error'],
    ['malformed JSON', 'POST', '/v1/chat/completions', '{"messages": [', {}, 400, 'invalid_request_error', 'invalid_json'],
    ['empty body', 'POST', '/v1/chat/completions', '', {}, 400, 'invalid_request_error', 'invalid_json'],
    ['body not an object', 'POST', '/v1/chat/completions', '[1, 2]', {}, 400, 'invalid_request_error'],
    ['missing messages', 'POST', '/v1/chat/completions', { model: MODEL }, {}, 400, 'invalid_request_error', null, 'messages'],
    ['messages not an array', 'POST', '/v1/chat/completions', { messages: 'hi' }, {}, 400, 'invalid_request_error', null, 'messages'],
    ['message without a role', 'POST', '/v1/chat/completions', { messages: [{ content: 'hi' }] }, {}, 400, 'invalid_request_error'],
    ['unknown role', 'POST', '/v1/chat/completions', { messages: [{ role: 'wizard', content: 'hi' }] }, {}, 400, 'invalid_request_error'],
    ['image content part', 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] }, {}, 400, 'invalid_request_error'],
    ['temperature a string', 'POST', '/v1/chat/completions', { messages: msg, temperature: 'hot' }, {}, 400, 'invalid_request_error', null, 'temperature'],
    ['temperature out of range', 'POST', '/v1/chat/completions', { messages: msg, temperature: 7 }, {}, 400, 'invalid_request_error', null, 'temperature'],
    ['max_tokens 1.5', 'POST', '/v1/chat/completions', { messages: msg, max_tokens: 1.5 }, {}, 400, 'invalid_request_error', null, 'max_tokens'],
    ['max_tokens 0', 'POST', '/v1/chat/completions', { messages: msg, max_tokens: 0 }, {}, 400, 'invalid_request_error', null, 'max_tokens'],
    ['top_p 0', 'POST', '/v1/chat/completions', { messages: msg, top_p: 0 }, {}, 400, 'invalid_request_error', null, 'top_p'],
    ['seed a string', 'POST', '/v1/chat/completions', { messages: msg, seed: 'x' }, {}, 400, 'invalid_request_error', null, 'seed'],
    ['stop a number', 'POST', '/v1/chat/completions', { messages: msg, stop: 5 }, {}, 400, 'invalid_request_error', null, 'stop'],
    ['stop array with a number', 'POST', '/v1/chat/completions', { messages: msg, stop: ['a', 1] }, {}, 400, 'invalid_request_error', null, 'stop'],
    ['stream not a boolean', 'POST', '/v1/chat/completions', { messages: msg, stream: 'yes' }, {}, 400, 'invalid_request_error', null, 'stream'],
    ['draft_max out of range', 'POST', '/v1/chat/completions', { messages: msg, draft_max: 99 }, {}, 400, 'invalid_request_error', null, 'draft_max'],
    ['models/{id} of another model', 'GET', '/v1/models/gpt-4o', undefined, {}, 404, 'invalid_request_error', 'model_not_found'],
    ['n = 2', 'POST', '/v1/chat/completions', { messages: msg, n: 2 }, {}, 400, 'invalid_request_error', 'unsupported_parameter', 'n'],
    ['logprobs not a boolean', 'POST', '/v1/chat/completions', { messages: msg, logprobs: 'yes' }, {}, 400, 'invalid_request_error', null, 'logprobs'],
    ['response_format xml', 'POST', '/v1/chat/completions', { messages: msg, response_format: { type: 'xml' } }, {}, 400, 'invalid_request_error', 'invalid_value'],
    ['prompt longer than the context', 'POST', '/v1/chat/completions', { messages: [{ role: 'user', content: 'word '.repeat(1500) }] }, {}, 400, 'invalid_request_error', 'context_length_exceeded'],
    ['completions without prompt', 'POST', '/v1/completions', { max_tokens: 3 }, {}, 400, 'invalid_request_error', null, 'prompt'],
    ['completions with bad token ids', 'POST', '/v1/completions', { prompt: [1, -5] }, {}, 400, 'invalid_request_error', null, 'prompt'],
    ['completions echo', 'POST', '/v1/completions', { prompt: 'a', echo: true }, {}, 400, 'invalid_request_error', 'unsupported_parameter'],
    ['tokenize without content', 'POST', '/tokenize', {}, {}, 400, 'invalid_request_error', null, 'content'],
    ['detokenize bad ids', 'POST', '/detokenize', { tokens: [99999999] }, {}, 400, 'invalid_request_error', null, 'tokens'],
    ['unknown path', 'GET', '/v1/nothing', undefined, {}, 404, 'not_found_error'],
    ['GET on a POST endpoint', 'GET', '/v1/chat/completions', undefined, {}, 405, 'invalid_request_error'],
    ['POST on a GET endpoint', 'POST', '/v1/models', '{}', {}, 405, 'invalid_request_error'],
    ['deeply nested JSON', 'POST', '/v1/chat/completions', '['.repeat(100000) + ']'.repeat(100000), {}, 400, 'invalid_request_error'],
    ['body over 1 MiB', 'POST', '/v1/chat/completions', JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(1100000) }] }), { 'Content-Type': 'application/json' }, 413, 'invalid_request_error', 'request_too_large'],
    ['invalid UTF-8 in content', 'POST', '/v1/chat/completions', Buffer.concat([Buffer.from('{"messages":[{"role":"user","content":"bad '), Buffer.from([0xff, 0xfe]), Buffer.from('"}]}')]), { 'Content-Type': 'application/json' }, 400, 'invalid_request_error'],
  ];
  for (const [name, method, path, body, headers, status, type, code, param] of cases) {
    const r = await http(method, path, body, headers);
    const e = r.json && r.json.error;
    const good = r.status === status && e && e.type === type && typeof e.message === 'string' && e.message.length > 0 &&
      'param' in e && 'code' in e && (code === undefined || code === null || e.code === code) &&
      (param === undefined || e.param === param);
    check(good, `error: ${name} -> ${status} ${type}${code ? ' ' + code : ''}`, r.status + ' ' + r.text.slice(0, 300));
  }
  // a body over the limit sent without Content-Length (chunked)
  const big = new ReadableStream({ start(c) { for (let i = 0; i < 40; i++) c.enqueue(new TextEncoder().encode('x'.repeat(32768))); c.close(); } });
  const chunked = await http('POST', '/v1/chat/completions', big, { 'Content-Type': 'application/json' });
  check(chunked.status === 413 && chunked.json && chunked.json.error.type === 'invalid_request_error',
        'error: chunked body over 1 MiB -> 413', chunked.status + ' ' + chunked.text.slice(0, 200));
  // the openai client sees the same errors
  // any model name is served by the one model (as llama-server); models.retrieve knows only it
  const other = await client.chat.completions.create({ model: 'gpt-4o', messages: msg, max_tokens: 2 });
  check(other.model === MODEL && other.choices.length === 1, 'a request naming another model is served (model ' + MODEL + ')',
        other.model);
  const got = await client.models.retrieve(MODEL);
  check(got.id === MODEL && got.object === 'model', 'openai client: models.retrieve(' + MODEL + ')', JSON.stringify(got));
  try {
    await client.models.retrieve('gpt-4o');
    check(false, 'openai client: models.retrieve of another model throws');
  } catch (e) {
    check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found',
          'openai client: models.retrieve of another model: NotFoundError, code model_not_found', e.status + ' ' + e.code);
  }
  try {
    const bad = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'wrong', maxRetries: 0 });
    await bad.chat.completions.create({ model: MODEL, messages: msg });
    check(false, 'openai client: wrong key throws');
  } catch (e) {
    check(e instanceof OpenAI.AuthenticationError && e.status === 401, 'openai client: AuthenticationError 401', e.status);
  }
  const xkey = await http('GET', '/v1/models', undefined, { Authorization: '', 'X-Api-Key': KEY });
  check(xkey.status === 200, 'X-Api-Key header accepted');
  const page = await http('GET', '/', undefined, { Authorization: '' });
  check(page.status === 200 && /^text\/html/.test(page.type) && page.text.includes('<title>dflash chat</title>'),
        'GET / serves the chat page without a key');
  check((await http('GET', '/health')).status === 200, 'server alive after the error cases');

  // ---- queue limit (--queue 1) and clients that go away -----------------------------------
  const cancelled0 = await metric('generations_cancelled_total');
  const long = { messages: [{ role: 'user', content: MATH }], ignore_eos: true, max_tokens: 100000, stream: true };
  const ctlA = new AbortController(), ctlB = new AbortController();
  const resA = await fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                             body: JSON.stringify(long), signal: ctlA.signal });
  const readerA = resA.body.getReader();
  let gotA = '';
  while (gotA.split('"content":"').length <= 2) { // a content delta after the role chunk's "content":""
    const { value, done } = await readerA.read();
    if (done) break;
    gotA += Buffer.from(value).toString();
  }
  check(resA.status === 200 && gotA.split('"content":"').length > 2, 'long stream A is generating');
  const resB = await fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                             body: JSON.stringify(long), signal: ctlB.signal });
  check(resB.status === 200, 'stream B accepted and queued');
  const c503 = await http('POST', '/v1/chat/completions', { messages: msg, max_tokens: 4 });
  check(c503.status === 503 && c503.json && c503.json.error.type === 'unavailable_error' && c503.json.error.code === 'queue_full',
        'queue full (--queue 1): 503 unavailable_error queue_full', c503.status + ' ' + c503.text.slice(0, 200));
  ctlA.abort();
  ctlB.abort();
  let cancelled = cancelled0;
  for (let i = 0; i < 200 && cancelled < cancelled0 + 2; i++) { await sleep(50); cancelled = await metric('generations_cancelled_total'); }
  check(cancelled >= cancelled0 + 2, 'aborted streams: running one stopped, queued one dropped', `${cancelled0} -> ${cancelled}`);
  // a non-streaming client that leaves mid-generation
  const ctlD = new AbortController();
  const pD = fetch(BASE + '/v1/chat/completions', { method: 'POST', headers: { ...auth, 'Content-Type': 'application/json' },
                                                    body: JSON.stringify({ ...long, stream: false }), signal: ctlD.signal }).catch(() => null);
  await sleep(300);
  ctlD.abort();
  await pD;
  for (let i = 0; i < 200 && cancelled < cancelled0 + 3; i++) { await sleep(50); cancelled = await metric('generations_cancelled_total'); }
  check(cancelled >= cancelled0 + 3, 'aborted non-streaming request: generation stopped', `${cancelled0} -> ${cancelled}`);
  const t0 = Date.now();
  const after = await chat(MATH);
  check(after.choices[0].message.content === text1, 'after the aborts: same answer as before', after.choices[0].message.content);
  console.log(`# answer after aborts in ${Date.now() - t0} ms`);
}

const timer = setTimeout(() => { console.log('not ok - api.js finished in time'); process.exit(1); }, 280000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - api.js threw: ' + (e && e.stack || e)); process.exit(1); });
