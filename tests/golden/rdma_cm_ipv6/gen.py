# SPDX-License-Identifier: Apache-2.0
"""rdma_cm_ipv6: the switch's passive RDMA CM over an IPv6 underlay (docs/rdma.md "IPv6
underlay"). Worker w1, whose GID is its IPv6 address 2001:db8:1::2, rdma_connect()s to
2001:db8:1::1 port 7471 for rdma job 7 as rank 1: its REQ (rdma_cm's header with IP version 6
and both addresses whole, the path's GIDs the IPv6 addresses themselves) is answered by a REP
as over IPv4 (the switch's first communication ID 0x1c0a0001, its QPN 0x100, Starting PSN = the
worker's communication ID * 2654435761 mod 2^24, CA GUID 0x020000fffe << 24 | the low 24 bits
of the switch's IPv6 address, the INAR accept); the REQ again gets the same REP; the RTU is not
answered; w2's REQ whose path GID is not the address it came from gets a REJ (consumer reject
28, INAR status 2 unsupported) before any QP is made; w1's DREQ gets a DREP and its QP goes.
The switch's CM frames are IPv6 from the address the MAD was sent to, back to the MAC it came
from out of the port it came in on: traffic class 0, flow label 0, hop limit 64, UD SEND ONLY
with AckReq to QP1, DETH Q_Key 0x80010000 source QP 1, QP1's PSN counting from 0, the UDP
source port of QPN 1, the ICRC over the IPv6 rules (rocepkt.compute_icrc)."""

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import cmpkt  # noqa: E402
from cmpkt import DREP, DREQ, REJ, REP, REQ, RTU, reply_bytes, req_body  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from rocepkt import Endpoint  # noqa: E402
from roceswitch import AREA_ADDR, AREA_RKEY, SW_MAC  # noqa: E402

SW6 = "2001:db8:1::1"
SWITCH_QP1 = Endpoint(SW_MAC, SW6, 1)
W1 = Endpoint("02:00:00:00:11:02", "2001:db8:1::2", 1)
W2 = Endpoint("02:00:00:00:11:03", "2001:db8:1::3", 1)
W1_COMM, W2_COMM, SWITCH_COMM = 0x7D67A7F4, 0x2222, 0x1C0A0001
W1_QPN, W1_PSN = 0x11, 0x5D50B2


def from_worker(w, attr, tid, body):
    return cmpkt.from_worker(w, SWITCH_QP1, attr, tid, body)


def from_switch(w, attr, tid, body, k):
    return cmpkt.from_switch(SWITCH_QP1, w, attr, tid, body, k)


W1_TID, W2_TID, DREQ_TID = 0x2F4A7677D, 0x2000000AB, 0x2F4A7677E
w1_req = from_worker(W1, REQ, W1_TID, req_body(W1_COMM, 7, 1, W1.ip, SW6, W1_QPN, W1_PSN))
w1_rtu = from_worker(W1, RTU, W1_TID, struct.pack(">II", W1_COMM, SWITCH_COMM))
# w2 names 2001:db8:1::9 as its path's GID (and in rdma_cm's header).
w2_req = from_worker(W2, REQ, W2_TID, req_body(W2_COMM, 7, 2, "2001:db8:1::9", SW6, 0x12, 0x100))
w1_dreq = from_worker(W1, DREQ, DREQ_TID, struct.pack(">III", W1_COMM, SWITCH_COMM, 0x100 << 8))

inputs = [w1_req, w1_req, w1_rtu, w2_req, w1_dreq]
rep = cmpkt.rep_body(SWITCH_COMM, W1_COMM, SW6, AREA_ADDR, AREA_RKEY)
expect = [
    from_switch(W1, REP, W1_TID, rep, 0),
    from_switch(W1, REP, W1_TID, rep, 1),
    from_switch(W2, REJ, W2_TID,
                struct.pack(">IIBBH", 0, W2_COMM, 0, 0, 28) + bytes(72)
                + reply_bytes(2, 7, 0, 0), 2),
    from_switch(W1, DREP, DREQ_TID, struct.pack(">II", SWITCH_COMM, W1_COMM), 3),
]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
