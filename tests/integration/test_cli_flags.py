"""Numeric flags of the commands refuse what is not a number in their range (nan, inf, out of range) with a
message naming the flag and the value, before doing anything; values in range are taken (two lanes or one,
room prefill or not, give the same ids). A placement policy that is not one, or a profile that cannot be
read, is refused by name, and so is a --backend that is none or cannot run here."""

import json
import os
import subprocess
import sys

ILLM = sys.argv[1]


def run(*args):
    return subprocess.run([ILLM, *args], capture_output=True, text=True, timeout=300)


def main():
    refused = [
        (["generate", "--prompt", "hi", "--temperature", "nan"], "--temperature: must be a number from 0 to 100, not nan"),
        (["generate", "--prompt", "hi", "--temperature", "101"], "--temperature: must be a number from 0 to 100, not 101"),
        (["generate", "--prompt", "hi", "--top-p", "inf"], "--top-p: must be a number from 0 to 1, not inf"),
        (["generate", "--prompt", "hi", "--top-p", "-0.5"], "--top-p: must be a number from 0 to 1, not -0.5"),
        (["bench", "--rate-scale", "inf"], "--rate-scale: must be a number above zero, not inf"),
        (["bench", "--rate-scale", "0"], "--rate-scale: must be a number above zero, not 0"),
        (["sim", "--trace", "x.csv", "--rate-scale", "nan"], "--rate-scale: must be a number, 0 or more, not nan"),
        (["sim", "--trace", "x.csv", "--slo", "1e400"], "--slo: must be a number above zero, not 1e400"),
        (["sim", "--trace", "x.csv", "--overlap-min-tokens", "-1"], "--overlap-min-tokens: Value -1 not in range 0 to 1048576"),
        (["generate", "--prompt", "hi", "--instances", "2", "--overlap-min-tokens", "-3"],
         "--overlap-min-tokens: Value -3 not in range 0 to 1048576"),
        (["sim", "--trace", "x.csv", "--max-unstarted", "-1"], "--max-unstarted: Value -1 not in range 0 to 1048576"),
        (["sim", "--trace", "x.csv", "--room-prefill-min-chunks", "-1"],
         "--room-prefill-min-chunks: Value -1 not in range 0 to 1048576"),
        (["generate", "--prompt", "hi", "--instances", "2", "--room-prefill-min-chunks", "x"],
         "--room-prefill-min-chunks: Value x not in range 0 to 1048576"),
        (["instance", "--join", "127.0.0.1:1", "--room-prefill-min-chunks", "-2"],
         "--room-prefill-min-chunks: Value -2 not in range 0 to 1048576"),
        (["serve", "--policy", "best"], "--policy: best not in {greedy,simple}"),
        (["serve", "--port", "0", "--profile", "/nonexistent/p.json"], "cannot read /nonexistent/p.json"),
        (["gmanager", "--listen", "127.0.0.1:0", "--profile", "/nonexistent/p.json"], "cannot read /nonexistent/p.json"),
        (["gmanager", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:x"],
         "--metrics-listen 127.0.0.1:x: expected HOST:PORT with a port in 0..65535"),
        (["instance", "--join", "127.0.0.1:1", "--metrics-prefix", "bad"], "--metrics-prefix: bad not in {illm:,illm_}"),
        (["gmanager", "--listen", "127.0.0.1:0", "--faults", "send.drop=0.1"], "the gManager injects only order.drop"),
        (["instance", "--join", "127.0.0.1:1", "--faults", "crash=after_order"], "are the gManager's"),
        (["serve", "--faults", "crash=mid_air"], "the crash points are mid_move, mid_room and after_order"),
        # --backend: a name it does not know, and cuda where it cannot run (no GPU here; with one, the instances'
        # pools in host memory so far): each says why and what to use.
        (["serve", "--port", "0", "--policy", "simple", "--backend", "tpu"],
         "illm serve: --backend must be cpu, cuda or auto, not 'tpu'"),
        (["serve", "--port", "0", "--policy", "simple", "--backend", "cuda"], "illm serve --backend cuda: "),
        (["generate", "--prompt", "hi", "--instances", "2", "--backend", "cuda"],
         "illm generate --instances --backend cuda: "),
        (["instance", "--join", "127.0.0.1:1", "--backend", "cuda"], "illm instance --backend cuda: "),
    ]
    for args, message in refused:
        result = run(*args)
        assert result.returncode != 0 and message in result.stderr, (args, result.returncode, result.stderr)
        assert result.stdout == "", (args, result.stdout)
        if "--backend cuda: " in message:
            assert "use --backend cpu or auto" in result.stderr, result.stderr
            print(f"{' '.join(args[:1])} --backend cuda here: {result.stderr.strip()}", flush=True)
    # In range: a greedy generation of two tokens with the edge values.
    result = run("generate", "--prompt", "Once upon a time", "--max-tokens", "2", "--temperature", "0", "--top-p", "1")
    assert result.returncode == 0, result.stderr
    # A prompt of ~1800 tokens spread over four small pools: every prefill step with remote blocks in two
    # lanes (from 2 tokens) or in one (0) gives the same ids.
    prompt = "The intent of this document is to state the conditions under which a Package may be copied. " * 90
    ids = []
    for overlap in ("2", "0"):
        result = run("generate", "--prompt", prompt, "--max-tokens", "8", "--temperature", "0", "--instances", "4",
                     "--kv-blocks-per-instance", "48", "--overlap-min-tokens", overlap, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert sum(1 for n in report["blocks_per_instance"] if n > 0) >= 3, report["blocks_per_instance"]
        ids.append(report["token_ids"])
    assert ids[0] == ids[1] and len(ids[0]) == 8, ids
    # The same prompt with its room's holders prefilling it (2) or its owner alone (0): the same ids.
    for chunks in ("2", "0"):
        result = run("generate", "--prompt", prompt, "--max-tokens", "8", "--temperature", "0", "--instances", "4",
                     "--kv-blocks-per-instance", "48", "--room-prefill-min-chunks", chunks, "--json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        prefilled = [m for m in report["moves"] if m["prefilled"]]
        assert bool(prefilled) == (chunks == "2"), report["moves"]
        assert report["token_ids"] == ids[0], (chunks, report["token_ids"], ids[0])
    check_blas_core()
    print("test_cli_flags: all checks passed")


def check_blas_core():
    """OpenBLAS runs kernels of the processor's SIMD: where it chose an older core (a model its table lacks), illm
    starts again with OPENBLAS_CORETYPE naming a newer one; a core the user names is kept."""
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    old = {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "sandybridge", "barcelona", "bulldozer",
           "piledriver", "steamroller", "excavator", "opteron", "opteron(sse3)", "unknown"}

    def cores(env):
        result = subprocess.run([ILLM, "--version"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, **env})
        assert result.returncode == 0, result.stderr
        return [line.split(":", 1)[1].strip().lower() for line in (result.stdout + result.stderr).splitlines()
                if line.startswith("Core:")]

    plain = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    chosen = cores({**plain, "OPENBLAS_VERBOSE": "2"})
    if not chosen:
        print("this build's OpenBLAS does not say its core: nothing to check")
        return
    if {"avx2", "fma"} <= flags:
        assert chosen[-1] not in old, chosen
    assert cores({"OPENBLAS_VERBOSE": "2", "OPENBLAS_CORETYPE": "Prescott"}) == ["prescott"]
    print(f"OpenBLAS cores of `illm --version`: {' then '.join(chosen)}")


if __name__ == "__main__":
    main()
