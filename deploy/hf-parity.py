#!/usr/bin/env python3
"""deploy/hf-parity.py: the tiny checkpoints of tests/models/tiny_checkpoints.py against transformers itself,
wherever transformers is installed (the GPU machine has it; its CPU is enough). Each Hugging Face folder is loaded
with AutoModelForCausalLM in float32 and run greedily on its manifest prompt for 16 tokens: its ids and logits are
compared with the numpy reference that the engine's tests hold the engine to (16 ids, logits within 1e-3), so a
pass here ties the engine to transformers. Exits 77 (skipped) without torch and transformers."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import transformers
except ImportError as e:
    print(f"hf-parity: {e}: skipped (transformers is not installed here)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    work = tempfile.mkdtemp(prefix="illm-hf-parity-")
    subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "models", "tiny_checkpoints.py"), work], check=True,
                   capture_output=True)
    manifest = json.load(open(os.path.join(work, "manifest.json")))
    failures = 0
    for entry in manifest:
        if entry["format"] != "hf":
            continue
        model = transformers.AutoModelForCausalLM.from_pretrained(os.path.join(work, entry["path"]),
                                                                  torch_dtype=torch.float32)
        model.eval()
        ids = list(entry["prompt"])
        worst = 0.0
        with torch.no_grad():
            for step in range(len(entry["ids"])):
                logits = model(torch.tensor([ids])).logits[0, -1].double()
                worst = max(worst, float((logits - torch.tensor(entry["logits"][step], dtype=torch.float64)).abs().max()))
                ids.append(int(logits.argmax()))
        got = ids[len(entry["prompt"]):]
        ok = got == entry["ids"] and worst <= 1e-3
        failures += not ok
        print(f"{entry['name']}: transformers {transformers.__version__}: {'ok' if ok else 'DIFFERS'}: ids "
              f"{'equal' if got == entry['ids'] else got}, largest logit difference from the reference {worst:.2e}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
