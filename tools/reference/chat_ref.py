#!/usr/bin/python3
"""Render chat-template fixtures with jinja2: tests/fixtures/chat/cases.json.

Run from the repository root with Debian's Python (python3-jinja2):
    /usr/bin/python3 tools/reference/chat_ref.py
The Qwen3 template is read from models/qwen3-tokenizer/tokenizer_config.json
(gpt-oss's from models/gptoss-tokenizer/chat_template.jinja, HARMONY_CASES below;
Gemma 3's from models/gemma3-tokenizer/tokenizer_config.json, GEMMA_CASES;
Gemma 4's two templates from the paths given by --gemma4 and --gemma4-early,
(not kept in this repository: tests/fixtures/chat/gemma4/README names them and their sha256),
GEMMA4_CASES, each list rendered with both) and rendered the way transformers'
apply_chat_template does: an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the
loopcontrols extension, a raise_exception global and a tojson filter; the
special tokens are passed as variables and enable_thinking only when set.
Each case: name, format ("qwen3", "llama3", "harmony", "gemma", "gemma4" or
"gemma4_early"), messages (role, content,
optional reasoning_content and tool_calls), optional tools (and tools_json, their
json.dumps text), add_generation_prompt, optional enable_thinking,
expected (the rendered text) or, where jinja2 raises, raises (the exception).
Harmony and Gemma 4 get each call's arguments as the dict json.loads makes of
them (args_for_template); Gemma 4 gets "tool" messages folded into the calling
message (gemma4_fold), the rule src/chat.h states. tests/test_chat.c renders each
with chat_render() and compares.
"""
import argparse
import datetime
import hashlib
import json
import os

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/fixtures/chat/cases.json")

# Llama-3 Instruct chat template (Meta-Llama-3-8B-Instruct tokenizer_config.json).
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def U(c):
    return {"role": "user", "content": c}


def S(c):
    return {"role": "system", "content": c}


def A(c, rc=None, with_rc=False):
    m = {"role": "assistant", "content": c}
    if rc is not None or with_rc:
        m["reasoning_content"] = rc
    return m


def T(c):
    return {"role": "tool", "content": c}


def AC(c, *calls, rc=None):
    """An assistant message with tool_calls, OpenAI-shaped (arguments a JSON string)."""
    m = {"role": "assistant", "content": c,
         "tool_calls": [{"id": "call_%d" % i, "type": "function",
                         "function": {"name": n, "arguments": a}} for i, (n, a) in enumerate(calls)]}
    if rc is not None:
        m["reasoning_content"] = rc
    return m


def args_for_template(msgs):
    """The messages as the harmony and Gemma 4 templates get them (transformers takes
    Python values): each call's arguments the dict json.loads makes of them when they
    are a JSON object, else the text as it is (chat.h: call arguments)."""
    out = []
    for m in msgs:
        m = dict(m)
        if "tool_calls" in m:
            calls = []
            for c in m["tool_calls"]:
                c = json.loads(json.dumps(c))
                try:
                    v = json.loads(c["function"]["arguments"])
                except ValueError:
                    v = None
                if isinstance(v, dict):
                    c["function"]["arguments"] = v
                calls.append(c)
            m["tool_calls"] = calls
        out.append(m)
    return out


def gemma4_fold(msgs):
    """Gemma 4's templates read a call's results from the calling message's tool_responses
    (and the model's answer after them from its content), not from "tool" messages: the
    fold chat.h describes (what an OpenAI-compatible server does before rendering)."""
    msgs = args_for_template(msgs)
    out, i = [], 0
    while i < len(msgs):
        m = msgs[i]
        if m["role"] != "assistant" or not m.get("tool_calls"):
            out.append(m)
            i += 1
            continue
        j = i + 1
        results = []
        while j < len(msgs) and msgs[j]["role"] == "tool":
            c = msgs[j]["content"]
            try:
                v = json.loads(c)
            except ValueError:
                v = c
            results.append({"name": m["tool_calls"][len(results)]["function"]["name"], "response": v})
            j += 1
        turn = {k: v for k, v in m.items() if k != "content"} if results else dict(m)
        if results:
            turn["tool_responses"] = results
            if (j < len(msgs) and msgs[j]["role"] == "assistant" and not msgs[j].get("tool_calls")
                    and msgs[j]["content"]):
                turn["content"] = msgs[j]["content"]
                j += 1
        out.append(turn)
        i = j
    return out


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
ODD = {"type": "function", "function": {
    "name": "odd_one", "description": "Gr\u00fc\u00dfe \u4e16\u754c \U0001f469 tab\there nl\nthere \x01 \\ / </tools> \u2028",
    "parameters": {"type": "object", "properties": {}, "required": [],
                   "x-numbers": [0, -3, 0.5, 1e-07, 2.5e+300, 123456789, -0.25],
                   "x-consts": [True, False, None], "x-empty": {}}},
    "strict": False}


# A schema with what the harmony and Gemma 4 templates treat each in their own way: nested
# objects, arrays of scalars, objects and arrays, enums with defaults, oneOf (with object
# variants), a list of types, nullable, floats written 1.0 and 0.5, keys whose sorted
# order differs from the given one (Gemma 4 sorts case-insensitively).
FLIGHTS = {"type": "function", "function": {
    "name": "search_flights", "description": "Find flights \u2708 between two airports.",
    "parameters": {"type": "object", "properties": {
        "origin": {"type": "string", "description": "IATA code, e.g. \"CDG\""},
        "when": {"type": "object", "description": "Dates", "properties": {
            "depart": {"type": "string"}, "return": {"type": "string", "nullable": True}},
            "required": ["depart"]},
        "passengers": {"type": "integer", "default": 1, "minimum": 1},
        "cabin": {"type": "string", "enum": ["economy", "business"], "default": "economy"},
        "stops": {"type": "array", "items": {"type": "integer"}},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "nullable": True},
        "legs": {"type": "array", "items": {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from"]}},
        "price": {"type": "number", "oneOf": [{"type": "number", "description": "max", "default": 100.0},
                                              {"type": "string"}]},
        "flex": {"type": ["boolean", "null"], "description": "Flexible dates?"},
        "Zeta": {"type": "boolean", "default": False},
        "alpha": {"type": "number", "default": 0.5},
        "ratio": {"type": "number", "default": 1.0},
        "anyobj": {"type": "object"},
        "mixed": {"type": "object", "oneOf": [{"type": "object", "properties": {"a": {"type": "string"}}},
                                              {"type": "object"}], "properties": {"a": {"type": "string"}}},
        "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
        "maybe": {"type": "string", "nullable": True, "description": "Or null."},
        "anything": {"description": "no type", "type": "any"}},
        "required": ["origin", "when"]}}}
BARE = {"type": "function", "function": {"name": "ping", "description": ""}}
# Schemas off the usual path: "required" a string (Python's `in` finds substrings, jinja2
# iterates its characters), enums of other values, oneOf a string, items a list, a list
# of one type, an empty enum, a list default.
WEIRD = {"type": "function", "function": {
    "name": "weird", "description": "odd schemas",
    "parameters": {"type": "object", "properties": {
        "req_sub": {"type": "string"},
        "num_enum": {"type": "string", "enum": [1, "a", True, None, 2.5]},
        "items_list": {"type": "array", "items": [{"type": "string"}]},
        "oneof_str": {"type": "string", "oneOf": "ab"},
        "type_one": {"type": ["integer"]},
        "nested_types": {"type": "array", "items": {"type": ["string", "null"], "maxItems": None}},
        "empty_enum": {"type": "string", "enum": []},
        "deflist": {"type": "array", "default": [1, "x", {"k": None}]},
        "nullnum": {"type": "number", "nullable": True, "description": ""},
        "obj_req": {"type": "object", "properties": {"k": {"type": "string"}}, "required": {"k": 1}}},
        "required": "req_sub_and_more"},
    "response": {"description": "what comes back", "type": "object"}}}
# raises in some templates: a description that is a number (harmony: "// " + 5), a
# property without a type (Gemma 4's release template: value['type'][0] of Undefined), a
# function without a description (harmony)
DESC_NUM = {"type": "function", "function": {"name": "desc_num", "description": "d", "parameters": {
    "type": "object", "properties": {"x": {"type": "string", "description": 5}}}}}
UNTYPED = {"type": "function", "function": {"name": "untyped", "description": "d", "parameters": {
    "type": "object", "properties": {"x": {"description": "no type"}}}}}
NO_DESC = {"type": "function", "function": {"name": "nodesc"}}


UNI = "Grüße, 世界! 👩\u200d💻 e\u0301 \u180e\u3000\u00a0 tab\there \"quotes\" 'single' \\backslash {{ x }} {% raw %} <|im_end|> </think>"

QWEN_CASES = [
    ("user_gen_unset", [U("Hello")], True, None),
    ("user_gen_off", [U("Hello")], True, False),
    ("user_gen_on", [U("Hello")], True, True),
    ("user_nogen", [U("Hello")], False, None),
    ("system_user_gen_off", [S("You are helpful."), U("Hello")], True, False),
    ("system_user_nogen", [S("You are helpful."), U("Hello")], False, None),
    ("train_final_assistant", [U("Hello"), A("Hi there")], False, None),
    ("train_final_assistant_think_false", [U("Hello"), A("Hi there")], False, False),
    ("multi_turn_think_in_content",
     [U("What is 2+2?"), A("<think>\nSimple sum.\n</think>\n\n4"), U("And 3+3?")], True, None),
    ("multi_turn_think_in_content_off",
     [S("Be brief."), U("What is 2+2?"), A("<think>\nSimple sum.\n</think>\n\n4"), U("And 3+3?")],
     True, False),
    ("reasoning_content_field",
     [U("q1"), A("a1", "r1"), U("q2"), A("a2", "thinking about q2")], False, None),
    ("reasoning_content_last_with_gen",
     [U("q1"), A("a1", "r1")], True, True),
    ("tool_messages",
     [U("Weather in Paris?"), A("Let me check."), T("{\"temp\": 21}"), T("{\"sky\": \"clear\"}"),
      A("It is 21 C and clear.")], False, None),
    ("tool_messages_gen",
     [S("sys"), U("Weather?"), A("<think>\nneed tool\n</think>\n\ncalling"), T("sunny"), U("thanks"),
      A("welcome"), T("late tool")], True, None),
    ("tool_first", [T("orphan result"), U("hi")], True, False),
    ("multi_step_tool_response_user",
     [U("Question"), A("step 1", "plan"), U("<tool_response>\nobservation\n</tool_response>"),
      A("step 2", "use it")], False, None),
    ("multi_step_tool_response_user_gen",
     [U("Question"), A("<think>plan</think>step 1"),
      U("<tool_response>\nobservation\n</tool_response>"), A("<think>\nuse it\n</think>step 2")],
     True, None),
    ("system_not_first", [U("a"), S("late system"), U("b")], True, None),
    ("only_system_assistant", [S("s"), A("hello there")], False, None),
    ("only_assistant", [A("<think>x</think>y")], False, None),
    ("close_think_without_open", [U("q"), A("reasoning only</think>answer"), U("q2")], True, None),
    ("several_think_tags",
     [U("q"), A("<think>a</think>b<think>c</think>\n\nd")], False, None),
    ("several_think_tags_earlier",
     [U("q"), A("<think>\n\na\n\n</think>b<think>c</think>\n\nd"), U("q2")], True, False),
    ("empty_reasoning_content", [U("q"), A("x</think>y", "")], False, None),
    ("null_reasoning_content", [U("q"), A("<think>r</think>y", None, True)], False, None),
    ("newlines_stripped",
     [U("q"), A("\n\nanswer\n\n", "\n\nthoughts\n\n")], False, None),
    ("nonlast_assistant_after_query_without_reasoning",
     [U("q"), A("part 1"), A("part 2")], False, None),
    ("nonlast_assistant_after_query_with_reasoning",
     [U("q"), A("<think>r1</think>part 1"), A("part 2")], True, True),
    ("final_assistant_with_gen", [U("q"), A("a")], True, False),
    ("empty_contents", [S(""), U(""), A("")], True, False),
    ("unicode_and_specials", [S(UNI), U(UNI + "\n\n"), A("<think>" + UNI + "</think>" + UNI)], True, None),
    ("tools_user_gen_off", [U("Weather in Paris?")], True, False, [WEATHER]),
    ("tools_system_two", [S("Be brief."), U("Weather in Paris?")], True, None, [WEATHER, ODD]),
    ("tools_empty_list", [S("sys"), U("hi")], True, False, []),
    ("tool_calls_history",
     [U("Weather in Paris and Rome?"),
      AC("", ("get_weather", "{\"city\": \"Paris\"}"), ("get_weather", "{\"city\":\"Rome\",\"unit\":\"celsius\"}")),
      T("{\"temp\": 21}"), T("{\"temp\": 25}"), A("Paris 21 C, Rome 25 C.")], True, False, [WEATHER]),
    ("tool_calls_with_content_gen",
     [S("sys"), U("Paris?"), AC("Let me check.", ("get_weather", "{\"city\": \"Paris\"}")), T("sunny")],
     True, None, [WEATHER]),
    ("tool_calls_with_reasoning",
     [U("Paris?"), AC("<think>\nneed the tool\n</think>\n\n", ("get_weather", "{}"))], False, None, [WEATHER]),
    ("long_multi_turn",
     [S("s")] + [m for i in range(6) for m in (U("u%d" % i), A("<think>t%d</think>a%d" % (i, i)))],
     False, None),
]

LLAMA_CASES = [
    ("llama3_user_gen", [U("Hello")], True),
    ("llama3_system_multi", [S("  You are helpful.\n"), U("Hi"), A("Hello!"), U("\tBye \u3000")], True),
    ("llama3_nogen", [U("q"), A("a")], False),
    ("llama3_strip_unicode_space",
     [U("\u00a0\u2003 x \u2028\x1c"), A("\u180e y \u180e"), T("tool\n\n")], True),
]


# gpt-oss (harmony): models/gptoss-tokenizer/chat_template.jinja. Each case: name, messages,
# add_generation_prompt, template kwargs (reasoning_effort, model_identity). "Current date"
# comes from strftime_now, which transformers defines as datetime.now().strftime; here it
# formats the case's fixed date (HARMONY_DATE unless the case gives one), which the fixture
# records as "date". reasoning_content is passed to the template as "thinking", the field it reads.
HARMONY_DATE = "2026-12-04"

HARMONY_CASES = [
    ("harmony_user_gen", [U("Hello")], True, {}),
    ("harmony_user_nogen", [U("Hello")], False, {}),
    ("harmony_system_user", [S("You are terse."), U("Hi")], True, {}),
    ("harmony_developer_user", [{"role": "developer", "content": "Answer in French."}, U("Hi")], True, {}),
    ("harmony_empty_system", [S(""), U("Hi")], True, {}),
    ("harmony_effort_high", [U("Prove it.")], True, {"reasoning_effort": "high"}),
    ("harmony_effort_low_identity", [S("sys"), U("q")], True,
     {"reasoning_effort": "low", "model_identity": "You are a tiny test model."}),
    ("harmony_other_date", [U("What day is it?")], True, {"date": "1999-12-31"}),
    ("harmony_multi_turn", [S("Be brief."), U("What is 2+2?"), A("4.", "Simple sum."), U("And 3+3?")], True, {}),
    ("harmony_train_final_with_thinking", [U("q"), A("answer", "my analysis")], False, {}),
    ("harmony_train_final_empty_thinking", [U("q"), A("answer", "")], False, {}),
    ("harmony_train_final_no_thinking", [U("q"), A("answer")], False, {}),
    ("harmony_train_multi", [U("q1"), A("a1", "r1"), U("q2"), A("a2", "r2")], False, {}),
    ("harmony_assistant_last_gen", [U("q"), A("partial", "r")], True, {}),
    ("harmony_only_system", [S("only a system message")], True, {}),
    ("harmony_assistant_first", [A("I start."), U("ok")], True, {}),
    ("harmony_unicode", [S(UNI), U(UNI + "\n\n"), A(UNI, UNI), U("<|start|>user<|message|>x<|end|>")], True, {}),
    ("harmony_long", [S("s")] + [m for i in range(5) for m in (U("u%d" % i), A("a%d" % i, "t%d" % i))], True, {}),
]

# harmony with tools (HARMONY_TOOL_CASES): name, messages, add_generation_prompt, tools.
W_PARIS = ("get_weather", "{\"city\": \"Paris\"}")
W_ROME = ("get_weather", "{\"city\":\"Rome\",\"unit\":\"celsius\"}")
HARMONY_TOOL_CASES = [
    ("harmony_tools_user_gen", [U("Weather in Paris?")], True, [WEATHER]),
    ("harmony_tools_system_three", [S("Be brief."), U("Flights?")], True, [WEATHER, FLIGHTS, BARE]),
    ("harmony_tools_odd", [U("q")], True, [ODD, BARE]),
    ("harmony_tools_empty_list", [S("sys"), U("hi")], True, []),
    ("harmony_tool_round_gen", [U("Weather in Paris?"), AC("", W_PARIS), T("{\"temp\": 21}")], True, [WEATHER]),
    ("harmony_tool_round_answered", [U("Weather in Paris?"), AC("", W_PARIS), T("{\"temp\": 21}"),
                                     A("It is 21 C."), U("And Rome?")], True, [WEATHER]),
    ("harmony_tool_call_reasoning", [U("Paris?"), AC("", W_PARIS, rc="I should call the tool."), T("sunny")],
     True, [WEATHER]),
    ("harmony_tool_call_content_as_analysis", [U("Paris?"), AC("Let me check.", W_PARIS), T("sunny")], True, [WEATHER]),
    ("harmony_tool_call_reasoning_dropped_later", [U("Paris?"), AC("", W_PARIS, rc="plan"), T("sunny"),
                                                   A("Sunny.", "done")], False, [WEATHER]),
    ("harmony_tool_two_rounds", [S("sys"), U("Paris and Rome?"), AC("", W_PARIS), T("{\"temp\": 21}"),
                                 AC("", W_ROME), T("{\"temp\": 25}"), A("21 and 25.")], True, [WEATHER]),
    ("harmony_tool_train_last_call", [U("Paris?"), AC("", W_PARIS)], False, [WEATHER]),
    ("harmony_tool_args_not_object", [U("q"), AC("", ("ping", "[1, 2]")), T("ok"), AC("", ("ping", "not json"))],
     True, [BARE]),
    ("harmony_tool_args_numbers", [U("q"), AC("", ("search_flights", "{\"alpha\": 1.0, \"b\": 2.5e-7, \"c\": 1e16, "
                                                  "\"d\": -0, \"e\": 12345678901234567890, \"f\": [true, null], "
                                                  "\"g\": \"\\u00e9\\n\"}"))], True, [FLIGHTS]),
    ("harmony_tool_result_text", [U("q"), AC("", W_PARIS), T(UNI + "\n\"quoted\" \\ \t")], True, [WEATHER]),
    ("harmony_tools_effort_identity", [S("sys"), U("q")], True, [WEATHER]),
    ("harmony_tools_weird", [U("q")], True, [WEIRD]),
    ("harmony_tools_desc_num", [U("q")], True, [DESC_NUM]),
    ("harmony_tools_untyped", [U("q")], True, [UNTYPED]),
    ("harmony_tools_no_description", [U("q")], True, [NO_DESC]),
    ("harmony_tool_result_without_call", [U("q"), T("r")], True, [WEATHER]),
    ("harmony_tool_result_after_answer", [U("q"), AC("", W_PARIS), T("r"), A("done"), T("late")], True, [WEATHER]),
    ("harmony_tool_call_content_and_reasoning", [U("q"), AC("c", W_PARIS, rc="r")], True, [WEATHER]),
]


# Gemma 3: the chat_template of models/gemma3-tokenizer/tokenizer_config.json. Each case: name,
# messages, add_generation_prompt. bos_token "<bos>", eos_token "<end_of_turn>" as in that config.
GEMMA_CASES = [
    ("gemma_user_gen", [U("Hello")], True),
    ("gemma_user_nogen", [U("Hello")], False),
    ("gemma_system_user", [S("You are helpful."), U("Hello")], True),
    ("gemma_system_multi", [S("  Be brief. "), U(" What is 2+2? "), A("4."), U("And 3+3?")], True),
    ("gemma_train_final", [U("q"), A(" a \n")], False),
    ("gemma_only_system", [S("only a system message")], True),
    ("gemma_empty", [S(""), U(""), A("")], True),
    ("gemma_reasoning_not_written", [U("q"), A("a", "thoughts")], True),
    ("gemma_other_role", [U("q"), {"role": "tool", "content": " result "}, U("next")], True),
    ("gemma_strip_unicode_space", [U("\u00a0\u2003 x \u2028\x1c"), A("\u180e y \u180e"), U("\tz\n\n")], True),
    ("gemma_unicode", [S(UNI), U(UNI + "\n\n"), A(UNI)], True),
    ("gemma_long", [S("s")] + [m for i in range(5) for m in (U("u%d" % i), A("a%d" % i))] + [U("last")], True),
]


# Gemma 4: the files tests/fixtures/chat/gemma4/README names (where they come from, sha256). Each case: name,
# messages, add_generation_prompt, enable_thinking (None: not passed). bos_token "<bos>",
# eos_token "<eos>", pad_token "<pad>". Rendered with both templates ("gemma4": the later one,
# "gemma4_early"); the names get "gemma4_" / "gemma4e_" in front.
GEMMA4_CASES = [
    ("user_gen", [U("Hello")], True, None),
    ("user_gen_think_off", [U("Hello")], True, False),
    ("user_gen_think_on", [U("Hello")], True, True),
    ("user_nogen", [U("Hello")], False, None),
    ("user_nogen_think_on", [U("Hello")], False, True),
    ("system_user", [S("You are helpful."), U("Hello")], True, None),
    ("system_user_think_on", [S("  You are helpful.\n"), U("Hello")], True, True),
    ("developer_user", [{"role": "developer", "content": "Answer in French."}, U("Hi")], True, False),
    ("system_multi", [S("  Be brief. "), U(" What is 2+2? "), A(" 4. \n"), U("And 3+3?")], True, None),
    ("train_final", [U("q"), A(" a \n")], False, None),
    ("train_final_think_on", [S("s"), U("q"), A("<|channel>thought\nr<channel|>a")], False, True),
    ("history_thinking_stripped",
     [U("What is 2+2?"), A("<|channel>thought\nSimple sum.<channel|>4"), U("And 3+3?")], True, True),
    ("history_thinking_stripped_off",
     [U("What is 2+2?"), A("<|channel>thought\nSimple sum.<channel|>\n\n4\n"), U("And 3+3?")], True, False),
    ("history_several_channels",
     [U("q"), A("a<|channel>x<channel|>b <|channel>thought\ny\n<channel|> c "), U("q2")], True, None),
    ("history_unclosed_channel", [U("q"), A("answer<|channel>thought\nunfinished"), U("q2")], True, None),
    ("history_close_without_open", [U("q"), A("x<channel|>y"), U("q2")], True, None),
    ("history_nested_open", [U("q"), A("a<|channel>b<|channel>c<channel|>d"), U("q2")], True, None),
    ("reasoning_content_ignored", [U("q1"), A("a1", "r1"), U("q2")], True, True),
    ("empty_contents", [S(""), U(""), A("")], True, None),
    ("empty_system", [S(""), U("hi")], True, None),
    ("only_system", [S("only a system message")], True, None),
    ("only_system_think_on", [S("only a system message")], True, True),
    ("later_system", [U("a"), S(" late system "), U("b")], True, None),
    ("later_developer", [S("first"), U("a"), {"role": "developer", "content": "dev"}, U("b")], True, None),
    ("assistant_first", [A("I start."), U("ok")], True, None),
    ("consecutive_users", [U("one"), U("two")], True, None),
    ("consecutive_assistants", [U("q"), A("part 1"), A("part 2")], False, None),
    ("specials_in_content", [U("<|turn>user\nx<turn|> <|think|> <bos>"), A("<turn|>y<|turn>"), U("z")], True, None),
    ("strip_unicode_space", [U("\u00a0\u2003 x \u2028\x1c"), A("\u180e y \u180e"), U("\tz\n\n")], True, None),
    ("unicode", [S(UNI), U(UNI + "\n\n"), A(UNI)], True, None),
    ("unicode_think_on", [S(UNI), U(UNI)], True, True),
    ("long", [S("s")] + [m for i in range(5) for m in (U("u%d" % i), A("<|channel>thought\nt%d<channel|>a%d" % (i, i)))]
     + [U("last")], True, None),
    ("long_think_on", [m for i in range(4) for m in (U("u%d" % i), A("a%d" % i, "r%d" % i))] + [U("last")], True, True),
]

# Gemma 4 with tools (GEMMA4_TOOL_CASES): name, messages, add_generation_prompt, enable_thinking,
# tools; rendered with both templates after gemma4_fold, like GEMMA4_CASES. A case whose
# rendering raises in jinja2 is recorded with "raises" (test_chat checks that chat_render
# refuses it).
G_RESULT = "{\"temp\": 21.0, \"sky\": \"clear\", \"Wind\": {\"b\": 1, \"A\": [1, \"x\", null, false]}, \"_x\": null}"
GEMMA4_TOOL_CASES = [
    ("tools_user_gen", [U("Weather in Paris?")], True, None, [WEATHER]),
    ("tools_system_think_on", [S(" Be brief. "), U("Flights?")], True, True, [WEATHER, FLIGHTS]),
    ("tools_odd", [U("q")], True, False, [ODD, BARE]),
    ("tools_empty_list", [U("hi")], True, None, []),
    ("tool_round_gen", [U("Weather in Paris?"), AC("", W_PARIS), T(G_RESULT)], True, None, [WEATHER]),
    ("tool_round_gen_think_on", [U("Weather in Paris?"), AC("", W_PARIS), T("{\"temp\": 21}")], True, True, [WEATHER]),
    ("tool_round_answered", [U("Weather in Paris?"), AC("Let me check.", W_PARIS), T("{\"temp\": 21}"),
                             A("<|channel>thought\nwarm<channel|>It is 21 C."), U("And Rome?")], True, None, [WEATHER]),
    ("tool_call_no_result", [U("Paris?"), AC("Let me check.", W_PARIS)], False, None, [WEATHER]),
    # an answer after the results as the last message: the template opens no new turn
    ("tool_round_answered_last_gen", [U("Paris?"), AC("", W_PARIS), T("21"), A("It is 21 C.")], True, None, [WEATHER]),
    ("tool_round_answered_last_gen_think_on", [U("Paris?"), AC("", W_PARIS), T("21"), A("It is 21 C.")], True, True,
     [WEATHER]),
    ("tool_call_no_result_gen", [U("Paris?"), AC("", W_PARIS)], True, False, [WEATHER]),
    ("tool_two_calls_two_results", [U("Paris and Rome?"), AC("", W_PARIS, W_ROME), T("21"), T("\"25\""),
                                    A("21 and 25.")], True, None, [WEATHER]),
    ("tool_two_calls_one_result", [U("Paris and Rome?"), AC("", W_PARIS, W_ROME), T("[21, 22.5]")], True, None,
     [WEATHER]),
    ("tool_two_rounds", [U("Paris, then Rome?"), AC("", W_PARIS), T("true"), AC("", W_ROME), T("null"),
                         A("Done."), U("thanks")], True, None, [WEATHER]),
    ("tool_reasoning_after_last_user", [U("Paris?"), AC("", W_PARIS, rc="Call the tool."), T("sunny text")],
     True, True, [WEATHER]),
    ("tool_reasoning_before_last_user", [U("Paris?"), AC("", W_PARIS, rc="Call the tool."), T("sunny"),
                                         A("Sunny."), U("ok")], True, None, [WEATHER]),
    ("tool_empty_answer_not_folded", [U("Paris?"), AC("", W_PARIS), T("sunny"), A(""), U("ok")], True, None, [WEATHER]),
    ("tool_args_not_object", [U("q"), AC("", ("ping", "[1, 2]"))], False, None, [BARE]),
    ("tool_args_values", [U("q"), AC("", ("search_flights", "{\"b\": 2.5e-7, \"A\": 1.0, \"c\": {\"y\": \"s\", "
                                         "\"X\": [true, null, -0]}, \"big\": 12345678901234567890}"))], True, None,
     [FLIGHTS]),
    ("tool_result_unicode", [U("q"), AC("", W_PARIS), T(UNI)], True, None, [WEATHER]),
    ("tool_system_and_tools_gen", [S("sys"), U("Paris?"), AC("", W_PARIS), T("{}")], True, None, [WEATHER, BARE]),
    ("tools_weird", [U("q")], True, None, [WEIRD]),
    ("tools_desc_num", [U("q")], True, None, [DESC_NUM]),
    ("tools_untyped", [U("q")], True, None, [UNTYPED]),
    ("tools_no_description", [U("q")], True, None, [NO_DESC]),
]


def gemma4_render(tmpl, msgs, agp, think, tools=None):
    kw = dict(messages=gemma4_fold(msgs), add_generation_prompt=agp, bos_token="<bos>", eos_token="<eos>",
              pad_token="<pad>")
    if tools is not None:
        kw["tools"] = tools
    if think is not None:
        kw["enable_thinking"] = think
    return tmpl.render(**kw)


def harmony_render(tmpl, msgs, agp, kw, tools=None):
    date = kw.get("date", HARMONY_DATE)
    env = environment()
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.strptime(date, "%Y-%m-%d").strftime(fmt)
    t = env.from_string(tmpl)
    jm = []
    for m in args_for_template(msgs):
        m = dict(m)
        if "reasoning_content" in m:
            m["thinking"] = m.pop("reasoning_content")
        jm.append(m)
    args = dict(messages=jm, add_generation_prompt=agp, bos_token="<|startoftext|>", eos_token="<|return|>",
                pad_token="<|endoftext|>")
    if tools is not None:
        args["tools"] = tools
    for k in ("reasoning_effort", "model_identity"):
        if k in kw:
            args[k] = kw[k]
    return t.render(**args)


# the templates of tests/fixtures/chat/gemma4/README
GEMMA4_SHA256 = {"gemma4": "749e841c23b6c9463622b44a1bbe1f6bc5299ffba0f306d5c785799b29c6ce37",
                 "gemma4_early": "87294f1fa94c3733b7f325252567c990edfd0269ff7df285f995ca5226c8989b"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gemma4", required=True,
                    help="Gemma 4's later chat template (format gemma4)")
    ap.add_argument("--gemma4-early", required=True,
                    help="Gemma 4's early chat template (format gemma4_early)")
    ap.add_argument("-o", "--out", default=OUT)
    args = ap.parse_args()
    cfg = json.load(open(os.path.join(ROOT, "models/qwen3-tokenizer/tokenizer_config.json")))
    qwen = environment().from_string(cfg["chat_template"])
    llama = environment().from_string(LLAMA3_TEMPLATE)
    cases = []
    for name, msgs, agp, think, *tools in QWEN_CASES:
        tools = tools[0] if tools else None
        kw = dict(messages=msgs, tools=tools, documents=None, add_generation_prompt=agp,
                  eos_token=cfg["eos_token"], pad_token=cfg["pad_token"], bos_token=None,
                  additional_special_tokens=cfg["additional_special_tokens"])
        if think is not None:
            kw["enable_thinking"] = think
        c = {"name": name, "format": "qwen3", "messages": msgs, "add_generation_prompt": agp}
        if tools is not None:
            c["tools"] = tools
        if think is not None:
            c["enable_thinking"] = think
        c["expected"] = qwen.render(**kw)
        cases.append(c)
    for name, msgs, agp in LLAMA_CASES:
        c = {"name": name, "format": "llama3", "messages": msgs, "add_generation_prompt": agp,
             "expected": llama.render(messages=msgs, add_generation_prompt=agp,
                                      bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")}
        cases.append(c)
    htmpl = open(os.path.join(ROOT, "models/gptoss-tokenizer/chat_template.jinja"), encoding="utf-8").read()
    for name, msgs, agp, kw in HARMONY_CASES:
        c = {"name": name, "format": "harmony", "messages": msgs, "add_generation_prompt": agp,
             "date": kw.get("date", HARMONY_DATE)}
        for k in ("reasoning_effort", "model_identity"):
            if k in kw:
                c[k] = kw[k]
        c["expected"] = harmony_render(htmpl, msgs, agp, kw)
        cases.append(c)
    for name, msgs, agp, tools in HARMONY_TOOL_CASES:
        kw = {"reasoning_effort": "high", "model_identity": "You are a tool user."} if "identity" in name else {}
        c = {"name": name, "format": "harmony", "messages": msgs, "add_generation_prompt": agp, "date": HARMONY_DATE}
        c.update(kw)
        c["tools"] = tools
        c["tools_json"] = json.dumps(tools)
        try:
            c["expected"] = harmony_render(htmpl, msgs, agp, dict(kw), tools)
        except (jinja2.exceptions.TemplateError, TypeError, AttributeError) as e:  # what jinja2 raises from a template
            c["raises"] = "%s: %s" % (type(e).__name__, e)
        cases.append(c)
    gcfg = json.load(open(os.path.join(ROOT, "models/gemma3-tokenizer/tokenizer_config.json")))
    gemma = environment().from_string(gcfg["chat_template"])
    for name, msgs, agp in GEMMA_CASES:
        c = {"name": name, "format": "gemma", "messages": msgs, "add_generation_prompt": agp,
             "expected": gemma.render(messages=msgs, add_generation_prompt=agp, bos_token=gcfg["bos_token"],
                                      eos_token=gcfg["eos_token"], pad_token=gcfg["pad_token"])}
        cases.append(c)
    g4 = {}
    for fmt, path in (("gemma4", args.gemma4), ("gemma4_early", args.gemma4_early)):
        text = open(path, encoding="utf-8").read()
        got = hashlib.sha256(text.encode()).hexdigest()
        if got != GEMMA4_SHA256[fmt]:
            raise SystemExit(f"{path}: sha256 {got}, not the {fmt} template the fixtures were made from "
                             f"({GEMMA4_SHA256[fmt]}; tests/fixtures/chat/gemma4/README)")
        g4[fmt] = text
        tmpl = environment().from_string(text)
        for name, msgs, agp, think in GEMMA4_CASES:
            c = {"name": ("gemma4_" if fmt == "gemma4" else "gemma4e_") + name, "format": fmt, "messages": msgs,
                 "add_generation_prompt": agp}
            if think is not None:
                c["enable_thinking"] = think
            c["expected"] = gemma4_render(tmpl, msgs, agp, think)
            cases.append(c)
        for name, msgs, agp, think, tools in GEMMA4_TOOL_CASES:
            c = {"name": ("gemma4_" if fmt == "gemma4" else "gemma4e_") + name, "format": fmt, "messages": msgs,
                 "add_generation_prompt": agp, "tools": tools, "tools_json": json.dumps(tools)}
            if think is not None:
                c["enable_thinking"] = think
            try:
                c["expected"] = gemma4_render(tmpl, msgs, agp, think, tools)
            except (jinja2.exceptions.TemplateError, TypeError, AttributeError) as e:
                c["raises"] = "%s: %s" % (type(e).__name__, e)
            cases.append(c)
    doc = {
        "generator": "tools/reference/chat_ref.py (jinja2 %s)" % jinja2.__version__,
        "qwen3_template_sha256": hashlib.sha256(cfg["chat_template"].encode()).hexdigest(),
        "harmony_template_sha256": hashlib.sha256(htmpl.encode()).hexdigest(),
        "gemma3_template_sha256": hashlib.sha256(gcfg["chat_template"].encode()).hexdigest(),
        "gemma4_template_sha256": hashlib.sha256(g4["gemma4"].encode()).hexdigest(),
        "gemma4_early_template_sha256": hashlib.sha256(g4["gemma4_early"].encode()).hexdigest(),
        "cases": cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=True, indent=1)
        f.write("\n")
    print("%s: %d cases" % (args.out, len(cases)))


if __name__ == "__main__":
    main()
