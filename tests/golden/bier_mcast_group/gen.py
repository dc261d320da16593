# SPDX-License-Identifier: Apache-2.0
"""bier_mcast_group: the switch as BFIR for configured IPv4 multicast groups (RFC 8279 section
4: the BFIR chooses the BFERs and encapsulates). An IPv4 packet to a configured group, arriving
on a routed port in a frame to the group's MAC, is one IP hop: its TTL is decremented (and its
checksum made right; TTL 1 is dropped as ttl_exceeded) and Ethernet padding is not part of it.
It is then encapsulated once per set of the group's BFR-ids (one set here): RFC 8296 header
with the BIFT's BIFT-id (0x30000) and BSL, TTL = bier.ttl (32: the BFIR sends, it does not
forward, so nothing is decremented), Proto 4 (IPv4), BFIR-id = bier.bfr_id (7), entropy chosen
by the BFIR per flow (see bierpkt.group_entropy), BitString = the group's BFR-ids; and that
packet goes through the BIFT as a received one would: one copy per neighbour with BitString AND
F-BM, the own bit delivered (multicast destination kept). A group with no configuration is
dropped as mcast_no_group; an IPv4 header the router would refuse is dropped as routing would
(ipv4_bad_checksum)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, group_entropy, group_mac, labels  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

case = Case()
SRC = ("02:00:00:00:10:05", "10.0.0.5")
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1, 2}),
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02", {3})}
OWN = {4: ("p3", "02:00:00:00:13:10")}
GROUPS = {"232.1.1.1": {1, 3, 4}, "239.2.2.2": {2}}
BSL, BFR_ID, BIER_TTL = 256, 7, 32
LABELS = labels(BSL)


def send(group, ident, ttl=10, src=SRC, payload=b"group data", pad=0, **ip):
    def inner(t):
        return IP(src=src[1], dst=group, ttl=t, id=ident, **ip) / \
            UDP(sport=4000, dport=5000) / Raw(payload)
    case.inputs["p0"].append(bytes(Ether(src=src[0], dst=group_mac(group)) / inner(ttl)) +
                             b"\x00" * pad)
    if group not in GROUPS:
        case.count('inaswitch_drops_total{reason="mcast_no_group"}')
        return
    if ttl <= 1:
        case.count('inaswitch_drops_total{reason="ttl_exceeded"}')
        return
    case.count("inaswitch_bier_mcast_encapsulated_total")
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    data = bytes(inner(ttl - 1))
    entropy = group_entropy(src[1], group)
    ids = GROUPS[group]
    for name, (ip, port, mac, fbm) in NBR.items():
        if ids & fbm:
            case.copy(LABELS, ip, port, mac, bier(BSL, ids & fbm, BIER_TTL, entropy=entropy,
                                                  bfir=BFR_ID), data)
    for bfr_id, (port, mac) in OWN.items():
        if bfr_id in ids:
            case.deliver(LABELS, port, mac, data)


send("232.1.1.1", 1)                                   # n1 {1}, n2 {3}, own 4
send("239.2.2.2", 2, ttl=64)                           # n1 {2} only
send("239.9.9.9", 3)                                   # no such group
send("232.1.1.1", 4, ttl=1)                            # the BFIR's IP hop expires it
send("232.1.1.1", 5, ttl=2, payload=b"x", pad=17)      # 60-octet frame: padding left out
send("232.1.1.1", 6, src=("02:00:00:00:10:06", "10.0.0.6"))   # another flow, another entropy
send("232.1.1.1", 7, ttl=255, tos=0xB8, flags="DF")    # DSCP/ECN and flags carried inside
# A bad header checksum: dropped before any BIER work.
case.inputs["p0"].append(bytes(Ether(src=SRC[0], dst=group_mac("232.1.1.1")) /
                               IP(src=SRC[1], dst="232.1.1.1", ttl=10, id=8, chksum=0x1234) /
                               UDP(sport=4000, dport=5000) / Raw(b"bad")))
case.count('inaswitch_drops_total{reason="ipv4_bad_checksum"}')
send("232.1.1.1", 9)                                   # still encapsulating at the end

assert group_entropy("10.0.0.5", "232.1.1.1") != group_entropy("10.0.0.6", "232.1.1.1")

if __name__ == "__main__":
    case.finish(HERE)
