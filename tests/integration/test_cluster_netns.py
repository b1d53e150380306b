"""deploy/cluster-netns.sh: a cluster of processes where each process is its own host, a network namespace
with its own address on a bridge (UCX over tcp on each namespace's eth0). The script starts the gManager,
four instances with small pools (64 blocks of 16 tokens each) and the front end (`illm serve --gmanager`)
under a prefix and a /24 of this test's own; then
  (a) a prompt of about three pools goes to the cluster with `illm generate --gmanager` run in the client
      namespace: its token ids equal those of the same prompt on one instance with enough memory, and its
      KV blocks are held by at least two instances, and the control plane runs over mutual TLS (the
      certificates the script makes);
  (b) a short completion posted to the front end over HTTP (from the root namespace, through the bridge)
      returns the text of the same prompt on one instance (skipped, with a note, while `illm serve` has
      no --gmanager);
  (c) after SIGTERM the script has stopped every process it started and deleted every namespace and link.
Exit 77 (skip) when not root, when network namespaces or veth pairs are unavailable, or when illm has no UCX.

Usage: test_cluster_netns.py ILLM SOURCE_DIR"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from common import SkipTest, request, wait_until
from test_cluster_ucx import make_prompt

SKIP = 77
UP_S = 300
RUN_S = 600
STOP_S = 150
MAX_TOKENS = 12
SHORT_PROMPT = "Once upon a time"
SHORT_TOKENS = 16


def run(args, timeout_s=60, check=True):
    done = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout_s, text=True)
    if check:
        assert done.returncode == 0, (args, done.returncode, done.stdout[-2000:], done.stderr[-4000:])
    return done


def run_json(args, timeout_s=RUN_S):
    done = run(args, timeout_s)
    return json.loads(done.stdout.strip().splitlines()[-1])


def timed(what, timings, fn, *args):
    t = time.time()
    out = fn(*args)
    timings[what] = time.time() - t
    print(f"{what}: {timings[what]:.1f} s", flush=True)
    return out


def check_can_run(illm, prefix):
    """Raises SkipTest when this machine cannot run the script (not root, no namespaces or veth pairs)."""
    if os.geteuid() != 0:
        raise SkipTest("needs root (network namespaces, veth pairs, a bridge)")
    if not shutil.which("ip"):
        raise SkipTest("ip (iproute2) not found")
    if not os.access(illm, os.X_OK):
        raise SkipTest(f"no illm at {illm}")
    probe = f"{prefix}-probe"
    try:
        made = run(["ip", "netns", "add", probe], check=False)
        if made.returncode != 0:
            raise SkipTest(f"network namespaces are unavailable: {made.stderr.strip()}")
        veth = run(["ip", "-n", probe, "link", "add", "name", "probe0", "type", "veth", "peer", "name", "probe1"],
                   check=False)
        if veth.returncode != 0:
            raise SkipTest(f"veth pairs are unavailable: {veth.stderr.strip()}")
    finally:
        run(["ip", "netns", "del", probe], check=False)


def free_subnet(seed):
    """A 10.78.N /24 that no interface of the root namespace uses."""
    used = run(["ip", "-4", "-o", "addr", "show"]).stdout
    for k in range(254):
        subnet = f"10.78.{(seed + k) % 254 + 1}"
        if f" {subnet}." not in used:
            return subnet
    raise AssertionError("no free 10.78.N subnet")


def namespaces_with(prefix):
    return [line.split()[0] for line in run(["ip", "netns", "list"]).stdout.splitlines()
            if line.startswith(prefix + "-")]


def links_with(prefix):
    names = re.findall(r"^\d+: ([^:@]+)", run(["ip", "-o", "link", "show"]).stdout, re.M)
    return [n for n in names if n.startswith(prefix + "-")]


def illm_processes_with(marker):
    """Pids of live processes whose command line contains `marker` (an address of this test's subnet)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            if marker.encode() in cmdline and b"illm" in cmdline and int(pid) != os.getpid():
                found.append(int(pid))
        except OSError:
            pass
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class ClusterScript:
    """deploy/cluster-netns.sh in the background (its own session); its output is collected by a thread."""

    def __init__(self, args):
        self.lines = []
        self.process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            self.lines.append(line)

    def output(self):
        return "".join(self.lines)

    def exports(self):
        return dict(re.findall(r"^export (ILLM_\w+)='([^']*)'$", self.output(), re.M))

    def stop(self, timeout_s):
        """SIGTERM (the script stops everything in order), then SIGKILL to its session after timeout_s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.reader.join(10)
        return self.process.returncode


def remove_leftovers(prefix):
    """What a script that had to be killed left behind: the processes in its namespaces, namespaces, links."""
    for ns in namespaces_with(prefix):
        for pid in run(["ip", "netns", "pids", ns], check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        run(["ip", "netns", "del", ns], check=False)
    for link in links_with(prefix):
        run(["ip", "link", "del", link], check=False)


def post_completion(url, body, timeout_s=RUN_S):
    host, port = re.match(r"http://([^:/]+):(\d+)", url).groups()
    return request(int(port), "POST", "/v1/completions", body, timeout=timeout_s, host=host)


def serve_has_gmanager(illm):
    return "--gmanager" in run([illm, "serve", "--help"], check=False).stdout


def main():
    illm = os.path.abspath(sys.argv[1])
    source = os.path.abspath(sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "../.."))
    script = os.path.join(source, "deploy", "cluster-netns.sh")
    prefix = f"illmt{os.getpid() % 100000}"
    try:
        check_can_run(illm, prefix)
    except SkipTest as e:
        print(f"skipped: {e}")
        sys.exit(SKIP)

    subnet = free_subnet(os.getpid())
    with_frontend = serve_has_gmanager(illm)
    timings = {}
    work = tempfile.mkdtemp(prefix="illm-netns-test-")
    prompt_file = os.path.join(work, "prompt.txt")
    with open(prompt_file, "w") as f:
        f.write(make_prompt())
    long_args = ["generate", "--prompt-file", prompt_file, "--max-tokens", str(MAX_TOKENS), "--temperature", "0",
                 "--ignore-eos", "--json"]
    short_args = ["generate", "--prompt", SHORT_PROMPT, "--max-tokens", str(SHORT_TOKENS), "--temperature", "0",
                  "--json"]

    # The references, in the root namespace, before the cluster takes the cores.
    reference = timed("reference: 1 instance, 1024 blocks", timings, run_json,
                      [illm, *long_args, "--instances", "1", "--kv-blocks-per-instance", "1024"])
    n_prompt = len(reference["prompt_token_ids"])
    assert 2500 <= n_prompt <= 3300, n_prompt  # about three pools of 64 blocks of 16 tokens
    print(f"reference: {n_prompt} prompt tokens -> {reference['token_ids']}", flush=True)
    short_reference = None
    if with_frontend:
        short_reference = run_json([illm, *short_args, "--instances", "1"])
        print(f"reference for the front end: {short_reference['text']!r}", flush=True)

    args = [script, "--prefix", prefix, "--subnet", subnet, "--illm", illm, "--kv-blocks-per-instance", "64",
            "--instances", "4", "--log-dir", os.path.join(work, "logs"), "--timeout", str(UP_S)]
    if not with_frontend:
        args.append("--no-frontend")
        print("note: `illm serve --help` has no --gmanager yet: the cluster runs without a front end and part (b) "
              "is skipped", flush=True)
    print("starting:", " ".join(args), flush=True)

    ok = False
    cluster = None
    try:
        t = time.time()
        cluster = ClusterScript(args)
        wait_until(lambda: "ILLM_PIDS" in cluster.exports() or cluster.process.poll() is not None, UP_S + 60,
                   "deploy/cluster-netns.sh to bring the cluster up")
        if cluster.process.poll() is not None:
            cluster.reader.join(10)
            if "built without UCX" in cluster.output():
                raise SkipTest("illm was built without UCX")
            raise AssertionError(f"deploy/cluster-netns.sh exited with {cluster.process.returncode} before the "
                                 f"cluster was up")
        timings["cluster up"] = time.time() - t
        env = cluster.exports()
        print(f"cluster up: {timings['cluster up']:.1f} s; gManager {env['ILLM_GMANAGER']}, client namespace "
              f"{env['ILLM_NETNS_CLIENT']}, front end {env.get('ILLM_URL', '(none)')}", flush=True)
        assert env["ILLM_GMANAGER"].startswith(subnet + ".10:"), env
        assert env["ILLM_NETNS_CLIENT"] == f"{prefix}-cl", env
        pids = [int(p) for p in env["ILLM_PIDS"].split()]
        assert len(pids) == (6 if with_frontend else 5), pids

        # (a) The long prompt from the client namespace, through the bridge to the gManager and the instances.
        result = timed("(a) cluster across namespaces", timings, run_json,
                       ["ip", "netns", "exec", env["ILLM_NETNS_CLIENT"], illm, *long_args,
                        "--gmanager", env["ILLM_GMANAGER"], *env.get("ILLM_TLS_ARGS", "").split()])
        blocks = result.get("blocks_per_instance") or []
        print(f"(a) {result['token_ids']}; blocks per instance {blocks}", flush=True)
        assert result["prompt_token_ids"] == reference["prompt_token_ids"]
        assert result["token_ids"] == reference["token_ids"], (result["token_ids"], reference["token_ids"])
        assert sum(1 for b in blocks if b > 0) >= 2, blocks
        with open(os.path.join(env["ILLM_LOG_DIR"], "gmanager.log"), errors="replace") as f:
            gm_log = f.read()
        moves = re.findall(r"^illm gmanager: move \d+ of request .*$", gm_log, re.M)
        print(f"(a) {len(moves)} move reports in the gManager's log{', e.g. ' + moves[0] if moves else ''}",
              flush=True)
        assert "control plane over mutual TLS" in gm_log and env.get("ILLM_TLS_ARGS"), gm_log[:2000]
        print("(a) the control plane ran over mutual TLS (certificates of deploy/make-certs.sh)", flush=True)

        # (b) A completion from the front end, over HTTP through the bridge.
        if with_frontend:
            health = run(["ip", "netns", "exec", env["ILLM_NETNS_CLIENT"], "curl", "-s", "--noproxy", "*", "-o",
                          "/dev/null", "-w", "%{http_code}", env["ILLM_URL"] + "/health"], check=False).stdout
            assert health == "200", f"/health from the client namespace: {health!r}"
            status, body = timed("(b) completion from the front end", timings, post_completion, env["ILLM_URL"], {
                "model": "stories15M", "prompt": SHORT_PROMPT, "max_tokens": SHORT_TOKENS, "temperature": 0})
            assert status == 200, (status, body)
            text = body["choices"][0]["text"]
            print(f"(b) {text!r}", flush=True)
            assert text and text == short_reference["text"], (text, short_reference["text"])
        else:
            print("(b) skipped: illm serve has no --gmanager yet", flush=True)

        # (c) SIGTERM: the script stops everything (front end, instances draining, gManager) and the network.
        rc = timed("(c) stopping", timings, cluster.stop, STOP_S)
        assert rc == 0, rc
        left = [p for p in pids if alive(p)] + illm_processes_with(subnet + ".")
        assert not left, f"processes still running: {left}"
        assert not namespaces_with(prefix), namespaces_with(prefix)
        assert not links_with(prefix), links_with(prefix)
        print("(c) every process gone; no namespace or link with prefix", prefix, flush=True)
        ok = True
    except SkipTest as e:
        ok = True
        print(f"skipped: {e}")
        sys.exit(SKIP)
    finally:
        if cluster is not None and cluster.process.poll() is None:
            cluster.stop(STOP_S)
        remove_leftovers(prefix)
        if not ok:
            if cluster is not None:
                sys.stderr.write(f"---- deploy/cluster-netns.sh output:\n{cluster.output()[-20000:]}\n")
            logs = os.path.join(work, "logs")
            for name in sorted(os.listdir(logs)) if os.path.isdir(logs) else []:
                if not os.path.isfile(os.path.join(logs, name)):
                    continue
                with open(os.path.join(logs, name), errors="replace") as f:
                    sys.stderr.write(f"---- {name}:\n{f.read()[-6000:]}\n")
        shutil.rmtree(work, ignore_errors=True)
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    print("ok")


if __name__ == "__main__":
    main()
