# SPDX-License-Identifier: Apache-2.0
"""bier_ina_root: a VAT root with `results: bier` (draft-song-ina-00: the root returns the
result by BIER multicast with BitString = its A-BM). When a chunk completes, the root builds one
INA result (type result, P-BM = A-BM, the element-wise sum) in an IPv4/UDP packet from the
job's root address to the placeholder 0.0.0.0 (TTL 64, DF, id 0, UDP port 9470 both ways, a
UDP checksum) and, as BFIR, sends it over BIER: BIFT 0x10000 (BSL 64 set 0), TTL = bier.ttl (16),
Proto 4, BFIR-id = bier.bfr_id (100), entropy = the chunk's sequence number (its low 20 bits),
BitString = A-BM {1, 2, 3}. The BIFT then does the rest: neighbour n1 gets one copy with
BitString {1, 2} (its F-BM), and own bit 3 is delivered to w3 with the inner destination
rewritten to w3's address (IPv4 and UDP checksums fixed). A worker retransmitting
a completed chunk gets the result again by unicast, routed to it alone."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, labels  # noqa: E402
from inapkt import DATA, RESULT, RETRANSMIT, ina  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

case = Case(2)
N1 = ("10.0.1.2", "02:00:00:00:11:02")
W = {1: ("p1", N1[1], "10.1.0.1"), 2: ("p1", N1[1], "10.1.0.2"),
     3: ("p0", "02:00:00:00:10:03", "10.0.0.3")}      # BFR-id: (port, MAC it sends from, IP)
ROOT, PORT, BSL, BFR_ID, BIER_TTL = "10.0.0.1", 9470, 64, 100, 16
LABELS = labels(BSL)


def contribute(w, seq, values, flags=0):
    port, mac, ip = W[w]
    case.inputs[port].append(bytes(Ether(src=mac, dst=case.sw[port]) /
                                   IP(src=ip, dst=ROOT, id=(seq * 8 + w) & 0xFFFF, flags="DF") /
                                   UDP(sport=40000 + w, dport=PORT) /
                                   Raw(ina(9, seq, [w], values, DATA, flags))))
    case.count("inaswitch_ina_packets_total")


def result_ip(seq, values, dst, src=ROOT, ttl=64):
    return IP(src=src, dst=dst, id=0, flags="DF", ttl=ttl) / \
        UDP(sport=PORT, dport=PORT) / Raw(ina(9, seq, [1, 2, 3], values, RESULT))


def result_over_bier(seq, values):
    data = bytes(result_ip(seq, values, "0.0.0.0"))
    case.count("inaswitch_ina_results_sent_total")
    case.count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    case.copy(LABELS, N1[0], "p1", N1[1], bier(BSL, {1, 2}, BIER_TTL, entropy=seq & 0xFFFFF,
                                               bfir=BFR_ID), data)
    case.deliver(LABELS, "p0", W[3][1], result_ip(seq, values, W[3][2]))


a, b, c = [1, -2, 3, 2**31 - 1], [10, 20, -30, 0], [100, 200, 300, -1]
contribute(1, 0, a)
contribute(2, 0, b)
contribute(3, 0, c)                                      # completes chunk 0
result_over_bier(0, [x + y + z for x, y, z in zip(a, b, c)])
contribute(3, 1, [5] * 3)
contribute(1, 1, [6] * 3)
contribute(2, 1, [7] * 3)                                # completes chunk 1: entropy 1
result_over_bier(1, [18] * 3)
# A sequence number beyond 20 bits: the entropy is its low 20 bits.
contribute(2, 0x100002, [1] * 2)
contribute(3, 0x100002, [2] * 2)
contribute(1, 0x100002, [3] * 2)
result_over_bier(0x100002, [6] * 2)
# w1 lost chunk 0's result and asks again: unicast to w1 alone, routed via n1 (source: the
# root's address, as for the BIER results, so workers see one sender; TTL 64: routing does
# not decrement the switch's own packets).
contribute(1, 0, a, RETRANSMIT)
case.expect["p1"].append(bytes(Ether(src=case.sw["p1"], dst=N1[1]) /
                               result_ip(0, [x + y + z for x, y, z in zip(a, b, c)], W[1][2],
                                         src=ROOT, ttl=64)))
case.count("inaswitch_ina_resent_total")
case.count("inaswitch_routed_packets_total")

if __name__ == "__main__":
    case.finish(HERE)
