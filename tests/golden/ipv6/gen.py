# SPDX-License-Identifier: Apache-2.0
"""ipv6: Neighbor Discovery, ICMPv6 echo and the IPv6 routing checks, frames built by scapy.

- An NS for the switch's address (to its solicited-node group, RFC 4861 7.2.3) is answered
  with an NA from the ingress port's MAC to the solicitor: router, solicited and override set,
  the target's link-layer address option, hop limit 255, a valid checksum. A DAD NS (source
  ::, no source link-layer option) is answered to all nodes (ff02::1, 33:33:00:00:00:01),
  not solicited (RFC 4861 7.2.4).
- An echo request to any of the switch's addresses is answered from the address it was sent
  to, hop limit 64, the request's identifier, sequence number and data (RFC 4443 4.2).
- ND with a hop limit other than 255 (nd_invalid), an ICMPv6 checksum that fails
  (icmp6_bad_checksum), a hop limit of 1 to a routed destination (hop_limit_exceeded, no
  ICMPv6 error), a link-local source (ipv6_martian), a version other than 6
  (ipv6_malformed), a payload length beyond the frame (ipv6_bad_length), a destination no
  prefix covers (no_route) and multicast to another group's MAC (not_for_us) are dropped.
- A packet to an unknown host on p1's prefix is dropped (neighbour_unresolved) and the switch
  sends one NS for it on p1 (to its solicited-node group, from p1's address, with the source
  link-layer option); a second packet within the request interval sends no second NS."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import (UDP, Ether, ICMPv6EchoReply, ICMPv6EchoRequest,  # noqa: E402
                       ICMPv6ND_NA, ICMPv6ND_NS, ICMPv6ND_RS, ICMPv6NDOptDstLLAddr,
                       ICMPv6NDOptSrcLLAddr, IPv6, Raw, in6_getnsma, in6_getnsmac, inet_pton,
                       inet_ntop)
import socket  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
SW6 = {"p0": "2001:db8:1::1", "p1": "2001:db8:2::1"}
H1 = ("02:00:00:00:10:02", "2001:db8:1::2")

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def solicited_node(addr):
    return inet_ntop(socket.AF_INET6, in6_getnsma(inet_pton(socket.AF_INET6, addr)))


def solicited_mac(addr):
    return in6_getnsmac(inet_pton(socket.AF_INET6, addr))


def ns(src_mac, src, target, hlim=255, lla=True):
    dst = solicited_node(target)
    pkt = Ether(src=src_mac, dst=solicited_mac(dst)) / IPv6(src=src, dst=dst, hlim=hlim) / \
        ICMPv6ND_NS(tgt=target)
    if lla:
        pkt = pkt / ICMPv6NDOptSrcLLAddr(lladdr=src_mac)
    return bytes(pkt)


def na(port, dst_mac, dst, solicited):
    return bytes(Ether(src=SW[port], dst=dst_mac) / IPv6(src=SW6[port], dst=dst, hlim=255) /
                 ICMPv6ND_NA(R=1, S=1 if solicited else 0, O=1, tgt=SW6[port]) /
                 ICMPv6NDOptDstLLAddr(lladdr=SW[port]))


def echo(src_mac, dst_mac, src, dst, hlim, reply, ident, seq, data, cksum=None):
    icmp = (ICMPv6EchoReply if reply else ICMPv6EchoRequest)(id=ident, seq=seq, data=data)
    if cksum is not None:
        icmp.cksum = cksum
    return bytes(Ether(src=src_mac, dst=dst_mac) / IPv6(src=src, dst=dst, hlim=hlim) / icmp)


def udp(src, dst, hlim, plen=None, version=6):
    ip = IPv6(src=src, dst=dst, hlim=hlim, version=version)
    if plen is not None:
        ip.plen = plen
    return bytes(Ether(src=H1[0], dst=SW["p0"]) / ip / UDP(sport=5000, dport=4791) /
                 Raw(bytes(range(32))))


mac, ip = H1
# ND for the switch's address, and DAD for it.
inputs["p0"].append(ns(mac, ip, SW6["p0"]))
expect["p0"].append(na("p0", mac, ip, True))
inputs["p0"].append(ns(mac, "::", SW6["p0"], lla=False))
expect["p0"].append(na("p0", "33:33:00:00:00:01", "ff02::1", False))
# Echo to p0's address and to p1's, both answered on p0.
for i, own in enumerate((SW6["p0"], SW6["p1"])):
    data = bytes(range(56)) if i == 0 else b"odd-length-33-bytes-of-echo-data!"
    inputs["p0"].append(echo(mac, SW["p0"], ip, own, 3, False, 0x600 + i, i + 1, data))
    expect["p0"].append(echo(SW["p0"], mac, own, ip, 64, True, 0x600 + i, i + 1, data))
# Dropped by reason.
inputs["p0"].append(ns(mac, ip, SW6["p0"], hlim=64))                           # nd_invalid
good = echo(mac, SW["p0"], ip, SW6["p0"], 64, False, 0x610, 1, b"x" * 8)
inputs["p0"].append(echo(mac, SW["p0"], ip, SW6["p0"], 64, False, 0x610, 1, b"x" * 8,
                         cksum=IPv6(good[14:])[ICMPv6EchoRequest].cksum ^ 0x0100))  # bad cksum
inputs["p0"].append(udp(ip, "2001:db8:2::9", 1))                               # hop limit 1
inputs["p0"].append(udp("fe80::2", "2001:db8:2::9", 64))                       # martian
inputs["p0"].append(udp(ip, "2001:db8:2::9", 64, version=4))                   # malformed
inputs["p0"].append(udp(ip, "2001:db8:2::9", 64, plen=200))                    # bad length
inputs["p0"].append(udp(ip, "2001:db8:99::1", 64))                             # no route
inputs["p0"].append(bytes(Ether(src=mac, dst="33:33:00:00:00:02") /
                          IPv6(src=ip, dst="ff02::2", hlim=255) /
                          ICMPv6ND_RS()))                                      # not for us
# Unknown host on p1: one NS on p1, two counted drops.
inputs["p0"].append(udp(ip, "2001:db8:2::9", 64))
inputs["p0"].append(udp(ip, "2001:db8:2::9", 63))
target = "2001:db8:2::9"
group = solicited_node(target)
expect["p1"].append(bytes(Ether(src=SW["p1"], dst=solicited_mac(group)) /
                          IPv6(src=SW6["p1"], dst=group, hlim=255) / ICMPv6ND_NS(tgt=target) /
                          ICMPv6NDOptSrcLLAddr(lladdr=SW["p1"])))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
