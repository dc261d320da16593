# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce: four ina-worker processes perform AllReduce through the switch as the VAT root.

    h1 10.0.1.2 -- p0 10.0.1.1 \\
    h2 10.0.2.2 -- p1 10.0.2.1  \\ [inaswitch: root of jobs 1 (int32 sum), 2 (fp32 sum),
    h3 10.0.3.2 -- p2 10.0.3.1  /             3 (int32 sum, lossy links)]
    h4 10.0.4.2 -- p3 10.0.4.1 /

Every worker sends its chunks to the root address 10.0.1.1 (h2..h4 through their gateways) and
gets one result per chunk back on UDP 9470. Each worker generates every worker's data from the
seed and checks the result against a local reference (int32 bit-exact, fp32 within the bound
documented in src/worker/testdata.h). Then the switch's metrics: one result per worker per chunk
(re-sends are counted apart), one completion per chunk, slots in use bounded by 2 x window and
back to 0 after the slot timeout. Then a host root: ina-ps in h1 aggregates job 4 (unknown to
the switch, which just routes it) for workers h2..h4.

And job 3 (int32, 1 Mi elements) on lossy links: every worker's link loses, duplicates and
reorders packets, and retransmissions (and the root's re-sent results) must recover everything,
bit-exact, with every chunk completed once and the slots back to 0. Where the kernel has
sch_netem, `tc netem loss 1% duplicate 1% reorder 5% delay 1ms` on each worker's egress, on
this switch. Where it has not (this project's CI kernel: no sch_netem and no act_gact, so tc
cannot drop, duplicate or delay at all), impair.py bridges each worker's link to its switch port
through AF_PACKET sockets in a namespace of its own, transparently to both ends, with 1% loss,
1% duplication and 5% reordering in each direction (the workers' data and the root's results),
on a second switch so that jobs 1, 2 and 4 ran at full speed; the test asserts from impair.py's
counters that every link really dropped, duplicated and reordered packets both ways.
ina-worker's own --fault-* injection is not used.

The switch runs with one worker lcore (EAL -l 0-1): INA jobs are refused with more.
Env: INAE2E_ALLREDUCE_ELEMENTS (default 4 Mi), INAE2E_ALLREDUCE_LOSSY_ELEMENTS (default 1 Mi),
INAE2E_INA_WORKER (path of ina-worker; default next to the switch's build dir).
"""

import json
import os
import time

from testbed import (Host, Impairment, Port, Testbed, TestFailure, check, delta, kill_leftovers,
                     log, main, netem_available)

WINDOW = 64             # the switch's job window; the workers use the same
CHUNK = 256             # elements per packet
SLOT_TIMEOUT_MS = 1000
ROOT = "10.0.1.1"
N = 4


def worker_exe(switch_exe: str) -> str:
    env = os.environ.get("INAE2E_INA_WORKER")
    if env:
        return env
    # build/src/app/inaswitch -> build/src/worker/ina-worker
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(switch_exe))),
                        "worker", "ina-worker")
    if not os.path.exists(path):
        raise TestFailure(f"ina-worker not found at {path} (set INAE2E_INA_WORKER)")
    return path


def ps_exe(switch_exe: str) -> str:
    return os.path.join(os.path.dirname(worker_exe(switch_exe)), "ina-ps")


def job(job_id: int, elem_type: str, hosts: list[Host]) -> dict:
    return {
        "job_id": job_id, "role": "root", "bsl": 64, "abm": f"1-{N}", "op": "sum",
        "elem_type": elem_type, "max_elements": CHUNK, "window": WINDOW,
        "slot_timeout_ms": SLOT_TIMEOUT_MS, "root": ROOT,
        "workers": [{"bfr_id": i + 1, "ip": h.ip} for i, h in enumerate(hosts)],
        "on_reject": "drop",
    }


def run_allreduce(tb: Testbed, exe: str, hosts: list[Host], job_id: int, elem_type: str,
                  elements: int, seed: int, timeout_s: float,
                  extra: list[str] | None = None,
                  windows: dict[int, int] | None = None,
                  host_extra: dict[int, list[str]] | None = None) -> list[dict]:
    """Starts one ina-worker per host concurrently; returns their JSON reports (all ok).
    windows: chunks in flight by host index, where not WINDOW; host_extra: more arguments by
    host index."""
    procs = []
    try:
        for i, h in enumerate(hosts):
            window = (windows or {}).get(i, WINDOW)
            cmd = [exe, "--job", str(job_id), "--bfr-id", str(i + 1), "--abm", f"1-{N}",
                   "--root", ROOT, "--bind", h.ip, "--type", elem_type, "--op", "sum",
                   "--elements", str(elements), "--chunk", str(CHUNK), "--window", str(window),
                   "--seed", str(seed), "--timeout-ms", str(int(timeout_s * 1000))] + \
                (extra or []) + (host_extra or {}).get(i, [])
            procs.append(h.popen(cmd))
        reports = []
        for i, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout_s + 60)
            lines = out.strip().splitlines()
            if p.returncode != 0 or not lines:
                raise TestFailure(f"ina-worker {i + 1} (job {job_id}, {elem_type}) exited "
                                  f"{p.returncode}: {out} {err}")
            r = json.loads(lines[-1])
            check(r.get("ok") is True and r["chunks"] == -(-elements // CHUNK),
                  f"job {job_id} {elem_type}: worker {i + 1} verified {elements} elements in "
                  f"{r['chunks']} chunks, {r['retransmits']} retransmits, {r['seconds']:.3f} s, "
                  f"{r['gbit_per_s']:.3f} Gbit/s")
            reports.append(r)
        return reports
    finally:
        kill_leftovers(procs)


def check_switch(tb: Testbed, before, job_id: int, chunks: int) -> None:
    after = tb.metrics()
    results = delta(after, before, "inaswitch_ina_results_sent_total")
    resent = delta(after, before, "inaswitch_ina_resent_total")
    completed = delta(after, before, "inaswitch_ina_job_contributions_total", job=str(job_id),
                      verdict="completed")
    check(completed == chunks, f"job {job_id}: {completed:.0f} chunks completed == {chunks}")
    # Each chunk completes once and its result goes once to every worker; answers to
    # retransmissions after completion are counted in resent_total.
    check(results == N * chunks,
          f"job {job_id}: results_sent moved by {results:.0f} == {N} x {chunks} "
          f"(+{resent:.0f} re-sent results, counted apart)")
    in_use = after.get("inaswitch_ina_job_slots_in_use", job=str(job_id))
    check(in_use <= 2 * WINDOW, f"job {job_id}: {in_use:.0f} slots in use <= 2 x window")
    tb.wait_metric("inaswitch_ina_job_slots_in_use", lambda v: v == 0,
                   timeout=SLOT_TIMEOUT_MS / 1000 + 10, job=str(job_id))
    log(f"job {job_id}: slots in use back to 0 after the slot timeout")


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_ALLREDUCE_ELEMENTS", str(4 << 20)))
    lossy_elements = int(os.environ.get("INAE2E_ALLREDUCE_LOSSY_ELEMENTS", str(1 << 20)))
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1])
             for i in range(1, N + 1)]
    extra = {"ina": {"jobs": [job(1, "int32", hosts), job(2, "fp32", hosts),
                              job(3, "int32", hosts)]}}
    netem, why = netem_available()
    if not netem:
        log(f"tc netem unavailable ({why}): the lossy run impairs the links with impair.py")
    with Testbed(switch_exe, ports, extra=extra) as tb:
        # Resolve both ways before counting: every host reaches the root address.
        for h in hosts:
            h.wait_reachable(ROOT)
        # af_packet on a small VM: allow ~20 s per Mi elements before a worker gives up.
        timeout_s = max(30.0, elements / (1 << 20) * 20)

        for job_id, elem_type, seed in ((1, "int32", 11), (2, "fp32", 22)):
            before = tb.metrics()
            t0 = time.monotonic()
            reports = run_allreduce(tb, exe, hosts, job_id, elem_type, elements, seed, timeout_s)
            wall = time.monotonic() - t0
            gbit = sum(r["gbit_per_s"] for r in reports)
            log(f"job {job_id} {elem_type}: {elements} elements x {N} workers in {wall:.2f} s "
                f"wall; aggregate worker goodput {gbit:.3f} Gbit/s")
            check_switch(tb, before, job_id, reports[0]["chunks"])
            # Full-size chunks of consecutive slots leave as UDP GSO runs (segmented by the
            # kernel before the veth): the switch aggregated them as the datagrams they are.
            gso = [r["gso_datagrams"] for r in reports]
            check(all(g > 0 for g in gso) and all(g < r["packets_sent"] for g, r in
                                                  zip(gso, reports)),
                  f"job {job_id}: each worker sent its chunks in fewer UDP GSO datagrams ({gso}) "
                  f"than packets ({[r['packets_sent'] for r in reports]})")

        if netem:
            # Lossy links: 1% loss, 1% duplication, 5% reordering, 1 ms delay on every
            # worker's egress. Retransmissions (and the root's re-sent results) must recover
            # everything.
            for h in hosts:
                h.run(["tc", "qdisc", "add", "dev", h.dev, "root", "netem", "loss", "1%",
                       "duplicate", "1%", "reorder", "5%", "delay", "1ms"])
            before = tb.metrics()
            reports = run_allreduce(tb, exe, hosts, 3, "int32", lossy_elements, 33,
                                    lossy_timeout(lossy_elements))
            retx = sum(r["retransmits"] for r in reports)
            check(retx > 0, f"lossy links (netem): {retx} retransmissions recovered the losses")
            check_switch(tb, before, 3, reports[0]["chunks"])

        # A host root (ina-ps in h1) for job 4, which the switch does not know: it routes the
        # workers' (h2..h4, BFR-ids 1-3) data to h1 and the results back untouched.
        ps_elements = 1 << 20
        ps = hosts[0].popen([ps_exe(switch_exe), "--job", "4", "--abm", "1-3", "--type", "fp32",
                             "--op", "sum", "--chunk", str(CHUNK), "--window", str(WINDOW),
                             "--bind", hosts[0].ip, "--idle-exit-ms", "60000", "--workers",
                             ",".join(f"{i}={h.ip}" for i, h in enumerate(hosts[1:], 1))])
        try:
            hosts[0].wait_listening(9470, proto="udp")
            before = tb.metrics()
            procs = [h.popen([exe, "--job", "4", "--bfr-id", str(i), "--abm", "1-3", "--root",
                              hosts[0].ip, "--bind", h.ip, "--type", "fp32", "--elements",
                              str(ps_elements), "--chunk", str(CHUNK), "--window", str(WINDOW),
                              "--seed", "44", "--timeout-ms", "60000"])
                     for i, h in enumerate(hosts[1:], 1)]
            for i, p in enumerate(procs, 1):
                out, err = p.communicate(timeout=120)
                r = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
                check(p.returncode == 0 and r.get("ok") is True,
                      f"ina-ps root: worker {i} verified {ps_elements} fp32 elements "
                      f"({r.get('retransmits')} retransmits, {r.get('gbit_per_s')} Gbit/s)"
                      + (f": exit {p.returncode} {out} {err}" if p.returncode else ""))
            ps.terminate()
            out, err = ps.communicate(timeout=10)
            stats = json.loads(out.strip().splitlines()[-1])
            chunks = -(-ps_elements // CHUNK)
            check(ps.returncode == 0 and stats["completed"] == chunks and
                  stats["results_sent"] == 3 * chunks,
                  f"ina-ps: {stats['completed']} chunks completed, {stats['results_sent']} "
                  f"results sent (== 3 x {chunks})")
            after = tb.metrics()
            check(delta(after, before, "inaswitch_ina_unknown_job_total") >= 3 * chunks,
                  "the switch routed job 4's data as an unknown job")
        finally:
            kill_leftovers([ps])

    if not netem:
        lossy_impaired(switch_exe, exe, lossy_elements)


def lossy_timeout(elements: int) -> float:
    return max(30.0, elements / (1 << 20) * 60)


# What impair.py does to every worker link in the lossy run, each direction (up: the workers'
# data, down: the root's results): 1% loss, 1% duplication, 5% reordering (a held packet is
# overtaken by the next one, or released after 5 ms).
LOSSY = Impairment(loss=0.01, dup=0.01, reorder=0.05, reorder_ms=5)


def check_impaired(counts: dict[str, dict]) -> None:
    """Asserts that every impaired link really dropped, duplicated and reordered packets in
    both directions."""
    for port, c in counts.items():
        for way in ("up", "down"):
            d = c[way]
            log(f"{port} {way}: {d['rx']} in, {d['tx']} out, {d['dropped']} dropped, "
                f"{d['duplicated']} duplicated, {d['reordered']} reordered, {d['held_timeout']} "
                f"held to timeout, {d['sock_drops']} socket drops, {d['tx_errors']} tx errors")
            check(d["dropped"] > 0 and d["duplicated"] > 0 and d["reordered"] > 0,
                  f"{port} {way}: impair.py dropped {d['dropped']}, duplicated "
                  f"{d['duplicated']} and reordered {d['reordered']} packets")


def lossy_impaired(switch_exe: str, exe: str, elements: int) -> None:
    """Job 3 (int32) with every worker link impaired by impair.py, transparently to both ends
    (netem's stand-in): a switch of its own, so jobs 1, 2 and 4 ran on plain veths at full
    speed."""
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1], impair=LOSSY)
             for i in range(1, N + 1)]
    t0 = time.monotonic()
    with Testbed(switch_exe, ports, extra={"ina": {"jobs": [job(3, "int32", hosts)]}},
                 tag="imp") as tb:
        for h in hosts:
            h.wait_reachable(ROOT)
        before = tb.metrics()
        reports = run_allreduce(tb, exe, hosts, 3, "int32", elements, 33,
                                lossy_timeout(elements))
        retx = sum(r["retransmits"] for r in reports)
        dups = sum(r.get("duplicate_results", 0) for r in reports)
        check(retx > 0, f"impaired links: {retx} retransmissions recovered the losses "
              f"({dups} duplicate results ignored by the workers)")
        fast = sum(r.get("fast_retransmits", 0) for r in reports)
        check(0 < fast <= retx, f"{fast} of them fast (later chunks' results came first), "
              "not after the timeout")
        counts = {p.name: p.impairer.counts() for p in ports}
        check_impaired(counts)
        verdicts = {k: v - before.by_label("inaswitch_ina_job_contributions_total",
                                           "verdict").get(k, 0)
                    for k, v in tb.metrics().by_label("inaswitch_ina_job_contributions_total",
                                                      "verdict").items()}
        log(f"switch job 3 verdicts: { {k: v for k, v in verdicts.items() if v} }")
        check_switch(tb, before, 3, reports[0]["chunks"])
    log(f"lossy run on impaired links: {time.monotonic() - t0:.1f} s including setup")


if __name__ == "__main__":
    main(test)
