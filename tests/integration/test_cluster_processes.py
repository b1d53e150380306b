"""The cluster as processes: `illm gmanager` on a free loopback port and two `illm instance --join` processes
(small pools, UCX over tcp on lo). Both join (the gManager logs it); a third with a taken id is refused, and so is
one whose pool would hold KV of another type;
one is SIGKILLed and the gManager sees
it down over the network (CAF's down message when the link breaks) and reports the requests it owned; the
other is SIGTERMed and drains and leaves. A third joins, the gManager is stopped with SIGTERM: that instance
notices, serves on, and joins the gManager started again at the same address, then drains and leaves it.
Every process started here is gone at the end.
Only generous upper bounds on the waits: no timing assertions.

Usage: test_cluster_processes.py ILLM [SOURCE_DIR]"""

import json
import os
import re
import signal
import sys
import tempfile
import time

from common import EXIT_S, JOIN_S, ProcGroup, SkipTest, free_port, wait_until

DOWN_S = 60


def main():
    illm = sys.argv[1]
    port = free_port()
    procs = ProcGroup(illm)

    start = procs.start

    def instance(i, *more):
        return start(f"instance{i}", "instance", "--join", f"127.0.0.1:{port}", "--id", str(i),
                     "--kv-blocks-per-instance", "16", "--threads", "1", "--heartbeat-ms", "50",
                     "--ucx-tls", "tcp", "--ucx-net-devices", "lo", *more)

    with procs.running():
        gm = start("gmanager", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm.has(r"listening on 127\.0\.0\.1:%d" % port) or gm.process.poll() is not None, 60,
                   "the gManager to listen")
        assert gm.process.poll() is None, f"illm gmanager exited with {gm.process.returncode}"

        a, b = instance(1), instance(2)

        def joined_both():
            for p in (a, b):
                if p.process.poll() is not None:
                    if p.has(r"built without UCX"):
                        raise SkipTest("illm was built without UCX")
                    raise AssertionError(f"{p.name} exited with {p.process.returncode} before joining")
            return gm.has(r"instance 1 joined") and gm.has(r"instance 2 joined")

        wait_until(joined_both, JOIN_S,
                   "both instances to join the gManager")
        wait_until(lambda: a.has(r"instance 1: joined") and b.has(r"instance 2: joined"), JOIN_S,
                   "both instances to see themselves in the gManager's view")
        print("both instances joined", flush=True)

        # A second instance with a taken id is refused before it joins; the first one stays in the cluster.
        twin = instance(2)
        assert twin.wait_exit(JOIN_S) == 2, (twin.process.returncode, twin.output())
        assert twin.has(r"instance id 2 is already in the cluster"), twin.output()
        assert not gm.has(r"instance 2 (down|left)"), gm.output()
        print("an instance with a taken id is refused: " + twin.output().strip().splitlines()[-1], flush=True)
        # An instance whose pool would hold KV of another type (f16 blocks among f32 ones) is refused, by name.
        other = instance(3, "--kv-type", "f16")
        assert other.wait_exit(JOIN_S) == 2, (other.process.returncode, other.output())
        assert other.has(r"its pool would hold KV of type f16, not f32"), other.output()
        assert not gm.has(r"instance 3 joined"), gm.output()
        print("an instance of another KV type is refused: " + other.output().strip().splitlines()[-1], flush=True)

        # SIGKILL: no goodbye; the gManager learns of it from CAF's down message over the network.
        killed_at = time.monotonic()
        a.process.send_signal(signal.SIGKILL)
        wait_until(lambda: gm.has(r"instance 1 down"), DOWN_S, "the gManager to report instance 1 down")
        print(f"instance 1 SIGKILLed: the gManager reported it down after {time.monotonic() - killed_at:.3f} s",
              flush=True)
        down = re.search(r"^.*instance 1 down.*$", gm.output(), re.M).group(0)
        assert "requests it owned" in down, down  # its requests are accounted for, not silently dropped
        print(f"  {down}", flush=True)
        assert a.wait_exit(EXIT_S) == -signal.SIGKILL
        # The other instance's data plane notices too: its UCX endpoint to the dead peer fails.
        wait_until(lambda: b.has(r"data plane peer 1 failed"), DOWN_S, "instance 2's data plane to report peer 1 failed")
        print(f"  instance 2's data plane reported peer 1 failed after {time.monotonic() - killed_at:.3f} s: "
              + re.search(r"^.*data plane peer 1 failed.*$", b.output(), re.M).group(0), flush=True)

        # SIGTERM: drain, leave, exit 0.
        b.process.send_signal(signal.SIGTERM)
        wait_until(lambda: gm.has(r"instance 2 left"), DOWN_S, "the gManager to report instance 2 left")
        assert b.wait_exit(EXIT_S) == 0, b.output()
        assert gm.has(r"instance 2 draining"), gm.output()
        assert not gm.has(r"instance 2 down"), gm.output()
        print("instance 2 SIGTERMed: drained, left and exited 0", flush=True)

        # A configuration file: an unknown key is refused by name; a good one joins (flags override it).
        config = os.path.join(tempfile.mkdtemp(prefix="illm-config-"), "instance.json")
        with open(config, "w") as f:
            json.dump({"join": f"127.0.0.1:{port}", "id": 9, "kv-blocks-per-instance": 16, "bogus": 1}, f)
        bad = start("bad-config", "instance", "--config", config)
        assert bad.wait_exit(EXIT_S) == 2 and bad.has(r'"bogus" is no option of illm instance'), bad.output()
        with open(config, "w") as f:
            json.dump({"join": f"127.0.0.1:{port}", "id": 9, "kv-blocks-per-instance": 16, "threads": 1,
                       "ucx-tls": "tcp", "ucx-net-devices": "lo"}, f)

        # The gManager goes away: the instance serves on from its last view and joins the gManager that starts
        # again at the same address (a new epoch), which rebuilds membership from its join.
        c = start("instance3", "instance", "--config", config, "--id", "3")
        wait_until(lambda: gm.has(r"instance 3 joined") and c.has(r"instance 3: joined"), JOIN_S,
                   "instance 3 to join")
        gm.process.send_signal(signal.SIGTERM)
        assert gm.wait_exit(EXIT_S) == 0, gm.output()
        wait_until(lambda: c.has(r"the gManager is gone"), DOWN_S, "instance 3 to notice the gManager is gone")
        assert not c.gone(), c.output()
        print("the gManager stopped (SIGTERM, exit 0): instance 3 serves on: "
              + re.search(r"^.*the gManager is gone.*$", c.output(), re.M).group(0), flush=True)
        gm2 = start("gmanager2", "gmanager", "--listen", f"127.0.0.1:{port}", "--heartbeat-timeout-ms", "2000")
        wait_until(lambda: gm2.has(r"instance 3 joined") and c.has(r"reached the gManager at .* joining it"), JOIN_S,
                   "instance 3 to join the restarted gManager")
        print("the gManager restarted: instance 3 joined it again", flush=True)
        c.process.send_signal(signal.SIGTERM)
        assert c.wait_exit(EXIT_S) == 0, c.output()
        assert gm2.has(r"instance 3 left"), gm2.output()
        procs.stop_last(gm2, EXIT_S)


if __name__ == "__main__":
    main()
