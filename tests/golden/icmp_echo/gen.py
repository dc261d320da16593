# SPDX-License-Identifier: Apache-2.0
"""icmp_echo: an echo request to any of the switch's addresses is answered with an echo
reply (RFC 792, RFC 1122 3.2.2.6): type 0, the request's identifier, sequence number and
data, source and destination addresses swapped, a fresh TTL of 64, valid IP and ICMP
checksums, sent from the ingress port's MAC to the requester's MAC. An address on another
port is answered the same way, from the port the request came in on. Requests the switch
does not serve are dropped as local_unsupported."""

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
H1 = ("02:00:00:00:11:02", "10.0.1.2")

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def icmp_frame(eth_src, eth_dst, src, dst, ttl, icmp_type, ident, seq, data, ip_id,
               icmp_chksum=None, pad=0, **ipkw):
    icmp = ICMP(type=icmp_type, id=ident, seq=seq)
    if icmp_chksum is not None:
        icmp.chksum = icmp_chksum
    return bytes(Ether(src=eth_src, dst=eth_dst) /
                 IP(src=src, dst=dst, ttl=ttl, id=ip_id, **ipkw) / icmp / Raw(data)) + \
        b"\x00" * pad


def ping(port, host, switch_ip, ident, seq, data, ttl=64, pad=0, **ipkw):
    """An echo request from `host` on `port`, and the reply the switch must send."""
    mac, ip = host
    inputs[port].append(icmp_frame(mac, SW[port], ip, switch_ip, ttl, 8, ident, seq, data,
                                   ident, pad=pad, **ipkw))
    expect[port].append(icmp_frame(SW[port], mac, switch_ip, ip, 64, 0, ident, seq, data,
                                   ident, pad=pad, **ipkw))


def unserved(frame):
    inputs["p0"].append(frame)


payload56 = bytes(range(56))
ping("p0", H0, "10.0.0.1", 0x101, 1, payload56)                        # own address
ping("p0", H0, "10.0.1.1", 0x102, 2, payload56)                        # p1's address, via p0
ping("p0", H0, "10.0.9.1", 0x103, 3, payload56)                        # p1's second address
ping("p0", H0, "10.0.0.1", 0x104, 4, b"odd-length-33-bytes-of-echo-data!")
ping("p0", H0, "10.0.0.1", 0x105, 5, b"tiny", pad=14)                  # 60-byte padded frame
ping("p0", H0, "10.0.0.1", 0x106, 6, bytes(1400))                      # large
ping("p0", H0, "10.0.0.1", 0x107, 7, payload56, ttl=3, tos=0x10, flags="DF")
ping("p0", ("02:00:00:00:10:fe", "198.51.100.7"), "10.0.0.1", 0x108, 8, payload56)  # remote


# Checksum corner case for the incremental update: a reply whose ICMP checksum is 0x0000.
def zero_reply_seq():
    for seq in range(65536):
        if ICMP(bytes(ICMP(type=0, id=0x109, seq=seq) / Raw(payload56))).chksum == 0:
            return seq
    raise SystemExit("no sequence number gives a zero checksum")


ping("p0", H0, "10.0.0.1", 0x109, zero_reply_seq(), payload56)

# Not served: dropped as local_unsupported.
good_ck = ICMP(icmp_frame(H0[0], SW["p0"], H0[1], "10.0.0.1", 64, 8, 0x201, 1, payload56,
                         0x201)[34:]).chksum
unserved(icmp_frame(H0[0], SW["p0"], H0[1], "10.0.0.1", 64, 8, 0x201, 1, payload56, 0x201,
                    icmp_chksum=good_ck ^ 0x0400))                   # bad ICMP checksum
unserved(icmp_frame(H0[0], SW["p0"], H0[1], "10.0.0.1", 64, 0, 0x202, 1, payload56,
                    0x202))                                          # an echo reply
unserved(bytes(Ether(src=H0[0], dst=SW["p0"]) / IP(src=H0[1], dst="10.0.0.1", id=0x203) /
               ICMP(type=13, id=0x203, seq=1, ts_ori=0, ts_rx=0, ts_tx=0)))  # timestamp
unserved(icmp_frame(H0[0], SW["p0"], H0[1], "10.0.0.1", 64, 8, 0x204, 1, payload56, 0x204,
                    flags="MF"))                                     # first fragment
unserved(bytes(Ether(src=H0[0], dst=SW["p0"]) / IP(src=H0[1], dst="10.0.0.1", id=0x205) /
               UDP(sport=9, dport=7) / Raw(b"udp echo?")))           # UDP to the switch

# From p1: its own address and p0's, answered on p1.
ping("p1", H1, "10.0.1.1", 0x301, 1, payload56)
ping("p1", H1, "10.0.0.1", 0x302, 2, payload56)

if __name__ == "__main__":
    assert ICMP(expect["p0"][-1][34:]).chksum == 0
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for p in PORTS:
        print(f"{p}: {len(inputs[p])} in, {len(expect[p])} expected out")
