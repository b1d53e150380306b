"""Structured outputs on stories15M: 100 random JSON schemas (tests/models/random_schemas.py) asked of `illm serve`
by 16 clients at once (response_format json_schema, temperature 1, a seed each): every output that finished parses
and validates against its schema (Debian's python3-jsonschema); outputs cut by max_tokens are counted apart and are
at most 5%. The same requests without the schema run beside them, and the output tok/s of both are printed: the
cost of the constraint at concurrency 16 (measured, never asserted)."""

import concurrent.futures
import json
import os
import subprocess
import sys
import time

try:
    import jsonschema
except ImportError:  # Debian's python3-jsonschema is the system Python's
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3", *sys.argv])
    raise

from common import Server, request

ILLM = sys.argv[1]
SOURCE = sys.argv[2]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"
COUNT, CLIENTS, MAX_TOKENS = 100, 16, 1024
MESSAGES = [{"role": "user", "content": "Once upon a time, there was a little robot. Here is its record:"}]


def ask(port, i, schema):
    body = {"model": "stories15M", "messages": MESSAGES, "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": i}
    if schema is not None:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema}}
    status, answer = request(port, "POST", "/v1/chat/completions", body, timeout=600)
    assert status == 200, (i, answer)
    return answer


def run_all(port, schemas, constrained):
    started = time.time()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(lambda a: ask(port, a[0], a[1] if constrained else None), enumerate(schemas)))
    seconds = time.time() - started
    tokens = sum(a["usage"]["completion_tokens"] for a in answers)
    return answers, tokens / seconds


def main():
    schemas = json.loads(subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "models", "random_schemas.py"),
                                         str(COUNT), "7"], check=True, capture_output=True, text=True).stdout)
    with Server(ILLM, "--instances", "2", "--kv-blocks-per-instance", "512") as s:
        plain, plain_tps = run_all(s.port, schemas, False)
        answers, constrained_tps = run_all(s.port, schemas, True)
    valid, cut = 0, 0
    for i, (schema, answer) in enumerate(zip(schemas, answers)):
        choice = answer["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] == "length":
            cut += 1
            continue
        assert choice["finish_reason"] == "stop", (i, choice)
        try:
            jsonschema.validate(json.loads(text), schema)
        except (ValueError, jsonschema.ValidationError) as e:
            raise AssertionError(f"schema {i}: {json.dumps(schema)}\noutput: {text}\n{e}")
        valid += 1
    print(f"{COUNT} random schemas at concurrency {CLIENTS}: {valid} outputs parse and validate, {cut} cut by "
          f"max_tokens {MAX_TOKENS}; output tok/s {constrained_tps:.1f} constrained, {plain_tps:.1f} without "
          f"({constrained_tps / plain_tps:.2f}x)")
    # stories15M repeats the items of an array without maxItems ([42, 42, ...]) as long as it may: an output whose
    # budget runs out takes the shortest way to a whole value, so such outputs end whole too.
    assert cut <= COUNT * 5 // 100, f"{cut} of {COUNT} outputs cut by max_tokens"


if __name__ == "__main__":
    main()
