# SPDX-License-Identifier: Apache-2.0
"""s2s_rejoin: a worker that reconnects alone (docs/rdma.md "A worker that reconnects alone"),
through the whole switch and its control plane. Job 5 learns two connections from the CM
(rank 1 at 10.77.0.2, rank 2 at 10.77.0.3, root 10.77.0.1; the REQ and REP MADs are Linux
rdma_cm's from tests/data/rxe-rocev2-sample.pcap with the communication IDs, QPNs, PSNs and
the INAR private data set per rank). Rank 1 contributes chunks 0 and 1, rank 2 chunk 0: chunk
0 completes. Then rank 2 reconnects (a new REQ and the root's REP) while rank 1 stays
connected, holding chunk 1, which the switch ACKed to it. The rule: nothing is emptied: rank
2's old connection is taken out of the held chunk, which goes to the root at once as a partial
aggregate (k = 1, rank 1's values, the carrier's next PSN and RETH of chunk 1). Every MAD is
routed untouched; rank 1 hears one coalesced ACK (PSN + 1, MSN 2: the frames are one burst),
rank 2 one for chunk 0. After the burst the control plane makes the fresh state (the release
hook) and publishes it; the old state leaves: its counters read under leaving_job, the fresh
one learned rank 2's new connection from the REP the old state kept for it."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from pcapio import read_pcap, write_case_pcaps  # noqa: E402
from rocepkt import Endpoint  # noqa: E402
from s2spkt import _to_switch, chunk, i32s, routed, source_port, total  # noqa: E402

SW_MAC = "02:00:00:00:00:01"
ROOT = {1: Endpoint("52:54:00:77:00:01", "10.77.0.1", 0x12),
        2: Endpoint("52:54:00:77:00:01", "10.77.0.1", 0x13)}
ROOT_QPN_REJOIN = 0x14
WORKER = {1: Endpoint("52:54:00:77:00:02", "10.77.0.2", 0x22),
          2: Endpoint("52:54:00:77:00:03", "10.77.0.3", 0x23)}
WORKER_QPN_REJOIN = 0x33
PSN = {1: 0x100, 2: 0x200}  # the REPs' starting PSNs: each worker sends from its own
AREA = {1: (0x10000, 0x111), 2: (0x20000, 0x222)}
CMA_HEADER = 36
REQ_PRIVATE = 164


def be(value, n):
    return value.to_bytes(n, "big")


def inar_connect_request(rank):
    """protocol.h's ConnectRequest: magic INAR, version 1, mode 1 (server-to-server), element
    type int32, op sum, job 5, rank, world 2, elements, chunk_bytes 64, window 4, result
    address and rkey."""
    return struct.pack(">IBBBBIHHQIIQI", 0x494E4152, 1, 1, 0, 0, 5, rank, 2, 1024, 64, 4,
                       0x7F0000000000 + rank, 0x4300 + rank)


sample = [bytes(f) for f in read_pcap(os.path.join(HERE, "..", "..", "data",
                                                   "rxe-rocev2-sample.pcap"))]


def req(rank, comm_id, worker_qpn):
    """Rank's REQ to the root: its communication ID and QPN, the INAR request."""
    f = rocepkt.fields(sample[16])
    mad = bytearray(f["payload"])
    mad[24:28] = be(comm_id, 4)
    mad[56:59] = be(worker_qpn, 3)
    at = REQ_PRIVATE + CMA_HEADER
    inar = inar_connect_request(rank)
    mad[at:at + len(inar)] = inar
    f["payload"] = bytes(mad)
    f["src"] = Endpoint(WORKER[rank].mac, WORKER[rank].ip, None)
    f["dst"] = Endpoint(SW_MAC, ROOT[rank].ip, f["dst"].qpn)
    return rocepkt.roce(**f)


def rep(rank, comm_id, remote_comm_id, root_qpn, worker_psn):
    """The root's REP to rank: the REQ's communication ID as its remote one, the root's QPN
    and the PSN the worker sends from."""
    f = rocepkt.fields(sample[17])
    mad = bytearray(f["payload"])
    mad[24:28] = be(comm_id, 4)
    mad[28:32] = be(remote_comm_id, 4)
    mad[36:39] = be(root_qpn, 3)
    mad[44:47] = be(worker_psn, 3)
    f["payload"] = bytes(mad)
    f["src"] = Endpoint(ROOT[rank].mac, ROOT[rank].ip, None)
    f["dst"] = Endpoint(SW_MAC, WORKER[rank].ip, f["dst"].qpn)
    return rocepkt.roce(**f)


def contribution(rank, c, values):
    va, rkey = AREA[rank]
    return _to_switch(rocepkt.write(WORKER[rank], ROOT[rank], PSN[rank] + c,
                                    rocepkt.WRITE_ONLY_IMM, i32s(values), va=va + c * 64,
                                    rkey=rkey, imm=c << 8 | 1, ackreq=True, sport=0xC000 + rank),
                      SW_MAC)


def as_root(rank, psn, msn):
    src = Endpoint(SW_MAC, ROOT[rank].ip, None)
    return rocepkt.ack(src, WORKER[rank], psn, msn, sport=source_port(ROOT[rank].qpn), ip_id=0,
                       tos=0x02, ttl=64)


def aggregate(c, values, k, ident):
    """Chunk c toward the root on the carrier (rank 1's connection): its RETH of chunk c,
    imm c << 8 | k, the carrier's next PSN."""
    va, rkey = AREA[1]
    src = Endpoint(SW_MAC, WORKER[1].ip, None)
    return rocepkt.write(src, ROOT[1], PSN[1] + c, rocepkt.WRITE_ONLY_IMM, i32s(values),
                         va=va + c * 64, rkey=rkey, imm=c << 8 | k, ackreq=True,
                         sport=source_port(WORKER[1].qpn), ip_id=ident, tos=0x02, ttl=64)


cm = [req(1, 0x1001, WORKER[1].qpn), rep(1, 0x2001, 0x1001, ROOT[1].qpn, PSN[1]),
      req(2, 0x1002, WORKER[2].qpn), rep(2, 0x2002, 0x1002, ROOT[2].qpn, PSN[2])]
rejoin = [req(2, 0x1012, WORKER_QPN_REJOIN), rep(2, 0x2012, 0x1012, ROOT_QPN_REJOIN, 0x300)]
r1c0, r1c1, r2c0 = chunk(1), chunk(10), chunk(100)
in_p0 = cm + [contribution(1, 0, r1c0), contribution(1, 1, r1c1),
              contribution(2, 0, r2c0)] + rejoin
routed_cm = [routed(f, SW_MAC, ROOT[1].mac if i % 2 == 0 else WORKER[1 if i < 2 else 2].mac)
             for i, f in enumerate(cm + rejoin)]
expect_p0 = routed_cm + [
    as_root(1, PSN[1] + 1, 2),  # chunks 0 and 1, one ACK for the burst
    as_root(2, PSN[2], 1),  # chunk 0 on rank 2's old connection: it is in chunk 0's aggregate
    aggregate(0, total(r1c0, r2c0), 2, 0),
    aggregate(1, r1c1, 1, 1),  # the partial aggregate: rank 2's old connection is out
]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": in_p0}, {"p0": expect_p0})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out")
