# SPDX-License-Identifier: Apache-2.0
"""bier_ttl: the BIER TTL (RFC 8296 section 2.1.1.2). A BFR decrements it once; a packet that
arrives with TTL 1 (or 0) has nothing left to give a neighbour: no neighbour copy is made and
the packet counts once in inaswitch_bier_ttl_expired_total and as drop reason
bier_ttl_expired. Its own bits are still delivered (the BFER is this node: no hop is left to
spend), and a TTL 1 packet that only carries own bits has expired nothing, so it is not
counted. TTL 2 goes on with TTL 1, TTL 255 with 254.

Delivery of an own bit: the BIER header is removed and the inner IPv4 packet (here to a
multicast group, so its destination is kept) leaves for the bit's host with the egress port's
MAC as source and the host's MAC as destination."""

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
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1, 2}),
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02", {3})}
OWN = {10: ("p3", "02:00:00:00:13:10")}                  # BFR-id: (port, host MAC)
BSL = 256
LABELS = f'bift_id="{bift_id(BSL)}",sd="0",bsl="{BSL}",set="0"'

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}
metrics = {}


def count(series, n=1):
    metrics[series] = metrics.get(series, 0) + n


def packet(ids, ttl, ident):
    inner = IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) / UDP(sport=1000, dport=5000) \
        / Raw(b"ttl %d" % ident + bytes(30))
    data = bytes(inner)
    inputs["p0"].append(frame(UP, SW["p0"], bier(BSL, ids, ttl, entropy=ident, bfir=3), data))
    count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    foreign = set(ids) - set(OWN)
    if ttl <= 1 and foreign:
        count(f"inaswitch_bier_ttl_expired_total{{{LABELS}}}")
        count('inaswitch_drops_total{reason="bier_ttl_expired"}')
    if ttl > 1:
        for name, (ip, port, mac, fbm) in NBR.items():
            if set(ids) & fbm:
                expect[port].append(frame(SW[port], mac, bier(BSL, set(ids) & fbm, ttl - 1,
                                                              entropy=ident, bfir=3), data))
                count("inaswitch_bier_copies_total")
                count(f'inaswitch_bier_copies_by_neighbour_total{{{LABELS},neighbour="{ip}"}}')
    for bfr_id, (port, mac) in OWN.items():
        if bfr_id in ids:
            expect[port].append(bytes(Ether(src=SW[port], dst=mac) / inner))
            count("inaswitch_bier_delivered_total")
            count(f"inaswitch_bier_bift_delivered_total{{{LABELS}}}")


packet({1, 3, 10}, 2, 1)        # forwarded with TTL 1, delivered
packet({1, 3, 10}, 1, 2)        # expired for n1 and n2, still delivered
packet({1, 2}, 1, 3)            # expired: nothing at all leaves
packet({1, 10}, 0, 4)           # TTL 0 (a broken upstream): as TTL 1
packet({10}, 1, 5)              # only an own bit: delivered, nothing expired
packet({2, 3}, 255, 6)          # 255 -> 254
packet({1, 3, 10}, 2, 7)        # still forwarding after the expiries

for p in PORTS:
    count(f'inaswitch_port_rx_packets_total{{port="{p}"}}', len(inputs[p]))
    count(f'inaswitch_port_tx_packets_total{{port="{p}"}}', len(expect[p]))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    check_case_metrics(HERE, metrics)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
