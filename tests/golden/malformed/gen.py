# SPDX-License-Identifier: Apache-2.0
"""malformed: frames a router must not forward, each dropped under its own reason, between
two good packets that must still be routed (the switch survives every one of them):
  runt                   frames shorter than an Ethernet header
  ipv4_malformed         truncated header, version != 4, IHL < 5, header or total length
                         past the end of the frame, total length < header length
  ipv4_bad_checksum      header checksum mismatch (RFC 1812 5.2.2)
  arp_malformed          truncated ARP, hardware/protocol type or length other than
                         Ethernet/IPv4, opcode other than request/reply
  unsupported_ethertype  IPv6, VLAN-tagged and other ethertypes sent to the switch's MAC
  not_for_us             unicast frames for another MAC on a routed port
  ipv4_martian           sources and destinations that are never routed (RFC 1812 5.3.7)"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ARP, IP, UDP, Dot1Q, Ether, IPv6, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
H0 = ("02:00:00:00:10:02", "10.0.0.2")
H1 = ("02:00:00:00:11:02", "10.0.1.2")
BCAST = "ff:ff:ff:ff:ff:ff"

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def eth(dst=SW["p0"], type=0x0800):
    return Ether(src=H0[0], dst=dst, type=type)


def ip_bytes(**kw):
    """An IPv4 packet to H1 with a UDP payload, built (checksums filled in) and as bytes."""
    fields = dict(src=H0[1], dst=H1[1], id=7)
    fields.update(kw)
    return bytes(IP(**fields) / UDP(sport=1, dport=2) / Raw(b"bad"))


def drop(frame):
    inputs["p0"].append(bytes(frame))


def good(ident):
    inputs["p0"].append(bytes(eth() / IP(src=H0[1], dst=H1[1], id=ident) / Raw(b"good")))
    expect["p1"].append(bytes(Ether(src=SW["p1"], dst=H1[0]) /
                              IP(src=H0[1], dst=H1[1], id=ident, ttl=63) / Raw(b"good")))


good(1)

# runt (2)
drop(bytes(eth())[:13])
drop(b"\x02")

# ipv4_malformed (7)
drop(bytes(eth()))                                            # ethertype only, no header
drop(bytes(eth()) + ip_bytes()[:19])                          # header cut at 19 bytes
drop(eth() / ip_bytes(version=6))                             # version 6 in an IPv4 frame
drop(eth() / ip_bytes(ihl=4))                                 # IHL 4
drop(eth() / ip_bytes(ihl=15))                                # 60-byte header in 31 bytes
drop(eth() / ip_bytes(len=100))                               # total length past the frame
drop(eth() / ip_bytes(len=19))                                # total length < IHL * 4

# ipv4_bad_checksum (1)
good_ck = IP(ip_bytes()).chksum
drop(eth() / ip_bytes(chksum=good_ck ^ 0x0100))

# arp_malformed (6)
arp = bytes(ARP(op=1, hwsrc=H0[0], psrc=H0[1], pdst="10.0.0.1"))


def patched(offset, value):
    b = bytearray(arp)
    b[offset:offset + len(value)] = value
    return bytes(b)


drop(bytes(eth(BCAST, 0x0806)))                               # ethertype only
drop(bytes(eth(BCAST, 0x0806)) + arp[:27])                    # one byte short
drop(bytes(eth(BCAST, 0x0806)) + patched(0, b"\x00\x06"))     # hardware type IEEE 802
drop(bytes(eth(BCAST, 0x0806)) + patched(2, b"\x86\xdd"))     # protocol type IPv6
drop(bytes(eth(BCAST, 0x0806)) + patched(4, b"\x08"))         # hardware length 8
drop(bytes(eth(SW["p0"], 0x0806)) + patched(6, b"\x00\x03"))  # opcode 3 (RARP request)

# unsupported_ethertype (3)
drop(eth(type=0x86DD) / IPv6(src="fe80::2", dst="fe80::1") / UDP() / Raw(b"v6"))
drop(eth(type=0x8100) / Dot1Q(vlan=10) / IP(src=H0[1], dst=H1[1]) / Raw(b"tagged"))
drop(bytes(eth(type=0x88B5)) + b"local experimental ethertype")

# not_for_us (2)
drop(eth(dst="02:00:00:00:99:99") / IP(src=H0[1], dst=H1[1]) / Raw(b"elsewhere"))
drop(bytes(eth("02:00:00:00:99:99", 0x0806)) + arp)           # unicast ARP for another MAC

# ipv4_martian (10): sources, then destinations; otherwise routable.
for src in ("0.0.0.0", "127.0.0.1", "224.0.0.1", "255.255.255.255"):
    drop(eth() / ip_bytes(src=src))
for dst in ("0.1.2.3", "127.0.0.1", "224.0.0.5", "239.255.255.250", "240.0.0.1",
            "255.255.255.255"):
    drop(eth() / ip_bytes(dst=dst))

good(2)

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
