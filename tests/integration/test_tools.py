"""Tools through OpenAI's Node client on tiny random Hugging Face checkpoints (tests/models/tiny_checkpoints.py)
with real chat templates (llama.cpp's collection, deploy/fetch-tokenizers.sh): Llama 3.1's, whose calls are bare
JSON, and Qwen 2.5's, whose calls are <tool_call> tags. tools_client.cjs asks for a named function, for required
and auto, whole and streamed, and sends the tool's answer back; a conversation with tool turns gives the prompt ids
of Jinja2's rendering tokenized by Hugging Face's JS tokenizers; tools on a model without a chat template are a 400
naming tools."""

import json
import os
import subprocess
import sys
import tempfile

from common import Server, request
from test_hf_serve import PYTHON, TOKENIZERS, reference_ids_of
from test_openai_client import install_client

ILLM = sys.argv[1]
SOURCE = sys.argv[2]
TEMPLATES = os.path.join(TOKENIZERS, "templates")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]
CONVERSATION = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the weather in Paris?"},
                {"role": "assistant", "content": None,
                 "tool_calls": [{"id": "call_1", "type": "function",
                                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "{\"temperature\": 21}"}]


def as_template_reads(messages):
    """The conversation as transformers' apply_chat_template is given it: arguments as objects."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for call in m.get("tool_calls", []):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
    return out


def run_client(port, module, model, syntax):
    env = dict(os.environ, OPENAI_MODULE=module, ILLM_URL=f"http://127.0.0.1:{port}", MODEL=model, SYNTAX=syntax)
    here = os.path.dirname(os.path.abspath(__file__))
    result = subprocess.run(["node", os.path.join(here, "tools_client.cjs")], env=env, capture_output=True, text=True,
                            timeout=300)
    print(f"{syntax}: " + result.stdout + result.stderr)
    assert result.returncode == 0, f"the OpenAI client failed ({syntax})"


def main():
    llama31 = os.path.join(TEMPLATES, "meta-llama-Llama-3.1-8B-Instruct.jinja")
    qwen = os.path.join(TEMPLATES, "Qwen-Qwen2.5-7B-Instruct.jinja")
    if not os.path.exists(qwen):
        sys.exit("the tokenizer files and templates are needed: run deploy/fetch-tokenizers.sh")
    module = install_client()
    with tempfile.TemporaryDirectory(prefix="illm-tools-") as work:
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "models", "tiny_checkpoints.py"), work,
                        os.path.join(TOKENIZERS, "llama3_1")], check=True, capture_output=True)
        folder = os.path.join(work, "llama31-chat")
        for syntax, template in (("llama31", llama31), ("qwen", qwen)):
            with Server(ILLM, "--model", folder, "--chat-template", template, "--kv-blocks-per-instance", "64") as s:
                _, expected = reference_ids_of(work, template, {"messages": as_template_reads(CONVERSATION),
                                                                "tools": TOOLS})
                status, tokens = request(s.port, "POST", "/tokenize",
                                         {"model": "llama31-chat", "messages": CONVERSATION, "tools": TOOLS})
                assert status == 200, tokens
                print(f"{syntax}: a conversation with tool turns: ours {tokens['count']} prompt ids, Jinja2 + Hugging "
                      f"Face's tokenizer {len(expected)}: same {tokens['tokens'] == expected}")
                assert tokens["tokens"] == expected
                run_client(s.port, module, "llama31-chat", syntax)
    with Server(ILLM, "--kv-blocks-per-instance", "64") as s:  # stories15M: no chat template
        status, body = request(s.port, "POST", "/v1/chat/completions",
                               {"model": "stories15M", "messages": CONVERSATION[:2], "tools": TOOLS})
        print(f"tools without a chat template: {status} {body['error']['message']}")
        assert status == 400 and body["error"]["param"] == "tools", body


if __name__ == "__main__":
    main()
