# SPDX-License-Identifier: Apache-2.0
"""Server-to-server aggregation across two switches against Linux rxe (docs/rdma.md "Several
switches"): ina-rdma-root in VM 0 behind switch S0, ina-rdma-worker --mode server-to-server in
VMs 1 and 2 behind switch S1; two inaswitch processes in the lab's namespace (each its own
--file-prefix and API address), S0's downlink and S1's uplink joined by two veth pairs and
e2e's impair.py between them (the kernel here has no sch_netem; no impairment but in round 3),
every subnet routed:

    root 10.77.1.2 - tap0 - S0 [10.77.9.1] sw0 = sw1 ~impair.py~ im0 = im1 [10.77.9.2] S1
                                                        S1 - tap1 - rank 1 10.77.2.2
                                                           - tap2 - rank 2 10.77.3.2

Both switches learn the connections from the RDMA CM (`learn: true`); S0 lists S1 in
rdma_s2s.switches, S1 aggregates its ranks (`ranks: "1-2"`). S1 absorbs both workers' WRITEs
and sends one aggregate per chunk (k = 2) on rank 1's connection; S0 learned both connections
but sees nothing on rank 2's: it completes each chunk by count (counted completed_by_count) and
sends the root one aggregate (k = 2).

  1. int32 sum of 1 MiB per worker: both results bit-exact (sha256 against the host's sum), the
     root got exactly one WRITE per chunk, S0 completed every chunk by count.
  2. Result replication: a root with --results once, both switches reloaded with
     `replicate: true`: the root writes each result once (on rank 1's connection), S0 copies
     nothing (rank 2 is behind S1, whose branch rank 1's connection carries), S1 copies each onto
     rank 2; the workers' ACKs are aggregated at S1, then at S0; bit-exact, the root completed
     `chunks` result WRITEs.
  3. The same with 2 % loss both ways on the link between the switches (impair.py): S1's aggregates and S0's ACKs of them, the root's results copied toward S1 and S1's
     aggregated ACKs are lost and recovered (S1's requester resends, S0 NAKs a gap as the root,
     the workers' NAKs reach the root through both switches); bit-exact.
  In all three, the programs exit 0, and no guest's rxe counted a retry-exceeded or RNR-exceeded
  error. Without count completion at S0, round 1 hangs (S0 waits for rank 2's connection).

usage: test_s2s_multi.py build/src/worker/rdma/ina-rdma-worker \
           build/src/worker/rdma/ina-rdma-root build/src/app/inaswitch
"""

import json
import os
import shutil
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import API_PORT, Lab, check, log, run_test, to_yaml, wait_until  # noqa: E402
from testbed import Impairer, Impairment  # noqa: E402
from test_rdma_allreduce import TIMEOUT_S, WORLD, int32_inputs, root_cmd, stripped  # noqa: E402
from test_s2s_allreduce import (CHUNK, CHUNKS, JOB, check_rxe_counters, delta,  # noqa: E402
                                int32_round, rxe_counters, settled)

# S0's end (sw0) of the link, impair.py's two (sw1, im0), S1's (im1).
LINKS = ("sw", "im")
S0_LINK, S1_LINK = "10.77.9.1", "10.77.9.2"
LOSS = 0.02
COUNTERS = ("absorbed", "aggregates_sent", "aggregates_acked", "carrier_ended_unacked",
            "completed_by_count",
            "retransmits", "naks_sent", "duplicates", "root_naks_consumed",
            "result_naks_forwarded", "result_naks_merged",
            "count_beyond", "connections_learned", "connections_behind_switch",
            "results_replicated", "replicate_failed", "result_acks_consumed",
            "result_acks_forwarded", "icrc_errors", "bad_contributions", "not_contribution")


def job(lab, replicate: bool, **extra) -> dict:
    return {"id": JOB, "root": lab.vms[0].ip, "world": WORLD, "op": "sum", "dtype": "int32",
            "chunk_bytes": CHUNK, "window": 64, "learn": True, "replicate": replicate, **extra}


def link_port(name: str, end: str, addr: str) -> dict:
    return {"name": name, "devargs": f"net_af_packet9,iface={end},qdisc_bypass=0",
            "ipv4": [f"{addr}/30"]}


def s0_config(cfg: dict, lab, replicate: bool = False) -> dict:
    """S0: the root's port p0 and the link to S1; the workers' subnets through S1."""
    cfg["ports"] = [cfg["ports"][0], link_port("s1", "sw0", S0_LINK)]
    cfg["routes"] = [{"prefix": f"{vm.ip.rsplit('.', 1)[0]}.0/24", "via": S1_LINK}
                     for vm in lab.vms[1:]]
    cfg["rdma_s2s"] = {"switches": [S1_LINK], "jobs": [job(lab, replicate)]}
    return cfg


def s1_config(lab, api_host: str, replicate: bool = False) -> str:
    """S1: the workers' ports p1, p2 and the link to S0; the root's subnet through S0; its API
    on `api_host` (the lab's switch has 127.0.0.1)."""
    cfg = lab.default_switch_config()
    cfg["ports"] = cfg["ports"][1:] + [link_port("s0", "im1", S1_LINK)]
    cfg["routes"] = [{"prefix": "10.77.1.0/24", "via": S0_LINK}]
    cfg["control"] = {"listen": f"{api_host}:{API_PORT}"}
    cfg["rdma_s2s"] = {"jobs": [job(lab, replicate, ranks="1-2")]}
    return "# SPDX-License-Identifier: Apache-2.0\n" + to_yaml(cfg)


def impaired_link(lab, loss: float, seed: str) -> Impairer:
    """impair.py forwarding between the switches (sw1 <-> im0), `loss` each way."""
    both = Impairment(loss=loss)
    return Impairer(lab.ns, types.SimpleNamespace(impair=(both, both), name="s0-s1"), "sw1",
                    "im0", seed)


def counters(sw) -> dict[str, float]:
    m = sw.metrics()
    return {n: m.get(f"inaswitch_rdma_s2s_{n}_total", job=JOB) for n in COUNTERS}


def root_round(root) -> dict:
    rc, out = root.wait(60)
    log(f"root: {out.strip()}")
    check(rc == 0, f"ina-rdma-root served the round (exit {rc})")
    return [json.loads(line) for line in out.splitlines()
            if line.startswith("{") and '"round"' in line][0]


def a_round(lab, s1, data, tag: str, root_args: str) -> tuple[dict, dict, dict]:
    """One AllReduce on a root started for it; (the root's round, S0's and S1's counter deltas)."""
    root_vm, workers = lab.vms[0], lab.vms[1:]
    before0, before1 = counters(lab.switch), counters(s1)
    root = root_vm.start(root_cmd(root_vm, f"--rounds 1 {root_args} "
                                           f"--timeout-ms {TIMEOUT_S * 1000}"))
    root_vm.wait_rdma_cm_listen(timeout=60)
    res, wall = int32_round(root_vm, workers, data[0], data[1], tag)
    rr = root_round(root)
    check(all(r["chunks"] == CHUNKS and r["results"] == CHUNKS for r in res),
          f"{tag}: one result per chunk on every worker")
    # An aggregate's last ACKs (S0's of S1's, lost between the switches in round 3) may be
    # lost before the connections end: the carrier's DREQ releases it, its result seen.
    wait_until(lambda: settled(delta(counters(lab.switch), before0)) >= CHUNKS and
               settled(delta(counters(s1), before1)) >= CHUNKS, 10,
               f"{tag}: every aggregate acknowledged or released at the carrier's end, at S0 "
               f"and S1")
    d0, d1 = delta(counters(lab.switch), before0), delta(counters(s1), before1)
    log(f"{tag}: {wall:.2f}s wall, root {rr['seconds']:.2f}s; S0 {d0}; S1 {d1}")
    n = CHUNKS * WORLD
    check(rr["ok"] and rr["contribution_count"] == n and rr["contributions"] == CHUNKS,
          f"{tag}: the root reduced {n} contributions from {rr['contributions']} WRITEs, one "
          f"aggregate per chunk ({CHUNKS})")
    check(d0["completed_by_count"] == CHUNKS and d0["absorbed"] == CHUNKS and
          d0["connections_learned"] == WORLD and d0["connections_behind_switch"] == 1,
          f"{tag}: S0 learned {WORLD} connections (rank 2's behind S1), absorbed S1's "
          f"{d0['absorbed']:.0f} aggregates and completed {d0['completed_by_count']:.0f} chunks "
          f"by count")
    check(settled(d0) == CHUNKS,
          f"{tag}: the root acknowledged S0's {CHUNKS} aggregates "
          f"({d0['carrier_ended_unacked']:.0f} of them released at the carrier's end instead)")
    check(d1["absorbed"] == n and settled(d1) == CHUNKS and d1["connections_learned"] == WORLD,
          f"{tag}: S1 absorbed {n} contributions, S0 acknowledged its {CHUNKS} aggregates "
          f"({d1['carrier_ended_unacked']:.0f} of them released at the carrier's end instead)")
    for name, d in (("S0", d0), ("S1", d1)):
        check(d["icrc_errors"] == 0 and d["bad_contributions"] == 0 and
              d["not_contribution"] == 0 and d["count_beyond"] == 0 and d["replicate_failed"] == 0,
              f"{tag}: {name} counted no ICRC error, bad contribution or failed copy")
    return rr, d0, d1


def test(worker_exe: str, root_exe: str, switch_exe: str) -> None:
    scratch = tempfile.mkdtemp(prefix="s2s-multi-")
    link = None
    try:
        data = [int32_inputs(scratch, seed=20261128 + n) for n in range(3)]
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for d in data for p in d[0]]
        with Lab(1 + WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True,
                 switch_config=s0_config, extra_files=extra, links=list(LINKS)) as lab:
            link = impaired_link(lab, 0.0, "clean")
            s1 = lab.add_switch(switch_exe, s1_config(lab, lab.add_switch_host()), "s1")
            lab.reach_all()
            rxe_before = [rxe_counters(vm) for vm in lab.vms]

            a_round(lab, s1, data[0], "two switches", "")

            # 2. Result replication on both switches, the root writing each result once.
            lab.reload_switch(lambda cfg, lab: s0_config(cfg, lab, replicate=True))
            s1.reload(s1_config(lab, s1.api_host, replicate=True))
            rr, d0, d1 = a_round(lab, s1, data[1], "two switches, replicate", "--results once")
            check(rr["results"] == "once" and rr["results_written"] == CHUNKS,
                  f"replicate: the root completed {rr['results_written']} result WRITEs = "
                  f"chunks ({CHUNKS})")
            check(d0["results_replicated"] == 0 and d1["results_replicated"] == CHUNKS,
                  f"replicate: one copy stream per worker: S0 made {d0['results_replicated']:.0f} "
                  f"copies (rank 2 is behind S1), S1 {d1['results_replicated']:.0f} (rank 2's)")
            check(d1["result_acks_forwarded"] > 0 and d0["result_acks_forwarded"] > 0 and
                  d0["result_acks_consumed"] >= d1["result_acks_forwarded"],
                  f"replicate: S1 aggregated its workers' ACKs into "
                  f"{d1['result_acks_forwarded']:.0f} on rank 1's connection, S0 consumed them "
                  f"and told the root {d0['result_acks_forwarded']:.0f} times")

            # 3. Loss on the link between the switches, both ways.
            link.stop()
            link = impaired_link(lab, LOSS, "lossy")
            rr, d0, d1 = a_round(lab, s1, data[2], f"two switches, replicate, link loss {LOSS}",
                                 "--results once")
            log(f"link loss: impair.py {link.counts()}")
            check(rr["results_written"] == CHUNKS and d1["results_replicated"] >= CHUNKS,
                  f"link loss: the root wrote each result once, S1 copied "
                  f"{d1['results_replicated']:.0f} (>= {CHUNKS}: resent ones copied again)")
            check(d1["retransmits"] + d0["naks_sent"] + d0["duplicates"] > 0 and
                  d0["result_naks_forwarded"] + d1["result_naks_forwarded"] > 0,
                  f"link loss: recovered across the link: S1 resent {d1['retransmits']:.0f} "
                  f"aggregates, S0 sent {d0['naks_sent']:.0f} NAKs and re-ACKed "
                  f"{d0['duplicates']:.0f} duplicates as the root; NAKs toward the root: S1 "
                  f"{d1['result_naks_forwarded']:.0f}, S0 {d0['result_naks_forwarded']:.0f}")

            check_rxe_counters(lab, rxe_before)
            log(f"timings: boot {lab.timings.get('boot_s', 0):.1f}s")
    finally:
        if link is not None:
            link.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-s2s-multi", __doc__, test, (3,)))
