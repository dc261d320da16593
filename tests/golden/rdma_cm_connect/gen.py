# SPDX-License-Identifier: Apache-2.0
"""rdma_cm_connect: RDMA CM on the switch (docs/rdma.md "RDMA CM on the switch"). Worker w1
(10.0.1.2) rdma_connect()s to 10.0.1.1 port 7471 for rdma job 7 as rank 1: its REQ (service ID
0x0106 << 16 | 7471, rdma_cm's header then the INAR connect request, mode 2) is answered by a
REP (transaction ID echoed, the switch's first communication ID 0x1c0a0001, the worker's in
remote, the switch's QPN 0x100, Starting PSN = the worker's communication ID * 2654435761 mod
2^24, no RDMA READ resources, target ACK delay 15, RNR retry 7, CA GUID 0x020000fffe << 24 | the
low 24 bits of the switch's address, private data = the INAR accept: job 7, contribution area
4096 / 0x12345678). The REQ again (lost REP) gets the same REP; the RTU is not answered; w2's
REQ for job 9, which does not exist, gets a REJ (consumer reject 28, the INAR reply with status
3 wrong_job); w1's DREQ gets a DREP (IDs swapped back) and its QP goes; a MAD with a bad ICRC is
dropped and counted before the CM sees it.
The switch's CM frames: back to the MAC they came from out of the port they came in on, UD SEND
ONLY with AckReq to QP1, DETH Q_Key 0x80010000 source QP 1, QP1's PSN and the IPv4
identification counting from 0, TOS 0, TTL 64, DF, UDP source port that of QPN 1.
scapy has no CM MAD layer (contrib.roce stops at the BTH/AETH): the MADs are packed by
cmpkt.py from the IBA vol. 1 ch. 12.6 layouts, independently of src/roce/cm.cc."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import AREA_ADDR, AREA_RKEY, SW_IP, SW_MAC, WORKER  # noqa: E402
from rocepkt import Endpoint  # noqa: E402

from cmpkt import DREP, DREQ, REJ, REP, REQ, RTU, reply_bytes, req_body  # noqa: E402
import cmpkt  # noqa: E402

SWITCH_QP1 = Endpoint(SW_MAC, SW_IP, 1)
W1 = Endpoint(WORKER[1].mac, WORKER[1].ip, 1)
W2 = Endpoint(WORKER[2].mac, WORKER[2].ip, 1)
W1_COMM, W2_COMM, SWITCH_COMM = 0x7D67A7F4, 0x2222, 0x1C0A0001
W1_QPN, W1_PSN = 0x11, 0x5D50B2


def rep_body():
    return cmpkt.rep_body(SWITCH_COMM, W1_COMM, SW_IP, AREA_ADDR, AREA_RKEY)


def from_worker(w, attr, tid, body, **kw):
    return cmpkt.from_worker(w, SWITCH_QP1, attr, tid, body, **kw)


def from_switch(w, attr, tid, body, k):
    return cmpkt.from_switch(SWITCH_QP1, w, attr, tid, body, k)


W1_TID, W2_TID, DREQ_TID = 0x2F4A7677D, 0x2000000AB, 0x2F4A7677E
w1_req = from_worker(W1, REQ, W1_TID, req_body(W1_COMM, 7, 1, W1.ip, SW_IP, W1_QPN, W1_PSN))
w1_rtu = from_worker(W1, RTU, W1_TID, struct.pack(">II", W1_COMM, SWITCH_COMM))
w2_req = from_worker(W2, REQ, W2_TID, req_body(W2_COMM, 9, 2, W2.ip, SW_IP, 0x12, 0x100))
w1_dreq = from_worker(W1, DREQ, DREQ_TID, struct.pack(">III", W1_COMM, SWITCH_COMM, 0x100 << 8))
bad_icrc = from_worker(W1, RTU, W1_TID, struct.pack(">II", W1_COMM, SWITCH_COMM), icrc=0x1234)

inputs = [w1_req, w1_req, w1_rtu, w2_req, bad_icrc, w1_dreq]
expect = [
    from_switch(W1, REP, W1_TID, rep_body(), 0),
    from_switch(W1, REP, W1_TID, rep_body(), 1),
    from_switch(W2, REJ, W2_TID,
                struct.pack(">IIBBH", 0, W2_COMM, 0, 0, 28) + bytes(72)
                + reply_bytes(3, 9, 0, 0), 2),
    from_switch(W1, DREP, DREQ_TID, struct.pack(">II", SWITCH_COMM, W1_COMM), 3),
]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
