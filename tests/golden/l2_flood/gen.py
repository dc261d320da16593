# SPDX-License-Identifier: Apache-2.0
"""l2_flood: ports in an L2 group bridge one segment (IEEE 802.1D): broadcast, multicast and
unknown-unicast frames are flooded unchanged to every other member (never back out of the
ingress port), ARP that is not for the switch is flooded like any broadcast, while frames to
a member port's own MAC are routed and ARP for the switch's address is answered on the
ingress member. Routing into the segment uses the neighbour's member port, and resolving an
unknown host in the segment asks on every member.

No destination MAC here is ever a source MAC, so no frame depends on the FDB entries the
control plane learns during the run: every non-routed frame is flooded."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ARP, ICMP, IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["g0", "g1", "g2", "r0"]
GROUP = ["g0", "g1", "g2"]
SW = {"g0": "02:00:00:00:00:11", "g1": "02:00:00:00:00:12", "g2": "02:00:00:00:00:13",
      "r0": "02:00:00:00:00:14"}
SW_LAN_IP = "10.0.10.1"
A = ("02:00:00:00:10:0a", "10.0.10.10")   # host behind g0
B = ("02:00:00:00:10:0b", "10.0.10.11")   # host behind g1
HG = ("02:00:00:00:10:05", "10.0.10.5")   # static neighbour behind g2
HR = ("02:00:00:00:01:02", "10.0.1.2")    # host on r0
BCAST = "ff:ff:ff:ff:ff:ff"
ZERO = "00:00:00:00:00:00"

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}
asynchronous = {p: [] for p in PORTS}


def flood(in_port, frame):
    """A frame that must leave, byte for byte unchanged, on every other member."""
    frame = bytes(frame)
    inputs[in_port].append(frame)
    for p in GROUP:
        if p != in_port:
            expect[p].append(frame)


def udp(eth_src, eth_dst, src, dst, ttl, ident, data=b"lan"):
    return bytes(Ether(src=eth_src, dst=eth_dst) / IP(src=src, dst=dst, ttl=ttl, id=ident) /
                 UDP(sport=5000, dport=5001) / Raw(data))


def routed(in_port, host, dst, out_port, next_hop_mac, ident):
    inputs[in_port].append(udp(host[0], SW[in_port], host[1], dst, 64, ident))
    expect[out_port].append(udp(SW[out_port], next_hop_mac, host[1], dst, 63, ident))


def arp(eth_src, eth_dst, op, sha, spa, tha, tpa):
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 ARP(op=op, hwsrc=sha, psrc=spa, hwdst=tha, pdst=tpa))


# From g0 (host A).
flood("g0", udp(A[0], BCAST, A[1], "10.0.10.255", 64, 1))                  # IPv4 broadcast
flood("g0", udp(A[0], "02:00:00:00:10:99", A[1], "10.0.10.99", 64, 2))     # unknown unicast
flood("g0", udp(A[0], "01:00:5e:01:02:03", A[1], "239.1.2.3", 1, 3))       # IPv4 multicast
flood("g0", bytes(Ether(src=A[0], dst=BCAST, type=0x88B5)) + b"non-IP broadcast payload")
flood("g0", udp(A[0], "02:00:00:00:10:98", A[1], "10.0.1.2", 64, 4))       # unknown unicast,
#                                                     routable IP: bridged, not routed
# ARP not for the switch is flooded too, in arrival order with the frames around it: arp_input
# hands it to the bridge separately, and the bridge must still not reorder frames between the
# same stations (802.1D), so a bridged frame follows it in the same burst.
flood("g0", arp(A[0], BCAST, 1, A[0], A[1], ZERO, "10.0.10.77"))
flood("g0", bytes(Ether(src=A[0], dst=BCAST, type=0x88B5)) + b"after the flooded ARP")
routed("g0", A, HR[1], "r0", HR[0], 5)                                      # to g0's MAC
inputs["g0"].append(arp(A[0], BCAST, 1, A[0], A[1], ZERO, SW_LAN_IP))      # ARP for us:
expect["g0"].append(arp(SW["g0"], A[0], 2, SW["g0"], SW_LAN_IP, A[0], A[1]))  # answered

# From g1 (host B): g1 has no address, but its MAC routes and it answers for the segment.
routed("g1", B, HR[1], "r0", HR[0], 6)                                      # to g1's MAC
flood("g1", udp(B[0], BCAST, B[1], "255.255.255.255", 64, 7))               # limited bcast
inputs["g1"].append(arp(B[0], BCAST, 1, B[0], B[1], ZERO, SW_LAN_IP))
expect["g1"].append(arp(SW["g1"], B[0], 2, SW["g1"], SW_LAN_IP, B[0], B[1]))

# From r0: routed into the segment, to a static neighbour behind g2 and to an unknown host
# (dropped; an ARP request from each member port, for the address on g0's subnet).
routed("r0", HR, HG[1], "g2", HG[0], 8)
inputs["r0"].append(udp(HR[0], SW["r0"], HR[1], "10.0.10.99", 64, 9))
for p in GROUP:
    asynchronous[p].append(arp(SW[p], BCAST, 1, SW[p], SW_LAN_IP, ZERO, "10.0.10.99"))
# An echo request for the segment address, from the routed side: answered on r0.
inputs["r0"].append(bytes(Ether(src=HR[0], dst=SW["r0"]) /
                          IP(src=HR[1], dst=SW_LAN_IP, id=10) / ICMP(id=3, seq=1)))
expect["r0"].append(bytes(Ether(src=SW["r0"], dst=HR[0]) /
                          IP(src=SW_LAN_IP, dst=HR[1], id=10) / ICMP(type=0, id=3, seq=1)))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect, asynchronous)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out, "
              f"{len(asynchronous[p])} from the control plane")
