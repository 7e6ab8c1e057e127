#!/usr/bin/python3
"""Renders every chat template in the shared test data over a set of conversations with Python's
jinja2, in the environment Hugging Face transformers uses for apply_chat_template, and writes the
results as JSON for chat_template_reference_test to compare byte for byte.

Usage: /usr/bin/python3 render_reference.py TESTDATA_DIR OUTPUT_JSON

Environment reproduced (transformers.utils.chat_template_utils._compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols, generation-tag]), globals raise_exception and strftime_now, and a tojson
filter that is json.dumps(ensure_ascii=False). One addition, documented in docs/chat_templates.md:
a `from_json` filter (json.loads), which DeepSeek-V3.2's template needs for OpenAI-style string
tool-call arguments and which Pagoda's engine also provides.

The render call mirrors apply_chat_template: messages, tools (None when absent), documents=None,
add_generation_prompt, the tokenizer's special tokens, and extra keyword arguments.
"""
import glob
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

DEEPSEEK_TOKENS = {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"}


class GenerationTag(jinja2.ext.Extension):
    """HF's AssistantTracker without the tracking: {% generation %} renders its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def special_tokens(config):
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"):
        value = config.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            out[key] = value
    return out


def collect_templates(testdata):
    templates = []
    for path in sorted(glob.glob(os.path.join(testdata, "chat-templates", "*.jinja"))):
        with open(path, encoding="utf-8") as f:
            templates.append((os.path.relpath(path, testdata), f.read(), dict(DEEPSEEK_TOKENS)))
    configs = []
    for pattern in ("tokenizers/*/tokenizer_config.json", "hf-configs/*/tokenizer_config.json",
                    "derived/*/tokenizer_config.json",
                    "models/stories260K-hf/tokenizer_config.json"):
        configs += sorted(glob.glob(os.path.join(testdata, pattern)))
    for path in configs:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        source = config.get("chat_template")
        if isinstance(source, list):
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if isinstance(source, str):
            templates.append((os.path.relpath(path, testdata), source, special_tokens(config)))
    cases_path = os.path.join(testdata, "chat-templates",
                              "llama.cpp-test-chat-template-deepseek-cases.json")
    with open(cases_path, encoding="utf-8") as f:
        for case in json.load(f)["cases"]:
            tokens = {"bos_token": case.get("bos_token", ""), "eos_token": case.get("eos_token", "")}
            templates.append(("llama.cpp-cases:" + case["name"], case["template_str"], tokens))
    return templates


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city. Returns \"sunny\" or \"rainy\".",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. 東京"},
                           "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {"type": "function",
             "function": {"name": "get_time", "description": "Current time.",
                          "parameters": {"type": "object", "properties": {}}}}


def tool_call(call_id, name, arguments):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def conversations():
    system = {"role": "system", "content": "You are a helpful assistant."}
    convs = {}
    convs["system_user"] = ([system, {"role": "user", "content": "Hello!"}], {})
    convs["user_only"] = ([{"role": "user", "content": "What is 2 + 2?"}], {})
    convs["multi_turn"] = ([
        {"role": "system", "content": "You are a helpful assistant"},
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "Who are you"},
        {"role": "assistant", "content": "   I am an assistant   "},
        {"role": "user", "content": "Another question"},
    ], {})
    convs["two_system_messages"] = ([
        system, {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Why is the sky blue?"}], {})
    tool_turns = [
        {"role": "user", "content": "What's the weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("call_1", "get_weather", "{\"city\": \"Paris\"}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"weather\": \"sunny\"}"},
        {"role": "assistant", "content": "It is sunny in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]
    convs["tool_calls_null_content"] = ([system] + tool_turns, {})
    convs["tool_calls_with_tools"] = ([system] + tool_turns, {"tools": [WEATHER_TOOL, TIME_TOOL]})
    empty_content_turns = [dict(m) for m in tool_turns]
    empty_content_turns[1]["content"] = ""
    convs["tool_calls_empty_content"] = (empty_content_turns, {})
    convs["parallel_tool_calls"] = ([
        {"role": "user", "content": "Weather in Paris and the time?"},
        {"role": "assistant", "content": None, "tool_calls": [
            tool_call("call_1", "get_weather", "{\"city\": \"Paris\", \"unit\": \"c\"}"),
            tool_call("call_2", "get_time", "{}")]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ], {"tools": [WEATHER_TOOL, TIME_TOOL]})
    convs["tool_calls_dict_arguments"] = ([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None,
         "tool_calls": [tool_call("call_9", "get_weather", {"city": "Oslo", "days": 3,
                                                            "detailed": True, "ratio": 0.5})]},
        {"role": "tool", "tool_call_id": "call_9", "content": "rainy"},
    ], {"tools": [WEATHER_TOOL]})
    reasoning = {"role": "assistant",
                 "content": "<think>\nThe user wants 2+2.\n</think>\n\nThe answer is 4."}
    convs["reasoning"] = ([
        {"role": "user", "content": "What is 2 + 2?"}, reasoning,
        {"role": "user", "content": "And 3 + 3?"}], {})
    convs["reasoning_content_field"] = ([
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "The answer is 4.",
         "reasoning_content": "Simple arithmetic."},
        {"role": "user", "content": "And 3 + 3?"}], {"enable_thinking": True})
    convs["thinking_disabled"] = ([system, {"role": "user", "content": "Hi"}],
                                  {"enable_thinking": False})
    convs["thinking_enabled"] = ([system, {"role": "user", "content": "Hi"}],
                                 {"enable_thinking": True})
    convs["unicode"] = ([
        {"role": "system", "content": "Réponds en français. 你好，世界！"},
        {"role": "user", "content": "Emoji 👩‍👩‍👧 and \"quotes\" 'single' \\ back\\slash\n\ttab"},
        {"role": "assistant", "content": "Ünïcödé ✓ — ok\r\nline two"},
        {"role": "user", "content": "日本語のテキスト {{ not a tag }} {% neither %}"},
    ], {})
    convs["empty_content"] = ([
        {"role": "system", "content": ""},
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": ""},
    ], {})
    convs["assistant_last"] = ([
        {"role": "user", "content": "Continue this: once upon"},
        {"role": "assistant", "content": "a time"}], {})
    return convs


# Small templates that pin down interpreter semantics (filters, tests, scoping, whitespace).
SNIPPETS = [
    ("{{ 'a' ~ 1 ~ none ~ true }}|{{ 1 + 2 * 3 - 4 / 2 }}|{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}", {}),
    ("{{ 2 ** 10 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 3.0 }} {{ 1.5e-7 }}", {}),
    ("{{ [1, 'a', none, true, 1.5, {'k': (1, 2)}, (3,), ()] }}", {}),
    ("{{ x }}|{{ x is defined }}|{{ x is undefined }}|{{ x | default('d') }}|{{ '' | default('e', true) }}", {}),
    ("{{ d.missing }}|{{ d['missing'] }}|{{ d.get('missing', 5) }}|{{ d.a }}|{{ d['a'] }}", {"d": {"a": 1}}),
    ("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}[{{ k }}]{% endfor %}", {"d": {"b": 2, "a": 1, "c": [1]}}),
    ("{% for x in xs %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.first }}/{{ loop.last }}/{{ loop.length }}/{{ loop.previtem }}/{{ loop.nextitem }};{% endfor %}", {"xs": ["a", "b", "c"]}),
    ("{% for x in xs if x > 1 %}{{ x }}{{ loop.length }}{% else %}none{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}", {"xs": [1, 2, 3]}),
    ("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}", {}),
    ("{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }},{% endfor %}{{ range(3) | list }}{{ range(1, 10, 3) | list }}", {}),
    ("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", {}),
    ("{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
    ("{% if true %}{% set q = 3 %}{% endif %}{{ q }}", {}),
    ("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!{% endmacro %}{{ greet('Ann') }} {{ greet('Bob', greeting='Hi') }} {{ greet('C', 'Yo') }}", {}),
    ("{% macro m() %}{{ z }}{% endmacro %}{% set z = 5 %}{{ m() }}", {}),
    ("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}inner {{ 1 + 1 }}{% endcall %}", {}),
    ("{% macro row(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% call(v) row(4) %}v={{ v }}{% endcall %}", {}),
    ("{% set block %}  Captured {{ 42 }}  {% endset %}[{{ block }}]{% set up | upper %}shout{% endset %}{{ up }}", {}),
    ("{% filter upper %}hello {{ 'world' }}{% endfilter %}", {}),
    ("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", {}),
    ("{% raw %}{{ not rendered }} {% if %}{% endraw %}", {}),
    ("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-1] }} {{ 'abcdef'[-2:] }} {{ [1,2,3,4,5][::2] }} {{ 'héllo'[1] }} {{ 'héllo' | length }}", {}),
    ("{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello World' | upper }}|{{ 'Hello World' | lower }}|{{ 'hello wORLD-foo(bar' | title }}|{{ 'hELLO' | capitalize }}", {}),
    ("{{ 'a-b-c' | replace('-', '+') }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ [1, 2, 3] | join(', ') }}|{{ users | join('/', attribute='name') }}", {"users": [{"name": "x"}, {"name": "y"}]}),
    ("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'abc' | list }}{{ [3, 1, 2] | sort }}{{ [3, 1, 2] | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}", {}),
    ("{{ {'b': 1, 'a': 2} | dictsort }}{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}{{ {'a': 1} | items | list }}", {}),
    ("{{ [1, 2, 2, 'a', 'A'] | unique | list }}{{ [1, 2, 3] | reverse | list }}{{ 'abc' | reverse }}{{ [1, 2, 3] | sum }}{{ [1, 5, 3] | max }}{{ [4, 2, 8] | min }}", {}),
    ("{{ users | selectattr('active') | map(attribute='name') | list }}{{ users | rejectattr('active') | map(attribute='name') | join }}{{ users | selectattr('age', 'gt', 30) | list | length }}", {"users": [{"name": "a", "active": True, "age": 40}, {"name": "b", "active": False, "age": 20}, {"name": "c", "active": True, "age": 25}]}),
    ("{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3, 4] | reject('even') | list }}{{ ['a', 'b'] | map('upper') | list }}{{ [1, 2, 3, 4, 5] | batch(2) | list }}{{ [1, 2, 3] | batch(2, 0) | list }}", {}),
    ("{{ '42' | int + 1 }} {{ '4.7' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ 'x' | float }} {{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 2.1 | round(0, 'ceil') }}", {}),
    ("{{ 12 | string ~ 'x' }}{{ '<a href=\"x\">&\\'' | escape }}{{ '<b>' | safe }}{{ 'one two  three' | wordcount }}", {}),
    ("{{ 'line1\\nline2\\n\\nline4' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}", {}),
    ("{{ obj | tojson }}|{{ obj | tojson(indent=2) }}|{{ obj | tojson(sort_keys=true) }}|{{ 'é\"<>&\\n' | tojson }}|{{ [1.0, 2.5, none, true] | tojson }}", {"obj": {"z": [1, {"y": "é"}], "a": {}, "b": []}}),
    ("{{ 'Hello' is string }}{{ 5 is number }}{{ 5 is integer }}{{ 5.0 is float }}{{ true is boolean }}{{ none is none }}{{ {} is mapping }}{{ [] is iterable }}{{ 'x' is sequence }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}", {}),
    ("{{ 1 is eq 1 }}{{ 1 is equalto 2 }}{{ 2 is gt 1 }}{{ 'a' is in 'abc' }}{{ true is true }}{{ false is false }}{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ x is not defined }}{{ none is not none }}", {}),
    ("{{ 'a' in 'abc' }}{{ 'd' not in 'abc' }}{{ 1 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'b' >= 'a' }}{{ [1, 2] == [1, 2] }}{{ (1, 2) == [1, 2] }}{{ 1 == 1.0 }}{{ true == 1 }}", {}),
    ("{{ 'yes' if x else 'no' }}{{ 'a' if true }}[{{ 'a' if false }}]{{ 0 or 'fallback' }}{{ 1 and 'second' }}{{ not none }}{{ [] or {} }}", {"x": 1}),
    ("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a b c'.rsplit(' ', 1) }}", {}),
    ("{{ 'hello'.startswith('he') }}{{ 'hello'.endswith(('x', 'lo')) }}{{ 'hello'.replace('l', 'L') }}{{ 'hello'.upper() }}{{ 'HeLLo'.lower() }}{{ 'hello world'.title() }}{{ 'héllo'.find('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}", {}),
    ("{{ '{} and {}'.format('a', 'b') }}|{{ '{0}{1}{0}'.format('x', 'y') }}|{{ '{name}!'.format(name='n') }}|{{ ', '.join(['a', 'b']) }}|{{ 'abc'.capitalize() }}{{ '12'.isdigit() }}{{ 'ab'.isalpha() }}", {}),
    ("{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() | list }}{{ dict(a=1, b=2) }}{{ namespace(a=1).a }}{{ d | length }}", {"d": {"x": 1, "y": [2]}}),
    ("  {% if true %}\n  indented\n  {% endif %}\n  b {{- ' c ' -}}  d\n{# comment #}\n  e\n", {}),
    ("{%- for i in range(2) -%}\n  {{ i }}\n{%- endfor %}\nend\n\n", {}),
    ("a\n{% if true %}\nb\n{% endif %}\nc\n{%+ if true %}d{% endif +%}\ne {# c -#}  \n f", {}),
    ("{{ 'x' }}  {% if true %}y{% endif %}\n   {% if true -%}\n  z\n{%- endif %}", {}),
    ("{{ messages[0]['content'] }}{{ messages[-1].role }}{{ messages | length }}{{ messages[5] }}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
    ("{{ 'abc' * 2 }}{{ [0] * 3 }}{{ [1] + [2] }}{{ 'a' + 'b' }}{{ -(3) }}{{ +4 }}{{ 10 - -2 }}", {}),
    ("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2, 3) %}{{ t[1] }}{{ t | length }}", {}),
    ("{% set c = cycler('x', 'y') %}{{ c.next() }}{{ c.next() }}{{ c.next() }}{{ c.current }}{% set j = joiner('|') %}{% for x in 'abc' %}{{ j() }}{{ x }}{% endfor %}", {}),
    ("{% for x in [1, 1, 2] %}{% if loop.changed(x) %}{{ x }}{% endif %}{{ loop.cycle('a', 'b') }}{% endfor %}", {}),
    ("{{ x.attr }}", {}),
    ("{{ none + 1 }}", {}),
    ("{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", {}),
    ("line one\n{% if true %}\n{{ undefined_name.attr }}\n{% endif %}", {}),
    ("{{ 'abc' + 1 }}", {}),
    ("{{ [1, 2].append(3) }}", {}),
    ("{{ {'a': 1}['b']['c'] }}", {}),
    ("{% if false %}{{ x | no_such_filter }}{% endif %}ok", {}),
    ("{{ 'x' if false else y | no_such_filter }}", {}),
    ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% endfor %}", {"messages": [{"role": "system", "content": "x"}]}),
    ("{% generation %}gen {{ 1 }}{% endgeneration %}", {}),
    ("{{ tools }}|{{ documents }}|{{ tools is none }}|{{ tools is defined }}", {}),
    ("{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{{ loop_messages | length }}", {"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}]}),
    ("\t {% if true %}\t\n\tx\n \t{%- endif %}\n\t{# c #}\n{%+ if true %}+{% endif %}|", {}),
    ("a  {% if true %}b{% endif %}  c\n  {{ 'v' }}  \n  {% if true -%}  \n\n  d  {%- endif %}  e", {}),
    ("line\r\n{% if true %}\r\ncrlf\r\n{% endif %}\r\nend\r\n", {}),
    ("{% raw -%}  raw  {%- endraw %}|{% raw %}\n  x\n  {% endraw %}\n|  {% raw %}y{% endraw %}", {}),
    ("{#- c -#}  a  {#- c #}\n  b {# c -#}\n  c\n  {# c #}  d", {}),
    ("{{- '  x  ' -}}\n\n{{ 'y' }}\n{{- 'z' }}\n", {}),
    ("{% for i in range(3) %}\n  {{ i }}\n{% endfor %}\n", {}),
    ("{% macro m(x) -%}\n  [{{ x }}]\n{%- endmacro %}\n{{ m(1) }}\n{{ m(2) }}", {}),
    ("x\u3000{% if true %}y{% endif %}\n\u3000{% if true %}z{% endif %}", {}),
    ("{% set x %}\n  a\n{% endset %}[{{ x }}]", {}),
    ("{{ 'ÉCOLE straße ǅ' | lower }}|{{ 'école' | upper }}|{{ 'éCOLE' | capitalize }}|{{ 'hello wörld' | title }}", {}),
    ("{{ 1.0e10 }} {{ 123456789.123 }} {{ 1e-5 }} {{ 0.0001 }} {{ 2.5e300 * 10 }} {{ 5 / 2 }} {{ 6 / 3 }} {{ 3 * 1.5 }}", {}),
    ("{{ x }}{{ y }}{{ z }}{{ [x, y, z] | tojson }}", {"x": 1.25, "y": 12345678901234, "z": -0.5}),
    (r"""{{ 'a\nb' }}|{{ '\\' }}|{{ 'quote\'s' }}|{{ "a\"b" }}|{{ '\101\x41\u0041\q' }}""", {}),
    ("{{ 'x' ~ 1.5 ~ [1] ~ {'a': 'b'} }}|{{ ('a' ~ 'b') | length }}|{{ 'ab' 'cd' }}", {}),
    ("{% if x is defined and x.y is defined %}yes{% elif x is defined %}partial{% else %}no{% endif %}", {"x": {"z": 1}}),
    ("{% for m in messages %}{{ m.role }}:{{ m.content | default('-', true) }}{{ ',' if not loop.last }}{% endfor %}", {"messages": [{"role": "a", "content": ""}, {"role": "b", "content": None}, {"role": "c"}]}),
    ("{{ messages | selectattr('role', 'equalto', 'user') | list | length }}{{ messages | map(attribute='role') | join(',') }}{{ messages | map(attribute='missing', default='d') | list }}", {"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]}),
    ("{{ 'a b'.split(' ')[0].upper() }}{{ ['x', 'y'][1:] }}{{ 'hello'[10:] }}{{ [1, 2, 3][-10:2] }}{{ 'abc'[5] is defined }}", {}),
    ("{% set d = {'k': [1, {'n': 'v'}]} %}{{ d.k[1].n }}{{ d['k'][0] }}{{ d.k.0 }}{{ d | tojson }}", {}),
    ("{{ 10 | string | length }}{{ '5' * 2 }}{{ true + 1 }}{{ 7 % 3 }}{{ 2 ** -1 }}{{ -2 ** 2 }}{{ (2 + 3) * 4 }}", {}),
    ("{{ 'a' if none else 'b' if false else 'c' }}{{ not true or true }}{{ not (true or true) }}{{ 1 if 0 in [0] else 2 }}", {}),
    ("{{ tools | length if tools else 0 }}{% for t in tools %}{{ t.function.name }}{% endfor %}", {"tools": [WEATHER_TOOL, TIME_TOOL]}),
    ("{{ tools | tojson(indent=4) }}{{ tools[0] | tojson(separators=(',', ':')) }}{{ tools[0].function.parameters | tojson(sort_keys=true, indent=1) }}", {"tools": [WEATHER_TOOL]}),
    ("{{ 'é😀' | tojson(ensure_ascii=true) }}{{ {'ü': 1, 2: 'x', none: true} | tojson }}", {}),
    ("{% if x %}\n{% for %}", {}),
    ("a\n{{ x | nofilter }}", {}),
    ("{% if x %}\nb\n", {}),
    ("{{ 1 +  }}", {}),
    ("\n\n{% foo %}", {}),
    ("{% include 'x' %}", {}),
    ("{{ 'abc }}", {}),
    ("a\n\n{{ x.y.z }}", {"x": {}}),
    ("{{ x is nosuchtest }}", {}),
    ("{% break %}", {}),
    ("{{ (1, }}", {}),
    ("x\n{% endfor %}", {}),
    ("{% set 1 = 2 %}", {}),
    ("{% macro m(a=1, b) %}{% endmacro %}", {}),
    ("{{ 1 / 0 }}", {}),
    ("{{ 'a' < 1 }}", {}),
    ("{% for a, b in [1] %}{% endfor %}", {}),
    ("{{ range(200000) | length }}", {}),
    ("{{ [1, 2] | map('string') | list | length }}{{ [3] | select | list }}", {}),
    ("{{ ['a'] | map('upper') | tojson }}", {}),
    ("{{ d.items() }}{{ d.keys() | length }}{{ range(3) }}{{ range(1, 5, 2) | list }}{{ range(3)[1] }}", {"d": {"a": 1}}),
    ("{{ (d.items() | list)[0] }}{{ [3, 1] | reverse | list }}{{ 'x' | reverse }}{{ [] | map('upper') is iterable }}", {"d": {"a": 1}}),
    ("{% set g = [1, 2] | select %}{{ 'yes' if g else 'no' }}{{ [] | select | list | length }}", {}),
    ("{{ [1, 2] | select | length }}", {}),
    ("{{ '%s' }}{{ 'tab\\there' }}{{ \"dq 'sq'\" }}{{ 'u\\u00e9\\x41' }}", {}),
    ("{{ [('a', 1)] }}{{ {'k': none, 'b': false} }}{{ ['it\\'s', 'a\"b', '\\n'] }}{{ 1.0 }}{{ -0.0 }}{{ 100000000000000000000.0 }}", {}),
]


_compiled = {}


def render(env, source, messages, add_generation_prompt, context):
    if source not in _compiled:
        _compiled[source] = env.from_string(source)
    template = _compiled[source]
    kwargs = {"messages": messages, "tools": None, "documents": None,
              "add_generation_prompt": add_generation_prompt}
    kwargs.update(context)
    return template.render(**kwargs)


def main():
    testdata, output = sys.argv[1], sys.argv[2]
    env = make_environment()
    cases = []

    def add(template_name, conversation_name, source, messages, agp, context):
        case = {"template": template_name, "conversation": conversation_name, "source": source,
                "messages": messages, "add_generation_prompt": agp, "context": context}
        try:
            case["expected"] = render(env, source, messages, agp, context)
        except Exception as e:  # the C++ engine must fail too, naming the same line
            case["error"] = f"{type(e).__name__}: {e}"
            # jinja2 reports a reliable line for syntax errors; a runtime error's line is the
            # statement's, which Pagoda narrows to the failing expression, so only syntax error
            # lines must agree.
            if isinstance(e, jinja2.TemplateSyntaxError):
                case["error_line"] = e.lineno
        cases.append(case)

    for name, source, tokens in collect_templates(testdata):
        for conv_name, (messages, extra) in conversations().items():
            for agp in (False, True):
                add(name, conv_name, source, messages, agp, {**tokens, **extra})
    for i, (source, context) in enumerate(SNIPPETS):
        add(f"snippet-{i}", "snippet", source, context.get("messages", []), False,
            {k: v for k, v in context.items() if k != "messages"})
    with open(output, "w", encoding="utf-8") as f:
        json.dump({"jinja2_version": jinja2.__version__, "cases": cases}, f, ensure_ascii=False,
                  indent=1)
    num_errors = sum("error" in c for c in cases)
    print(f"wrote {len(cases)} cases ({num_errors} expected errors) to {output}")


if __name__ == "__main__":
    main()
