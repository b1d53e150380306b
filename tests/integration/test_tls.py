"""Mutual TLS on the control plane (docs/security.md): certificates from deploy/make-certs.sh for a gManager, two
instances and a front end, and a second CA's for a stranger. Bad TLS files are refused at start with the file
and the reason, and without TLS a process will not listen beyond loopback unless --insecure. `illm gmanager` and
two `illm instance --join` processes (pools of 64 blocks, UCX over tcp on lo) run with TLS; a prompt of more than
one pool goes to the cluster with `illm generate --gmanager` over TLS: its blocks move between the members, and
its ids are those of one instance. A stranger (an instance with the other CA's certificate, one without TLS)
cannot join: the gManager never lists it, its own illm:cluster_peers_refused_total counts the refusals, and it
exits saying it reached no gManager; so no view names it and no block moves to it. A client with the
stranger's certificate cannot read the view (`illm generate --gmanager` fails), and `illm serve --gmanager`
with the front end's certificate counts both members at /health. Every process started here is gone at the end.

TLS needs no UCX: with --no-ucx (a build without it, which has no instance processes) the same checks run on what
needs no data plane: the refusals at start, the gManager over TLS, a front end with the cluster's certificate
that reaches it and clients with the stranger's certificate, or none, that cannot.

Usage: test_tls.py ILLM [SOURCE_DIR] [--no-ucx]"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

from common import (EXIT_S, JOIN_S, RUN_S, ProcGroup, free_port, make_prompt, metric, planes_connected, request,
                    run_json, wait_until)

MAX_TOKENS = 12


def make_certs(source, directory, *names):
    done = subprocess.run(["bash", os.path.join(source, "deploy", "make-certs.sh"), directory, *names],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert done.returncode == 0, done.stdout


def tls(directory, name):
    return ["--tls-ca", f"{directory}/ca.pem", "--tls-cert", f"{directory}/{name}.pem", "--tls-key",
            f"{directory}/{name}.key"]


def refused_at_start(illm, *args, expect):
    """`illm ARGS` exits with status 2 before it starts, saying `expect`."""
    done = subprocess.run([illm, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert done.returncode == 2 and re.search(expect, done.stdout), (args, done.returncode, done.stdout)
    print(f"  refused at start: {done.stdout.strip().splitlines()[-1]}", flush=True)


def client_reaches(illm, at, certs, prompt):
    """What `illm generate --gmanager AT` with `certs` says on a cluster without instances: it reaches the gManager
    (and is told no instance takes requests), or it cannot."""
    done = subprocess.run([illm, "generate", "--prompt-file", prompt, "--max-tokens", "2", "--gmanager", at, *certs],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=RUN_S)
    assert done.returncode != 0, done.stdout
    if re.search(r"no instance that takes requests", done.stdout):
        return True
    assert re.search(r"cannot reach a gManager", done.stdout), done.stdout
    return False


def without_ucx(illm, certs, stranger, port, work):
    """What TLS alone does: the gManager over TLS, and clients with and without the cluster's certificate."""
    prompt = f"{work}/prompt.txt"
    with open(prompt, "w") as f:
        f.write("Once upon a time")
    procs = ProcGroup(illm)
    procs.files.append(prompt)
    at = f"127.0.0.1:{port}"
    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", at, *tls(certs, "gmanager"))
        wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
        assert gm.has(r"control plane over mutual TLS"), gm.output()
        assert client_reaches(illm, at, tls(certs, "serve"), prompt), "the client did not reach the gManager"
        print("illm generate --gmanager with the cluster's certificate reached the gManager over TLS (and was told "
              "no instance takes requests)", flush=True)
        assert not client_reaches(illm, at, tls(stranger, "instance9"), prompt), "a stranger reached it"
        assert not client_reaches(illm, at, [], prompt), "a client without TLS reached it"
        print("  one with the stranger's certificate, and one without TLS, could not reach it", flush=True)
        procs.stop_last(gm, EXIT_S)


def main():
    illm, source = sys.argv[1], sys.argv[2]
    no_ucx = "--no-ucx" in sys.argv[3:]
    work = tempfile.mkdtemp(prefix="illm-tls-")
    certs, stranger = f"{work}/certs", f"{work}/stranger"
    make_certs(source, certs, "gmanager", "instance0", "instance1", "serve")
    make_certs(source, stranger, "instance9")
    print("certificates made (deploy/make-certs.sh): a cluster CA and a stranger's CA", flush=True)

    port = free_port()
    refused_at_start(illm, "gmanager", "--listen", f"0.0.0.0:{port}", expect=r"listens only on loopback")
    refused_at_start(illm, "gmanager", "--listen", f"127.0.0.1:{port}", "--tls-ca", f"{certs}/ca.pem",
                     expect=r"all three of --tls-ca, --tls-cert and --tls-key")
    refused_at_start(illm, "gmanager", "--listen", f"127.0.0.1:{port}", "--tls-ca", f"{certs}/ca.pem", "--tls-cert",
                     f"{certs}/gmanager.pem", "--tls-key", f"{certs}/instance0.key",
                     expect=r"--tls-key .*instance0\.key: not the key of the certificate")
    refused_at_start(illm, "gmanager", "--listen", f"127.0.0.1:{port}", "--tls-ca", f"{certs}/ca.pem", "--tls-cert",
                     f"{stranger}/instance9.pem", "--tls-key", f"{stranger}/instance9.key",
                     expect=r"--tls-cert .*instance9\.pem: not accepted by the CA")
    refused_at_start(illm, "gmanager", "--listen", f"127.0.0.1:{port}", "--tls-ca", f"{work}/missing.pem",
                     "--tls-cert", f"{certs}/gmanager.pem", "--tls-key", f"{certs}/gmanager.key",
                     expect=r"--tls-ca .*missing\.pem: cannot read it")
    if no_ucx:
        without_ucx(illm, certs, stranger, port, work)
        shutil.rmtree(work, ignore_errors=True)
        print("ok")
        return

    prompt = f"{work}/prompt.txt"
    with open(prompt, "w") as f:
        f.write(make_prompt(1250))  # about 1500 tokens: more than one pool of 64 blocks
    gen = ["generate", "--prompt-file", prompt, "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--json"]
    reference, _ = run_json([illm, *gen, "--instances", "1", "--kv-blocks-per-instance", "1024"], RUN_S)

    procs = ProcGroup(illm)
    procs.files.append(prompt)
    at = f"127.0.0.1:{port}"
    with procs.running():
        gm = procs.start("gmanager", "gmanager", "--listen", at, "--heartbeat-timeout-ms", "2000",
                         *tls(certs, "gmanager"))
        wait_until(lambda: gm.has(r"listening on") or gm.gone(), 60, "the gManager to listen")
        assert gm.has(r"control plane over mutual TLS"), gm.output()
        insts = {i: procs.start(f"instance{i}", "instance", "--join", at, "--id", str(i), "--kv-blocks-per-instance",
                                "64", "--threads", "1", "--heartbeat-ms", "50", "--ucx-tls", "tcp",
                                "--ucx-net-devices", "lo", *tls(certs, f"instance{i}"))
                 for i in (0, 1)}
        wait_until(lambda: planes_connected(insts), JOIN_S, "two instances to join over TLS and connect their planes")
        print("gManager and 2 instances over mutual TLS; their data planes connected", flush=True)

        result, _ = run_json([illm, *gen, "--gmanager", at, *tls(certs, "serve")], RUN_S)
        assert result["token_ids"] == reference["token_ids"], (result["token_ids"], reference["token_ids"])
        moved = [m for m in result["moves"] if m["blocks"] > 0]
        assert moved and all(m["destination"] in (0, 1) for m in moved), result["moves"]
        print(f"a request of {len(result['prompt_token_ids'])} tokens over TLS: {sum(m['blocks'] for m in moved)} "
              f"blocks moved between the members; the ids of one instance", flush=True)

        # Strangers: the other CA's certificate, and no TLS at all.
        for name, args in (("stranger", tls(stranger, "instance9")), ("plain", [])):
            p = procs.start(name, "instance", "--join", at, "--id", "9", "--kv-blocks-per-instance", "64", "--threads",
                            "1", "--ucx-tls", "tcp", "--ucx-net-devices", "lo", "--metrics-listen", "127.0.0.1:0",
                            *args)

            def refusals():
                found = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", p.output())
                if not found or p.gone():
                    return 0
                status, text = request(int(found[1]), "GET", "/metrics", timeout=10)
                return metric(text, "illm:cluster_peers_refused_total") if status == 200 else 0

            wait_until(lambda: refusals() >= 1 or p.gone(), JOIN_S, f"the {name} instance to be refused")
            count = refusals()
            assert p.wait_exit(EXIT_S) != 0 and p.has(r"cannot reach a gManager"), p.output()
            assert not gm.has(r"instance 9 joined"), gm.output()
            print(f"  the {name} instance could not join: refused {count:.0f} time(s) "
                  f"(illm:cluster_peers_refused_total), exited; the gManager never listed it", flush=True)
            assert count >= 1, p.output()

        snoop = subprocess.run([illm, *gen, "--gmanager", at, *tls(stranger, "instance9")], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=RUN_S)
        assert snoop.returncode != 0 and re.search(r"cannot reach a gManager", snoop.stdout), snoop.stdout
        print("  a client with the stranger's certificate could not read the view", flush=True)

        fe_port = free_port()
        fe = procs.start("serve", "serve", "--gmanager", at, "--host", "127.0.0.1", "--port", str(fe_port),
                         *tls(certs, "serve"))
        wait_until(lambda: request(fe_port, "GET", "/health", timeout=5) == (200, {"status": "ok", "instances": 2}),
                   120, "the front end to count two instances over TLS")
        print("illm serve --gmanager over TLS: /health counts both instances", flush=True)
        for p in (fe, *insts.values()):
            p.process.send_signal(signal.SIGTERM)
            assert p.wait_exit(EXIT_S) == 0, p.output()
        procs.stop_last(gm, EXIT_S)
    shutil.rmtree(work, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
