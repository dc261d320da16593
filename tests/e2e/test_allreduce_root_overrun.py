# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce-root-overrun: a worker beyond its window at a switch ROOT that loses results
(issue 9, defect 5, the last gap; docs/protocol.md, window rules).

    h1 10.0.1.2 -- impair.py -- p0 10.0.1.1 \\
    h2 10.0.2.2 ---------------- p1 10.0.2.1  \\ [inaswitch: root of job 5, int32 sum, window 4]
    h3 10.0.3.2 ---------------- p2 10.0.3.1  /
    h4 10.0.4.2 ---------------- p3 10.0.4.1 /

h1 (BFR-id 1) keeps 8 chunks in flight, twice the job's window; h2..h4 keep 4. h1's chunk
seq + 4 claims the result of seq, which the root then releases once the others have proven it
too. impair.py drops 5 % of the root's results to h1 (nothing else is impaired). Each result of
a released chunk that h1 lost comes back as a retransmission of a released chunk: before the
result cache the root answered it `stale` for ever and h1 (and the job) never finished; now the
root answers it from the cache. Every worker verifies every int32 result bit-exact; the switch
completed every chunk once, answered released chunks from its cache (hits > 0) and impair.py
really dropped results to h1.
Env: INAE2E_ROOT_OVERRUN_ELEMENTS (default 512 Ki), INAE2E_ROOT_OVERRUN_RESULT_CACHE (the job's
result_cache; unset: the switch's default. 0 shows the defect: h1 times out),
INAE2E_ROOT_OVERRUN_WINDOW (h1's window, default 8; e2e-allreduce-root-overrun-far runs 12:
beyond 2 x the window the root also refuses what it could deadlock on, counted, and h1 slows),
INAE2E_ROOT_OVERRUN_LOWEST_MISSING (1: the workers send their lowest missing result, the
default of ina-worker; unset or 0: --no-lowest-missing, the INA v1 sender the cache was built
for). e2e-allreduce-root-overrun-lowest runs h1 at 16 (4 x the window, beyond what the cache
serves an old sender) with the field: the root proves releases exactly and refuses h1's
contributions 2 x the window or more beyond its lowest missing result (counted as refused), and
the job completes exact (docs/protocol.md, "Lowest missing result").
INAE2E_INA_WORKER.
"""

import os
import time

from testbed import Host, Impairment, Port, Testbed, check, delta, log, main
from test_allreduce import CHUNK, N, ROOT, run_allreduce, worker_exe

JOB = 5
WINDOW = 4             # the job's window (and worker_window): h2..h4 keep it
# h1's: beyond the window. 8 = 2 x: every worker could keep it. INAE2E_ROOT_OVERRUN_WINDOW=12
# (3 x, the most the cache serves one worker losing results): beyond 2 x the root also refuses
# (no_slot) chunks it could deadlock on, and h1 slows (docs/protocol.md, window rules).
OVERRUN_WINDOW = int(os.environ.get("INAE2E_ROOT_OVERRUN_WINDOW", "8"))
LOWEST_MISSING = os.environ.get("INAE2E_ROOT_OVERRUN_LOWEST_MISSING", "0") == "1"
RESULT_LOSS = Impairment(loss=0.05)


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_ROOT_OVERRUN_ELEMENTS", str(1 << 19)))
    chunks = -(-elements // CHUNK)
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    # h1's link: its data up untouched, 5 % of the results down to it dropped.
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1],
                  impair=(Impairment(), RESULT_LOSS) if i == 1 else None)
             for i in range(1, N + 1)]
    job = {"job_id": JOB, "role": "root", "bsl": 64, "abm": f"1-{N}", "op": "sum",
           "elem_type": "int32", "max_elements": CHUNK, "window": WINDOW,
           "slot_timeout_ms": 5000, "root": ROOT,
           "workers": [{"bfr_id": i + 1, "ip": h.ip} for i, h in enumerate(hosts)],
           "on_reject": "drop"}
    cache = os.environ.get("INAE2E_ROOT_OVERRUN_RESULT_CACHE")
    if cache is not None:
        job["result_cache"] = int(cache)
    with Testbed(switch_exe, ports, extra={"ina": {"jobs": [job]}}, tag="rootoverrun") as tb:
        for h in hosts:
            h.wait_reachable(ROOT)
        before = tb.metrics()
        t0 = time.monotonic()
        reports = run_allreduce(tb, exe, hosts, JOB, "int32", elements, 55,
                                max(60.0, elements / (1 << 20) * 120),
                                windows={0: OVERRUN_WINDOW, 1: WINDOW, 2: WINDOW, 3: WINDOW},
                                extra=[] if LOWEST_MISSING else ["--no-lowest-missing"])
        log(f"AllReduce with h1 at window {OVERRUN_WINDOW} > {WINDOW} and 5 % of its results "
            f"lost{' (lowest missing result sent)' if LOWEST_MISSING else ''}: "
            f"{time.monotonic() - t0:.2f} s wall; h1 retransmitted "
            f"{reports[0]['retransmits']} chunks")
        after = tb.metrics()
        down = ports[0].impairer.counts()["down"]
        check(down["dropped"] > 0, f"impair.py dropped {down['dropped']} of the root's "
              f"{down['rx']} results to h1")
        verdicts = {k: v - before.by_label("inaswitch_ina_job_contributions_total",
                                           "verdict").get(k, 0)
                    for k, v in after.by_label("inaswitch_ina_job_contributions_total",
                                               "verdict").items()}
        log(f"root job {JOB} verdicts: { {k: v for k, v in verdicts.items() if v} }")
        completed = delta(after, before, "inaswitch_ina_job_contributions_total", job=str(JOB),
                          verdict="completed")
        check(completed == chunks, f"the root completed {completed:.0f} chunks == {chunks}")
        hits = delta(after, before, "inaswitch_ina_job_result_cache_total", job=str(JOB),
                     outcome="hit")
        misses = delta(after, before, "inaswitch_ina_job_result_cache_total", job=str(JOB),
                       outcome="miss")
        if LOWEST_MISSING:
            # Exact proofs: a chunk h1 lacks leaves its entry only by an obsolete eviction or
            # expiry, so the cache may or may not be asked; what it answers is counted alike.
            check(verdicts.get("cached_result", 0) == hits,
                  f"result cache: {hits:.0f} hits, {misses:.0f} misses (late copies for workers "
                  f"that held the result)")
        else:
            check(hits > 0 and verdicts.get("cached_result", 0) == hits,
                  f"released chunks h1 lacked were answered from the result cache: {hits:.0f} "
                  f"hits ({misses:.0f} misses: late copies for workers that held the result)")
        refused = delta(after, before, "inaswitch_ina_job_overruns_total", job=str(JOB),
                        action="refused")
        preempted = delta(after, before, "inaswitch_ina_job_overruns_total", job=str(JOB),
                          action="preempted")
        log(f"overruns: {refused:.0f} refused, {preempted:.0f} preempted")
        if OVERRUN_WINDOW <= 2 * WINDOW:
            check(refused == 0 and preempted == 0,
                  "h1 within 2 x the window: the root refused and preempted nothing")
        else:
            check(refused > 0, f"h1 beyond 2 x the window: the root refused {refused:.0f} "
                  f"contributions it could deadlock on (no_slot), preempted {preempted:.0f} "
                  f"partials, and the job completed")


if __name__ == "__main__":
    main(test)
