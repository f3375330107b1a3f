// grammar.js - constrained output of `dflash serve` through the official
// openai client: response_format json_object and json_schema, llama-server's
// grammar (GBNF) and json_schema fields, on /v1/chat/completions and
// /v1/completions, streamed and not, with the draft and without (draft_max 0):
// identical replies, and each reply is JSON of the schema's shape when it
// finished with "stop"; every malformed or unsupported grammar or schema is a
// 400 naming its field. Run by tests/test_serve.sh against a server with the
// demo pair (--api-key $API_KEY). Prints "ok - ..." / "not ok - ...".
'use strict';
const OpenAI = require('openai');

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const MODEL = 'target';
const { check, failures } = require('./tap');
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });

async function raw(path, body) {
  const r = await fetch(BASE + path, { method: 'POST', body: JSON.stringify(body),
    headers: { Authorization: 'Bearer ' + KEY, 'Content-Type': 'application/json' } });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, json, text };
}

async function chat(q, extra, stream) {
  const params = { model: MODEL, messages: [{ role: 'user', content: q }], max_tokens: 48, ...extra };
  if (!stream) {
    const r = await client.chat.completions.create(params);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  const s = await client.chat.completions.create({ ...params, stream: true });
  let text = '', finish = null;
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    text += ch.choices[0].delta.content || '';
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, finish };
}

async function completion(prompt, extra, stream) {
  const params = { model: MODEL, prompt, max_tokens: 32, ...extra };
  if (!stream) {
    const r = await client.completions.create(params);
    return { text: r.choices[0].text, finish: r.choices[0].finish_reason };
  }
  const s = await client.completions.create({ ...params, stream: true });
  let text = '', finish = null;
  for await (const ch of s) {
    text += ch.choices[0].text;
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { text, finish };
}

const schema = {
  type: 'object',
  properties: { x: { type: 'integer' }, unit: { enum: ['cm', 'm'] }, steps: { type: 'array', items: { type: 'string' }, maxItems: 2 } },
  required: ['x', 'unit'], additionalProperties: false,
};

async function main() {
  const cases = [
    ['json_object', { response_format: { type: 'json_object' } }, (v) => v && typeof v === 'object' && !Array.isArray(v)],
    ['json_schema', { response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } } },
     (v) => v && Number.isInteger(v.x) && ['cm', 'm'].includes(v.unit) &&
            Object.keys(v).every((k) => ['x', 'unit', 'steps'].includes(k))],
    ['llama-server json_schema', { json_schema: schema }, (v) => v && Number.isInteger(v.x)],
    ['llama-server grammar', { grammar: 'root ::= "x = " [0-9]{1,3} "."' }, null],
  ];
  let finished = 0;
  for (const [name, extra, shape] of cases) {
    for (const temp of [0, 0.8]) {
      const ex = { ...extra, temperature: temp, seed: 11 };
      const q = 'Solve for x: 3x + 5 = 20.';
      const a = await chat(q, ex, false), b = await chat(q, { ...ex, draft_max: 0 }, false);
      const c = await chat(q, ex, true), d = await chat(q, { ...ex, draft_max: 0 }, true);
      const tag = `${name} temp ${temp}`;
      check(a.text === b.text && c.text === a.text && d.text === a.text && a.finish === c.finish,
            `chat ${tag}: DFlash == plain, streamed == whole`, JSON.stringify([a, b, c, d]));
      if (a.finish === 'stop') {
        finished++;
        if (shape) {
          let v = null;
          try { v = JSON.parse(a.text); } catch (e) { /* not JSON */ }
          check(shape(v), `chat ${tag}: the reply is JSON of the requested shape`, a.text);
        } else {
          check(/^x = [0-9]{1,3}\.$/.test(a.text), `chat ${tag}: the reply matches the grammar`, a.text);
        }
      } else {
        check(a.finish === 'length' && (shape ? /^[{]/.test(a.text) : /^x = /.test(a.text)),
              `chat ${tag}: cut by max_tokens, a prefix of the language`, a.finish + ' ' + a.text);
      }
    }
  }
  check(finished >= 3, 'several constrained replies finished on their own (stop)', finished);
  // /v1/completions shares the fields
  for (const stream of [false, true]) {
    const ex = { response_format: { type: 'json_object' }, seed: 3 };
    const a = await completion('The answer as JSON:', ex, stream), b = await completion('The answer as JSON:', { ...ex, draft_max: 0 }, stream);
    check(a.text === b.text && /^[{]/.test(a.text), `completions json_object${stream ? ' stream' : ''}: DFlash == plain, an object`, a.text);
  }
  // unconstrained text is not JSON on this model: the constraint did something
  const free = await chat('Solve for x: 3x + 5 = 20.', { temperature: 0 }, false);
  check(!/^[{]/.test(free.text), 'without a grammar the reply is free text', free.text);

  const msg = [{ role: 'user', content: 'Hi' }];
  const bad = [
    [{ response_format: { type: 'xml' } }, 'response_format', 'xml'],
    [{ response_format: 'json' }, 'response_format', 'object'],
    [{ response_format: { type: 'json_schema' } }, 'response_format.json_schema', 'name'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'string', pattern: 'a+' } } } },
     'response_format.json_schema.schema', "unsupported keyword 'pattern' at #"],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { type: 'object', properties: { n: { type: 'integer', minimum: 3 } } } } } },
     'response_format.json_schema.schema', "'minimum' at #/properties/n"],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: { $ref: '#/$defs/missing' } } } },
     'response_format.json_schema.schema', 'names no definition'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: 5 } } }, 'response_format.json_schema.schema', 'JSON Schema'],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'a', schema: {}, extra: 1 } } }, 'response_format.json_schema', 'extra'],
    [{ grammar: 'root ::= item' }, 'grammar', "rule 'item' is used but not defined"],
    [{ grammar: 'root ::= root "a" | "b"' }, 'grammar', 'left-recursive'],
    [{ grammar: 7 }, 'grammar', 'GBNF'],
    [{ json_schema: { type: 'object', properties: { a: { type: 'string', format: 'x', maxLength: 3 } } } }, 'json_schema', "'maxLength'"],
    [{ grammar: 'root ::= "a"', json_schema: {} }, 'json_schema', 'one of'],
    [{ grammar: 'root ::= "a"', response_format: { type: 'json_object' } }, 'grammar', 'one of'],
  ];
  for (const [extra, param, needle] of bad) {
    const r = await raw('/v1/chat/completions', { messages: msg, max_tokens: 4, ...extra });
    const e = r.json && r.json.error;
    check(r.status === 400 && e && e.param === param && e.message.includes(needle),
          `400 naming ${param}: ${JSON.stringify(extra).slice(0, 90)}`, r.status + ' ' + r.text.slice(0, 300));
  }
  const r = await raw('/v1/completions', { prompt: 'a', max_tokens: 4, grammar: 'root ::= "a' });
  check(r.status === 400 && r.json && r.json.error.param === 'grammar', 'completions: a bad grammar is a 400 naming it', r.text.slice(0, 200));
}

const timer = setTimeout(() => { console.log('not ok - grammar.js finished in time'); process.exit(1); }, 280000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - grammar.js threw: ' + (e && e.stack || e)); process.exit(1); });
