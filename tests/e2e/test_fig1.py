# SPDX-License-Identifier: Apache-2.0
"""e2e-fig1: Figure 1 of draft-song-ina-00, live: 7 switch processes, 8 hosts (fig1.py).

1. Plain L3: every host pings every other host (up to 5 switch hops: w1 -> w8 crosses
   s1 s5 s7 s6 s4, seen in the echo reply's TTL).
2. INA, two jobs at the same time:
   - job 1 (int32 sum), the figure's VAT: w1..w4 as BFR-ids 1..4; s1 aggregates {1,2} and s7
     {3,4}, both with parent s6; s6 is the root {1-4}. w1/w2's data is absorbed at s1, whose
     partial crosses s5 and s7 (A-BM {3,4} AND P-BM {1,2} = 0: routed untouched) to s6; w3/w4's
     data crosses s2 and s5 and is absorbed at s7, whose partial goes to s6.
   - job 2 (fp32 max): w5..w8 as BFR-ids 5..8; s3 aggregates {5,6}, s4 {7,8}, s6 is the root.
   Every worker verifies its result. The switches' counters: job 1's contributions absorbed at
   s1, s7, s6 and nowhere else, s7 routing s1's partials untouched, s2 and s5 only forwarding;
   job 2 absorbed at s3, s4, s6 only; no fallback and no rejection anywhere.
   The results' path is checked on every port that leads away from the root: one result per
   worker behind the port per chunk by unicast; by BIER one copy per branch, s6 -> s7 -> s5 ->
   {s1, s2} (and s6 -> {s3, s4}), with the per-neighbour BIER copies and the BFERs' deliveries.
3. BIER only: a multicast group (239.1.1.1, BFR-ids 3, 6, 8, BFIR s1) reaches exactly w3, w6,
   w8 although w2, w4, w5, w7 joined it too; copies follow s1 -> s5 -> {s2, s7 -> s6 -> {s3, s4}}.
Results return by BIER; the test fails if `--check-config` refuses the Figure 1 BIER config
(INAE2E_FIG1_RESULTS=unicast runs the unicast variant by hand, skipping step 3).

Env: INAE2E_FIG1_ELEMENTS (default 256 Ki elements per job = 1 MiB tensors), INAE2E_INA_WORKER.
"""

import json
import os
import select
import subprocess
import tempfile
import time

import fig1
from fig1 import Fig1, figure1_job, second_job
from testbed import (PYTHON, TestFailure, check, delta, kill_leftovers, log, main, run, to_yaml,
                     wait_until)
from test_allreduce import worker_exe
from test_allreduce_jobs import check_reports, collect, kill_all


def bier_accepted(exe: str) -> tuple[bool, str]:
    """Whether this build takes s6's BIER config (a root job with results: bier)."""
    sw = "s6"
    cfg = {"version": 1,
           "ports": [{"name": p, "devargs": f"net_null{i}", "ipv4": [f"{fig1.switch_addr(sw, p)}/24"]}
                     for i, p in enumerate(fig1.neighbours(sw))],
           "routes": fig1.switch_routes(sw),
           "bier": fig1.bier_section(sw),
           "ina": {"jobs": [figure1_job().switch_job(sw, "bier")]}}
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="inaf1-bier-") as f:
        f.write("# SPDX-License-Identifier: Apache-2.0\n" + to_yaml(cfg))
        f.flush()
        p = run([exe, "--check-config", f.name], check_rc=False)
    return p.returncode == 0, (p.stdout + p.stderr).strip()


MCAST_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fig1", "mcast.py")
BIER_GROUPS = fig1.EXAMPLE_GROUPS              # 239.1.1.1 at s1 (the BFIR; w1 sends)
GROUP = BIER_GROUPS["s1"][0]["group"]
GROUP_RECEIVERS = ["w3", "w6", "w8"]          # the group's BFR-ids 3, 6, 8
GROUP_OTHERS = ["w2", "w4", "w5", "w7"]       # joined the group too, but not its BFR-ids


def multicast(fig: Fig1, count: int = 200) -> None:
    """w1 sends `count` datagrams to GROUP; s1 carries them over BIER to the BFERs of bits
    3, 6, 8: s1 -> s5 -> {s2, s7 -> s6 -> {s3, s4}}. Exactly w3, w6, w8 get them, although
    w2, w4, w5, w7 joined the group as well."""
    before = fig.metrics()
    procs = {}
    try:
        for h in GROUP_RECEIVERS + GROUP_OTHERS:
            procs[h] = fig.hosts[h].popen([PYTHON, "-B", MCAST_PY, "recv", "--group", GROUP,
                                           "--port", "9500", "--iface-addr", fig1.host_addr(h)],
                                          stdin=subprocess.PIPE)
        for h, p in procs.items():
            r, _, _ = select.select([p.stdout], [], [], 10)
            line = p.stdout.readline() if r else ""
            if line.strip() != "ready":
                raise TestFailure(f"multicast receiver in {h} did not start: {line!r}")
        out = fig.hosts["w1"].run([PYTHON, "-B", MCAST_PY, "send", "--group", GROUP, "--port",
                                   "9500", "--iface-addr", fig1.host_addr("w1"), "--count",
                                   str(count), "--rate", "500"], timeout=60).stdout
        check(json.loads(out.strip().splitlines()[-1])["sent"] == count,
              f"w1 sent {count} datagrams to {GROUP}")
        bfers = {"s2": 1, "s3": 1, "s4": 1}
        wait_until(lambda: all(delta(fig.switches[s].metrics(), before[s],
                                     "inaswitch_bier_delivered_total") >= count * n
                               for s, n in bfers.items()), 10,
                   "the BFERs s2, s3, s4 to deliver every datagram")
        got = {}
        for h, p in procs.items():
            o, e = p.communicate(input="", timeout=15)
            got[h] = json.loads(o.strip().splitlines()[-1])
    finally:
        kill_leftovers(procs.values())
    for h in GROUP_RECEIVERS:
        check(got[h]["distinct"] == count and got[h]["received"] == count,
              f"{h} (BFR-id {fig1.bfr_id_of(h)}) received all {count} datagrams once "
              f"({got[h]})")
    for h in GROUP_OTHERS:
        check(got[h]["received"] == 0, f"{h} (joined, not in the group's BFR-ids) received "
              f"nothing ({got[h]['received']})")
    after = fig.metrics()

    def copies(s: str, via: str) -> float:
        return delta(after[s], before[s], "inaswitch_bier_copies_by_neighbour_total",
                     neighbour=via)
    enc = delta(after["s1"], before["s1"], "inaswitch_bier_mcast_encapsulated_total")
    check(enc == count, f"s1 (BFIR) put {enc:.0f} datagrams on BIER")
    for s, via, n in (("s1", "10.0.15.5", count), ("s5", "10.0.25.2", count),
                      ("s5", "10.0.57.7", count), ("s5", "10.0.15.1", 0),
                      ("s7", "10.0.67.6", count), ("s7", "10.0.57.5", 0),
                      ("s6", "10.0.36.3", count), ("s6", "10.0.46.4", count),
                      ("s6", "10.0.67.7", 0)):
        c = copies(s, via)
        check(c == n, f"multicast: {s} sent {c:.0f} BIER copies to {via} (expected {n})")
    for s in ("s1", "s5", "s7", "s6"):
        dl = delta(after[s], before[s], "inaswitch_bier_delivered_total")
        check(dl == 0, f"multicast: {s} delivered nothing locally ({dl:.0f})")


def job_verdicts(m, job_id: int, before) -> dict[str, float]:
    """verdict -> delta of inaswitch_ina_job_contributions_total for the job (empty: no job)."""
    out = {}
    for n, labels, v in m.series:
        if n == "inaswitch_ina_job_contributions_total" and labels.get("job") == str(job_id):
            out[labels["verdict"]] = v - before.get(n, job=str(job_id), verdict=labels["verdict"])
    return out


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_FIG1_ELEMENTS", str(256 << 10)))
    results = os.environ.get("INAE2E_FIG1_RESULTS", "")
    ok, msg = bier_accepted(switch_exe)
    if not results:
        # BIER results are the product's dissemination: a config the switch refuses is a
        # failure, not a reason to test the unicast fallback instead.
        check(ok, "the Figure 1 BIER config is accepted by --check-config"
              + ("" if ok else f": {msg}"))
        results = "bier"
    log(f"BIER config {'accepted' if ok else 'not accepted'} by --check-config"
        + ("" if ok else f" ({msg.splitlines()[0] if msg else ''})") + f": results by {results}")

    j1, j2 = figure1_job(1), second_job(2)
    with Fig1(switch_exe, [j1, j2], results=results,
              bier_groups=BIER_GROUPS if results == "bier" else None) as fig:
        # 1. Plain L3 across the tree.
        fig.ping_all_pairs()
        hops = fig.hops("w1", "w8")
        check(hops == 5, f"w1 -> w8 crosses 5 switches (reply TTL 64 - {hops})")
        check(fig.hops("w1", "w2") == 1, "w1 -> w2 crosses 1 switch")

        # 2. Both INA jobs at once.
        for j in (j1, j2):
            for h in j.workers:
                fig.hosts[h].wait_reachable(j.root_addr)
        chunks = -(-elements // j1.chunk)
        timeout_s = max(60.0, elements / (1 << 20) * 120)
        before = fig.metrics()
        procs = []
        t0 = time.monotonic()
        try:
            for j, seed in ((j1, 101), (j2, 202)):
                for h in j.workers:
                    procs.append((f"job {j.job_id} {h} (BFR-id {fig1.bfr_id_of(h)})",
                                  fig.hosts[h].popen(j.worker_cmd(exe, h, elements, seed,
                                                                  timeout_s))))
            res = collect(procs, timeout_s + 60)
        finally:
            kill_all(procs)
        wall = time.monotonic() - t0
        check_reports(res, elements, chunks)
        log(f"two jobs x 4 workers x {elements} elements through 7 switches: {wall:.2f} s wall")

        after = fig.metrics()
        d = {s: (lambda name, s=s, **l: delta(after[s], before[s], name, **l)) for s in after}
        v1 = {s: job_verdicts(after[s], 1, before[s]) for s in after}
        v2 = {s: job_verdicts(after[s], 2, before[s]) for s in after}
        for s in fig1.SWITCHES:
            log(f"{s}: absorbed {d[s]('inaswitch_ina_absorbed_total'):.0f}, partials "
                f"{d[s]('inaswitch_ina_partials_sent_total'):.0f}, results "
                f"{d[s]('inaswitch_ina_results_sent_total'):.0f}, routed "
                f"{d[s]('inaswitch_routed_packets_total'):.0f}, job 1 "
                f"{ {k: int(v) for k, v in v1[s].items() if v} }, job 2 "
                f"{ {k: int(v) for k, v in v2[s].items() if v} }")

        def absorbed(v: dict) -> float:
            return v.get("absorbed", 0) + v.get("completed", 0)

        # Job 1 lives at s1, s7, s6 only; job 2 at s3, s4, s6 only.
        check(sorted(s for s in v1 if v1[s]) == ["s1", "s6", "s7"],
              "job 1 is configured at s1, s6, s7 only")
        check(sorted(s for s in v2 if v2[s]) == ["s3", "s4", "s6"],
              "job 2 is configured at s3, s4, s6 only")
        for s, v, what in (("s1", v1, "w1,w2"), ("s7", v1, "w3,w4"), ("s6", v1, "s1's and s7's "
                           "partials"), ("s3", v2, "w5,w6"), ("s4", v2, "w7,w8"),
                           ("s6", v2, "s3's and s4's partials")):
            job = 1 if v is v1 else 2
            check(v[s].get("completed") == chunks and absorbed(v[s]) == 2 * chunks,
                  f"job {job} at {s}: {absorbed(v[s]):.0f} contributions ({what}) absorbed == "
                  f"2 x {chunks}, {v[s].get('completed', 0):.0f} chunks completed")
        check(v1["s7"].get("not_mine", 0) >= chunks,
              f"s7 routed s1's job 1 partials untouched (A-BM AND P-BM = 0): "
              f"{v1['s7'].get('not_mine', 0):.0f} >= {chunks}")
        for s in ("s1", "s7", "s3", "s4"):
            check(d[s]("inaswitch_ina_partials_sent_total") == chunks,
                  f"{s} sent one partial per chunk to s6 ({chunks})")
        for s in ("s2", "s5"):
            check(d[s]("inaswitch_ina_absorbed_total") == 0 and
                  d[s]("inaswitch_ina_packets_total") == 0,
                  f"{s} has no job and absorbed nothing: plain forwarding")
        # s5 routes s1's partials, w3/w4's data and job 1's results (>= 1 + 2 + 4 per chunk
        # with unicast results); s7 routes s1's partials and the results.
        check(d["s5"]("inaswitch_routed_packets_total") >= 3 * chunks,
              f"s5 routed {d['s5']('inaswitch_routed_packets_total'):.0f} packets "
              f"(>= {3 * chunks}: s1's partials, w3/w4's data)")
        check(d["s7"]("inaswitch_routed_packets_total") >= chunks,
              f"s7 routed {d['s7']('inaswitch_routed_packets_total'):.0f} packets "
              f"(>= {chunks}: s1's partials)")
        for s in fig1.SWITCHES:
            fb = d[s]("inaswitch_ina_fallbacks_total")
            rej = d[s]("inaswitch_ina_rejected_total")
            check(fb == 0 and rej == 0, f"{s}: no fallback ({fb:.0f}), no rejection ({rej:.0f})")
        # The results' path: every port of every switch that leads away from the root (s6)
        # carries only results during the run, as many per chunk as fig1 says (unicast: one per
        # worker behind the port; BIER: one copy per branch, s6 -> s7 -> s5 -> {s1, s2}).
        # Re-sent results (answers to retransmissions: at most one per result per resend) and
        # ARP add a few.
        resent = d["s6"]("inaswitch_ina_resent_total")
        path = []
        for s in fig1.SWITCHES:
            for p in fig1.neighbours(s):
                if s != "s6" and fig1.next_hop(s, "s6") == p:
                    continue
                per_chunk = j1.result_copies(s, p, results) + j2.result_copies(s, p, results)
                tx = d[s]("inaswitch_port_tx_packets_total", port=p)
                slack = per_chunk * resent + 16
                path.append(f"{s}->{p} {tx:.0f}")
                check(per_chunk * chunks <= tx <= per_chunk * chunks + slack,
                      f"{s} -> {p}: {tx:.0f} result packets, {per_chunk} per chunk by {results} "
                      f"(+ at most {slack:.0f} re-sent/ARP)")
        log(f"result packets per link: {', '.join(path)}")
        res6 = d["s6"]("inaswitch_ina_results_sent_total")
        if results == "unicast":
            check(res6 == 8 * chunks, f"s6 sent one result per worker per chunk: {res6:.0f} == "
                  f"2 jobs x 4 x {chunks}")
            check(d["s5"]("inaswitch_routed_packets_total") >= 7 * chunks,
                  "s5 also routed job 1's 4 unicast results per chunk")
        else:
            check(res6 == 2 * chunks, f"s6 sent one BIER result per chunk per job: {res6:.0f} == "
                  f"2 x {chunks}")
            slack = resent + 16
            if any(n == "inaswitch_bier_copies_by_neighbour_total" for n, _, _ in after["s6"].series):
                for s, via in (("s6", "10.0.67.7"), ("s7", "10.0.57.5"), ("s5", "10.0.15.1"),
                               ("s5", "10.0.25.2"), ("s6", "10.0.36.3"), ("s6", "10.0.46.4")):
                    c = d[s]("inaswitch_bier_copies_by_neighbour_total", neighbour=via)
                    check(chunks <= c <= chunks + slack, f"{s}: {c:.0f} BIER copies to {via}")
                for s in ("s1", "s2", "s3", "s4"):
                    c = d[s]("inaswitch_bier_delivered_total")
                    check(2 * chunks <= c <= 2 * chunks + 2 * slack,
                          f"{s}: {c:.0f} BIER results delivered to its two hosts")
                for s in ("s7", "s5"):
                    c = d[s]("inaswitch_bier_delivered_total")
                    check(c == 0, f"{s}: no BIER delivery (no local bits)")
            else:
                log("this build has no per-neighbour BIER metrics: BIER path checked by port "
                    "counters only")

        # 3. A BIER multicast group across the testbed.
        if results == "bier":
            multicast(fig)

if __name__ == "__main__":
    main(test)
