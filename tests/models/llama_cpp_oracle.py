#!/usr/bin/env python3
"""llama_cpp_oracle.py LLAMA_SERVER TINY_DIR OUT.json: the outside oracle of the model loaders. llama.cpp's
llama-server runs each tiny GGUF file that tests/models/tiny_checkpoints.py wrote (TINY_DIR/manifest.json) on the
manifest's prompt ids, greedily, for 16 tokens, and OUT.json keeps its ids and top log-probabilities per step:
tests/data/llama_cpp_tiny.json is this file, committed, and test_gpu checks the engine against it (a mistake the
loader, the converter and the numpy reference share, the q/k layout above all, shows there)."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def run(server, path, prompt):
    port = free_port()
    p = subprocess.Popen([server, "-m", path, "--port", str(port), "--host", "127.0.0.1", "-c", "256", "-t", "2",
                          "-np", "1", "--no-warmup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.1)
        answer = post(port, "/completion", {"prompt": prompt, "n_predict": 16, "temperature": 0.0, "top_k": 1,
                                            "n_probs": 3, "cache_prompt": False, "ignore_eos": True})
    finally:
        p.terminate()
        p.wait(30)
    steps = answer["completion_probabilities"]
    return {"ids": [s["id"] for s in steps],
            "top_logprobs": [[[t["id"], round(t["logprob"], 6)] for t in s["top_logprobs"]] for s in steps]}


def main():
    server, tiny, out = sys.argv[1:4]
    manifest = json.load(open(os.path.join(tiny, "manifest.json")))
    result = {}
    for entry in manifest:
        if entry["format"] != "gguf":
            continue
        result[entry["name"]] = dict(prompt=entry["prompt"], **run(server, os.path.join(tiny, entry["path"]), entry["prompt"]))
        print(entry["name"], "llama.cpp:", result[entry["name"]]["ids"], "reference:", entry["ids"])
    with open(out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
