"""`illm serve` as an OpenAI-compatible server: completions and chat (whole and streamed) return the
model's text; every kind of bad input gets the right 4xx with an OpenAI error and the server keeps
serving; API keys, the in-flight limit, a client that disconnects mid-stream and SIGTERM all behave; an unseeded
request samples differently after a restart."""

import json
import os
import signal
import socket
import sys
import tempfile
import threading
import time

from common import Server, metric, request, stream_events, wait_until

ILLM = sys.argv[1]
STORY = "Lily"  # the model's well-known greedy story for "Once upon a time"


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def completions_and_chat(port):
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 30, "temperature": 0})
    check(status == 200 and STORY in body["choices"][0]["text"], (status, body))
    check(body["usage"] == {"prompt_tokens": 5, "completion_tokens": 30, "total_tokens": 35,
                           "prompt_tokens_details": {"cached_tokens": 0}}, body)
    events = list(stream_events(port, "/v1/chat/completions", {
        "model": "stories15M", "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 20,
        "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}))
    check(events[-1] == "[DONE]", events[-3:])
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    check(STORY in text, text)
    check(chunks[-1]["usage"]["completion_tokens"] == 20, chunks[-1])
    check(chunks[-2]["choices"][0]["finish_reason"] == "length", chunks[-2])
    status, models = request(port, "GET", "/v1/models")
    check(status == 200 and models["data"][0]["id"] == "stories15M", models)
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0,
                            "stop": [" She"]})
    check(status == 200 and body["choices"][0]["finish_reason"] == "stop", body)
    check(" She" not in body["choices"][0]["text"] and body["choices"][0]["text"].endswith("Lily."), body)


BAD_INPUTS = [
    ("malformed JSON", b'{"model": "stories15M", "prompt": ', 400, None),
    ("not an object", b'["stories15M"]', 400, None),
    ("wrong type", {"model": "stories15M", "prompt": "hi", "max_tokens": "ten"}, 400, "max_tokens"),
    ("unknown field", {"model": "stories15M", "prompt": "hi", "best_friend": 1}, 400, "best_friend"),
    ("empty prompt", {"model": "stories15M", "prompt": ""}, 400, "prompt"),
    ("oversized prompt", {"model": "stories15M", "prompt": "story " * 5000}, 400, "prompt"),
    ("negative max_tokens", {"model": "stories15M", "prompt": "hi", "max_tokens": -5}, 400, "max_tokens"),
    ("huge max_tokens", {"model": "stories15M", "prompt": "hi", "max_tokens": 10**12}, 400, "max_tokens"),
    ("invalid UTF-8", b'{"model": "stories15M", "prompt": "\xff\xfe"}', 400, None),
    ("unknown model", {"model": "gpt-4o", "prompt": "hi"}, 404, "model"),
    ("body too large", {"model": "stories15M", "prompt": "x" * 300000}, 413, None),
]


def bad_inputs(port):
    for name, body, status, param in BAD_INPUTS:
        got, answer = request(port, "POST", "/v1/completions", body)
        check(got == status, f"{name}: status {got}, wanted {status}: {answer}")
        check(isinstance(answer, dict) and "message" in answer["error"] and answer["error"]["type"], (name, answer))
        if param:
            check(answer["error"]["param"] == param, (name, answer))
    got, answer = request(port, "GET", "/v1/completions")
    check(got == 405, answer)
    got, answer = request(port, "GET", "/no/such/path")
    check(got == 404, answer)
    check(request(port, "GET", "/health")[0] == 200, "the server stopped serving after bad input")


def disconnect_mid_stream(port):
    before = request(port, "GET", "/metrics")[1]
    sock = socket.create_connection(("127.0.0.1", port))
    body = json.dumps({"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 2000,
                       "ignore_eos": True, "stream": True})
    sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    received = b""
    while received.count(b"data:") < 5:
        received += sock.recv(4096)
    sock.close()  # the client goes away mid-stream

    def cancelled():
        text = request(port, "GET", "/metrics")[1]
        return (metric(text, "illm:request_success_total", {"finished_reason": "abort"}) ==
                metric(before, "illm:request_success_total", {"finished_reason": "abort"}) + 1 and
                metric(text, "illm:kv_cache_usage_perc") == 0)
    wait_until(cancelled, 20, "the cancelled request's blocks to be freed")
    check(request(port, "GET", "/health")[0] == 200, "the server stopped serving after a disconnect")


def api_keys():
    with Server(ILLM, "--instances", "1", "--kv-blocks-per-instance", "64", "--api-key", "sekret", "--api-key",
                "second-key") as s:
        body = {"model": "stories15M", "prompt": "hi", "max_tokens": 2}
        status, answer = request(s.port, "POST", "/v1/completions", body)
        check(status == 401 and answer["error"]["code"] == "invalid_api_key", answer)
        for wrong in ("Bearer wrong", "Bearer sekre", "Bearer sekretX", "sekret", "Bearer  sekret"):
            status, answer = request(s.port, "POST", "/v1/completions", body, {"Authorization": wrong})
            check(status == 401, (wrong, answer))
        for right in ("Bearer sekret", "Bearer second-key"):
            status, answer = request(s.port, "POST", "/v1/completions", body, {"Authorization": right})
            check(status == 200, (right, answer))
        check(request(s.port, "GET", "/v1/models")[0] == 401, "models without a key")


def in_flight_limit_and_sigterm():
    with Server(ILLM, "--instances", "1", "--kv-blocks-per-instance", "256", "--max-requests", "2") as s:
        long = {"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 600, "ignore_eos": True,
                "stream": True}
        results = []

        def run():
            results.append(list(stream_events(s.port, "/v1/completions", long)))
        threads = [threading.Thread(target=run) for _ in range(2)]
        for t in threads:
            t.start()
        wait_until(lambda: metric(request(s.port, "GET", "/metrics")[1], "illm:num_requests_running") == 2, 30,
                   "two running requests")
        status, answer = request(s.port, "POST", "/v1/completions", {"model": "stories15M", "prompt": "hi"})
        check(status == 429 and answer["error"]["type"] == "rate_limit_error", (status, answer))
        # SIGTERM: the running streams end cleanly ([DONE]) and the process exits 0.
        code = s.stop(grace_s=60)
        for t in threads:
            t.join(60)
        check(code == 0, f"exit code {code}: {s.output()}")
        check(len(results) == 2 and all(r and r[-1] == "[DONE]" for r in results), [r[-2:] for r in results])


def repeated_stop_signal():
    # A second SIGTERM (or a SIGINT from the terminal and a SIGTERM from the shell that forwards it) while the
    # server stops is ignored: it still finishes its stop and exits 0.
    with Server(ILLM, "--instances", "1", "--kv-blocks-per-instance", "256") as s:
        s.process.send_signal(signal.SIGINT)
        time.sleep(0.2)
        s.process.send_signal(signal.SIGTERM)
        code = s.stop(grace_s=60)
        check(code == 0 and "illm serve: stopped" in s.output(), f"exit code {code}: {s.output()}")
        # By default the embedded gManager places with the greedy policy on a profile measured at the first start
        # on this machine and read from the profile cache at the next.
        out = s.output()
        check(("placement profile measured in" in out and "for the next start" in out
               or "placement profile from " in out) and "greedy placement) at http://" in out, out)


def unseeded_across_restarts():
    """An unseeded request's seed comes from the operating system: the first sampled answer of a server is not the
    first answer of the server started again (a seed made from the request's number would repeat it)."""
    body = {"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 1.5,
            "return_token_ids": True}
    firsts = []
    for _ in range(2):
        with Server(ILLM, "--instances", "1", "--kv-blocks-per-instance", "64") as s:
            status, answer = request(s.port, "POST", "/v1/completions", body)
            check(status == 200, answer)
            firsts.append(answer["choices"][0]["token_ids"])
    check(firsts[0] != firsts[1], f"the first unseeded answer repeats across a restart: {firsts[0]}")


def main():
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"instances": 2, "kv_blocks_per_instance": 256, "max_body_bytes": 65536, "max_prompt_tokens": 1024,
               "max_tokens": 4096}, config)
    config.close()
    try:
        with Server(ILLM, "--config", config.name) as s:
            completions_and_chat(s.port)
            bad_inputs(s.port)
            disconnect_mid_stream(s.port)
        api_keys()
        in_flight_limit_and_sigterm()
        repeated_stop_signal()
        unseeded_across_restarts()
    finally:
        os.unlink(config.name)
    print("test_serve_api: all checks passed")


if __name__ == "__main__":
    main()
