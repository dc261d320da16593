# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce-jobs: two concurrent INA jobs on one switch stay isolated.

    h1 10.0.1.2 -- p0 10.0.1.1 \\          job 11: root, int32 sum, BFR-ids 1,2 = h1,h2,
    h2 10.0.2.2 -- p1 10.0.2.1  \\ [switch]         ingress.sources h1/h2's subnets, on_reject drop
    h3 10.0.3.2 -- p2 10.0.3.1  /          job 12: root, fp32 max,  BFR-ids 1,2 = h3,h4
    h4 10.0.4.2 -- p3 10.0.4.1 /

The same BFR-ids in both jobs on purpose. Both AllReduces run at the same time; every worker
verifies its result; each job's completed contributions equal its own chunk count. Then job 11
runs again (continuing its sequence space) while a rogue ina-worker in h3 (outside job 11's
ingress sources) sends job 11 contributions as BFR-id 1 with different data: its packets are
rejected (inaswitch_ina_rejected_total grows), it gives up at its timeout, and job 11's real
workers still verify their results.

Env: INAE2E_JOBS_ELEMENTS (default 4 Mi per job), INAE2E_INA_WORKER.
"""

import json
import os
import time

from testbed import Host, Port, Testbed, TestFailure, check, delta, kill_leftovers, log, main
from test_allreduce import worker_exe

WINDOW = 64
CHUNK = 256
SLOT_TIMEOUT_MS = 1000
ROOT = "10.0.1.1"


def job(job_id: int, elem_type: str, op: str, hosts: list[Host], sources: list[str]) -> dict:
    j = {
        "job_id": job_id, "role": "root", "bsl": 64, "abm": "1-2", "op": op,
        "elem_type": elem_type, "max_elements": CHUNK, "window": WINDOW,
        "slot_timeout_ms": SLOT_TIMEOUT_MS, "root": ROOT,
        "workers": [{"bfr_id": i + 1, "ip": h.ip} for i, h in enumerate(hosts)],
        "on_reject": "drop",
    }
    if sources:
        j["ingress"] = {"sources": sources}
    return j


def worker_cmd(exe: str, h: Host, job_id: int, bfr_id: int, elem_type: str, op: str,
               elements: int, seed: int, timeout_ms: int, first_seq: int = 0) -> list[str]:
    return [exe, "--job", str(job_id), "--bfr-id", str(bfr_id), "--abm", "1-2", "--root", ROOT,
            "--bind", h.ip, "--type", elem_type, "--op", op, "--elements", str(elements),
            "--chunk", str(CHUNK), "--window", str(WINDOW), "--seed", str(seed),
            "--first-seq", str(first_seq), "--timeout-ms", str(timeout_ms)]


def collect(procs: list[tuple[str, object]], timeout: float) -> dict[str, tuple[int, dict, str]]:
    """Waits for every (name, Popen); returns name -> (returncode, last JSON line or {}, stderr)."""
    deadline = time.monotonic() + timeout
    out = {}
    for name, p in procs:
        try:
            o, e = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except Exception:
            p.kill()
            o, e = p.communicate(timeout=5)
            raise TestFailure(f"{name} did not exit in time: {o} {e}")
        lines = o.strip().splitlines()
        try:
            r = json.loads(lines[-1]) if lines else {}
        except json.JSONDecodeError:
            r = {}
        out[name] = (p.returncode, r, e)
    return out


def check_reports(res: dict[str, tuple[int, dict, str]], elements: int,
                  chunks: int | None = None) -> None:
    """Every worker of `collect` exited 0 with a verified result (of `chunks` chunks if given)."""
    for name, (rc, r, err) in res.items():
        check(rc == 0 and r.get("ok") is True and (chunks is None or r.get("chunks") == chunks),
              f"{name}: verified {elements} elements in {r.get('chunks')} chunks, "
              f"{r.get('retransmits')} retransmits, {r.get('seconds')} s, "
              f"{r.get('gbit_per_s')} Gbit/s" +
              ("" if rc == 0 else f": exit {rc} {r} {err.strip()[-500:]}"))


def kill_all(procs) -> None:
    kill_leftovers(p for _, p in procs)


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_JOBS_ELEMENTS", str(4 << 20)))
    chunks = -(-elements // CHUNK)
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, 5)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1]) for i in range(1, 5)]
    h1, h2, h3, h4 = hosts
    jobs = {
        11: ("int32", "sum", [h1, h2]),
        12: ("fp32", "max", [h3, h4]),
    }
    extra = {"ina": {"jobs": [
        job(11, "int32", "sum", [h1, h2], ["10.0.1.0/24", "10.0.2.0/24"]),
        job(12, "fp32", "max", [h3, h4], []),
    ]}}
    with Testbed(switch_exe, ports, extra=extra) as tb:
        for h in hosts:
            h.wait_reachable(ROOT)
        timeout_s = max(30.0, elements / (1 << 20) * 40)

        # 1. Both jobs at the same time.
        before = tb.metrics()
        procs = []
        try:
            t0 = time.monotonic()
            for job_id, (elem_type, op, members) in jobs.items():
                for b, h in enumerate(members, 1):
                    procs.append((f"job {job_id} worker {b} ({h.name})", h.popen(worker_cmd(
                        exe, h, job_id, b, elem_type, op, elements, seed=job_id,
                        timeout_ms=int(timeout_s * 1000)))))
            res = collect(procs, timeout_s + 60)
        finally:
            kill_all(procs)
        wall = time.monotonic() - t0
        check_reports(res, elements, chunks)
        log(f"two concurrent jobs ({elements} elements each, 2 workers each): {wall:.2f} s wall")
        after = tb.metrics()
        for job_id in jobs:
            completed = delta(after, before, "inaswitch_ina_job_contributions_total",
                              job=str(job_id), verdict="completed")
            check(completed == chunks, f"job {job_id}: {completed:.0f} chunks completed == {chunks}")
        rejected0 = delta(after, before, "inaswitch_ina_rejected_total")
        check(rejected0 == 0, f"no contribution rejected while both jobs ran ({rejected0:.0f})")
        results = delta(after, before, "inaswitch_ina_results_sent_total")
        check(results == 2 * 2 * chunks, f"results_sent moved by {results:.0f} == 2 jobs x 2 "
              f"workers x {chunks}")

        # 2. Job 11 again (its sequence space continues) with a rogue in h3 sending job 11
        # contributions as BFR-id 1 with other data, from outside job 11's ingress sources.
        elements2 = min(elements, 1 << 18)
        before = tb.metrics()
        procs = []
        try:
            rogue = h3.popen(worker_cmd(exe, h3, 11, 1, "int32", "sum", elements2, seed=666,
                                        timeout_ms=3000, first_seq=chunks))
            procs.append(("rogue job 11 worker in h3", rogue))
            # The rogue's packets reach the switch before the real workers start.
            tb.wait_metric("inaswitch_ina_rejected_total",
                           lambda v: v > before.get("inaswitch_ina_rejected_total"), timeout=10)
            for b, h in enumerate([h1, h2], 1):
                procs.append((f"job 11 worker {b} ({h.name}), second run", h.popen(worker_cmd(
                    exe, h, 11, b, "int32", "sum", elements2, seed=111, timeout_ms=30000,
                    first_seq=chunks))))
            res = collect(procs, 90)
        finally:
            kill_all(procs)
        rc, r, err = res.pop("rogue job 11 worker in h3")
        check(rc == 1 and r.get("ok") is not True,
              f"the rogue worker in h3 failed (exit {rc}, {r.get('results', r.get('error'))} "
              f"results): its contributions never counted")
        check_reports(res, elements2)
        after = tb.metrics()
        rejected = delta(after, before, "inaswitch_ina_rejected_total")
        check(rejected > 0, f"the switch rejected {rejected:.0f} of the rogue's contributions")
        drops = after.by_label("inaswitch_drops_total", "reason")
        log(f"drops by reason: { {k: v for k, v in drops.items() if v} }")
        chunks2 = -(-elements2 // CHUNK)
        completed = delta(after, before, "inaswitch_ina_job_contributions_total", job="11",
                          verdict="completed")
        check(completed == chunks2, f"job 11 second run: {completed:.0f} chunks completed == "
              f"{chunks2}")
        for job_id in jobs:
            tb.wait_metric("inaswitch_ina_job_slots_in_use", lambda v: v == 0,
                           timeout=SLOT_TIMEOUT_MS / 1000 + 10, job=str(job_id))
            log(f"job {job_id}: slots in use back to 0 after the slot timeout")


if __name__ == "__main__":
    main(test)
