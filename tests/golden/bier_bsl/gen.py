# SPDX-License-Identifier: Apache-2.0
"""bier_bsl: RFC 8279 section 6.5 transit forwarding at every BSL the switch offers (64, 256,
1024, 4096), one BIFT each (set 0, sub-domain 0, default BIFT-ids 0x10000, 0x30000, 0x50000,
0x70000). For each packet and each neighbour whose F-BM meets the packet's BitString, one copy
leaves on the neighbour's port with:
  - a new Ethernet header (the egress port's MAC as source, the neighbour's as destination,
    type 0xAB37);
  - the BIER header unchanged but for TTL - 1 (TC, S, BSL, entropy, OAM, DSCP, Proto and
    BFIR-id carried as received) and BitString = received BitString AND the neighbour's F-BM;
  - the payload byte for byte.
Neighbours get their copies in configuration order (n3 before n4 on p3); a neighbour whose
F-BM misses the BitString gets nothing. Bits at word and octet edges (BP 1, 8, 9, 32, 33, BSL)
pin the bit order: BP 1 is the least significant bit of the last octet. A copy that would
exceed the egress MTU (1500) is dropped as mtu_exceeded; one of exactly 1500 octets is sent."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, UDP, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"                      # the upstream BFR on p0
# name: (address, port, MAC), in configuration order
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02"),
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02"),
       "n3": ("10.0.3.2", "p3", "02:00:00:00:13:02"),
       "n4": ("10.0.3.3", "p3", "02:00:00:00:13:03")}
FBM = {
    64: {"n1": {1, 8, 9}, "n2": {32, 33}, "n3": {64}, "n4": {2}},
    256: {"n1": {1, 256}, "n2": {128, 129}, "n3": {17}, "n4": {200}},
    1024: {"n1": {1, 1024}, "n2": {512, 513}, "n3": {1000}, "n4": {3}},
    4096: {"n1": {1, 4096}, "n2": {2048, 2049}, "n3": {4000}, "n4": {5}},
}
MTU = 1500


def payload(ident, size):
    """An IPv4/UDP packet of `size` octets: the BIER payload (Proto 4), never looked at."""
    body = bytes((ident + i) % 256 for i in range(size - 28))
    return bytes(IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) /
                 UDP(sport=1000 + ident, dport=5000) / Raw(body))


def transit(bsl, ids, ttl, ident, size=100, **fields):
    """One BIER packet in on p0 and its copies, one per neighbour whose F-BM meets `ids`."""
    data = payload(ident, size)
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(bsl, ids, ttl, **fields), data))
    case.count(f"inaswitch_bier_packets_total{{{labels(bsl)}}}")
    for name, (ip, port, mac) in NBR.items():
        bits = set(ids) & FBM[bsl][name]
        if not bits:
            continue
        header = bier(bsl, bits, ttl - 1, **fields)
        if len(header) + len(data) > MTU:
            case.count('inaswitch_drops_total{reason="mtu_exceeded"}')
            continue
        case.copy(labels(bsl), ip, port, mac, header, data)


for bsl in (64, 256, 1024, 4096):
    every = set().union(*FBM[bsl].values())
    transit(bsl, every, 64, 1)                                  # every neighbour, whole F-BM
    transit(bsl, {1}, 2, 2)                                     # BP 1 only: n1 alone, TTL 2 -> 1
    transit(bsl, {max(FBM[bsl]["n2"]), min(FBM[bsl]["n4"])}, 255, 3, size=333,
            tc=5, dscp=46, oam=2, entropy=0xABCDE, bfir=0x1234)  # fields carried; n2, n4
    transit(bsl, FBM[bsl]["n3"] | FBM[bsl]["n4"], 17, 4)        # two neighbours on p3, in order
    transit(bsl, {max(FBM[bsl]["n1"])}, 64, 5, size=28)         # top bit; an 8-octet UDP payload
# MTU: with BSL 4096 the header is 12 + 512 octets, so a 976-octet payload makes a 1500-octet
# copy (sent) and a 977-octet one a 1501-octet copy (dropped).
transit(4096, {4096}, 64, 6, size=976)
transit(4096, {4096}, 64, 7, size=977)

if __name__ == "__main__":
    case.finish(HERE)
