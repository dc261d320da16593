# SPDX-License-Identifier: Apache-2.0
"""rdma_aggregator: rdma job 7 is a VAT aggregator (role aggregator, parent 10.0.1.9, BSL 64,
A-BM = ranks {1, 2} as BFR-ids 1 and 2). Ranks 1 and 2 WRITE chunk s = 0: each contribution is
ACKed, no result WRITE goes out; exactly one INA contribution goes to the parent (from the
switch's 10.0.1.1, TTL 64, DF, id 0, from the chunk's steering port 40960 | (seq & 63) to 9470, a real UDP checksum, P-BM = A-BM, job 7,
seq 0, fp32, the element-wise sum). The parent's INA result for seq 0 (P-BM = the root's A-BM
{1..4}, other values than the local sum) becomes one result WRITE per rank carrying the
parent's values (PSN 5000, immediate 0 << 8 | 2); a second copy of that result is counted as a
duplicate and a result for chunk 3, which the switch never sent up, as not held: both dropped,
neither forwarded. RoCE frames from rocepkt.py (scapy contrib.roce), INA from inapkt.py."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from inapkt import DATA, RESULT, ina, partial_sport  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import PSN, SW_IP, SW_MAC, chunk, contribution, reply, result, total  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PARENT_MAC, PARENT_IP = "02:00:00:00:11:09", "10.0.1.9"
PORT = 9470


def from_parent(seq, values):
    return bytes(Ether(src=PARENT_MAC, dst=SW_MAC) /
                 IP(src=PARENT_IP, dst=SW_IP, id=seq, flags="DF", ttl=63) /
                 UDP(sport=PORT, dport=PORT) /
                 Raw(ina(7, seq, [1, 2, 3, 4], values, RESULT, etype="fp32", bsl=64)))


def partial(seq, values):
    return bytes(Ether(src=SW_MAC, dst=PARENT_MAC) /
                 IP(src=SW_IP, dst=PARENT_IP, id=0, flags="DF", ttl=64) /
                 UDP(sport=partial_sport(seq), dport=PORT) /
                 Raw(ina(7, seq, [1, 2], values, DATA, etype="fp32", bsl=64)))


a = {1: chunk(1.0), 2: chunk(100.0)}
from_root = chunk(1000.5)
inputs = [contribution(1, 0, a[1]), contribution(2, 0, a[2]),
          from_parent(0, from_root), from_parent(0, from_root), from_parent(3, from_root)]
expect = [reply(1, PSN[1], 1, 0x1F, 0), reply(2, PSN[2], 1, 0x1F, 0),
          partial(0, total(a[1], a[2])),
          result(1, 0, from_root, 0, 1), result(2, 0, from_root, 0, 1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
