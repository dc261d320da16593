# SPDX-License-Identifier: Apache-2.0
"""bier_ecmp: RFC 8279 section 6.7 ECMP, as the switch documents it. A BIFT row may have
several (F-BM, neighbour) paths; packets with the same entropy take the same path. The switch
resolves ECMP into planes ahead of time: a BIFT has as many planes as the least common
multiple of its bits' path counts, a packet uses plane = entropy mod planes, and a bit whose
paths are P (neighbours in configuration order) goes, in plane e, to P[e mod |P|]. Within a
plane every bit has one neighbour, so each copy carries BitString AND that neighbour's F-BM of
the plane, and no bit goes to two neighbours.

Here BFR-id 2 has paths [n1, n2], BFR-id 5 [n1, n2, n3]: 6 planes. Bits 1, 3 and 4 have one
path each (n1, n2, n3). Every plane is exercised, with entropies 0..11, the 20-bit maximum and
repeats interleaved with others, which must take the same paths as before."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, UDP, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
NBR = {"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02"),        # configuration order
       "n2": ("10.0.2.2", "p2", "02:00:00:00:12:02"),
       "n3": ("10.0.3.2", "p3", "02:00:00:00:13:02")}
PATHS = {1: ["n1"], 2: ["n1", "n2"], 3: ["n2"], 4: ["n3"], 5: ["n1", "n2", "n3"]}
PLANES = 6                                                     # lcm(1, 2, 1, 1, 3)
BSL = 256
LABELS = labels(BSL)


def fbm(plane, name):
    return {bit for bit, paths in PATHS.items() if paths[plane % len(paths)] == name}


def packet(ids, entropy, ident):
    data = bytes(IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) /
                 UDP(sport=1000, dport=5000) / Raw(b"ecmp %d" % ident + bytes(40)))
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(BSL, ids, 64, entropy=entropy, bfir=3),
                                   data))
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    plane = entropy % PLANES
    for name, (ip, port, mac) in NBR.items():
        bits = set(ids) & fbm(plane, name)
        if bits:
            case.copy(LABELS, ip, port, mac, bier(BSL, bits, 63, entropy=entropy, bfir=3), data)


ident = 0
for entropy in list(range(12)) + [0xFFFFF, 0x12345, 5, 0, 7, 0x12345, 5]:
    ident += 1
    packet({1, 2, 3, 4, 5}, entropy, ident)
for entropy in range(6):                  # bit 2 alone: n1, n2, n1, n2, ...
    ident += 1
    packet({2}, entropy, ident)
for entropy in range(6):                  # bit 5 alone: n1, n2, n3, n1, ...
    ident += 1
    packet({5}, entropy, ident)

if __name__ == "__main__":
    case.finish(HERE)
