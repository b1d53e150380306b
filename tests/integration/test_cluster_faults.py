"""Processes of a cluster die while requests run on it: `illm gmanager` and four `illm instance --join`
processes with small pools (64 blocks of 16 tokens each, UCX over tcp on lo).

A holder dies: a prompt of about one and a half pools goes to the cluster, so some of its KV blocks move
to another process; that process is SIGKILLed while the request runs. The owner recovers the request (counted
by illm:requests_recovered_total{how="recompute"} at its --metrics-listen): while its room prefills the prompt, it
starts over from its tokens (illm:requests_restarted_total); once it decodes, only the blocks that were lost are
computed again (illm:positions_recomputed_total counts fewer positions than the prompt has). The request completes
with the ids of one instance.

An owner dies: the long prompt goes to the cluster again, 16 or more of its blocks move to another
instance, and the owner is SIGKILLed. The client goes on with the prompt and the tokens it has on the two
survivors: a new owner takes over the blocks the holder kept (and computes only the rest), and the answer is the
ids of one instance; afterwards no survivor hosts a block. Then a request that needs nearly all of the two
survivors' pools (which it could not have, had a holder kept blocks for the dead owner) runs and gives the ids of
one instance. Last, an instance started with `--faults crash=mid_room`
owns the long request and dies as SIGKILL would once a chunk of its room is reserved at a holder; the
client goes on on the survivors with the ids of one instance. Then a holder hangs (SIGSTOP): nothing tells the
others, its connections stay open; the owner's steps time out on it and compute its blocks again, the gManager
declares it dead only when it has missed its heartbeats for --dead-after-ms, and the request completes with the
ids of one instance. Every process started here is gone at the end.
Generous upper bounds on the waits only: no timing assertions.

Usage: test_cluster_faults.py ILLM [SOURCE_DIR]"""

import json
import re
import signal
import sys
import tempfile
import time

from common import (EXIT_S, JOIN_S, RUN_S, ProcGroup, free_port, make_prompt, metric, moved_at_least, planes_connected,
                    request, run_json, wait_until)

POOL_BLOCKS = 64
VICTIM_TOKENS = 400
ORPHAN_TOKENS = 200


def write_prompt(procs, words):
    f = tempfile.NamedTemporaryFile("w", prefix="illm-prompt-", suffix=".txt", delete=False)
    f.write(make_prompt(words))
    f.close()
    procs.files.append(f.name)
    return f.name


def main():
    illm = sys.argv[1]
    port = free_port()
    procs = ProcGroup(illm)
    start = procs.start
    long_prompt = write_prompt(procs, 1250)  # about 1500 tokens: 93 blocks, more than one pool
    two_pools = write_prompt(procs, 1550)  # about 1800 tokens: 115 of the 128 blocks of two pools
    gen = ["generate", "--temperature", "0", "--ignore-eos", "--json"]
    at = f"127.0.0.1:{port}"

    with procs.running():
        def reference(prompt, max_tokens):
            out, _ = run_json([illm, *gen, "--prompt-file", prompt, "--max-tokens", str(max_tokens), "--instances",
                               "1", "--kv-blocks-per-instance", "1024", "--threads", "2"], RUN_S)
            print(f"reference (1 instance): {len(out['prompt_token_ids'])} prompt tokens -> "
                  f"{len(out['token_ids'])} tokens {out['token_ids'][:12]}...", flush=True)
            return out

        long_reference, two_reference = reference(long_prompt, VICTIM_TOKENS), reference(two_pools, 12)
        n_long, n_two = len(long_reference["prompt_token_ids"]), len(two_reference["prompt_token_ids"])
        # More than one pool, less than the two that survive two deaths.
        assert POOL_BLOCKS * 16 < n_long + VICTIM_TOKENS <= (2 * POOL_BLOCKS - 8) * 16, n_long
        # Two pools, one of which still kept 16 blocks for others, could not hold it.
        assert (2 * POOL_BLOCKS - 16) * 16 < n_two + 12 <= 2 * POOL_BLOCKS * 16, n_two

        def answer_of(client):
            """The --json report of a finished `illm generate` started with start()."""
            assert client.wait_exit(RUN_S) == 0, client.output()
            return json.loads([line for line in client.output().splitlines() if line.startswith("{")][-1])

        gm = start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2000",
                   "--dead-after-ms", "4000")
        wait_until(lambda: gm.has(r"listening on 127\.0\.0\.1:%d" % port) or gm.process.poll() is not None, 60,
                   "the gManager to listen")
        # Without prefix caches: the scenarios place requests by free memory alone (a cached prefix of the same long
        # prompt would draw it to its holder instead of the crashing instance).
        def instance_args(i, blocks=POOL_BLOCKS):
            return ["instance", "--join", f"127.0.0.1:{port}", "--id", str(i), "--kv-blocks-per-instance", str(blocks),
                    "--threads", "1", "--heartbeat-ms", "50", "--attention-timeout-ms", "3000", "--ucx-tls", "tcp",
                    "--ucx-net-devices", "lo", "--prefix-cache", "off"]

        insts = {i: start(f"instance{i}", *instance_args(i), "--metrics-listen", "127.0.0.1:0") for i in (0, 1, 2, 3)}

        def metrics_of(i):
            """Instance i's Prometheus exposition, from the port its log names."""
            port = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", insts[i].output())[1])
            status, text = request(port, "GET", "/metrics", timeout=10)
            assert status == 200, (status, text)
            return text

        wait_until(lambda: planes_connected(insts), JOIN_S, "four instances to join and connect their planes")
        print("4 instances joined; every plane connected to the 3 others", flush=True)

        def spread_request(name, max_tokens, blocks):
            """The long prompt on the cluster, once `blocks` of its blocks moved from its owner to one holder:
            its client process, the request, the owner and the holder."""
            mark = len(gm.output())
            client = start(name, *gen, "--prompt-file", long_prompt, "--max-tokens", str(max_tokens), "--gmanager", at)
            wait_until(lambda: moved_at_least(gm, mark, blocks) or client.process.poll() is not None, RUN_S,
                       f"{blocks} block(s) of the long request to move to another instance")
            assert client.process.poll() is None, (f"the request ended before {blocks} block(s) moved", client.output())
            return (client, *moved_at_least(gm, mark, blocks))

        # ---- a holder dies while the request runs ----
        victim, req, owner, holder = spread_request("victim", VICTIM_TOKENS, 1)
        insts[holder].process.send_signal(signal.SIGKILL)
        print(f"request {req} owned by instance {owner} moved blocks to instance {holder}: SIGKILLed it", flush=True)
        result = answer_of(victim)
        assert result["token_ids"] == long_reference["token_ids"], (result["token_ids"], long_reference["token_ids"])
        text = metrics_of(owner)
        # Blocks it copied crossed the data plane from a host pool: bytes and the copy's time, on the path named.
        # Blocks its room's holders prefilled where they lie crossed nothing (with a fast prefill, all of them may).
        moved = metric(text, "illm:kv_move_bytes_total", {"instance": owner, "path": "host"})
        copies = metric(text, "illm:kv_move_copy_seconds_count", {"instance": owner, "path": "host"})
        copied = sum(m["blocks"] for m in result["moves"] if not m["prefilled"] and m["source"] == owner)
        assert (moved > 0 and copies >= 1) if copied else (moved == 0 and copies == 0), (copied, moved, copies)
        print(f"  {copied} block(s) copied over the data plane ({moved:.0f} bytes), the rest prefilled by the holders",
              flush=True)
        recomputed = metric(text, "illm:positions_recomputed_total", {"instance": owner})
        recovered = metric(text, "illm:requests_recovered_total", {"instance": owner, "how": "recompute"})
        restarted = metric(text, "illm:requests_restarted_total", {"instance": owner})
        # Killed while its room prefilled the prompt, it starts over; while it decoded, it computes the lost blocks.
        assert recovered >= 1 and (restarted >= 1 or 16 <= recomputed < n_long), (recovered, restarted, recomputed)
        how = "started over" if restarted else f"computed {recomputed:.0f} of its {n_long} prompt positions again"
        print(f"  it {how} and completed: the {len(result['token_ids'])} ids of one instance", flush=True)
        assert insts[holder].wait_exit(EXIT_S) == -signal.SIGKILL
        wait_until(lambda: gm.has(rf"instance {holder} down"), EXIT_S, f"the gManager to report instance {holder} down")
        del insts[holder]

        # ---- an owner dies while its blocks are hosted elsewhere ----
        orphan, req, owner, holder = spread_request("orphan", ORPHAN_TOKENS, 16)
        insts[owner].process.send_signal(signal.SIGKILL)
        print(f"request {req} owned by instance {owner} moved blocks to instance {holder}: SIGKILLed the owner",
              flush=True)
        took = rf"rmanager \d+: took request {req} of instance {owner} over: \d+ block\(s\) survived"
        survivors = [p for i, p in insts.items() if i != owner]
        wait_until(lambda: any(p.has(took) for p in survivors), EXIT_S, "a new owner to take the request over")
        print("  " + next(re.search(rf"^.*{took}.*$", p.output(), re.M)[0] for p in survivors if p.has(took)),
              flush=True)
        result = answer_of(orphan)
        expected = long_reference["token_ids"][:ORPHAN_TOKENS]  # greedy: the first tokens of the longer answer
        assert result["token_ids"] == expected, (result["token_ids"], expected)
        print(f"  its client went on on the survivors with the blocks instance {holder} kept: the {len(expected)} ids of one "
              "instance", flush=True)
        # Nothing of the dead owner's stays: what was not taken over is freed with the takeover, the rest with the
        # request's end.
        wait_until(lambda: all(metric(metrics_of(i), "illm:kv_blocks_hosted") == 0 for i in insts if i != owner),
                   EXIT_S, "the survivors to free every block they kept for the dead owner's request")
        assert insts[owner].wait_exit(EXIT_S) == -signal.SIGKILL
        del insts[owner]
        done, _ = run_json([illm, *gen, "--prompt-file", two_pools, "--max-tokens", "12", "--gmanager", at], RUN_S)
        assert done["token_ids"] == two_reference["token_ids"], (done["token_ids"], two_reference["token_ids"])
        print(f"  a request of {n_two} prompt tokens over the two survivors' pools: the ids of one instance",
              flush=True)

        # ---- an owner crashes at a point of the protocol (--faults crash=mid_room) ----
        # Instance 4 has the largest pool, so the long request goes to it; it dies as SIGKILL would once the first
        # chunk of its room is reserved at a holder, and the client goes on on the survivors.
        crasher = start("instance4", *instance_args(4, POOL_BLOCKS + 16), "--faults", "crash=mid_room")
        wait_until(lambda: all(crasher.has(rf"data plane connected to instance {j}\b") for j in insts) or
                   crasher.process.poll() is not None, JOIN_S, "instance 4 to join and connect its plane")
        assert crasher.has("WARNING: FAULT INJECTION IS ON"), crasher.output()
        done, _ = run_json([illm, *gen, "--prompt-file", long_prompt, "--max-tokens", str(ORPHAN_TOKENS), "--gmanager",
                            at], RUN_S)
        assert crasher.wait_exit(EXIT_S) == -signal.SIGKILL, crasher.output()
        assert crasher.has("FAULT INJECTED: crash at mid_room"), crasher.output()
        assert done["token_ids"] == expected, (done["token_ids"], expected)
        wait_until(lambda: gm.has(r"instance 4 down"), EXIT_S, "the gManager to report instance 4 down")
        print("instance 4 (--faults crash=mid_room) owned the long request and died once a chunk of its room was "
              f"reserved; the client went on on the survivors: the {len(expected)} ids of one instance", flush=True)

        # ---- a holder hangs: only its missed heartbeats tell ----
        insts[5] = start("instance5", *instance_args(5), "--metrics-listen", "127.0.0.1:0")
        wait_until(lambda: all(insts[5].has(rf"data plane connected to instance {j}\b") for j in insts if j != 5) or
                   insts[5].gone(), JOIN_S, "instance 5 to join and connect its plane")
        hung, req, owner, holder = spread_request("hung", ORPHAN_TOKENS, 1)
        insts[holder].process.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        print(f"request {req} owned by instance {owner} moved blocks to instance {holder}: SIGSTOPped it", flush=True)
        result = answer_of(hung)
        assert result["token_ids"] == expected, (result["token_ids"], expected)
        wait_until(lambda: gm.has(rf"instance {holder} down \(no heartbeat for \d+ ms\)"), EXIT_S,
                   f"the gManager to declare instance {holder} dead by its heartbeats")
        declared = re.search(rf"instance {holder} down \((no heartbeat for \d+ ms)\)", gm.output())[1]
        print(f"  the gManager declared it dead by its missed heartbeats ({declared}); the request completed "
              f"{time.monotonic() - stopped_at:.1f} s after the stop with the {len(expected)} ids of one instance",
              flush=True)
        insts[holder].process.send_signal(signal.SIGKILL)
        assert insts[holder].wait_exit(EXIT_S) == -signal.SIGKILL
        del insts[holder]

        for p in insts.values():
            p.process.send_signal(signal.SIGTERM)
        for p in insts.values():
            assert p.wait_exit(EXIT_S) == 0, p.output()
        procs.stop_last(gm, EXIT_S)


if __name__ == "__main__":
    main()
