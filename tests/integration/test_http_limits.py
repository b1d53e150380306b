"""`illm serve` under attack from other loopback addresses (127.0.0.2 and up) than its client's: 200
slowloris connections (a request head sent a line at a time) and a flood of 2000 idle connections, kept
up by reopening whatever the server closes, do not stop a normal client on 127.0.0.1 from getting its
completions. The server closes the slow heads at their deadline (408), caps each address (503), makes
room by closing the connection that waited longest, refuses malformed heads with the right 4xx/5xx,
keeps connections alive, answers pipelined requests and Expect: 100-continue, and ends with no more
open files than it began with."""

import json
import os
import resource
import socket
import sys
import tempfile
import threading
import time

from common import Server, metric, request, stream_events, wait_until

ILLM = sys.argv[1]
STORY = "Lily"
PER_CLIENT = 64
MAX_CONNECTIONS = 300
HEADER_TIMEOUT_MS = 3000


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def connect_from(source, port):
    s = socket.socket()
    s.setblocking(False)
    s.bind((source, 0))
    s.connect_ex(("127.0.0.1", port))
    return s


class Attack:
    """Connections from other addresses, reopened whenever the server closes one, until stop()."""

    def __init__(self, port, slowloris, flood):
        self.port = port
        self.plan = slowloris + flood  # (source address, slow?) per connection
        self.sockets = [None] * len(self.plan)
        self.closed_by_server = 0
        self.answers = {}  # first status line word -> count
        self.rounds = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def open(self, i):
        source, slow = self.plan[i]
        try:
            s = connect_from(source, self.port)
        except OSError:
            self.sockets[i] = None
            return
        self.sockets[i] = s
        if slow:
            try:
                s.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            except OSError:
                pass

    def poke(self, i, tick):
        s = self.sockets[i]
        if s is None:
            return self.open(i)
        try:
            data = s.recv(4096)
        except BlockingIOError:
            data = None
        except OSError:
            data = b""
        if data is not None:  # an answer (the server's refusal) or the end: the server closed it
            if data:
                status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "?"
                self.answers[status] = self.answers.get(status, 0) + 1
            self.closed_by_server += 1
            s.close()
            return self.open(i)
        if self.plan[i][1] and tick:
            try:
                s.send(b"X-Slow: 1\r\n")  # a line at a time, never the empty line that ends the head
            except OSError:
                pass

    def run(self):
        for i in range(len(self.plan)):
            self.open(i)
        last_tick = time.time()
        while not self.done.is_set():
            tick = time.time() - last_tick >= 1.0
            if tick:
                last_tick = time.time()
            for i in range(len(self.plan)):
                self.poke(i, tick)
            self.rounds += 1
            time.sleep(0.05)

    def stop(self):
        self.done.set()
        self.thread.join()
        for s in self.sockets:
            if s is not None:
                s.close()


def completion_ok(port):
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0},
                           timeout=120)
    check(status == 200 and STORY in body["choices"][0]["text"], (status, body))
    events = list(stream_events(port, "/v1/completions", {"model": "stories15M", "prompt": "Once upon a time",
                                                           "max_tokens": 16, "temperature": 0, "stream": True}))
    check(events[-1] == "[DONE]", events[-3:])


def raw_exchange(port, data, read_until_close=True):
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
            if not read_until_close and out.count(b"\r\n\r\n") >= 1 and b"Content-Length" in out:
                head, _, body = out.partition(b"\r\n\r\n")
                length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                if len(body) >= length:
                    return out


def status_of(response):
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else None


def malformed_heads(port):
    check(status_of(raw_exchange(port, b"HELLO\r\n\r\n")) == 400, "a line that is no request line")
    check(status_of(raw_exchange(port, b"GET /health HTTP/2.0\r\n\r\n")) == 505, "an HTTP version not served")
    check(status_of(raw_exchange(port, b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n")) == 414, "a long request line")
    check(status_of(raw_exchange(port, b"GET /health HTTP/1.1\r\n" + b"X-Big: " + b"b" * 20000 + b"\r\n\r\n")) == 431,
          "a large head")
    check(status_of(raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n")) == 501,
          "a chunked body")
    check(status_of(raw_exchange(port, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"))
          == 400, "two lengths")
    check(status_of(raw_exchange(port, b"GET /health HTTP/1.1\r\nBad Name: x\r\n\r\n")) == 400, "a bad header name")


def keep_alive_pipelining_and_continue(port):
    # Two requests in one write on one connection: two answers, in order, and the connection stays open.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while out.count(b"HTTP/1.1 200") < 2:
            chunk = s.recv(65536)
            check(chunk, f"the connection closed after {out!r}")
            out += chunk
        check(b'"status":"ok"' in out and b"stories15M" in out, out)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        rest = b""
        while chunk := s.recv(65536):
            rest += chunk
        check(status_of(rest) == 200 and b"Connection: close" in rest, rest)
    # Expect: 100-continue: the server says 100 before the body is sent.
    body = json.dumps({"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nConnection: close\r\n"
                  b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        first = s.recv(65536)
        check(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first)
        s.sendall(body)
        rest = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
        while chunk := s.recv(65536):
            rest += chunk
        check(status_of(rest) == 200 and b"Once upon a time" not in rest and b'"text"' in rest, rest)


def open_files(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def refused(port, reason):
    _, text = request(port, "GET", "/metrics")
    return metric(text, "illm:http_connections_refused_total", {"reason": reason}) or 0


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    check(hard >= 4096, f"this test opens 2200 connections; the open file limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump({"http_max_connections": MAX_CONNECTIONS, "http_max_connections_per_client": PER_CLIENT,
               "http_header_timeout_ms": HEADER_TIMEOUT_MS, "http_idle_timeout_ms": HEADER_TIMEOUT_MS}, config)
    config.close()
    try:
        with Server(ILLM, "--config", config.name) as server:
            port, pid = server.port, server.process.pid
            baseline = open_files(pid)
            malformed_heads(port)
            keep_alive_pipelining_and_continue(port)
            check(refused(port, "malformed") >= 7, "malformed heads are counted")

            # 200 slowloris connections from 4 addresses (50 each, under the cap of one address).
            slowloris = [(f"127.0.0.{2 + i % 4}", True) for i in range(200)]
            attack = Attack(port, slowloris, [])
            wait_until(lambda: attack.rounds >= 2, 60, "the slowloris connections")
            completion_ok(port)
            wait_until(lambda: attack.answers.get("408", 0) >= 200, 120, "the slow heads closed at their deadline")
            completion_ok(port)
            attack.stop()
            print(f"slowloris: {attack.closed_by_server} closed by the server, answers {attack.answers}")

            # The same, with a flood of 2000 idle connections from 4 more addresses (500 each, over the cap of
            # one address; with the slowloris, over the server's connections in all).
            flood = [(f"127.0.1.{1 + i % 4}", False) for i in range(2000)]
            attack = Attack(port, slowloris, flood)
            wait_until(lambda: attack.rounds >= 5, 120, "the flood")
            for _ in range(3):
                completion_ok(port)
            attack.stop()
            print(f"flood and slowloris: {attack.closed_by_server} closed by the server, answers {attack.answers}")
            for reason in ("client_limit", "evicted", "timeout"):
                count = refused(port, reason)
                print(f"illm:http_connections_refused_total{{reason={reason}}} {count}")
                check(count > 0, f"no connection was refused for {reason}")
            check(attack.answers.get("503", 0) > 0, attack.answers)

            # Nothing left behind: the attackers' connections all closed on the server's side too.
            wait_until(lambda: open_files(pid) <= baseline + 2, 60, f"open files back to {baseline}")
            check(request(port, "GET", "/health")[0] == 200, "serving after the attack")
            check(server.stop() == 0, "illm serve did not stop cleanly")
    finally:
        os.unlink(config.name)
    print("ok")


if __name__ == "__main__":
    main()
