#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Forwarding rate per core: inaswitch next to dpdk-testpmd on the same vdevs, in one run.

Scenarios (each run --repeat times, min/median/max reported):
  l3-pcap-null  IPv4/UDP 64 B frames replayed from memory (net_pcap infinite_rx) are routed to a
                net_null sink. inaswitch does the full L3 path (validate, LPM, neighbour, TTL,
                checksum, MAC rewrite); testpmd runs --forward-mode=mac on the same vdevs.
  l2-null-null  net_null -> net_null, two ports in one inaswitch L2 group (FDB miss, flood to the
                one other member) vs testpmd mac. net_null's frames are all-zero, so only an L2
                path can forward them; this is the plain "on net_null" figure.
The ratio inaswitch / testpmd is the figure of merit (issue goal: L3 >= 0.8 x testpmd mac).
Prints a table and writes a JSON result file.
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import inapcap  # noqa: E402
from common import (cpu_model, dpdk_version, eal_memory, hugepages_available,  # noqa: E402
                    mmm, testpmd, worker_cpu_ns)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_pcap(path, frames):
    inapcap.write_pcap(path, inapcap.l3_frames(frames, 64, 200))


def run_testpmd(vdevs, huge, duration, prefix, sink_port):
    """(wall-clock pps, pps per CPU second of the forwarding thread)."""
    cpu = []
    wall = testpmd(vdevs, "mac", duration, prefix, sink_port, huge=huge, cpu_rates=cpu)
    return wall, cpu[0]


def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


def metric(text, name, labels):
    pat = re.compile(r"^" + re.escape(name) + r"\{" + re.escape(labels) + r"\}\s+(\S+)$", re.M)
    m = pat.search(text)
    return float(m.group(1)) if m else 0.0


def run_inaswitch(binary, config_text, huge, duration, prefix, sink_name):
    """Wall-clock pps on the sink port."""
    return run_inaswitch_rates(binary, config_text, huge, duration, prefix, sink_name)[0]


def run_inaswitch_rates(binary, config_text, huge, duration, prefix, sink_name):
    """(wall-clock pps, pps per CPU second of the worker thread) on the sink port."""
    api = free_port()
    eal = ["-l", "0-1", "--no-pci", "--log-level", "*:error"] + eal_memory(huge)
    cfg = "version: 1\neal:\n  args: %s\ncontrol: {listen: \"127.0.0.1:%d\"}\n" % (
        json.dumps(eal), api) + config_text
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(cfg)
        path = f.name
    proc = subprocess.Popen([binary, "-c", path, "--file-prefix", prefix],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = "http://127.0.0.1:%d/metrics" % api
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                scrape(url)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("inaswitch did not start:\n" + proc.stdout.read())
                time.sleep(0.05)  # polling an HTTP endpoint for readiness, not synchronisation
        time.sleep(1.0)  # warm-up: caches, first bursts
        t0, m0 = time.monotonic(), metric(scrape(url), "inaswitch_port_tx_packets_total",
                                          'port="%s"' % sink_name)
        c0 = worker_cpu_ns(proc.pid)
        time.sleep(duration)
        t1, m1 = time.monotonic(), metric(scrape(url), "inaswitch_port_tx_packets_total",
                                          'port="%s"' % sink_name)
        c1 = worker_cpu_ns(proc.pid)
        cpu = (m1 - m0) / ((c1 - c0) / 1e9) if c0 is not None and c1 is not None and c1 > c0 \
            else None
        return (m1 - m0) / (t1 - t0), cpu
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        os.unlink(path)


def scenarios(workdir):
    pcap = os.path.join(workdir, "l3_64B.pcap")
    make_pcap(pcap, 1000)
    l3_vdevs = ["net_pcap0,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null" % pcap,
                "net_null0,no-rx=1"]
    l3_cfg = """mempool: {mbufs: 16383}
ports:
  - {name: src, devargs: "%s", mac: "02:00:00:00:00:01", ipv4: [10.0.1.1/24]}
  - {name: sink, devargs: "%s", mac: "02:00:00:00:00:02", ipv4: [10.0.2.1/24]}
neighbours:
%s
""" % (l3_vdevs[0], l3_vdevs[1], "\n".join(
        "  - {ip: 10.0.2.%d, mac: \"02:00:00:00:02:%02x\", port: sink}" % (i, i)
        for i in range(2, 202)))
    l2_vdevs = ["net_null0", "net_null1"]
    l2_cfg = """mempool: {mbufs: 16383}
ports:
  - {name: a, devargs: "net_null0", l2_group: bench}
  - {name: b, devargs: "net_null1", l2_group: bench}
"""
    # testpmd's port numbering: vdevs in the order given. Sink = port 1 for l3; for l2 both
    # ports receive and transmit, so compare against port 1's TX (one direction) and the
    # switch's TX on 'b'.
    return [
        ("l3-pcap-null", l3_vdevs, 1, l3_cfg, "sink"),
        ("l2-null-null", l2_vdevs, 1, l2_cfg, "b"),
    ]


def measure(binary, duration, repeat, huge, names=None, log=print):
    """Runs each scenario `repeat` times, testpmd and inaswitch alternating; returns rows."""
    results = []
    with tempfile.TemporaryDirectory() as work:
        for name, vdevs, sink_port, cfg, sink_name in scenarios(work):
            if names and name not in names:
                continue
            ina, ref, ina_cpu, ref_cpu = [], [], [], []
            for _ in range(repeat):
                wall, cpu = run_testpmd(vdevs, huge, duration, "perf-fwd-tp-%d" % os.getpid(),
                                        sink_port)
                ref.append(wall)
                ref_cpu.append(cpu)
                wall, cpu = run_inaswitch_rates(binary, cfg, huge, duration,
                                                "perf-fwd-ina-%d" % os.getpid(), sink_name)
                ina.append(wall)
                ina_cpu.append(cpu)
            ratio = statistics.median(ina) / statistics.median(ref)
            row = {"scenario": name,
                   "inaswitch_mpps": mmm([round(x / 1e6, 3) for x in ina]),
                   "testpmd_mac_mpps": mmm([round(x / 1e6, 3) for x in ref]),
                   "ratio_median": round(ratio, 3)}
            # Per CPU second of each forwarding thread: what the code costs, whatever share of
            # the vCPUs the neighbours left it (the wall-clock ratio above is the goal's figure).
            if None not in ina_cpu + ref_cpu:
                row["inaswitch_cpu_mpps"] = mmm([round(x / 1e6, 3) for x in ina_cpu])
                row["testpmd_mac_cpu_mpps"] = mmm([round(x / 1e6, 3) for x in ref_cpu])
                row["cpu_ratio_median"] = round(
                    statistics.median(ina_cpu) / statistics.median(ref_cpu), 3)
            results.append(row)
            if "cpu_ratio_median" in row:
                log("%-14s per CPU second: inaswitch %6.2f Mpps | testpmd mac %6.2f Mpps | "
                    "ratio %.2f" % (name, row["inaswitch_cpu_mpps"]["median"],
                                    row["testpmd_mac_cpu_mpps"]["median"],
                                    row["cpu_ratio_median"]))
            log("%-14s inaswitch %6.2f Mpps (min %.2f max %.2f) | testpmd mac %6.2f Mpps "
                "(min %.2f max %.2f) | ratio %.2f%s" % (
                    name, statistics.median(ina) / 1e6, min(ina) / 1e6, max(ina) / 1e6,
                    statistics.median(ref) / 1e6, min(ref) / 1e6, max(ref) / 1e6, ratio,
                    "  (goal >= 0.80: %s)" % ("met" if ratio >= 0.8 else "not met")
                    if name.startswith("l3") else ""))
            if min(ina) <= 0 or min(ref) <= 0:
                raise RuntimeError("a %s run forwarded nothing" % name)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "src", "app", "inaswitch"))
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--hugepages", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--smoke", action="store_true", help="one short run each: checks it works")
    ap.add_argument("--only", action="append", help="a scenario to run (repeatable; default all)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "forwarding.json"))
    args = ap.parse_args()
    if args.smoke:
        args.duration, args.repeat = 2.0, 1
    huge = {"on": True, "off": False, "auto": hugepages_available()}[args.hugepages]
    env = {"cpu": cpu_model(), "cores": os.cpu_count(), "hugepages": huge,
           "dpdk": dpdk_version(), "frame_bytes": 64, "duration_s": args.duration,
           "repeat": args.repeat}
    print("# forwarding bench: %s, %d cores, DPDK %s, hugepages %s, 64 B frames, 1 forwarding "
          "lcore each" % (env["cpu"], env["cores"], env["dpdk"], "on" if huge else "off"))
    try:
        results = measure(args.binary, args.duration, args.repeat, huge, names=args.only)
    except RuntimeError as e:
        print("error: %s" % e, file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"environment": env, "results": results}, f, indent=2)
    print("# wrote " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
