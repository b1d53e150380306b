"""`illm bench migration` (Fig. 12) runs its three phases against a peer process over UCX on lo: every
phase decodes, the 16- and 32-token phases move exactly steps x blocks x block bytes, the peer's arena
matches the bytes sent, and the peer is gone afterwards, also when it cannot start. No timing is
asserted."""

import json
import os
import subprocess
import sys
import uuid

ILLM = sys.argv[1]
STEPS, ROUNDS = 3, 2
SKIP = 77  # a build without the UCX plane


def peers_with(marker):
    """Pids of live processes whose command line contains `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


def check_run():
    result = subprocess.run([ILLM, "bench", "migration", "--steps", str(STEPS), "--rounds", str(ROUNDS), "--json"],
                            capture_output=True, text=True, timeout=600)
    if result.returncode == SKIP:
        print(result.stderr)
        sys.exit(SKIP)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    print(json.dumps(report))
    block = report["block_bytes"]
    assert block >= 2 << 20, block
    phases = report["phases"]
    assert [p["tokens_per_step"] for p in phases] == [0, 16, 32], phases
    for p, blocks in zip(phases, (0, 1, 2)):
        assert p["blocks_per_step"] == blocks, p
        assert p["steps"] == STEPS * ROUNDS, p
        assert p["tokens"] == p["steps"] * report["batch"], p
        assert p["tokens_per_second"] > 0 and len(p["round_tokens_per_second"]) == ROUNDS, p
        assert p["bytes_moved"] == p["steps"] * blocks * block, (p, block)
        assert p["bytes_per_step"] == blocks * block, p
    # Every put (warm-up included) was counted by the plane, and the peer's arena matched each time.
    assert report["plane_put_bytes"] == report["bytes_moved"], report
    assert report["bytes_moved"] >= sum(p["bytes_moved"] for p in phases), report
    checksum = report["checksum"]
    assert checksum["match"] and checksum["mismatches"] == 0, checksum
    assert checksum["sent"] == checksum["received"], checksum
    idle = report["idle_link"]
    assert idle["runs"] > 0 and idle["bytes"] % block == 0 and idle["bytes_per_second"] > 0, idle
    # One check per moving warm-up (2), per transfer of the link alone, then per moving phase of each round.
    assert checksum["checks"] == 2 + idle["runs"] + 2 * ROUNDS, checksum
    assert checksum["bytes"] == report["bytes_moved"], checksum
    peer = report["peer"]
    assert peer["exit_status"] == 0, peer
    assert not os.path.exists(f"/proc/{peer['pid']}") or peer["pid"] not in peers_with("--peer-fd"), peer


def check_peer_that_cannot_start():
    marker = f"no-such-device-{uuid.uuid4().hex[:8]}"
    result = subprocess.run([ILLM, "bench", "migration", "--steps", "1", "--rounds", "1", "--json",
                             "--net-devices", marker], capture_output=True, text=True, timeout=300)
    print(result.stderr)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "peer" in result.stderr and result.stdout == "", result.stdout + result.stderr
    assert peers_with(marker) == [], "the peer outlived its parent"


def main():
    check_run()
    check_peer_that_cannot_start()
    print("test_bench_migration: all checks passed")


if __name__ == "__main__":
    main()
