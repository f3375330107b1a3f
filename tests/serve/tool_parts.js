// tests/serve/tool_parts.js - what the serve tests' tool checks share: the
// weather tool they declare, a streamed reply put together as a client does,
// and the shape of a reply a stream must reproduce.
'use strict';
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'Current weather in a city.',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// A streamed reply put together as the openai client's users do: content and
// reasoning_content joined, tool calls by index (id, name, argument fragments).
function assemble(chunks) {
  const msg = { content: '', reasoning_content: '', tool_calls: [] };
  let finish = null;
  for (const c of chunks) {
    if (!c.choices.length) continue;
    const d = c.choices[0].delta;
    if (d.content) msg.content += d.content;
    if (d.reasoning_content) msg.reasoning_content += d.reasoning_content;
    for (const t of d.tool_calls || []) {
      const slot = msg.tool_calls[t.index] || (msg.tool_calls[t.index] = { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (t.id) slot.id = t.id;
      if (t.function && t.function.name) slot.function.name += t.function.name;
      if (t.function && t.function.arguments) slot.function.arguments += t.function.arguments;
    }
    if (c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
  }
  return { msg, finish };
}

// The parts of a whole reply the stream must reproduce (call ids differ per request).
function shape(m, finish) {
  return JSON.stringify({
    content: m.content || '', reasoning_content: m.reasoning_content || '', finish,
    tool_calls: (m.tool_calls || []).map((t) => [t.type, t.function.name, t.function.arguments]),
  });
}

module.exports = { WEATHER, assemble, shape };
