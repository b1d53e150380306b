"""The chaos suite as CI runs it: `illm chaos --seeds N --json` with N the number of scenarios, one fixed seed of
each on an embedded cluster of 3 instances (kill a holder, an owner, a room holder mid prefill, the gManager;
drain an instance; partition one; one joins; an instance dies mid move or mid room at a crash point, the
gManager after its orders; lose, repeat and delay control and data messages; with replicas on, a holder dies once
the long request's blocks are copied, and the copies are promoted: nothing is computed again, where the same death
without replicas computes the request's KV again; with replicas on, the long request's owner dies, and a new owner
takes the blocks that survived over). The books must balance: every accepted request
answered exactly once, with the fault-free greedy tokens, none failed that the surviving pools could hold,
no block leaked. A failing seed is printed with the command that replays it. `--list`, a bad scenario and
--seed with --seeds are checked too.

Usage: test_chaos.py ILLM [SOURCE_DIR]"""

import json
import subprocess
import sys

FIELDS = ["accepted", "completed", "failed", "unjustified_failed", "lost", "duplicated", "mismatched", "leaked_blocks",
          "faults_injected"]


def main():
    illm = sys.argv[1]
    listed = subprocess.run([illm, "chaos", "--list"], capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line.strip()]
    assert {"kill-holder", "kill-owner", "kill-gmanager", "kill-mid-room", "drain", "partition", "join",
            "crash-mid-move", "crash-mid-room", "gmanager-orders", "replica-holder", "replica-owner"} <= set(names), names
    seeds = len(names)  # one per scenario

    bad = subprocess.run([illm, "chaos", "--scenario", "nope"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "no such scenario" in bad.stderr, bad.stderr
    both = subprocess.run([illm, "chaos", "--seed", "3", "--seeds", "2"], capture_output=True, text=True, timeout=60)
    assert both.returncode != 0, both.stdout

    done = subprocess.run([illm, "chaos", "--seeds", str(seeds), "--json"], capture_output=True, text=True,
                          timeout=900)
    sys.stderr.write(done.stderr[-6000:])
    assert done.returncode == 0, f"exit {done.returncode}: the books do not balance (FAILED lines above)"
    books = json.loads(done.stdout.strip().splitlines()[-1])
    total = books["total"]
    for field in FIELDS:
        assert field in total, (field, total)
    assert set(books["scenarios"]) == set(names), books["scenarios"].keys()
    for name, s in books["scenarios"].items():
        assert s["runs"] == 1 and s["accepted"] == s["completed"] + s["failed"], (name, s)
        for zero in ["lost", "duplicated", "mismatched", "leaked_blocks", "unjustified_failed"]:
            assert s[zero] == 0, (name, zero, s)
        assert s["faults_injected"] > 0 or name == "lost-answers", (name, s)  # a 5% chance may draw none
    replica, recompute = books["scenarios"]["replica-holder"], books["scenarios"]["kill-holder"]
    assert replica["recovered_by_replica"] == 1 and replica["positions_recomputed"] == 0, replica
    assert recompute["recovered_by_replica"] == 0 and recompute["positions_recomputed"] > 0, recompute
    # The owner's death with replicas: its new owner takes the long request's blocks over (copies of the owner's
    # own, the holders' primaries) and computes only the rest; the long prompt alone is 1.2 pools of 1024 tokens,
    # more than the short requests that went on from scratch and the long one's tail together.
    owner = books["scenarios"]["replica-owner"]
    assert owner["recovered_by_replica"] >= 1 and owner["positions_recomputed"] < 1.2 * 1024, owner
    print(f"{total['runs']} chaos runs in {books['seconds']:.1f} s: {total['accepted']} requests accepted, "
          f"{total['completed']} completed, {total['failed']} failed with a clear error, {total['faults_injected']} "
          f"faults injected; lost, duplicated, mismatched, leaked and unjustified failures: 0", flush=True)
    print(f"a holder's death: {recompute['positions_recomputed']} positions computed again without replicas, "
          f"{replica['positions_recomputed']} with them ({replica['recovered_by_replica']} request recovered from "
          f"its replicas)", flush=True)
    print(f"an owner's death with replicas: {owner['positions_recomputed']} positions computed again "
          f"({owner['recovered_by_replica']} request(s) taken over with the blocks that survived)", flush=True)
    print("ok")


if __name__ == "__main__":
    main()
