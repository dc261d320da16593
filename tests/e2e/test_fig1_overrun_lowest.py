# SPDX-License-Identifier: Apache-2.0
"""e2e-fig1-overrun-lowest: a worker far beyond the window behind an AGGREGATOR, losing results,
in the Figure 1 tree (issue 9, item 5 through aggregators; docs/protocol.md, "Lowest missing
result", "Through aggregators").

Job 1 of Figure 1 (fig1.py): w1, w2 -> s1 (aggregator {1,2}); w3, w4 -> s7 (aggregator {3,4});
s6 the root, window 4 everywhere, results by unicast. w1 keeps 16 chunks in flight (4 x the
window) and impair.py between w1 and s1 drops 5 % of the results to w1; the workers send their
lowest missing result (ina-worker's default). s1 refuses (drops, counted as overruns refused)
w1's contributions 2 x the window or more beyond its lowest missing result, proves releases
exactly, and its partials carry the least lowest missing result of their contributions, so the
root s6 serves every result w1 lost. Every worker verifies every int32 result bit-exact; s1, s7
and s6 completed every chunk exactly once; s1 refused some of w1's contributions; impair.py
dropped results to w1. s1 and s7 may fall back some chunks to s6 (unaggregated, with the
worker's header and field); each chunk completes once at the root.
Against the switch before aggregators used the field the same run also completes (s1 then
widens its window and falls most chunks back to s6, which refuses w1's far-ahead fallbacks), and
this test fails on "s1 refused 0": the wedge itself is shown by the chunk simulator.
Env: INAE2E_FIG1_OVERRUN_ELEMENTS (default 256 Ki), INAE2E_FIG1_OVERRUN_WINDOW (w1's window,
default 16), INAE2E_INA_WORKER.
"""

import os
import time

import fig1
from fig1 import Fig1, figure1_job
from testbed import Impairment, check, delta, log, main
from test_allreduce import worker_exe
from test_allreduce_jobs import check_reports, collect, kill_all

WINDOW = 4
OVERRUN_WINDOW = int(os.environ.get("INAE2E_FIG1_OVERRUN_WINDOW", "16"))
RESULT_LOSS = 0.05


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_FIG1_OVERRUN_ELEMENTS", str(256 << 10)))
    job = figure1_job(1, window=WINDOW, slot_timeout_ms=5000)
    chunks = -(-elements // job.chunk)
    # w1's link: its data up untouched, 5 % of the results down to it dropped.
    impair = {"w1": (Impairment(), Impairment(loss=RESULT_LOSS))}
    with Fig1(switch_exe, [job], results="unicast", impair=impair) as fig:
        for h in job.workers:
            fig.hosts[h].wait_reachable(job.root_addr)
        timeout_s = max(90.0, elements / (1 << 20) * 240)
        before = fig.metrics()
        procs = []
        t0 = time.monotonic()
        try:
            for h in job.workers:
                cmd = job.worker_cmd(exe, h, elements, 55, timeout_s)
                if h == "w1":
                    cmd[cmd.index("--window") + 1] = str(OVERRUN_WINDOW)
                procs.append((f"{h} (BFR-id {fig1.bfr_id_of(h)}, window "
                              f"{OVERRUN_WINDOW if h == 'w1' else WINDOW})",
                              fig.hosts[h].popen(cmd)))
            res = collect(procs, timeout_s + 60)
        finally:
            kill_all(procs)
        wall = time.monotonic() - t0
        check_reports(res, elements, chunks)
        log(f"Figure 1 job with w1 at window {OVERRUN_WINDOW} (> 2 x {WINDOW}) behind s1, 5 % of "
            f"its results lost: {wall:.2f} s wall")
        after = fig.metrics()
        down = fig.impairers["w1"].counts()["down"]
        check(down["dropped"] > 0, f"impair.py dropped {down['dropped']} of the {down['rx']} "
              f"results to w1")

        def d(s: str, name: str, **labels) -> float:
            return delta(after[s], before[s], name, **labels)

        for s in ("s1", "s7", "s6"):
            verdicts = {lab["verdict"]: v - before[s].get(n, job="1", verdict=lab["verdict"])
                        for n, lab, v in after[s].series
                        if n == "inaswitch_ina_job_contributions_total" and lab.get("job") == "1"}
            log(f"{s} job 1 verdicts: { {k: int(v) for k, v in verdicts.items() if v} }")
            completed = verdicts.get("completed", 0)
            if s == "s6":
                check(completed == chunks, f"the root s6 completed {completed:.0f} chunks == "
                      f"{chunks}")
            else:
                # An aggregator may fall back (its entries wait for exact proofs longer while a
                # worker runs ahead); what it aggregates it completes once.
                check(completed <= chunks and completed + verdicts.get("fallback", 0) >= chunks,
                      f"{s} completed {completed:.0f} chunks (<= {chunks}), the rest fell back "
                      f"({verdicts.get('fallback', 0):.0f} fallback contributions)")
        refused = d("s1", "inaswitch_ina_job_overruns_total", job="1", action="refused")
        check(refused > 0, f"s1 refused {refused:.0f} of w1's contributions 2 x the window or "
              f"more beyond its lowest missing result")
        for s in ("s7", "s6"):
            r = d(s, "inaswitch_ina_job_overruns_total", job="1", action="refused")
            log(f"{s}: {r:.0f} contributions refused")
        check(d("s6", "inaswitch_ina_job_overruns_total", job="1", action="refused") == 0,
              "the root refused none of the partials (each states a lowest missing result "
              "within 2 x the window of its chunk)")
        for s in ("s1", "s7", "s6"):
            fb = d(s, "inaswitch_ina_fallbacks_total")
            log(f"{s}: {fb:.0f} fallbacks, {d(s, 'inaswitch_ina_resent_total'):.0f} re-sent")


if __name__ == "__main__":
    main(test)
