# SPDX-License-Identifier: Apache-2.0
"""Server-to-switch over an IPv6 underlay against Linux's own RDMA stack: the lab of
test_switch_allreduce.py (three qemu VMs with rdma_rxe, inaswitch routing between them), each
guest also given a static IPv6 address (VM i: fd00:77:<i+1>::2/64, `nodad`, its gateway the
switch port's fd00:77:<i+1>::1), so rxe lists an IPv6 RoCE v2 GID; every ina-rdma-worker runs
with --ip <its IPv6 address> and so speaks RoCEv2 over IPv6 to the switch (docs/rdma.md "IPv6
underlay").

  1. Through the API: int32 sum of 1 MiB per worker, bit-exact (sha256) on every worker; rank 1
     alone waits and GET /api/v1/rdma/jobs/7 lists its QP with its IPv6 address; the switch
     answered with its port's IPv6 address; every QP counted one contribution and one result per
     chunk and rank, and the switch routed at least as many IPv6 packets as it sent results
     (its ACKs and result WRITEs leave through ipv6_forward).
  2. Through the RDMA CM over IPv6 (rdma_connect to [fd00:77:<i+1>::1]:7471; rank 1 to the
     port's second address fd00:77:1::11, which its QP then runs from: rxe takes a connected
     QP's packets only from the address it connected to), the CM under
     loss: rank 1's link drops everything it receives until the switch has sent its REP, so the
     REP is lost for sure and rxe's CM sends the same REQ again; the switch counts the
     retransmitted REQ (reqs_retransmitted), answers with the kept REP, and makes no second QP.
     Then the AllReduce runs with 2 % loss both ways on rank 1's link: int32 bit-exact on every
     worker, one contribution per chunk and rank, recovery counted; rdma_disconnect tears the
     QPs down (DREQ -> DREP).
  3. Chunks larger than the PMTU over IPv6 (job 11: 4096-byte chunks at PMTU 1024, through the
     API): multi-packet WRITEs both ways, bit-exact, exactly one contribution per chunk and rank.
  No retry-exceeded or RNR-retry error in any guest's rxe (its hw_counters).

usage: test_switch_allreduce_ipv6.py build/src/worker/rdma/ina-rdma-worker build/src/app/inaswitch
"""

import ipaddress
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import Lab, run_test, check, log, wait_until  # noqa: E402
from test_rdma_allreduce import int32_inputs, stripped  # noqa: E402
from test_switch_allreduce import (CHUNK, ELEMENTS, JOB_INT32, JOB_MULTI, MULTI_CHUNK,  # noqa: E402
                                   MULTI_WINDOW, TIMEOUT_S, WINDOW, WORLD, QpCounters, job_qps,
                                   multi_packet_round, wait_results)
from test_switch_allreduce import switch_config as ipv4_switch_config  # noqa: E402
from test_switch_allreduce_cm import cm_events  # noqa: E402

CM_PORT = 7471


def address6(index: int) -> tuple[str, str]:
    """(VM `index`'s IPv6 address, its gateway: the switch port's), both on fd00:77:<i+1>::/64."""
    return f"fd00:77:{index + 1}::2", f"fd00:77:{index + 1}::1"


def second6(index: int) -> str:
    """The switch port's second IPv6 address on VM `index`'s prefix."""
    return f"fd00:77:{index + 1}::11"


def switch_config(cfg: dict, lab) -> dict:
    cfg = ipv4_switch_config(cfg, lab)
    for port, vm in zip(cfg["ports"], lab.vms):
        port["ipv6"] = [f"{address6(vm.index)[1]}/64", f"{second6(vm.index)}/64"]
    return cfg


def worker_cmd(lab, vm, rank: int, job: int, args: str, cm: str | None = None,
               chunk: int = CHUNK, window: int = WINDOW) -> str:
    """cm: connect by RDMA CM to that switch address (else through the API)."""
    connect = (f"--switch-cm [{cm}]:{CM_PORT}" if cm else f"--switch-api {lab.guest_api_url}")
    return (f"ina-rdma-worker --mode server-to-switch {connect} --job {job} --rank {rank} "
            f"--world {WORLD} --ip {vm.ip6} --gid-index {vm.gid6_index} --chunk-bytes {chunk} "
            f"--window {window} --timeout-ms {TIMEOUT_S * 1000} {args}")


def routed6(lab) -> float:
    return lab.switch.metrics().get("inaswitch_routed6_packets_total") or 0.0


def connected_line(out: str) -> dict:
    for line in out.splitlines():
        if line.startswith("{") and '"connected"' in line:
            return json.loads(line)
    return {}


def check_sha(vms, path: str, sha: str, what: str) -> None:
    for vm in vms:
        rc, out = vm.run(f"sha256sum {path}", check=True)
        check(out.split()[0] == sha, f"{vm.name}: {what} bit-exact (sha256 {sha[:16]}...)")


def test(worker_exe: str, switch_exe: str) -> None:
    scratch = tempfile.mkdtemp(prefix="switch-allreduce-ipv6-")
    try:
        inputs, sha = int32_inputs(scratch, WORLD, 6001, ELEMENTS)
        cm_inputs, cm_sha = int32_inputs(scratch, WORLD, 6002, ELEMENTS)
        multi_inputs, multi_sha = int32_inputs(scratch, WORLD, 6003, ELEMENTS)
        extra = [stripped(worker_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for p in inputs + cm_inputs + multi_inputs]
        with Lab(WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True, guest_api=True,
                 switch_config=switch_config, extra_files=extra) as lab:
            vms = lab.vms
            for vm in vms:
                ip6, gw6 = address6(vm.index)
                vm.add_ipv6(ip6, 64, gw6)
            log("IPv6: " + ", ".join(f"{vm.name} {vm.ip6} gid {vm.gid6_index}" for vm in vms))
            check(all(vm.gid6_index != vm.gid_index for vm in vms),
                  "rxe lists each guest's IPv6 address as a RoCE v2 GID of its own")
            chunks = ELEMENTS * 4 // CHUNK
            n = WORLD * chunks

            # 1. through the API, over IPv6.
            t0 = time.monotonic()
            counters = QpCounters(lab, JOB_INT32)
            r6 = routed6(lab)
            jobs = [vms[0].start(worker_cmd(
                lab, vms[0], 1, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(inputs[0])} --output /tmp/v6.out"))]
            qps = wait_until(lambda: job_qps(lab, JOB_INT32) or None, 60,
                             "rank 1's IPv6 QP in GET /api/v1/rdma/jobs/7")
            log(f"job {JOB_INT32} with rank 1 alone: {json.dumps(qps)}")
            check(len(qps) == 1 and ipaddress.ip_address(qps[0].get("ip", "0.0.0.0")) ==
                  ipaddress.ip_address(vms[0].ip6),
                  "GET /api/v1/rdma/jobs/7 lists rank 1's QP with its IPv6 address")
            jobs += [vm.start(worker_cmd(
                lab, vm, rank, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(p)} --output /tmp/v6.out"))
                for rank, (vm, p) in enumerate(zip(vms[1:], inputs[1:]), start=2)]
            counters.watch(jobs, "the int32 AllReduce over IPv6")
            res = wait_results(jobs, "int32 over IPv6 (API)")
            api_wall = time.monotonic() - t0
            check_sha(vms, "/tmp/v6.out", sha, "int32 over IPv6 through the API")
            for vm, job in zip(vms, jobs):
                c = connected_line(job.output())
                check(c.get("ip") == vm.ip6 and c.get("switch_ip") == vm.gw6,
                      f"{vm.name} connected from {vm.ip6} to the switch port's IPv6 address "
                      f"{vm.gw6} (got {c})")
            check(all(r[0]["chunks"] == chunks and r[0]["results"] == chunks and
                      r[0]["disconnect_error"] == "" for r in res),
                  "one result per chunk on every worker, and a clean DELETE")
            t = counters.totals()
            sent6 = routed6(lab) - r6
            log(f"switch QP counters, IPv6 API round: {json.dumps(t)}; IPv6 packets routed "
                f"(the switch's ACKs and results): {sent6:.0f}")
            check(t.get("contributions") == n and t.get("results_sent") == n and
                  t.get("icrc_errors", 0) == 0 and t.get("invalid_requests", 0) == 0,
                  f"the switch added {n} contributions over IPv6 and sent {n} results, no bad "
                  "ICRC")
            check(sent6 >= n, f"the switch routed its {n} result WRITEs (and ACKs) as IPv6 "
                  f"({sent6:.0f} IPv6 packets)")
            check(wait_until(lambda: job_qps(lab, JOB_INT32) == [] or None, 30,
                             "job 7's QPs gone after the DELETEs"), "the DELETEs tore the QPs down")

            # 2. by RDMA CM over IPv6; the first REP to rank 1 lost; the AllReduce under loss.
            t0 = time.monotonic()
            counters = QpCounters(lab, JOB_INT32)
            ev0 = cm_events(lab)
            # Neighbour discovery of the second address before the link drops what comes in.
            vms[0].run(f"until ping -6 -c 1 -W 1 {second6(vms[0].index)} >/dev/null; do :; done",
                       timeout=60, check=True)
            vms[0].netem("loss 100%", direction="ingress")
            jobs = [vms[0].start(worker_cmd(
                lab, vms[0], 1, JOB_INT32, f"--type int32 --input "
                f"/root/{os.path.basename(cm_inputs[0])} --output /tmp/cm6.out",
                cm=second6(vms[0].index)))]
            wait_until(lambda: cm_events(lab).get("reps_sent", 0) > ev0.get("reps_sent", 0)
                       or None, 90, "the switch's REP to rank 1 (dropped on rank 1's link)")
            vms[0].netem(None)
            wait_until(lambda: cm_events(lab).get("reqs_retransmitted", 0) >
                       ev0.get("reqs_retransmitted", 0) or None, 90,
                       "rank 1's CM to send its REQ again and the switch to count it")
            qps = wait_until(lambda: job_qps(lab, JOB_INT32) or None, 60,
                             "rank 1's QP (by CM over IPv6)")
            check(len(qps) == 1 and qps[0].get("rank") == 1,
                  "the retransmitted REQ made no second QP: rank 1 has one")
            vms[0].netem("loss 2%", direction="both")
            jobs += [vm.start(worker_cmd(
                lab, vm, rank, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(p)} --output /tmp/cm6.out",
                cm=vm.gw6))
                for rank, (vm, p) in enumerate(zip(vms[1:], cm_inputs[1:]), start=2)]
            counters.watch(jobs, "the int32 AllReduce by CM over IPv6 under loss")
            vms[0].netem(None)
            res = wait_results(jobs, "int32 by CM over IPv6, 2 % loss on rank 1")
            cm_wall = time.monotonic() - t0
            check_sha(vms, "/tmp/cm6.out", cm_sha, "int32 by CM over IPv6 under loss")
            check(all(r[0]["chunks"] == chunks and r[0]["results"] == chunks and
                      r[0]["disconnect_error"] == "" for r in res),
                  "by CM: one result per chunk on every worker, and a clean rdma_disconnect")
            for vm, job in zip(vms, jobs):
                c = connected_line(job.output())
                want = second6(vm.index) if vm is vms[0] else vm.gw6
                check(c.get("switch_ip") == want, f"{vm.name} connected by CM to {want}")
            t = counters.totals()
            log(f"switch QP counters, CM over IPv6 under loss: {json.dumps(t)}")
            check(t.get("contributions") == n and t.get("bad_contributions", 0) == 0 and
                  t.get("icrc_errors", 0) == 0,
                  f"under loss the switch still added exactly {n} contributions")
            check(t.get("retransmissions", 0) + t.get("duplicates", 0) + t.get("naks_sent", 0) > 0,
                  "the recovery from the loss is counted (retransmissions, duplicates or NAKs)")
            check(wait_until(lambda: job_qps(lab, JOB_INT32) == [] or None, 30,
                             "job 7's QPs gone after the DREQs"), "the DREQs tore the QPs down")
            ev = {k: v - ev0.get(k, 0) for k, v in cm_events(lab).items()}
            log(f"switch CM events, CM round over IPv6: {json.dumps(ev)}")
            check(ev.get("reqs_retransmitted", 0) >= 1 and ev.get("reps_sent", 0) >= WORLD + 1 and
                  ev.get("rtus", 0) >= 1 and ev.get("dreqs", 0) >= WORLD and
                  ev.get("dreps_sent", 0) >= WORLD and ev.get("rejs_sent", 0) == 0,
                  "the switch's CM counted the retransmitted REQ, answered it with its REP "
                  "again, and took the RTUs, DREQs and DREPs, rejecting nothing")

            # 3. multi-packet chunks over IPv6.
            multi_wall = multi_packet_round(
                lab, multi_inputs, multi_sha, "int32 4 KiB chunks over IPv6",
                cmd=lambda vm, rank, args: worker_cmd(lab, vm, rank, JOB_MULTI, args,
                                                      chunk=MULTI_CHUNK, window=MULTI_WINDOW))
            for vm in vms:
                _rc, out = vm.run("cd /sys/class/infiniband/rxe0/ports/1/hw_counters && "
                                  "cat retry_exceeded_err retry_rnr_exceeded_err", check=True)
                check(out.split() == ["0", "0"],
                      f"{vm.name}: rxe counted no retry-exceeded or RNR-retry error ({out.split()})")
            log(f"timings: boot {lab.timings.get('boot_s', 0):.1f}s; int32 1 MiB x {WORLD} over "
                f"IPv6: API {api_wall:.2f}s, CM under loss {cm_wall:.2f}s, 4 KiB chunks "
                f"{multi_wall:.2f}s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-switch-allreduce-ipv6", __doc__, test, (2,)))
