# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce-fallback: a switch aggregator with a tiny quota falls back to the host root.

    h1 10.0.1.2 -- p0 10.0.1.1 \\         ina-ps in h1: root of job 21 (A-BM 1-4, window 16)
    h2 10.0.2.2 -- p1 10.0.2.1  \\
    h3 10.0.3.2 -- p2 10.0.3.1   [switch] job 21: aggregator, A-BM 1-3 (h2..h4), window 4,
    h4 10.0.4.2 -- p3 10.0.4.1  /         parent = root = h1
    h5 10.0.5.2 -- p4 10.0.5.1 /          (h5, BFR-id 4, is outside the switch's A-BM)

Workers h2..h4 (BFR-ids 1-3) and h5 (BFR-id 4) send to h1 with a window of 16 chunks, four times
the switch's job window: a chunk whose first contribution finds both entries of its index taken
is forwarded unaggregated (fallback flag) to ina-ps, which reduces it with h5's contribution;
the others are aggregated in the switch and reach ina-ps as one partial (P-BM 1-3). Every
worker verifies its result; the switch counted both fallbacks and partials; ina-ps completed
every chunk; the job's slots in use return to 0 after the slot timeout.

Every worker link (h2..h5) is lossy: `tc netem` (1 % loss, 1 % duplication, 5 % reordering,
1 ms delay on the workers' egress) where the kernel has it, else impair.py bridging each worker's
link to its switch port with 1 % loss, 1 % duplication and 5 % reordering in each direction
(data and results), transparently to both ends; the test then asserts from impair.py's counters
that it really dropped, duplicated and reordered packets both ways. With the job's worker_window
declared, lost contributions of fallen-back chunks and lost results are recovered by
retransmission, and duplicates are never added twice (the sums are int32, bit-exact).
Env: INAE2E_FALLBACK_ELEMENTS (default 512 Ki), INAE2E_FALLBACK_WORKER_ARGS (extra ina-worker
options, e.g. its own --fault-* injection; default none), INAE2E_INA_WORKER,
INAE2E_FALLBACK_DECLARED_WINDOW (the job's worker_window, default 16: below the workers' 16 the
workers overrun it, which e2e-allreduce-overrun checks is counted and survived).
"""

import json
import os
import time

from testbed import (Host, Port, Testbed, TestFailure, check, delta, kill_leftovers, log, main,
                     netem_available)
from test_allreduce import LOSSY, check_impaired, ps_exe, worker_exe

JOB = 21
SWITCH_WINDOW = 4
WORKER_WINDOW = 16
PS_WINDOW = 16
CHUNK = 256
SLOT_TIMEOUT_MS = 1000


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_FALLBACK_ELEMENTS", str(1 << 19)))
    chunks = -(-elements // CHUNK)
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, 6)]
    netem, why = netem_available()
    if not netem:
        log(f"tc netem unavailable ({why}): impair.py impairs the worker links")
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1],
                  impair=None if netem or i == 1 else LOSSY) for i in range(1, 6)]
    root = hosts[0]
    workers = hosts[1:]  # BFR-ids 1..4
    declared = int(os.environ.get("INAE2E_FALLBACK_DECLARED_WINDOW", str(WORKER_WINDOW)))
    extra = {"ina": {"jobs": [{
        "job_id": JOB, "role": "aggregator", "bsl": 64, "abm": "1-3", "op": "sum",
        "elem_type": "int32", "max_elements": CHUNK, "window": SWITCH_WINDOW,
        "worker_window": declared, "slot_timeout_ms": SLOT_TIMEOUT_MS, "root": root.ip, "parent": root.ip,
        "on_reject": "drop",
    }]}}
    with Testbed(switch_exe, ports, extra=extra) as tb:
        if netem:
            for h in workers:
                h.run(["tc", "qdisc", "add", "dev", h.dev, "root", "netem", "loss", "1%",
                       "duplicate", "1%", "reorder", "5%", "delay", "1ms"])
        for h in workers:
            h.wait_reachable(root.ip)
        timeout_s = max(30.0, elements / (1 << 20) * 60)
        ps = root.popen([ps_exe(switch_exe), "--job", str(JOB), "--abm", "1-4", "--type", "int32",
                         "--op", "sum", "--chunk", str(CHUNK), "--window", str(PS_WINDOW),
                         "--bind", root.ip, "--slot-timeout-ms", str(SLOT_TIMEOUT_MS),
                         "--idle-exit-ms", "60000", "--workers",
                         ",".join(f"{i}={h.ip}" for i, h in enumerate(workers, 1))])
        procs = []
        try:
            root.wait_listening(9470, proto="udp")
            before = tb.metrics()
            t0 = time.monotonic()
            for b, h in enumerate(workers, 1):
                procs.append(h.popen([
                    exe, "--job", str(JOB), "--bfr-id", str(b), "--abm", "1-4", "--root", root.ip,
                    "--bind", h.ip, "--type", "int32", "--op", "sum", "--elements", str(elements),
                    "--chunk", str(CHUNK), "--window", str(WORKER_WINDOW), "--seed", "21",
                    "--timeout-ms", str(int(timeout_s * 1000))] +
                    os.environ.get("INAE2E_FALLBACK_WORKER_ARGS", "").split()))
            for b, p in enumerate(procs, 1):
                try:
                    out, err = p.communicate(timeout=timeout_s + 30)
                except Exception:
                    p.kill()
                    out, err = p.communicate(timeout=5)
                lines = out.strip().splitlines()
                r = json.loads(lines[-1]) if lines else {}
                check(p.returncode == 0 and r.get("ok") is True and r.get("chunks") == chunks,
                      f"worker {b} ({workers[b - 1].name}) verified {elements} int32 elements in "
                      f"{r.get('chunks')} chunks, {r.get('retransmits')} retransmits, "
                      f"{r.get('seconds')} s" +
                      ("" if p.returncode == 0 else f": exit {p.returncode} {out} {err}"))
            log(f"AllReduce with fallback: {time.monotonic() - t0:.2f} s wall")
            if not netem:
                check_impaired({p.name: p.impairer.counts() for p in ports[1:]})
            after = tb.metrics()
            fallbacks = delta(after, before, "inaswitch_ina_fallbacks_total")
            partials = delta(after, before, "inaswitch_ina_partials_sent_total")
            verdicts = {k: v - before.by_label("inaswitch_ina_job_contributions_total",
                                               "verdict").get(k, 0)
                        for k, v in after.by_label("inaswitch_ina_job_contributions_total",
                                                   "verdict").items()}
            log(f"switch job {JOB} verdicts: { {k: v for k, v in verdicts.items() if v} }")
            violations = delta(after, before, "inaswitch_ina_job_window_violations_total",
                               job=str(JOB))
            if declared < WORKER_WINDOW:
                check(violations > 0, f"workers beyond the declared worker_window ({declared}) "
                      f"were seen: {violations:.0f} window violations, and the job completed")
            else:
                check(violations == 0, "workers within worker_window: no window violation")
            check(fallbacks > 0, f"the switch forwarded {fallbacks:.0f} contributions to the "
                  f"root unaggregated (fallback)")
            check(partials > 0, f"the switch aggregated and sent {partials:.0f} partial results")
            # Every chunk is aggregated here entirely (one partial) or falls back entirely (its
            # three contributions, at least, go on unaggregated): never split.
            no_slot = delta(after, before, "inaswitch_ina_job_fallbacks_total", job=str(JOB),
                            reason="no_slot")
            sticky = delta(after, before, "inaswitch_ina_job_fallbacks_total", job=str(JOB),
                           reason="chunk_fell_back")
            check(no_slot > 0 and no_slot + sticky == fallbacks,
                  f"fallbacks by reason: {no_slot:.0f} no_slot + {sticky:.0f} chunk_fell_back "
                  f"== {fallbacks:.0f}")
            check(partials <= chunks and fallbacks >= 3 * (chunks - partials),
                  f"{partials:.0f} partials + {fallbacks:.0f} fallbacks cover {chunks} chunks "
                  f"without splitting one")
            ps.terminate()
            out, err = ps.communicate(timeout=10)
            stats = json.loads(out.strip().splitlines()[-1])
            log(f"ina-ps: {stats}")
            check(stats["completed"] == chunks and stats["results_sent"] == 4 * chunks,
                  f"ina-ps: {stats['completed']} chunks completed == {chunks}, "
                  f"{stats['results_sent']} results sent == 4 x {chunks}")
            in_use = after.get("inaswitch_ina_job_slots_in_use", job=str(JOB))
            check(in_use <= 2 * SWITCH_WINDOW,
                  f"job {JOB}: {in_use:.0f} slots in use at the end <= 2 x window")
            t1 = time.monotonic()
            tb.wait_metric("inaswitch_ina_job_slots_in_use", lambda v: v == 0,
                           timeout=SLOT_TIMEOUT_MS / 1000 + 10, job=str(JOB))
            log(f"job {JOB}: slots in use back to 0 ({time.monotonic() - t1:.2f} s after the "
                f"workers' last result, slot timeout {SLOT_TIMEOUT_MS} ms)")
        finally:
            kill_leftovers(procs + [ps])


if __name__ == "__main__":
    main(test)
