"""`illm serve` against hostile clients: JSON nested 400,000 deep (800 KB) in every field of the API that takes a
JSON value (and in a tool call's arguments, which arrive as JSON text inside the body), schemas built to blow up the
structured-output constraint (a long enum of strings with a common start, anyOf over texts with a common start
nested, alternatives that read the same text nested, a long const), and prompts of nested arrays. Each is answered within a bound (a 4xx for what is refused, a
whole answer or a clean error for what runs), the server stays alive (/health) and a normal request still gets its
answer after each; over all of them its resident memory grows by less than 1 GiB. The server is a tiny Llama 3.1
checkpoint with Llama 3.1's real vocabulary (128,256 tokens: the constraint's masks at their real size) and Qwen
2.5's chat template (tools, tojson)."""

import json
import os
import subprocess
import sys
import tempfile
import time

from common import Server, request

ILLM = sys.argv[1]
SOURCE = sys.argv[2]
MODELS = os.environ.get("ILLM_MODELS", os.path.expanduser("~/.cache/illm/models"))
TOKENIZERS = os.path.join(MODELS, "hf-tokenizers")
TEMPLATE = os.path.join(TOKENIZERS, "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"  # Debian's numpy
MODEL = "llama31-chat"
DEPTH = 400_000
ANSWER_BOUND_S = 120  # a bound on each answer (a refusal takes milliseconds), never a timing assertion
USER = [{"role": "user", "content": "Hi"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
                                                                        "properties": {"a": {"type": "string"}}}}}]


def deep(depth=DEPTH):
    """A JSON value nested `depth` deep, as text: [[[...]]]."""
    return "[" * depth + "]" * depth


def chat(**fields):
    return {"model": MODEL, "messages": USER, "max_tokens": 4, **fields}


def with_deep(body, path):
    """The body's JSON text with the value at `path` (a placeholder string) replaced by deep()."""
    marker = "\u0000deep\u0000"
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = marker
    return json.dumps(body).replace(json.dumps(marker), deep())


def deep_fields():
    """(endpoint, label, body text) for each field that takes a JSON value, nested DEPTH deep."""
    out = []
    for field in ("metadata", "response_format", "tools", "tool_choice", "chat_template_kwargs", "logit_bias",
                  "stop", "stream_options", "messages", "seed", "max_tokens", "n", "user", "stop_token_ids"):
        out.append(("/v1/chat/completions", field, with_deep(chat(), [field])))
    for field in ("prompt", "logit_bias", "stop", "echo", "prompt_logprobs"):
        out.append(("/v1/completions", field, with_deep({"model": MODEL, "prompt": "Hi", "max_tokens": 4}, [field])))
    schema = chat(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": {"a": None}}})
    out.append(("/v1/chat/completions", "json_schema.schema", with_deep(schema, ["response_format", "json_schema",
                                                                                 "schema", "a"])))
    out.append(("/v1/chat/completions", "tool parameters",
                with_deep(chat(tools=json.loads(json.dumps(TOOLS))), ["tools", 0, "function", "parameters"])))
    out.append(("/v1/chat/completions", "message content", with_deep(chat(messages=[{"role": "user", "content": 0}]),
                                                                     ["messages", 0, "content"])))
    out.append(("/tokenize", "body", with_deep({"model": MODEL, "prompt": "Hi"}, ["prompt"])))
    out.append(("/detokenize", "tokens", with_deep({"model": MODEL, "tokens": [1]}, ["tokens"])))
    # A tool call's arguments: JSON text inside a string of the body (the body itself is shallow).
    calls = [{"role": "user", "content": "x"},
             {"role": "assistant", "content": None,
              "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": deep()}}]},
             {"role": "tool", "tool_call_id": "c", "content": "y"}]
    out.append(("/v1/chat/completions", "tool call arguments", json.dumps(chat(messages=calls, tools=TOOLS))))
    out.append(("/tokenize", "tool call arguments", json.dumps({"model": MODEL, "messages": calls, "tools": TOOLS})))
    return out


def constraint_bombs():
    """(label, body, what may answer): schemas made to blow the constraint up, and prompts of nested arrays."""
    prefix = "x" * 200
    long_enum = {"enum": [prefix + str(i) for i in range(250)]}  # 50 KB of strings that start alike
    # Two kinds of array that read the same text, nested 9 deep through $defs: 2^9 times the parse stacks.
    ambiguous = {"$defs": {"l0": {"type": "integer"}}, "$ref": "#/$defs/l9"}
    for level in range(1, 10):
        below = {"$ref": f"#/$defs/l{level - 1}"}
        ambiguous["$defs"][f"l{level}"] = {"anyOf": [{"type": "array", "items": below, "maxItems": 1},
                                                     {"type": "array", "items": below, "maxItems": 2}]}
    # anyOf over texts with a common start, each level an array, an object or the level below.
    shared = {"$defs": {"p0": {"anyOf": [{"const": prefix + c} for c in "abc"]}}, "$ref": "#/$defs/p6"}
    for level in range(1, 7):
        below = {"$ref": f"#/$defs/p{level - 1}"}
        shared["$defs"][f"p{level}"] = {"anyOf": [below, {"type": "array", "items": below},
                                                  {"type": "object", "properties": {"k": below}, "required": ["k"]}]}
    tool_enum = {"enum": [prefix + str(i) for i in range(60)]}

    def schema_body(schema, max_tokens=48):
        return chat(max_tokens=max_tokens,
                    response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})

    return [
        ("a long enum of strings with a common start", schema_body(long_enum), (200,)),
        ("anyOf over the same text, nested 9 deep", schema_body(ambiguous), (400,)),
        ("anyOf over shared prefixes, nested", schema_body(shared), (200, 400, 500)),
        ("a const of 60 KB", schema_body({"const": "y" * 60_000}, 64), (200,)),
        ("a long enum, as a required tool call", chat(max_tokens=48, tools=[{"type": "function", "function": {
            "name": "f", "parameters": {"type": "object", "properties": {"a": tool_enum}, "required": ["a"]}}}],
            tool_choice="required"), (200,)),
        ("a prompt of nested arrays", {"model": MODEL, "prompt": [[[1, 2]]], "max_tokens": 4}, (400,)),
    ]


def resident_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def answered(server, path, body, label, accepted):
    started = time.time()
    status, answer = request(server.port, "POST", path, body, timeout=ANSWER_BOUND_S)
    seconds = time.time() - started
    message = answer["error"]["message"] if isinstance(answer, dict) and "error" in answer else ""
    print(f"{label}: {status} in {seconds:.2f} s {message[:110]}")
    assert status in accepted, (label, status, answer)
    assert server.process.poll() is None, f"the server died on {label}"
    assert request(server.port, "GET", "/health", timeout=30)[0] == 200, label
    return status, answer


def normal_request_works(server):
    status, answer = request(server.port, "POST", "/v1/chat/completions", chat(), timeout=ANSWER_BOUND_S)
    assert status == 200 and answer["choices"][0]["finish_reason"] in ("stop", "length"), answer


def main():
    if not os.path.exists(TEMPLATE):
        sys.exit("the tokenizer files and templates are needed: run deploy/fetch-tokenizers.sh")
    with tempfile.TemporaryDirectory(prefix="illm-hostile-") as work:
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "models", "tiny_checkpoints.py"), work,
                        os.path.join(TOKENIZERS, "llama3_1")], check=True, capture_output=True)
        folder = os.path.join(work, MODEL)
        with Server(ILLM, "--model", folder, "--chat-template", TEMPLATE, "--kv-blocks-per-instance", "64") as s:
            normal_request_works(s)
            before = resident_kib(s.process.pid)
            for path, label, body in deep_fields():
                assert len(body) < 1 << 20, (label, len(body))
                status, answer = answered(s, path, body, f"{path} {label} nested {DEPTH} deep", (400,))
                assert "max_json_depth" in answer["error"]["message"], (label, answer)
            normal_request_works(s)
            for label, body, accepted in constraint_bombs():
                answered(s, "/v1/chat/completions" if "messages" in body else "/v1/completions", body, label,
                         accepted)
                normal_request_works(s)
            after = resident_kib(s.process.pid)
            _, metrics = request(s.port, "GET", "/metrics")
            cache = [line for line in metrics.splitlines() if line.startswith("illm:constraint_cache_bytes ")]
            print(f"resident memory {before / 1024:.0f} MiB before, {after / 1024:.0f} MiB after "
                  f"(+{(after - before) / 1024:.0f} MiB); {cache[0] if cache else 'no constraint cache metric'}")
            assert cache, "illm:constraint_cache_bytes is missing"
            assert after - before < 1 << 20, f"resident memory grew by {(after - before) / 1024:.0f} MiB"


if __name__ == "__main__":
    main()
