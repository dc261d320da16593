# SPDX-License-Identifier: Apache-2.0
"""bier_no_neighbour: bits that neither a neighbour's F-BM nor an own bit covers (RFC 8279
section 6.5: the BFR clears such a bit, since nothing can take it; reference/bier.md pitfall
7). No copy carries them (each copy is BitString AND F-BM), and each one is counted in
inaswitch_bier_bits_no_neighbour_total of its BIFT. The reachable bits of the same packet are
still forwarded and delivered. A packet whose bits are all unreachable, and one with an empty
BitString, send nothing; a BIFT with no neighbour and no own bit clears everything."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, UDP, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
# BSL: (neighbours {name: (ip, port, MAC, F-BM)}, own bits {BFR-id: (port, host MAC)})
BIFTS = {64: ({"n1": ("10.0.1.2", "p1", "02:00:00:00:11:02", {1, 2})},
              {3: ("p3", "02:00:00:00:13:10")}),
         256: ({}, {})}


def packet(bsl, ids, ident):
    bift = labels(bsl)
    nbrs, own = BIFTS[bsl]
    data = bytes(IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) /
                 UDP(sport=1000, dport=5000) / Raw(b"nn %d" % ident + bytes(30)))
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(bsl, ids, 64, entropy=ident, bfir=3),
                                   data))
    case.count(f"inaswitch_bier_packets_total{{{bift}}}")
    reachable = set(own).union(*[n[3] for n in nbrs.values()])
    cleared = set(ids) - reachable
    if cleared:
        case.count(f"inaswitch_bier_bits_no_neighbour_total{{{bift}}}", len(cleared))
    for name, (ip, port, mac, fbm) in nbrs.items():
        if set(ids) & fbm:
            case.copy(bift, ip, port, mac, bier(bsl, set(ids) & fbm, 63, entropy=ident, bfir=3),
                      data)
    for bfr_id, (port, mac) in own.items():
        if bfr_id in ids:
            case.deliver(bift, port, mac, data)


packet(64, {1, 2, 3, 4, 10, 64}, 1)     # 4, 10 and 64 cleared; n1 gets {1, 2}; 3 delivered
packet(64, {5}, 2)                      # nothing reachable: nothing sent
packet(64, {2, 63}, 3)                  # 63 cleared; n1 gets {2}
packet(64, set(), 4)                    # empty BitString: nothing to do, nothing counted
packet(64, set(range(1, 65)), 5)        # every bit: 61 cleared
packet(256, {1, 2, 256}, 6)             # a BIFT with nothing: all three cleared
packet(64, {1, 3}, 7)                   # nothing cleared

if __name__ == "__main__":
    case.finish(HERE)
