"""A request on a cluster of processes over the UCX data plane: `illm gmanager` on a free loopback port and
four `illm instance --join` processes with small pools (64 blocks of 16 tokens each, UCX over tcp on lo).
The gManager places with the greedy policy on a profile measured here (`illm profile`, `--profile`).
The instances exchange their worker addresses through the gManager's view and connect their planes; a
prompt of about 2900 tokens (about three pools) goes to the cluster with `illm generate --gmanager`: its
room's holders prefill chunks of it where their KV stays (their queries attending the chunks before them
on the other processes), any other KV blocks move between processes (put + flush into the destination's
reserved memory), and its attention is computed remotely. Its token ids must equal those of the same
prompt on one instance with enough memory, and the gManager must have logged chunks prefilled there. The
KV moves through UCX RMA: the instances report at least the bytes of the committed copies as puts, every
move committed what arrived intact (checksums), and the kernel's TCP counters show CAF's connections
carried far less than the KV placed on other processes. The instances say they run on two nodes of two:
some of the long steps' queries to the other node go there once, relayed by one holder to the other
(illm:remote_attention_relays_total), with the same ids. Every process started here is gone at the end.

Usage: test_cluster_ucx.py ILLM [SOURCE_DIR]"""

import re
import shutil
import signal
import subprocess
import sys
import tempfile

from common import (EXIT_S, JOIN_S, RUN_S, ProcGroup, SkipTest, free_port, make_prompt, metric, request, run_json,
                    wait_until)

MAX_TOKENS = 12

def tcp_bytes(port):
    """Bytes on the loopback TCP connections now open, from the kernel's counters (ss -ti): those with an
    end at `port` (CAF's: every connection of the middleman goes to the gManager's port, which routes
    the messages between the other processes) and the others (each counted once, as sent by its end)."""
    done = subprocess.run(["ss", "-tinH", "state", "established"], stdout=subprocess.PIPE, text=True, timeout=30)
    at_port = other = 0
    lines = done.stdout.splitlines()
    for head, info in zip(lines[::2], lines[1::2]):
        ends = re.findall(r"127\.0\.0\.1:(\d+)", head)
        sent = int((re.search(r"bytes_sent:(\d+)", info) or [0, 0])[1])
        if len(ends) != 2:
            continue
        if str(port) in ends:
            at_port += sent
        else:
            other += sent
    return at_port, other


def main():
    illm = sys.argv[1]
    port = free_port()
    procs = ProcGroup(illm)
    prompt = tempfile.NamedTemporaryFile("w", prefix="illm-prompt-", suffix=".txt", delete=False)
    prompt.write(make_prompt())
    prompt.close()
    procs.files.append(prompt.name)

    start = procs.start

    common = ["generate", "--prompt-file", prompt.name, "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--ignore-eos",
              "--json"]
    with procs.running():
        reference, _ = run_json([illm, *common, "--instances", "1", "--kv-blocks-per-instance", "1024",
                                 "--threads", "2"], RUN_S)
        n_prompt = len(reference["prompt_token_ids"])
        assert 2500 <= n_prompt <= 3300, n_prompt  # about three pools of 64 blocks of 16 tokens
        print(f"reference (1 instance, 1024 blocks): {n_prompt} prompt tokens -> {reference['token_ids']}",
              flush=True)

        # The gManager places with the greedy policy on a profile of the instances measured here.
        profile = prompt.name + ".profile.json"
        procs.files.append(profile)
        subprocess.run([illm, "profile", "--out", profile, "--repeats", "1", "--threads", "1"], check=True,
                       stdout=subprocess.DEVNULL, timeout=RUN_S)
        gm = start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "5000",
                   "--profile", profile)
        wait_until(lambda: gm.has(r"listening on 127\.0\.0\.1:%d" % port) or gm.process.poll() is not None, 60,
                   "the gManager to listen")
        assert gm.process.poll() is None, f"illm gmanager exited with {gm.process.returncode}"
        assert gm.has(r"\(greedy on cpu .* placement every"), gm.output()
        ids = [0, 1, 2, 3]
        # Two "nodes" of two instances: a long step's queries to both holders of the other node go there once.
        insts = [start(f"instance{i}", "instance", "--join", f"127.0.0.1:{port}", "--id", str(i),
                       "--kv-blocks-per-instance", "64", "--threads", "1", "--heartbeat-ms", "50",
                       "--ucx-tls", "tcp", "--ucx-net-devices", "lo", "--node", "node-a" if i < 2 else "node-b",
                       "--metrics-listen", "127.0.0.1:0") for i in ids]

        def all_joined():
            for p in insts:
                if p.process.poll() is not None:
                    if p.has(r"built without UCX"):
                        raise SkipTest("illm was built without UCX")
                    raise AssertionError(f"{p.name} exited with {p.process.returncode} before joining")
            return all(gm.has(rf"instance {i} joined") for i in ids)

        wait_until(all_joined, JOIN_S, "the four instances to join")

        # Each instance's plane connects to the three others once their addresses are in its view.
        def all_connected():
            return all(p.has(rf"data plane connected to instance {j}\b")
                       for i, p in zip(ids, insts) for j in ids if j != i)

        wait_until(all_connected, JOIN_S, "every data plane to connect to the three others")
        print("4 instances joined; every plane connected to the 3 others", flush=True)

        result, stderr = run_json([illm, *common, "--gmanager", f"127.0.0.1:{port}"], RUN_S)
        print(f"cluster of processes: {result['token_ids']}; blocks per instance {result.get('blocks_per_instance')}",
              flush=True)
        assert result["prompt_token_ids"] == reference["prompt_token_ids"]
        assert result["token_ids"] == reference["token_ids"], (result["token_ids"], reference["token_ids"])
        moves = re.findall(r"^illm gmanager: move \d+ of request \d+: instance \d+ -> \d+, \d+ blocks.*$",
                           gm.output(), re.M)
        assert moves, gm.output()
        print(f"{len(moves)} moves between processes, e.g. {moves[0]}", flush=True)
        prefilled = [m for m in moves if m.endswith("(prefilled there)")]
        assert prefilled, moves  # the room's holders prefilled chunks of the prompt where their KV stays
        assert any(m["prefilled"] for m in result["moves"]), result["moves"]
        print(f"{len(prefilled)} chunks of the prompt prefilled by the room's holders", flush=True)
        # generate --json lists the request's moves as the gManager has them.
        assert result["moves"], result
        assert all(m["source"] != m["destination"] and m["blocks"] > 0 for m in result["moves"]), result["moves"]
        print(f"generate --json: {len(result['moves'])} moves, {len(result['refusals'])} refusals", flush=True)
        blocks = result.get("blocks_per_instance") or []
        assert sum(1 for b in blocks if b > 0) >= 3, blocks  # its KV spread over at least three processes
        for p in insts:
            assert not p.has(r"data plane peer \d+ failed"), p.output()
        relays = 0
        for i, p in zip(ids, insts):
            mport = int(re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", p.output())[1])
            status, text = request(mport, "GET", "/metrics", timeout=10)
            assert status == 200, (status, text)
            relays += metric(text, "illm:remote_attention_relays_total", {"instance": str(i)}) or 0
        assert relays > 0, relays  # some of its steps' queries went to the other node once, relayed there
        print(f"{int(relays)} attends relayed to the other holder of a node", flush=True)
        assert not gm.has(r"checksum"), gm.output()  # every move committed what arrived intact
        caf_bytes, other_bytes = tcp_bytes(port) if shutil.which("ss") else (None, None)

        # Stop: instances drain and leave (SIGTERM), then the gManager.
        for p in insts:
            p.process.send_signal(signal.SIGTERM)
        for p in insts:
            assert p.wait_exit(EXIT_S) == 0, (p.name, p.output())

        # The KV went through UCX RMA (puts), not inside CAF messages: the instances put at least the bytes
        # of every committed move, and CAF's connections carried far less than that in all.
        block_bytes = int(re.search(r"KV blocks of (\d+) bytes", insts[0].output())[1])
        copied = [m for m in moves if not m.endswith("(prefilled there)")]  # a room's chunks are computed there
        moved = sum(int(m) for m in re.findall(r"-> \d+, (\d+) blocks", "\n".join(copied)))
        put = sum(int(re.search(r"data plane traffic: (\d+) bytes put", p.output())[1]) for p in insts)
        placed = moved + sum(int(m) for m in re.findall(r"-> \d+, (\d+) blocks", "\n".join(prefilled)))
        print(f"KV moved: {moved} blocks of {block_bytes} bytes = {moved * block_bytes} bytes; UCX puts: {put} bytes; "
              f"KV placed on other processes, prefilled there or moved: {placed} blocks", flush=True)
        assert put >= moved * block_bytes, (moved, block_bytes, put)
        if caf_bytes is not None:
            print(f"TCP bytes on CAF's connections (through the gManager): {caf_bytes}; on the others (UCX): "
                  f"{other_bytes}; CAF / KV placed = {caf_bytes / (placed * block_bytes):.3f}", flush=True)
            assert caf_bytes < placed * block_bytes / 2, (caf_bytes, placed * block_bytes)
            assert other_bytes >= put, (other_bytes, put)
        else:
            print("ss not found: TCP byte counters not checked", flush=True)
        procs.stop_last(gm, EXIT_S)


if __name__ == "__main__":
    main()
