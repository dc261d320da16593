# SPDX-License-Identifier: Apache-2.0
"""rdma_multipacket: chunk 0 is 4096 bytes of int32 at PMTU 1024, so each rank WRITEs it with
immediate as FIRST, MIDDLE, MIDDLE, LAST_WITH_IMM (RETH on FIRST, immediate on LAST, AckReq on
LAST, PSN + 1 a packet; rocepkt.write_message). Rank 1's first MIDDLE is lost: the MIDDLE past
the gap earns one NAK-sequence (PSN 1001, MSN 0), its LAST is dropped while that NAK is out,
then go-back-N resends from 1001 and the message completes (not added twice). Rank 2's message
arrives whole and completes the chunk. Rank 1's FIRST arrives once more afterwards: a
duplicate, re-ACKed (PSN 1003, MSN 1), which also stands for the ACK its LAST asked for; rank
2's LAST gets the burst's coalesced ACK (PSN 2003, MSN 1). Then the result, the element-wise
int32 sum, goes to each rank as one multi-packet WRITE: FIRST (RETH: result_addr, rkey, DMA
length 4096), MIDDLE, MIDDLE, LAST_WITH_IMM (immediate 0 << 8 | 2, AckReq), PSNs 5000-5003,
each packet with its own ICRC, IPv4 identification counting on per QP."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import (AREA_ADDR, AREA_RKEY, PSN, RESULT_ADDR, RESULT_RKEY, SWITCH,  # noqa: E402
                        SWITCH_PSN, WORKER, WORLD, _from_switch, reply)

CHUNK, PMTU = 4096, 1024
ELEMS = CHUNK // 4


def ints(base):
    return [(base * 1000003 + i * 7919) & 0xFFFFFFFF for i in range(ELEMS)]


def packed(values):
    return struct.pack(f"<{len(values)}I", *values)


def contribution(rank, values):
    """Rank's chunk 0 as the NIC segments one WRITE with immediate 0 << 8 | 1."""
    return rocepkt.write_message(WORKER[rank], SWITCH[rank], PSN[rank], packed(values), PMTU,
                                 AREA_ADDR, AREA_RKEY, imm=0 << 8 | 1, sport=0xC000 + rank)


def result(rank, values, first_ident):
    """The switch's result WRITE of chunk 0 on rank's QP: one frame per PMTU, as
    rocepkt.write_message segments it, each with the next IPv4 identification of the QP."""
    data = packed(values)
    frames = []
    for k in range(CHUNK // PMTU):
        kw = _from_switch(rank, first_ident + k)
        one = rocepkt.write_message(SWITCH[rank], WORKER[rank], SWITCH_PSN, data, PMTU,
                                    RESULT_ADDR, RESULT_RKEY, imm=0 << 8 | WORLD, **kw)
        frames.append(one[k])
    return frames


a, b = ints(1), ints(-7)
total = [(x + y) & 0xFFFFFFFF for x, y in zip(a, b)]
r1, r2 = contribution(1, a), contribution(2, b)
inputs = [r1[0], r1[2], r1[3], r1[1], r1[2], r1[3]] + r2 + [r1[0]]
expect = [reply(1, PSN[1] + 1, 0, 0x60, 0),       # the gap at 1001
          reply(1, PSN[1] + 3, 1, 0x1F, 1),       # the duplicate FIRST: re-ACK
          reply(2, PSN[2] + 3, 1, 0x1F, 0)]       # rank 2's LAST, coalesced
expect += result(1, total, 2) + result(2, total, 1)

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
