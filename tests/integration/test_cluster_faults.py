"""Processes of a cluster die while requests run on it: `illm gmanager` and three `illm instance --join`
processes with small pools (64 blocks of 16 tokens each, UCX over tcp on lo).

A holder dies: a prompt of about one and a half pools goes to the cluster, so some of its KV blocks move
to another process; that process is SIGKILLed while the request runs. The request ends with an error that
names the dead instance (no hang, no wrong tokens), its owner stays up, and the long prompt on the two
survivors gives the ids of one instance.

An owner dies: the long prompt goes to the cluster of two again, 8 or more blocks move to the other
survivor, and the owner is SIGKILLed. Its client hears that its instance stopped; the holder logs that it released
what it kept for the dead owner, and a request that needs the holder's whole pool then runs on it and gives
the ids of one instance. Every process started here is gone at the end. Generous upper bounds on the
waits only: no timing assertions.

Usage: test_cluster_faults.py ILLM [SOURCE_DIR]"""

import re
import signal
import sys
import tempfile

from common import ProcGroup, SkipTest, free_port, make_prompt, run_json, wait_until

JOIN_S = 120
RUN_S = 600
EXIT_S = 60
POOL_BLOCKS = 64


def write_prompt(procs, words):
    f = tempfile.NamedTemporaryFile("w", prefix="illm-prompt-", suffix=".txt", delete=False)
    f.write(make_prompt(words))
    f.close()
    procs.files.append(f.name)
    return f.name


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


def main():
    illm = sys.argv[1]
    port = free_port()
    procs = ProcGroup(illm)
    start = procs.start
    long_prompt = write_prompt(procs, 1250)  # about 1500 tokens: 93 blocks, more than one pool
    full_pool = write_prompt(procs, 760)  # about 900 tokens: 57 of the 64 blocks of one pool
    gen = ["generate", "--temperature", "0", "--ignore-eos", "--json"]
    at = f"127.0.0.1:{port}"

    with procs.running():
        def reference(prompt):
            out, _ = run_json([illm, *gen, "--prompt-file", prompt, "--max-tokens", "12", "--instances", "1",
                               "--kv-blocks-per-instance", "1024", "--threads", "2"], RUN_S)
            print(f"reference (1 instance): {len(out['prompt_token_ids'])} prompt tokens -> {out['token_ids']}",
                  flush=True)
            return out

        long_reference, full_reference = reference(long_prompt), reference(full_pool)
        n_long, n_full = len(long_reference["prompt_token_ids"]), len(full_reference["prompt_token_ids"])
        assert n_long + 12 > POOL_BLOCKS * 16, n_long
        # A pool that still kept 8 blocks for others could not hold it.
        assert (POOL_BLOCKS - 8) * 16 < n_full + 12 <= POOL_BLOCKS * 16, n_full

        def same_ids(prompt, expected):
            done, _ = run_json([illm, *gen, "--prompt-file", prompt, "--max-tokens", "12", "--gmanager", at], RUN_S)
            assert done["token_ids"] == expected["token_ids"], (done["token_ids"], expected["token_ids"])

        gm = start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm.has(r"listening on 127\.0\.0\.1:%d" % port) or gm.process.poll() is not None, 60,
                   "the gManager to listen")
        insts = {i: start(f"instance{i}", "instance", "--join", f"127.0.0.1:{port}", "--id", str(i),
                          "--kv-blocks-per-instance", str(POOL_BLOCKS), "--threads", "1", "--heartbeat-ms", "50",
                          "--ucx-tls", "tcp", "--ucx-net-devices", "lo") for i in (0, 1, 2)}

        def all_connected():
            for p in insts.values():
                if p.process.poll() is not None:
                    if p.has(r"built without UCX"):
                        raise SkipTest("illm was built without UCX")
                    raise AssertionError(f"{p.name} exited with {p.process.returncode} before joining")
            return all(p.has(rf"data plane connected to instance {j}\b") for i, p in insts.items() for j in insts
                       if j != i)

        wait_until(all_connected, JOIN_S, "three instances to join and connect their planes")
        print("3 instances joined; every plane connected to the 2 others", flush=True)

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
        victim, req, owner, holder = spread_request("victim", 600, 1)
        insts[holder].process.send_signal(signal.SIGKILL)
        print(f"request {req} owned by instance {owner} moved blocks to instance {holder}: SIGKILLed it", flush=True)
        code = victim.wait_exit(RUN_S)
        assert code not in (0, None), (code, victim.output())
        failure = re.search(r"^illm: error: the request failed: .*$", victim.output(), re.M)
        assert failure and f"instance {holder}" in failure[0], victim.output()
        print(f"  the request ended (exit {code}): {failure[0]}", flush=True)
        assert insts[owner].process.poll() is None, insts[owner].output()
        assert insts[holder].wait_exit(EXIT_S) == -signal.SIGKILL
        wait_until(lambda: gm.has(rf"instance {holder} down"), EXIT_S, f"the gManager to report instance {holder} down")
        del insts[holder]

        same_ids(long_prompt, long_reference)
        print(f"  a request of {n_long} prompt tokens over the 2 survivors: the ids of one instance", flush=True)

        # ---- an owner dies while its blocks are hosted elsewhere ----
        orphan, req, owner, holder = spread_request("orphan", 200, 8)
        insts[owner].process.send_signal(signal.SIGKILL)
        print(f"request {req} owned by instance {owner} moved blocks to instance {holder}: SIGKILLed the owner",
              flush=True)
        code = orphan.wait_exit(RUN_S)
        assert code not in (0, None), (code, orphan.output())
        assert orphan.has(r"the instance serving the request (stopped|left the cluster)"), orphan.output()
        released = rf"rmanager {holder}: instance {owner} is gone: released what was kept here for its \d+ request"
        wait_until(lambda: insts[holder].has(released), EXIT_S,
                   f"instance {holder} to release instance {owner}'s blocks")
        print("  " + re.search(rf"^.*{released}.*$", insts[holder].output(), re.M)[0], flush=True)
        same_ids(full_pool, full_reference)
        print(f"  a request of {n_full} prompt tokens on the holder alone: the ids of one instance", flush=True)

        insts[holder].process.send_signal(signal.SIGTERM)
        assert insts[holder].wait_exit(EXIT_S) == 0, insts[holder].output()
        assert insts[owner].wait_exit(EXIT_S) == -signal.SIGKILL
        gm.process.send_signal(signal.SIGTERM)
        assert gm.wait_exit(EXIT_S) == 0, gm.output()
        assert procs.all_gone(), procs.not_gone()
        print("every process started is gone", flush=True)


if __name__ == "__main__":
    main()
