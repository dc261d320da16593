# SPDX-License-Identifier: Apache-2.0
"""Server-to-switch over RDMA CM against Linux's own RDMA stack: the lab of
test_switch_allreduce.py (three qemu VMs with rdma_rxe, inaswitch on the host routing between
them), but each worker connects with `ina-rdma-worker --switch-cm <its gateway>` (rdma_connect to
the switch's address, port 7471; docs/rdma.md "RDMA CM on the switch"), not through the API.

  0. A connect to a job the switch does not have is refused by the switch's CM: the worker
     prints the INAR reason (wrong_job: "parameters differ ...") and exits 1; nothing is connected.
  1. int32 sum of 1 MiB per worker, bit-exact against the host's own sum (sha256) on every
     worker; while rank 1 waits for the others, GET /api/v1/rdma/jobs/7 shows its QP (made by
     the CM through the API's own connect); at the end each worker's rdma_disconnect (DREQ ->
     the switch's DREP) tears its QP down; the switch counted the REQs, REPs, RTUs, DREQs.
     Rank 1 connects to its port's secondary address 10.177.1.1 (another subnet, reached
     through its gateway, the switch): the REQ's address is its QP's `source` (GET
     /api/v1/config), which its ACKs and results leave from (rxe takes a connected QP's
     packets only from the address it connected to: from the port's first address rank 1
     would time out); no packet reached a QP at another of the switch's addresses
     (`wrong_address`). A stall logs the switch's packets by reason and the QPs' counters
     (session 14 saw rank 1 stall in 2 of 12 hand runs; not reproduced since).
  2. The same over CM with chunks larger than the PMTU (job 11: 4096-byte chunks at the path
     MTU 1024 the REQ carries; test_switch_allreduce.py's round 5): multi-packet WRITEs both
     ways, bit-exact, exactly one contribution per chunk and rank at the switch.

usage: test_switch_allreduce_cm.py build/src/worker/rdma/ina-rdma-worker build/src/app/inaswitch
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import Lab, TestFailure, run_test, check, log, wait_until  # noqa: E402
from test_rdma_allreduce import int32_inputs, stripped  # noqa: E402
from test_switch_allreduce import (CHUNK, ELEMENTS, JOB_INT32, JOB_MULTI, MULTI_CHUNK,  # noqa: E402
                                   MULTI_WINDOW, TIMEOUT_S, WINDOW, WORLD, job_qps,
                                   multi_packet_round, wait_results)
from test_switch_allreduce import switch_config as ipv4_switch_config  # noqa: E402

# A secondary address of rank 1's switch port, on no VM's subnet.
SECONDARY = "10.177.1.1"


def switch_config(cfg: dict, lab) -> dict:
    cfg = ipv4_switch_config(cfg, lab)
    cfg["ports"][0]["ipv4"].append(f"{SECONDARY}/24")
    return cfg


def worker_cmd(vm, rank: int, job: int, args: str, timeout_s: int = TIMEOUT_S,
               chunk: int = CHUNK, window: int = WINDOW, cm: str | None = None) -> str:
    """cm: the switch address to rdma_connect() to (else the VM's gateway)."""
    return (f"ina-rdma-worker --mode server-to-switch --switch-cm {cm or vm.gw}:7471 "
            f"--job {job} --rank {rank} --world {WORLD} --ip {vm.ip} --gid-index {vm.gid_index} "
            f"--chunk-bytes {chunk} --window {window} --timeout-ms {timeout_s * 1000} {args}")


def reasons(lab) -> dict[str, float]:
    """The switch's RoCE packets by reason (inaswitch_rdma_packets_total)."""
    return lab.switch.metrics().by_label("inaswitch_rdma_packets_total", "reason")


def cm_events(lab) -> dict[str, float]:
    out = {}
    for line in lab.switch.metrics_text().splitlines():
        m = re.match(r'^inaswitch_rdma_cm_messages_total\{event="(\w+)"\} ([0-9.eE+-]+)$', line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test(worker_exe: str, switch_exe: str) -> None:
    scratch = tempfile.mkdtemp(prefix="switch-allreduce-cm-")
    try:
        inputs, int32_sha = int32_inputs(scratch, WORLD, 20261124, ELEMENTS)
        multi_inputs, multi_sha = int32_inputs(scratch, WORLD, 4098, ELEMENTS)
        extra = [stripped(worker_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for p in inputs + multi_inputs]
        with Lab(WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True, guest_api=True,
                 switch_config=switch_config, extra_files=extra) as lab:
            vms = lab.vms
            lab.reach_all()

            # 0. the switch's CM refuses an unknown job with the INAR reason.
            rc, out = vms[0].run(worker_cmd(vms[0], 1, 99, "--elements 1024", timeout_s=30),
                                 timeout=60)
            log(f"unknown job over CM: {out.strip()}")
            check(rc == 1 and "connection refused by the peer: parameters differ" in out,
                  "a CM connect to an unknown job is rejected with the reason wrong_job, which "
                  "the worker prints (exit 1)")
            check(job_qps(lab, JOB_INT32) == [], "the refused connect left no QP")

            # 1. int32, bit-exact, every rank connected by RDMA CM.
            t0 = time.monotonic()
            jobs = [vms[0].start(worker_cmd(
                vms[0], 1, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(inputs[0])} --output /tmp/int32.out",
                cm=SECONDARY))]
            qps = wait_until(lambda: job_qps(lab, JOB_INT32) or None, 60,
                             "rank 1's QP (connected by CM) in GET /api/v1/rdma/jobs/7")
            log(f"job {JOB_INT32} with rank 1 alone: {json.dumps(qps)}")
            check(len(qps) == 1 and qps[0].get("rank") == 1,
                  "the CM connect made rank 1's QP, listed by GET /api/v1/rdma/jobs/7")
            running = lab.switch.api_json("GET", "/api/v1/config")
            job7 = [j for j in running["rdma"]["jobs"] if j["id"] == JOB_INT32][0]
            check([q.get("source") for q in job7["qps"]] == [SECONDARY],
                  f"rank 1's REQ to {SECONDARY} made that address its QP's source "
                  f"({job7['qps']})")
            jobs += [vm.start(worker_cmd(
                vm, rank, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(p)} --output /tmp/int32.out"))
                for rank, (vm, p) in enumerate(zip(vms[1:], inputs[1:]), start=2)]
            try:
                res = wait_results(jobs, "int32 over CM")
            except TestFailure:
                # A rank that stalled (2 of 12 hand runs in session 14, rank 1 after 1 and 206
                # results; none in 31 since): whether its packets reached its QP.
                log(f"stalled: switch RoCE packets by reason {reasons(lab)}; QPs of job "
                    f"{JOB_INT32}: {json.dumps(job_qps(lab, JOB_INT32))}")
                raise
            wall = time.monotonic() - t0
            check(reasons(lab).get("wrong_address", 0) == 0,
                  f"no packet reached a QP at an address other than its source (rank 1's at "
                  f"{SECONDARY}): {reasons(lab)}")
            for vm in vms:
                rc, out = vm.run("sha256sum /tmp/int32.out", check=True)
                check(out.split()[0] == int32_sha,
                      f"{vm.name}: int32 result over a CM connection bit-exact")
            check(all(r[0]["chunks"] == ELEMENTS * 4 // CHUNK and r[0]["results"] == r[0]["chunks"]
                      and r[0]["disconnect_error"] == "" for r in res),
                  "one result per chunk on every worker (rank 1's from the secondary address), "
                  "and a clean rdma_disconnect")
            check(wait_until(lambda: job_qps(lab, JOB_INT32) == [] or None, 30,
                             "job 7's QPs gone after the DREQs"), "the DREQs tore the QPs down")
            ev = cm_events(lab)
            log(f"switch CM events: {json.dumps(ev)}")
            check(ev.get("reps_sent", 0) >= WORLD and ev.get("rtus", 0) == WORLD and
                  ev.get("dreqs", 0) >= WORLD and ev.get("dreps_sent", 0) >= WORLD and
                  ev.get("rejs_sent", 0) >= 1,
                  "the switch's CM counted the REPs, RTUs, DREQs/DREPs and the REJ")

            # 2. chunks larger than the PMTU over CM connections.
            multi_wall = multi_packet_round(
                lab, multi_inputs, multi_sha, "int32 4 KiB chunks over CM",
                cmd=lambda vm, rank, args: worker_cmd(vm, rank, JOB_MULTI, args,
                                                      chunk=MULTI_CHUNK, window=MULTI_WINDOW))
            log(f"timings: boot {lab.timings.get('boot_s', 0):.1f}s; int32 1 MiB x {WORLD} over "
                f"CM: {wall:.2f}s wall; with 4 KiB chunks: {multi_wall:.2f}s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-switch-allreduce-cm", __doc__, test, (2,)))
