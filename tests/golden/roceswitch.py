# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the rdma_* golden cases (the switch terminating RoCEv2, server-to-switch
mode, docs/rdma.md): the endpoints of config.yaml (job 7, world 2, fp32 sum, chunk 64 bytes,
window 4; rank 1 = w1, rank 2 = w2, both behind p0), a worker's contribution and the switch's
ACK, NAK, CNP and result frames, all built with rocepkt.py (scapy contrib.roce), never with the
switch's C++ encoder. The switch's frames carry what docs/rdma.md states: source UDP port
0xC000 | the top bits of QPN * 0x9E3779B1, IPv4 identification counting per QP from 0, TTL 64,
ECT(0), DF; results are WRITE_ONLY_WITH_IMM with AckReq, immediate s << 8 | world, to
result_addr + (s mod (result_length / chunk_bytes)) * chunk_bytes."""

import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocepkt  # noqa: E402
from rocepkt import Endpoint  # noqa: E402

SW_MAC = "02:00:00:00:00:01"
SW_IP = "10.0.1.1"
AREA_ADDR, AREA_RKEY = 4096, 0x12345678
CHUNK, WINDOW, WORLD = 64, 4, 2
RESULT_ADDR, RESULT_RKEY, RESULT_LENGTH = 0x7F0000000000, 0x1234, 1024
SWITCH_PSN = 5000

# rank -> (worker endpoint, the switch's endpoint of that QP, the worker's first PSN)
WORKER = {1: Endpoint("02:00:00:00:11:02", "10.0.1.2", 17),
          2: Endpoint("02:00:00:00:11:03", "10.0.1.3", 18)}
SWITCH = {1: Endpoint(SW_MAC, SW_IP, 0x100), 2: Endpoint(SW_MAC, SW_IP, 0x101)}
PSN = {1: 1000, 2: 2000}


def source_port(qpn):
    """The UDP source port the switch uses on a QP (docs/rdma.md)."""
    return 0xC000 | (((qpn & 0xFFFFFF) * 0x9E3779B1) & 0xFFFFFFFF) >> 18


def f32s(values):
    return struct.pack(f"<{len(values)}f", *values)


def contribution(rank, s, values, *, psn=None, tos=0x02, ackreq=True, **kw):
    """Rank's WRITE_ONLY_WITH_IMM of chunk s into the switch's area."""
    payload = f32s(values)
    return rocepkt.write(WORKER[rank], SWITCH[rank], PSN[rank] + s if psn is None else psn,
                         rocepkt.WRITE_ONLY_IMM, payload, va=AREA_ADDR + (s % WINDOW) * CHUNK,
                         rkey=AREA_RKEY, imm=(s & 0xFFFFFF) << 8 | 1, ackreq=ackreq, tos=tos,
                         sport=0xC000 + rank, **kw)


def _from_switch(rank, ident):
    return {"sport": source_port(SWITCH[rank].qpn), "ip_id": ident, "tos": 0x02, "ttl": 64}


def reply(rank, psn, msn, syndrome, ident):
    """The switch's ACK or NAK on rank's QP."""
    return rocepkt.ack(SWITCH[rank], WORKER[rank], psn, msn, syndrome, **_from_switch(rank, ident))


def cnp(rank, ident):
    return rocepkt.cnp(SWITCH[rank], WORKER[rank], **_from_switch(rank, ident))


def result(rank, s, values, k, ident):
    """The k-th result WRITE on rank's QP (PSN SWITCH_PSN + k), for chunk s."""
    slot = s % (RESULT_LENGTH // CHUNK)
    return rocepkt.write(SWITCH[rank], WORKER[rank], SWITCH_PSN + k, rocepkt.WRITE_ONLY_IMM,
                         f32s(values), va=RESULT_ADDR + slot * CHUNK, rkey=RESULT_RKEY,
                         imm=(s & 0xFFFFFF) << 8 | WORLD, ackreq=True, **_from_switch(rank, ident))


def chunk(base):
    return [base + i for i in range(CHUNK // 4)]


def total(*chunks):
    """Element-wise fp32 sum in the order given (small integers: exact)."""
    return [struct.unpack("<f", struct.pack("<f", sum(x)))[0] for x in zip(*chunks)]
