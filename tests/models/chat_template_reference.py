#!/usr/bin/env python3
"""chat_template_reference.py OUT.json TEMPLATE...: Jinja2, set up as transformers' apply_chat_template sets it up
(an immutable sandbox, trim_blocks, lstrip_blocks, loop controls, raise_exception, strftime_now, transformers'
tojson), renders each chat template (a .jinja file, or a tokenizer_config.json with a chat_template) on each
conversation below: system, multi-turn, assistant-final and tools conversations, with and without the generation
prompt. OUT.json lists {template, conversation, variables, output} (or error instead of output).
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city, now.",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "description": "City name"},
                                                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                                "required": ["city"]}}}
CALL = {"id": "call12345", "type": "function", "function": {"name": "get_weather",
                                                            "arguments": {"city": "Paris", "unit": "celsius"}}}
CONVERSATIONS = {
    "user": {"messages": [{"role": "user", "content": "Hello! How are you?"}]},
    "system": {"messages": [{"role": "system", "content": "You are a helpful assistant. Be brief."},
                            {"role": "user", "content": "What is 2 + 2?"}]},
    "multi_turn": {"messages": [{"role": "system", "content": "  Answer in French.  "},
                                {"role": "user", "content": "Hi there"},
                                {"role": "assistant", "content": "Bonjour ! Comment puis-je vous aider ?"},
                                {"role": "user", "content": "Tell me a joke about \"quotes\" and 'apostrophes'.\nTwo lines."}]},
    "assistant_final": {"messages": [{"role": "user", "content": "Write a haiku"},
                                     {"role": "assistant", "content": "Autumn moonlight—\na worm digs silently\ninto the chestnut."}],
                        "add_generation_prompt": False},
    "thinking": {"messages": [{"role": "user", "content": "Think first"},
                              {"role": "assistant", "content": "<think>\nLet me see.\n</think>\n\nIt is 4."},
                              {"role": "user", "content": "And 3 + 3?"}]},
    "tools": {"messages": [{"role": "system", "content": "You can call tools."},
                           {"role": "user", "content": "What's the weather in Paris?"},
                           {"role": "assistant", "content": "", "tool_calls": [CALL]},
                           {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
                            "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
                           {"role": "user", "content": "Thanks! And tomorrow?"}],
              "tools": [WEATHER]},
    "tools_offered": {"messages": [{"role": "user", "content": "Weather in Oslo, please."}], "tools": [WEATHER]},
    "unicode": {"messages": [{"role": "user", "content": "Ünïcödé: 日本語, emoji 😀, tabs\tand  spaces"}]},
}


class AssistantTracker(Extension):
    """transformers' {% generation %} marker: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.Scope(body).set_lineno(lineno)


def environment():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def template_text(path):
    if path.endswith(".json"):
        template = json.load(open(path, encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: the default one
            template = next(t["template"] for t in template if t.get("name") == "default")
        return template
    return open(path, encoding="utf-8").read()


def error_kind(e):
    """What kind of refusal Jinja2 gave: the template's raise_exception (a plain TemplateError), an undefined value
    it refuses, a construct it cannot read, a method the immutable sandbox refuses, or Python's type and value
    errors."""
    if type(e) is jinja2.exceptions.TemplateError:
        return "raised"
    if isinstance(e, jinja2.exceptions.UndefinedError):
        return "undefined"
    if isinstance(e, jinja2.exceptions.TemplateSyntaxError):
        return "syntax"
    if isinstance(e, jinja2.exceptions.SecurityError):
        return "unsafe"
    return "type"


def main():
    out, env = [], environment()
    for path in sys.argv[2:]:
        source = template_text(path)
        if not source:
            continue
        try:
            compiled = env.from_string(source)
        except Exception as e:  # a template Jinja2 cannot read: left out
            print(f"{path}: {e}", file=sys.stderr)
            continue
        for name, conversation in CONVERSATIONS.items():
            variables = {"add_generation_prompt": True, "bos_token": "<BOS>", "eos_token": "<EOS>"}
            variables.update(conversation)
            entry = {"template": path, "source": source, "conversation": name, "variables": variables}
            try:
                entry["output"] = compiled.render(**variables)
            except Exception as e:
                entry["error"] = f"{type(e).__name__}: {e}"
                entry["error_kind"] = error_kind(e)
            out.append(entry)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
