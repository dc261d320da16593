# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the s2s_* golden cases (RoCEv2 server-to-server mode, docs/rdma.md
"Server-to-server mode"): the endpoints of their config.yaml (rdma_s2s job 9, root 10.0.2.9
behind p1, rank 1 = w1 10.0.1.2 (the carrier) and rank 2 = w2 10.0.1.3 behind p0, int32 sum,
chunk 64 bytes, window 4), the workers' contributions, the root's ACK/NAKs, and the frames the
switch sends as the root (ACK, NAK, CNP) and toward the root (the aggregate), all built with
rocepkt.py (scapy contrib.roce), never with the switch's C++ encoder. What docs/rdma.md states
about them: frames to a worker carry IP source = the root, DestQP = the worker's QPN, UDP
source port = source_port(the root's QPN), IP identification counting per connection from 0;
an aggregate carries IP source = the carrier worker, DestQP = the root's QPN of the carrier,
UDP source port = source_port(the carrier worker's QPN), IP identification counting per job
from 0, the carrier's RETH of that chunk and immediate chunk << 8 | k. All with TTL 64, ECT(0),
DF. Frames the switch only forwards are routed: TTL - 1, the egress port's MAC as source and
the next hop's as destination, the ICRC as it was (it masks the TTL and the checksum)."""

import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rocepkt  # noqa: E402
from rocepkt import Endpoint  # noqa: E402
from scapy.layers.inet import IP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402

P0_MAC = "02:00:00:00:00:01"
P1_MAC = "02:00:00:00:00:02"
CHUNK, WINDOW = 64, 4
ROOT_IP, ROOT_MAC = "10.0.2.9", "02:00:00:00:22:09"
# rank -> the worker's endpoint (its QPN), the root's endpoint of that connection (its QPN)
WORKER = {1: Endpoint("02:00:00:00:11:02", "10.0.1.2", 17),
          2: Endpoint("02:00:00:00:11:03", "10.0.1.3", 18)}
ROOT = {1: Endpoint(ROOT_MAC, ROOT_IP, 0x40), 2: Endpoint(ROOT_MAC, ROOT_IP, 0x41)}
PSN = {1: 1000, 2: 2000}
AREA = {1: (0x10000, 0x111), 2: (0x20000, 0x222)}  # each connection's area at the root: VA, rkey


def source_port(qpn):
    """The UDP source port the switch uses for a QP (docs/rdma.md)."""
    return 0xC000 | (((qpn & 0xFFFFFF) * 0x9E3779B1) & 0xFFFFFFFF) >> 18


def i32s(values):
    return struct.pack(f"<{len(values)}i", *values)


def chunk(base):
    return [base + i for i in range(CHUNK // 4)]


def total(*chunks):
    return [sum(x) for x in zip(*chunks)]


def _to_switch(frame, port_mac):
    """A frame as it reaches the switch: to the port's MAC (the switch is the next hop)."""
    e = Ether(frame)
    e.dst = port_mac
    return bytes(e)


def contribution(rank, c, values, *, psn=None, tos=0x02, ackreq=True):
    """Rank's WRITE_ONLY_WITH_IMM of chunk c toward the root: imm c << 8 | 1, into its area at
    the root."""
    va, rkey = AREA[rank]
    f = rocepkt.write(WORKER[rank], ROOT[rank], PSN[rank] + c if psn is None else psn,
                      rocepkt.WRITE_ONLY_IMM, i32s(values), va=va + (c % WINDOW) * CHUNK,
                      rkey=rkey, imm=(c & 0xFFFFFF) << 8 | 1, ackreq=ackreq, tos=tos,
                      sport=0xC000 + rank)
    return _to_switch(f, P0_MAC)


def root_reply(rank, psn, msn, syndrome=rocepkt.ACK_UNLIMITED):
    """The root's ACK or NAK on rank's connection (root-side PSN space), as it reaches p1."""
    return _to_switch(rocepkt.ack(ROOT[rank], WORKER[rank], psn, msn, syndrome, sport=0xD000),
                      P1_MAC)


def routed(frame, out_mac, next_hop_mac):
    """What the switch forwards: TTL - 1, MACs rewritten, IPv4 checksum afresh, the rest
    (ICRC included) byte for byte."""
    e = Ether(frame)
    e.src, e.dst = out_mac, next_hop_mac
    e[IP].ttl -= 1
    del e[IP].chksum
    return bytes(e)


def as_root(rank, psn, msn, syndrome, ident):
    """The switch's ACK/NAK to rank's worker, as the root: its address, the worker's QPN."""
    src = Endpoint(P0_MAC, ROOT_IP, None)
    return rocepkt.ack(src, WORKER[rank], psn, msn, syndrome, sport=source_port(ROOT[rank].qpn),
                       ip_id=ident, tos=0x02, ttl=64)


def cnp_as_root(rank, ident):
    src = Endpoint(P0_MAC, ROOT_IP, None)
    return rocepkt.cnp(src, WORKER[rank], sport=source_port(ROOT[rank].qpn), ip_id=ident,
                       tos=0x02, ttl=64)


def aggregate(c, values, k, psn, ident):
    """The ONE WRITE toward the root for chunk c on the carrier (rank 1's connection): the
    carrier's RETH, imm c << 8 | k, the root-side PSN."""
    va, rkey = AREA[1]
    src = Endpoint(P1_MAC, WORKER[1].ip, None)
    return rocepkt.write(src, ROOT[1], psn, rocepkt.WRITE_ONLY_IMM, i32s(values),
                         va=va + (c % WINDOW) * CHUNK, rkey=rkey, imm=(c & 0xFFFFFF) << 8 | k,
                         ackreq=True, sport=source_port(WORKER[1].qpn), ip_id=ident, tos=0x02,
                         ttl=64)


# Result replication (replicate: true; the s2s_replicate_* cases): the root sends each connection
# from its own PSN (the REQ's Starting PSN, here the config's root_psn) and WRITEs results into
# each worker's result buffer (VA, rkey). The root writes once, on the carrier (rank 1).
ROOT_PSN = {1: 5000, 2: 9000}
RESULT = {1: (0x7F0000001000, 0xA1), 2: (0x7F0000800000, 0xB2)}
ROOT_SPORT = 0xD001  # whatever the root's NIC chose for its carrier QP


def root_result(k, c, values, ident):
    """The root's k-th result WRITE on the carrier: chunk c (imm c << 8 | 2) into rank 1's
    result buffer at c * CHUNK, root-side PSN ROOT_PSN[1] + k, as it reaches p1."""
    va, rkey = RESULT[1]
    f = rocepkt.write(ROOT[1], WORKER[1], ROOT_PSN[1] + k, rocepkt.WRITE_ONLY_IMM, i32s(values),
                      va=va + c * CHUNK, rkey=rkey, imm=(c & 0xFFFFFF) << 8 | 2, ackreq=True,
                      sport=ROOT_SPORT, ip_id=ident)
    return _to_switch(f, P1_MAC)


def result_copy(rank, k, c, values, ident):
    """What the switch sends rank's worker for the root's k-th result WRITE: that connection's
    DestQP (the worker's QPN), PSN ROOT_PSN[rank] + k (the leg's fixed delta), RETH VA = its
    result buffer + c * CHUNK and its rkey, UDP source port = source_port(the root's QPN of the
    connection); the root's IP identification, TOS and TTL as they came (an originated frame:
    routing keeps its TTL); the same payload and immediate; its own ICRC."""
    va, rkey = RESULT[rank]
    src = Endpoint(P0_MAC, ROOT_IP, None)
    return rocepkt.write(src, WORKER[rank], ROOT_PSN[rank] + k, rocepkt.WRITE_ONLY_IMM,
                         i32s(values), va=va + c * CHUNK, rkey=rkey,
                         imm=(c & 0xFFFFFF) << 8 | 2, ackreq=True,
                         sport=source_port(ROOT[rank].qpn), ip_id=ident, ttl=64)


def worker_reply(rank, psn, msn, syndrome=rocepkt.ACK_UNLIMITED):
    """Rank's ACK or NAK of the root's result WRITEs (its leg's PSN space), as it reaches p0."""
    return _to_switch(rocepkt.ack(WORKER[rank], ROOT[rank], psn, msn, syndrome, sport=0xE000),
                      P0_MAC)


def worker_cnp(rank):
    return _to_switch(rocepkt.cnp(WORKER[rank], ROOT[rank], sport=0xE000), P0_MAC)


def to_root_on_carrier(psn, msn, syndrome, ident):
    """The switch's ACK/NAK toward the root for the workers: on the carrier connection, as its
    worker (IP source rank 1, DestQP the root's QPN of the carrier, UDP source port
    source_port(rank 1's QPN), the job's IP identification counter)."""
    src = Endpoint(P1_MAC, WORKER[1].ip, None)
    return rocepkt.ack(src, ROOT[1], psn, msn, syndrome, sport=source_port(WORKER[1].qpn),
                       ip_id=ident, tos=0x02, ttl=64)


def cnp_to_root_on_carrier(ident):
    src = Endpoint(P1_MAC, WORKER[1].ip, None)
    return rocepkt.cnp(src, ROOT[1], sport=source_port(WORKER[1].qpn), ip_id=ident, tos=0x02,
                       ttl=64)
