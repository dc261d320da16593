# SPDX-License-Identifier: Apache-2.0
"""unknown_destination: with no default route, a destination no prefix covers is dropped as
no_route, including addresses right next to connected subnets and static routes; covered
destinations around them are still forwarded. No ARP request is sent for a no_route packet."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
H0 = ("02:00:00:00:10:02", "10.0.0.2")
H1 = "02:00:00:00:11:02"   # 10.0.1.2
GW = "02:00:00:00:11:fe"   # 10.0.1.254

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def udp(eth_src, eth_dst, dst, ttl, ident):
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 IP(src=H0[1], dst=dst, ttl=ttl, id=ident) / UDP(sport=53, dport=53) /
                 Raw(b"where?"))


def unroutable(dst, ident):
    inputs["p0"].append(udp(H0[0], SW["p0"], dst, 64, ident))


def forwarded(dst, ident, mac):
    inputs["p0"].append(udp(H0[0], SW["p0"], dst, 64, ident))
    expect["p1"].append(udp(SW["p1"], mac, dst, 63, ident))


unroutable("192.0.2.1", 1)            # nothing covers it
forwarded("10.50.0.1", 2, GW)         # 10.50.0.0/16
unroutable("10.51.0.1", 3)            # just past the /16
unroutable("10.49.255.255", 4)        # just before it
forwarded("203.0.113.127", 5, GW)     # top of 203.0.113.0/25
unroutable("203.0.113.128", 6)        # the other half of the /24
unroutable("10.0.2.5", 7)             # next to the connected subnets
forwarded("10.0.1.2", 8, H1)          # a connected host
unroutable("223.255.255.254", 9)      # top of unicast space

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
