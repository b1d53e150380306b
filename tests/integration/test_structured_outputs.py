"""Structured outputs on stories15M: 100 random JSON schemas (tests/models/random_schemas.py) asked of `illm serve`
by 16 clients at once (response_format json_schema, temperature 1, a seed each): every output that finished parses
and validates against its schema (Debian's python3-jsonschema, with checkers of the formats date, time, date-time
and uuid defined here: its own lack them or are older than RFC 3339); outputs cut by max_tokens are counted apart
and are at most 5%. The first 32 requests without the schema run beside them, and the output tok/s of both are printed: the
cost of the constraint at concurrency 16 (measured, never asserted)."""

import concurrent.futures
import json
import os
import re
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


def valid_date(text):
    """RFC 3339 full-date: months 01-12, each month's days, 29 February in leap years (proleptic Gregorian)."""
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})", text)
    if not m:
        return False
    year, month, day = map(int, m.groups())
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    return 1 <= month <= 12 and 1 <= day <= days[month - 1]


def valid_time(text):
    """RFC 3339 full-time: hour 00-23, minute 00-59, second 00-60 (a leap second), a fraction, an offset."""
    m = re.fullmatch(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|[+-](\d{2}):(\d{2}))", text)
    if not m:
        return False
    hour, minute, second = int(m.group(1)), int(m.group(2)), int(m.group(3))
    offset_ok = m.group(5) == "Z" or (int(m.group(6)) <= 23 and int(m.group(7)) <= 59)
    return hour <= 23 and minute <= 59 and second <= 60 and offset_ok


def valid_date_time(text):
    return "T" in text and valid_date(text.split("T", 1)[0]) and valid_time(text.split("T", 1)[1])


def valid_uuid(text):
    return re.fullmatch(r"[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}", text) is not None


def format_checker():
    """A format applies to strings only (other values pass it, as JSON Schema says)."""
    checker = jsonschema.FormatChecker(formats=())
    for name, valid in (("date", valid_date), ("time", valid_time), ("date-time", valid_date_time),
                        ("uuid", valid_uuid)):
        checker.checks(name)(lambda v, valid=valid: not isinstance(v, str) or valid(v))
    return checker


def check_the_checkers(checker):
    """Each format's checker refuses what breaks it (so that a valid answer means something)."""
    for fmt, good, bad in (("date", "2024-02-29", ["2023-02-29", "2024-13-01", "2024-99-99", "1900-02-29"]),
                           ("time", "23:59:60.5+01:00", ["24:00:00Z", "99:99:99Z", "12:00:00", "12:00:00+01:60"]),
                           ("date-time", "2000-02-29T00:00:00Z", ["2000-02-30T00:00:00Z", "2000-02-29 00:00:00Z"]),
                           ("uuid", "123e4567-e89b-12d3-a456-426614174000", ["123e4567-e89b-12d3-a456-42661417400g"])):
        jsonschema.validate(good, {"type": "string", "format": fmt}, format_checker=checker)
        for b in bad:
            try:
                jsonschema.validate(b, {"type": "string", "format": fmt}, format_checker=checker)
            except jsonschema.ValidationError:
                continue
            raise AssertionError(f"the {fmt} checker accepts {b}")


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
        _, plain_tps = run_all(s.port, schemas[:2 * CLIENTS], False)  # the rate without schemas: two rounds of clients
        answers, constrained_tps = run_all(s.port, schemas, True)
    checker = format_checker()
    check_the_checkers(checker)
    valid, cut, formats = 0, 0, 0
    for i, (schema, answer) in enumerate(zip(schemas, answers)):
        choice = answer["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] == "length":
            cut += 1
            continue
        assert choice["finish_reason"] == "stop", (i, choice)
        try:
            jsonschema.validate(json.loads(text), schema, format_checker=checker)
        except (ValueError, jsonschema.ValidationError) as e:
            raise AssertionError(f"schema {i}: {json.dumps(schema)}\noutput: {text}\n{e}")
        valid += 1
        formats += json.dumps(schema).count('"format"')
    print(f"{COUNT} random schemas at concurrency {CLIENTS}: {valid} outputs parse and validate ({formats} string "
          f"formats in their schemas, each checked), {cut} cut by "
          f"max_tokens {MAX_TOKENS}; output tok/s {constrained_tps:.1f} constrained, {plain_tps:.1f} without "
          f"({constrained_tps / plain_tps:.2f}x)")
    # stories15M repeats the items of an array without maxItems ([42, 42, ...]) as long as it may: an output whose
    # budget runs out takes the shortest way to a whole value, so such outputs end whole too.
    assert cut <= COUNT * 5 // 100, f"{cut} of {COUNT} outputs cut by max_tokens"


if __name__ == "__main__":
    main()
