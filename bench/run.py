#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Every benchmark scenario of issue 5 in one command: a JSON result file and docs/performance.md
(tables and PNG plots), each figure a ratio against a ceiling measured in the same run.

    /usr/bin/python3 bench/run.py [--smoke] [--repeat N] [--out FILE] [--doc FILE]
                                  [--only forwarding,aggregation,roce,roce-vm,scaling,latency,e2e,
                                         bier,scale]

Scenarios:
  forwarding   L3 (and L2) forwarding per core vs dpdk-testpmd --forward-mode=mac on the same vdevs
  aggregation  INA aggregation per core, N = 2/4/8/32 workers, 256 B/1 KiB/4 KiB, fp32/bf16/int32,
               vs dpdk-testpmd --forward-mode=io on the same input
  roce         RoCEv2 server-to-switch aggregation per core (1 KiB and 4 KiB, 8 ranks, fp32) vs the
               UDP INA path of the same payload in the same role (aggregator vs aggregator: the
               goal; root vs root), runs alternating (issue 11); and the server-to-server
               absorb + ACK path vs the server-to-switch root (issue 12)
  roce-vm      end-to-end time of a 1 MiB int32 server-to-server AllReduce between rxe VMs
               (2 workers, a root) through the switch, with and without aggregation (issue 12;
               bench/roce_vm.py, tests/roce_vm's lab; needs root and qemu)
  scaling      aggregation on 2 lcores vs 1 (chunk-steered input, and input by worker with the
               switch's hand-off rings)
  latency      added latency of one hop, p50/p99/p99.9 at 50 % and 90 % of the measured peak
  e2e          AllReduce of 64 MiB fp32 among 4 workers over tbf-shaped links: INA through the
               switch vs ina-ps as host root vs gloo ring (needs root; skipped otherwise)
  bier         BIER replication per core: copies/s for 2, 4, 16 neighbours vs testpmd io
               (bench/bier.py)
  scale        rack-scale forwarding state: 4,096 neighbours and 16,384 MACs learned from
               replayed traffic, 100,000 routes from the config, route changes through the API
               (bench/scale.py)
--smoke runs each briefly to check that it works (CI); its figures mean nothing.
Needs the build (meson setup build-perf && ninja -C build-perf; --build DIR), dpdk-testpmd, and
for plots python3-matplotlib, for gloo python3-torch (.ci/setup installs them).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import aggregation  # noqa: E402
import common  # noqa: E402
import forwarding  # noqa: E402
import latency  # noqa: E402

SCENARIOS = ["forwarding", "aggregation", "roce", "roce-vm", "scaling", "latency", "e2e", "bier",
             "scale"]


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def default_build():
    for d in ("build-perf", "build"):
        if os.path.exists(os.path.join(ROOT, d, "bench", "ina_bench")):
            return os.path.join(ROOT, d)
    return os.path.join(ROOT, "build")


def scenario_forwarding(a):
    duration = 1.5 if a.smoke else 4.0
    names = ["l3-pcap-null"] if a.smoke else None
    rows = forwarding.measure(os.path.join(a.build, "src", "app", "inaswitch"), duration,
                              a.repeat, common.hugepages_available(), names, log=log)
    # The L3 pipeline alone (ina_bench --l3: in-process alloc + 64 B copy per packet, as the pcap
    # PMD's replay, then process_burst and port_tx to net_null): what the router costs without
    # the PMD and worker-loop overheads.
    exe = os.path.join(a.build, "bench", "ina_bench")
    alone = [aggregation.run_bench([exe, "--l3", "--seconds", str(0.3 if a.smoke else 1.0)])
             ["mpps"] for _ in range(a.repeat)]
    log("l3 pipeline alone (in-process generator): %.2f Mpps" % statistics.median(alone))
    return {"duration_s": duration, "frame_bytes": 64, "rows": rows,
            "l3_pipeline_alone_mpps": common.mmm(alone)}


def scenario_aggregation(a):
    if a.smoke:
        payloads, workers, types, seconds, tp = [1024], [8], ["fp32"], 0.2, 1
    else:
        payloads, workers, types, seconds, tp = [256, 1024, 4096], [2, 4, 8, 32], \
            ["fp32", "bf16", "int32"], 1.0, 3
    rows = aggregation.measure(os.path.join(a.build, "bench", "ina_bench"), payloads, workers,
                               types, seconds, a.repeat, tp, log=log)
    # The physical limit (issue 15 item 3): the same job at working sets in each cache regime,
    # beside one thread's accumulator copy/add over the same working set.
    limit = aggregation.measure_limit(
        os.path.join(a.build, "bench", "ina_bench"), os.path.join(a.build, "bench", "membw_bench"),
        seconds, a.repeat, windows=aggregation.LIMIT_WINDOWS[1:2] if a.smoke else
        aggregation.LIMIT_WINDOWS, log=log)
    out = {"seconds": seconds, "rows": rows, "limit": limit}
    if a.baseline_tree:
        # Issue 10's "not worse": an earlier tree's own ina_bench beside this one.
        rev = subprocess.run(["git", "-C", a.baseline_tree, "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip() or a.baseline_tree
        out["baseline"] = aggregation.measure_baseline(
            os.path.join(a.build, "bench", "ina_bench"),
            os.path.join(a.baseline_tree, "build", "bench", "ina_bench"), rev, seconds,
            max(a.repeat, 5), log=log)
    return out


def scenario_roce(a):
    payloads, seconds = ([1024], 0.2) if a.smoke else ([1024, 4096], 1.0)
    exe = os.path.join(a.build, "bench", "ina_bench")
    repeat = max(a.repeat, 1) if a.smoke else max(a.repeat, 3)
    rows = aggregation.measure_roce(exe, payloads, seconds, repeat, log=log)
    s2s = aggregation.measure_s2s(exe, payloads, seconds, repeat, log=log)
    multi = aggregation.measure_roce_multipacket(exe, seconds, repeat, log=log)
    return {"seconds": seconds, "rows": rows, "s2s_rows": s2s, "multipacket_rows": multi}


def scenario_scaling(a):
    exe = os.path.join(a.build, "bench", "ina_bench")
    seconds = 0.2 if a.smoke else 1.5
    # (label, lcores, steer, input): each input's 1-lcore row is its rows' base.
    modes = [("1 lcore", 1, "chunk", "cpu"), ("2 lcores, chunk-steered input", 2, "chunk", "cpu"),
             ("2 lcores, input by worker + hand-off", 2, "handoff", "cpu"),
             ("NIC-like input: 1 lcore", 1, "chunk", "nic"),
             ("NIC-like input: 2 lcores, chunk-steered", 2, "chunk", "nic"),
             ("NIC-like input: 2 lcores, by worker + hand-off", 2, "handoff", "nic")]
    membw = os.path.join(a.build, "bench", "membw_bench")
    runs = {label: [] for label, _, _, _ in modes}
    round_trips = []
    for _ in range(a.repeat):
        # Where the hypervisor put the two vCPUs, beside each round: the hand-off rows move with
        # it (bench/notes.md, session 17).
        round_trips.append(aggregation.cross_core_round_trip_ns(membw))
        for label, lcores, steer, inp in modes:  # interleaved, so load changes hit every mode
            runs[label].append(aggregation.ina_bench(exe, 8, 1024, "fp32", seconds, lcores,
                                                     steer, input_mode=inp)["mpps"])
    one = {inp: statistics.median(runs[label])
           for label, lcores, _, inp in modes if lcores == 1}
    rows = []
    for label, lcores, steer, inp in modes:
        med = statistics.median(runs[label])
        rows.append({"mode": label, "lcores": lcores, "steer": steer, "input": inp,
                     "mpps": common.mmm(runs[label]), "speedup": round(med / one[inp], 3)})
        log("scaling %-46s %6.2f Mpps  x%.2f" % (label, med, med / one[inp]))
    log("scaling: a cache line's round trip between CPUs 0 and 1: %s ns per round" %
        ", ".join("%.0f" % x for x in round_trips))
    return {"payload_bytes": 1024, "type": "fp32", "workers": 8, "seconds": seconds,
            "rows": rows, "cross_core_round_trip_ns": common.mmm(round_trips)}


def scenario_latency(a):
    exe = os.path.join(a.build, "bench", "latency_bench")
    seconds = 0.2 if a.smoke else 2.0
    out = {}
    for traffic in ("l3", "ina"):
        runs = [latency.run(exe, traffic, seconds) for _ in range(a.repeat)]
        out[traffic] = latency.summarise(runs)
        for ld in out[traffic]["loads"]:
            log("latency %-3s at %3.0f%% of peak (%.2f Mpps): p50 %.2f us, p99 %.2f us, "
                "p99.9 %.2f us" % (traffic, ld["fraction"] * 100, ld["offered_mpps"]["median"],
                                   ld["p50_us"]["median"], ld["p99_us"]["median"],
                                   ld["p999_us"]["median"]))
    return out


def scenario_e2e(a):
    """The quiet run, then the same with one CPU-bound process beside it (issue 10: INA must hold
    its lead over gloo when the hosts have other work)."""
    import e2e_allreduce
    if a.smoke:
        out = e2e_allreduce.measure(a.build, repeat=1, elements=1 << 18, rate_mbit=200, log=log)
        if "methods" in out:
            out["busy"] = e2e_allreduce.measure(a.build, repeat=1, elements=1 << 18,
                                                rate_mbit=200, log=log, busy=1)
        return out
    out = e2e_allreduce.measure(a.build, repeat=a.repeat, elements=a.e2e_elements,
                                rate_mbit=a.e2e_rate_mbit, log=log)
    if "methods" in out:
        out["busy"] = e2e_allreduce.measure(a.build, repeat=a.repeat, elements=a.e2e_elements,
                                            rate_mbit=a.e2e_rate_mbit, log=log, busy=1)
    return out


def scenario_bier(a):
    import bier
    counts, duration = ([2], 1.0) if a.smoke else ([2, 4, 16], 3.0)
    rows = bier.measure(os.path.join(a.build, "src", "app", "inaswitch"), counts, duration,
                        a.repeat, common.hugepages_available(), log=log)
    return {"duration_s": duration, "payload_bytes": bier.PAYLOAD, "bsl": bier.BSL,
            "rows": rows}


def scenario_roce_vm(a):
    import roce_vm
    return roce_vm.measure(a.build, repeat=1 if a.smoke else max(a.repeat, 3),
                           elements=1 << 18, log=log)


def scenario_scale(a):
    import scale
    return scale.measure(os.path.join(a.build, "src", "app", "inaswitch"), a.smoke, log=log)


def goals(res):
    """Each goal of the issues (5, 10, 11, 13, 15): value, target, met."""
    out = []

    def add(name, value, target, better, note="", informational=False):
        # An informational row shows the figure beside a goal's; it is never met or not met.
        met = None if value is None or informational else (
            value >= target if better == "higher" else value <= target)
        out.append({"goal": name, "value": value, "target": target, "better": better,
                    "met": met, "note": note})

    fw = res.get("forwarding", {})
    l3 = next((r for r in fw.get("rows", []) if r["scenario"] == "l3-pcap-null"), None)
    add("L3 forwarding / testpmd mac (64 B, 1 core)", l3 and l3["ratio_median"], 0.8, "higher")
    ag = res.get("aggregation", {})
    g = next((r for r in ag.get("rows", []) if (r["payload_bytes"], r["type"], r["workers"]) ==
              aggregation.GOAL), None)
    add("INA 1 KiB fp32 x 8 workers / testpmd io (1 core)", g and g["ratio"],
        aggregation.GOAL_RATIO, "higher", "issue 15")
    base = ag.get("baseline")
    add("INA 1 KiB fp32 x 8 workers, rate / the rate before issue 10's work (same run)",
        base and base["ratio"], 1.0, "higher",
        "issue 10; %s's ina_bench alternating with this tree's, CPU time" % base["rev"] if base
        else "issue 10; measured with --baseline-tree (an a6312c6 checkout, built)")
    add("... the same with the partials' UDP checksums offloaded (a NIC with TX checksum "
        "offload)", base and base.get("ratio_offload"), 1.0, "higher",
        "issue 10; the baseline computed no checksum")
    for r in res.get("roce", {}).get("rows", []):
        if r.get("role", "root") != aggregation.ROCE_GOAL_ROLE:
            continue  # the root pair is reported beside it, the goal is the aggregators'
        add("RoCE / INA aggregation, aggregator vs aggregator, %d B fp32 x %d ranks (1 core)" % (
            r["payload_bytes"], r["ranks"]), r["ratio"], aggregation.ROCE_GOAL, "higher",
            "issue 11")
    sc = res.get("scaling", {})
    two = next((r for r in sc.get("rows", []) if r["steer"] == "chunk" and r["lcores"] == 2 and
                r.get("input", "cpu") == "cpu"), None)
    add("aggregation: 2 lcores / 1 lcore", two and two["speedup"], 1.8, "higher",
        "chunk-steered input")
    handoff = next((r for r in sc.get("rows", []) if r["steer"] == "handoff" and
                    r["lcores"] == 2 and r.get("input", "cpu") == "cpu"), None)
    add("aggregation: 2 lcores / 1 lcore, input by worker + hand-off", handoff and
        handoff["speedup"], 1.8, "higher", "issue 15: input hashed by address, as RSS spreads it")
    lat = res.get("latency", {}).get("l3")
    p99 = None
    if lat:
        at50 = next((x for x in lat["loads"] if abs(x["fraction"] - 0.5) < 1e-6), None)
        p99 = at50 and at50["p99_us"]["median"]
    add("p99 added latency per hop at 50 % of peak (us)", p99, 10.0, "lower", "64 B L3")
    e2e = res.get("e2e", {})
    add("e2e: INA time / gloo ring time", e2e.get("ina_over_gloo"), 0.75, "lower")
    add("e2e, one CPU-busy process beside: INA time / gloo ring time",
        e2e.get("busy", {}).get("ina_over_gloo"), 0.75, "lower")
    add("e2e: INA time / ina-ps time", e2e.get("ina_over_ps"), 0.5, "lower")
    sc = res.get("scale", {})
    ro = sc.get("routes", {})
    native = ro.get("native_client", {})
    add("route add/delete through the API, single requests, C++ client (changes/s)",
        native.get("clients_1", {}).get("changes_per_s"), 10000, "higher",
        "issue 13; one keep-alive connection, each request waits for its answer; %s routes in "
        "the table; in place" % ro.get("routes"))
    add("route add/delete through the API, single requests, 4 C++ clients (changes/s)",
        native.get("clients_4", {}).get("changes_per_s"), 10000, "higher",
        "issue 13; 4 concurrent keep-alive connections (route agents); %s routes" % ro.get("routes"))
    add("route add/delete through the API, single requests, Python client (changes/s)",
        ro.get("api_routes_per_s"), 10000, "higher",
        "issue 13; informational: http.client costs %s us CPU per request itself" %
        ro.get("python_client_cpu_us_per_change"), informational=True)
    add("route add/delete through the API, batches of 1000 (changes/s)",
        ro.get("batch_routes_per_s"), 10000, "higher",
        "issue 13; %s routes in the table; in place" % ro.get("routes"))
    add("worst RX stall the switch causes during host arrivals (us, bucket bound)",
        sc.get("worst_rx_stall_us_le"), 100, "lower",
        "issue 13; a loop iteration's own time, iterations the kernel switched the worker out "
        "excluded (lcore_loop_work); interrupts and hypervisor steal stay in it")
    add("worst raw poll gap during host arrivals (us, bucket bound)",
        sc.get("worst_rx_stall_raw_us_le"), 100, "lower",
        "informational; all causes, the shared machine's preemption included",
        informational=True)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="short runs: check it works (CI)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per figure (min/median/max)")
    ap.add_argument("--build", default=default_build(), help="meson build directory")
    ap.add_argument("--out", help="JSON result file (default bench/results/run-<time>.json)")
    ap.add_argument("--doc", help="report to write (default docs/performance.md; with --smoke, "
                                  "or --only without --merge, only when given)")
    ap.add_argument("--only", help="comma-separated scenarios (default: all)")
    ap.add_argument("--baseline-tree", help="aggregation: an earlier checkout with a built "
                    "build/bench/ina_bench, run alternating with this tree's at the goal point "
                    "(issue 10's 'not worse': a6312c6)")
    ap.add_argument("--e2e-elements", type=int, default=16 << 20, help="fp32 elements (64 MiB)")
    ap.add_argument("--e2e-rate-mbit", type=int, default=200, help="tbf rate of every link")
    ap.add_argument("--profile", help="JSON of profiles (bench/profile.py) to include")
    ap.add_argument("--merge", help="an earlier result file: keep its other scenarios, replace "
                                    "the ones run now (noted in the file)")
    a = ap.parse_args()
    if a.smoke:
        a.repeat = 1
    only = a.only.split(",") if a.only else SCENARIOS
    for s in only:
        if s not in SCENARIOS:
            ap.error("unknown scenario %s (one of %s)" % (s, ", ".join(SCENARIOS)))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = a.out or os.path.join(ROOT, "bench", "results", "run-%s.json" % stamp)
    # A partial run rewrites the committed page (and docs/perf/results.json) only on top of the
    # results it merges: alone it would drop every scenario it did not run.
    partial = a.only is not None and not a.merge
    doc = a.doc or (None if a.smoke or partial else os.path.join(ROOT, "docs", "performance.md"))
    if partial and not a.doc and not a.smoke:
        log("docs/performance.md is left as it is: --only without --merge (add --merge "
            "docs/perf/results.json to update it, or --doc FILE)")
    env = common.environment()
    env.update({"repeat": a.repeat, "smoke": a.smoke, "build": os.path.relpath(a.build, ROOT),
                "date": datetime.datetime.now().isoformat(timespec="seconds")})
    log("bench: %s, %d cores%s, DPDK %s, hugepages %s, repeat %d%s" % (
        env["cpu"], env["cores"], " (VM)" if env["virtual_machine"] else "", env["dpdk"],
        "on" if env["hugepages"] else "off", a.repeat, ", SMOKE" if a.smoke else ""))
    res = {"environment": env}
    if a.merge:
        with open(a.merge) as f:
            res = json.load(f)
        res["environment"]["rerun"] = {"scenarios": only, "date": env["date"],
                                       "loadavg_at_start": env["loadavg_at_start"]}
        env = res["environment"]
    failed = []
    for s in only:
        log("== %s" % s)
        t0 = time.monotonic()
        try:
            res[s] = globals()["scenario_" + s.replace("-", "_")](a)
        except Exception as e:  # noqa: BLE001 - record it, run the others
            traceback.print_exc()
            res[s] = {"error": "%s: %s" % (type(e).__name__, e)}
            failed.append(s)
        res[s]["elapsed_s"] = round(time.monotonic() - t0, 1)
        if res[s].get("skipped"):
            log("%s skipped: %s" % (s, res[s]["skipped"]))
    if a.merge:
        env["rerun"]["loadavg_at_end"] = os.getloadavg()[0]
    else:
        env["loadavg_at_end"] = os.getloadavg()[0]
    if a.profile:
        with open(a.profile) as f:
            res["profiles"] = json.load(f)
    res["goals"] = goals(res)
    for g in res["goals"]:
        if g["value"] is None:
            continue
        log("goal %-50s %8.3f (target %s %.2f): %s" % (
            g["goal"], g["value"], ">=" if g["better"] == "higher" else "<=", g["target"],
            "informational" if g["met"] is None else "met" if g["met"] else "NOT MET"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    log("wrote " + out)
    if doc:
        import report
        src = os.path.relpath(out, ROOT) if out.startswith(ROOT) else out
        if os.path.abspath(doc) == os.path.join(ROOT, "docs", "performance.md"):
            # The page in the repository cites a result file in the repository too
            # (bench/results/ is not committed).
            kept = os.path.join(ROOT, "docs", "perf", "results.json")
            os.makedirs(os.path.dirname(kept), exist_ok=True)
            with open(kept, "w") as f:
                json.dump(res, f, indent=1)
            src = os.path.relpath(kept, ROOT)
        report.write(res, doc, src)
        log("wrote " + doc)
    if failed:
        log("FAILED: " + ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
