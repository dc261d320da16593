#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""BIER replication rate per core: copies per second for 2, 4 and 16 neighbours, beside
dpdk-testpmd --forward-mode=io on the same vdevs in the same run.

Input: BIER frames (RFC 8296 over Ethernet, BSL 256, BitString with one bit per neighbour)
around a 1 KiB IPv4/UDP payload, replayed from memory (net_pcap infinite_rx). inaswitch is a
transit BFR whose BIFT gives each neighbour one bit, all neighbours behind one net_null sink
port, so every received packet becomes N copies (a private header mbuf chained to the shared
payload). The figure is the sink's TX rate (= copies/s); testpmd io forwards the same frames
once each to the same sink. Prints a table and writes a JSON result file.
"""
import argparse
import json
import os
import statistics
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import inapcap  # noqa: E402
from common import cpu_model, dpdk_version, hugepages_available, mmm, testpmd  # noqa: E402
from forwarding import run_inaswitch  # noqa: E402

BSL = 256
BIFT_ID = 0x30000  # BSL code 3 (256), sub-domain 0, set 0
PAYLOAD = 1024


def bier_frame(bfr_ids, entropy, payload=PAYLOAD):
    """Ethernet (to the switch) + RFC 8296 header + IPv4/UDP with `payload` bytes."""
    w0 = BIFT_ID << 12 | 1 << 8 | 64                    # BIFT-id, TC 0, S 1, TTL 64
    w1 = 0b0101 << 28 | 0 << 24 | 3 << 20 | entropy     # nibble, version 0, BSL 256, entropy
    w2 = 4 << 16 | 100                                  # Proto IPv4, BFIR-id 100
    bs = 0
    for i in bfr_ids:
        bs |= 1 << (i - 1)                              # BP 1 = least significant bit
    inner = inapcap.ipv4_udp("02:00:00:00:00:01", "02:00:00:00:00:09", "10.9.0.1",
                             "10.8.0.1", 7000, 7001, bytes(payload))[14:]
    eth = inapcap.mac("02:00:00:00:00:01") + inapcap.mac("02:00:00:00:10:02") + b"\xab\x37"
    return eth + struct.pack(">III", w0, w1, w2) + bs.to_bytes(BSL // 8, "big") + inner


def config(src_devargs, sink_devargs, neighbours):
    nbrs = "\n".join("  - {ip: 10.0.2.%d, mac: \"02:00:00:00:02:%02x\", port: sink}" % (i + 2, i)
                     for i in range(neighbours))
    fbm = "\n".join("        - {via: 10.0.2.%d, bfr_ids: \"%d\"}" % (i + 2, i + 1)
                    for i in range(neighbours))
    return """mempool: {mbufs: 16383}
ports:
  - {name: src, devargs: "%s", mac: "02:00:00:00:00:01", ipv4: [10.0.1.1/24]}
  - {name: sink, devargs: "%s", mac: "02:00:00:00:00:02", ipv4: [10.0.2.1/24], mtu: 9000}
neighbours:
%s
bier:
  bifts:
    - bsl: %d
      neighbours:
%s
""" % (src_devargs, sink_devargs, nbrs, BSL, fbm)


def measure(binary, neighbour_counts, duration, repeat, huge, log=print):
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for n in neighbour_counts:
            pcap = os.path.join(work, "bier_%d.pcap" % n)
            inapcap.write_pcap(pcap, [bier_frame(range(1, n + 1), e) for e in range(256)])
            vdevs = ["net_pcap0,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null" % pcap,
                     "net_null0,no-rx=1"]
            copies, io = [], []
            for _ in range(repeat):
                io.append(testpmd(vdevs, "io", duration, "perf-bier-tp-%d" % os.getpid(), 1,
                                  huge=huge, extra=["--mbuf-size=2176"]))
                copies.append(run_inaswitch(binary, config(vdevs[0], vdevs[1], n), huge,
                                            duration, "perf-bier-ina-%d" % os.getpid(), "sink"))
            if min(copies) <= 0:
                raise RuntimeError("inaswitch made no BIER copies with %d neighbours" % n)
            ratio = statistics.median(copies) / statistics.median(io)
            rows.append({"neighbours": n,
                         "frame_bytes": len(bier_frame(range(1, n + 1), 0)),
                         "copies_mpps": mmm([round(x / 1e6, 3) for x in copies]),
                         "packets_in_mpps": mmm([round(x / n / 1e6, 3) for x in copies]),
                         "testpmd_io_mpps": mmm([round(x / 1e6, 3) for x in io]),
                         "ratio_copies_to_io": round(ratio, 3)})
            log("BIER %2d neighbours: %6.2f M copies/s (%.2f M packets in/s) | testpmd io %6.2f "
                "Mpps | copies / io %.2f" % (n, statistics.median(copies) / 1e6,
                                             statistics.median(copies) / n / 1e6,
                                             statistics.median(io) / 1e6, ratio))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "src", "app", "inaswitch"))
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--neighbours", default="2,4,16")
    ap.add_argument("--out", default=None)
    ap.add_argument("--smoke", action="store_true", help="short run of 2 neighbours, not timed")
    a = ap.parse_args()
    counts = [2] if a.smoke else [int(x) for x in a.neighbours.split(",")]
    duration, repeat = (1.0, 1) if a.smoke else (a.duration, a.repeat)
    huge = hugepages_available()
    rows = measure(a.binary, counts, duration, repeat, huge)
    result = {"cpu": cpu_model(), "dpdk": dpdk_version(), "hugepages": huge,
              "payload_bytes": PAYLOAD, "bsl": BSL, "rows": rows}
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
