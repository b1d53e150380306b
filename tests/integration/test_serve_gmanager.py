"""The front end of a cluster of processes: `illm gmanager` on a free loopback port, two `illm instance
--join` processes with small pools (64 blocks of 16 tokens, UCX over tcp on lo) and `illm serve --gmanager`.
Through the front end's HTTP API: /health counts the joined instances; a short completion and one whose
prompt needs more than one instance's pool (its blocks move between the instance processes) return the
text of the same prompt on one embedded instance with enough memory; a streamed completion goes on while
an instance process is SIGKILLed, and the request that lost its blocks, too long to start over on the one
instance left, ends with an error event, not a hang, while the front end keeps serving on the other
instance. Instance 1 comes back, and the gManager is SIGKILLed while a request spread over both instances
decodes: the stream completes without error (the text of one big instance), and while the gManager is down
/health and a completion answer 200. The gManager started again at the same address is joined by both
instances, and a new long request is spread over both again. A seeded request with penalties spread over both
processes samples the ids of one embedded instance. Every process started here is gone at the end.
Only generous upper bounds on the waits: no timing assertions.

Usage: test_serve_gmanager.py ILLM [SOURCE_DIR]"""

import json
import signal
import subprocess
import sys
import tempfile
import time

from common import (EXIT_S, JOIN_S, RUN_S, ProcGroup, Server, free_port, request, start_front_end, stream_reader,
                    small_instance, wait_joined, wait_until)
from test_cluster_ucx import make_prompt

STREAM_TOKENS = 500


def embedded_text(illm, prompt, max_tokens, ignore_eos=False):
    """The text of `prompt` on one embedded instance with enough memory (greedy)."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt)
        f.flush()
        done = subprocess.run([illm, "generate", "--instances", "1", "--kv-blocks-per-instance", "1024",
                               "--prompt-file", f.name, "--max-tokens", str(max_tokens), "--temperature", "0", "--json"]
                              + (["--ignore-eos"] if ignore_eos else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_S, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)["text"]


def completion(port, prompt, max_tokens, **extra):
    return request(port, "POST", "/v1/completions", {"model": "stories15M", "prompt": prompt, "max_tokens": max_tokens,
                                                     "temperature": 0, **extra}, timeout=RUN_S)


def main():
    illm = sys.argv[1]
    gm_port, fe_port = free_port(), free_port()
    procs = ProcGroup(illm)

    def instance(i):
        return small_instance(procs, i, gm_port)

    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", f"127.0.0.1:{gm_port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
        assert not gm.gone(), f"illm gmanager exited with {gm.process.returncode}"
        a, b = instance(0), instance(1)
        wait_joined({0: a, 1: b})
        fe = start_front_end(procs, gm_port, fe_port, 2, "--max-requests", "8")
        print("gManager, 2 instances and the front end are up; /health: ok, 2 instances", flush=True)

        # A short completion and one longer than a pool (1024 tokens): the text of one big instance.
        short = "Once upon a time"
        short_text = embedded_text(illm, short, 24)
        status, body = completion(fe_port, short, 24)
        assert status == 200, body
        assert body["choices"][0]["text"] == short_text, body
        long_prompt = make_prompt(1100)  # about 1500 tokens
        started = time.monotonic()
        status, body = completion(fe_port, long_prompt, 12)
        assert status == 200, body
        assert body["usage"]["prompt_tokens"] > 1024, body["usage"]
        long_text = embedded_text(illm, long_prompt, 12)
        assert body["choices"][0]["text"] == long_text, body
        moves = [line for line in gm.output().splitlines() if "blocks (" in line]
        assert moves, "no move between the instance processes:\n" + gm.output()
        print(f"completions through the front end equal one embedded instance: short, and "
              f"{body['usage']['prompt_tokens']} prompt tokens over 2 pools of 1024 ({len(moves)} moves, "
              f"{time.monotonic() - started:.1f} s)", flush=True)

        # Seeded sampling with penalties over both processes: the ids of one embedded instance.
        seeded = {"model": "stories15M", "prompt": long_prompt, "max_tokens": 24, "temperature": 1.0, "seed": 42,
                  "presence_penalty": 0.5, "frequency_penalty": 0.5, "top_k": 40, "return_token_ids": True}
        status, body = request(fe_port, "POST", "/v1/completions", seeded, timeout=RUN_S)
        assert status == 200, body
        with Server(illm, "--instances", "1", "--kv-blocks-per-instance", "1024") as one:
            status, alone = request(one.port, "POST", "/v1/completions", seeded, timeout=RUN_S)
        assert status == 200, alone
        same = body["choices"][0]["token_ids"] == alone["choices"][0]["token_ids"]
        print(f"seed 42 with penalties and top_k, spread over 2 processes and on one embedded instance: the same 24 "
              f"ids: {same}", flush=True)
        assert same, (body, alone)

        # A long stream (within the two pools) spread over both instances; one instance process is SIGKILLed mid-stream.
        long_stream = {"model": "stories15M", "prompt": long_prompt, "max_tokens": STREAM_TOKENS, "ignore_eos": True,
                       "stream": True, "temperature": 0}
        stream = stream_reader(fe_port, long_stream)
        stream.wait_for(5)
        killed_at = time.monotonic()
        b.process.send_signal(signal.SIGKILL)
        events = stream.finish()
        assert events[-1] == "[DONE]", events[-3:]
        errors = [e for e in events if e.startswith("{") and "error" in json.loads(e)]
        assert errors, "the request that lost its instance did not report an error: " + str(events[-3:])
        # The error is the stream's last event before [DONE]: no chunk with a finish reason follows it.
        assert events[-2] == errors[0] and len(errors) == 1, events[-3:]
        print(f"instance 1 SIGKILLed mid-stream: the stream ended {time.monotonic() - killed_at:.3f} s later with "
              f"an error event after {len(events) - 2} chunks, then [DONE]: "
              f"{json.loads(errors[0])['error']['message']}", flush=True)
        wait_until(lambda: gm.has(r"instance 1 down"), 60, "the gManager to report instance 1 down")
        wait_until(lambda: request(fe_port, "GET", "/health", timeout=5) == (200, {"status": "ok", "instances": 1}),
                   60, "the front end's /health to count one instance")
        status, body = completion(fe_port, short, 24)
        assert status == 200 and body["choices"][0]["text"] == short_text, body
        status, cluster = request(fe_port, "GET", "/v1/cluster", timeout=10)
        states = {i["id"]: (i["state"], i["reason"]) for i in cluster["instances"]}
        assert status == 200 and states[0][0] == "alive" and states[1][0] == "down" and states[1][1], cluster
        print(f"the front end keeps serving on instance 0; /v1/cluster (seq {cluster['seq']}) shows instance 1 "
              f"down: {states[1][1]}", flush=True)

        # Instance 1 comes back (a new process with its id), and the gManager is SIGKILLed while a request spread
        # over both instances decodes: the stream completes without error, with the text of one big instance.
        b = instance(1)
        wait_until(lambda: b.has(r"instance 1: joined") or b.gone(), JOIN_S, "instance 1 to join again")
        assert not b.gone(), b.output()
        wait_until(lambda: request(fe_port, "GET", "/health", timeout=5) == (200, {"status": "ok", "instances": 2}),
                   60, "the front end's /health to count both instances again")
        stream = stream_reader(fe_port, long_stream)
        stream.wait_for(5)
        gm.process.send_signal(signal.SIGKILL)
        wait_until(lambda: a.has(r"the gManager is gone") and b.has(r"the gManager is gone"), 60,
                   "both instances to notice the gManager is gone")
        tokens_at_kill = len(stream.events)
        status, body = completion(fe_port, short, 24)
        assert status == 200 and body["choices"][0]["text"] == short_text, (status, body)
        assert request(fe_port, "GET", "/health", timeout=10) == (200, {"status": "ok", "instances": 2})
        events = stream.finish()
        assert events[-1] == "[DONE]", events[-3:]
        chunks = [json.loads(e) for e in events[:-1]]
        assert not [c for c in chunks if "error" in c], events[-3:]
        assert chunks[-1]["choices"][0]["finish_reason"] == "length", events[-3:]
        streamed = "".join(c["choices"][0]["text"] for c in chunks)
        assert streamed == embedded_text(illm, long_prompt, STREAM_TOKENS, ignore_eos=True), streamed[-200:]
        print(f"gManager SIGKILLed mid-stream (after {tokens_at_kill} events): the stream completed without error "
              f"({len(chunks)} chunks, the text of one big instance); while it was down a completion got 200 and "
              f"/health counted 2 instances", flush=True)

        # The gManager starts again at the same address: both instances join it, and a new long request is
        # spread over both instances again (its moves are in the new gManager's log).
        gm2 = procs.start("gmanager2", "gmanager", "--listen", f"127.0.0.1:{gm_port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm2.has(r"instance 0 joined") and gm2.has(r"instance 1 joined"), JOIN_S,
                   "both instances to join the restarted gManager")
        status, body = completion(fe_port, long_prompt, 12)
        assert status == 200 and body["choices"][0]["text"] == long_text, (status, body)
        wait_until(lambda: "blocks (" in gm2.output(), 60, "the restarted gManager to report the request's moves")
        print("the gManager restarted: both instances joined it, and a long request spread over both again "
              f"({len([x for x in gm2.output().splitlines() if 'blocks (' in x])} moves)", flush=True)

        procs.stop_cluster(fe, (a, b), gm2, EXIT_S)


if __name__ == "__main__":
    main()
