# SPDX-License-Identifier: Apache-2.0
"""bier_multiset: BFR-ids in several sets (RFC 8279 sections 3 and 4). A BitString covers one
set only, so a BFIR whose receivers span sets 0 and 1 sends one BIER packet per set, each with
the BIFT-id of its set (default encoding: BSL code 1 << 16 | SD 0 << 8 | SI, so 0x10000 and
0x10001) and the BitString of that set's BFR-ids: BFR-id N sits at BP (N - 1) mod 64 + 1 of set
(N - 1) div 64, so 66 is BP 2 and 128 is BP 64 of set 1. The sets go out in ascending order,
each through its own BIFT (neighbour copies with BitString AND F-BM; own bits delivered), all
with the flow's one entropy. BIER packets received for the set 1 BIFT are forwarded and
delivered by that BIFT, and BFR-id 65 (BP 1 of set 1), which nobody has, is cleared there."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, group_entropy, group_mac, labels, set_of  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"                     # upstream BFR on p0
SRC = ("02:00:00:00:10:05", "10.0.0.5")      # multicast source on p0
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {2, 70}),
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02", {5, 128})}
OWN = {66: ("p3", "02:00:00:00:13:10")}
GROUPS = {"232.1.1.1": {2, 5, 66, 70, 128}, "232.3.3.3": {70}, "232.4.4.4": {5}}
BSL, BFR_ID = 64, 100


def through_bift(si, ids, ttl, entropy, bfir, data):
    """What the BIFT of set `si` does with a packet whose BitString holds `ids`."""
    bift = labels(BSL, si)
    case.count(f"inaswitch_bier_packets_total{{{bift}}}")
    reachable = set(OWN).union(*[n[3] for n in NBR.values()])
    if set(ids) - reachable:
        case.count(f"inaswitch_bier_bits_no_neighbour_total{{{bift}}}", len(set(ids) - reachable))
    for name, (ip, port, mac, fbm) in NBR.items():
        if set(ids) & fbm:
            case.copy(bift, ip, port, mac, bier(BSL, set(ids) & fbm, ttl, si=si, entropy=entropy,
                                                bfir=bfir), data)
    for bfr_id, (port, mac) in OWN.items():
        if bfr_id in ids:
            case.deliver(bift, port, mac, data)


def group_packet(group, ident):
    def inner(ttl):
        return IP(src=SRC[1], dst=group, ttl=ttl, id=ident) / UDP(sport=4000, dport=5000) / \
            Raw(b"multiset %d" % ident)
    case.inputs["p0"].append(bytes(Ether(src=SRC[0], dst=group_mac(group)) / inner(20)))
    case.count("inaswitch_bier_mcast_encapsulated_total")
    ids = GROUPS[group]
    for si in sorted({set_of(BSL, i) for i in ids}):
        through_bift(si, {i for i in ids if set_of(BSL, i) == si}, 64,
                     group_entropy(SRC[1], group), BFR_ID, bytes(inner(19)))


def received(si, ids, ident):
    data = bytes(IP(src="10.9.0.1", dst="232.9.9.9", ttl=9, id=ident) /
                 UDP(sport=1000, dport=5000) / Raw(b"set %d" % si))
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(BSL, ids, 30, si=si, entropy=ident,
                                                            bfir=1), data))
    through_bift(si, ids, 29, ident, 1, data)


# Within one RX burst the switch forwards received BIER before it encapsulates multicast (two
# stages), and all of these frames make one burst: the received packets come first so the
# order on each port is fixed. Frames of different flows may be reordered; no flow is here.
received(1, {65, 66, 70, 128}, 1)          # the set 1 BIFT as a BFR: 65 cleared
received(0, {2, 5}, 2)
received(1, {128}, 3)
group_packet("232.1.1.1", 4)               # sets 0 and 1: two BIER packets
group_packet("232.3.3.3", 5)               # set 1 only
group_packet("232.4.4.4", 6)               # set 0 only
group_packet("232.1.1.1", 7)

if __name__ == "__main__":
    case.finish(HERE)
