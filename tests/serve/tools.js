// tools.js - `dflash serve`'s tools, tool calls, reasoning and /props /slots
// through the official openai client and raw HTTP. Run by
// tests/test_serve.sh against the server api.js uses (demo target + draft,
// --api-key $API_KEY --ctx-size 1024).
//
// The demo model never writes <tool_call> or <think> by itself, so the
// parsing of those is tested in C (tests/test_reply.c, on text and on the
// real tokenizer's pieces); here:
//   - tool calls the real model writes under a GBNF grammar (llama-server's
//     "grammar" field: the wrapper is fixed, the city's letters are the
//     model's, one token at a time): the header delta, then the arguments in
//     many deltas joining to the whole reply's arguments, streamed = whole,
//     draft = plain, index 0 and 1 for two calls, parallel_tool_calls false
//     stopping after the first;
//   - every Qwen3 fixture case of tests/fixtures/chat/cases.json (jinja2's
//     rendering of the real template: tools, tool_calls, tool messages,
//     reasoning_content) sent as a chat request gives the same prompt tokens
//     as the expected text sent as a completion (same count, the cache
//     reuses all but the last, same greedy answer);
//   - replies with tools on (the splitter in the path) stream to what the
//     whole reply says, with and without the draft;
//   - every malformed tool field is a 400 naming it;
//   - /props and /slots.
// Prints "ok - ..." / "not ok - ..." lines.
'use strict';
const fs = require('fs');
const path = require('path');
const OpenAI = require('openai');

const BASE = process.env.BASE;
const KEY = process.env.API_KEY;
const ROOT = process.env.DFLASH_ROOT || process.cwd();

const { check, failures } = require('./tap');
const { WEATHER, assemble, shape } = require('./tool_parts');

const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 120000 });

async function http(method, p, body) {
  const h = { Authorization: 'Bearer ' + KEY };
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const r = await fetch(BASE + p, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body),
                                    signal: AbortSignal.timeout(120000) });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (e) { /* not JSON */ }
  return { status: r.status, text, json };
}

async function main() {
  // ---- the template through the server: the fixture's expected text -------------------
  const doc = JSON.parse(fs.readFileSync(path.join(ROOT, 'tests/fixtures/chat/cases.json'), 'utf8'));
  const cases = doc.cases.filter((c) => c.format === 'qwen3' && c.add_generation_prompt);
  check(cases.filter((c) => c.tools || c.messages.some((m) => m.tool_calls)).length >= 4,
        'the fixture has tools and tool_calls cases', cases.length);
  for (const c of cases) {
    // the server always sets thinking: "on" renders as the template's default (no empty think block)
    const think = c.enable_thinking === false ? false : true;
    const body = { model: 'target', messages: c.messages, max_tokens: 12, temperature: 0,
                   chat_template_kwargs: { enable_thinking: think } };
    if (c.tools) body.tools = c.tools;
    const want = await http('POST', '/v1/completions', { prompt: c.expected, max_tokens: 12, temperature: 0 });
    const got = await http('POST', '/v1/chat/completions', body);
    const tk = await http('POST', '/tokenize', { content: c.expected });
    const ok = want.status === 200 && got.status === 200 && tk.status === 200;
    const n = ok ? tk.json.tokens.length : -1;
    check(ok && got.json.usage.prompt_tokens === n && want.json.usage.prompt_tokens === n &&
          got.json.usage.prompt_tokens_details.cached_tokens >= n - 1,
          `template "${c.name}": the chat prompt is the jinja2 text token for token (${n} tokens)`,
          got.text.slice(0, 300) + ' | cached ' + (ok && got.json.usage.prompt_tokens_details.cached_tokens));
    const text = ok ? want.json.choices[0].text : '';
    if (ok && !/<tool_call>|^<think>/.test(text))
      check(got.json.choices[0].message.content === text && !got.json.choices[0].message.tool_calls,
            `template "${c.name}": the chat answer is the completion's`, JSON.stringify([got.json.choices[0].message, text]));
  }

  // ---- tool_choice -------------------------------------------------------------------------
  const q = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const plainR = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24 });
  const noneR = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24, tools: [WEATHER], tool_choice: 'none' });
  const autoR = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24, tools: [WEATHER], tool_choice: 'auto' });
  const dflR = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24, tools: [WEATHER] });
  check(noneR.usage.prompt_tokens === plainR.usage.prompt_tokens &&
        noneR.choices[0].message.content === plainR.choices[0].message.content,
        'tool_choice "none": the prompt and answer of no tools', JSON.stringify([noneR.usage, plainR.usage]));
  check(autoR.usage.prompt_tokens > plainR.usage.prompt_tokens + 50, 'tool_choice "auto": the tools are in the prompt',
        `${autoR.usage.prompt_tokens} vs ${plainR.usage.prompt_tokens}`);
  check(shape(dflR.choices[0].message, dflR.choices[0].finish_reason) === shape(autoR.choices[0].message, autoR.choices[0].finish_reason),
        'tool_choice omitted = "auto"');
  check(!autoR.choices[0].message.tool_calls && autoR.choices[0].finish_reason !== 'tool_calls',
        'no <tool_call> written: no tool_calls, finish_reason not tool_calls', JSON.stringify(autoR.choices[0]));
  // parallel_tool_calls: read (a 400 before), the prompt unchanged; false only
  // ends the reply after a first call (tests/test_reply.c call_limit), so
  // with no call written the reply is the same
  const parF = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24, tools: [WEATHER], parallel_tool_calls: false });
  const parT = await client.chat.completions.create({ model: 'target', messages: q, max_tokens: 24, tools: [WEATHER], parallel_tool_calls: true });
  check(parF.usage.prompt_tokens === autoR.usage.prompt_tokens && parT.usage.prompt_tokens === autoR.usage.prompt_tokens &&
        shape(parF.choices[0].message, parF.choices[0].finish_reason) === shape(autoR.choices[0].message, autoR.choices[0].finish_reason) &&
        shape(parT.choices[0].message, parT.choices[0].finish_reason) === shape(autoR.choices[0].message, autoR.choices[0].finish_reason),
        'parallel_tool_calls false / true: accepted, same prompt; no call written: the same reply',
        JSON.stringify([parF.usage, parF.choices[0].message, autoR.choices[0].message]));

  // ---- tool calls the model writes under a grammar -------------------------------------------
  const CALL = 'call ::= "<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"" [A-Za-z]{1,6} "\\"}}\\n</tool_call>"\n';
  const grammars = { one: 'root ::= call\n' + CALL, two: 'root ::= call "\\n" call\n' + CALL };
  const run = async (g, extra, stream) => {
    const params = { model: 'target', messages: q, tools: [WEATHER], max_tokens: 200, temperature: 0, grammar: grammars[g], ...extra };
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
  for (const g of ['one', 'two']) {
    const whole = await run(g, { draft_max: 8 }, false), plain = await run(g, { draft_max: 0 }, false);
    const st = await run(g, { draft_max: 8 }, true), stPlain = await run(g, { draft_max: 0 }, true);
    const calls = whole.msg.tool_calls || [];
    const want = g === 'one' ? 1 : 2;
    check(calls.length === want && whole.finish === 'tool_calls' && whole.msg.content === null &&
          calls.every((c, i) => c.type === 'function' && c.function.name === 'get_weather' && c.id === calls[0].id.replace(/_0$/, '_' + i) &&
                               /^[A-Za-z]{1,6}$/.test(JSON.parse(c.function.arguments).city)),
          `grammar "${g}": the model's ${want} call(s) in message.tool_calls, finish_reason tool_calls, content null`, JSON.stringify(whole.msg));
    check(st.shape === whole.shape && stPlain.shape === whole.shape && plain.shape === whole.shape && whole.drafted > 0 && plain.drafted === 0,
          `grammar "${g}": streamed = whole, with the draft (it ran) and without`,
          [st.shape, stPlain.shape, plain.shape, whole.shape, whole.drafted, plain.drafted].join(' | '));
    // the deltas: per call a header {index, id, type, name, arguments ""}, then argument pieces {index, function.arguments}
    const deltas = st.chunks.flatMap((c) => (c.choices[0] && c.choices[0].delta.tool_calls) || []);
    let okDeltas = true;
    for (let i = 0; i < want; i++) {
      const mine = deltas.filter((d) => d.index === i);
      const [head, ...rest] = mine;
      okDeltas = okDeltas && head && head.id && head.type === 'function' && head.function.name === 'get_weather' && head.function.arguments === '' &&
        rest.length >= 4 && rest.every((d) => !d.id && !d.type && d.function && d.function.name === undefined && d.function.arguments.length > 0) &&
        rest.map((d) => d.function.arguments).join('') === calls[i].function.arguments;
    }
    check(okDeltas && deltas.every((d, k) => k === 0 || d.index >= deltas[k - 1].index),
          `grammar "${g}": each call streams as a header delta then >= 4 argument pieces joining to the whole reply's arguments`,
          JSON.stringify(deltas).slice(0, 400));
  }
  const one = await run('two', { parallel_tool_calls: false }, false), oneSt = await run('two', { parallel_tool_calls: false }, true);
  const both = await run('two', {}, false);
  check((one.msg.tool_calls || []).length === 1 && one.finish === 'tool_calls' && one.n < both.n && oneSt.shape === one.shape &&
        one.msg.tool_calls[0].function.arguments === both.msg.tool_calls[0].function.arguments,
        'parallel_tool_calls false: the reply ends at the first call (one call, finish_reason tool_calls, fewer tokens), streamed the same',
        JSON.stringify([one.msg, one.n, both.n]));

  // ---- streamed = whole, with and without the draft ----------------------------------------
  const histories = [
    { name: 'tools', messages: q, tools: [WEATHER] },
    { name: 'tools + thinking', messages: q, tools: [WEATHER], chat_template_kwargs: { enable_thinking: true } },
    { name: 'parallel_tool_calls false', messages: q, tools: [WEATHER], parallel_tool_calls: false },
    { name: 'a tool round', tools: [WEATHER], messages: [...q,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c": 21, "sky": "clear"}' }] },
    { name: 'reasoning_content in history', chat_template_kwargs: { enable_thinking: true }, messages: [...q,
      { role: 'assistant', content: 'It is sunny.', reasoning_content: 'I recall the forecast.' },
      { role: 'user', content: 'And tomorrow?' }] },
  ];
  for (const h of histories) {
    const { name, ...params } = h;
    // draft_max 8: the draft runs whatever "auto" has learnt from earlier requests
    const whole = await client.chat.completions.create({ model: 'target', max_tokens: 40, draft_max: 8, ...params });
    const plain = await client.chat.completions.create({ model: 'target', max_tokens: 40, draft_max: 0, ...params });
    const stream = await client.chat.completions.create({ model: 'target', max_tokens: 40, draft_max: 8, stream: true, ...params });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    const s = assemble(chunks);
    const w = shape(whole.choices[0].message, whole.choices[0].finish_reason);
    check(shape(s.msg, s.finish) === w, `${name}: the stream reassembles to the whole reply`, shape(s.msg, s.finish) + ' | ' + w);
    check(shape(plain.choices[0].message, plain.choices[0].finish_reason) === w, `${name}: DFlash = plain decoding`);
    check(whole.timings.draft_n > 0 && plain.timings.draft_n === 0, `${name}: the draft ran (and not in plain)`);
  }
  // the template keeps the reasoning of answers after the last query only
  const rcPrompt = async (msgs) => (await client.chat.completions.create({ model: 'target', max_tokens: 1, messages: msgs,
                                                                           chat_template_kwargs: { enable_thinking: true } })).usage.prompt_tokens;
  const later = histories.find((h) => h.name === 'reasoning_content in history').messages, last = later.slice(0, 2);
  const strip = (ms) => ms.map((m) => ({ role: m.role, content: m.content }));
  const [lastRc, lastNo, laterRc, laterNo] = [await rcPrompt(last), await rcPrompt(strip(last)), await rcPrompt(later), await rcPrompt(strip(later))];
  check(lastRc > lastNo && laterRc === laterNo,
        'reasoning_content: in the prompt for the answer after the last query, dropped for earlier ones',
        [lastRc, lastNo, laterRc, laterNo].join(' '));

  // ---- bad tool fields: 400 naming them ------------------------------------------------------
  const msg = [{ role: 'user', content: 'hi' }];
  const fn = (f) => ({ type: 'function', function: f });
  const bad = [
    ['tools not an array', { tools: { a: 1 } }, 'tools'],
    ['tool without type', { tools: [{ function: { name: 'f' } }] }, 'tools[0]'],
    ['tool of another type', { tools: [{ type: 'retrieval', function: { name: 'f' } }] }, 'tools[0]'],
    ['tool without function', { tools: [{ type: 'function' }] }, 'tools[0]'],
    ['function without name', { tools: [WEATHER, fn({ description: 'x' })] }, 'tools[1].function.name'],
    ['function name with a space', { tools: [fn({ name: 'get weather' })] }, 'tools[0].function.name'],
    ['function name too long', { tools: [fn({ name: 'f'.repeat(65) })] }, 'tools[0].function.name'],
    ['two functions of one name', { tools: [WEATHER, WEATHER] }, 'tools[1].function.name'],
    ['parameters not an object', { tools: [fn({ name: 'f', parameters: [] })] }, 'tools[0].function.parameters'],
    ['description a number', { tools: [fn({ name: 'f', description: 3 })] }, 'tools[0].function.description'],
    ['strict a string', { tools: [fn({ name: 'f', strict: 'yes' })] }, 'tools[0].function.strict'],
    ['tool_choice required', { tools: [WEATHER], tool_choice: 'required' }, 'tool_choice'],
    ['tool_choice a named function', { tools: [WEATHER], tool_choice: { type: 'function', function: { name: 'get_weather' } } }, 'tool_choice'],
    ['tool_choice a number', { tools: [WEATHER], tool_choice: 3 }, 'tool_choice'],
    ['parallel_tool_calls a string', { tools: [WEATHER], parallel_tool_calls: 'no' }, 'parallel_tool_calls'],
    ['functions (the old API)', { functions: [{ name: 'f' }] }, 'functions'],
    ['tool_calls not an array', { messages: [...msg, { role: 'assistant', content: '', tool_calls: {} }] }, 'messages[1]'],
    ['tool call arguments an object', { messages: [...msg, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: {} } }] }] }, 'messages[1].tool_calls[0].function.arguments'],
    ['tool call arguments not JSON', { messages: [...msg, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '{oops' } }] }] }, 'messages[1].tool_calls[0].function.arguments'],
    ['tool call without name', { messages: [...msg, { role: 'assistant', tool_calls: [{ type: 'function', function: { arguments: '{}' } }] }] }, 'messages[1].tool_calls[0].function.name'],
    ['tool call of another type', { messages: [...msg, { role: 'assistant', tool_calls: [{ type: 'retrieval', function: { name: 'f', arguments: '{}' } }] }] }, 'messages[1].tool_calls[0]'],
    ['tool call arguments an array', { messages: [...msg, { role: 'assistant', tool_calls: [{ type: 'function', function: { name: 'f', arguments: '[1]' } }] }] }, 'messages[1].tool_calls[0].function.arguments'],
    ['tool_calls on a user message', { messages: [{ role: 'user', content: 'x', tool_calls: [] }] }, 'messages[0]'],
    ['chat_template_kwargs with another switch', { chat_template_kwargs: { enable_thinking: true, add_vision_id: true } }, 'chat_template_kwargs.add_vision_id'],
    ['enable_thinking a string', { chat_template_kwargs: { enable_thinking: 'yes' } }, 'enable_thinking'],
    ['reasoning_content a number', { messages: [...msg, { role: 'assistant', content: 'a', reasoning_content: 5 }] }, 'messages[1]'],
  ];
  for (const [name, extra, param] of bad) {
    const r = await http('POST', '/v1/chat/completions', { messages: msg, max_tokens: 2, ...extra });
    check(r.status === 400 && r.json && r.json.error.type === 'invalid_request_error' && r.json.error.param === param,
          `${name}: 400 naming ${param}`, r.status + ' ' + r.text.slice(0, 200));
  }
  const cTools = await http('POST', '/v1/completions', { prompt: 'hi', max_tokens: 2, tools: [WEATHER] });
  check(cTools.status === 400 && cTools.json.error.param === 'tools', '/v1/completions: tools is a 400 naming it', cTools.text);
  const empty = await http('POST', '/v1/chat/completions', { messages: msg, max_tokens: 2, tools: [] });
  const none = await http('POST', '/v1/chat/completions', { messages: msg, max_tokens: 2 });
  check(empty.status === 200 && empty.json.usage.prompt_tokens === none.json.usage.prompt_tokens,
        'tools [] is no tools', empty.text.slice(0, 200));

  // ---- /props, /slots -----------------------------------------------------------------------------
  const tmpl = JSON.parse(fs.readFileSync(path.join(ROOT, 'models/demo/target/tokenizer_config.json'), 'utf8')).chat_template;
  const props = await http('GET', '/props');
  const p = props.json || {};
  check(props.status === 200 && p.total_slots === 1 && p.model_alias === 'target' && /models\/demo\/target$/.test(p.model_path) &&
        p.n_ctx === 1024, '/props: total_slots 1, model alias and path, n_ctx', props.text.slice(0, 300));
  check(p.chat_template === tmpl, '/props: chat_template is the model\'s template text');
  check(p.draft && p.draft.loaded === true && p.draft.block_size === 16 && p.draft.layers === 3,
        '/props: the draft is loaded, block size 16, 3 layers', JSON.stringify(p.draft));
  const dg = p.default_generation_settings || {};
  check(dg.n_ctx === 1024 && dg.speculative === true && dg.params && dg.params.temperature === 0 && dg.params.n_predict === -1 &&
        dg.params.enable_thinking === false, '/props: default_generation_settings', JSON.stringify(dg));
  check(/^dflash \d+\.\d+\.\d+/.test(p.build_info), '/props: build_info', p.build_info);
  const noKey = await fetch(BASE + '/props');
  check(noKey.status === 401, '/props needs the API key', noKey.status);
  const slots = await http('GET', '/slots');
  check(slots.status === 200 && Array.isArray(slots.json) && slots.json.length === 1 && slots.json[0].id === 0 &&
        slots.json[0].n_ctx === 1024 && slots.json[0].is_processing === false && slots.json[0].id_task === null,
        '/slots: one idle slot', slots.text.slice(0, 300));
  const postProps = await http('POST', '/props', {});
  check(postProps.status === 405, 'POST /props: 405 (read-only)', postProps.status);
}

const timer = setTimeout(() => { console.log('not ok - tools.js finished in time'); process.exit(1); }, 280000);
main().then(() => { clearTimeout(timer); process.exit(failures() ? 1 : 0); },
            (e) => { clearTimeout(timer); console.log('not ok - tools.js threw: ' + (e && e.stack || e)); process.exit(1); });
