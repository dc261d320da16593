# SPDX-License-Identifier: Apache-2.0
"""bier_no_neighbour: bits that neither a neighbour's F-BM nor an own bit covers (RFC 8279
section 6.5: the BFR clears such a bit, since nothing can take it; reference/bier.md pitfall
7). No copy carries them (each copy is BitString AND F-BM), and each one is counted in
inaswitch_bier_bits_no_neighbour_total of its BIFT. The reachable bits of the same packet are
still forwarded and delivered. A packet whose bits are all unreachable, and one with an empty
BitString, send nothing; a BIFT with no neighbour and no own bit clears everything."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import bier, bift_id, check_case_metrics, frame  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1", "p2", "p3"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02", "p2": "02:00:00:00:00:03",
      "p3": "02:00:00:00:00:04"}
UP = "02:00:00:00:10:02"
# BSL: (neighbours {name: (ip, port, MAC, F-BM)}, own bits {BFR-id: (port, host MAC)})
BIFTS = {64: ({"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1, 2})},
              {3: ("p3", "02:00:00:00:13:10")}),
         256: ({}, {})}

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}
metrics = {}


def count(series, n=1):
    metrics[series] = metrics.get(series, 0) + n


def packet(bsl, ids, ident):
    labels = f'bift_id="{bift_id(bsl)}",sd="0",bsl="{bsl}",set="0"'
    nbrs, own = BIFTS[bsl]
    inner = IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) / UDP(sport=1000, dport=5000) \
        / Raw(b"nn %d" % ident + bytes(30))
    data = bytes(inner)
    inputs["p0"].append(frame(UP, SW["p0"], bier(bsl, ids, 64, entropy=ident, bfir=3), data))
    count(f"inaswitch_bier_packets_total{{{labels}}}")
    reachable = set(own).union(*[n[3] for n in nbrs.values()])
    cleared = set(ids) - reachable
    if cleared:
        count(f"inaswitch_bier_bits_no_neighbour_total{{{labels}}}", len(cleared))
    for name, (ip, port, mac, fbm) in nbrs.items():
        if set(ids) & fbm:
            expect[port].append(frame(SW[port], mac, bier(bsl, set(ids) & fbm, 63,
                                                          entropy=ident, bfir=3), data))
            count("inaswitch_bier_copies_total")
            count(f'inaswitch_bier_copies_by_neighbour_total{{{labels},neighbour="{ip}"}}')
    for bfr_id, (port, mac) in own.items():
        if bfr_id in ids:
            expect[port].append(bytes(Ether(src=SW[port], dst=mac) / inner))
            count("inaswitch_bier_delivered_total")
            count(f"inaswitch_bier_bift_delivered_total{{{labels}}}")


packet(64, {1, 2, 3, 4, 10, 64}, 1)     # 4, 10 and 64 cleared; n1 gets {1, 2}; 3 delivered
packet(64, {5}, 2)                      # nothing reachable: nothing sent
packet(64, {2, 63}, 3)                  # 63 cleared; n1 gets {2}
packet(64, set(), 4)                    # empty BitString: nothing to do, nothing counted
packet(64, set(range(1, 65)), 5)        # every bit: 61 cleared
packet(256, {1, 2, 256}, 6)             # a BIFT with nothing: all three cleared
packet(64, {1, 3}, 7)                   # nothing cleared

for p in PORTS:
    count(f'inaswitch_port_rx_packets_total{{port="{p}"}}', len(inputs[p]))
    count(f'inaswitch_port_tx_packets_total{{port="{p}"}}', len(expect[p]))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    check_case_metrics(HERE, metrics)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
