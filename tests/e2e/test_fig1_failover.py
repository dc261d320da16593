# SPDX-License-Identifier: Apache-2.0
"""e2e-fig1-failover: R11 — an aggregating VAT node dies mid-AllReduce and the job still
completes, exactly.

The Figure 1 testbed (docs/testbed-fig1.md) with one addition: a redundant spine link s5-s6
(10.0.56.0/24) that no primary path uses. Every route of s5 and s6 whose primary gateway is s7
names the peer across that link as `backup_via`. Job 1 runs as in the draft (s1 aggregates
w1,w2, s7 aggregates w3,w4, s6 is the root, int32 sum, results by unicast).

Mid-AllReduce (once the root has completed a fifth of the chunks) s7 is SIGKILLed: the
aggregator of w3,w4 and the only path between s5 and s6 vanish together, with chunks half
aggregated in its slots. s5 and s6 find s7's ARP entry expired (neighbour_timeout_s 10), count
the gateway down and move every route with a backup onto the s5-s6 link
(`inaswitch_route_failovers_total`). The workers' retransmissions then reach the root directly:
w3's and w4's contributions arrive one bit at a time (A-BM AND P-BM != 0: the root aggregates
them), and what s7 had already delivered is recognised by the root's contributor set as a
duplicate, never added twice. Asserted: every worker verifies its int32 result bit-exact (a
contribution added twice, or lost, changes the sum); the root completed each chunk exactly once;
s5 and s6 each counted a failover and one gateway down; the root saw the switch-over as
contributions arriving without s7 (duplicates answered by re-sent results). Then s7 is started
again: s5 and s6 find it answering their probes and fail back, and w1 reaches w5 through s7
again (5 switches; 4 over the backup link while s7 was down).
"""

import os
import signal
import time

import fig1
from fig1 import Fig1, figure1_job
from testbed import check, delta, log, main, wait_until
from test_allreduce import worker_exe
from test_allreduce_jobs import check_reports, collect, kill_all

NEIGHBOUR_TIMEOUT_S = 10
SLOT_TIMEOUT_MS = 3 * NEIGHBOUR_TIMEOUT_S * 1000


def completed(m, job_id: int) -> float:
    return m.get("inaswitch_ina_job_contributions_total", job=str(job_id), verdict="completed")


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_FAILOVER_ELEMENTS", str(1 << 20)))
    # Results must outlive the outage: a complete chunk whose slot expires before every worker
    # has its result is released, and a worker that lost the result (it was on its way through
    # s7) could never get it again. So the slot timeout exceeds the failover detection time.
    job = figure1_job(1, slot_timeout_ms=SLOT_TIMEOUT_MS)
    chunks = -(-elements // job.chunk)
    with Fig1(switch_exe, [job], backup_links=True,
              neighbour_timeout_s=NEIGHBOUR_TIMEOUT_S) as fig:
        s5, s6, s7 = fig.switches["s5"], fig.switches["s6"], fig.switches["s7"]
        for h in job.workers:
            fig.hosts[h].wait_reachable(job.root_addr)
        before = {s: fig.switches[s].metrics() for s in ("s1", "s5", "s6")}
        check(all(before[s].get("inaswitch_route_gateways_down") == 0 for s in before),
              "no gateway down before the failure")

        timeout_s = float(os.environ.get("INAE2E_FAILOVER_TIMEOUT_S",
                                         120 + elements / (1 << 20) * 120))
        procs = []
        t0 = time.monotonic()
        try:
            for h in job.workers:
                procs.append((f"{h} (BFR-id {fig1.bfr_id_of(h)})",
                              fig.hosts[h].popen(job.worker_cmd(exe, h, elements, 303,
                                                                timeout_s))))
            # Mid-AllReduce: once a fifth of the chunks are complete at the root.
            base = completed(before["s6"], 1)
            wait_until(lambda: completed(s6.metrics(), 1) - base >= chunks // 5, timeout_s,
                       f"the root to complete {chunks // 5} of {chunks} chunks")
            done_at_kill = completed(s6.metrics(), 1) - base
            check(done_at_kill < chunks, f"s7 dies mid-AllReduce ({done_at_kill:.0f} of "
                                         f"{chunks} chunks complete at the root)")
            s7.proc.send_signal(signal.SIGKILL)
            s7.proc.wait(10)
            t_kill = time.monotonic()
            log(f"s7 killed {t_kill - t0:.1f} s into the AllReduce")
            res = collect(procs, timeout_s + 60)
        finally:
            kill_all(procs)
        wall = time.monotonic() - t0
        if any(rc != 0 for rc, _, _ in res.values()):
            for name in ("s1", "s5", "s6"):
                m = fig.switches[name].metrics()
                log(f"{name} after the failure: " + ", ".join(
                    f"{k}{v}={x:.0f}" for k, v, x in m.nonzero()
                    if "route" in k or "drops" in k or "ina_job_contributions" in k or
                    "gateways" in k or "neighbours" in k))
        check_reports(res, elements, chunks)
        retransmits = sum(r.get("retransmits", 0) for _, r, _ in res.values())
        log(f"AllReduce of {elements} int32 x 4 workers completed across the failure in "
            f"{wall:.1f} s ({retransmits} retransmissions)")

        after = {s: fig.switches[s].metrics() for s in ("s1", "s5", "s6")}
        for s in ("s5", "s6"):
            failovers = delta(after[s], before[s], "inaswitch_route_failovers_total")
            check(failovers >= 1 and after[s].get("inaswitch_route_gateways_down") == 1,
                  f"{s}: s7 counted down, {failovers:.0f} routes failed over to the s5-s6 link")
        done = completed(after["s6"], 1) - completed(before["s6"], 1)
        check(done == chunks, f"the root completed each of the {chunks} chunks exactly once "
                              f"({done:.0f})")
        dup = delta(after["s6"], before["s6"], "inaswitch_ina_job_contributions_total",
                    job="1", verdict="duplicate")
        resent = delta(after["s6"], before["s6"], "inaswitch_ina_resent_total")
        log(f"root: {dup:.0f} duplicate contributions recognised, {resent:.0f} results re-sent")
        fig.hosts["w1"].wait_reachable(fig1.host_addr("w5"), timeout=30)
        hops = fig.hops("w1", "w5")
        check(hops == 4, f"w1 -> w5 crosses s1, s5, s6, s3 over the backup link (got {hops})")

        # s7 comes back: its neighbours find it answering their probes and fail back.
        s7.start()
        wait_until(s7.ready, 60, "s7 restarted")
        for s in (s5, s6):
            wait_until(lambda s=s: s.metrics().get("inaswitch_route_failbacks_total") >= 1, 30,
                       f"{s.name} to fail back onto s7")
            check(s.metrics().get("inaswitch_route_gateways_down") == 0,
                  f"{s.name}: no gateway down once s7 answers")
        fig.hosts["w1"].wait_reachable(fig1.host_addr("w5"), timeout=30)
        hops = fig.hops("w1", "w5")
        check(hops == 5, f"w1 -> w5 crosses s1, s5, s7, s6, s3 again (got {hops})")


if __name__ == "__main__":
    main(test)
