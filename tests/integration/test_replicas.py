"""Replicas over processes: `illm gmanager`, four `illm instance --join` processes (UCX over tcp on lo, pools of
POOL_BLOCKS blocks) and `illm serve --gmanager`. A streamed greedy completion of a long prompt is
spread over the instances (more than one and a half pools). With `--replica-min-tokens`, once the instances keep a copy of every full block of its
prompt (illm:kv_replica_blocks), the instance hosting the most of its blocks is SIGKILLed mid-stream: the owner
promotes the copies, the stream completes with the text of one instance, the owner's
illm:requests_recovered_total{how="replica"} rises and its illm:positions_recomputed_total (what its engine prefilled
again) stays at most one block
per lost instance. The same run on a cluster without replicas computes the blocks the holder had again, and only
them, when its owner's pool has them free (else it starts over from its tokens). The stall the kill causes (the longest wait for a token from the kill over
the next 32 tokens) of both runs is printed side by side. Then the same with the request's owner SIGKILLed: the front end hands the request to another instance,
which takes over the blocks that survived (the holders' blocks, and with replicas the copies of the owner's own) and
computes only the rest: how="replica" with copies promoted, how="takeover" without replicas (primaries adopted only). Every process started here is gone at the end. Generous upper bounds on the waits only: no timing
assertions.

Usage: test_replicas.py ILLM [SOURCE_DIR] [--pool-blocks N] [WORDS ...]  (prompt lengths in words; default one: CI's;
e.g. `--pool-blocks 800 11000 17000` for about 13K and 20K tokens over 4 x 800 blocks)"""

import json
import re
import signal
import subprocess
import sys
import tempfile
import time

from common import (EXIT_S, JOIN_S, ProcGroup, free_port, make_prompt, metric, planes_connected, request,
                    stream_reader, wait_until)

RUN_S = 900
POOL_BLOCKS = 200
OUTPUT_TOKENS = 400
DEFAULT_WORDS = 4300  # about 5,100 tokens: one pool of 3,200 tokens and more than half another


def reference_text(illm, prompt_file, max_tokens):
    """The text of the prompt on one embedded instance with enough memory (greedy), and its prompt tokens."""
    done = subprocess.run([illm, "generate", "--instances", "1", "--kv-blocks-per-instance", "4096", "--prompt-file",
                           prompt_file, "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos", "--json"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_S, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout)
    return out["text"], len(out["prompt_token_ids"])


def run_cluster(illm, prompt, prompt_tokens, expected, replica_min_tokens, pool_blocks, kill="holder"):
    """One cluster, one stream, one SIGKILLed instance (the holder of the most of the request's blocks, or its owner):
    the longest wait for a token from the kill on, and the counters of the instance that serves the request then."""
    gm_port, fe_port = free_port(), free_port()
    procs = ProcGroup(illm)
    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", f"127.0.0.1:{gm_port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
        insts = {i: procs.start(f"instance{i}", "instance", "--join", f"127.0.0.1:{gm_port}", "--id", str(i),
                                "--kv-blocks-per-instance", str(pool_blocks), "--threads", "1", "--heartbeat-ms", "50",
                                "--ucx-tls", "tcp", "--ucx-net-devices", "lo", "--metrics-listen", "127.0.0.1:0",
                                "--replica-min-tokens", str(replica_min_tokens))
                 for i in range(4)}

        wait_until(lambda: planes_connected(insts), JOIN_S, "four instances to join and connect their planes")
        config = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        json.dump({"max_prompt_tokens": 1 << 20}, config)  # the service's default limit is 4096
        config.close()
        procs.files.append(config.name)
        fe = procs.start("serve", "serve", "--gmanager", f"127.0.0.1:{gm_port}", "--host", "127.0.0.1", "--port",
                         str(fe_port), "--config", config.name)
        wait_until(lambda: request(fe_port, "GET", "/health", timeout=5) == (200, {"status": "ok", "instances": 4}),
                   120, "the front end to count four instances")

        def metrics_of(i):
            port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", insts[i].output())[1])
            status, text = request(port, "GET", "/metrics", timeout=10)
            assert status == 200, (status, text)
            return text

        stream = stream_reader(fe_port, {"model": "stories15M", "prompt": prompt, "max_tokens": OUTPUT_TOKENS,
                                         "ignore_eos": True, "stream": True, "temperature": 0})
        stream.wait_for(4)
        owner = next(i for i in insts if metric(metrics_of(i), "illm:num_requests_running", {"instance": i}) > 0)
        if replica_min_tokens:
            full_blocks = prompt_tokens // 16
            wait_until(lambda: sum(metric(metrics_of(i), "illm:kv_replica_blocks") for i in insts) >= full_blocks or
                       not stream.thread.is_alive(), RUN_S, f"copies of the {full_blocks} full blocks of the prompt")
        hosted = {i: metric(metrics_of(i), "illm:kv_blocks_hosted") for i in insts if i != owner}
        victim = max(hosted, key=hosted.get) if kill == "holder" else owner
        assert max(hosted.values()) > 0 and stream.thread.is_alive(), (hosted, len(stream.events))
        before = len(stream.events)
        killed_at = time.monotonic()
        insts[victim].process.send_signal(signal.SIGKILL)
        events = list(zip(stream.times, stream.finish()))
        assert events[-1][1] == "[DONE]", events[-3:]
        chunks = [json.loads(data) for _, data in events[:-1]]
        assert not [c for c in chunks if "error" in c], events[-3:]
        streamed = "".join(c["choices"][0]["text"] for c in chunks)
        assert streamed == expected, (streamed[-300:], expected[-300:])
        after = [t for t, data in events[before:] if data != "[DONE]"]
        assert after, "no token after the kill"
        # The stall the kill caused: the longest wait for a token from the kill on (a token made before the kill
        # may still arrive after it), over the next 32 tokens.
        times = [killed_at] + after[:32]
        gap = max(b - a for a, b in zip(times, times[1:]))
        if kill == "owner":  # the instance the front end handed the request to
            owner = next(i for i in insts if i != victim and
                         sum(metric(metrics_of(i), "illm:requests_recovered_total", {"instance": i, "how": how})
                             for how in ("replica", "takeover", "recompute")) > 0)
        text = metrics_of(owner)
        counters = {"replica": metric(text, "illm:requests_recovered_total", {"instance": owner, "how": "replica"}),
                    "takeover": metric(text, "illm:requests_recovered_total", {"instance": owner, "how": "takeover"}),
                    "recompute": metric(text, "illm:requests_recovered_total", {"instance": owner, "how": "recompute"}),
                    "recomputed": metric(text, "illm:positions_recomputed_total", {"instance": owner}),
                    "victim_blocks": hosted[victim] if kill == "holder" else 0}
        what = (f"instance {victim} (hosting {hosted[victim]:.0f} blocks)" if kill == "holder" else
                f"its owner, instance {victim}, taken over by instance {owner},")
        print(f"  replica_min_tokens {replica_min_tokens}: {what} SIGKILLed after {before} events; the longest "
              f"wait for a token after it {gap:.3f} s; the "
              f"stream completed with the text of one instance; recovered by replica {counters['replica']:.0f}, by "
              f"takeover {counters['takeover']:.0f}, by recompute {counters['recompute']:.0f}, positions recomputed "
              f"{counters['recomputed']:.0f}", flush=True)
        fe.process.send_signal(signal.SIGTERM)
        assert fe.wait_exit(EXIT_S) == 0, fe.output()
        for i, p in insts.items():
            if i != victim:
                p.process.send_signal(signal.SIGTERM)
                assert p.wait_exit(EXIT_S) == 0, p.output()
        procs.stop_last(gm, EXIT_S)
    return gap, counters


def main():
    illm, args = sys.argv[1], sys.argv[3:]
    pool_blocks = POOL_BLOCKS
    if args[:1] == ["--pool-blocks"]:
        pool_blocks, args = int(args[1]), args[2:]
    lengths = [int(w) for w in args] or [DEFAULT_WORDS]
    for words in lengths:
        with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
            prompt = make_prompt(words)
            f.write(prompt)
            f.flush()
            expected, prompt_tokens = reference_text(illm, f.name, OUTPUT_TOKENS)
        assert prompt_tokens > pool_blocks * 16, prompt_tokens  # more than one pool: spread over several
        print(f"a prompt of {prompt_tokens} tokens over 4 pools of {pool_blocks} blocks, {OUTPUT_TOKENS} tokens "
              "streamed; the holder of the most of its blocks SIGKILLed mid-stream:", flush=True)
        with_copies, promoted = run_cluster(illm, prompt, prompt_tokens, expected, 1024, pool_blocks)
        assert promoted["replica"] >= 1 and promoted["recomputed"] <= 16, promoted
        without, recomputed = run_cluster(illm, prompt, prompt_tokens, expected, 0, pool_blocks)
        assert recomputed["replica"] == 0 and recomputed["recompute"] >= 1, recomputed
        # The holder's blocks and the partial last block, when the owner's pool has them free; else it starts over.
        assert (16 * recomputed["victim_blocks"] <= recomputed["recomputed"] < 16 * (recomputed["victim_blocks"] + 1)
                or recomputed["recomputed"] >= prompt_tokens), recomputed
        print(f"{prompt_tokens} prompt tokens: the longest wait for a token after the kill {with_copies:.3f} s with replicas, "
              f"{without:.3f} s without (x{without / max(with_copies, 1e-6):.1f}); positions recomputed "
              f"{promoted['recomputed']:.0f} and {recomputed['recomputed']:.0f}", flush=True)
        print("the owner SIGKILLed mid-stream instead:", flush=True)
        owner_copies, taken = run_cluster(illm, prompt, prompt_tokens, expected, 1024, pool_blocks, "owner")
        # With copies of the owner's own blocks, its successor computes only the blocks made since the last copy.
        assert taken["replica"] >= 1 and taken["recomputed"] < prompt_tokens // 4, taken
        owner_without, lost = run_cluster(illm, prompt, prompt_tokens, expected, 0, pool_blocks, "owner")
        # Without them, the holders' blocks are taken over (no copy promoted) and the owner's own are computed again.
        assert lost["replica"] == 0 and lost["takeover"] >= 1, lost
        assert lost["recomputed"] > taken["recomputed"], (lost, taken)
        print(f"{prompt_tokens} prompt tokens, the owner killed: the longest wait for a token after the kill {owner_copies:.3f} s "
              f"with replicas, {owner_without:.3f} s without; positions recomputed {taken['recomputed']:.0f} and "
              f"{lost['recomputed']:.0f}", flush=True)
    print("ok")


if __name__ == "__main__":
    main()
