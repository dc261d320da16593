# SPDX-License-Identifier: Apache-2.0
"""Writes docs/performance.md (and its PNG plots beside it, in perf/) from a bench/run.py result.
Hand-written analysis (profiles, what limits each figure) comes from bench/notes.md, so a new
run regenerates the numbers without losing it.

    /usr/bin/python3 bench/report.py bench/results/run-XXXX.json [--doc docs/performance.md]
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NOTES = os.path.join(HERE, "notes.md")


def f(x, nd=2):
    return "–" if x is None else ("%.*f" % (nd, x))


def mmm_txt(m, nd=2):
    if not m:
        return "–"
    return "%s / **%s** / %s" % (f(m["min"], nd), f(m["median"], nd), f(m["max"], nd))


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def _err(m):
    return [[m["median"] - m["min"]], [m["max"] - m["median"]]]


def plot_forwarding(plt, res, path):
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, r in enumerate(rows):
        a, b = r["inaswitch_mpps"], r["testpmd_mac_mpps"]
        ax.bar(i - 0.2, a["median"], 0.4, yerr=_err(a), color="tab:blue", capsize=3,
               label="inaswitch" if i == 0 else None)
        ax.bar(i + 0.2, b["median"], 0.4, yerr=_err(b), color="tab:gray", capsize=3,
               label="testpmd mac" if i == 0 else None)
        ax.text(i, max(a["max"], b["max"]) * 1.03, "%.2fx" % r["ratio_median"], ha="center")
    ax.set_xticks(range(len(rows)), [r["scenario"] for r in rows])
    ax.set_ylabel("Mpps, 1 core")
    ax.set_title("Forwarding per core (64 B), median and min-max")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_aggregation(plt, res, path):
    rows = res["rows"]
    payloads = sorted({r["payload_bytes"] for r in rows})
    types = sorted({r["type"] for r in rows})
    fig, axes = plt.subplots(1, len(payloads), figsize=(4 * len(payloads), 3.4), squeeze=False)
    for ax, p in zip(axes[0], payloads):
        ceiling = None
        for t in types:
            pts = sorted(((r["workers"], r) for r in rows if r["payload_bytes"] == p and
                          r["type"] == t and not r.get("deterministic") and
                          not r.get("udp_checksum")),
                         key=lambda wr: wr[0])
            if not pts:
                continue
            xs = [w for w, _ in pts]
            ys = [r["mpps"]["median"] for _, r in pts]
            lo = [r["mpps"]["median"] - r["mpps"]["min"] for _, r in pts]
            hi = [r["mpps"]["max"] - r["mpps"]["median"] for _, r in pts]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=t)
            ceiling = pts[0][1]["testpmd_io_mpps"]["median"]
        if ceiling:
            ax.axhline(ceiling, color="gray", ls="--", label="testpmd io")
            ax.axhline(ceiling * 0.5, color="gray", ls=":", label="0.5 x testpmd io")
        ax.set_xscale("log", base=2)
        ax.set_xticks([2, 4, 8, 32], ["2", "4", "8", "32"])
        ax.set_xlabel("workers per chunk")
        ax.set_title("%d B payload" % p)
        ax.set_ylim(bottom=0)
    axes[0][0].set_ylabel("contributions absorbed, Mpps (1 core)")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scaling(plt, res, path):
    rows = res["rows"]
    fig, ax = plt.subplots(figsize=(3 + len(rows), 3))
    for i, r in enumerate(rows):
        ax.bar(i, r["mpps"]["median"], 0.6, yerr=_err(r["mpps"]), capsize=3,
               color="tab:orange" if r.get("input") == "nic" else "tab:blue")
        ax.text(i, r["mpps"]["max"] * 1.03, "x%.2f" % r["speedup"], ha="center")
    one = rows[0]["mpps"]["median"]
    ax.axhline(one * 1.8, color="gray", ls=":", label="goal: 1.8 x one lcore (CPU-written input)")
    ax.set_xticks(range(len(rows)), [r["mode"].replace(", ", ",\n") for r in rows], fontsize=8)
    ax.set_ylabel("Mpps (1 KiB fp32, 8 workers)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(plt, res, path):
    fig, axes = plt.subplots(1, len(res), figsize=(5 * len(res), 3.2), squeeze=False)
    for ax, (traffic, r) in zip(axes[0], res.items()):
        labels = ["p50", "p99", "p99.9"]
        for j, ld in enumerate(r["loads"]):
            vals = [ld["p50_us"]["median"], ld["p99_us"]["median"], ld["p999_us"]["median"]]
            ax.bar([k + (j - 0.5) * 0.4 for k in range(3)], vals, 0.4,
                   label="%.0f %% of peak" % (ld["fraction"] * 100))
        ax.axhline(10, color="gray", ls=":", label="goal p99 <= 10 us at 50 %")
        ax.set_yscale("log")
        ax.set_xticks(range(3), labels)
        ax.set_ylabel("added latency, us")
        ax.set_title("%s (%s)" % (traffic, "64 B routed" if traffic == "l3" else
                                  "chunk: last contribution in -> partial out"), fontsize=9)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_e2e(plt, res, path):
    ms = res["methods"]
    names = list(ms)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for i, m in enumerate(names):
        secs = ms[m]["seconds"]
        med = ms[m]["median_s"]
        ax.bar(i, med, 0.6, yerr=[[med - min(secs)], [max(secs) - med]], capsize=3,
               color="tab:blue" if m == "ina" else "tab:gray")
        ax.plot([i - 0.3, i + 0.3], [ms[m]["bound_s"]] * 2, color="black", ls="--",
                label="link bound" if i == 0 else None)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("completion time, s")
    ax.set_title("AllReduce %d MiB fp32, %d workers, links %d Mbit/s" % (
        res["tensor_bytes"] >> 20, res["workers"], res["rate_mbit"]), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def section_goals(res):
    out = ["| goal | measured | target | |", "| --- | --- | --- | --- |"]
    for g in res.get("goals", []):
        verdict = "–" if g["met"] is None else ("**met**" if g["met"] else "**not met**")
        out.append("| %s | %s | %s %s | %s |" % (
            g["goal"], f(g["value"], 3), "≥" if g["better"] == "higher" else "≤", g["target"],
            verdict))
    return out


def write(res, doc, result_path):
    docdir = os.path.dirname(os.path.abspath(doc))
    imgdir = os.path.join(docdir, "perf")
    os.makedirs(imgdir, exist_ok=True)
    plt = _plt()
    env = res["environment"]
    L = ["<!-- SPDX-License-Identifier: Apache-2.0 -->",
         "<!-- Generated by bench/run.py (bench/report.py) from %s; edit bench/notes.md for the "
         "analysis. -->" % result_path,
         "# Performance", "",
         "Every figure below is a ratio against a ceiling measured **in the same run** on the same "
         "machine and input, from `/usr/bin/python3 bench/run.py` (the result file: `%s`). "
         "How each is measured: `bench/README.md`; traffic profiles for NIC testbeds: "
         "`docs/benchmarking.md`." % result_path, "",
         "**Machine:** %s, %d cores%s, kernel %s; DPDK %s; hugepages %s; %d run(s) per figure, "
         "shown as min / **median** / max; run %s. Load average %.1f at the start, %.1f at the "
         "end: the machine is shared with other jobs (builds and tests), so single runs are "
         "noisy and medians are what to compare." % (
             env["cpu"], env["cores"], " (virtual machine)" if env.get("virtual_machine") else "",
             env.get("kernel", "?"), env["dpdk"], "on" if env["hugepages"] else
             "off (`--no-huge`, 4 KiB pages)", env["repeat"], env["date"],
             env.get("loadavg_at_start", 0), env.get("loadavg_at_end", 0)), ""]
    if env.get("rerun"):
        rr = env["rerun"]
        L += ["The %s scenario(s) come from a re-run on %s (load average %.1f → %.1f) merged "
              "into this result file (`bench/run.py --merge`)." % (
                  ", ".join(rr["scenarios"]), rr["date"], rr.get("loadavg_at_start", 0),
                  rr.get("loadavg_at_end", 0)), ""]
    if env.get("smoke"):
        L += ["**SMOKE RUN: these figures only show that the scenarios run.**", ""]
    L += ["## Goals", ""] + section_goals(res) + [""]

    fw = res.get("forwarding")
    if fw and "rows" in fw:
        L += ["## Forwarding per core vs `dpdk-testpmd --forward-mode=mac`", "",
              "64 B IPv4/UDP frames, one forwarding lcore each, %.1f s per run after warm-up. "
              "`l3-pcap-null`: 1000 frames to 200 destinations replayed from memory (`net_pcap`, "
              "`infinite_rx=1`) into the full L3 path, out to `net_null`. `l2-null-null`: "
              "`net_null` to `net_null` in one L2 group (flooding). `net_null` generates all-zero "
              "frames (or, without copy, whatever the mbuf held), which no L3 path can route, so "
              "the L3 input is the pcap PMD's in-memory replay; both sides run on the same vdevs."
              % fw["duration_s"], "",
              "| scenario | inaswitch Mpps | testpmd mac Mpps | ratio (medians) |",
              "| --- | --- | --- | --- |"]
        for r in fw["rows"]:
            L.append("| `%s` | %s | %s | **%.2f** |" % (r["scenario"], mmm_txt(r["inaswitch_mpps"]),
                                                      mmm_txt(r["testpmd_mac_mpps"]),
                                                      r["ratio_median"]))
        if fw.get("l3_pipeline_alone_mpps"):
            L += ["", "The L3 pipeline alone (`ina_bench --l3`: in-process alloc + 64 B copy per "
                  "packet as the pcap PMD does, `process_burst`, `port_tx` to `net_null`; no RX "
                  "PMD, no worker loop): %s Mpps." % mmm_txt(fw["l3_pipeline_alone_mpps"])]
        if plt:
            plot_forwarding(plt, fw, os.path.join(imgdir, "forwarding.png"))
            L += ["", "![forwarding](perf/forwarding.png)"]
        L.append("")
    elif fw:
        L += ["## Forwarding", "", "Not measured: %s" % fw.get("error", fw.get("skipped")), ""]

    ag = res.get("aggregation")
    if ag and "rows" in ag:
        rows = ag["rows"]
        L += ["## INA aggregation per core vs `dpdk-testpmd --forward-mode=io`", "",
              "`bench/ina_bench`: one lcore runs the real pipeline (eth_input, ina_input with "
              "the job's chunk table and the %s kernels, routing, port_tx to a `net_null` port) "
              "on contributions from an in-process generator (alloc + copy per packet, as the "
              "pcap PMD's replay does for testpmd); every N-th contribution completes a chunk "
              "and a partial result leaves. Ceiling: testpmd io replaying a pcap of the same "
              "frames (8 workers) from memory to `net_null`. The generator's datagrams carry no UDP "
              "checksum (0), so the switch verifies none, as when a NIC's RX offload did; the row "
              "marked *UDP checksums verified in software* is the goal point with checksummed "
              "datagrams, as `ina-worker`'s arrive over af_packet / af_xdp. %.1f s per run." % (
                  rows[0]["isa"], ag["seconds"]), ""]
        payloads = sorted({r["payload_bytes"] for r in rows})
        for p in payloads:
            pr = [r for r in rows if r["payload_bytes"] == p]
            L += ["**%d B payload** — testpmd io: %s Mpps" % (p, mmm_txt(pr[0]["testpmd_io_mpps"])),
                  "", "| type | workers | Mpps | payload Gbit/s | Gelem/s absorbed | ratio |",
                  "| --- | --- | --- | --- | --- | --- |"]
            for r in pr:
                mode = (" (deterministic)" if r.get("deterministic") else
                        " (UDP checksums verified in software)" if r.get("udp_checksum") else "")
                L.append("| %s%s | %d | %s | %s | %s | %.2f |" % (
                    r["type"], mode, r["workers"], mmm_txt(r["mpps"]),
                    f(r["payload_gbit_s"]["median"], 1), f(r["gelem_s"]["median"], 3),
                    r["ratio"]))
            L.append("")
        if plt:
            plot_aggregation(plt, ag, os.path.join(imgdir, "aggregation.png"))
            L += ["![aggregation](perf/aggregation.png)", ""]
        base = ag.get("baseline")
        if base:
            L += ["### Against the tree before issue 10's work (%s), same run" % base["rev"], "",
                  "%d B %s × %d workers, each tree's own `ina_bench`, alternating run by run, "
                  "on the lane's CPU time (`cpu_mpps`): this tree %s Mpps, %s %s Mpps: "
                  "**%.3f**." % (base["payload_bytes"], base["type"], base["workers"],
                                 mmm_txt(base["cpu_mpps"]), base["rev"],
                                 mmm_txt(base["baseline_cpu_mpps"]), base["ratio"]), ""]
            if base.get("ratio_offload") is not None:
                L += ["The baseline sent its partials without a UDP checksum; this tree computes "
                      "one. With the ports standing for NICs that compute it on send "
                      "(`--tx-checksum-offload`, docs/protocol.md \"Checksum offload\"): %s Mpps, "
                      "**%.3f**." % (mmm_txt(base["offload_cpu_mpps"]), base["ratio_offload"]),
                      ""]
        limit = ag.get("limit")
        if limit:
            L += ["### The physical limit: the memory ceiling per cache regime", "",
                  "The 1 KiB fp32 × 8 workers job on one lcore with its window set so that its "
                  "slots (window × 1 KiB) live in each level of the memory hierarchy, beside "
                  "`bench/membw_bench`: one thread running the same reduction kernels over the "
                  "same working set in the chunk table's order (one copy + 7 adds per chunk, the "
                  "packets hot), alternating run by run. *Ceiling*: contributions/s that mix "
                  "sustains; *fraction*: the switch's rate over it. A 100 GbE port at line rate "
                  "with 1 KiB payloads brings %.2f M contributions/s." % (
                      limit[0]["line_rate_100g_mpps"]), "",
                  "| regime | window | working set | INA Mpps | ceiling Mpps | copy GB/s | "
                  "add GB/s | reduced GB/s | fraction | ceiling ≥ 100 GbE |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in limit:
                L.append("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    r["regime"], r["window"],
                    "%.0f KiB" % (r["working_set_bytes"] / 1024)
                    if r["working_set_bytes"] < 1 << 20 else
                    "%.0f MiB" % (r["working_set_bytes"] / 2**20),
                    mmm_txt(r["mpps"]), mmm_txt(r["ceiling_mpps"]),
                    f(r["copy_gbyte_s"]["median"], 1), f(r["add_gbyte_s"]["median"], 1),
                    f(r["reduced_gbyte_s"], 2), f(r["fraction"], 3),
                    "yes" if r["ceiling_covers_100g"] else "no"))
            L.append("")
    elif ag:
        L += ["## INA aggregation", "", "Not measured: %s" % ag.get("error"), ""]

    ro = res.get("roce")
    if ro and "rows" in ro:
        rows = ro["rows"]
        n = rows[0]["ranks"]
        goal_ratio = next((r["goal"] for r in rows if r.get("goal")), None)
        L += ["## RoCEv2 server-to-switch aggregation per core vs the UDP INA path", "",
              "`bench/ina_bench --roce`: one lcore runs the real pipeline with the RoCE feature "
              "registered as the switch registers it and an `rdma:` job of %d ranks with static "
              "QPs; each contribution is a WRITE_ONLY_WITH_IMM with a valid ICRC (copied from a "
              "ring of frames built ahead, alloc + copy per packet as for INA), verified and "
              "aggregated. Beside it `ina_bench` (UDP INA, %d workers, same payload) **in the same "
              "place of the tree** (`--role`), so each pair does the same job:" % (n, n), "",
              "- **aggregator vs aggregator** (the issue 11 goal, ≥ %.1f: \"the ICRC must not "
              "halve the rate\"): INA sends one partial per chunk to its parent. The RoCE job "
              "(`role: aggregator`) sends one INA partial to its parent too; the generator "
              "answers each partial with the parent's INA result (frames built ahead; alloc, "
              "copy and processing measured), the switch writes it to the %d ranks (%d result "
              "WRITEs, ICRC over the payload) and processes their ACKs, without which its slots "
              "never release. The goal's RoCE figure (*RoCE Mpps*) is the **way up alone**: the "
              "time of the contribution bursts (alloc, copy, verify, aggregate, the partial out), "
              "the work INA's aggregator row measures. *RoCE with the way down* adds the time of "
              "the parent's results, the %d WRITEs each becomes and the ACKs (1 result in, %d "
              "WRITEs out, ACKs in per chunk); an INA aggregator's way down (the root's result "
              "passing as BIER copies) is in no row here." % (goal_ratio or 0.8, n, n, n, n), "",
              "- **root vs root**: the RoCE root job writes every chunk's result to the %d ranks "
              "(%d WRITEs with ICRC, ACKs processed); the INA root (`results: unicast`, %d "
              "`workers`) sends %d result datagrams. No goal: it shows what delivering the result "
              "costs each path." % (n, n, n, n), "",
              "Building the ACKs and the frame rings is excluded from RoCE's time, processing the "
              "ACKs is not. %s The INA and RoCE runs of a pair alternate run by run; %d runs each "
              "of %.1f s, figures are min / **median** / max, the ratio is of the medians. The "
              "machine was busy with other builds and tests (load average per row: median of the "
              "values sampled before each pair of runs)." % (
                  "Rates are per second of the thread's CPU time (INA's `cpu_mpps`; RoCE's time "
                  "inside the measured bursts times the thread's share of the run, `cpu_up_mpps` "
                  "/ `cpu_mpps`), which the neighbours' load moves far less than wall time; the "
                  "wall-time ratio is shown beside." if rows[0].get("time") == "cpu" else
                  "Rates are per second of wall time.",
                  rows[0]["roce_mpps"]["n"], ro["seconds"]), "",
              "| pair | payload | RoCE Mpps | RoCE with the way down | INA Mpps | RoCE / INA "
              "(medians) | RoCE / INA, paired runs | RoCE / INA, wall time | RoCE with the way "
              "down / INA | goal ≥ %.1f | INA with UDP checksums Mpps | RoCE / INA with UDP "
              "checksums | RoCE / INA, NIC-like input | load |" % (goal_ratio or 0.8),
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
              "| --- |"]
        for r in rows:
            role = r.get("role", "root")
            goal = ("–" if r.get("met") is None else "**met**" if r["met"] else "**not met**")
            down = role == "aggregator" and "roce_full_mpps" in r
            L.append("| %s | %d B | %s | %s | %s | **%.2f** | %s | %s | %s | %s | %s | %s | %s "
                     "| %s |" % (
                "%s vs %s" % (role, "aggregator" if "role" not in r else role),
                r["payload_bytes"], mmm_txt(r["roce_mpps"]),
                mmm_txt(r["roce_full_mpps"]) if down else "–", mmm_txt(r["ina_mpps"]), r["ratio"],
                mmm_txt(r["pair_ratio"]) if r.get("pair_ratio") else "–",
                "%.2f" % r["wall_ratio"] if r.get("wall_ratio") is not None else "–",
                "%.2f" % r["full_ratio"] if down else "–", goal,
                mmm_txt(r["ina_csum_mpps"]) if r.get("ina_csum_mpps") else "–",
                "%.2f" % r["csum_ratio"] if r.get("csum_ratio") is not None else "–",
                "%.2f" % r["nic_ratio"] if r.get("nic_ratio") is not None else "–",
                f(r["loadavg"]["median"], 1)))
        L += ["", "*Paired runs*: each RoCE run over the INA run just before it (min / median / "
              "max), which cancels load changes between pairs; the goal is judged on the ratio of "
              "the medians of the aggregator pair, against INA datagrams without a UDP checksum "
              "(the switch verifies none, as when a NIC's RX offload did) while every RoCE "
              "packet's ICRC is verified in software. *INA with UDP checksums*: the same INA run "
              "with checksummed datagrams the switch verifies in software (ina-worker's over "
              "af_packet / af_xdp): the like-for-like pair, shown, not the goal. *NIC-like "
              "input*: both from pools whose buffers already hold the frame, only the headers "
              "(and RoCE's ICRC) written per packet, as a NIC's DMA leaves them (`ina_bench "
              "--input nic`): neither pays the generator's copy of the payload."]
        det = [r for r in rows if r.get("roce_det_mpps")]
        if det:
            L += ["", "*Deterministic mode* (`deterministic: true`: exact int64 fixed-point "
                  "slots, docs/rdma.md \"Deterministic mode\"), the root job, Mpps per CPU "
                  "second: " + "; ".join("%d B %s (%.2f of the default)" % (
                      r["payload_bytes"], mmm_txt(r["roce_det_mpps"]), r["det_of_default"])
                      for r in det) + "."]
        L.append("")
        if ro.get("s2s_rows"):
            rows = ro["s2s_rows"]
            L += ["### Server-to-server absorb + ACK per core vs server-to-switch", "",
                  "`bench/ina_bench --s2s`: an `rdma_s2s` job of %d static worker → root "
                  "connections; each contribution is a WRITE_ONLY_WITH_IMM toward the root "
                  "(ICRC verified), absorbed into the chunk's slot and ACKed to its worker as "
                  "the root would (one coalesced ACK per connection per burst); one aggregated "
                  "WRITE per chunk leaves for the root on the carrier connection, and the "
                  "root's ACKs (built outside the measured time, processed inside it) release "
                  "the slots. The root's result WRITEs pass the switch as forwarded traffic and "
                  "are not in this figure. Beside it the server-to-switch root job "
                  "(`--roce --role root`: the same contributions, the result written to the "
                  "%d ranks and their ACKs processed). Runs alternate; %d each of %.1f s; "
                  "contributions per second of switch time." % (
                      rows[0]["ranks"], rows[0]["ranks"], rows[0]["s2s_mpps"]["n"],
                      ro["seconds"]), "",
                  "| payload | server-to-server Mpps | server-to-switch (root) Mpps | ratio "
                  "(medians) | paired runs | switch frames per contribution (ACKs + "
                  "aggregates) | load |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
            for r in rows:
                L.append("| %d B | %s | %s | **%.2f** | %s | %.3f + %.3f | %s |" % (
                    r["payload_bytes"], mmm_txt(r["s2s_mpps"]), mmm_txt(r["s2switch_mpps"]),
                    r["ratio"], mmm_txt(r["pair_ratio"]), r["acks_per_contribution"],
                    r["aggregates_per_contribution"], f(r["loadavg"]["median"], 1)))
            L.append("")
        if ro.get("multipacket_rows"):
            rows = ro["multipacket_rows"]
            L += ["### Multi-packet chunks (server-to-switch root)", "",
                  "`bench/ina_bench --roce --role root --pmtu P`: the root job of %d ranks with "
                  "chunks above the job's PMTU, each rank's contribution a multi-packet WRITE "
                  "(FIRST with the RETH, MIDDLE, LAST_WITH_IMM; every packet's ICRC verified, "
                  "the payload staged per QP and reduced once the LAST arrives) and each result "
                  "a multi-packet WRITE back; beside it the same chunk in one packet and 1 KiB "
                  "chunks in one packet (the segments' size). Runs alternate; %d each of %.1f s; "
                  "rates per second of switch time." % (
                      rows[0]["ranks"], rows[0]["mpps"]["n"], ro["seconds"]), "",
                  "| case | PMTU | packets Mpps | contributions M/s | payload Gbit/s | load |",
                  "| --- | --- | --- | --- | --- | --- |"]
            for r in rows:
                L.append("| %s | %d | %s | %s | %s | %s |" % (
                    r["case"], r["pmtu"], mmm_txt(r["mpps"]), mmm_txt(r["contributions_mpps"]),
                    mmm_txt(r["payload_gbit_s"]), f(r["loadavg"]["median"], 1)))
            L.append("")
    elif ro:
        L += ["## RoCEv2 aggregation", "", "Not measured: %s" % ro.get("error"), ""]

    rv = res.get("roce-vm")
    if rv and "rows" in rv:
        L += ["## RoCEv2 server-to-server AllReduce between rxe VMs, with and without the switch "
              "aggregating", "",
              "`bench/roce_vm.py`: Debian's kernel with `rdma_rxe` in qemu VMs under TCG (no KVM; "
              "tests/roce_vm's lab): a root VM running `ina-rdma-root` and %d worker VMs running "
              "`ina-rdma-worker --mode server-to-server`, inaswitch on the host routing between "
              "their taps. The same command AllReduces %d KiB of int32 per worker in %d B chunks "
              "**with** the switch aggregating (an `rdma_s2s` job learning the connections from "
              "the RDMA CM exchange: the root gets one WRITE per chunk) and **without** (the job "
              "reloaded away: the switch forwards, the root reduces world × chunks WRITEs). "
              "After one unmeasured round, rounds alternate, %d of each, every result checked "
              "bit-exact; the VMs are slow, "
              "the ratio is what counts." % (rv["world"], rv["bytes_per_worker"] // 1024,
                                             rv["chunk_bytes"], rv["repeat"]), "",
              "| mode | wall s (min / median / max) | the root's contribution WRITEs per round |",
              "| --- | --- | --- |"]
        for r in rv["rows"]:
            L.append("| %s | %s | %s |" % (r["mode"], mmm_txt(r["wall_s"]),
                                           ", ".join(str(x) for x in r["root_contribution_writes"])))
        L += ["", "With / without: **%.2f** (medians; VM boot %.0f s, load average %s)." % (
            rv["ratio"], rv["boot_s"], f(rv["loadavg"]["median"], 1)), ""]
    elif rv:
        L += ["## RoCEv2 server-to-server AllReduce between rxe VMs", "",
              "Not measured: %s" % rv.get("error"), ""]

    sc = res.get("scaling")
    if sc and "rows" in sc:
        L += ["## Scaling from 1 to 2 lcores (aggregation)", "",
              "%d B fp32, %d workers, `ina_bench --lcores 1|2`. *chunk-steered*: each lcore's "
              "input holds only the chunks it owns (what RSS on a per-chunk UDP source port would "
              "deliver); *by worker + hand-off*: each lcore receives half of the workers (RSS on "
              "addresses) and passes contributions to chunks the other lcore owns over the "
              "switch's SPSC hand-off ring, as `ina_input` does. *NIC-like input* (`--input "
              "nic`): the generator writes only a frame's headers; its payload was written "
              "before the run into a lane's own ring of mbufs (~4 MiB, cycled FIFO: beyond the "
              "cores' L2, inside the LLC), so it is in no core's private cache when the switch "
              "reads it, as after a NIC's DMA; each input's speedups are over its own 1-lcore "
              "row." % (
                  sc["payload_bytes"], sc["workers"]), "",
              "| mode | Mpps | speedup (medians) |", "| --- | --- | --- |"]
        for r in sc["rows"]:
            L.append("| %s | %s | **%.2f** |" % (r["mode"], mmm_txt(r["mpps"]), r["speedup"]))
        rt = sc.get("cross_core_round_trip_ns")
        if rt:
            L += ["", "A cache line's round trip between the two CPUs, measured before each round: "
                  "%s ns. On this VM it is ~200 ns while the hypervisor keeps the two vCPUs "
                  "close and ~590 ns when it places them apart; the hand-off rows run at ~17 Mpps "
                  "then (chunk-steered input does not move), so a figure taken at ~590 ns says "
                  "where the vCPUs were, not what the code does (bench/notes.md, session 17)." %
                  mmm_txt(rt, 0)]
        if plt:
            plot_scaling(plt, sc, os.path.join(imgdir, "scaling.png"))
            L += ["", "![scaling](perf/scaling.png)"]
        L.append("")
    elif sc:
        L += ["## Scaling", "", "Not measured: %s" % sc.get("error"), ""]

    lat = res.get("latency")
    if lat and "l3" in lat:
        L += ["## Added latency per hop", "",
              "`bench/latency_bench`: the switch's own worker loop (`worker_main`: RX burst, "
              "pipeline, TX buffers sent when full, when the RX queues drain, or at the %d µs drain timer) on one lcore between two "
              "`net_ring` ports; on the other lcore a paced generator stamps the TSC into each "
              "frame as it lands in the RX ring and a collector reads the TSC when the frame "
              "leaves the TX ring. The peak is measured first (generator unpaced), then each "
              "load is a fraction of it. *Floor*: the same generator and collector joined by one "
              "ring, no switch." % lat["l3"]["tx_drain_us"], "",
              "| traffic | load | offered Mpps | p50 µs | p99 µs | p99.9 µs | max µs |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
        for traffic, r in lat.items():
            if not isinstance(r, dict) or "loads" not in r:
                continue
            L.append("| %s | floor | %s | %s | %s | %s | %s |" % (
                traffic, f(r["floor"]["offered_mpps"]["median"]),
                f(r["floor"]["p50_us"]["median"]), f(r["floor"]["p99_us"]["median"]),
                f(r["floor"]["p999_us"]["median"]), f(r["floor"]["max_us"]["median"], 1)))
            for ld in r["loads"]:
                L.append("| %s | %.0f %% of %s Mpps | %s | %s | %s | %s | %s |" % (
                    traffic, ld["fraction"] * 100, f(r["peak_in_mpps"]["median"]),
                    f(ld["offered_mpps"]["median"]), mmm_txt(ld["p50_us"]),
                    mmm_txt(ld["p99_us"]), mmm_txt(ld["p999_us"]),
                    f(ld["max_us"]["median"], 1)))
        jit = lat["l3"].get("jitter")
        if jit:
            L += ["", "**The vCPU itself** (a TSC spin on the switch's lcore before each run, "
                  "every gap > 2 µs counted): %s interruptions/s, median %s µs, p99 %s µs, "
                  "max %s µs; %s %% of the lcore's time lost (medians of the runs). A frame "
                  "that arrives during a gap waits for it and for the backlog behind it, so the "
                  "share of frames delayed by tens of µs is set by this, not by the pipeline." % (
                      f(jit["gaps_per_s"]["median"], 0), f(jit["gap_p50_us"]["median"], 1),
                      f(jit["gap_p99_us"]["median"], 0), f(jit["gap_max_us"]["median"], 0),
                      f(jit["lost_pct"]["median"], 2))]
        L += ["", "`l3`: 64 B frames routed in→out. `ina`: %d workers' 1 KiB fp32 contributions; "
              "the latency of a chunk is from its last contribution entering to its partial "
              "result leaving (offered Mpps counts contributions)." % lat.get("ina", {}).get(
                  "workers", 8)]
        if plt:
            plot_latency(plt, {k: v for k, v in lat.items() if isinstance(v, dict) and
                               "loads" in v}, os.path.join(imgdir, "latency.png"))
            L += ["", "![latency](perf/latency.png)"]
        L.append("")
    elif lat:
        L += ["## Latency", "", "Not measured: %s" % lat.get("error"), ""]

    e2e = res.get("e2e")
    if e2e and "methods" in e2e:
        L += ["## End to end: AllReduce over shaped links", "",
              "%d MiB fp32 (%d elements) among %d workers in network namespaces, every link "
              "shaped to %d Mbit/s each way with `tc tbf` (burst %d KB, queue %d KB), the switch "
              "on `net_af_packet` ports. INA: the switch is the job's root (%d elements per "
              "packet, window %d). ina-ps: the same workers with a host root on a fifth host "
              "behind the switch, which only routes. gloo: PyTorch %s `all_reduce` (ring) among "
              "the workers, the switch routing (no INA job). Completion: the slowest worker. "
              "Bound: payload bytes over the link rate (INA S/R, ring 2(N-1)/N·S/R, host root "
              "N·S/R); headers add ~5 %% (INA) and ~4.5 %% (TCP)." % (
                  e2e["tensor_bytes"] >> 20, e2e["elements"], e2e["workers"], e2e["rate_mbit"],
                  e2e["tbf"]["burst_kb"], e2e["tbf"]["limit_kb"], e2e["chunk_elements"],
                  e2e["window"], e2e["methods"].get("gloo", {}).get("runs", [{}])[0].get(
                      "torch", "?")), "",
              "| method | completion s | link bound s | time / bound |",
              "| --- | --- | --- | --- |"]
        for m, r in e2e["methods"].items():
            L.append("| %s | %s | %.2f | %.2f |" % (
                m, mmm_txt({"min": min(r["seconds"]), "median": r["median_s"],
                            "max": max(r["seconds"])}), r["bound_s"], r["to_bound"]))
        L += ["", "INA / gloo: **%s** (goal ≤ 0.75); INA / ina-ps: **%s** (goal ≤ 0.5)." % (
            f(e2e.get("ina_over_gloo"), 3), f(e2e.get("ina_over_ps"), 3))]
        busy = e2e.get("busy")
        if busy and "methods" in busy:
            L += ["", "**With one CPU-busy process beside it** (a Python busy loop in the root "
                  "namespace for the whole measurement, %d runs each):" % len(
                      next(iter(busy["methods"].values()))["seconds"]), "",
                  "| method | completion s | link bound s | time / bound |",
                  "| --- | --- | --- | --- |"]
            for m, r in busy["methods"].items():
                L.append("| %s | %s | %.2f | %.2f |" % (
                    m, mmm_txt({"min": min(r["seconds"]), "median": r["median_s"],
                                "max": max(r["seconds"])}), r["bound_s"], r["to_bound"]))
            L += ["", "INA / gloo with a busy neighbour: **%s** (goal ≤ 0.75); INA / ina-ps: "
                  "**%s**." % (f(busy.get("ina_over_gloo"), 3), f(busy.get("ina_over_ps"), 3))]
        if plt:
            plot_e2e(plt, e2e, os.path.join(imgdir, "e2e.png"))
            L += ["", "![e2e](perf/e2e.png)"]
        L.append("")
    elif e2e:
        L += ["## End to end", "", "Not measured: %s" % (e2e.get("error") or e2e.get("skipped")),
              ""]

    bi = res.get("bier")
    if bi and "rows" in bi:
        L += ["## BIER replication per core vs `dpdk-testpmd --forward-mode=io`", "",
              "`bench/bier.py`: RFC 8296 frames (BSL %d, one bit per neighbour) around a %d B "
              "IPv4/UDP payload replayed from memory (`net_pcap` `infinite_rx`); the switch is a "
              "transit BFR, every neighbour behind one `net_null` sink, so each frame leaves as "
              "N copies (a private header mbuf chained to the shared payload). Figure: copies/s "
              "at the sink; ceiling: testpmd io forwarding the same frames once each. %.1f s "
              "per run." % (bi["bsl"], bi["payload_bytes"], bi["duration_s"]), "",
              "| neighbours | copies Mpps | frames in Mpps | testpmd io Mpps | copies / io |",
              "| --- | --- | --- | --- | --- |"]
        for r in bi["rows"]:
            L.append("| %d | %s | %s | %s | %.2f |" % (
                r["neighbours"], mmm_txt(r["copies_mpps"]), mmm_txt(r["packets_in_mpps"]),
                mmm_txt(r["testpmd_io_mpps"]), r["ratio_copies_to_io"]))
        L.append("")
    elif bi:
        L += ["## BIER replication", "", "Not measured: %s" % bi.get("error"), ""]

    sc = res.get("scale")
    if sc and "learning" in sc:
        le, ro = sc["learning"], sc["routes"]
        L += ["## Rack-scale forwarding state (issue 13)", "",
              "`bench/scale.py`: a `net_pcap` port replays ARP requests to the switch from "
              "%d hosts, another frames from %d source MACs, each in a loop; a reload lets the "
              "hosts in (their subnet), another the MACs (the L2 group), and learning is timed "
              "from the reload's answer to the last entry in the in-place tables "
              "(`inaswitch_table_entries`, sampled every 20 ms, so the figures include the "
              "sampling). Every replayed sender repeats at line rate, far above a real host, so "
              "most of its events are refreshes the event ring drops (counted as lost). RSS "
              "after learning includes the reload's new snapshot (a 64 MiB LPM). Then %d routes "
              "through one gateway from the config, and %d single routes added and deleted "
              "through the API on one keep-alive connection, each timed, then %d changes in "
              "batches of %d (`POST /api/v1/routes/batch`): every change is one in-place LPM "
              "operation, no snapshot; then the single requests again from C++ clients "
              "(`bench/api_client`: one keep-alive connection, then 4 concurrent ones). RX "
              "stalls, diffed over the hosts' arrival, over an idle second before it, and over "
              "the route changes: the raw poll gaps (`inaswitch_lcore_poll_gaps_total`), split "
              "into loop iterations the kernel did not switch the worker out of, by their own "
              "time (`inaswitch_lcore_loop_work_total`: the switch's work, plus interrupts and "
              "hypervisor steal, which the guest cannot see per iteration), and those it did "
              "(`inaswitch_lcore_loop_descheduled_total`); a figure is the upper bound of the "
              "highest bucket that moved." % (
                  le["hosts"], le["macs"], ro["routes"], ro["api_changes"],
                  ro.get("batch_changes", 0), ro.get("batch_size", 0)), "",
              "| figure | value |", "| --- | --- |",
              "| neighbours learned | %d in %s s (%s /s) |" % (
                  le["hosts"], f(le["neighbours_learned_s"]), f(le["neighbours_per_s"], 0)),
              "| MACs learned | %d in %s s (%s /s) |" % (
                  le["macs"], f(le["fdb_learned_s"]), f(le["fdb_per_s"], 0)),
              "| snapshots published while learning | %d |" % le[
                  "snapshots_published_while_learning"],
              "| worker events lost / table full | %d / %d |" % (le["events_lost"],
                                                                 le["table_full"]),
              "| RSS before / after learning | %s / %s MiB |" % (
                  f(le["rss_mib_before"], 0), f(le["rss_mib_after"], 0)),
              "| %d routes: start-up / reload | %s s / %s s |" % (
                  ro["routes"], f(ro["start_s"]), f(ro["reload_s"])),
              "| RSS with %d routes | %s MiB |" % (ro["routes"], f(ro["rss_mib"], 0))]
        for label, r in (("%d routes" % ro["routes"], ro),
                         ("%s routes" % (sc.get("routes_small_table") or {}).get("routes"),
                          sc.get("routes_small_table"))):
            if not r or "batch_routes_per_s" not in r:
                continue
            L += ["| %s: API add p50 / p99 (single) | %s / %s ms |" % (
                      label, r["add_ms_p50"], r["add_ms_p99"]),
                  "| %s: API delete p50 / p99 (single) | %s / %s ms |" % (
                      label, r["delete_ms_p50"], r["delete_ms_p99"]),
                  "| %s: API changes, single requests | %s /s (goal ≥ 10,000) |" % (
                      label, f(r["api_routes_per_s"], 0)),
                  "| %s: batch of %d p50 / p99 | %s / %s ms |" % (
                      label, r["batch_size"], r["batch_ms_p50"], r["batch_ms_p99"]),
                  "| %s: API changes, batches | %s /s (goal ≥ 10,000) |" % (
                      label, f(r["batch_routes_per_s"], 0)),
                  "| %s: snapshots published / changes in place | %d / %d |" % (
                      label, r["snapshots_published"], r["changed_in_place"]),
                  "| %s: worst RX stall during the route changes | ≤ %s µs |" % (
                      label, f(r["worst_rx_stall_us_le"], 0))]
        for label, r in (("%d routes" % ro["routes"], ro),
                         ("%s routes" % (sc.get("routes_small_table") or {}).get("routes"),
                          sc.get("routes_small_table"))):
            for k, n in (("clients_1", "1 keep-alive connection"),
                         ("clients_4", "4 concurrent keep-alive connections")):
                c = ((r or {}).get("native_client") or {}).get(k)
                if c:
                    L.append("| %s: API changes, single requests, C++ client, %s | %s /s, p50 %s "
                             "/ p99 %s ms, client CPU %s µs per request |" % (
                                 label, n, f(c["changes_per_s"], 0), c["ms_p50"], c["ms_p99"],
                                 c["client_cpu_us_per_change"]))
            if r and "python_client_cpu_us_per_change" in r:
                L.append("| %s: Python client's own CPU per single request | %s µs |" % (
                    label, r["python_client_cpu_us_per_change"]))
        for what, st in (("while %d hosts arrived" % le["hosts"], le.get("stalls_arrival")),
                         ("idle second", le.get("stalls_idle")),
                         ("%d routes: route changes" % ro["routes"], ro.get("stalls"))):
            if st:
                L.append("| stalls, %s: switch's own work / descheduled / raw poll gap | ≤ %s / "
                         "≤ %s / ≤ %s µs (over 128 µs: %s / – / %s per s); %s preemptions/s, "
                         "run-queue wait %s ms/s, softirq %s ms/s, steal %s ms/s |" % (
                             what, f(st["work_worst_us_le"], 0),
                             f(st["descheduled_worst_us_le"], 0), f(st["raw_worst_us_le"], 0),
                             st["work_over_128us_per_s"], st["raw_over_128us_per_s"],
                             st["preemptions_per_s"], st["run_delay_ms_per_s"],
                             st["softirq_ms_per_s"], st["steal_ms_per_s"]))
        if "worst_rx_stall_us_le" in le:
            L += ["| worst RX stall while %d hosts arrived / idle second | ≤ %s / ≤ %s µs |" % (
                      le["hosts"], f(le["worst_rx_stall_us_le"], 0),
                      f(le["idle_worst_rx_stall_us_le"], 0)),
                  "| poll gaps over 128 µs while the hosts arrived / idle | %s /s / %s /s |" % (
                      f(le["stalls_over_128us_per_s"], 1),
                      f(le["idle_stalls_over_128us_per_s"], 1))]
        L.append("")
        if sc.get("note"):
            L += [sc["note"], ""]
    elif sc:
        L += ["## Rack-scale forwarding state", "", "Not measured: %s" % sc.get("error"), ""]

    if res.get("profiles"):
        L += ["## Profiles (this run's build)", ""]
        for name, prof in res["profiles"].items():
            L += ["**%s** — %s" % (name, prof.get("how", "")), "", "| share | symbol |",
                  "| --- | --- |"]
            for share, sym in prof["top"][:18]:
                L.append("| %.1f %% | `%s` |" % (share, sym))
            L.append("")
    if os.path.exists(NOTES):
        with open(NOTES) as fh:
            notes = fh.read()
        notes = "\n".join(line for line in notes.splitlines()
                          if "SPDX-License-Identifier" not in line)
        L += [notes.strip(), ""]
    if not plt:
        L += ["(python3-matplotlib is not installed: no plots.)", ""]
    with open(doc, "w") as fh:
        fh.write("\n".join(L))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("result")
    ap.add_argument("--doc", default=os.path.join(ROOT, "docs", "performance.md"))
    a = ap.parse_args()
    with open(a.result) as fh:
        res = json.load(fh)
    rel = os.path.relpath(os.path.abspath(a.result), ROOT)
    write(res, a.doc, rel)
    print("wrote " + a.doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
