#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""INA aggregation rate per core, beside dpdk-testpmd --forward-mode=io on the same input.

inaswitch: bench/ina_bench (built with the switch) drives the real pipeline on one lcore with an
in-process generator of N workers' contributions (sequence numbers never repeat, so every
packet is absorbed and every N-th completes a chunk). Reported: packets/s, payload Gbit/s and
elements/s absorbed.
Ceiling: testpmd io replaying a pcap of the same frames from memory (net_pcap infinite_rx) to
net_null, in the same run. Issue goal: 1 KiB fp32, 8 workers >= 0.5 x testpmd io.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from forwarding import cpu_model, dpdk_version  # noqa: E402


def ina_pcap(path, workers, payload, etype):
    sys.path.insert(0, os.path.join(ROOT, "tests", "golden"))
    from inapkt import ina  # noqa: E402
    from scapy.all import IP, UDP, Ether, Raw, wrpcap  # noqa: E402
    n = payload // 4
    frames = []
    for seq in range(64):
        for w in range(1, workers + 1):
            values = [float(w)] * n if etype == "fp32" else [w] * n
            frames.append(Ether(src="02:00:00:00:00:%02x" % w, dst="02:00:00:00:00:01") /
                          IP(src="10.0.1.%d" % w, dst="10.0.2.2") /
                          UDP(sport=40000, dport=9470) /
                          Raw(ina(1, seq, [w], values, etype=etype)))
    wrpcap(path, frames)


def testpmd_io(pcap, seconds):
    cmd = ["dpdk-testpmd", "-l", "0-1", "--no-pci", "--no-huge", "-m", "512",
           "--file-prefix", "agg-tp-%d" % os.getpid(), "--log-level", "*:error",
           "--vdev", "net_pcap0,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null" % pcap,
           "--vdev", "net_null0,no-rx=1", "--", "--total-num-mbufs=16384", "--mbuf-size=9216",
           "--forward-mode=io", "--stats-period", "1", "--auto-start", "--no-flush-rx"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    try:
        out, _ = proc.communicate(timeout=seconds + 4)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    rates, port = [], None
    for line in out.splitlines():
        m = re.search(r"NIC statistics for port (\d+)", line)
        if m:
            port = int(m.group(1))
        m = re.search(r"Tx-pps:\s+(\d+)", line)
        if m and port == 1 and int(m.group(1)) > 0:
            rates.append(int(m.group(1)))
    if not rates:
        raise RuntimeError("testpmd reported no rate:\n" + out[-2000:])
    return statistics.median(rates[1:] or rates)


def ina_bench(binary, workers, payload, etype, seconds):
    out = subprocess.run([binary, "--workers", str(workers), "--payload", str(payload),
                          "--type", etype, "--seconds", str(seconds),
                          "--file-prefix", "agg-ina-%d" % os.getpid()],
                         capture_output=True, text=True, timeout=seconds + 30)
    if out.returncode != 0:
        raise RuntimeError("ina_bench failed: " + out.stdout + out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


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
    rows = []
    with tempfile.TemporaryDirectory() as work:
        ceilings = {}
        for payload in payloads:
            pcap = os.path.join(work, "agg_%d.pcap" % payload)
            ina_pcap(pcap, 8, payload, "fp32")
            ceilings[payload] = testpmd_io(pcap, 2 if args.smoke else 4)
        for payload in payloads:
            for etype in types:
                for n in workers:
                    runs = [ina_bench(args.binary, n, payload, etype, args.seconds)
                            for _ in range(args.repeat)]
                    mpps = sorted(r["mpps"] for r in runs)
                    med = statistics.median(mpps)
                    row = {"payload_bytes": payload, "type": etype, "workers": n,
                           "isa": runs[0]["isa"], "mpps": mpps,
                           "payload_gbit_s": statistics.median(r["payload_gbit_s"] for r in runs),
                           "gelem_s": statistics.median(r["gelem_s"] for r in runs),
                           "testpmd_io_mpps": round(ceilings[payload] / 1e6, 3),
                           "ratio": round(med * 1e6 / ceilings[payload], 3)}
                    rows.append(row)
                    goal = payload == 1024 and etype == "fp32" and n == 8
                    print("%5d B %-5s %2d workers: %6.2f Mpps (min %.2f max %.2f) %7.1f Gbit/s "
                          "%6.2f Gelem/s | testpmd io %6.2f Mpps | ratio %.2f%s" % (
                              payload, etype, n, med, mpps[0], mpps[-1], row["payload_gbit_s"],
                              row["gelem_s"], ceilings[payload] / 1e6, row["ratio"],
                              "  (goal >= 0.5: %s)" % ("met" if row["ratio"] >= 0.5 else "not met")
                              if goal else ""))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"environment": {"cpu": cpu_model(), "cores": os.cpu_count(),
                                   "dpdk": dpdk_version(), "hugepages": False},
                   "results": rows}, f, indent=2)
    print("# wrote " + args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
