# SPDX-License-Identifier: Apache-2.0
"""bier_bfer: own bits (this BFR is their BFER, RFC 8279 section 6.5 step 4). For each own bit
in the BitString the BIER header is removed and the inner IPv4 packet (Proto 4) goes to that
bit's host: Ethernet source = egress port's MAC, destination = the host's MAC, type IPv4.
  - A unicast inner destination is the BFIR's placeholder (an INA result is one packet for
    every worker): it becomes the host's address; the IPv4 header checksum and a non-zero UDP
    checksum (its pseudo-header holds the destination) are made right again, a UDP checksum
    that comes out as 0 is sent as 0xFFFF (RFC 768), and a UDP checksum of 0 (none) stays 0.
    ICMP has no pseudo-header: its checksum stays.
  - A multicast inner destination (a BIER multicast group) is kept.
  - Octets after the inner packet's total length (padding of the BIER frame) are not part of
    the delivered packet; neighbour copies carry the BIER payload as received.
  - Proto other than IPv4 (IPv6, Ethernet) cannot be delivered: counted once per packet as
    drop reason bier_unsupported_proto; neighbour copies are still made.
Own bits are delivered in BFR-id order, after the neighbour copies. The inner TTL is not
touched (the switch treats delivery as the end of the BIER hop, not as an IP hop)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import PROTO_ETHERNET, PROTO_IPV4, PROTO_IPV6, Case, bier, frame, \
    labels  # noqa: E402
from scapy.all import ICMP, IP, UDP, Ether, IPOption_NOP, IPv6, Raw  # noqa: E402
from scapy.utils import checksum  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1})}
OWN = {2: ("p2", "02:00:00:00:12:10", "10.0.2.10"),     # BFR-id: (port, MAC, address)
       3: ("p3", "02:00:00:00:13:10", "10.0.3.10"),
       4: ("p3", "02:00:00:00:13:11", "10.0.3.11")}
BSL = 256
LABELS = labels(BSL)


def packet(ids, make_inner, ident, proto=PROTO_IPV4, trailer=b""):
    """make_inner(dst) builds the inner packet for destination `dst` (None: as sent by the
    BFIR); its checksums are computed afresh by scapy for each destination."""
    data = bytes(make_inner(None)) + trailer
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(BSL, ids, 64, entropy=ident, bfir=9,
                                                           proto=proto), data))
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    for name, (ip, port, mac, fbm) in NBR.items():
        if set(ids) & fbm:
            case.copy(LABELS, ip, port, mac, bier(BSL, set(ids) & fbm, 63, entropy=ident, bfir=9,
                                                  proto=proto), data)
    if not set(ids) & set(OWN):
        return
    if proto != PROTO_IPV4:
        case.count('inaswitch_drops_total{reason="bier_unsupported_proto"}')
        return
    for bfr_id in sorted(set(ids) & set(OWN)):
        port, mac, host = OWN[bfr_id]
        case.deliver(LABELS, port, mac, make_inner(host))


def unicast_udp(ident, placeholder="192.0.2.1", chksum=None, payload=b"result", **ip):
    def make(dst):
        return IP(src="10.9.0.1", dst=dst or placeholder, ttl=61, id=ident, flags="DF", **ip) / \
            UDP(sport=9470, dport=9470, chksum=chksum) / Raw(payload)
    return make


def multicast_udp(ident):
    return lambda dst: IP(src="10.9.0.1", dst="232.1.1.1", ttl=7, id=ident) / \
        UDP(sport=1000, dport=5000) / Raw(b"group data")


def ffff_payload(host):
    """A UDP payload whose checksum, once addressed to `host`, sums to 0 and so is sent as
    0xFFFF: the two octets at UDP offset 12 (a 16-bit word of the sum) are set to the checksum
    the rest gives, which is the ones' complement of the rest's sum."""
    pkt = IP(src="10.9.0.1", dst=host, ttl=61, id=3, flags="DF") / \
        UDP(sport=9470, dport=9470) / Raw(b"sum!\x00\x00")
    c = int.from_bytes(bytes(pkt)[26:28], "big")
    return b"sum!" + (0 if c == 0xFFFF else c).to_bytes(2, "big")


packet({1, 2, 3, 4}, unicast_udp(1), 1)                       # every own bit, and n1
packet({2}, unicast_udp(2, chksum=0), 2)                      # no UDP checksum: stays 0
P = ffff_payload("10.0.3.10")
packet({3}, unicast_udp(3, payload=P), 3)                     # checksum comes out as 0xFFFF
packet({2, 4}, unicast_udp(4, placeholder="0.0.0.0"), 4)      # the INA results' placeholder
packet({2, 3}, multicast_udp(5), 5)                           # group destination kept
packet({3}, unicast_udp(6, options=[IPOption_NOP()] * 4), 6)  # IHL 6: UDP further in
packet({1, 2}, unicast_udp(7), 7, trailer=b"\xee" * 6)        # frame padding not delivered
packet({1, 2}, lambda dst: IPv6(src="2001:db8::1", dst="ff3e::1") / UDP(sport=1, dport=2) /
       Raw(b"v6"), 8, proto=PROTO_IPV6)                       # copied, not delivered
packet({3}, lambda dst: Ether(src="02:00:00:00:99:01", dst="02:00:00:00:99:02") /
       Raw(b"an Ethernet payload"), 9, proto=PROTO_ETHERNET)  # not delivered
packet({2}, lambda dst: IP(src="10.9.0.1", dst=dst or "192.0.2.1", ttl=61, id=10) /
       ICMP(type=8, id=1, seq=1) / Raw(b"ping"), 10)           # ICMP checksum unchanged
packet({1, 2, 3, 4}, unicast_udp(11), 11)                     # still delivering at the end

# The crafted payload really gives 0xFFFF once addressed to 10.0.3.10, and something else
# under the placeholder.
_to_host = bytes(unicast_udp(3, payload=P)("10.0.3.10"))
assert _to_host[26:28] == b"\xff\xff", _to_host[26:28].hex()
assert checksum(_to_host[:20]) == 0

if __name__ == "__main__":
    case.finish(HERE)
