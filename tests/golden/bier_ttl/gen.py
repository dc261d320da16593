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
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, UDP, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1, 2}),
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02", {3})}
OWN = {10: ("p3", "02:00:00:00:13:10")}                  # BFR-id: (port, host MAC)
BSL = 256
LABELS = labels(BSL)


def packet(ids, ttl, ident):
    data = bytes(IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) /
                 UDP(sport=1000, dport=5000) / Raw(b"ttl %d" % ident + bytes(30)))
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(BSL, ids, ttl, entropy=ident, bfir=3),
                                   data))
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    foreign = set(ids) - set(OWN)
    if ttl <= 1 and foreign:
        case.count(f"inaswitch_bier_ttl_expired_total{{{LABELS}}}")
        case.count('inaswitch_drops_total{reason="bier_ttl_expired"}')
    if ttl > 1:
        for name, (ip, port, mac, fbm) in NBR.items():
            if set(ids) & fbm:
                case.copy(LABELS, ip, port, mac, bier(BSL, set(ids) & fbm, ttl - 1, entropy=ident,
                                                      bfir=3), data)
    for bfr_id, (port, mac) in OWN.items():
        if bfr_id in ids:
            case.deliver(LABELS, port, mac, data)


packet({1, 3, 10}, 2, 1)        # forwarded with TTL 1, delivered
packet({1, 3, 10}, 1, 2)        # expired for n1 and n2, still delivered
packet({1, 2}, 1, 3)            # expired: nothing at all leaves
packet({1, 10}, 0, 4)           # TTL 0 (a broken upstream): as TTL 1
packet({10}, 1, 5)              # only an own bit: delivered, nothing expired
packet({2, 3}, 255, 6)          # 255 -> 254
packet({1, 3, 10}, 2, 7)        # still forwarding after the expiries

if __name__ == "__main__":
    case.finish(HERE)
