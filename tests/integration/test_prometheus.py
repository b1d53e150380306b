"""A real Prometheus server scrapes `illm serve`: after a known number of requests, the request and
token counters read back through Prometheus's HTTP API rose by exactly what was sent. The exposition
passes `promtool check metrics` (with the illm_ prefix; with the default illm: prefix the only remark
is promtool's rule that ':' is for recording rules), and every metric the dashboards and rules use
exists."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

from common import Server, free_port, process, request, wait_until

ILLM, REPO = sys.argv[1], sys.argv[2]
REQUESTS, MAX_TOKENS = 6, 12


def query(port, promql):
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(promql)}"
    with urllib.request.urlopen(url, timeout=10) as r:
        data = json.load(r)
    assert data["status"] == "success", data
    result = data["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def scraped_value(prom_port, promql, wanted):
    wait_until(lambda: query(prom_port, promql) == wanted, 60, f"Prometheus to read {promql} == {wanted}")


def promtool_metrics(text):
    return subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)


def dashboard_metric_names():
    names = set()
    for path in [os.path.join(REPO, "dashboards/grafana/infinite-llm.json"),
                 os.path.join(REPO, "dashboards/prometheus/illm-rules.yml")]:
        with open(path) as f:
            text = f.read()
        for name in re.findall(r"illm:[a-z_0-9]+(?::[a-z_0-9]+)?", text):
            if name.count(":") == 1:  # level:metric:operation names are what the recording rules make
                names.add(re.sub(r"_(bucket|sum|count)$", "", name))
    return names


def main():
    storage = tempfile.mkdtemp(prefix="illm-prometheus-")
    try:
        with Server(ILLM, "--instances", "2", "--kv-blocks-per-instance", "128") as s:
            prom_port = free_port()
            config = os.path.join(storage, "prometheus.yml")
            with open(config, "w") as f:
                f.write(f"global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: illm\n"
                        f"    static_configs:\n      - targets: ['127.0.0.1:{s.port}']\n")
            with process(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={storage}/data",
                          f"--web.listen-address=127.0.0.1:{prom_port}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL):
                wait_until(lambda: query(prom_port, 'up{job="illm"}') == 1.0, 60, "Prometheus to scrape illm")
                prompt_tokens = 0
                for i in range(REQUESTS):
                    status, body = request(s.port, "POST", "/v1/completions",
                                           {"model": "stories15M", "prompt": f"Tom had {i} red balls",
                                            "max_tokens": MAX_TOKENS, "ignore_eos": True})
                    assert status == 200, body
                    prompt_tokens += body["usage"]["prompt_tokens"]
                scraped_value(prom_port, "sum(illm:request_success_total)", float(REQUESTS))
                scraped_value(prom_port, "sum(illm:generation_tokens_total)", float(REQUESTS * MAX_TOKENS))
                scraped_value(prom_port, "sum(illm:prompt_tokens_total)", float(prompt_tokens))
                scraped_value(prom_port, "sum(illm:e2e_request_latency_seconds_count)", float(REQUESTS))
            text = request(s.port, "GET", "/metrics")[1]
            lint = promtool_metrics(text)
            remarks = [line for line in lint.stdout.splitlines() + lint.stderr.splitlines() if line.strip()]
            assert all("metric names should not contain ':'" in line for line in remarks), remarks
            exposed = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
            missing = dashboard_metric_names() - exposed
            assert not missing, f"dashboards use metrics that are not exposed: {missing}"
        with Server(ILLM, "--instances", "1", "--kv-blocks-per-instance", "64", "--metrics-prefix", "illm_") as s:
            request(s.port, "POST", "/v1/completions", {"model": "stories15M", "prompt": "hi", "max_tokens": 3})
            lint = promtool_metrics(request(s.port, "GET", "/metrics")[1])
            assert lint.returncode == 0, (lint.stdout, lint.stderr)
        rules = subprocess.run(["promtool", "check", "rules", os.path.join(REPO, "dashboards/prometheus/illm-rules.yml")],
                               capture_output=True, text=True)
        assert rules.returncode == 0, rules.stdout + rules.stderr
    finally:
        shutil.rmtree(storage, ignore_errors=True)
    print("test_prometheus: all checks passed")


if __name__ == "__main__":
    main()
