# SPDX-License-Identifier: Apache-2.0
"""bier_bfer_l4: what else a BFER's rewrite of a unicast inner destination must keep right
(bier_bfer has the UDP and ICMP cases). Rewriting the IPv4 destination changes the pseudo-header
of every transport checksum that has one, as a NAT does (RFC 3022 section 4.2, RFC 1624):
  - TCP: its checksum must be updated too, or the host drops the segment;
  - a UDP first fragment (MF set, offset 0): the UDP checksum covers the whole datagram, so the
    incremental update of the field in the first fragment is right (expected: the checksum of
    the reassembled datagram to the new destination);
  - a non-first fragment (offset != 0): there is no transport header in it; its payload must
    not be touched (only the IPv4 header changes).
Delivery is otherwise as in bier_bfer (Ethernet to the host, IPv4 checksum fixed, TTL kept)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, TCP, UDP, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
OWN = {2: ("p2", "02:00:00:00:12:10", "10.0.2.10"),
       3: ("p3", "02:00:00:00:13:10", "10.0.3.10"),
       4: ("p3", "02:00:00:00:13:11", "10.0.3.11")}
BSL = 256
LABELS = labels(BSL)
PLACEHOLDER = "192.0.2.1"


def packet(ids, make_inner, ident):
    """make_inner(dst) gives the inner IPv4 packet's bytes for destination `dst`."""
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(BSL, ids, 64, entropy=ident, bfir=9),
                                   make_inner(PLACEHOLDER)))
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    for bfr_id in sorted(set(ids) & set(OWN)):
        port, mac, host = OWN[bfr_id]
        case.deliver(LABELS, port, mac, make_inner(host))


def tcp(dst):
    return bytes(IP(src="10.9.0.1", dst=dst, ttl=61, id=1, flags="DF") /
                 TCP(sport=443, dport=50000, flags="PA", seq=1000, ack=2000) /
                 Raw(b"a TCP segment for every worker"))


def fragment(index):
    """Fragment `index` of a UDP datagram built for each destination with its own checksum: the
    first (offset 0, MF) carries the UDP header; the second (offset 24 octets) only payload."""
    def make(dst):
        whole = IP(src="10.9.0.1", dst=dst, ttl=61, id=77) / UDP(sport=9470, dport=9470) / \
            Raw(bytes(range(48)))
        udp = bytes(whole)[20:]                          # 8 + 48 octets, checksum included
        parts = [(0, udp[:24], "MF"), (3, udp[24:], 0)]
        off, body, flags = parts[index]
        return bytes(IP(src="10.9.0.1", dst=dst, ttl=61, id=77, flags=flags, frag=off,
                        proto=17) / Raw(body))
    return make


packet({2, 3}, tcp, 1)
packet({4}, fragment(0), 2)
packet({4}, fragment(1), 3)

if __name__ == "__main__":
    case.finish(HERE)
