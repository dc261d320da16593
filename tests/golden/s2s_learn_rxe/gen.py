# SPDX-License-Identifier: Apache-2.0
"""s2s_learn_rxe: the switch learns a connection from the RDMA CM exchange Linux rdma_cm sent
(tests/data/rxe-rocev2-sample.pcap, frames 16-18: REQ from the active side 10.77.0.2, QPN
0x12; REP from 10.77.0.1, QPN 0x12, starting PSN 0xd24ad7; RTU). The REQ's private data after
rdma_cm's 36-byte header is replaced by an INAR connect request (src/worker/rdma/protocol.h,
encoded here from its documented big-endian layout: job 5, rank 1, world 1), its ICRC computed
afresh by scapy. The three MADs are routed untouched. Then the worker WRITEs chunk 0 with the
REP's PSN 0xd24ad7 (the active side sends from the REP's starting PSN) to the root's QPN 0x12:
absorbed and ACKed as the root (PSN 0xd24ad7, MSN 1); world 1 completes the chunk at once,
so ONE aggregate goes to the root on the learned connection with k = 1, the same PSN, the
worker's RETH and the same values."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from pcapio import read_pcap, write_case_pcaps  # noqa: E402
from rocepkt import Endpoint  # noqa: E402
from s2spkt import _to_switch, chunk, i32s, routed, source_port  # noqa: E402

SW_MAC = "02:00:00:00:00:01"
ROOT = Endpoint("52:54:00:77:00:01", "10.77.0.1", 0x12)
WORKER = Endpoint("52:54:00:77:00:02", "10.77.0.2", 0x12)
WORKER_PSN = 0xD24AD7  # the REP's starting PSN
REQ_PD_AT = 164  # a REQ's 92 bytes of private data end the 256-byte MAD
CMA_HEADER = 36


def inar_connect_request(job, rank, world, chunk_bytes, window):
    """protocol.h's ConnectRequest: magic INAR, version 1, mode 1 (server-to-server), element
    type, op, job id, rank, world, elements, chunk_bytes, window, result address and rkey."""
    int32, sum_op = 0, 0  # reduce::ElemType::int32, reduce::Op::sum
    return struct.pack(">IBBBBIHHQIIQI", 0x494E4152, 1, 1, int32, sum_op, job, rank, world,
                       1024, chunk_bytes, window, 0x7F0000000000, 0x4321)


sample = [bytes(f) for f in read_pcap(os.path.join(HERE, "..", "..", "data",
                                                   "rxe-rocev2-sample.pcap"))]
req_fields = rocepkt.fields(sample[16])
mad = bytearray(req_fields["payload"])
inar = inar_connect_request(5, 1, 1, 64, 4)
at = REQ_PD_AT + CMA_HEADER
mad[at:at + len(inar)] = inar
req_fields["payload"] = bytes(mad)
req = rocepkt.roce(**req_fields)  # the ICRC over the new private data, by scapy
rep, rtu = sample[17], sample[18]
cm = [_to_switch(f, SW_MAC) for f in (req, rep, rtu)]

values = chunk(-3)
contribution = _to_switch(rocepkt.write(WORKER, ROOT, WORKER_PSN, rocepkt.WRITE_ONLY_IMM,
                                        i32s(values), va=0x10000, rkey=0x111, imm=0 << 8 | 1,
                                        ackreq=True, sport=0xC123), SW_MAC)
in_p0 = cm + [contribution]
ack = rocepkt.ack(Endpoint(SW_MAC, ROOT.ip, None), WORKER, WORKER_PSN, 1,
                  sport=source_port(ROOT.qpn), ip_id=0, tos=0x02, ttl=64)
aggregate = rocepkt.write(Endpoint(SW_MAC, WORKER.ip, None), ROOT, WORKER_PSN,
                          rocepkt.WRITE_ONLY_IMM, i32s(values), va=0x10000, rkey=0x111,
                          imm=0 << 8 | 1, ackreq=True, sport=source_port(WORKER.qpn), ip_id=0,
                          tos=0x02, ttl=64)
expect_p0 = [routed(cm[0], SW_MAC, ROOT.mac), routed(cm[1], SW_MAC, WORKER.mac),
             routed(cm[2], SW_MAC, ROOT.mac), ack, aggregate]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": in_p0}, {"p0": expect_p0})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out")
