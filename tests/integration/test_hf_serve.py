"""`illm serve` on a Hugging Face folder: a tiny Llama 3.1-style checkpoint (tests/models/tiny_checkpoints.py, with
Llama 3.1's real tokenizer files) and the real Llama 3.1 chat template (--chat-template, from llama.cpp's
collection; deploy/fetch-tokenizers.sh stores both). The prompt ids of a chat equal Jinja2's rendering tokenized by
Hugging Face's own JS tokenizers; OpenAI's Node client chats with it, whole and streamed; /tokenize, /detokenize and
/v1/models answer as vLLM's; a request spread over instances gives the ids of one; a prompt plus max_tokens past
max_model_len is a 400."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

from common import JOIN_S, ProcGroup, Server, free_port, request, stream_events, wait_until
from test_openai_client import install_client

ILLM = sys.argv[1]
SOURCE = sys.argv[2]
MODELS = os.environ.get("ILLM_MODELS", os.path.expanduser("~/.cache/illm/models"))
TOKENIZERS = os.path.join(MODELS, "hf-tokenizers")
TEMPLATE = os.path.join(TOKENIZERS, "templates", "meta-llama-Llama-3.1-8B-Instruct.jinja")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"  # Debian's: numpy, jinja2
MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hi! What's 2+2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And in French, s'il vous plaît?"}]


def reference_ids(work):
    """Jinja2's prompt text of MESSAGES through TEMPLATE, tokenized by Hugging Face's JS tokenizers."""
    return reference_ids_of(work, TEMPLATE, {"messages": MESSAGES})


def reference_ids_of(work, template, variables):
    """Jinja2's prompt text of `variables` (messages, tools) through `template`, tokenized by Hugging Face's JS
    tokenizers (Llama 3.1's vocabulary)."""
    with open(os.path.join(work, "messages.json"), "w") as f:
        json.dump(variables, f)
    here = os.path.dirname(os.path.abspath(__file__))
    subprocess.run([PYTHON, os.path.join(here, "hf_chat_reference.py"), template, os.path.join(work, "messages.json"),
                    os.path.join(work, "prompt.txt")], check=True)
    with open(os.path.join(work, "prompt.txt"), encoding="utf-8") as f:
        prompt = f.read()
    with open(os.path.join(work, "corpus.json"), "w", encoding="utf-8") as f:
        json.dump([prompt], f)
    out = subprocess.run(["node", os.path.join(SOURCE, "tests", "models", "tokenizer_reference.mjs"),
                          os.path.join(TOKENIZERS, "js", "package"), os.path.join(work, "corpus.json"),
                          os.path.join(TOKENIZERS, "llama3_1")], check=True, capture_output=True, text=True).stdout
    return prompt, list(json.loads(out).values())[0][0]["plain"]


def processes_give_the_same_ids(folder, prompt_text, expected):
    """A cluster of processes (a gManager, two instances over UCX on lo) serving the folder: a request spread over
    both gives the ids of one process."""
    port = free_port()
    procs = ProcGroup(ILLM)
    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}")
        wait_until(lambda: gm.has(r"listening on 127\.0\.0\.1:%d" % port), 60, "the gManager to listen")
        for i in (1, 2):
            procs.start(f"instance{i}", "instance", "--join", f"127.0.0.1:{port}", "--id", str(i), "--model", folder,
                        "--kv-blocks-per-instance", "2", "--threads", "1", "--ucx-tls", "tcp", "--ucx-net-devices", "lo")
        wait_until(lambda: gm.has(r"instance 2 joined") and gm.has(r"instance 1 joined"), JOIN_S, "both instances to join")
        out = subprocess.run([ILLM, "generate", "--gmanager", f"127.0.0.1:{port}", "--model", folder, "--prompt",
                              prompt_text, "--max-tokens", "24", "--ignore-eos", "--temperature", "0", "--json"],
                             check=True, capture_output=True, text=True, timeout=120).stdout
        got = json.loads(out)
        holders = sum(1 for b in got["blocks_per_instance"] if b > 0)
        print(f"a cluster of processes (blocks {got['blocks_per_instance']}): the same 24 ids: {got['token_ids'] == expected}")
        assert holders >= 2 and got["token_ids"] == expected, got


def loglikelihood(port, work):
    """A loglikelihood request as lm-evaluation-harness sends it (token-id prompt, echo, logprobs 1, max_tokens 1,
    temperature 0): every prompt token's log probability within 1e-3 of numpy's forward pass over the same
    weights (tests/models/tiny_checkpoints.py)."""
    with open(os.path.join(work, "manifest.json")) as f:
        case = next(m for m in json.load(f) if m["name"] == "llama31-chat")
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "llama31-chat", "prompt": case["prompt"], "echo": True, "logprobs": 1,
                            "max_tokens": 1, "temperature": 0})
    assert status == 200, body
    lp = body["choices"][0]["logprobs"]
    n = len(case["prompt"])
    assert len(lp["token_logprobs"]) == n + 1 and lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None, lp
    got, want = lp["token_logprobs"][1:n], case["prompt_logprobs"]
    worst = max(abs(a - b) for a, b in zip(got, want))
    spread = case["prompt_logprob_spread"]  # max - min of a position's log probabilities, mean over the positions
    print(f"loglikelihood (echo, logprobs 1, max_tokens 1): {n - 1} prompt log probabilities (each position's spread "
          f"over {spread:.1f} nats), worst difference from numpy {worst:.2e}")
    assert spread >= 5 and worst <= 1e-3, (got, want)
    assert body["choices"][0]["text"].endswith(lp["tokens"][-1]) and len(lp["text_offset"]) == n + 1, body
    # The same in vLLM's shape (prompt_logprobs 2: each prompt token's and the two likeliest, ranked).
    status, body = request(port, "POST", "/v1/completions",
                           {"model": "llama31-chat", "prompt": case["prompt"], "prompt_logprobs": 2, "max_tokens": 1,
                            "temperature": 0})
    assert status == 200, body
    vllm = body["choices"][0]["prompt_logprobs"]
    assert len(vllm) == n and vllm[0] is None, vllm
    got = [vllm[p][str(case["prompt"][p])]["logprob"] for p in range(1, n)]
    ranks = [sorted(e["rank"] for e in vllm[p].values() if e["rank"] is not None) for p in range(1, n)]
    print(f"prompt_logprobs 2 (vLLM's shape): worst difference from numpy "
          f"{max(abs(a - b) for a, b in zip(got, want)):.2e}")
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3 and all(r[:2] == [1, 2] for r in ranks), vllm


def main():
    if not os.path.exists(TEMPLATE):
        sys.exit("the tokenizer files and templates are needed: run deploy/fetch-tokenizers.sh")
    work = tempfile.mkdtemp(prefix="illm-hf-serve-")
    try:
        subprocess.run([PYTHON, os.path.join(SOURCE, "tests", "models", "tiny_checkpoints.py"), work,
                        os.path.join(TOKENIZERS, "llama3_1")], check=True, capture_output=True)
        folder = os.path.join(work, "llama31-chat")
        prompt, expected = reference_ids(work)
        module = install_client()
        with Server(ILLM, "--model", folder, "--chat-template", TEMPLATE, "--instances", "2",
                    "--kv-blocks-per-instance", "64") as s:
            status, tokens = request(s.port, "POST", "/tokenize", {"model": "llama31-chat", "messages": MESSAGES})
            assert status == 200, tokens
            print(f"prompt ids: ours {tokens['count']}, Jinja2 + Hugging Face's tokenizer {len(expected)}")
            assert tokens["tokens"] == expected, (tokens["tokens"], expected)
            assert tokens["max_model_len"] == 131072
            # Tools reach the template: Llama 3.1's writes them into the first user message.
            tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
            status, with_tools = request(s.port, "POST", "/tokenize",
                                         {"model": "llama31-chat", "messages": MESSAGES, "tools": [tool]})
            assert status == 200 and with_tools["count"] > tokens["count"] + 20, with_tools["count"]
            status, text = request(s.port, "POST", "/detokenize", {"model": "llama31-chat", "tokens": expected})
            assert status == 200 and text["prompt"] == prompt, text
            env = dict(os.environ, OPENAI_MODULE=module, ILLM_URL=f"http://127.0.0.1:{s.port}",
                       MESSAGES=json.dumps(MESSAGES))
            result = subprocess.run(["node", os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_chat_client.cjs")],
                                    env=env, capture_output=True, text=True, timeout=300)
            print(result.stdout + result.stderr)
            assert result.returncode == 0, "the OpenAI client failed"
            answer = json.loads(result.stdout.strip().splitlines()[-1])
            assert answer["usage"]["prompt_tokens"] == len(expected), answer
            assert answer["usage"]["completion_tokens"] == 12 and answer["finish"] == "length", answer
            # return_token_ids: the prompt's ids as /tokenize gives them, and one id per token generated.
            status, body = request(s.port, "POST", "/v1/completions",
                                   {"model": "llama31-chat", "prompt": "Bonjour, le monde", "max_tokens": 6,
                                    "temperature": 0, "return_token_ids": True})
            assert status == 200, body
            choice = body["choices"][0]
            _, tokens = request(s.port, "POST", "/tokenize", {"model": "llama31-chat", "prompt": "Bonjour, le monde"})
            assert choice["prompt_token_ids"] == tokens["tokens"] and len(choice["token_ids"]) == 6, choice
            streamed_ids, prompt_ids = [], None
            for event in stream_events(s.port, "/v1/completions",
                                       {"model": "llama31-chat", "prompt": "Bonjour, le monde", "max_tokens": 6,
                                        "temperature": 0, "return_token_ids": True, "stream": True}):
                if event == "[DONE]":
                    break
                chunk = json.loads(event)["choices"][0]
                streamed_ids += chunk["token_ids"]
                prompt_ids = prompt_ids or chunk.get("prompt_token_ids")
            assert streamed_ids == choice["token_ids"] and prompt_ids == tokens["tokens"], (streamed_ids, prompt_ids)
            loglikelihood(s.port, work)
        # Spread over instances: a request whose blocks lie on two of three instances gives the ids of one instance.
        prompt_text = "The quick brown fox jumps over the lazy dog, and then it runs far away into the forest."
        runs = []
        for extra in ([], ["--instances", "3", "--kv-blocks-per-instance", "2"]):
            out = subprocess.run([ILLM, "generate", "--model", folder, "--prompt", prompt_text, "--max-tokens", "24",
                                  "--ignore-eos", "--temperature", "0", "--json", *extra],
                                 check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out))
        holders = sum(1 for b in runs[1]["blocks_per_instance"] if b > 0)
        print(f"one instance and three (blocks {runs[1]['blocks_per_instance']}): the same 24 ids: "
              f"{runs[0]['token_ids'] == runs[1]['token_ids']}")
        assert holders >= 2 and runs[0]["token_ids"] == runs[1]["token_ids"], runs
        if "--no-ucx" not in sys.argv:
            processes_give_the_same_ids(folder, prompt_text, runs[0]["token_ids"])
        # A small context: a prompt plus max_tokens past it is refused before it runs.
        small = os.path.join(work, "llama31-small")
        shutil.copytree(folder, small)
        with open(os.path.join(small, "config.json")) as f:
            config = json.load(f)
        config["max_position_embeddings"] = 64
        with open(os.path.join(small, "config.json"), "w") as f:
            json.dump(config, f)
        with Server(ILLM, "--model", small, "--instances", "1", "--kv-blocks-per-instance", "32") as s:
            status, body = request(s.port, "POST", "/v1/completions",
                                   {"model": "llama31-small", "prompt": "Hello there", "max_tokens": 62})
            assert status == 400 and body["error"]["code"] == "context_length_exceeded", body
            status, body = request(s.port, "POST", "/v1/completions",
                                   {"model": "llama31-small", "prompt": "Hello there", "max_tokens": 61})
            assert status == 200, body
            print("max_model_len 64: 3 + 62 tokens refused (400 context_length_exceeded), 3 + 61 served")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("hf serve: prompt ids as Jinja2 + Hugging Face, OpenAI client chat whole and streamed, max_model_len: ok")


if __name__ == "__main__":
    main()
