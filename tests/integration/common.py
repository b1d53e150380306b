"""Helpers of the integration tests: start and stop `illm serve` (and other servers) on loopback,
and talk HTTP to them. Every process a test starts is stopped when the test ends."""

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

# Generous upper bounds on the waits of the process tests (never timing assertions): a process to join its cluster
# (model load, UCX and CAF handshakes on a loaded machine), a request to run, a process to exit.
JOIN_S = 120
RUN_S = 600
EXIT_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate, timeout_s, what):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def request(port, method, path, body=None, headers=None, timeout=120, host="127.0.0.1"):
    """One HTTP request; returns (status, parsed JSON or text)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    payload = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    conn.request(method, path, payload, {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    data = response.read().decode("utf-8", "replace")
    conn.close()
    try:
        return response.status, json.loads(data)
    except ValueError:
        return response.status, data


def stream_events(port, path, body, headers=None, timeout=120):
    """A streamed request: yields the data of each server-sent event as it arrives."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
    response = conn.getresponse()
    assert response.status == 200, (response.status, response.read())
    buffer = b""
    while True:
        chunk = response.read1(65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            if event.startswith(b"data: "):
                yield event[6:].decode()


class Server:
    """`illm serve` on a free loopback port, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, illm, *args, port=None):
        self.port = port or free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="illm-serve-", suffix=".log", delete=False)
        self.process = subprocess.Popen([illm, "serve", "--host", "127.0.0.1", "--port", str(self.port), *args],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: request(self.port, "GET", "/health", timeout=2)[0] == 200, 60, "illm serve /health")
        except AssertionError:
            self.stop()
            sys.stderr.write(f"illm serve exited with {self.process.returncode}:\n{self.output()}\n")
            raise

    def stop(self, grace_s=30):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return self.process.returncode

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
        if exc[0] is not None:
            sys.stderr.write(self.output())
        os.unlink(self.log.name)



class stream_reader:
    """A streamed completion of `body` read on a thread of its own: each event's data and arrival time, and what
    ended it early, if anything."""

    def __init__(self, port, body, timeout=RUN_S):
        self.events, self.times, self.failure = [], [], []
        self.thread = threading.Thread(target=self._read, args=(port, body, timeout))
        self.thread.start()

    def _read(self, port, body, timeout):
        try:
            for data in stream_events(port, "/v1/completions", body, timeout=timeout):
                self.times.append(time.monotonic())
                self.events.append(data)
        except Exception as e:  # noqa: BLE001 (the test reports it)
            self.failure.append(repr(e))

    def wait_for(self, n):
        """Waits for the stream's first `n` events."""
        wait_until(lambda: len(self.events) >= n or self.failure or not self.thread.is_alive(), RUN_S,
                   "the stream's first tokens")
        assert len(self.events) >= n, (self.failure, self.events[-3:])

    def finish(self):
        """Waits for the stream's end: its events."""
        self.thread.join(RUN_S)
        assert not self.thread.is_alive(), "the stream did not end"
        assert not self.failure, self.failure
        return self.events

def metric(text, name, labels=None):
    """The value of a series in a Prometheus text exposition (0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        series, value = line.rsplit(" ", 1)
        if series.split("{")[0] != name:
            continue
        if labels and not all(f'{k}="{v}"' in series for k, v in labels.items()):
            continue
        total += float(value)
    return total


@contextlib.contextmanager
def process(args, **kwargs):
    """A background process, killed on exit."""
    p = subprocess.Popen(args, **kwargs)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


class SkipTest(Exception):
    """Raised by a test that cannot run here (e.g. illm built without UCX)."""


class Proc:
    """A background `illm` process whose stdout and stderr go to a log file."""

    def __init__(self, name, args):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"illm-{name}-", suffix=".log", delete=False)
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def has(self, pattern):
        return re.search(pattern, self.output(), re.M) is not None

    def wait_exit(self, timeout_s):
        return self.process.wait(timeout_s)

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def gone(self):
        """Exited and reaped by us (poll() reaps it, so no zombie of ours is left)."""
        return self.process.poll() is not None


def planes_connected(insts):
    """Whether every instance process in `insts` (id -> Proc) has its data plane connected to all the others; raises
    SkipTest when illm has no UCX, and AssertionError when one exited first."""
    for p in insts.values():
        if p.gone():
            if p.has(r"built without UCX"):
                raise SkipTest("illm was built without UCX")
            raise AssertionError(f"{p.name} exited with {p.process.returncode} before joining")
    return all(p.has(rf"data plane connected to instance {j}\b") for i, p in insts.items() for j in insts if j != i)


def busy_stream(port, timeout=120):
    """A long greedy answer (240 tokens of stories15M) streaming from `port`, its first event read: the instance running
    it stays busy until the returned events are drained."""
    events = stream_events(port, "/v1/completions", {"model": "stories15M", "prompt": "The sun", "max_tokens": 240,
                                                     "ignore_eos": True, "temperature": 0, "stream": True}, timeout=timeout)
    next(events)
    return events


def wait_busier(free_blocks, busy, idle, what):
    """Waits until instance `busy` has two blocks more in use than `idle` (pools of one size; free_blocks(): id -> free
    blocks), the margin a router needs before it sends a request whose 6 prefix blocks `busy` caches to `idle`: it
    weighs the blocks an instance has in use against a quarter of a block for each prefix block read elsewhere."""

    def busier():
        free = free_blocks()
        return free[idle] - free[busy] >= 2

    wait_until(busier, 60, what)


def small_instance(procs, i, gm_port, *args):
    """`illm instance` i of `procs` joining the gManager at `gm_port`: 64 blocks, one thread, heartbeats every 50 ms,
    UCX over tcp on lo."""
    return procs.start(f"instance{i}", "instance", "--join", f"127.0.0.1:{gm_port}", "--id", str(i),
                       "--kv-blocks-per-instance", "64", "--threads", "1", "--heartbeat-ms", "50", "--ucx-tls", "tcp",
                       "--ucx-net-devices", "lo", *args)


def wait_joined(insts):
    """Waits until every instance process in `insts` (id -> Proc) has joined its gManager; raises SkipTest when illm
    has no UCX, and AssertionError when one exited first."""

    def joined():
        for p in insts.values():
            if p.gone():
                if p.has(r"built without UCX"):
                    raise SkipTest("illm was built without UCX")
                raise AssertionError(f"{p.name} exited with {p.process.returncode} before joining")
        return all(p.has(rf"instance {i}: joined") for i, p in insts.items())

    wait_until(joined, JOIN_S, "every instance to join")


def start_front_end(procs, gm_port, fe_port, instances, *args):
    """`illm serve --gmanager` of `procs` on `fe_port`, once its /health counts `instances` instances."""
    fe = procs.start("serve", "serve", "--gmanager", f"127.0.0.1:{gm_port}", "--host", "127.0.0.1", "--port",
                     str(fe_port), *args)
    wait_until(lambda: fe.has(r"at http://") or fe.gone(), 120, "the front end to listen")
    assert not fe.gone(), fe.output()
    wait_until(lambda: request(fe_port, "GET", "/health", timeout=5) == (200, {"status": "ok", "instances": instances}),
               60, f"the front end's /health to count {instances} instances")
    return fe


class ProcGroup:
    """The processes a test starts; finish() kills what is still running, shows every log when the test
    failed, and removes the logs."""

    def __init__(self, illm):
        self.illm = illm
        self.started = []
        self.files = []  # removed by finish()

    def start(self, name, *args):
        p = Proc(name, [self.illm, *args])
        self.started.append(p)
        return p

    def all_gone(self):
        return all(p.gone() for p in self.started)

    def not_gone(self):
        return [p.name for p in self.started if not p.gone()]

    def stop_last(self, gmanager, exit_s):
        """Stops the gManager (SIGTERM, exit 0) once the others are done, and checks that every process
        started is gone."""
        gmanager.process.send_signal(signal.SIGTERM)
        assert gmanager.wait_exit(exit_s) == 0, gmanager.output()
        assert self.all_gone(), self.not_gone()
        print("every process started is gone", flush=True)

    def stop_cluster(self, front_end, instances, gmanager, exit_s):
        """Stops a cluster of processes in order: the front end and the instances (SIGTERM, each exits 0), then the
        gManager (stop_last)."""
        for p in (front_end, *instances):
            p.process.send_signal(signal.SIGTERM)
            assert p.wait_exit(exit_s) == 0, p.output()
        self.stop_last(gmanager, exit_s)

    def finish(self, ok):
        for p in self.started:
            p.stop()
        for p in self.started:
            if not ok:
                sys.stderr.write(f"---- {p.name} (exit {p.process.returncode}):\n{p.output()[-20000:]}\n")
            os.unlink(p.log.name)
        for path in self.files:
            os.unlink(path)

    @contextlib.contextmanager
    def running(self):
        """The body of a test: at the end every process is stopped (its log shown when the test failed) and
        "ok" printed; a SkipTest prints its reason and exits 77, the code the tests are registered to skip on."""
        ok = False
        try:
            yield self
            ok = True
        except SkipTest as e:
            ok = True
            print(f"skipped: {e}", flush=True)
            sys.exit(77)
        finally:
            self.finish(ok)
        print("ok")


SENTENCES = [
    "Once upon a time, there was a little girl named Lily who lived in a small house near the woods.",
    "Every morning she walked to the river with her dog Max and looked at the fish in the water.",
    "One day she found a shiny red ball under a big tree, and she wanted to show it to her mom.",
    "Max barked and ran in circles, because he wanted to play with the ball too.",
    "They played all afternoon in the sun, and then they went home for a warm bowl of soup.",
    "At night Lily looked at the stars from her window and thought about the next adventure.",
]


def make_prompt(words_wanted=2460):
    out, words, i = [], 0, 0
    while words < words_wanted:
        s = SENTENCES[i % len(SENTENCES)]
        if i % len(SENTENCES) == 0:
            s = f"On day {i // len(SENTENCES) + 1}: " + s
        out.append(s)
        words += len(s.split())
        i += 1
    return " ".join(out)


def moves(gm, after=0):
    """(request, source, destination, blocks) of each move the gManager logged after `after` characters."""
    found = re.findall(r"^illm gmanager: move \d+ of request (\d+): instance (\d+) -> (\d+), (\d+) blocks",
                       gm.output()[after:], re.M)
    return [tuple(int(x) for x in m) for m in found]


def moved_at_least(gm, after, blocks):
    """(request, owner, holder) once the gManager logged moves of `blocks` or more from one owner to one holder."""
    total = {}
    for req, src, dst, n in moves(gm, after):
        total[(req, src, dst)] = total.get((req, src, dst), 0) + n
        if total[(req, src, dst)] >= blocks:
            return req, src, dst
    return None


def run_json(args, timeout_s):
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s, text=True)
    assert done.returncode == 0, (args, done.returncode, done.stderr[-4000:])
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr
