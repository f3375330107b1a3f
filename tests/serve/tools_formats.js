// tools_formats.js - `dflash serve`'s tools in gpt-oss's harmony format and Gemma 4's,
// through the official openai client and raw HTTP. Run by tests/test_serve.sh with
// FORMAT=harmony or gemma4 against a server of the demo pair whose --tokenizer directory
// holds the Qwen3 tokenizer and that format's chat template (gpt-oss's own file; for
// Gemma 4 a line with its later template's markers, as tests/test_cli.sh makes: the
// real templates are not kept here). The tiny gpt-oss and Gemma 4 models of
// tests/models cannot take these prompts (the Qwen3 tokenizer they carry has ids
// beyond their 16384-row vocabularies); the server's path (the template, the reply's
// splitter) does not depend on the architecture.
//
// The demo model writes neither format by itself, so the reply parsing is tested in C
// (tests/test_reply.c); here:
//   - every fixture case of the format with tools or tool calls (tests/fixtures/chat/
//     cases.json: jinja2's rendering of the real template) sent as a chat request, its
//     tools as Python wrote them (1.0 stays 1.0), gives the expected text's tokens (same
//     count, the prompt cache reuses all but the last); a case jinja2 raises on is a 400;
//   - tool calls the model writes under a GBNF grammar in the format's own syntax come
//     back as message.tool_calls (name, JSON arguments), the reasoning as
//     reasoning_content, finish_reason "tool_calls"; streamed = whole, draft = plain;
//     parallel_tool_calls false stops after the first call;
//   - a tool round sent back (the call, its result) renders as the template does.
// Prints "ok - ..." / "not ok - ..." lines.
'use strict';
const fs = require('fs');
const path = require('path');
const OpenAI = require('openai');

const BASE = process.env.BASE;
const FORMAT = process.env.FORMAT;
const ROOT = process.env.DFLASH_ROOT || process.cwd();

const { check, failures } = require('./tap');
const { WEATHER, assemble, shape } = require('./tool_parts');

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });

async function post(p, body) {
  const r = await fetch(BASE + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
                                    body: typeof body === 'string' ? body : JSON.stringify(body),
                                    signal: AbortSignal.timeout(120000) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, text, json };
}

// today in local time, as the server's harmony template writes it (strftime_now)
function today() {
  const d = new Date();
  const p = (x) => String(x).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}`;
}

// the server's --chat-date when the test started it with one (harmony), else today
const DAY = process.env.CHAT_DATE || today();

async function main() {
  check(FORMAT === 'harmony' || FORMAT === 'gemma4', 'FORMAT is harmony or gemma4', FORMAT);
  // ---- the template through the server: each fixture case's expected text ----------------
  const doc = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/fixtures/chat/cases.json'), 'utf8'));
  // (harmony: the case's identity and effort go as chat_template_kwargs; the server's date is DAY)
  const cases = doc.cases.filter((c) => c.format === FORMAT && c.add_generation_prompt &&
                                        (c.tools || c.messages.some((m) => m.tool_calls) || c.reasoning_effort ||
                                         c.model_identity));
  check(cases.length >= 12 && (FORMAT === 'gemma4' || cases.some((c) => c.raises)),
        `the fixture has ${FORMAT} cases with tools, calls and results (harmony: and ones jinja2 raises on)`, cases.length);
  for (const c of cases) {
    const body = { model: 'target', messages: c.messages, max_tokens: 6, temperature: 0 };
    if (c.enable_thinking !== undefined) body.chat_template_kwargs = { enable_thinking: c.enable_thinking };
    for (const k of ['reasoning_effort', 'model_identity'])
      if (c[k]) body.chat_template_kwargs = { ...(body.chat_template_kwargs || {}), [k]: c[k] };
    // the tools as Python wrote them (JSON.stringify would write 1.0 as 1)
    const raw = c.tools_json ? JSON.stringify(body).slice(0, -1) + ',"tools":' + c.tools_json + '}' : JSON.stringify(body);
    // arguments that are no JSON object: the server's own 400 (chat_render takes them)
    const notObject = c.messages.some((m) => (m.tool_calls || []).some((t) => {
      try { const v = JSON.parse(t.function.arguments); return v === null || typeof v !== 'object' || Array.isArray(v); } catch (e) { return true; }
    }));
    if (c.raises || notObject) {
      const got = await post('/v1/chat/completions', raw);
      check(got.status === 400 && got.json && got.json.error.type === 'invalid_request_error' &&
            (c.raises || /function\.arguments$/.test(got.json.error.param)),
            `template "${c.name}": ${c.raises ? 'jinja2 raises' : 'arguments that are no JSON object'}, the server answers 400`,
            got.status + ' ' + got.text.slice(0, 200));
      continue;
    }
    const expected = FORMAT === 'harmony' ? c.expected.replace('Current date: ' + c.date, 'Current date: ' + DAY) : c.expected;
    // the expected text first: the chat request then finds all but its last token cached
    const want = await post('/v1/completions', { prompt: expected, max_tokens: 6, temperature: 0 });
    const got = await post('/v1/chat/completions', raw);
    const tk = await post('/tokenize', { content: expected });
    const ok = want.status === 200 && got.status === 200 && tk.status === 200;
    const n = ok ? tk.json.tokens.length : -1;
    check(ok && got.json.usage.prompt_tokens === n && want.json.usage.prompt_tokens === n &&
          got.json.usage.prompt_tokens_details.cached_tokens >= n - 1,
          `template "${c.name}": the chat prompt is the jinja2 text token for token (${n} tokens)`,
          got.text.slice(0, 300) + ' | cached ' + (ok && got.json.usage.prompt_tokens_details.cached_tokens));
    const at = await post('/apply-template', raw);
    check(at.status === 200 && at.json.prompt === expected, `template "${c.name}": /apply-template gives the jinja2 text`,
          at.status + ' ' + at.text.slice(0, 300));
  }

  // ---- harmony's options from the request: OpenAI's reasoning_effort, the template's kwargs -------------
  const hq = { model: 'target', messages: [{ role: 'user', content: 'Hi' }] };
  const sys = async (extra) => {
    const r = await post('/apply-template', { ...hq, ...extra });
    return r.status === 200 ? r.json.prompt.split('<|end|>')[0] : r;
  };
  if (FORMAT === 'harmony') {
    const hi = await sys({ reasoning_effort: 'high' }), lo = await sys({ chat_template_kwargs: { reasoning_effort: 'low' } });
    const id = await sys({ chat_template_kwargs: { model_identity: 'You are Tiny.' } }), def = await sys({});
    check(typeof hi === 'string' && hi.includes('\n\nReasoning: high\n\n') && typeof lo === 'string' &&
          lo.includes('\n\nReasoning: low\n\n') && typeof def === 'string' && def.includes('\n\nReasoning: medium\n\n') &&
          def.includes('Current date: ' + DAY + '\n') && typeof id === 'string' &&
          id.startsWith('<|start|>system<|message|>You are Tiny.\nKnowledge cutoff'),
          'harmony: reasoning_effort (top level or kwarg) and model_identity reach the system message',
          JSON.stringify([hi, lo, id, def]).slice(0, 400));
    const gen = await post('/v1/chat/completions', { ...hq, reasoning_effort: 'low', max_tokens: 3, temperature: 0 });
    const gen2 = await post('/v1/chat/completions', { ...hq, max_tokens: 3, temperature: 0 });
    check(gen.status === 200 && gen2.status === 200 && gen.json.usage.prompt_tokens > 0,
          'harmony: a chat request with reasoning_effort generates', gen.text.slice(0, 200));
    for (const [extra, param] of [[{ reasoning_effort: 'max' }, 'reasoning_effort'],
                                  [{ chat_template_kwargs: { reasoning_effort: 3 } }, 'chat_template_kwargs.reasoning_effort'],
                                  [{ reasoning_effort: 'low', chat_template_kwargs: { reasoning_effort: 'high' } },
                                   'chat_template_kwargs.reasoning_effort'],
                                  [{ chat_template_kwargs: { model_identity: 'a<|end|>' } }, 'chat_template_kwargs.model_identity'],
                                  [{ chat_template_kwargs: { builtin_tools: ['python'] } }, 'chat_template_kwargs.builtin_tools']]) {
      const r = await post('/v1/chat/completions', { ...hq, ...extra, max_tokens: 2 });
      check(r.status === 400 && r.json && r.json.error.param === param, `harmony: ${JSON.stringify(extra)}: 400 naming ${param}`,
            r.status + ' ' + r.text.slice(0, 200));
    }
  } else {
    const r = await post('/v1/chat/completions', { ...hq, reasoning_effort: 'low', max_tokens: 2 });
    check(r.status === 400 && r.json && r.json.error.param === 'reasoning_effort' && /harmony/.test(r.json.error.message),
          `${FORMAT}: reasoning_effort is refused (its template has none)`, r.status + ' ' + r.text.slice(0, 200));
  }

  // ---- tool calls the model writes under a grammar, in the format's syntax ----------------------
  const q = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const CITY = '[A-Za-z]{1,6}';
  const call = FORMAT === 'harmony'
    ? `call ::= "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\\"city\\": \\"" ${CITY} "\\"}<|call|>"\n`
    : `call ::= "<|tool_call>call:get_weather{city:<|\\"|>" ${CITY} "<|\\"|>}<tool_call|>"\n`;
  const think = FORMAT === 'harmony'
    ? 'think ::= "<|channel|>analysis<|message|>Need " [a-z]{1,4} "<|end|>"\n'
    : 'think ::= "<|channel>thought\\nNeed " [a-z]{1,4} "<channel|>"\n';
  // harmony: a reply opens with its first message's header (the prompt ended "<|start|>assistant")
  const grammars = FORMAT === 'harmony'
    ? { one: 'root ::= think call\n' + call + think, two: 'root ::= think call call\n' + call + think }
    : { one: 'root ::= think call\n' + call + think, two: 'root ::= think call "\\n" call\n' + call + think };
  const run = async (g, extra, stream) => {
    // (under the grammar the demo model spells the format's tags a few bytes a token)
    const params = { model: 'target', messages: q, tools: [WEATHER], max_tokens: 800, temperature: 0, grammar: grammars[g], ...extra };
    if (!stream) {
      const r = await client.chat.completions.create(params);
      return { shape: shape(r.choices[0].message, r.choices[0].finish_reason), msg: r.choices[0].message, n: r.usage.completion_tokens,
               finish: r.choices[0].finish_reason, drafted: r.timings.draft_n };
    }
    const chunks = [];
    for await (const c of await client.chat.completions.create({ ...params, stream: true })) chunks.push(c);
    const s = assemble(chunks);
    return { shape: shape(s.msg, s.finish), msg: s.msg, chunks, finish: s.finish };
  };
  // (each of these replies is hundreds of tokens: plain decoding for one grammar only; under
  // DFLASH_FAST (CI's sanitizer pass) the two-call grammar alone, without the plain run: the
  // same parser and server paths, half the sanitized decoding)
  const FAST = !!process.env.DFLASH_FAST && process.env.DFLASH_FAST !== '0';
  const wholes = {};
  for (const g of FAST ? ['two'] : ['one', 'two']) {
    const whole = wholes[g] = await run(g, { draft_max: 8 }, false);
    const plain = g === 'one' ? await run(g, { draft_max: 0 }, false) : { shape: whole.shape, drafted: 0 };
    const st = await run(g, { draft_max: 8 }, true);
    const calls = whole.msg.tool_calls || [];
    const want = g === 'one' ? 1 : 2;
    let args = [];
    try { args = calls.map((c) => JSON.parse(c.function.arguments)); } catch (e) { args = []; }
    check(calls.length === want && whole.finish === 'tool_calls' && !whole.msg.content && args.length === want &&
          calls.every((c) => c.type === 'function' && c.function.name === 'get_weather' && c.id) &&
          args.every((a) => Object.keys(a).length === 1 && /^[A-Za-z]{1,6}$/.test(a.city)) &&
          /^Need [a-z]{1,4}$/.test(whole.msg.reasoning_content),
          `${FORMAT} grammar "${g}": the model's ${want} call(s) in message.tool_calls with JSON arguments, the reasoning apart, finish_reason tool_calls`,
          JSON.stringify(whole.msg));
    check(st.shape === whole.shape && plain.shape === whole.shape && whole.drafted > 0 && plain.drafted === 0,
          `${FORMAT} grammar "${g}": streamed = whole${g === 'one' ? ', with the draft (it ran) and without' : ''}`,
          [st.shape, plain.shape, whole.shape, whole.drafted, plain.drafted].join(' | '));
    const deltas = st.chunks.flatMap((c) => (c.choices[0] && c.choices[0].delta.tool_calls) || []);
    let okDeltas = true;
    for (let i = 0; i < want; i++) {
      const [head, ...rest] = deltas.filter((d) => d.index === i);
      okDeltas = okDeltas && head && head.id && head.type === 'function' && head.function.name === 'get_weather' &&
        rest.length >= 2 && rest.every((d) => !d.id && d.function.arguments.length > 0) &&
        (head.function.arguments || '') + rest.map((d) => d.function.arguments).join('') === calls[i].function.arguments;
    }
    check(okDeltas, `${FORMAT} grammar "${g}": each call streams as a header delta, then argument pieces joining to the whole reply's`,
          JSON.stringify(deltas).slice(0, 400));
  }
  const one = await run('two', { parallel_tool_calls: false }, false), both = wholes.two;
  check((one.msg.tool_calls || []).length === 1 && one.finish === 'tool_calls' && one.n < both.n &&
        one.msg.tool_calls[0].function.arguments === both.msg.tool_calls[0].function.arguments,
        `${FORMAT}: parallel_tool_calls false ends the reply at the first call`, JSON.stringify([one.msg, one.n, both.n]));

  // ---- a tool round sent back as OpenAI clients send it (content null, ids) -------------------------
  // renders as the fixture's round (the template's text) does
  const fx = doc.cases.find((c) => c.name === (FORMAT === 'harmony' ? 'harmony_tool_round_gen' : 'gemma4_tool_round_gen'));
  const asClient = fx.messages.map((m) => m.tool_calls ? { ...m, content: null }
                                         : m.role === 'tool' ? { ...m, tool_call_id: 'call_0' } : m);
  const rawRound = JSON.stringify({ model: 'target', messages: asClient, max_tokens: 4 }).slice(0, -1) + ',"tools":' + fx.tools_json + '}';
  const expRound = FORMAT === 'harmony' ? fx.expected.replace('Current date: ' + fx.date, 'Current date: ' + DAY) : fx.expected;
  const [tr, r] = [await post('/tokenize', { content: expRound }), await post('/v1/chat/completions', rawRound)];
  check(r.status === 200 && tr.status === 200 && r.json.usage.prompt_tokens === tr.json.tokens.length,
        `${FORMAT}: a tool round as the openai client sends it (content null, tool_call_id) renders as the template's`,
        r.text.slice(0, 300));
  const w = wholes.one || wholes.two;
  // errors: what the template cannot render is a 400 naming messages
  const badMsgs = FORMAT === 'harmony'
    ? [...q, { role: 'assistant', content: null, tool_calls: [w.msg.tool_calls[0], { ...w.msg.tool_calls[0], id: 'x' }] }]
    : [...q, { role: 'tool', tool_call_id: 'x', content: 'orphan' }];
  const bad = await post('/v1/chat/completions', { model: 'target', messages: badMsgs, tools: [WEATHER], max_tokens: 2 });
  check(bad.status === 400 && bad.json && bad.json.error.param === 'messages',
        FORMAT === 'harmony' ? 'harmony: two calls in one message: 400 naming messages' : 'gemma4: a tool result without a call: 400 naming messages',
        bad.status + ' ' + bad.text.slice(0, 200));
  const dup = await post('/v1/chat/completions', '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, ' +
                         '"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "type": "object"}}}]}');
  check(dup.status === 400 && dup.json && dup.json.error.param === 'tools' && /twice/.test(dup.json.error.message),
        `${FORMAT}: a key twice in the tools: 400 naming tools`, dup.status + ' ' + dup.text.slice(0, 200));
}

const timer = setTimeout(() => { console.log('not ok - tools_formats.js finished in time'); process.exit(1); }, 560000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - tools_formats.js threw: ' + (e && e.stack || e)); process.exit(1); });
