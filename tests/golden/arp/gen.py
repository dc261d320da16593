# SPDX-License-Identifier: Apache-2.0
"""arp: the switch answers ARP requests for the ingress port's own address (RFC 826), turning
the request into a reply to the sender's hardware address; it ignores ARP for any other
address on a routed port (arp_not_for_us), consumes replies addressed to it, and asks for an
unresolved next hop with a broadcast request from the egress port while the packet that
needed it is dropped (neighbour_unresolved). One request per unresolved address.

Replies keep the request frame's length, so Ethernet padding is carried over."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ARP, IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": ("02:00:00:00:00:01", "10.0.0.1"), "p1": ("02:00:00:00:00:02", "10.0.1.1")}
BCAST = "ff:ff:ff:ff:ff:ff"
ZERO = "00:00:00:00:00:00"
HOSTS = {ip: f"02:00:00:00:10:{int(ip.split('.')[3]):02x}"
         for ip in ("10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.9")}

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}
asynchronous = {p: [] for p in PORTS}


def arp_frame(eth_src, eth_dst, op, sha, spa, tha, tpa, pad=0):
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 ARP(op=op, hwsrc=sha, psrc=spa, hwdst=tha, pdst=tpa)) + b"\x00" * pad


def request(sender_ip, target_ip, sha=None, eth_dst=BCAST, pad=0):
    sha = sha or HOSTS[sender_ip]
    return arp_frame(sha, eth_dst, 1, sha, sender_ip, ZERO, target_ip, pad)


def answered(port, sender_ip, sha=None, eth_dst=BCAST, pad=0):
    """A request for `port`'s address, and the reply the switch must send back."""
    mac, ip = SW[port]
    sha = sha or HOSTS[sender_ip]
    inputs[port].append(request(sender_ip, ip, sha, eth_dst, pad))
    expect[port].append(arp_frame(mac, sha, 2, mac, ip, sha, sender_ip, pad))


def udp_to(dst, ident):
    return bytes(Ether(src=HOSTS["10.0.0.2"], dst=SW["p0"][0]) /
                 IP(src="10.0.0.2", dst=dst, id=ident) / UDP(sport=1000, dport=2000) /
                 Raw(b"needs-arp"))


# Requests for p0's address: broadcast, unicast to the switch (a refresh, padded to 60
# bytes), an RFC 5227 probe (sender 0.0.0.0), and one from outside the subnet.
answered("p0", "10.0.0.2")
answered("p0", "10.0.0.3", eth_dst=SW["p0"][0], pad=18)
answered("p0", "0.0.0.0", sha=HOSTS["10.0.0.5"])
answered("p0", "192.168.7.7", sha="02:00:00:00:77:07")

# Not for us on a routed port: dropped, never answered and never flooded.
inputs["p0"].append(request("10.0.0.2", "10.0.1.1"))              # p1's address, asked on p0
inputs["p0"].append(request("10.0.0.9", "10.0.0.9"))              # gratuitous request
inputs["p0"].append(arp_frame(HOSTS["10.0.0.9"], BCAST, 2,        # gratuitous reply
                              HOSTS["10.0.0.9"], "10.0.0.9", BCAST, "10.0.0.9"))
inputs["p0"].append(request("10.0.0.2", "10.0.0.50"))             # another host's address
# A reply to the switch is consumed: no output, no drop counted.
inputs["p0"].append(arp_frame(HOSTS["10.0.0.4"], SW["p0"][0], 2,
                              HOSTS["10.0.0.4"], "10.0.0.4", SW["p0"][0], "10.0.0.1"))

# Unresolved next hops on p1: a connected host (two packets, one request) and a gateway.
inputs["p0"].append(udp_to("10.0.1.77", 1))
inputs["p0"].append(udp_to("10.0.1.77", 2))
inputs["p0"].append(udp_to("198.51.100.9", 3))
mac1, ip1 = SW["p1"]
asynchronous["p1"].append(arp_frame(mac1, BCAST, 1, mac1, ip1, ZERO, "10.0.1.77"))
asynchronous["p1"].append(arp_frame(mac1, BCAST, 1, mac1, ip1, ZERO, "10.0.1.254"))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect, asynchronous)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out, "
              f"{len(asynchronous[p])} from the control plane")
