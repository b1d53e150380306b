"""deploy/gpu-runtime.py, the runtime script of GPU machines, run whole on the cpu backend with a tiny model of Llama 3's
vocabulary (random weights, Llama 3.1's real tokenizer), so that the script a GPU session runs works before a GPU is
lent: every step (a request over 4 pools, illm serve benched at concurrency 16 and 64, moves within one process and
between two, a holder and an owner SIGKILLed) must pass its checks. Its figures are the cpu backend's, not a GPU's.

Usage: test_gpu_runtime_script.py ILLM SOURCE_DIR"""
import os
import shutil
import subprocess
import sys
import tempfile

MODELS = os.environ.get("ILLM_MODELS", os.path.expanduser("~/.cache/illm/models"))
TOKENIZER = os.path.join(MODELS, "hf-tokenizers", "llama3_1")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"  # Debian's: numpy


def main():
    illm, source = sys.argv[1], sys.argv[2]
    if not os.path.exists(os.path.join(TOKENIZER, "tokenizer.json")):
        print(f"skipped: no {TOKENIZER} (deploy/fetch-tokenizers.sh)")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="illm-gpu-runtime-")
    try:
        done = subprocess.run([PYTHON, os.path.join(source, "deploy", "gpu-runtime.py"), illm, work, "--backend", "cpu",
                               "--shape", "tiny-llama3", "--cluster-shape", "tiny-llama3", "--requests", "16",
                               "--tokenizer", TOKENIZER], text=True, capture_output=True, timeout=600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith(("==", "  "))]
    print("\n".join(lines))
    assert done.returncode == 0 and "every check passed" in done.stdout, (done.returncode, done.stdout[-20000:])
    print("ok")


if __name__ == "__main__":
    main()
