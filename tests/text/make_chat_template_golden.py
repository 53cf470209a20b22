#!/usr/bin/env python3
"""Golden outputs of bigbatch's Jinja interpreter (text::ChatTemplate): real chat templates
(tests/text/chat_templates/*.jinja, sources in README.md there) rendered over a set of
conversations, and small templates covering each feature of the language, all rendered by
jinja2 in the environment transformers' apply_chat_template compiles chat templates in
(transformers.utils.chat_template_utils._cached_compile_jinja_template, transformers 5.24.0):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, jinja2.ext.loopcontrols])

with its tojson filter, its raise_exception, strftime_now, dict and namespace globals, and the
variables apply_chat_template passes (messages, tools, documents, add_generation_prompt, and the
tokenizer's special tokens). A case whose rendering raises records the exception instead.

Run with jinja2 3.1.6 (python3 -c 'import jinja2' here), from anywhere:

    python3 tests/text/make_chat_template_golden.py

It writes tests/text/chat_templates/golden.json, which tests/text/chat_template_test.cpp reads
(as nlohmann::ordered_json, so that dicts keep the order they have here).
"""
import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = os.path.join(HERE, "chat_templates")


def environment():
    """transformers' chat template environment (chat_template_utils.py), with the
    AssistantTracker extension reduced to what it renders: the body of {% generation %}."""

    class AssistantTracker(Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                          body).set_lineno(lineno)

        @jinja2.pass_eval_context
        def _generation_support(self, context, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    class TemplateDict:
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args, **kwargs):
            self, args = args[0], args[1:]
            attrs = dict(*args, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, "
                    f"but got {name!r}. Please rename the attribute.")

    TemplateNamespace.__module__ = "transformers.utils.chat_template_utils"
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = TemplateDict()
    env.globals["namespace"] = TemplateNamespace
    return env


ENV = environment()


def render(template, variables):
    """{"output": ...} or {"error": {"type", "message"}}."""
    try:
        return {"output": ENV.from_string(template).render(**variables)}
    except jinja2.exceptions.TemplateSyntaxError:
        raise  # the templates here must parse
    except Exception as e:  # noqa: BLE001 - every rendering error is a golden value
        return {"error": {"type": type(e).__name__, "message": str(e)}}


# ---- conversations ----

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
HELLO = {"role": "user", "content": "Hello, who are you?"}
ANSWER = {"role": "assistant", "content": "I am an assistant. How can I help?"}
FOLLOW_UP = {"role": "user", "content": "Tell me a joke."}
NON_ASCII = {"role": "user", "content": "Grüße, 世界 🙂 — \"quoted\", 'single', back\\slash"}
NON_ASCII_ANSWER = {"role": "assistant", "content": "Ça va? Ελληνικά, עברית, 日本語 ✓"}
PADDED = {"role": "user", "content": "  \n  padded text with trailing spaces  \n\n"}
PADDED_ANSWER = {"role": "assistant", "content": "\n\tan answer\n  "}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "description": "Days of forecast"},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "array", "items": {"type": "string"}}},
                "required": ["query"],
            },
        },
    },
]
TOOL_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{
        "id": "call12345",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2}},
    }],
}
TOOL_RESULT = {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
               "content": "{\"temperature\": 21.5, \"unit\": \"celsius\"}"}
TOOL_ANSWER = {"role": "assistant", "content": "It is 21.5 °C in Zürich."}
WEATHER = {"role": "user", "content": "What is the weather in Zürich?"}

CONVERSATIONS = {
    "system user assistant": ([SYSTEM, HELLO, ANSWER], False),
    "multi-turn, generation prompt": ([SYSTEM, HELLO, ANSWER, FOLLOW_UP], True),
    "multi-turn, no generation prompt": ([HELLO, ANSWER, FOLLOW_UP, ANSWER], False),
    "one user turn, generation prompt": ([HELLO], True),
    "non-ASCII content": ([NON_ASCII, NON_ASCII_ANSWER, NON_ASCII], True),
    "whitespace around content": ([PADDED, PADDED_ANSWER, PADDED], True),
    "roles do not alternate": ([HELLO, FOLLOW_UP], True),
}
SYSTEM_CONVERSATIONS = {"system user assistant", "multi-turn, generation prompt"}
TOOL_CONVERSATION = [SYSTEM, WEATHER, TOOL_CALL, TOOL_RESULT, TOOL_ANSWER]

# (special tokens, extra variables, takes tools, takes a system message); the template file is
# NAME.jinja. Hermes 3's tool-use template is for tools only (without them it iterates None).
FAMILIES = {
    "llama3.1": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, {}, True, True),
    "llama3.2": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                 {"date_string": "02 Dec 2026"}, True, True),
    "llama2": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, {}, False, True),
    "mistral-v0.1": ({"bos_token": "<s>", "eos_token": "</s>"}, {}, False, False),
    "mistral-v0.2": ({"bos_token": "<s>", "eos_token": "</s>"}, {}, False, False),
    "mistral-nemo": ({"bos_token": "<s>", "eos_token": "</s>"}, {}, True, True),
    "zephyr": ({"bos_token": "<s>", "eos_token": "</s>"}, {}, False, True),
    "qwen2.5": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, {}, True, True),
    "qwen3": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, {}, True, True),
    "smollm2": ({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}, {}, False, True),
    "chatml": ({"bos_token": "<s>", "eos_token": "<|im_end|>"}, {}, False, True),
    "gemma2": ({"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, {}, False,
               False),
    "phi3.5": ({"bos_token": "<s>", "eos_token": "<|endoftext|>"}, {}, False, True),
    "hermes3-tool-use": ({"bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>"}, {}, True,
                         True),
    "deepseek-r1-distill-llama": ({"bos_token": "<｜begin▁of▁sentence｜>",
                                   "eos_token": "<｜end▁of▁sentence｜>"}, {}, False, True),
}


TOOLS_ONLY = {"hermes3-tool-use"}


def variables(tokens, extra, messages, add_generation_prompt, tools=None):
    """What apply_chat_template renders with: messages, tools, documents, the generation prompt
    flag and the special tokens."""
    return {"messages": messages, "tools": tools, "documents": None,
            "add_generation_prompt": add_generation_prompt, **tokens, **extra}


def real_template_cases():
    cases = []
    for family, (tokens, extra, takes_tools, takes_system) in FAMILIES.items():
        with open(os.path.join(TEMPLATES, family + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        for name, (messages, agp) in CONVERSATIONS.items():
            if family in TOOLS_ONLY:
                break
            if not takes_system and name in SYSTEM_CONVERSATIONS:
                messages = [m for m in messages if m["role"] != "system"]
            v = variables(tokens, extra, messages, agp)
            cases.append({"name": f"{family}: {name}", "template_file": family + ".jinja",
                          "variables": v, **render(template, v)})
        if not takes_system and family not in TOOLS_ONLY:
            v = variables(tokens, extra, [SYSTEM, HELLO], True)
            cases.append({"name": f"{family}: system message", "template_file": family + ".jinja",
                          "variables": v, **render(template, v)})
        if takes_tools:
            v = variables(tokens, extra, TOOL_CONVERSATION, True, TOOLS)
            cases.append({"name": f"{family}: tools", "template_file": family + ".jinja",
                          "variables": v, **render(template, v)})
    return cases


# ---- features ----

XS = {"xs": [3, 1, 2], "d": {"b": 2, "a": 1, "items": "key named items"},
      "s": "Hello World", "n": None, "t": True, "f": 0.5, "empty": [], "nested": {"k": {"j": [10, 20]}},
      "users": [{"name": "bob", "age": 31, "role": "user"}, {"name": "Alice", "age": 25},
                {"name": "carol", "age": 31, "role": "admin"}]}

# (name, template, variables); expected output or error comes from jinja2. A fourth element
# gives the substring the C++ error must contain when its wording differs from Python's.
FEATURES = [
    # Whitespace control: trim_blocks, lstrip_blocks, -, +, comments, raw, newlines.
    ("trim_blocks removes the newline after a block tag", "{% if true %}\nyes\n{% endif %}\nafter", {}),
    ("lstrip_blocks strips indentation before a block tag", "  {% if true %}\n    x\n  {% endif %}\ndone", {}),
    ("lstrip_blocks only at the start of a line", "a  {% if true %}b{% endif %}  c\n  {% if true %}d{% endif %}", {}),
    ("+ disables lstrip_blocks", "  {%+ if true %}x{% endif %}\n  {%+ if true %}\ny{% endif %}", {}),
    ("+%} disables trim_blocks", "{% if true +%}\nx{% endif +%}\ny", {}),
    ("minus strips whitespace and newlines", "a \n\n {{- 'b' -}} \n\n c", {}),
    ("minus in block tags", "x\n  {%- if true -%}\n  y  \n{%- endif %}\nz", {}),
    ("variables are not lstripped", "  {{ 'x' }}\n  {% if true %}y{% endif %}\n", {}),
    ("comments trim and lstrip", "a\n  {# comment #}\nb {#- c -#} c\n{# x #}\nd{#+ y +#}\ne", {}),
    ("one trailing newline is dropped", "a\n\n", {}),
    ("a single trailing newline", "{{ 'a' }}\n", {}),
    ("CRLF newlines", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\rd", {}),
    ("raw block", "{% raw %}{{ not parsed }} {% if %}{% endraw %}!", {}),
    ("raw block with lstrip and minus", "  {% raw %}\n  x {{ y }}\n  {% endraw %}\nz {%- raw %} w {% endraw -%}  !", {}),
    ("unicode whitespace before a block tag", "\u3000\t{% if true %}x{% endif %}\n\u00a0{{- 'y' }}", {}),
    ("loop body indentation", "{% for x in xs %}\n  {{ x }}\n{% endfor %}\nend", XS),
    ("tag after text on the same line keeps the text", "line\n  text {% if true %}\n  yes\n  {% endif %}", {}),
    ("{{- at the start", "{{- ' a ' -}}\n", {}),
    ("{{- 1 }} is a strip, not a minus", "[ {{- 1 }} ]", {}),
    # Statements.
    ("if elif else", "{% for n in [1, 2, 3, 0] %}{% if n == 1 %}one{% elif n == 2 %}two{% elif n %}many{% else %}zero{% endif %};{% endfor %}", {}),
    ("loop variables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}", {}),
    ("previtem and nextitem", "{% for x in xs %}{{ loop.previtem if loop.previtem is defined else '-' }}{{ x }}{{ loop.nextitem | default('-') }} {% endfor %}", XS),
    ("loop.cycle, changed, depth", "{% for x in [1, 1, 2, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x) }}{{ loop.depth }}{{ loop.depth0 }} {% endfor %}", {}),
    ("for with a filter", "{% for x in xs if x > 1 %}{{ loop.index }}/{{ loop.length }}:{{ x }} {% endfor %}", XS),
    ("for else", "{% for x in empty %}{{ x }}{% else %}nothing{% endfor %}|{% for x in xs if x > 5 %}{{ x }}{% else %}none over 5{% endfor %}", XS),
    ("break and continue", "{% for n in range(10) %}{% if n == 2 %}{% continue %}{% endif %}{% if n == 5 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("tuple unpacking", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}|{% for a, b in [[1, 2], (3, 4), 'xy'] %}{{ a }}{{ b }}{% endfor %}", XS),
    ("iterating a dict, a string, undefined", "{% for k in d %}{{ k }},{% endfor %}|{% for c in 'Grüße' %}{{ c }}.{% endfor %}|{% for x in missing %}x{% endfor %}", XS),
    ("nested loops shadow loop", "{% for x in [1, 2] %}{% for y in 'ab' %}{{ loop.index }}{{ y }}{% endfor %}{{ loop.index }}{% endfor %}", {}),
    ("set in a loop does not leak", "{% set total = 0 %}{% for x in xs %}{% set total = total + x %}{{ total }},{% endfor %}{{ total }}", XS),
    ("each iteration starts from the outer value", "{% for x in xs %}{% if loop.first %}{% set seen = x %}{% endif %}[{{ seen }}]{% endfor %}", XS),
    ("set in if leaks at the top level", "{% if true %}{% set z = 5 %}{% endif %}{{ z }}", {}),
    ("namespace carries values out of loops", "{% set ns = namespace(total=0, found=false) %}{% for x in xs %}{% set ns.total = ns.total + x %}{% if x == 1 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.total }} {{ ns.found }} {{ ns }}", XS),
    ("namespace from a dict", "{% set ns = namespace({'a': 1}, b=2) %}{{ ns.a }}{{ ns.b }}{{ ns.c is defined }}", {}),
    ("set tuple", "{% set a, b = 1, 'two' %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}", {}),
    ("block set", "{% set text %}  Hello {{ s }}  {% endset %}[{{ text }}]{% set shout | upper | trim %}  quiet {% endset %}[{{ shout }}]", XS),
    ("block set does not leak its assignments", "{% set x %}{% set y = 1 %}a{% endset %}[{{ y }}]{{ x }}", {}),
    ("with", "{% set a = 1 %}{% with a = 2, b = a %}{{ a }}{{ b }}{% set c = 3 %}{% endwith %}{{ a }}{{ c is defined }}", {}),
    ("filter block", "{% filter upper %}hello {{ s }}{% endfilter %}|{% filter replace('a', 'o') | title %}banana split{% endfilter %}", XS),
    ("generation block", "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% set leak = 1 %}{% endgeneration %}{% else %}{{ m.content }}{% endif %}|{% endfor %}{{ leak is defined }}", {"messages": [HELLO, ANSWER]}),
    ("print", "{% print 'a', 1 + 1 %}", {}),
    ("macro", "{% macro greet(name, greeting='Hello', punctuation='!') %}{{ greeting }}, {{ name }}{{ punctuation }}{% endmacro %}{{ greet('Ann') }} {{ greet('Bo', 'Hi') }} {{ greet(punctuation='?', name='Cy') }} {{ greet }}", {}),
    ("recursive macro", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}", {}),
    ("macro defaults and scope", "{% set g = 1 %}{% macro m(a, b=a) %}{{ a }}{{ b }}{{ g }}{% set g = 9 %}{% endmacro %}{% set g = 2 %}{{ m(1) }}{{ m(1, 3) }}{{ g }}", {}),
    ("macro with a missing argument", "{% macro m(a, b) %}[{{ a }}][{{ b }}]{% endmacro %}{{ m(1) }}", {}),
    # Expressions.
    ("string literals and escapes", "{{ 'a\\nb\\t\\\\ \\' \\\"' }}|{{ \"it's\" }}|{{ '\\u00e9\\x41\\101\\N{BULLET}' }}|{{ 'a' 'b' }}|{{ 'back\\qslash' }}", {}),
    ("number literals", "{{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }} {{ 1.5 }} {{ 1e3 }} {{ 2.5e-3 }} {{ 1_0.5 }} {{ 00 }} {{ 1.5e+2 }}", {}),
    ("constants", "{{ true }} {{ True }} {{ false }} {{ none }} {{ None }} [{{ missing }}]", {}),
    ("python repr of values", "{{ [1, 'a', none, true, 1.0, {'k': (1,)}, (), [], {}] }} {{ (1, 'x') }} {{ d }} {{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'é 世 🙂', '\\x7f\\xa0\\u2028'] }}", XS),
    ("python str of floats", "{{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-5 }} {{ 0.0001 }} {{ 1 / 3 }} {{ 2.0 }} {{ -0.0 }} {{ 1e300 * 1e10 }} {{ 100.0 }} {{ 123456789.123 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }}", {}),
    ("arithmetic", "{{ 1 + 2 }} {{ 1 + 2.0 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 // 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2 ** 3 ** 2 }} {{ 2.0 ** 0.5 }} {{ true + true }} {{ -(3) }} {{ +4 }} {{ - 2 * 3 }}", {}),
    ("sequence arithmetic", "{{ 'ab' * 3 }} {{ 2 * 'xy' }} {{ [1] * 2 }} {{ [1] + [2, 3] }} {{ (1,) + (2,) }} {{ 'a' + 'b' }} {{ 'x' * 0 }}", {}),
    ("concat", "{{ 'n=' ~ 3 ~ ' ' ~ none ~ ' ' ~ true ~ missing ~ [1] }} {{ 'a' + 2 ~ 3 }}", {}),
    ("concat binds tighter than plus", "{{ 1 + 2 ~ 3 }}", {}),
    ("precedence", "{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ not true or true }} {{ not (true or true) }} {{ 2 * 3 ~ 4 }} {{ -2 ** 2 }} {{ 'abc' | upper ~ 'd' }} {{ 1 if false else 2 if false else 3 }}", {}),
    ("comparisons", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == [1] }} {{ [1] == (1,) }} {{ {'a': 1} == {'a': 1.0} }} {{ none == none }} {{ none == 0 }} {{ missing == other_missing }} {{ 'a' != 'b' }}", {}),
    ("in and not in", "{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'a' in d }} {{ 'z' not in d }} {{ 1 in (1, 2) }} {{ 'x' in missing }} {{ 'b' in d.keys() }} {{ 2 in d.values() }} {{ ('a', 1) in d.items() }}", XS),
    ("and or return operands", "{{ 0 or 'x' }}|{{ '' and 'y' }}|{{ [] or none }}|{{ 1 and 2 }}|{{ missing or 'fallback' }}|{{ 'a' or missing }}|{{ 0 and missing.x }}", {}),
    ("conditional expressions", "{{ 'yes' if t else 'no' }}|{{ 'a' if false }}|{{ ('x' if false) is defined }}|{{ 1 if n is none else 2 }}", XS),
    ("attribute and item lookup", "{{ d.a }}{{ d['b'] }}{{ d.items is callable }}{{ d['items'] }}{{ nested.k.j.1 }}{{ nested['k']['j'][-1] }}{{ users[0].name }}{{ xs.0 }}[{{ d.zzz }}][{{ xs[10] }}]", XS),
    ("methods and attributes of missing names", "{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dflt') }}{{ d.items() | list }}{{ d.keys() | list }}{{ d.values() | list }}{{ d.items() }}{{ d.keys() }}", XS),
    ("slices", "{{ s[1:] }}|{{ s[:-1] }}|{{ s[::-1] }}|{{ s[::2] }}|{{ s[-3:] }}|{{ xs[1:] }}|{{ xs[::-1] }}|{{ xs[5:10] }}|{{ xs[-1:0:-1] }}|{{ 'Grüße'[1:4] }}|{{ 'Grüße'[-1] }}|{{ (1, 2, 3)[:2] }}|{{ s[1:8:3] }}", XS),
    ("negative indices", "{{ xs[-1] }}{{ xs[-3] }}{{ s[-1] }}{{ users[-1].name }}", XS),
    ("calls with keyword arguments", "{{ 'a-b-c'.split('-', maxsplit=1) }} {{ range(1, 10, 3) | list }} {{ dict(a=1, b='x') }} {{ dict([('k', 1)], z=2) }}", {}),
    ("dict literals keep their order", "{{ {'b': 1, 'a': 2, 1: 'int', 1.5: 'float'} }} {{ {'a': 1, 'a': 2} }}", {}),
    # Filters.
    ("string filters", "{{ '  x  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'ab' | upper }}{{ 'AB' | lower }}|{{ 'hello wORLD' | capitalize }}|{{ 'hello wORLD-foo (bar) [baz] <q> they\\'re' | title }}|{{ 'ß straße' | upper }}|{{ 'İ' | lower | length }}|{{ 'aaa' | replace('a', 'b', 2) }}|{{ 'abc' | replace('', '-') }}|{{ 'x' | center(5) }}|", {}),
    ("length, count, first, last", "{{ xs | length }}{{ 'héllo' | length }}{{ d | count }}{{ missing | length }}|{{ xs | first }}{{ xs | last }}{{ 'abc' | first }}{{ 'abc' | last }}{{ d | first }}|{{ empty | first }}|{{ empty | last is defined }}", XS),
    ("join", "{{ xs | join }}|{{ xs | join(', ') }}|{{ users | join('/', attribute='name') }}|{{ [1, none, 'a', [2]] | join('-') }}", XS),
    ("default", "{{ missing | default('d') }}|{{ missing | d('short') }}|{{ none | default('n') }}|{{ '' | default('empty', true) }}|{{ 0 | default('zero', boolean=true) }}|{{ 'x' | default('y') }}|{{ missing | default }}|", {}),
    ("tojson", "{{ {'a': [1, 'x', none, true, 1.5, 2.0]} | tojson }}|{{ 'é \"q\" \\\\ \\n \\t \\x01 \\u2028 🙂' | tojson }}|{{ [] | tojson }}{{ {} | tojson }}|{{ (1, 2) | tojson }}|{{ 1e16 | tojson }}", {}),
    ("tojson indent, separators, sort_keys, ensure_ascii", "{{ {'b': [1, {'c': 'x'}], 'a': {}, 'e': []} | tojson(indent=2) }}|{{ [1, {'a': 2}] | tojson(separators=(',', ':')) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'é🙂' | tojson(ensure_ascii=true) }}|{{ {'a': [1]} | tojson(indent='\\t') }}|{{ {1: 'int', true: 'x'} | tojson }}", {}),
    ("tojson of the tools", "{% for t in tools %}{{ t | tojson(indent=4) }}\n{% endfor %}", {"tools": TOOLS}),
    ("string, int, float, list", "{{ 5 | string }}{{ none | string }}{{ [1] | string }}|{{ '42' | int }} {{ ' -7 ' | int }} {{ '4.9' | int }} {{ 'x' | int }} {{ 'x' | int(3) }} {{ 3.99 | int }} {{ true | int }} {{ '0x1f' | int(0, 16) }} {{ '1_000' | int }}|{{ '1.5' | float }} {{ 2 | float }} {{ 'x' | float }} {{ ' 1e3 ' | float }} {{ 'inf' | float }}|{{ 'abc' | list }} {{ d | list }} {{ missing | list }} {{ (1, 2) | list }}", XS),
    ("items and dictsort", "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}|{{ d | dictsort }}|{{ {'b': 1, 'A': 2, 'c': 0} | dictsort }}|{{ {'b': 1, 'A': 2, 'c': 0} | dictsort(true) }}|{{ {'b': 1, 'a': 2} | dictsort(by='value', reverse=true) }}|{% for k, v in missing | items %}x{% endfor %}", XS),
    ("reverse", "{{ xs | reverse | list }}{{ 'abc' | reverse }}{{ (1, 2) | reverse | list }}{{ d | reverse | list }}{{ xs | map('string') | reverse | join }}", XS),
    ("sort", "{{ xs | sort }}{{ xs | sort(reverse=true) }}{{ ['b', 'A', 'c'] | sort }}{{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}{{ users | sort(attribute='age') | map(attribute='name') | list }}{{ users | sort(attribute='age,name') | map(attribute='name') | list }}{{ users | sort(attribute='age', reverse=true) | map(attribute='name') | list }}", XS),
    ("unique, min, max, sum", "{{ [1, 2, 1, 'a', 'A', 1.0, true] | unique | list }}{{ ['a', 'A'] | unique(case_sensitive=true) | list }}{{ users | unique(attribute='age') | map(attribute='name') | list }}|{{ xs | min }}{{ xs | max }}{{ ['b', 'A', 'c'] | max }}{{ users | max(attribute='age') }}{{ empty | max is defined }}|{{ xs | sum }}{{ users | sum(attribute='age') }}{{ [0.5, 1] | sum(start=10) }}", XS),
    ("map", "{{ users | map(attribute='name') | list }}{{ users | map(attribute='role', default='guest') | list }}{{ xs | map('string') | list }}{{ ['a b', 'c'] | map('replace', ' ', '_') | list }}{{ users | map(attribute='name') | map('upper') | join(',') }}{{ empty | map('upper') | list }}{{ missing | map('upper') | list }}", XS),
    ("select and reject", "{{ xs | select('odd') | list }}{{ xs | reject('odd') | list }}{{ [0, 1, '', 'a', none] | select | list }}{{ [0, 1, '', 'a', none] | reject | list }}{{ xs | select('>', 1) | list }}{{ xs | select('in', [1, 3]) | list }}{{ xs | select('divisibleby', 3) | list }}", XS),
    ("selectattr and rejectattr", "{{ users | selectattr('role') | map(attribute='name') | list }}{{ users | rejectattr('role') | map(attribute='name') | list }}{{ users | selectattr('role', 'equalto', 'user') | map(attribute='name') | list }}{{ users | selectattr('age', '>', 30) | list | length }}{{ users | selectattr('role', 'defined') | list | length }}{{ users | selectattr('role', 'undefined') | first }}{{ (users | selectattr('name', 'eq', 'bob') | first).age }}", XS),
    ("abs and round", "{{ -3 | abs }}{{ -2.5 | abs }}|{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 1.23456 | round(3) }} {{ 42 | round }} {{ 2.1 | round(method='ceil') }} {{ 2.9 | round(0, 'floor') }} {{ -2.5 | round }} {{ 1234.5 | round(-2) }}", {}),
    ("batch and slice", "{{ [1, 2, 3, 4, 5] | batch(2) | list }}{{ [1, 2, 3] | batch(2, 'x') | list }}{{ [1, 2, 3, 4, 5] | slice(2) | list }}{{ [1, 2, 3, 4] | slice(3, 0) | list }}", {}),
    ("indent", "{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent('> ', blank=true) }}|{{ 'x' | indent(first=true) }}", {}),
    ("escape, safe, attr, truncate", "{{ '<a href=\"x\">&\\'</a>' | e }}|{{ '<b>' | escape }}|{{ '<i>' | safe }}|{{ d | attr('a') }}[{{ d | attr('zz') }}]{{ ' x' | attr('strip') is callable }}|{{ 'one two three four' | truncate(9) }}|{{ 'one two three four' | truncate(9, true) }}|{{ 'short' | truncate(9) }}|{{ 'abcdefghijklmnop' | truncate(10, end='…', leeway=0) }}|{{ 'Hello, wörld_1 2.5 — ok!' | wordcount }}", XS),
    # Tests.
    ("tests", "{{ x is defined }}{{ missing is defined }}{{ missing is undefined }}{{ n is none }}{{ 0 is none }}{{ s is string }}{{ 1 is string }}{{ d is mapping }}{{ xs is mapping }}{{ xs is iterable }}{{ 1 is iterable }}{{ s is iterable }}{{ missing is iterable }}{{ xs is sequence }}{{ d is sequence }}{{ 1 is sequence }}", {**XS, "x": 1}),
    ("number tests", "{{ 1 is number }}{{ 1.5 is number }}{{ true is number }}{{ 's' is number }}{{ 1 is integer }}{{ true is integer }}{{ 1.0 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 0 is false }}", {}),
    ("odd, even, divisibleby, comparisons", "{{ 3 is odd }}{{ 3 is even }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 10 is divisibleby(3) }}{{ 1 is eq 1 }}{{ 1 is equalto(2) }}{{ 1 is ne 2 }}{{ 2 is gt 1 }}{{ 2 is ge 2 }}{{ 1 is lt 2 }}{{ 2 is le 1 }}{{ 2 is greaterthan 3 }}{{ 2 is lessthan 3 }}{{ 2 is in [1, 2] }}", {}),
    ("more tests", "{{ 'abc' is lower }}{{ 'aBc' is lower }}{{ 'ABC' is upper }}{{ range is callable }}{{ 'x' is callable }}{{ 'strip' is filter }}{{ 'trim' is filter }}{{ 'odd' is test }}{{ 'zzz' is test }}{{ none is sameas none }}{{ true is sameas 1 }}{{ xs is sameas xs }}{{ xs is not none }}{{ missing is not defined }}", XS),
    # String methods.
    ("strip methods", "[{{ ' x '.strip() }}][{{ '\\n\\nx\\n'.strip('\\n') }}][{{ 'xxay'.lstrip('x') }}][{{ 'ayyx'.rstrip('xy') }}][{{ ' a '.strip(none) }}][{{ '\\u3000x\\xa0'.strip() }}]", {}),
    ("split methods", "{{ 'a<b>c<b>'.split('<b>') }}{{ '  a  b  '.split() }}{{ 'x'.split(',') }}{{ 'a,b,c'.split(',', 1) }}{{ 'a,b,c'.rsplit(',', 1) }}{{ '  a  b  c  '.split(none, 1) }}{{ '  a  b  c  '.rsplit(none, 1) }}{{ 'r</think>a'.split('</think>')[-1] }}{{ 'l1\\nl2\\r\\nl3'.splitlines() }}{{ ''.split(',') }}{{ ''.split() }}", {}),
    ("case methods", "{{ 'hello world'.title() }} {{ \"they're bill's\".title() }} {{ 'hELLO'.capitalize() }} {{ 'Hello'.swapcase() }} {{ 'ǆungla'.title() }} {{ 'straße'.upper() }} {{ 'ΣΑΣ'.lower() }}", {}),
    ("search methods", "{{ 'hello'.startswith('he') }}{{ 'hello'.startswith(('x', 'h')) }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith('l', 2) }}{{ 'hello'.find('l') }}{{ 'hello'.rfind('l') }}{{ 'hello'.find('z') }}{{ 'héllo'.find('l') }}{{ 'hello'.index('e') }}{{ 'hello'.count('l') }}{{ 'aaaa'.count('aa') }}", {}),
    ("other str methods", "{{ ', '.join(['a', 'b']) }}|{{ 'abc'.replace('b', 'B') }}|{{ '12'.isdigit() }}{{ '1a'.isdigit() }}{{ 'ab'.isalpha() }}{{ 'a1'.isalnum() }}{{ ' '.isspace() }}{{ 'AB'.isupper() }}{{ 'ab'.islower() }}{{ 'Ab Cd'.istitle() }}|{{ 'x'.center(5, '*') }}{{ 'x'.ljust(3, '.') }}{{ 'x'.rjust(3) }}{{ '-5'.zfill(4) }}|{{ 'a=b=c'.partition('=') }}{{ 'a=b=c'.rpartition('=') }}{{ 'abc'.partition('z') }}|{{ 'prefix-x'.removeprefix('prefix-') }}{{ 'x.txt'.removesuffix('.txt') }}", {}),
    ("list and tuple methods", "{{ xs.index(2) }}{{ xs.count(3) }}{{ (1, 1).count(1) }}{{ xs.copy() }}", XS),
    ("globals", "{{ range(3) | list }}{{ range(1, 4) | list }}{{ range(5, 0, -2) | list }}{{ range(0) | list }}{{ range(3) | length }}{{ namespace(a=1).a }}{{ dict(x=1) }}{{ raise_exception is defined }}{{ strftime_now is defined }}", {}),
    # Errors.
    ("raise_exception", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}", {}),
    ("raise_exception inside a loop", "{% for m in messages %}{% if m.role == 'user' and loop.index0 % 2 %}{{ raise_exception('Error at message ' ~ loop.index0) }}{% endif %}{% endfor %}", {"messages": [HELLO, FOLLOW_UP]}),
    ("attribute of undefined", "{{ missing.attribute }}", {}),
    ("item of undefined", "{{ missing['key'] }}", {}),
    ("attribute of a missing attribute", "{{ d.nope.further }}", XS),
    ("calling undefined", "{{ missing() }}", {}),
    ("calling a missing method", "{{ s.nope() }}", XS),
    ("list append is unsafe", "{{ xs.append(4) }}", XS),
    ("dict update is unsafe", "{{ d.update({'x': 1}) }}", XS),
    ("dunder attributes are unsafe", "{{ s.__class__.__name__ }}", XS),
    ("division by zero", "{{ 1 / 0 }}", {}),
    ("integer division by zero", "{{ 1 // 0 }}", {}),
    ("str plus int", "{{ 'a' + 1 }}", {}),
    ("int plus str", "{{ 1 + 'a' }}", {}),
    ("undefined plus int", "{{ missing + 1 }}", {}),
    ("ordering across types", "{{ none < 1 }}", {}),
    ("unpacking the wrong number", "{% for a, b in [[1, 2, 3]] %}{% endfor %}", {}),
    ("iterating an int", "{% for x in 5 %}{% endfor %}", {}),
    ("len of an int", "{{ 5 | length }}", {}),
    ("set attribute of a non-namespace", "{% set d.a = 2 %}", XS),
    ("namespace underscore attribute", "{% set ns = namespace() %}{% set ns._x = 1 %}", {}),
    ("namespace underscore keyword", "{% set ns = namespace(_x=1) %}", {}),
    ("range too big", "{{ range(100001) | length }}", {}),
    ("tojson of undefined", "{{ missing | tojson }}", {}),
    ("tojson of a namespace", "{{ namespace(a=1) | tojson }}", {}),
    ("macro with too many arguments", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", {}),
    ("macro with an unknown keyword", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}", {}),
    ("string join of ints", "{{ ''.join([1, 2]) }}", {}),
    ("in a string needs a string", "{{ 1 in 'abc' }}", {}),
    ("index not found", "{{ [1].index(2) }}", {}),
    ("first of an int", "{{ 5 | first }}", {}),
]


def feature_cases():
    cases = []
    for feature in FEATURES:
        name, template, v = feature[:3]
        case = {"name": name, "template": template, "variables": v, **render(template, v)}
        if len(feature) > 3:
            case["error"]["match"] = feature[3]
        cases.append(case)
    return cases


def main():
    golden = {
        "generator": "tests/text/make_chat_template_golden.py",
        "jinja2": jinja2.__version__,
        "real_templates": real_template_cases(),
        "features": feature_cases(),
    }
    out = os.path.join(TEMPLATES, "golden.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    n = len(golden["real_templates"]) + len(golden["features"])
    errors = sum("error" in c for c in golden["real_templates"] + golden["features"])
    print(f"wrote {out}: {n} cases, {errors} of them errors")


if __name__ == "__main__":
    main()
