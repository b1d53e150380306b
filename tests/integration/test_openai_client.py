"""OpenAI's official client library (npm package `openai`) works against `illm serve` unchanged, with
streaming: the package is installed from the npm registry into a cache (once), then openai_client.cjs
(completions, chat, streaming) and openai_sampling.cjs (log probabilities against the golden run, logit_bias,
penalties, top_k, min_tokens, stop_token_ids, seeds) run against a fresh server."""

import os
import subprocess
import sys

from common import Server

ILLM = sys.argv[1]
VERSION = "4.95.0"


def install_client():
    prefix = os.path.join(os.environ.get("ILLM_CACHE", os.path.expanduser("~/.cache/illm")), f"npm-openai-{VERSION}")
    module = os.path.join(prefix, "node_modules", "openai")
    if not os.path.isdir(module):
        subprocess.run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "--silent",
                        f"openai@{VERSION}"], check=True)
    return module


def main():
    module = install_client()
    with Server(ILLM, "--instances", "2", "--kv-blocks-per-instance", "128") as s:
        env = dict(os.environ, OPENAI_MODULE=module, ILLM_URL=f"http://127.0.0.1:{s.port}")
        here = os.path.dirname(os.path.abspath(__file__))
        env["GOLDEN"] = os.path.join(here, "..", "data", "golden", "stories15M-greedy.json")
        for script in ("openai_client.cjs", "openai_sampling.cjs"):
            result = subprocess.run(["node", os.path.join(here, script)], env=env, capture_output=True, text=True,
                                    timeout=300)
            print(result.stdout + result.stderr)
            assert result.returncode == 0, f"the OpenAI client failed ({script})"


if __name__ == "__main__":
    main()
