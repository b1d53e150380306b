"""`illm bench` replays the Azure conversation trace (scaled to fit this machine) against `illm serve`:
every request completes, and it reports throughput and TTFT / inter-token / end-to-end percentiles,
with one CSV row per request. A burst of requests queued on two instances keeps both busy: the router counts the
work queued at each (and what it sent since the last heartbeat), not only the blocks in use."""

import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

from common import Server, request

ILLM, REPO = sys.argv[1], sys.argv[2]
LIMIT = 24


def closed_loop(csv_path):
    """--concurrency 4: 12 requests of 20 prompt tokens and 24 output tokens, never more than 4 in flight."""
    with Server(ILLM, "--instances", "2") as s:
        result = subprocess.run([ILLM, "bench", "--url", f"http://127.0.0.1:{s.port}", "--concurrency", "4",
                                 "--limit", "12", "--prompt-tokens", "20", "--max-output-tokens", "24",
                                 "--csv", csv_path, "--json"], capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        report = json.loads(result.stdout)
    print(json.dumps(report))
    assert report["concurrency"] == 4 and report["completed"] == 12 and report["failed"] == 0, report
    assert report["output_tokens"] == 12 * 24 and report["output_tokens_per_second"] > 0, report
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    assert all(int(r["prompt_tokens"]) == 20 and int(r["output_tokens"]) == 24 for r in rows), rows[:3]
    spans = [(float(r["sent_s"]), float(r["sent_s"]) + float(r["e2e_s"])) for r in rows]
    most = max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans)
    assert most <= 4, f"{most} requests were in flight at once"


def burst_on_two_instances():
    """24 clients at once on two instances that run 2 requests each: the queues fill, and each instance owns at
    least a quarter of the requests (the router sees the work queued at each, and what it sent since the last
    heartbeat, and handler threads that route at once each see the ones routed before them); neither queue ever holds
    more than 16 (before, all 24 went to one: 22 waiting, the other idle)."""
    samples, owners, done = [], {}, threading.Event()
    with Server(ILLM, "--instances", "2", "--max-batch-seqs", "2") as s:
        def poll():
            while not done.is_set():
                status, body = request(s.port, "GET", "/v1/cluster")
                if status == 200:
                    samples.append([(m["running"], m["waiting"]) for m in body["instances"]])
                    owners.update((r["id"], r["owner"]) for r in body["requests"])
                time.sleep(0.01)
        poller = threading.Thread(target=poll)
        poller.start()
        try:
            result = subprocess.run([ILLM, "bench", "--url", f"http://127.0.0.1:{s.port}", "--concurrency", "24",
                                     "--limit", "24", "--prompt-tokens", "40", "--max-output-tokens", "24",
                                     "--csv", os.devnull, "--json"], capture_output=True, text=True, timeout=600)
        finally:
            done.set()
            poller.join()
        assert result.returncode == 0, result.stdout + result.stderr
        assert json.loads(result.stdout)["completed"] == 24, result.stdout
    longest_queue = max(w for m in samples for _, w in m)
    per_instance = [sum(1 for o in owners.values() if o == i) for i in (0, 1)]
    print(f"burst: {len(samples)} samples of /v1/cluster; requests owned by each instance: {per_instance}; longest "
          f"queue {longest_queue}")
    assert len(owners) >= 12 and min(per_instance) >= len(owners) // 4, per_instance
    assert longest_queue <= 16, longest_queue


def main():
    trace = os.path.join(REPO, "tests/data/traces/azure2023_conv.csv")
    out = tempfile.NamedTemporaryFile(suffix=".csv", delete=False)
    out.close()
    try:
        with Server(ILLM, "--instances", "2", "--kv-blocks-per-instance", "512") as s:
            result = subprocess.run([ILLM, "bench", "--url", f"http://127.0.0.1:{s.port}", "--trace", trace,
                                     "--limit", str(LIMIT), "--rate-scale", "2", "--max-input-tokens", "256",
                                     "--max-output-tokens", "48", "--csv", out.name, "--json"],
                                    capture_output=True, text=True, timeout=600)
            assert result.returncode == 0, result.stdout + result.stderr
            report = json.loads(result.stdout)
        print(json.dumps(report))
        assert report["requests"] == LIMIT and report["completed"] == LIMIT and report["failed"] == 0, report
        assert report["output_tokens_per_second"] > 0 and report["requests_per_s"] > 0, report
        for key in ("ttft_s", "itl_s", "e2e_s"):
            p = report[key]
            assert 0 < p["p50"] <= p["p90"] <= p["p99"], (key, p)
        with open(out.name) as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == LIMIT and all(r["status"] == "200" for r in rows), rows[:3]
        assert all(int(r["output_tokens"]) == int(r["max_tokens"]) for r in rows), rows[:3]
        closed_loop(out.name)
        burst_on_two_instances()
    finally:
        os.unlink(out.name)
    print("test_bench: all checks passed")


if __name__ == "__main__":
    main()
