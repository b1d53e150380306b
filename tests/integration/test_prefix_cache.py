"""The prefix cache through `illm serve`: a request whose prompt starts with one served before reads the cached KV
blocks (usage.prompt_tokens_details.cached_tokens, the prefix cache metrics) and gives the same ids as a server
without the cache, whole and streamed, for the same prompt and for one that branches off it."""

import json
import sys

from common import Server, metric, request, stream_events

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
    print(f"prefix cache: ids equal with and without it; cached tokens {[c for _, _, c in got]}, "
          f"hits {hits:.0f} of {queries:.0f} queried tokens")


main()
