# SPDX-License-Identifier: Apache-2.0
"""ina_root: the switch as the VAT root (draft-song-ina-00 allows a switch or a server).
Chunk 0 (fp32) completes when w1 and w2 have contributed: one result per worker, unicast, with
P-BM = A-BM and the element-wise sum. w1 retransmits chunk 0 after completion: the result goes
to w1 alone; a child switch's re-sent partial (multi-bit P-BM) makes the result go to every
worker again, since the switch cannot use it. A contribution from outside the job's ingress prefix and one from another port are
dropped (on_reject: drop), as is a duplicate. w2's completing contribution and w1's
retransmission carry their lowest missing result (flag 0x08, chunk 0): the results carry it
not (flag clear, word 0)."""

import math
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from inapkt import DATA, RESULT, RETRANSMIT, ina  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
W = {1: ("02:00:00:00:11:02", "10.0.1.2"), 2: ("02:00:00:00:11:03", "10.0.1.3")}
PORT = 9470

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def f32(x):
    """Rounds to binary32 (round to nearest even); beyond its range, to the signed infinity
    (6e38 is far past the largest float plus half an ulp, so no tie case arises here)."""
    try:
        return struct.unpack("<f", struct.pack("<f", x))[0]
    except OverflowError:
        return math.copysign(math.inf, x)


def contribution(mac, ip, payload, ident, port="p0"):
    return bytes(Ether(src=mac, dst=SW[port]) / IP(src=ip, dst="10.0.1.1", id=ident, flags="DF") /
                 UDP(sport=40001, dport=PORT) / Raw(payload))


def result(w, seq, values):
    mac, ip = W[w]
    return bytes(Ether(src=SW["p0"], dst=mac) /
                 IP(src="10.0.1.1", dst=ip, id=0, flags="DF", ttl=64) /
                 UDP(sport=PORT, dport=PORT) /
                 Raw(ina(9, seq, [1, 2], values, RESULT, etype="fp32")))


a = [1.5, -2.25, 1e-40, 3.0e38]     # a denormal and a large value
b = [0.25, 2.25, 1e-40, 3.0e38]     # the last sum overflows to +inf in fp32
total = [f32(f32(x) + f32(y)) for x, y in zip(a, b)]

inputs["p0"].append(contribution(*W[1], ina(9, 0, [1], a, etype="fp32"), 1))
inputs["p0"].append(contribution(*W[1], ina(9, 0, [1], a, etype="fp32"), 2))  # duplicate
inputs["p0"].append(contribution("02:00:00:00:11:09", "10.0.9.9",
                                 ina(9, 0, [2], b, etype="fp32"), 3))          # wrong source
inputs["p1"].append(contribution(W[2][0], W[2][1], ina(9, 0, [2], b, etype="fp32"), 4,
                                 port="p1"))                                   # wrong port
inputs["p0"].append(contribution(*W[2], ina(9, 0, [2], b, etype="fp32", lowest_missing=0),
                                 5))  # completes; w2 states its lowest missing result (flag 0x08)
expect["p0"].append(result(1, 0, total))
expect["p0"].append(result(2, 0, total))
inputs["p0"].append(contribution(*W[1], ina(9, 0, [1], a, DATA, RETRANSMIT, etype="fp32",
                                                 lowest_missing=0), 6))
expect["p0"].append(result(1, 0, total))
# A child switch re-sends its partial (P-BM {1,2}) because one of its workers lost the result:
# the answer must reach the workers, so both get the result again.
inputs["p0"].append(contribution("02:00:00:00:11:09", "10.0.1.9",
                                 ina(9, 0, [1, 2], total, DATA, RETRANSMIT, etype="fp32"), 7))
expect["p0"].append(result(1, 0, total))
expect["p0"].append(result(2, 0, total))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
