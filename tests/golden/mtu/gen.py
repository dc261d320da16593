# SPDX-License-Identifier: Apache-2.0
"""mtu: the switch does not fragment; an IPv4 packet whose total length exceeds the egress
port's MTU is dropped as mtu_exceeded (with or without DF), and one of exactly the MTU is
forwarded. The ingress port's larger MTU does not matter; the egress port's does, also when
the egress is chosen by a static route. Replies from the switch itself are not routed and
not limited by another port's MTU."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ICMP, IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1", "p2"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02", "p2": "02:00:00:00:00:03"}
H0 = ("02:00:00:00:10:02", "10.0.0.2")
NEXT = {"p1": "02:00:00:00:11:02", "p2": "02:00:00:00:12:fe"}
IP_UDP = 28  # IPv4 + UDP header bytes

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def udp(eth_src, eth_dst, dst, total, ttl, ident, df):
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 IP(src=H0[1], dst=dst, ttl=ttl, id=ident, flags="DF" if df else 0) /
                 UDP(sport=4000, dport=4001) / Raw(bytes(total - IP_UDP)))


def send(dst, total, ident, out_port=None, df=True):
    """A packet of IPv4 total length `total`; forwarded on `out_port`, or dropped if None."""
    inputs["p0"].append(udp(H0[0], SW["p0"], dst, total, 64, ident, df))
    if out_port:
        expect[out_port].append(udp(SW[out_port], NEXT[out_port], dst, total, 63, ident, df))


send("10.0.1.2", 1500, 1, "p1")            # exactly p1's MTU
send("10.0.1.2", 1501, 2)                  # one byte over
send("10.0.1.2", 1501, 3, df=False)        # no DF: still dropped (no fragmentation)
send("10.0.1.2", 2000, 4)                  # well over p1's, under p0's MTU
send("10.0.1.2", 576, 5, "p1")
send("198.51.100.1", 1280, 6, "p2")        # p2 via the gateway route: exactly 1280
send("198.51.100.1", 1281, 7)
send("198.51.100.1", 1500, 8)              # fits p1, not p2
send("198.51.100.1", 1000, 9, "p2")

# An echo request of 2000 bytes to p1's address, over p1's MTU: answered on p0.
echo = IP(src=H0[1], dst="10.0.1.1", id=10) / ICMP(id=1, seq=1) / Raw(bytes(1972))
assert len(echo) == 2000
inputs["p0"].append(bytes(Ether(src=H0[0], dst=SW["p0"]) / echo))
expect["p0"].append(bytes(Ether(src=SW["p0"], dst=H0[0]) /
                          IP(src="10.0.1.1", dst=H0[1], id=10) /
                          ICMP(type=0, id=1, seq=1) / Raw(bytes(1972))))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
