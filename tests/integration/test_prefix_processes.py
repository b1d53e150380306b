"""The cluster-wide prefix cache across processes: `illm gmanager`, two `illm instance --join --prefix-cache cluster`
processes (UCX over tcp on lo) and `illm serve --gmanager`. A prompt served on instance 0 is cached there; while a
long answer keeps instance 0 busy, the front end routes a branch of that prompt to instance 1, which reads the
shared blocks where instance 0 keeps them (its attention's queries and partials cross the processes, the KV does
not): the ids are those of one embedded instance, usage.prompt_tokens_details.cached_tokens counts the blocks read,
and instance 1's log names them. Another branch with a long answer has the shared blocks copied over UCX instead (the
performance model's choice, once a read measured the round trip), with the same text as one embedded instance. Every
process started here is gone at the end.

Usage: test_prefix_processes.py ILLM [SOURCE_DIR]"""

import json
import subprocess
import sys
import tempfile

from common import (EXIT_S, RUN_S, ProcGroup, busy_stream, free_port, request, small_instance, start_front_end,
                    wait_busier, wait_joined, wait_until)

STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day, she saw a big red ball under a tree. She ran to get it, but a dog was there too. ")


def embedded_text(illm, prompt, max_tokens):
    """The greedy text of `prompt` on one embedded instance without a cache."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write(prompt)
        f.flush()
        done = subprocess.run([illm, "generate", "--instances", "1", "--prompt-file", f.name, "--max-tokens",
                               str(max_tokens), "--temperature", "0", "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=RUN_S, text=True)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout)["text"]


def complete(port, prompt, max_tokens, **extra):
    status, body = request(port, "POST", "/v1/completions", {"model": "stories15M", "prompt": prompt,
                                                             "max_tokens": max_tokens, "temperature": 0, **extra},
                           timeout=RUN_S)
    assert status == 200, (status, body)
    return body


def main():
    illm = sys.argv[1]
    gm_port, fe_port = free_port(), free_port()
    procs = ProcGroup(illm)

    def instance(i):
        return small_instance(procs, i, gm_port, "--prefix-cache", "cluster")

    long_prompt = STORY * 3
    branch = STORY * 2 + "The dog was brown."
    branch2 = STORY * 2 + "The cat was black and small."
    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", f"127.0.0.1:{gm_port}")
        wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
        a, b = instance(0), instance(1)
        wait_joined({0: a, 1: b})
        fe = start_front_end(procs, gm_port, fe_port, 2)
        first = complete(fe_port, long_prompt, 16)
        assert first["choices"][0]["text"] == embedded_text(illm, long_prompt, 16), first
        cluster = lambda: {i["id"]: i for i in request(fe_port, "GET", "/v1/cluster", timeout=5)[1]["instances"]}
        holder = max(cluster().values(), key=lambda i: i["cached_blocks"])["id"]
        other = 1 - holder
        wait_until(lambda: cluster()[holder]["free_blocks"] == cluster()[holder]["total_blocks"], 60,
                   "the first request's blocks to be free (cached) at its instance")
        # A long answer keeps the holder busy (its blocks in use outweigh reading the prefix elsewhere), so that the
        # branch goes to the other instance while it streams (both idle and without hits: the first, the holder).
        def while_holder_busy(prompt, max_tokens):
            busy = busy_stream(fe_port, timeout=RUN_S)
            free = lambda: {i: view["free_blocks"] for i, view in cluster().items()}
            wait_busier(free, holder, other, "the holder to run the long answer")
            answer = complete(fe_port, prompt, max_tokens)
            for _ in busy:
                pass
            assert answer["choices"][0]["text"] == embedded_text(illm, prompt, max_tokens), answer
            return answer

        second = while_holder_busy(branch, 16)
        cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached > 0, second["usage"]
        reader = (a, b)[other]
        wait_until(lambda: reader.has(r"reads \d+ cached block\(s\) of its prompt at 1 instance\(s\), 0 here"), 30,
                   "the reading instance to log the blocks it reads in place")
        print(f"prefix cache across processes: the branch read {cached} cached tokens at instance {holder} from "
              f"instance {other}, with the text of one embedded instance", flush=True)
        # Another branch with a long answer: the reader measured its round trips to the holder on the read before,
        # and the performance model finds copying the shared blocks cheaper than 64 steps of a round trip per layer.
        third = while_holder_busy(branch2, 64)
        assert third["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, third["usage"]
        wait_until(lambda: reader.has(rf"copied \d+ cached block\(s\) of its prompt from instance {holder}"), 30,
                   "the reading instance to log the blocks it copied")
        print(f"... and a branch with a long answer copied the shared blocks from instance {holder} (the performance "
              f"model's choice), with the text of one embedded instance", flush=True)
        procs.stop_cluster(fe, (a, b), gm, EXIT_S)


if __name__ == "__main__":
    main()
