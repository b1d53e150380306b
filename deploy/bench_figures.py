"""The figures of one run of illm's and llama.cpp's engine benchmarks on one file, for the scripts that set them side
by side (bench-weights-vs-llama.sh, bench-moe-vs-llama.sh)."""
import json


def engine_figures(illm_json, llama_bench_json, batched_jsonl):
    """(illm's report, its decode tok/s by batch, llama-bench's decode and prefill tok/s, llama-batched-bench's decode
    tok/s by sequences) from `illm bench engine --json`, `llama-bench -o json` and `llama-batched-bench
    --output-format jsonl`."""
    report = json.load(open(illm_json))
    decode = {d["batch"]: d["tokens_per_second"] for d in report["decode"]}
    bench = json.load(open(llama_bench_json))
    batched = {x["pl"]: x["speed_tg"] for x in map(json.loads, open(batched_jsonl))}
    tg = next(x["avg_ts"] for x in bench if x["n_gen"] > 0)
    pp = next(x["avg_ts"] for x in bench if x["n_prompt"] > 0)
    return report, decode, tg, pp, batched
