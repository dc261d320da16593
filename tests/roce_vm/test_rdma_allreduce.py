# SPDX-License-Identifier: Apache-2.0
"""RDMA AllReduce in server-to-server mode on Linux's own RDMA stack: ina-rdma-root in one qemu
VM and ina-rdma-worker in two others, over rdma_rxe (Soft-RoCE) joined by a Linux bridge, or,
given the inaswitch executable, by inaswitch as their L2 switch (lab.py).

  0. A worker with no root listening fails at once with a message.
  1. A worker whose job differs from the root's (--world 3 against --world 2) is refused with
     the reason, and the root carries on.
  2. int32 sum of 1 MiB per worker from host-generated random files: both workers' results are
     bit-exact against the sum the host computes independently (sha256 of the whole tensor).
  3. fp32 sum of 1 MiB per worker from generated data: each worker verifies against its own
     reference within the summation-order bound; both received the same bytes.
  3b. A worker far behind its NIC (rank 2 with --poll-after-root-ends: every WRITE posted,
     then no completion taken until the root ended the connection, its rxe having executed and
     acknowledged every result meanwhile): it takes every result from its CQ, more than one
     poll's worth, and verifies (it failed with "the root ended the connection" before).
  4. A root whose second worker never comes stops at its deadline with a message, and the
     worker waiting on it ends as soon as the root is gone.
  The root's JSON must account for every contribution and result WRITE of both AllReduces;
  through inaswitch, the switch must have bridged at least every one of those WRITEs.

usage: test_rdma_allreduce.py build/src/worker/rdma/ina-rdma-worker \
           build/src/worker/rdma/ina-rdma-root [build/src/app/inaswitch]
"""

import array
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import Lab, run_test, TestFailure, check, log  # noqa: E402

ELEMENTS = 262144  # 1 MiB of int32 / fp32 per worker
WORLD = 2
PORT = 7471
TIMEOUT_S = 120
LAG_ELEMENTS = 16384  # 64 chunks of 1 KiB fp32: one window of 64


def json_line(out: str, key: str) -> dict:
    """The last JSON object in out that has `key`."""
    for line in reversed(out.splitlines()):
        line = line.strip()
        if line.startswith("{") and f'"{key}"' in line:
            return json.loads(line)
    raise TestFailure(f"no JSON line with {key!r} in:\n{out[-3000:]}")


def int32_inputs(d: str, world: int = WORLD, seed: int = 20261124,
                 elements: int = ELEMENTS) -> tuple[list[str], str]:
    """Random int32 tensors for ranks 1..world and the sha256 of their wrapping sum."""
    rng = random.Random(seed)
    paths, total = [], array.array("I", bytes(4 * elements))
    for rank in range(1, world + 1):
        data = rng.randbytes(4 * elements)
        path = os.path.join(d, f"int32-{seed}-rank{rank}.bin")
        with open(path, "wb") as f:
            f.write(data)
        paths.append(path)
        a = array.array("I", data)
        if sys.byteorder != "little":
            a.byteswap()
        total = array.array("I", ((x + y) & 0xFFFFFFFF for x, y in zip(total, a)))
    if sys.byteorder != "little":
        total.byteswap()
    return paths, hashlib.sha256(total.tobytes()).hexdigest()


def stripped(exe: str, d: str) -> str:
    """A copy without debug sections: the guests unpack every byte of the extra archive."""
    out = os.path.join(d, os.path.basename(exe))
    subprocess.run(["objcopy", "--strip-debug", exe, out], check=True)
    return out


def worker_cmd(root_vm, rank: int, args: str, world: int = WORLD, job: int = 7,
               timeout_s: int = TIMEOUT_S) -> str:
    return (f"ina-rdma-worker --root {root_vm.ip} --port {PORT} --job {job} --rank {rank} "
            f"--world {world} --timeout-ms {timeout_s * 1000} {args}")


def root_cmd(root_vm, args: str) -> str:
    return f"ina-rdma-root --bind {root_vm.ip} --port {PORT} --world {WORLD} {args}"


def allreduce(root_vm, workers, worker_args: list[str], tag: str,
              before_rank=None, order: list[int] | None = None,
              while_running=None) -> list[dict]:
    """Runs one AllReduce on the listening root; returns the workers' JSON results (by rank).
    The ranks start in `order` (default 1..world); `before_rank(rank)`, when given, runs before
    each rank after the first starts (it waits for an observable event); `while_running()`, once
    every rank started, before their ends are awaited."""
    order = order or list(range(1, len(workers) + 1))
    started = {}
    for n, rank in enumerate(order):
        if before_rank is not None and n > 0:
            before_rank(rank)
        started[rank] = workers[rank - 1].start(worker_cmd(root_vm, rank, worker_args[rank - 1]))
    if while_running is not None:
        while_running()
    jobs = [started[rank] for rank in sorted(started)]
    results = []
    for rank, job in enumerate(jobs, start=1):
        rc, out = job.wait(TIMEOUT_S + 30)
        log(f"{tag} rank {rank}: {out.strip()}")
        check(rc == 0, f"{tag}: rank {rank} completed and verified (exit {rc})")
        results.append(json_line(out, "ok"))
    return results


def test(worker_exe: str, root_exe: str, switch_exe: str | None = None) -> None:
    scratch = tempfile.mkdtemp(prefix="rdma-allreduce-")
    try:
        inputs, int32_sha = int32_inputs(scratch)
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for p in inputs]
        fabric = "inaswitch" if switch_exe else "bridge"
        with Lab(1 + WORLD, fabric=fabric, switch_exe=switch_exe, extra_files=extra) as lab:
            root_vm, workers = lab.vms[0], lab.vms[1:]
            # The first rdma_cm REQ right after boot sometimes waits for neighbour resolution
            # and a CM retry (seconds under TCG): resolve the neighbours first.
            for vm in workers:
                vm.run(f"ping -c 1 -W 10 {root_vm.ip}", timeout=30, check=True)
            # 0. nobody listening yet: the CM's reject ends the worker at once with a message.
            rc, out = workers[0].run(worker_cmd(root_vm, 1, "", timeout_s=30), timeout=60)
            log(f"worker without a root: {out.strip()}")
            check(rc == 1 and "is anything listening there?" in out,
                  "a worker without a listening root fails with a message (exit 1)")
            root = root_vm.start(root_cmd(root_vm, f"--rounds 3 --timeout-ms {TIMEOUT_S * 1000}"))
            # A guest job's output arrives when it ends: ask the guest's RDMA stack instead.
            root_vm.wait_rdma_cm_listen(timeout=60)
            check(not root.done(), "ina-rdma-root listens with rdma_cm")

            # 1. refused: a different world size.
            rc, out = workers[0].run(worker_cmd(root_vm, 1, "", world=3, timeout_s=30), timeout=60)
            log(f"mismatched worker: {out.strip()}")
            check(rc == 1 and "refused by the peer: parameters differ from the root's job" in out,
                  "a worker with another job's parameters is refused with the reason (exit 1)")

            # 2. int32, bit-exact against the host's own sum.
            t0 = time.monotonic()
            res = allreduce(root_vm, workers,
                            [f"--type int32 --input /root/{os.path.basename(p)} "
                             f"--output /tmp/int32.out" for p in inputs], "int32")
            int32_wall = time.monotonic() - t0
            for vm in workers:
                rc, out = vm.run("sha256sum /tmp/int32.out", check=True)
                check(out.split()[0] == int32_sha,
                      f"{vm.name}: int32 result bit-exact (sha256 {int32_sha[:16]}...)")
            check(all(r["chunks"] == ELEMENTS * 4 // 1024 and r["results"] == r["chunks"]
                      for r in res), "int32: one result per chunk on every worker")

            # 3. fp32, generated data, verified by each worker.
            t0 = time.monotonic()
            res_fp = allreduce(root_vm, workers,
                               [f"--type fp32 --elements {ELEMENTS} --seed 11 "
                                f"--output /tmp/fp32.out"] * WORLD, "fp32")
            fp32_wall = time.monotonic() - t0
            check(all(r["verified"] and r["mismatches"] == 0 for r in res_fp),
                  "fp32: every worker verified its result")
            sums = {vm.run("sha256sum /tmp/fp32.out", check=True)[1].split()[0] for vm in workers}
            check(len(sums) == 1, "fp32: both workers received the same result bytes")

            # 3b. Rank 2's process far behind its NIC: the whole tensor (64 chunks) in one
            # window, 128 completions waiting when the root's DISCONNECTED comes.
            lag = allreduce(root_vm, workers,
                            [f"--type fp32 --elements {LAG_ELEMENTS} --window 64 --seed 13 "
                             f"--output /tmp/lag.out",
                             f"--type fp32 --elements {LAG_ELEMENTS} --window 64 --seed 13 "
                             f"--output /tmp/lag.out --poll-after-root-ends"], "lagging")
            check(all(r["verified"] and r["results"] == r["chunks"] == LAG_ELEMENTS * 4 // 1024
                      for r in lag),
                  "lagging: the worker behind its NIC took every result after the root ended, "
                  "and both verified")

            rc, out = root.wait(60)
            log(f"root: {out.strip()}")
            check(rc == 0, f"ina-rdma-root served the three AllReduces (exit {rc})")
            rounds = [json.loads(line) for line in out.splitlines()
                      if line.startswith("{") and '"round"' in line]
            check(len(rounds) == 3, "the root reports three rounds")
            for r, typ in zip(rounds, ("int32", "fp32", "fp32")):
                n = r["chunks"] * WORLD
                check(r["ok"] and r["type"] == typ and r["contributions"] == n and
                      r["contribution_count"] == n and r["results_written"] == n,
                      f"root round {r['round']} ({typ}): {n} contributions reduced and "
                      f"{n} result WRITEs completed")
            check(rounds[0]["rejected"] == 1, "the root counted the refused worker")
            # 4. Nobody hangs when the other side goes: a root whose second worker never comes
            # gives up at its deadline, and the worker waiting on it ends as soon as it is gone.
            root = root_vm.start(root_cmd(root_vm, "--timeout-ms 10000"))
            root_vm.wait_rdma_cm_listen(timeout=60)
            t0 = time.monotonic()
            rc, out = workers[0].run(worker_cmd(root_vm, 1, "--type int32 --elements 65536",
                                                job=8, timeout_s=200), timeout=230)
            waited = time.monotonic() - t0
            log(f"worker of a root that gave up ({waited:.1f}s): {out.strip()}")
            check(rc == 1 and "the root ended the connection" in out and waited < 120,
                  "the worker ends with a message when its root goes, long before its own "
                  "200 s deadline")
            rc, out = root.wait(60)
            log(f"root without its second worker: {out.strip()}")
            check(rc == 1 and "timed out: 1 of 2 workers connected" in out,
                  "the root stops at its deadline and says how far it got (exit 1)")
            if lab.switch:
                writes = sum(r["contributions"] + r["results_written"] for r in rounds)
                bridged = lab.switch.metrics().get("inaswitch_bridged_packets_total")
                check(bridged >= writes, f"inaswitch bridged {bridged:.0f} frames, at least the "
                      f"{writes} RoCE WRITEs")
            log(f"timings ({fabric}): boot {lab.timings.get('boot_s', 0):.1f}s; "
                f"int32 1 MiB x {WORLD}: "
                f"{int32_wall:.2f}s wall, root {rounds[0]['seconds']:.2f}s; fp32: "
                f"{fp32_wall:.2f}s wall, root {rounds[1]['seconds']:.2f}s; worker goodput "
                f"{max(r['gbit_per_s'] for r in res) * 1000:.1f} / "
                f"{max(r['gbit_per_s'] for r in res_fp) * 1000:.1f} Mbit/s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-rdma-allreduce", __doc__, test, (2, 3)))
