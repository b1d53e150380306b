#!/usr/bin/env python3
"""deploy/gpu-runtime.py ILLM WORK [options]: the whole runtime on a GPU, every figure printed (deploy/gpu-runtime.sh
builds ILLM with CUDA on the bundle's packages and runs this). On a machine without a GPU, `--backend cpu --shape
tiny-llama3 --cluster-shape tiny-llama3` runs the same steps on the cpu backend (how the script is tested here).

1. Checkpoints: a Llama-3-8B-shaped BF16 Hugging Face folder and a Llama-3.2-1B-shaped one for the clusters of
   processes (deploy/random-hf-model.py: random weights, Llama 3.1's tokenizer), written into WORK.
2. Spread: `illm generate` of a ~600-token prompt on one instance, and on 4 instances of the GPU whose pools are
   too small for it alone: the blocks per instance and whether the greedy ids are the same (they must be).
3. Served: `illm serve --instances 4` on the one GPU (one copy of the weights), `illm bench --url` at concurrency
   16 and 64: output tok/s, TTFT and ITL.
4. Moves: the same request spread over 2 instances of one process (copied device to device) and of two processes
   (from the device pool through pinned host buffers over UCX): bytes, copies and their time from each source's
   metrics (`illm:kv_move_bytes_total`, `illm:kv_move_copy_seconds` by path), the rate of each and their ratio.
5. Faults: a gManager and 4 instance processes on the GPU; a holder of a spread request is SIGKILLed, then the owner
   of another: each request completes with the ids of one instance, the recovery time from the survivors' metrics,
   and the books (no failed request, no block hosted, no KV used, every process gone at the end).
6. transformers: deploy/hf-parity.py, the tiny checkpoints against transformers itself (where it is installed).
Exits non-zero when a check fails (different ids, books not clean)."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
from common import (EXIT_S, JOIN_S, RUN_S, ProcGroup, free_port, make_prompt, metric, moved_at_least,  # noqa: E402
                    planes_connected, request, run_json, wait_until)

failures = []


def check(ok, what):
    print(f"  {'ok' if ok else 'FAILED'}: {what}", flush=True)
    if not ok:
        failures.append(what)


def section(title, started=[time.monotonic()]):  # noqa: B006 (the script's start, kept across calls)
    print(f"\n== {title} (at {time.monotonic() - started[0]:.0f}s)", flush=True)


def checkpoint(shape, work, tokenizer):
    folder = os.path.join(work, shape)
    if not os.path.exists(os.path.join(folder, "config.json")):
        began = time.monotonic()
        subprocess.run([sys.executable, os.path.join(HERE, "random-hf-model.py"), shape, folder, tokenizer], check=True)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)) / 2**30
        print(f"  {shape}: {size:.1f} GiB written in {time.monotonic() - began:.1f} s to {folder}", flush=True)
    return folder


def prompt_file(work, words):
    path = os.path.join(work, f"prompt-{words}.txt")
    with open(path, "w") as f:
        f.write(make_prompt(words))
    return path


def generate(a, model, prompt, max_tokens, *extra):
    out, _ = run_json([a.illm, "generate", "--backend", a.backend, "--model", model, "--prompt-file", prompt,
                       "--max-tokens", str(max_tokens), "--temperature", "0", "--ignore-eos", "--json", *extra], RUN_S)
    return out


def spread(a, model, work):
    """A request over 4 instances of one GPU gives the ids of one instance."""
    prompt = prompt_file(work, 500)
    one = generate(a, model, prompt, 32, "--instances", "1", "--kv-blocks-per-instance", "256")
    blocks = -(-(len(one["prompt_token_ids"]) + 32) // 16)
    four = generate(a, model, prompt, 32, "--instances", "4", "--kv-blocks-per-instance", str(blocks // 4 + 2))
    print(f"  {len(one['prompt_token_ids'])} prompt tokens, 32 generated; one instance: decode "
          f"{one['stats']['decode_tok_s']:.1f} tok/s; 4 instances (blocks {four['blocks_per_instance']}): decode "
          f"{four['stats']['decode_tok_s']:.1f} tok/s", flush=True)
    check(sum(1 for b in four["blocks_per_instance"] if b > 0) == 4, "the request's blocks lie in all 4 pools")
    same = four["token_ids"] == one["token_ids"]
    first = next((i for i, (x, y) in enumerate(zip(one["token_ids"], four["token_ids"])) if x != y), None)
    check(same, f"the same 32 greedy ids over 4 pools as on one (first difference: {first})")


def start_server(procs, name, *args):
    """`illm serve` on a free loopback port, once its /health answers (the model loaded) or it exited: (process, port)."""
    port = free_port()
    server = procs.start(name, "serve", "--host", "127.0.0.1", "--port", str(port), *args)
    wait_until(lambda: server.gone() or request(port, "GET", "/health", timeout=5)[0] == 200, RUN_S,
               f"{name} to load the model")
    return server, port


def serve_and_bench(a, model, procs):
    """`illm serve --instances 4` on the GPU, benched at concurrency 16 and 64."""
    server, port = start_server(procs, "serve", "--backend", a.backend, "--instances", "4", "--model", model,
                                *a.serve_args)
    check(not server.gone(), "illm serve --instances 4 is up")
    if server.gone():
        print(server.output()[-4000:])
        return
    for seed, concurrency, limit in ((1, 16, a.requests), (2, 64, 4 * a.requests)):  # other prompts: no cache hits
        got, _ = run_json([a.illm, "bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", str(concurrency),
                           "--limit", str(limit), "--prompt-tokens", "256", "--max-output-tokens", "128", "--seed",
                           str(seed), "--json", "--csv", os.devnull], RUN_S)
        print(f"  concurrency {concurrency}: {got['completed']} of {got['requests']} requests, "
              f"{got['output_tokens_per_second']:.1f} output tok/s, TTFT p50 {got['ttft_s']['p50'] * 1e3:.1f} ms, "
              f"p99 {got['ttft_s']['p99'] * 1e3:.1f} ms, ITL p50 {got['itl_s']['p50'] * 1e3:.2f} ms", flush=True)
        check(got["failed"] == 0, f"every request at concurrency {concurrency} completed")
    server.process.send_signal(signal.SIGTERM)
    check(server.wait_exit(EXIT_S) == 0, "illm serve stopped cleanly")


def metrics_at(proc, pattern=r"metrics on http://127\.0\.0\.1:(\d+)/metrics"):
    status, text = request(int(re.search(pattern, proc.output())[1]), "GET", "/metrics", timeout=10)
    assert status == 200, (status, text)
    return text


def copies_of(texts, path):
    """(bytes, copies, seconds) of the moves on `path` in the given expositions."""
    return tuple(sum(metric(t, name, {"path": path}) for t in texts)
                 for name in ("illm:kv_move_bytes_total", "illm:kv_move_copy_seconds_count",
                              "illm:kv_move_copy_seconds_sum"))


def report_copies(label, got):
    moved, copies, seconds = got
    rate = moved / seconds / 1e9 if seconds > 0 else 0.0
    print(f"  {label}: {moved / 2**20:.1f} MiB in {copies:.0f} copies, {seconds * 1e3:.2f} ms copying "
          f"({seconds / max(copies, 1) * 1e3:.3f} ms a copy): {rate:.2f} GB/s", flush=True)
    return rate


def cluster_args(a, pool_blocks):
    """Small pools, no prefix cache, a long prompt's blocks moved (not prefilled at their holders)."""
    return ["--backend", a.backend, "--kv-blocks-per-instance", str(pool_blocks), "--prefix-cache", "off",
            "--room-prefill-min-chunks", "0"]


def stop_processes(gm, insts):
    """SIGTERM to the instances, then to the gManager: each exits 0."""
    for p in (*insts, gm):
        p.process.send_signal(signal.SIGTERM)
        check(p.wait_exit(EXIT_S) == 0, f"{p.name} stopped cleanly")


def start_processes(a, procs, model, ids, pool_blocks):
    """A gManager and `illm instance` processes on the GPU: (address, gManager, instances by id)."""
    port = free_port()
    gm = procs.start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2000",
                     "--dead-after-ms", "4000")
    wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
    insts = {i: procs.start(f"instance{i}", "instance", "--join", f"127.0.0.1:{port}", "--id", str(i), "--model",
                            model, "--heartbeat-ms", "50", "--attention-timeout-ms", "3000", "--metrics-listen",
                            "127.0.0.1:0", *cluster_args(a, pool_blocks), *a.ucx_args) for i in ids}
    wait_until(lambda: planes_connected(insts), JOIN_S, "the instances to join and connect their planes")
    return f"127.0.0.1:{port}", gm, insts


def move_paths(a, model, work, procs):
    """The same spread request copied device to device (one process) and staged through the host (two processes)."""
    prompt, pool = prompt_file(work, 1500), 64  # about 107 blocks: 43 or more move
    server, port = start_server(procs, "serve-moves", "--instances", "2", "--model", model, *cluster_args(a, pool))
    assert not server.gone(), server.output()[-4000:]
    with open(prompt) as f:
        body = {"model": os.path.basename(model), "prompt": f.read(), "max_tokens": 16, "temperature": 0,
                "ignore_eos": True, "return_token_ids": True}
    status, answer = request(port, "POST", "/v1/completions", body, timeout=RUN_S)
    check(status == 200, "the request over two instances of one process completed")
    _, text = request(port, "GET", "/metrics", timeout=10)
    # On the cpu backend both are host pools: the paths are "host" (how this script is tested without a GPU).
    gpu = a.backend != "cpu"
    one_path, two_path = ("device", "staged") if gpu else ("host", "host")
    device = report_copies(f"one process (path={one_path})", copies_of([text], one_path))
    server.process.send_signal(signal.SIGTERM)
    check(server.wait_exit(EXIT_S) == 0, "illm serve stopped cleanly")
    at, gm, insts = start_processes(a, procs, model, (0, 1), pool)
    out, _ = run_json([a.illm, "generate", "--model", model, "--prompt-file", prompt, "--max-tokens", "16",
                       "--temperature", "0", "--ignore-eos", "--json", "--gmanager", at], RUN_S)
    staged = report_copies(f"two processes over UCX ({' '.join(a.ucx_args)}; path={two_path})",
                           copies_of([metrics_at(p) for p in insts.values()], two_path))
    check(device > 0 and staged > 0, "both paths moved blocks")
    if device > 0 and staged > 0:
        print(f"  between processes the copy runs at {staged / device:.3f}x the rate within one", flush=True)
    check(status == 200 and out["token_ids"] == answer["choices"][0]["token_ids"],
          "the same ids from one process and from two")
    stop_processes(gm, insts.values())


def faults(a, model, work, procs):
    """A holder, then an owner, SIGKILLed while their spread requests run; the books afterwards."""
    prompt, pool, tokens = prompt_file(work, 1100), 64, 200
    reference = generate(a, model, prompt, tokens, "--instances", "1", "--kv-blocks-per-instance", "1024")
    at, gm, insts = start_processes(a, procs, model, (0, 1, 2, 3), pool)
    gen = ["generate", "--model", model, "--temperature", "0", "--ignore-eos", "--json", "--prompt-file", prompt,
           "--gmanager", at]

    def spread_request(name, max_tokens, blocks):
        mark = len(gm.output())
        client = procs.start(name, *gen, "--max-tokens", str(max_tokens))
        wait_until(lambda: moved_at_least(gm, mark, blocks) or client.gone(), RUN_S, "blocks of the request to move")
        assert not client.gone(), client.output()
        return (client, *moved_at_least(gm, mark, blocks))

    def answer_of(client):
        code = client.wait_exit(RUN_S)
        lines = [line for line in client.output().splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if code == 0 and lines else {"token_ids": None, "error": client.output()[-2000:]}

    ways = ("replica", "takeover", "recompute")
    counted = {"seconds": ("illm:recovery_seconds_sum", None), "count": ("illm:recovery_seconds_count", None),
               **{how: ("illm:requests_recovered_total", {"how": how}) for how in ways}}

    def recovery():
        """Each instance's recovery figures (counted), by id."""
        texts = {i: metrics_at(p) for i, p in insts.items()}
        return {i: {key: metric(text, *series) for key, series in counted.items()} for i, text in texts.items()}

    for victim in ("holder", "owner"):
        before = recovery()
        client, req, owner, holder = spread_request(victim, tokens, 1 if victim == "holder" else 16)
        dead = holder if victim == "holder" else owner
        killed_at = time.monotonic()
        insts[dead].process.send_signal(signal.SIGKILL)
        result = answer_of(client)
        took = time.monotonic() - killed_at
        insts[dead].wait_exit(EXIT_S)
        del insts[dead]
        after = recovery()  # the survivors' figures, against theirs before the death
        gained = {key: sum(after[i][key] - before[i][key] for i in after) for key in counted}
        spent = gained["seconds"] / max(gained["count"], 1)
        how = {way: gained[way] for way in ways if gained[way] > 0}
        print(f"  request {req} (owner {owner}, blocks moved to {holder}): SIGKILLed the {victim}; answered "
              f"{took:.2f} s later; recovered {how}, recovery_seconds mean {spent:.3f} s", flush=True)
        check(result["token_ids"] == reference["token_ids"][:tokens], f"after the {victim}'s death: the ids of one "
              "instance" + ("" if result["token_ids"] is not None else f" ({result['error']})"))
    def holds_nothing(text):
        return metric(text, "illm:kv_blocks_hosted") == 0 and metric(text, "illm:kv_cache_usage_perc") == 0

    wait_until(lambda: all(holds_nothing(metrics_at(p)) for p in insts.values()), EXIT_S,
               "the survivors to free every block")
    texts = [metrics_at(p) for p in insts.values()]
    failed = sum(metric(t, "illm:requests_failed_total") for t in texts)
    check(failed == 0, f"books: no failed request ({failed:.0f}), no block hosted, no KV in use on the survivors")
    stop_processes(gm, insts.values())


def transformers_reference():
    done = subprocess.run([sys.executable, os.path.join(HERE, "hf-parity.py")], text=True, capture_output=True)
    print("  " + (done.stdout + done.stderr).strip().replace("\n", "\n  "), flush=True)
    check(done.returncode in (0, 77), "the tiny checkpoints against transformers (77: transformers not installed)")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("illm")
    p.add_argument("work")
    p.add_argument("--backend", default="cuda")
    p.add_argument("--shape", default="llama3-8b")
    p.add_argument("--cluster-shape", default="llama3.2-1b")
    p.add_argument("--tokenizer", required=True, help="a folder with Llama 3.1's tokenizer.json and tokenizer_config.json")
    p.add_argument("--requests", type=int, default=64, help="requests of the bench at concurrency 16 (4x at 64)")
    p.add_argument("--serve-args", default="", help="more options of the served 4 instances (one string)")
    p.add_argument("--ucx-args", default="--ucx-tls tcp --ucx-net-devices lo",
                   help="the data plane of the instance processes of steps 4 and 5 (one string)")
    a = p.parse_args()
    a.serve_args, a.ucx_args = a.serve_args.split(), a.ucx_args.split()
    os.makedirs(a.work, exist_ok=True)
    procs = ProcGroup(a.illm)
    with procs.running():
        section("checkpoints")
        big = checkpoint(a.shape, a.work, a.tokenizer)
        small = checkpoint(a.cluster_shape, a.work, a.tokenizer)
        section(f"one request over 4 instances' pools ({a.shape}, {a.backend})")
        spread(a, big, a.work)
        section(f"illm serve --instances 4 ({a.shape}, {a.backend})")
        serve_and_bench(a, big, procs)
        section(f"moves between instances: device to device, and staged through the host ({a.cluster_shape})")
        move_paths(a, small, a.work, procs)
        section(f"a cluster of processes on the GPU: a holder and an owner SIGKILLed ({a.cluster_shape})")
        faults(a, small, a.work, procs)
        section("transformers as the reference of the tiny checkpoints")
        transformers_reference()
        section("summary")
        print("every check passed" if not failures else f"{len(failures)} check(s) FAILED: " + "; ".join(failures))
        if failures:
            sys.exit(1)


if __name__ == "__main__":
    main()
