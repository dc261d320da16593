# SPDX-License-Identifier: Apache-2.0
"""ttl_expiry: a router forwards a packet only if its TTL stays above zero after the
decrement (RFC 1812 5.3.1): TTL 2 leaves with TTL 1, TTL 1 and 0 are dropped as
ttl_exceeded. The check follows the route lookup (no route stays no_route) and precedes
neighbour resolution (no ARP request for a packet that dies anyway). Packets for the switch
itself are delivered whatever their TTL: an echo request with TTL 1 is answered."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ICMP, IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
H0 = ("02:00:00:00:10:02", "10.0.0.2")
H1 = "02:00:00:00:11:02"   # 10.0.1.2
GW = "02:00:00:00:11:fe"   # 10.0.1.254

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def udp(eth_src, eth_dst, dst, ttl, ident):
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 IP(src=H0[1], dst=dst, ttl=ttl, id=ident) / UDP(sport=7, dport=9) /
                 Raw(b"ttl-test"))


def send(dst, ttl, ident):
    inputs["p0"].append(udp(H0[0], SW["p0"], dst, ttl, ident))


send("10.0.1.2", 2, 1)                                   # forwarded with TTL 1
expect["p1"].append(udp(SW["p1"], H1, "10.0.1.2", 1, 1))
send("10.0.1.2", 1, 2)                                   # ttl_exceeded
send("10.0.1.2", 0, 3)                                   # ttl_exceeded
send("198.51.100.5", 2, 4)                               # via the gateway, TTL 1
expect["p1"].append(udp(SW["p1"], GW, "198.51.100.5", 1, 4))
send("198.51.100.5", 1, 5)                               # ttl_exceeded
send("10.0.1.99", 1, 6)                                  # unresolved, but ttl_exceeded first
send("192.0.2.1", 1, 7)                                  # no_route first
send("10.0.1.2", 64, 8)                                  # still forwarding: TTL 63
expect["p1"].append(udp(SW["p1"], H1, "10.0.1.2", 63, 8))


# An echo request for the switch with TTL 1, answered (a fresh reply has TTL 64).
def echo(eth_src, eth_dst, src, dst, ttl, icmp_type):
    return bytes(Ether(src=eth_src, dst=eth_dst) / IP(src=src, dst=dst, ttl=ttl, id=9) /
                 ICMP(type=icmp_type, id=0x4242, seq=1) / Raw(b"ping"))


inputs["p0"].append(echo(H0[0], SW["p0"], H0[1], "10.0.0.1", 1, 8))
expect["p0"].append(echo(SW["p0"], H0[0], "10.0.0.1", H0[1], 64, 0))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
