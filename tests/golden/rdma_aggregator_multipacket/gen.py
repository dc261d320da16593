# SPDX-License-Identifier: Apache-2.0
"""rdma_aggregator_multipacket: rdma job 7 is a VAT aggregator (parent 10.0.1.9, BSL 64, A-BM =
ranks {1, 2} as BFR-ids 1 and 2) whose chunks are 4096 bytes of int32 at PMTU 1024. Each rank
WRITEs chunk 0 as FIRST, MIDDLE, MIDDLE, LAST_WITH_IMM (rocepkt.write_message); each rank's LAST
is ACKed (PSN + 3, MSN 1) and no result WRITE goes out. The complete chunk goes up as FOUR INA
contributions, one per PMTU segment: INA seq = chunk x 4 + segment (0..3), 256 int32 each, the
element-wise sum of that segment, from the switch's 10.0.1.1 (TTL 64, DF, id 0, from port
40960 | (seq & 63) to 9470, a real UDP checksum, P-BM = A-BM, job 7). The parent's four INA results (P-BM = the
root's A-BM {1..4}, values other than the local sum) arrive out of order (seq 2, 0, 3, 1);
nothing goes down until the last of them is in, then each rank gets ONE result WRITE of the
whole chunk with the parent's values: FIRST (RETH: result_addr, rkey, DMA length 4096),
MIDDLE, MIDDLE, LAST_WITH_IMM (immediate 0 << 8 | 2, AckReq), PSNs 5000-5003, IPv4
identification 1-4 on each QP (its ACK took 0). A second copy of seq 1 is counted a duplicate
and dropped. RoCE frames from rocepkt.py (scapy contrib.roce), INA from inapkt.py."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from inapkt import DATA, RESULT, ina, partial_sport  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import (AREA_ADDR, AREA_RKEY, PSN, RESULT_ADDR, RESULT_RKEY, SW_IP, SW_MAC,  # noqa: E402
                        SWITCH, SWITCH_PSN, WORKER, WORLD, _from_switch, reply)
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

CHUNK, PMTU = 4096, 1024
ELEMS, SEG_ELEMS, SEGMENTS = CHUNK // 4, PMTU // 4, CHUNK // PMTU
PARENT_MAC, PARENT_IP = "02:00:00:00:11:09", "10.0.1.9"
PORT = 9470


def ints(base):
    """Signed int32 values (wrapping), as the INA encoder packs them."""
    return [((base * 1000003 + i * 7919 + 2**31) % 2**32) - 2**31 for i in range(ELEMS)]


def packed(values):
    return struct.pack(f"<{len(values)}i", *values)


def add(x, y):
    return [((a + b + 2**31) % 2**32) - 2**31 for a, b in zip(x, y)]


def contribution(rank, values):
    """Rank's chunk 0 as the NIC segments one WRITE with immediate 0 << 8 | 1."""
    return rocepkt.write_message(WORKER[rank], SWITCH[rank], PSN[rank], packed(values), PMTU,
                                 AREA_ADDR, AREA_RKEY, imm=0 << 8 | 1, sport=0xC000 + rank)


def segment(values, seg):
    return values[seg * SEG_ELEMS:(seg + 1) * SEG_ELEMS]


def partial(seq, values):
    return bytes(Ether(src=SW_MAC, dst=PARENT_MAC) /
                 IP(src=SW_IP, dst=PARENT_IP, id=0, flags="DF", ttl=64) /
                 UDP(sport=partial_sport(seq), dport=PORT) /
                 Raw(ina(7, seq, [1, 2], values, DATA, etype="int32", bsl=64)))


def from_parent(seq, values):
    return bytes(Ether(src=PARENT_MAC, dst=SW_MAC) /
                 IP(src=PARENT_IP, dst=SW_IP, id=seq, flags="DF", ttl=63) /
                 UDP(sport=PORT, dport=PORT) /
                 Raw(ina(7, seq, [1, 2, 3, 4], values, RESULT, etype="int32", bsl=64)))


def result(rank, values, first_ident):
    """The switch's result WRITE of chunk 0 on rank's QP: one frame per PMTU, as
    rocepkt.write_message segments it, each with the next IPv4 identification of the QP."""
    frames = []
    for k in range(SEGMENTS):
        kw = _from_switch(rank, first_ident + k)
        one = rocepkt.write_message(SWITCH[rank], WORKER[rank], SWITCH_PSN, packed(values), PMTU,
                                    RESULT_ADDR, RESULT_RKEY, imm=0 << 8 | WORLD, **kw)
        frames.append(one[k])
    return frames


a, b = ints(1), ints(-7)
local = add(a, b)
from_root = add(local, [1000] * ELEMS)
inputs = contribution(1, a) + contribution(2, b)
inputs += [from_parent(seq, segment(from_root, seq)) for seq in (2, 0, 3, 1, 1)]
expect = [reply(1, PSN[1] + 3, 1, 0x1F, 0), reply(2, PSN[2] + 3, 1, 0x1F, 0)]
expect += [partial(seq, segment(local, seq)) for seq in range(SEGMENTS)]
expect += result(1, from_root, 1) + result(2, from_root, 1)

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
