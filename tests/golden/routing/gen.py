# SPDX-License-Identifier: Apache-2.0
"""routing: connected subnets, static routes via gateways, longest-prefix match (a default
route, a /1 overriding half of it, /24, /25, /32), a device route, a second subnet on one
port, and the rewrite every routed packet gets (RFC 1812 5.2/5.3): TTL - 1, header checksum
recomputed, source MAC = egress port, destination MAC = next hop. Everything else in the
frame (IP options, payload, Ethernet padding) is unchanged.

Expected frames are built from the same parameters as the inputs with the router's rewrite
applied, and every checksum is computed afresh by scapy."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ICMP, IP, TCP, UDP, Ether, IPOption_NOP, Raw  # noqa: E402

PORTS = ["p0", "p1", "p2", "p3"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02", "p2": "02:00:00:00:00:03",
      "p3": "02:00:00:00:00:04"}
H0 = ("02:00:00:00:10:02", "10.0.0.2")    # host on p0
H1 = ("02:00:00:00:11:02", "10.0.1.2")    # host on p1
GW1 = "02:00:00:00:11:fe"                 # 10.0.1.254, default gateway (p1)
GW2 = "02:00:00:00:12:fe"                 # 10.0.2.254 (p2)
GW3 = "02:00:00:00:13:fe"                 # 10.0.3.254 (p3)
H172 = "02:00:00:00:13:55"                # 172.16.5.5 on p3's second subnet
H203 = "02:00:00:00:13:07"                # 203.0.113.7, on-link behind the device route

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def frame(eth_src, eth_dst, l3, pad=0):
    """Ethernet frame bytes; `pad` zero bytes of Ethernet padding after the IP packet."""
    return bytes(Ether(src=eth_src, dst=eth_dst) / l3) + b"\x00" * pad


def routed(in_port, src_host_mac, out_port, next_hop_mac, make_l3, ttl=64, pad=0):
    """Adds one input frame on `in_port` and its routed form on `out_port`.
    make_l3(ttl) builds the IP packet; the routed copy is rebuilt with ttl - 1."""
    inputs[in_port].append(frame(src_host_mac, SW[in_port], make_l3(ttl), pad))
    expect[out_port].append(frame(SW[out_port], next_hop_mac, make_l3(ttl - 1), pad))


def udp(dst, ident, payload=b"golden", src=H0[1], **kw):
    return lambda ttl: IP(src=src, dst=dst, ttl=ttl, id=ident, **kw) / UDP(
        sport=40000 + ident % 1000, dport=5000) / Raw(payload)


# Connected subnets, each egress port's own MAC as source.
routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", 1))                   # connected p1
routed("p0", H0[0], "p2", GW2, udp("10.0.2.254", 2))                   # connected p2 (a host)
routed("p0", H0[0], "p3", H172, udp("172.16.5.5", 3))                  # p3's second subnet
# Static routes and longest-prefix match inside 198.51.100.0/24.
routed("p0", H0[0], "p2", GW2, udp("198.51.100.10", 4))                # /24 via 10.0.2.254
routed("p0", H0[0], "p3", GW3, udp("198.51.100.130", 5))               # /25 via 10.0.3.254
routed("p0", H0[0], "p2", GW2, udp("198.51.100.200", 6))               # /32 inside the /25
routed("p0", H0[0], "p3", GW3, udp("198.51.100.201", 7))               # next to the /32: /25
routed("p0", H0[0], "p2", GW2, udp("198.51.100.127", 8))               # top of the lower half
routed("p0", H0[0], "p1", GW1, udp("8.8.8.8", 9))                      # default route
routed("p0", H0[0], "p1", GW1, udp("10.0.4.1", 10))                    # default, not connected
routed("p0", H0[0], "p1", GW1, udp("126.1.2.3", 20))                   # lower half: only the /0
routed("p0", H0[0], "p2", GW2, udp("192.0.2.1", 19))                   # 128.0.0.0/1 -> p2
routed("p0", H0[0], "p2", GW2, udp("128.0.0.1", 21))                   # bottom of the /1
routed("p0", H0[0], "p3", H203, udp("203.0.113.7", 11))                # device route: on-link
# The rewrite touches only TTL, checksum and MACs.
routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", 12), ttl=255)         # TTL 255 -> 254
routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", 13, tos=0xb8, flags="DF"))
routed("p0", H0[0], "p1", H1[0],                                        # IP options, IHL 6
       lambda ttl: IP(src=H0[1], dst="10.0.1.2", ttl=ttl, id=14,
                      options=[IPOption_NOP()] * 4) / UDP(sport=1, dport=2) / Raw(b"opts"))
routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", 15, b"p"), pad=17)     # 60-byte frame, padded
routed("p0", H0[0], "p1", H1[0],                                        # TCP, 1400-byte packet
       lambda ttl: IP(src=H0[1], dst="10.0.1.2", ttl=ttl, id=16) /
       TCP(sport=443, dport=50000, flags="PA", seq=1, ack=1) / Raw(bytes(range(256)) * 5 +
                                                                    b"x" * 80))
routed("p0", H0[0], "p1", H1[0],                                        # a non-first fragment
       lambda ttl: IP(src=H0[1], dst="10.0.1.2", ttl=ttl, id=17, frag=185, proto=17) /
       Raw(b"fragment-tail" * 3))
routed("p0", H0[0], "p2", GW2,                                          # ICMP is just routed
       lambda ttl: IP(src=H0[1], dst="198.51.100.11", ttl=ttl, id=18) / ICMP(id=7, seq=1))


# Checksum corner cases for the incremental update (RFC 1624): an input whose checksum is
# 0x0000, and an input whose routed form's checksum is 0x0000.
def find_id(target_ttl, dst):
    for ident in range(1000, 65536):
        if IP(bytes(udp(dst, ident)(target_ttl))).chksum == 0:
            return ident
    raise SystemExit("no IP id gives a zero checksum")


routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", find_id(64, "10.0.1.2")))
routed("p0", H0[0], "p1", H1[0], udp("10.0.1.2", find_id(63, "10.0.1.2")))

# The other direction, p1 to p0 (p0 sends only what p1 received, so its order is fixed).
routed("p1", H1[0], "p0", H0[0], udp("10.0.0.2", 100, src=H1[1]))
routed("p1", H1[0], "p0", H0[0], udp("10.0.0.2", 101, src="192.0.2.55"))
routed("p1", H1[0], "p0", H0[0], udp("10.0.0.2", 102, b"y" * 900, src=H1[1]))

if __name__ == "__main__":
    assert IP(inputs["p0"][-2][14:]).chksum == 0 and IP(expect["p1"][-1][14:]).chksum == 0
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
