"""The live status page in a real browser: `illm serve` with 3 instances of small pools serves a long streamed
request whose prompt needs more than one pool (its blocks are spread over the instances); meanwhile headless
Chromium loads GET /status, runs its script, and the test reads what the page drew (each instance's pool and
state, each request's owner and holders) and checks it against GET /v1/cluster?seq=N, the snapshot of the seq
the page shows. A screenshot of the page is saved as an artifact ($ILLM_TEST_ARTIFACTS/status-page.png).

Usage: test_status_page.py path/to/illm"""

import html.parser
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from common import Server, make_prompt, request, stream_events, wait_until

ILLM = sys.argv[1]
POOL_BLOCKS = 40  # 640 tokens a pool: the prompt below needs about two of them
STREAM_TOKENS = 800  # prompt and output within the 3 pools


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    raise AssertionError("no chromium installed (deploy/install-deps.sh installs Debian's chromium)")


def browse(url, *mode, budget_ms=4000):
    """Runs headless Chromium on `url` (its whole process group ended afterwards); returns its stdout."""
    with tempfile.TemporaryDirectory(prefix="illm-chromium-") as profile:
        args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--no-first-run", "--disable-extensions", f"--user-data-dir={profile}", "--window-size=1400,900",
                f"--virtual-time-budget={budget_ms}", *mode, url]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=90)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        assert p.returncode == 0, f"chromium exited with {p.returncode}"
        return out.decode("utf-8", "replace")


class PageReader(html.parser.HTMLParser):
    """What the page drew: the seq it shows, the instances and the request rows, from their data- attributes."""

    def __init__(self):
        super().__init__()
        self.seq = None
        self.instances, self.requests, self.spread_lines = {}, {}, set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if a.get("id") == "seq":
            self.seq = int(a["data-seq"])
        elif tag == "g" and "instance" in classes:
            self.instances[int(a["data-id"])] = {
                "state": a["data-state"], "owned": int(a["data-owned"]), "hosted": int(a["data-hosted"]),
                "promised": int(a["data-promised"]), "free": int(a["data-free"]), "total": int(a["data-total"])}
        elif tag == "tr" and "request" in classes:
            holders = {int(h.split(":")[0]): int(h.split(":")[1]) for h in a["data-holders"].split(",") if h}
            self.requests[int(a["data-id"])] = {"owner": int(a["data-owner"]), "holders": holders}
        elif tag == "path" and "spread" in classes:
            self.spread_lines.add((int(a["data-request"]), int(a["data-holder"])))


def expected_from(snapshot):
    instances = {i["id"]: {"state": i["state"], "owned": i["owned_blocks"], "hosted": i["hosted_blocks"],
                           "promised": i["promised_blocks"], "free": i["free_blocks"], "total": i["total_blocks"]}
                 for i in snapshot["instances"]}
    requests = {r["id"]: {"owner": r["owner"], "holders": {b["instance"]: b["blocks"] for b in r["blocks"]}}
                for r in snapshot["requests"]}
    return instances, requests


def spread_requests(snapshot):
    return [r for r in snapshot["requests"] if len([b for b in r["blocks"] if b["blocks"] > 0]) >= 2]


def main():
    with Server(ILLM, "--instances", "3", "--kv-blocks-per-instance", str(POOL_BLOCKS), "--threads", "1") as s:
        status, page = request(s.port, "GET", "/status")
        assert status == 200 and "<svg" in page and "/v1/cluster" in page, (status, page[:200])
        external = [w for w in ("src=\"http", "href=\"http", "@import", "url(") if w in page]
        assert not external, f"the page fetches something from elsewhere: {external}"
        status, first = request(s.port, "GET", "/v1/cluster")
        assert status == 200 and [i["state"] for i in first["instances"]] == ["alive"] * 3, first
        assert request(s.port, "GET", "/v1/cluster?seq=abc")[0] == 400
        assert request(s.port, "GET", f"/v1/cluster?seq={first['seq'] + 100000}")[0] == 404
        print(f"/status: {len(page)} bytes, nothing fetched from elsewhere; /v1/cluster seq {first['seq']}, "
              f"3 instances alive", flush=True)

        finished, failure, stop = [], [], threading.Event()

        def keep_one_running():  # one long request after another until the browser checks are done
            try:
                while not stop.is_set():
                    events = list(stream_events(s.port, "/v1/completions",
                                                {"model": "stories15M", "prompt": make_prompt(700),
                                                 "max_tokens": STREAM_TOKENS, "ignore_eos": True, "stream": True,
                                                 "temperature": 0}, timeout=600))
                    assert events[-1] == "[DONE]", events[-3:]
                    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length", events[-2]
                    finished.append(len(events) - 2)
            except Exception as e:  # reported by the main thread
                failure.append(e)

        streamer = threading.Thread(target=keep_one_running)
        streamer.start()
        try:
            wait_until(lambda: failure or spread_requests(request(s.port, "GET", "/v1/cluster")[1]), 300,
                       "a running request with blocks on two instances or more")
            assert not failure, failure
            # The page's picture equals the snapshot of the seq it shows; a load that fell between two requests
            # (nothing spread to draw) is done again.
            for attempt in range(5):
                page, shown = check_page(s.port)
                if spread_requests(shown):
                    break
            else:
                raise AssertionError("the page never showed a spread request")
            for r in spread_requests(shown):
                for b in r["blocks"]:
                    if not b["local"] and b["instance"] != r["owner"]:
                        assert (r["id"], b["instance"]) in page.spread_lines, (r, page.spread_lines)
            print(f"the page at seq {page.seq} equals /v1/cluster?seq={page.seq}: instances "
                  + ", ".join(f"{i}: {v['state']} owned {v['owned']} hosted {v['hosted']} promised {v['promised']} "
                              f"free {v['free']}" for i, v in sorted(page.instances.items()))
                  + "; requests " + "; ".join(f"{r}: owner {v['owner']} blocks {v['holders']}"
                                             for r, v in sorted(page.requests.items())), flush=True)

            artifacts = os.environ.get("ILLM_TEST_ARTIFACTS", tempfile.gettempdir())
            os.makedirs(artifacts, exist_ok=True)
            shot = os.path.join(artifacts, "status-page.png")
            if os.path.exists(shot):
                os.unlink(shot)
            browse(f"http://127.0.0.1:{s.port}/status", f"--screenshot={shot}")
            assert os.path.getsize(shot) > 10000, "the screenshot is nearly empty"
            print(f"screenshot: {shot} ({os.path.getsize(shot)} bytes)", flush=True)
        finally:
            stop.set()
            streamer.join(timeout=600)
        assert not failure, failure
        assert finished, "no request finished"
        wait_until(lambda: request(s.port, "GET", "/v1/cluster")[1]["requests"] == [], 30, "no request running")
        print(f"{len(finished)} long requests of {STREAM_TOKENS} tokens streamed whole meanwhile; ok", flush=True)


def check_page(port):
    """Loads the page in Chromium; checks what it drew against the snapshot of the seq it shows; returns both."""
    seq_before = request(port, "GET", "/v1/cluster")[1]["seq"]
    page = PageReader()
    page.feed(browse(f"http://127.0.0.1:{port}/status", "--dump-dom"))
    assert page.seq and page.seq >= seq_before, f"the page shows seq {page.seq} (the feed was at {seq_before})"
    status, shown = request(port, "GET", f"/v1/cluster?seq={page.seq}")
    assert status == 200, (status, shown)
    instances, requests = expected_from(shown)
    assert page.instances == instances, f"page {page.instances}\nsnapshot {instances}"
    assert page.requests == requests, f"page {page.requests}\nsnapshot {requests}"
    return page, shown


if __name__ == "__main__":
    main()
