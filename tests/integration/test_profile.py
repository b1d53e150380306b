"""`illm profile` as a user runs it: a profile measured on the cpu backend and written as JSON, checked
with --validate on mixed batches it was not fitted on (predicted beside measured, the median error),
used by `illm sim --profile`; and clear errors, before any measuring, for an unwritable --out and a
missing, malformed or other model's --profile."""

import json
import os
import subprocess
import sys
import tempfile

ILLM, REPO = sys.argv[1], sys.argv[2]
# One thread and few runs: quick, and steady beside other work on the machine.
QUICK = ["--threads", "1", "--repeats", "2"]


def run(*args):
    return subprocess.run([ILLM, *args], capture_output=True, text=True, timeout=600)


def fails_with(args, text):
    result = run(*args)
    assert result.returncode != 0 and text in result.stderr, (args, result.returncode, result.stderr)


def check_profile(path):
    with open(path) as f:
        p = json.load(f)
    assert p["name"] == "cpu (1 thread) stories15M (measured)" and p["n_layers"] == 6, p
    tokens = [point["tokens"] for point in p["dense_seconds_per_layer"]]
    assert tokens == sorted(tokens) and tokens[0] >= 1, tokens
    assert all(point["seconds"] > 0 for point in p["dense_seconds_per_layer"]), p
    assert p["attention_tokens_per_s"] > 0 and p["prefill_pairs_per_s"] > 0 and p["sampled_row_s"] >= 0, p
    rows = [point["rows"] for point in p["sampled_seconds"]]
    assert rows == sorted(set(rows)) and rows[0] >= 1 and 17 in rows, rows  # both sides of the padded sizes
    assert all(point["seconds"] >= 0 for point in p["sampled_seconds"]), p


def check_validation(path):
    result = run("profile", "--validate", "--profile", path, *QUICK, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    batches = report["batches"]
    assert len(batches) == 24, len(batches)
    assert any(b["prefill_tokens"] > 0 for b in batches) and any(b["prefill_tokens"] == 0 for b in batches)
    for b in batches:
        assert b["predicted_s"] > 0 and b["measured_s"] > 0, b
        assert abs(b["error"] - (b["predicted_s"] - b["measured_s"]) / b["measured_s"]) < 1e-9, b
    errors = sorted(abs(b["error"]) for b in batches)
    assert abs(report["median_abs_error"] - errors[len(errors) // 2]) < 1e-12, report["median_abs_error"]
    print(f"median |error| {report['median_abs_error']:.3f}")
    # A model that predicts the step at all: a broken term (units, a missing part) is off by far more.
    assert report["median_abs_error"] < 0.5, report["median_abs_error"]


def check_sim(path, tmp):
    trace = os.path.join(tmp, "trace.csv")
    with open(trace, "w") as f:
        f.write("arrival_s,input_tokens,output_tokens\n0,100,10\n1,200,5\n")
    result = run("sim", "--trace", trace, "--instances", "2", "--profile", path, "--policy", "infinite", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["settings"]["profile"] == "cpu (1 thread) stories15M (measured)", report["settings"]
    r = report["results"]["infinite"]
    assert (r["completed"], r["output_tokens"]) == (2, 15) and r["throughput_tok_s"] > 0, r


def check_errors(path, tmp):
    fails_with(["profile", "--out", os.path.join(tmp, "no-such-dir", "p.json")], "cannot write")
    fails_with(["profile", "--validate", "--profile", os.path.join(tmp, "missing.json")], "cannot read")
    malformed = os.path.join(tmp, "malformed.json")
    with open(malformed, "w") as f:
        f.write("{\"n_layers\": 6, \"dense_seconds_per_layer\": [")
    fails_with(["profile", "--validate", "--profile", malformed], malformed + ": profile: not a JSON object")
    other = os.path.join(tmp, "other.json")
    with open(path) as f:
        p = json.load(f)
    p["model"], p["n_layers"] = "llama2-7b", 32
    with open(other, "w") as f:
        json.dump(p, f)
    fails_with(["profile", "--validate", "--profile", other], "describes llama2-7b (32 layers), not stories15M")
    fails_with(["profile", "--repeats", "0"], "--repeats")
    # Checked on another thread count than measured: it runs, with a note saying so.
    result = run("profile", "--validate", "--profile", path, "--threads", "2", "--repeats", "1", "--json")
    assert result.returncode == 0 and "checked on cpu (2 threads)" in result.stderr, result.stderr


def main():
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "profile.json")
        result = run("profile", "--out", path, *QUICK)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "written to " + path in result.stdout, result.stdout
        assert os.listdir(tmp) == ["profile.json"], os.listdir(tmp)  # written beside it, renamed over it
        check_profile(path)
        check_validation(path)
        check_sim(path, tmp)
        check_errors(path, tmp)
    print("ok")


if __name__ == "__main__":
    main()
