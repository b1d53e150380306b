"""`illm sim` as a user runs it: the policies side by side in one call (--json keyed by policy, with the
first policy's throughput over each other's), a request longer than one instance completed by the lending
policies and refused by static-multi, steps with decode tokens capped at the profile's knee by default (a lower
cap gives smaller steps and a lower TPOT), the rate sweep's CSV and PNG, instances over several GPUs, and clear
errors for a bad policy, too few GPUs for the model, a missing or malformed trace (rows out of arrival
order, extra fields) and out-of-range flags."""

import csv
import json
import math
import os
import subprocess
import sys
import tempfile

ILLM, REPO = sys.argv[1], sys.argv[2]
POLICIES = ["infinite", "passive", "static-multi", "static-single"]


def run(*args):
    return subprocess.run([ILLM, "sim", *args], capture_output=True, text=True, timeout=600)


def check_prefix_cache(tmp):
    """Mooncake's JSON-lines traces with hash ids: conversations whose turns grow their prompt. Without a cache
    nothing is found; with caches per instance and prefix-aware routing, later turns find their history (no more
    than one LRU cache of the cluster's memory would), compute fewer prompt tokens and start sooner."""
    trace = os.path.join(tmp, "sessions.jsonl")
    rows, next_id = [], 0
    for turn in range(4):
        for session in range(6):
            ids = rows[-6]["hash_ids"] if turn else []  # the session's last turn, then two blocks more
            ids = ids + [next_id, next_id + 1]
            next_id += 2
            rows.append({"timestamp": (turn * 6 + session) * 3000, "input_length": 512 * len(ids) - 100,
                         "output_length": 32, "hash_ids": ids})
    with open(trace, "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    reports = {}
    for cache, router in (("off", "least-requests"), ("local", "least-requests"), ("local", "prefix-aware")):
        result = run("--trace", trace, "--instances", "2", "--policy", "infinite", "--rate-scale", "1",
                     "--prefix-cache", cache, "--router", router, "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        assert report["settings"]["prefix_cache"] == cache, report["settings"]
        reports[cache, router] = r = report["results"]["infinite"]
        assert r["completed"] == 24 and r["prompt_tokens"] == sum(x["input_length"] for x in rows), r
        assert r["prefix_hit_tokens"] <= r["prefix_ceiling_tokens"] < r["prompt_tokens"], r
    off, aware = reports["off", "least-requests"], reports["local", "prefix-aware"]
    assert off["prefix_hit_tokens"] == 0 and off["prefix_ceiling_tokens"] > 0, off
    assert aware["prefix_hit_tokens"] > 0.9 * aware["prefix_ceiling_tokens"], aware
    assert aware["prefill_tokens"] < off["prefill_tokens"] - aware["prefix_hit_tokens"] / 2, (aware, off)
    assert aware["ttft_p50_s"] < off["ttft_p50_s"], (aware["ttft_p50_s"], off["ttft_p50_s"])
    for name, line, error in [("short.jsonl", {"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1]},
                               "line 1: 1 hash_ids for 1500 input tokens"),
                              ("fields.jsonl", {"timestamp": 0, "input_length": "many"}, "line 1: expected {")]:
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(json.dumps(line) + "\n")
        bad = run("--trace", path)
        assert bad.returncode != 0 and error in bad.stderr, (name, bad.stderr)
    return {k[0] + "/" + k[1]: (r["prefix_hit_tokens"], r["prefix_ceiling_tokens"], r["ttft_p50_s"])
            for k, r in reports.items()}


def check_sweep(tmp):
    # A prefix with a quote, a space and $(...): files land there and nothing is run from it.
    folder = os.path.join(tmp, "sweep's $(touch pwned)")
    os.mkdir(folder)
    prefix = os.path.join(folder, "sweep")
    slo = 0.025  # crossed between the doubling scales 4 and 16 on these 60 requests
    result = run("--trace", os.path.join(REPO, "tests/data/traces/azure2023_conv.csv"), "--instances", "4",
                 "--policy", "infinite,static-multi", "--limit", "60", "--sweep", "--sweep-limit", "60",
                 "--slo", str(slo), "--sweep-out", prefix)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not os.path.exists("pwned") and not os.path.exists(os.path.join(folder, "pwned"))
    with open(prefix + ".csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["policy"] for r in rows} == {"infinite", "static-multi"}, rows[:2]
    for policy in ("infinite", "static-multi"):
        points = [r for r in rows if r["policy"] == policy]
        scales = [float(r["rate_scale"]) for r in points]
        rates = [float(r["request_rate"]) for r in points]
        assert len(rates) >= 3 and rates == sorted(rates) and scales == sorted(scales), rates
        within = [float(r["request_rate"]) for r in points if float(r["median_normalized_latency_s"]) < slo]
        beyond = [float(r["rate_scale"]) for r in points if float(r["median_normalized_latency_s"]) >= slo]
        assert within and beyond, points
        # The knee is refined between the doubling scales: 4 points off the powers of two.
        off_grid = [s for s in scales if abs(math.log2(s) - round(math.log2(s))) > 1e-9]
        assert len(off_grid) == 4, scales
        line = next(l for l in result.stdout.splitlines() if l.startswith(policy + " ") and "highest rate" in l)
        assert line.endswith(f"{max(within):.2f} requests/s"), (line, max(within))
    with open(prefix + ".png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # With --json, stdout is one JSON object holding the sweep beside the results.
    result = run("--trace", os.path.join(REPO, "tests/data/traces/azure2023_conv.csv"), "--instances", "4",
                 "--policy", "infinite,static-multi", "--limit", "60", "--sweep", "--sweep-limit", "60",
                 "--slo", str(slo), "--sweep-out", prefix, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    sweep = report["sweep"]
    assert sorted(report["results"]) == sorted(sweep["policies"]) == ["infinite", "static-multi"], report.keys()
    assert sweep["slo_s"] == slo and sweep["csv"] == prefix + ".csv" and sweep["png"] == prefix + ".png", sweep
    for policy, s in sweep["policies"].items():
        within = [p["request_rate"] for p in s["points"] if p["median_normalized_latency_s"] < slo]
        assert s["highest_rate_within_slo"] == max(within), (policy, s)
        assert len(s["points"]) == len([r for r in rows if r["policy"] == policy]), policy
    print("sweep:", len(rows), "rows")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        # 4 simulated a100-80g with llama2-13b hold about 54K tokens each: one request of 120K tokens.
        trace = os.path.join(tmp, "trace.csv")
        with open(trace, "w") as f:
            f.write("arrival_s,input_tokens,output_tokens\n0,2000,50\n1,120000,20\n2,3000,40\n3,500,30\n")
        result = run("--trace", trace, "--instances", "4", "--policy", ",".join(POLICIES), "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
        results = report["results"]
        assert sorted(results) == sorted(POLICIES), list(results)
        # The first policy's throughput over each other's, side by side from the same run.
        ratios = report["throughput_ratio"]
        assert sorted(ratios) == sorted(POLICIES[1:]), ratios
        for name, ratio in ratios.items():
            expected = results["infinite"]["throughput_tok_s"] / results[name]["throughput_tok_s"]
            assert abs(ratio - expected) < 1e-9 * expected, (name, ratio, expected)
        # The most the first policy could gain: its output tokens at its work bound, over the other's throughput.
        bounds = report["throughput_ratio_bound"]
        assert sorted(bounds) == sorted(POLICIES[1:]), bounds
        first = results["infinite"]
        for name, bound in bounds.items():
            expected = first["output_tokens"] / first["work_bound_s"] / results[name]["throughput_tok_s"]
            assert abs(bound - expected) < 1e-9 * expected and bound >= ratios[name] - 1e-9, (name, bound, expected)
        for name in ("infinite", "passive", "static-single"):
            r = results[name]
            assert (r["completed"], r["refused"], r["failed"]) == (4, 0, 0), (name, r)
            assert r["output_tokens"] == 140 and r["throughput_tok_s"] > 0, (name, r)
        multi = results["static-multi"]
        assert (multi["completed"], multi["refused"]) == (3, 1), multi
        assert results["infinite"]["moves"] > 0 and multi["moves"] == 0
        # Where the GPUs' time and the KV memory went: holders attend for the long request with lending only.
        assert results["infinite"]["hosted_fraction"] > 0 and multi["hosted_fraction"] == 0
        for name, r in results.items():
            assert 0 < r["busy_fraction"] <= 1 + 1e-9, (name, r)
            assert 0 < r["computing_fraction"] <= r["busy_fraction"] + 1e-9, (name, r)  # the rest waits for holders
            assert r["kv_used_fraction"] > 0 and r["kv_used_fraction"] + r["kv_promised_fraction"] <= 1 + 1e-9, r
            assert 0 < r["work_bound_s"] <= r["makespan_s"], (name, r)  # no schedule beats the work itself
        # The same memory and profile for the multi-instance policies; static-single is one instance.
        assert results["infinite"]["kv_tokens_per_instance"] == multi["kv_tokens_per_instance"]
        # An instance dies 8 simulated seconds in: its requests go on elsewhere (the blocks that survived taken
        # over) and every request still completes with its whole answer.
        failing = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--fail-at", "8", "--json")
        assert failing.returncode == 0, failing.stdout + failing.stderr
        r = json.loads(failing.stdout)["results"]["infinite"]
        assert r["failures"] == 1 and (r["completed"], r["failed"], r["output_tokens"]) == (4, 0, 140), r
        assert r["recovered_by_replica"] + r["recovered_by_takeover"] + r["recovered_by_recompute"] >= 1, r
        print(f"an instance died at 8 s: {r['recovered_by_replica']} request(s) went on with replicas, "
              f"{r['recovered_by_takeover']} with the blocks that survived taken over, "
              f"{r['recovered_by_recompute']} computed it again ({r['positions_recomputed']} positions)", flush=True)
        assert results["infinite"]["profile"] == multi["profile"]
        assert results["static-single"]["instances"] == 1
        print("sim:", {k: (v["completed"], v["refused"], round(v["throughput_tok_s"], 2)) for k, v in results.items()})

        human = run("--trace", trace, "--instances", "4", "--policy", "infinite,static-multi")
        assert human.returncode == 0, human.stdout + human.stderr
        assert "% (computing " in human.stdout and "%) + hosting " in human.stdout and "KV used " in human.stdout and " s (work " in human.stdout, \
            human.stdout
        line = next(l for l in human.stdout.splitlines() if l.startswith("throughput infinite / static-multi: "))
        ratio_text, bound_text = line.split(": ")[1].split(" (no schedule of infinite's work passes ")
        assert ratio_text.endswith("x") and abs(float(ratio_text[:-1]) - ratios["static-multi"]) < 0.006, line
        assert bound_text.endswith("x)") and abs(float(bound_text[:-2]) - bounds["static-multi"]) < 0.006, line

        # Two instances of 4 GPUs each (tensor parallel) hold the long request whole: static-multi completes it.
        result = run("--trace", trace, "--instances", "2", "--gpus-per-instance", "4", "--policy", "static-multi",
                     "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        grouped = json.loads(result.stdout)
        assert grouped["settings"]["gpus_per_instance"] == 4, grouped["settings"]
        r = grouped["results"]["static-multi"]
        assert (r["completed"], r["refused"], r["instances"]) == (4, 0, 2), r
        assert "x4" in r["profile"] and r["kv_tokens_per_instance"] > 4 * multi["kv_tokens_per_instance"], r

        # A timeline per policy: rows of a period each, up to the last request's end, with the same memory scale
        # echoed; pools three times larger hold the long request on one instance, so static-multi completes it.
        result = run("--trace", trace, "--instances", "4", "--policy", "infinite,static-multi", "--timeline", "5",
                     "--kv-scale", "3", "--json")
        assert result.returncode == 0, result.stdout + result.stderr
        scaled = json.loads(result.stdout)
        assert scaled["settings"]["kv_scale"] == 3, scaled["settings"]
        for name, r in scaled["results"].items():
            rows = r["timeline"]
            assert rows and [t["end_s"] for t in rows] == sorted(t["end_s"] for t in rows), (name, rows)
            assert abs(rows[-1]["end_s"] - r["makespan_s"]) < 1e-6 * r["makespan_s"], (name, rows[-1], r)
            assert rows[-1]["finished"] == r["completed"] + r["refused"] == 4, (name, rows[-1])
        assert scaled["results"]["static-multi"]["completed"] == 4
        assert results["infinite"]["timeline"] == []  # none asked
        queued = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--hosted-attention", "queued",
                     "--json")
        assert queued.returncode == 0, queued.stdout + queued.stderr
        queued = json.loads(queued.stdout)
        assert queued["settings"]["hosted_attention"] == "queued" and scaled["settings"]["hosted_attention"] == \
            "interleaved", queued["settings"]
        assert queued["results"]["infinite"]["completed"] == 4, queued["results"]
        # Links that take no time (what if), and room prefill off, are echoed; the long request still completes.
        free = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--free-links",
                   "--room-prefill-min-chunks", "0", "--room-pass-limit", "0", "--json")
        assert free.returncode == 0, free.stdout + free.stderr
        free = json.loads(free.stdout)
        assert free["settings"]["timed_links"] is False and queued["settings"]["timed_links"] is True, free["settings"]
        assert free["settings"]["room_prefill_min_chunks"] == 0, free["settings"]
        assert free["settings"]["room_pass_limit_s"] == 0 and queued["settings"]["room_pass_limit_s"] == 60, \
            free["settings"]
        assert free["results"]["infinite"]["completed"] == 4, free["results"]
        # The coarser priority timing (a holder's next step waits for all it hosted) is echoed and completes.
        coarse = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--hosted-attention", "priority",
                     "--json")
        assert coarse.returncode == 0, coarse.stdout + coarse.stderr
        coarse = json.loads(coarse.stdout)
        assert coarse["settings"]["hosted_attention"] == "priority", coarse["settings"]
        assert coarse["results"]["infinite"]["completed"] == 4, coarse["results"]
        bad = run("--trace", trace, "--hosted-attention", "sometimes")
        assert bad.returncode != 0 and "unknown --hosted-attention 'sometimes'" in bad.stderr, bad.stderr
        # Hosted attention in arrival order (decode tokens queued behind prefill) is echoed and completes too.
        arrival = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--hosted-order", "arrival", "--json")
        assert arrival.returncode == 0, arrival.stdout + arrival.stderr
        arrival = json.loads(arrival.stdout)
        assert arrival["settings"]["hosted_order"] == "arrival" and scaled["settings"]["hosted_order"] == \
            "decode-first", arrival["settings"]
        assert arrival["results"]["infinite"]["completed"] == 4, arrival["results"]
        bad = run("--trace", trace, "--hosted-order", "random")
        assert bad.returncode != 0 and "unknown --hosted-order 'random'" in bad.stderr, bad.stderr
        human = run("--trace", trace, "--instances", "4", "--policy", "infinite", "--timeline", "5")
        assert human.returncode == 0 and "until (s)  stepping   busy  hosting" in human.stdout, human.stdout

        # Steps with decode tokens prefill up to the profile's knee by default (128 tokens on a100-80g with
        # llama2-13b; static-single's tensor-parallel profile has its own), up to a given count, or up to the
        # whole step with 0. A prompt spread over the decode steps makes those steps smaller.
        assert report["settings"]["mixed_step_tokens"] == "knee", report["settings"]
        assert results["infinite"]["mixed_step_tokens"] == multi["mixed_step_tokens"] == 128, results
        azure = os.path.join(REPO, "tests/data/traces/azure2023_conv.csv")
        spread = {}
        for tokens in ("0", "64"):
            result = run("--trace", azure, "--limit", "200", "--instances", "2", "--policy", "static-multi",
                         "--mixed-step-tokens", tokens, "--json")
            assert result.returncode == 0, result.stdout + result.stderr
            spread[tokens] = json.loads(result.stdout)
            assert spread[tokens]["settings"]["mixed_step_tokens"] == int(tokens), spread[tokens]["settings"]
            r = spread[tokens]["results"]["static-multi"]
            assert r["mixed_step_tokens"] == int(tokens) and r["completed"] == 200, r
        whole, capped = (spread[t]["results"]["static-multi"] for t in ("0", "64"))
        assert capped["mean_step_tokens"] < whole["mean_step_tokens"], (capped, whole)
        assert capped["tpot_s"]["p50"] < whole["tpot_s"]["p50"], (capped["tpot_s"], whole["tpot_s"])
        assert "(<= 128 with decodes)" in human.stdout, human.stdout

        check_sweep(tmp)
        print("prefix cache (hits, ceiling, TTFT p50):", check_prefix_cache(tmp))

        bad = run("--trace", trace, "--policy", "infinite,bogus")
        assert bad.returncode != 0 and "unknown policy 'bogus'" in bad.stderr, bad.stderr
        too_few = run("--trace", trace, "--model", "llama2-70b", "--gpus-per-instance", "2")
        assert too_few.returncode != 0 and "llama2-70b needs at least 4 a100-80g per instance" in too_few.stderr, \
            too_few.stderr
        missing = run("--trace", os.path.join(tmp, "none.csv"))
        assert missing.returncode != 0 and "cannot read trace" in missing.stderr, missing.stderr
        for name, rows, error in [
                ("backwards.csv", "0,100,10\n5,100,10\n1,100,10\n",
                 "line 4: arrival_s 1 is before the line above's 5"),
                ("extra.csv", "0,100,10,7\n", "line 2: expected arrival_s,input_tokens,output_tokens"),
                ("negative.csv", "0,-5,10\n", "line 2: expected arrival_s,input_tokens,output_tokens")]:
            path = os.path.join(tmp, name)
            with open(path, "w") as f:
                f.write("arrival_s,input_tokens,output_tokens\n" + rows)
            bad = run("--trace", path)
            assert bad.returncode != 0 and error in bad.stderr, (name, bad.stderr)
        for flag, value, error in [("--max-batch-tokens", "0", "not in range 1"),
                                   ("--max-batch-seqs", "-1", "not in range 1"),
                                   ("--mixed-step-tokens", "-1", "not in range 0"),
                                   ("--slo", "0", "must be a number above zero, not 0"),
                                   ("--slo", "inf", "must be a number above zero, not inf"),
                                   ("--rate-scale", "nan", "must be a number, 0 or more, not nan"),
                                   ("--rate-scale", "-1", "must be a number, 0 or more, not -1"),
                                   ("--kv-scale", "0", "must be a number above zero, not 0"),
                                   ("--timeline", "-5", "must be a number, 0 or more, not -5"),
                                   ("--room-pass-limit", "-1", "must be a number from 0 to")]:
            bad = run("--trace", trace, flag, value)
            assert bad.returncode != 0 and flag in bad.stderr and error in bad.stderr, (flag, bad.stderr)
        # A GPU or model without a profile is refused before anything is printed.
        for flag, value, error in [("--gpu", "h300", "no built-in profile for GPU 'h300'"),
                                   ("--model", "gpt", "unknown model shape 'gpt'")]:
            bad = run("--trace", trace, flag, value)
            assert bad.returncode != 0 and error in bad.stderr and bad.stdout == "", (flag, bad.stdout, bad.stderr)
    print("test_sim: all checks passed")


if __name__ == "__main__":
    main()
