#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""INA aggregation rate per core, beside dpdk-testpmd --forward-mode=io on the same input.

inaswitch: bench/ina_bench (built with the switch) drives the real pipeline on one lcore with an
in-process generator of N workers' contributions (sequence numbers never repeat, so every
packet is absorbed and every N-th completes a chunk). Reported: packets/s, payload Gbit/s and
elements/s absorbed.
Ceiling: testpmd io replaying a pcap of the same frames from memory (net_pcap infinite_rx) to
net_null, in the same run. Goal (issue 15): 1 KiB fp32, 8 workers >= 0.75 x testpmd io.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import inapcap  # noqa: E402
from common import cpu_model, dpdk_version, mmm, testpmd  # noqa: E402


def ina_pcap(path, workers, payload, etype):
    """64 chunks of `workers` contributions, as ina_bench generates them."""
    inapcap.write_pcap(path, inapcap.ina_frames(workers, payload, etype, 64))


def testpmd_io(pcap, seconds):
    return testpmd(["net_pcap0,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null" % pcap,
                    "net_null0,no-rx=1"], "io", seconds, "perf-agg-tp-%d" % os.getpid(), 1,
                   extra=["--mbuf-size=9216"])


# ina_bench's EAL file prefix (INA_BENCH_FILE_PREFIX: several checkouts benching side by side).
FILE_PREFIX = os.environ.get("INA_BENCH_FILE_PREFIX", "perf-agg-ina") + "-%d"


def run_bench(cmd, timeout=60):
    """Runs bench/ina_bench; its JSON line."""
    out = subprocess.run(cmd + ["--file-prefix", FILE_PREFIX % os.getpid()],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("ina_bench failed: " + out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def ina_bench(binary, workers, payload, etype, seconds, lcores=1, steer="chunk",
              deterministic=False, roce=False, role="aggregator", s2s=False,
              udp_checksum=False, pmtu=None, input_mode="cpu"):
    """One ina_bench run's JSON line; input_mode: cpu (frames written whole on the receiving
    lcore) or nic (payloads outside its caches, as a NIC's DMA leaves them); roce: the RoCEv2 server-to-switch stage instead (8 ranks,
    `workers` is ignored); s2s: the server-to-server stage (8 connections to a root, `workers`
    and `role` ignored); role: the job's place in the tree (aggregator or root)."""
    out = subprocess.run([binary, "--workers", str(workers), "--payload", str(payload),
                          "--type", etype, "--seconds", str(seconds), "--lcores", str(lcores),
                          "--steer", steer, "--file-prefix", FILE_PREFIX % os.getpid()]
                         + (["--deterministic"] if deterministic else [])
                         + (["--roce"] if roce else []) + (["--s2s"] if s2s else [])
                         + (["--udp-checksum"] if udp_checksum else [])
                         + (["--pmtu", str(pmtu)] if pmtu else [])
                         + (["--input", input_mode] if input_mode != "cpu" else [])
                         + ["--role", role],
                         capture_output=True, text=True, timeout=seconds + 30)
    if out.returncode != 0:
        raise RuntimeError("ina_bench failed: " + out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


GOAL = (1024, "fp32", 8)  # payload, type, workers: the goal point (GOAL_RATIO x testpmd io)
GOAL_RATIO = 0.75  # issue 15 (issue 5 had 0.5)


def measure(binary, payloads, workers, types, seconds, repeat, tp_seconds, log=print):
    """Every (payload, type, workers) point `repeat` times, and testpmd io per payload `repeat`
    times; returns rows with min/median/max and the ratio of medians."""
    rows = []
    with tempfile.TemporaryDirectory() as work:
        ceilings = {}
        for payload in payloads:
            pcap = os.path.join(work, "agg_%d.pcap" % payload)
            ina_pcap(pcap, 8, payload, "fp32")
            ceilings[payload] = [testpmd_io(pcap, tp_seconds) / 1e6 for _ in range(repeat)]
        for payload in payloads:
            ceiling = statistics.median(ceilings[payload])
            for etype in types:
                for n in workers:
                    runs = [ina_bench(binary, n, payload, etype, seconds) for _ in range(repeat)]
                    mpps = [r["mpps"] for r in runs]
                    med = statistics.median(mpps)
                    row = {"payload_bytes": payload, "type": etype, "workers": n,
                           "isa": runs[0]["isa"], "mpps": mmm(mpps),
                           "payload_gbit_s": mmm([r["payload_gbit_s"] for r in runs]),
                           "gelem_s": mmm([r["gelem_s"] for r in runs]),
                           "testpmd_io_mpps": mmm([round(c, 3) for c in ceilings[payload]]),
                           "ratio": round(med / ceiling, 3)}
                    rows.append(row)
                    goal = (payload, etype, n) == GOAL
                    log("%5d B %-5s %2d workers: %6.2f Mpps (min %.2f max %.2f) %7.1f Gbit/s "
                        "%6.2f Gelem/s | testpmd io %6.2f Mpps | ratio %.3f%s" % (
                            payload, etype, n, med, min(mpps), max(mpps),
                            row["payload_gbit_s"]["median"], row["gelem_s"]["median"], ceiling,
                            row["ratio"], "  (goal >= %.2f: %s)" % (
                                GOAL_RATIO, "met" if row["ratio"] >= GOAL_RATIO else "not met")
                            if goal else ""))
        # Variants of the goal point, beside the default mode's row: their rate and the fraction
        # of the default they keep. Deterministic: exact int64 fixed point (issue 15 item 4).
        # UDP checksums: datagrams the switch verifies in software, as ina-worker's arrive over
        # af_packet / af_xdp (no RX offload); the default rows' frames carry none, as when a NIC
        # verified them.
        payload, etype, n = GOAL
        if payload in ceilings:
            ceiling = statistics.median(ceilings[payload])
            default = next((r for r in rows if (r["payload_bytes"], r["type"], r["workers"]) ==
                            GOAL), None)
            for key, label in (("deterministic", "deterministic"),
                               ("udp_checksum", "UDP checksums verified")):
                runs = [ina_bench(binary, n, payload, etype, seconds, **{key: True})
                        for _ in range(repeat)]
                mpps = [r["mpps"] for r in runs]
                med = statistics.median(mpps)
                of_default = round(med / default["mpps"]["median"], 3) if default else None
                rows.append({"payload_bytes": payload, "type": etype, "workers": n, key: True,
                             "isa": runs[0]["isa"], "mpps": mmm(mpps),
                             "payload_gbit_s": mmm([r["payload_gbit_s"] for r in runs]),
                             "gelem_s": mmm([r["gelem_s"] for r in runs]),
                             "testpmd_io_mpps": mmm([round(c, 3) for c in ceilings[payload]]),
                             "ratio": round(med / ceiling, 3), "of_default": of_default})
                log("%5d B %-5s %2d workers, %s: %6.2f Mpps (min %.2f max %.2f) | testpmd io "
                    "%6.2f Mpps | ratio %.3f | %s of the default mode" % (
                        payload, etype, n, label, med, min(mpps), max(mpps), ceiling,
                        round(med / ceiling, 3), of_default))
    return rows


def measure_baseline(binary, baseline_binary, baseline_rev, seconds, repeat, log=print):
    """The goal point on this tree and on an earlier tree's ina_bench (issue 10: not below the
    rate before its work), alternating run by run so that load hits both, on the lanes' CPU time
    (cpu_mpps): a rate ratio taken in one run, which a ratio against a ceiling measured in
    another session is not. This tree runs twice: its partials' UDP checksums by the core (as
    on the software ports here) and left to the port (--tx-checksum-offload, as on a NIC with TX
    checksum offload). The baseline computed none."""
    payload, etype, n = GOAL
    this, offload, base = [], [], []
    args = ["--workers", str(n), "--payload", str(payload), "--type", etype, "--seconds",
            str(seconds)]
    for _ in range(repeat):
        this.append(run_bench([binary] + args)["cpu_mpps"])
        offload.append(run_bench([binary, "--tx-checksum-offload"] + args)["cpu_mpps"])
        base.append(run_bench([baseline_binary] + args)["cpu_mpps"])
    ratio = round(statistics.median(this) / statistics.median(base), 3)
    ratio_offload = round(statistics.median(offload) / statistics.median(base), 3)
    log("baseline %s: this tree %.2f Mpps CPU time (TX checksum offload %.2f), baseline %.2f "
        "(medians of %d alternating runs) | ratio %.3f (offload %.3f)" % (
            baseline_rev, statistics.median(this), statistics.median(offload),
            statistics.median(base), repeat, ratio, ratio_offload))
    return {"rev": baseline_rev, "payload_bytes": payload, "type": etype, "workers": n,
            "cpu_mpps": mmm(this), "offload_cpu_mpps": mmm(offload),
            "baseline_cpu_mpps": mmm(base), "ratio": ratio, "ratio_offload": ratio_offload}


# Working sets of the physical-limit rows (issue 15 item 3): the INA job's window x 1 KiB slots
# in L1/L2, L2, the last-level cache and DRAM (the regime names are this machine's: 2 MiB L2 per
# core, 32 MiB L3; bench/notes.md).
LIMIT_WINDOWS = [("L1/L2", 64), ("L2", 1024), ("LLC", 16384), ("DRAM", 131072)]
# A 100 GbE port at line rate with 1 KiB payloads: frame = payload + 74 B of Ethernet, IPv4,
# UDP and INA (64-bit BitString) headers + 4 B FCS, plus 20 B preamble and gap on the wire.
LINE_RATE_100G_1K = 100e9 / ((1024 + 74 + 4 + 20) * 8)


def membw(binary, working_set, payload, etype, workers, seconds):
    out = subprocess.run([binary, "--bytes", str(working_set), "--payload", str(payload),
                          "--type", etype, "--workers", str(workers), "--seconds", str(seconds)],
                         capture_output=True, text=True, timeout=4 * seconds + 60)
    if out.returncode != 0:
        raise RuntimeError("membw_bench failed: " + out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cross_core_round_trip_ns(membw_binary, cpus=(0, 1)):
    """A cache line's round trip between the CPUs the 2-lcore rows run on (ina_bench -l 0-1):
    what each line a hand-off moves costs, which on a VM depends on where the two vCPUs sit."""
    out = subprocess.run([membw_binary, "--cross-core-cpus", "%d,%d" % cpus],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError("membw_bench failed: " + out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])["round_trip_ns"]


def measure_limit(ina_binary, membw_binary, seconds, repeat, windows=LIMIT_WINDOWS, log=print):
    """The aggregation (1 KiB fp32 x 8 workers, one lcore) at each working set beside what one
    thread's accumulator copy/add sustains over the same working set (membw_bench, the same
    kernels): the fraction of the memory ceiling the switch reaches, per cache regime."""
    payload, etype, n = GOAL
    rows = []
    for regime, window in windows:
        ina, mem = [], []
        for _ in range(repeat):  # alternating, so load hits both
            ina.append(run_bench([ina_binary, "--workers", str(n), "--payload", str(payload),
                                  "--type", etype, "--seconds", str(seconds), "--window",
                                  str(window)], timeout=seconds + 60))
            mem.append(membw(membw_binary, window * payload, payload, etype, n, seconds / 2))
        mpps = statistics.median(r["mpps"] for r in ina)
        ceiling = statistics.median(r["contributions_per_s"] for r in mem) / 1e6
        row = {"regime": regime, "window": window, "working_set_bytes": window * payload,
               "mpps": mmm([r["mpps"] for r in ina]),
               "ceiling_mpps": mmm([round(r["contributions_per_s"] / 1e6, 3) for r in mem]),
               "copy_gbyte_s": mmm([r["copy_gbyte_s"] for r in mem]),
               "add_gbyte_s": mmm([r["add_gbyte_s"] for r in mem]),
               "reduced_gbyte_s": round(mpps * payload / 1e3, 3),
               "fraction": round(mpps / ceiling, 3) if ceiling else None,
               "line_rate_100g_mpps": round(LINE_RATE_100G_1K / 1e6, 3),
               "ceiling_covers_100g": ceiling * 1e6 >= LINE_RATE_100G_1K}
        rows.append(row)
        log("limit %-5s window %6d (%6.1f MiB): INA %6.2f Mpps | memory ceiling %6.2f Mpps "
            "(copy %.1f GB/s, add %.1f GB/s) | fraction %.3f | 100 GbE needs %.2f Mpps" % (
                regime, window, window * payload / 2**20, mpps, ceiling,
                row["copy_gbyte_s"]["median"], row["add_gbyte_s"]["median"],
                row["fraction"] or 0, LINE_RATE_100G_1K / 1e6))
    return rows


ROCE_RANKS = 8
ROCE_GOAL = 0.8  # issue 11: RoCE aggregation per core >= 0.8 x the UDP INA path
# The pairs measured, each RoCE job beside the INA job in the same place of the tree. The goal is
# judged on the aggregator pair (the "the ICRC must not halve the rate"), on the RoCE
# aggregator's way up alone (`cpu_up_mpps`: contributions in, one partial out, what INA's
# aggregator row does; its full rate also carries the parent's results down to the ranks as
# WRITEs and their ACKs); the root pair shows what delivering the result to every rank costs each
# path. Both sides are rates per second of the thread's CPU time (INA's `cpu_mpps`, RoCE's
# `cpu_up_mpps` / `cpu_mpps`): on this shared machine the wall-time rates move with the
# neighbours' load by +-40 % run to run, the CPU-time ones far less (bench/notes.md
# "roce-rate2"); the wall-time figures stay in each row.
ROCE_ROLES = ["aggregator", "root"]
ROCE_GOAL_ROLE = "aggregator"


def measure_roce(binary, payloads, seconds, repeat, log=print):
    """RoCEv2 server-to-switch aggregation per core (ina_bench --roce: 8 ranks' WRITE_ONLY_WITH_IMM
    contributions with ICRC, the switch's result WRITEs ACKed by the generator) beside the UDP INA
    path (ina_bench, 8 workers) of the same payload, fp32, in the same role (ROCE_ROLES), both per
    second of CPU time. INA and RoCE runs alternate, so a load change on this shared machine hits
    both; each figure is a median of `repeat` runs and the ratio is RoCE's median over INA's."""
    keys = [(p, role) for p in payloads for role in ROCE_ROLES]
    runs = {k: {"ina": [], "ina_csum": [], "roce": [], "ina_nic": [], "roce_nic": [],
                "roce_det": [], "load": []}
            for k in keys}
    for _ in range(repeat):
        for k in keys:
            p, role = k
            runs[k]["load"].append(os.getloadavg()[0])
            runs[k]["ina"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds, role=role))
            runs[k]["ina_csum"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds,
                                                 role=role, udp_checksum=True))
            runs[k]["roce"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds, roce=True,
                                             role=role))
            # Both with payloads as a NIC's DMA leaves them (only headers, and RoCE's ICRC,
            # written per packet): neither pays the generator's copy of the payload.
            runs[k]["ina_nic"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds, role=role,
                                                input_mode="nic"))
            runs[k]["roce_nic"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds,
                                                 roce=True, role=role, input_mode="nic"))
            # The deterministic mode (exact int64 fixed point, docs/rdma.md "Deterministic
            # mode") of a root job, beside the default's runs (issue 15 item 4 for RDMA).
            if role == "root":
                runs[k]["roce_det"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds,
                                                     roce=True, role=role, deterministic=True))
    rows = []
    for k in keys:
        p, role = k
        ina = [r["cpu_mpps"] for r in runs[k]["ina"]]
        goal_row = role == ROCE_GOAL_ROLE
        full = [r["cpu_mpps"] for r in runs[k]["roce"]]
        roce = [r["cpu_up_mpps"] for r in runs[k]["roce"]] if goal_row else full
        ratio = round(statistics.median(roce) / statistics.median(ina), 3)
        ina_nic = [r["cpu_mpps"] for r in runs[k]["ina_nic"]]
        roce_nic = [r["cpu_up_mpps" if goal_row else "cpu_mpps"] for r in runs[k]["roce_nic"]]
        # Each RoCE run over the INA run just before it: a load change between pairs cancels.
        pairs = [r / i for r, i in zip(roce, ina)]
        # The same runs in wall time (TSC inside the measured bursts for RoCE, the whole run for
        # INA), as the rows were before they moved to CPU time.
        ina_wall = [r["mpps"] for r in runs[k]["ina"]]
        roce_wall = [r["up_mpps" if goal_row else "mpps"] for r in runs[k]["roce"]]
        row = {"payload_bytes": p, "type": "fp32", "ranks": ROCE_RANKS, "role": role,
               "isa": runs[k]["roce"][0]["isa"], "time": "cpu", "roce_mpps": mmm(roce),
               "ina_mpps": mmm(ina), "roce_wall_mpps": mmm(roce_wall),
               "ina_wall_mpps": mmm(ina_wall),
               "wall_ratio": round(statistics.median(roce_wall) / statistics.median(ina_wall), 3),
               # The whole RoCE rate (an aggregator's way down included) and its ratio.
               "roce_full_mpps": mmm(full),
               "full_ratio": round(statistics.median(full) / statistics.median(ina), 3),
               # Like for like: INA's integrity check (the UDP checksum) in software too, as
               # RoCE's ICRC always is here.
               "ina_csum_mpps": mmm([r["cpu_mpps"] for r in runs[k]["ina_csum"]]),
               "csum_ratio": round(statistics.median(roce) /
                                   statistics.median([r["cpu_mpps"]
                                                      for r in runs[k]["ina_csum"]]), 3),
               "roce_nic_mpps": mmm(roce_nic), "ina_nic_mpps": mmm(ina_nic),
               "nic_ratio": round(statistics.median(roce_nic) / statistics.median(ina_nic), 3),
               "roce_payload_gbit_s": mmm([r["payload_gbit_s"] for r in runs[k]["roce"]]),
               "roce_excluded_s": mmm([r["excluded_seconds"] for r in runs[k]["roce"]]),
               "loadavg": mmm([round(x, 2) for x in runs[k]["load"]]), "ratio": ratio,
               "pair_ratio": mmm([round(x, 3) for x in pairs]),
               "goal": ROCE_GOAL if goal_row else None,
               "met": ratio >= ROCE_GOAL if goal_row else None}
        if runs[k]["roce_det"]:
            det = [r["cpu_mpps"] for r in runs[k]["roce_det"]]
            row["roce_det_mpps"] = mmm(det)
            row["det_of_default"] = round(statistics.median(det) / statistics.median(full), 3)
            log("%5d B fp32 %d ranks, root, deterministic: %6.2f Mpps per CPU second, %.3f of "
                "the default mode" % (p, ROCE_RANKS, statistics.median(det),
                                       row["det_of_default"]))
        rows.append(row)
        log("%5d B fp32 %d ranks, %-10s: RoCE %s%6.2f Mpps (min %.2f max %.2f) | INA %6.2f Mpps "
            "(min %.2f max %.2f), per CPU second | RoCE/INA %.3f (paired runs: median %.3f; wall "
            "time %.3f; vs INA with UDP checksums %.3f; NIC-like input %.3f)%s | load %.1f" % (
                p, ROCE_RANKS, role, "way up " if goal_row else "",
                statistics.median(roce), min(roce), max(roce),
                statistics.median(ina), min(ina), max(ina), ratio, statistics.median(pairs),
                row["wall_ratio"], row["csum_ratio"], row["nic_ratio"],
                " (goal >= %.1f: %s)" % (ROCE_GOAL, "met" if row["met"] else "not met")
                if goal_row else "", statistics.median(runs[k]["load"])))
    return rows


# Multi-packet chunks (docs/rdma.md "Multi-packet chunks"): a 4 KiB chunk at PMTU 1024 as FIRST,
# MIDDLE, MIDDLE, LAST_WITH_IMM, beside the same 4 KiB in one packet (PMTU 4096) and 1 KiB chunks
# in one packet (the same bytes per packet as the segments).
MULTIPACKET_CASES = [("4 KiB chunk, 4 × 1 KiB packets", 4096, 1024),
                     ("4 KiB chunk, 1 packet", 4096, 4096),
                     ("1 KiB chunk, 1 packet", 1024, 1024)]


def measure_roce_multipacket(binary, seconds, repeat, log=print):
    """The RoCE server-to-switch root job (ina_bench --roce --role root, 8 ranks, fp32) with
    chunks of several packets (staged per QP, reduced once the LAST arrives) against one-packet
    chunks, alternating run by run: packets and chunks per second of switch time, payload
    Gbit/s. No goal: issue 11's bench row for multi-packet chunks."""
    runs = {c[0]: [] for c in MULTIPACKET_CASES}
    load = []
    for _ in range(repeat):
        load.append(os.getloadavg()[0])
        for name, payload, pmtu in MULTIPACKET_CASES:
            runs[name].append(ina_bench(binary, ROCE_RANKS, payload, "fp32", seconds, roce=True,
                                        role="root", pmtu=pmtu))
    rows = []
    for name, payload, pmtu in MULTIPACKET_CASES:
        rs = runs[name]
        packets = rs[0]["packets_per_chunk"]
        row = {"case": name, "chunk_bytes": payload, "pmtu": pmtu, "packets_per_chunk": packets,
               "ranks": ROCE_RANKS, "isa": rs[0]["isa"], "mpps": mmm([r["mpps"] for r in rs]),
               # A chunk per rank is one contribution: packets / packets_per_chunk.
               "contributions_mpps": mmm([r["mpps"] / packets for r in rs]),
               "payload_gbit_s": mmm([r["payload_gbit_s"] for r in rs]),
               "loadavg": mmm([round(x, 2) for x in load])}
        rows.append(row)
        log("roce root %-32s: %6.2f Mpps packets, %6.2f M contributions/s, %6.2f Gbit/s payload "
            "| load %.1f" % (name, row["mpps"]["median"], row["contributions_mpps"]["median"],
                             row["payload_gbit_s"]["median"], statistics.median(load)))
    return rows


def measure_s2s(binary, payloads, seconds, repeat, log=print):
    """RoCEv2 server-to-server absorb + ACK per core (ina_bench --s2s: 8 workers' WRITEs on their
    own connections to a root, absorbed, each ACKed as the root would, one aggregate per chunk to
    the root on the carrier, the root's ACKs processed) beside the server-to-switch root job
    (ina_bench --roce --role root: the same contributions terminated by the switch, the result
    written to the 8 ranks, their ACKs processed), fp32, alternating run by run. No goal: the
    figures say what each RoCE mode costs a core (issue 12's bench row)."""
    runs = {p: {"s2s": [], "s2switch": [], "load": []} for p in payloads}
    for _ in range(repeat):
        for p in payloads:
            runs[p]["load"].append(os.getloadavg()[0])
            runs[p]["s2switch"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds,
                                                 roce=True, role="root"))
            runs[p]["s2s"].append(ina_bench(binary, ROCE_RANKS, p, "fp32", seconds, s2s=True))
    rows = []
    for p in payloads:
        s2s = [r["mpps"] for r in runs[p]["s2s"]]
        s2switch = [r["mpps"] for r in runs[p]["s2switch"]]
        pairs = [a / b for a, b in zip(s2s, s2switch)]
        first = runs[p]["s2s"][0]
        row = {"payload_bytes": p, "type": "fp32", "ranks": ROCE_RANKS, "isa": first["isa"],
               "s2s_mpps": mmm(s2s), "s2switch_mpps": mmm(s2switch),
               "ratio": round(statistics.median(s2s) / statistics.median(s2switch), 3),
               "pair_ratio": mmm([round(x, 3) for x in pairs]),
               # Frames the switch made per contribution: ACKs (coalesced per burst) and
               # aggregates.
               "acks_per_contribution": round(first["acks_synthesized"] / first["absorbed"], 3),
               "aggregates_per_contribution": round(first["aggregates_sent"] / first["absorbed"],
                                                    3),
               "loadavg": mmm([round(x, 2) for x in runs[p]["load"]])}
        rows.append(row)
        log("%5d B fp32 %d ranks: server-to-server absorb+ACK %6.2f Mpps (min %.2f max %.2f) | "
            "server-to-switch root %6.2f Mpps | s2s/s2switch %.3f (paired %.3f) | load %.1f" % (
                p, ROCE_RANKS, statistics.median(s2s), min(s2s), max(s2s),
                statistics.median(s2switch), row["ratio"], statistics.median(pairs),
                statistics.median(runs[p]["load"])))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "bench", "ina_bench"))
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "aggregation.json"))
    args = ap.parse_args()
    payloads, workers, types = [256, 1024, 4096], [2, 4, 8, 32], ["fp32", "bf16", "int32"]
    if args.smoke:
        payloads, workers, types, args.seconds, args.repeat = [1024], [8], ["fp32"], 0.3, 1
    print("# aggregation bench: %s, %d cores, DPDK %s, no hugepages, 1 lcore, %d x %.1f s" % (
        cpu_model(), os.cpu_count(), dpdk_version(), args.repeat, args.seconds))
    rows = measure(args.binary, payloads, workers, types, args.seconds, args.repeat,
                   2 if args.smoke else 4)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"environment": {"cpu": cpu_model(), "cores": os.cpu_count(),
                                   "dpdk": dpdk_version(), "hugepages": False},
                   "results": rows}, f, indent=2)
    print("# wrote " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
