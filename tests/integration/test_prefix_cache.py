"""The prefix cache through `illm serve`: a request whose prompt starts with one served before reads the cached KV
blocks (usage.prompt_tokens_details.cached_tokens, the prefix cache metrics) and gives the same ids as a server
without the cache, whole and streamed, for the same prompt and for one that branches off it; with the cluster-wide
cache, a prompt cached on one instance is read where it lies by a request another instance runs; API keys and
cache_salt keep tenants' blocks apart."""

import csv
import json
import os
import subprocess
import sys
import tempfile

from common import Server, busy_stream, metric, request, stream_events, wait_busier, wait_until

ILLM = sys.argv[1]
STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
         "friends. One day, she saw a big red ball under a tree. She ran to get it, but a dog was there too. ")


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def complete(port, prompt, max_tokens=24):
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "stories15M", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                            "return_token_ids": True})
    check(status == 200, (status, body))
    return body


N_PROMPT = "The cat sat on the mat and looked at the bird in the tree. " * 8  # a prompt no other request shares


def n_choices(port):
    """Three greedy choices of N_PROMPT: their ids, and the prompt tokens."""
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "stories15M", "prompt": N_PROMPT, "max_tokens": 12, "temperature": 0, "n": 3,
                            "return_token_ids": True})
    check(status == 200, (status, body))
    return [c["token_ids"] for c in sorted(body["choices"], key=lambda c: c["index"])], body["usage"]["prompt_tokens"]


def answers(port, prompts):
    """Each prompt's generated ids, prompt tokens and cached tokens, in order."""
    out = []
    for p in prompts:
        body = complete(port, p)
        out.append((body["choices"][0]["token_ids"], body["usage"]["prompt_tokens"],
                    body["usage"]["prompt_tokens_details"]["cached_tokens"]))
    return out


def main():
    long_prompt = STORY * 3                     # about 160 tokens: nine full blocks
    branch = STORY * 2 + "The dog was brown."   # shares the first two stories' blocks
    prompts = [long_prompt, long_prompt, branch]
    with Server(ILLM, "--instances", "1", "--prefix-cache", "off") as plain:
        expected = answers(plain.port, prompts)
        check(all(cached == 0 for _, _, cached in expected), expected)
        expected_choices, _ = n_choices(plain.port)
    with Server(ILLM, "--instances", "1", "--prefix-cache", "local") as server:
        got = answers(server.port, prompts)
        for (ids, prompt_tokens, cached), (want, _, _) in zip(got, expected):
            check(ids == want, f"ids differ with the prefix cache: {ids} vs {want}")
        check(got[0][2] == 0, got[0])
        full_blocks = (got[1][1] - 1) // 16
        check(got[1][2] == full_blocks * 16, f"the second request read {got[1][2]} cached tokens, not {full_blocks * 16}")
        check(0 < got[2][2] < got[2][1], f"the branch read {got[2][2]} cached tokens of {got[2][1]}")
        events = [json.loads(e) for e in stream_events(server.port, "/v1/completions", {
            "model": "stories15M", "prompt": long_prompt, "max_tokens": 8, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}) if e != "[DONE]"]
        check(events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == full_blocks * 16, events[-1])
        _, text = request(server.port, "GET", "/metrics")
        hits = metric(text, "illm:prefix_cache_hits_total", {"where": "local"})
        queries = metric(text, "illm:prefix_cache_queries_total")
        check(hits == got[1][2] + got[2][2] + full_blocks * 16, f"hits {hits}")
        branch_missed = (got[2][1] - 1) // 16 * 16 - got[2][2]
        check(queries == hits + full_blocks * 16 + branch_missed, f"queries {queries}, hits {hits}")  # the first missed
        check(metric(text, "illm:prefix_cache_blocks") > 0, "no cached block in the metrics")
        wait_until(lambda: request(server.port, "GET", "/v1/cluster")[1]["instances"][0]["cached_blocks"] > 0, 30,
                   "/v1/cluster to show the cached blocks")
        # n = 3 while another request streams (the three arrive during one of its steps and would start together):
        # the second and third choices wait for the first's first token and read its prompt blocks by reference,
        # with the ids they have without the cache.
        busy = busy_stream(server.port)
        choices, n_prompt_tokens = n_choices(server.port)
        for _ in busy:
            pass
        check(choices == expected_choices, f"the choices differ when they share the prompt: {choices}")
        _, text = request(server.port, "GET", "/metrics")
        shared = metric(text, "illm:prefix_cache_hits_total", {"where": "local"}) - hits
        check(shared == 2 * ((n_prompt_tokens - 1) // 16) * 16, f"the choices read {shared} cached prompt tokens")
        sessions = multi_turn(server.port)
        status, reset = request(server.port, "POST", "/reset_prefix_cache")
        check(status == 200 and reset["blocks_freed"] > 0, (status, reset))
        again = complete(server.port, long_prompt)
        check(again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, again["usage"])
    tenants = per_key(long_prompt)
    in_place = cluster_wide(long_prompt, branch, expected)
    print(f"prefix cache: ids equal with and without it; cached tokens {[c for _, _, c in got]}; n = 3 shared "
          f"{shared:.0f} prompt tokens; "
          f"hits {hits:.0f} of {queries:.0f} queried tokens; multi-turn bench {sessions}; per API key {tenants}; "
          f"read in place on another instance {in_place}")


def cluster_wide(long_prompt, branch, expected):
    """--prefix-cache cluster on two instances: a prompt cached on instance 0 is read there by a request that instance 1
    runs (instance 0 is busy with another request), with the ids of a server without the cache."""
    # The simple placement policy (moves only for memory): instance 0 keeps the whole prompt, so instance 1's cache
    # does not get the blocks a loan would have had it hold.
    with Server(ILLM, "--instances", "2", "--prefix-cache", "cluster", "--policy", "simple") as server:
        first = complete(server.port, long_prompt)
        check(first["choices"][0]["token_ids"] == expected[0][0], "ids differ with the cluster-wide cache")
        free = lambda: {i["id"]: i["free_blocks"] for i in request(server.port, "GET", "/v1/cluster")[1]["instances"]}
        instance0 = lambda: request(server.port, "GET", "/v1/cluster")[1]["instances"][0]
        wait_until(lambda: instance0()["cached_blocks"] > 0 and instance0()["free_blocks"] == instance0()["total_blocks"],
                   30, "/v1/cluster to show instance 0's cached blocks, free (the most free instance, the first)")
        # A long answer keeps instance 0 busy, so that the router sends the branch to instance 1 while it streams.
        busy = busy_stream(server.port)
        wait_busier(free, 0, 1, "instance 0 to run the long answer")
        body = complete(server.port, branch)
        for _ in busy:
            pass
        check(body["choices"][0]["token_ids"] == expected[2][0], "the branch's ids differ when read in place")
        cached = body["usage"]["prompt_tokens_details"]["cached_tokens"]
        check(cached > 0, body["usage"])
        _, text = request(server.port, "GET", "/metrics")
        remote = metric(text, "illm:prefix_cache_hits_total", {"where": "remote"})
        check(remote == cached, f"remote hits {remote}, the branch read {cached} cached tokens")
        # stories15M: 6 layers x K and V x 6 KV heads x 48 dims x 4 bytes (f32) = 13,824 bytes of KV a token.
        saved = metric(text, "illm:prefix_cache_hit_bytes_total", {"where": "remote"})
        check(saved == cached * 6 * 2 * 6 * 48 * 4, f"remote hit bytes {saved} for {cached} tokens")
        return {"cached_tokens": cached, "remote_hits": remote}


def per_key(prompt):
    """--prefix-cache-per-key: each API key its own namespace (the same prompt under another key finds nothing); and
    cache_salt (vLLM's field): under one key, requests of different salts never share blocks."""
    found, salted = [], []

    def cached(server, key, salt=None):
        body = {"model": "stories15M", "prompt": prompt, "max_tokens": 4, "temperature": 0}
        if salt:
            body["cache_salt"] = salt
        status, answer = request(server.port, "POST", "/v1/completions", body,
                                 headers={"Authorization": f"Bearer {key}"})
        check(status == 200, (status, answer))
        return answer["usage"]["prompt_tokens_details"]["cached_tokens"]

    with Server(ILLM, "--instances", "1", "--prefix-cache", "local", "--api-key", "alpha", "--api-key", "beta",
                "--prefix-cache-per-key") as server:
        found = [cached(server, key) for key in ("alpha", "beta", "alpha", "beta")]
        salted = [cached(server, "alpha", salt) for salt in ("s1", "s2", "s1", "s2")]
    check(found[0] == found[1] == 0 and found[2] == found[3] > 0, f"cached tokens by key: {found}")
    check(salted[0] == salted[1] == 0 and salted[2] == salted[3] > 0, f"cached tokens by salt: {salted}")
    return {"by key": found, "by salt": salted}


def multi_turn(port):
    """`illm bench --turns`: each turn's prompt is its session's conversation so far, which the cache holds."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "turns.csv")
        run = subprocess.run([ILLM, "bench", "--url", f"http://127.0.0.1:{port}", "--concurrency", "2", "--turns", "3",
                              "--limit", "6", "--prompt-tokens", "40", "--max-output-tokens", "8", "--csv", out,
                              "--json"], capture_output=True, text=True, timeout=300)
        check(run.returncode == 0, run.stdout + run.stderr)
        report = json.loads(run.stdout)
        with open(out) as f:
            rows = list(csv.DictReader(f))
    check(report["completed"] == 6 and report["turns"] == 3, report)
    # Turn t of a session: 40 new tokens a turn and the 8 of each answer before it.
    check(sorted(int(r["prompt_tokens"]) for r in rows) == [40, 40, 88, 88, 136, 136], rows)
    for r in rows:
        turn_tokens = int(r["prompt_tokens"])
        # The last turn's prompt and answer, all but the answer's last token (whose KV is never computed): its full
        # blocks are cached.
        history = turn_tokens - 40
        check(int(r["cached_tokens"]) == (max(history - 1, 0) // 16) * 16, r)
    check(report["prefill_tokens"] == report["prompt_tokens"] - report["cached_tokens"], report)
    return {k: report[k] for k in ("prompt_tokens", "cached_tokens", "prefill_tokens")}


main()
