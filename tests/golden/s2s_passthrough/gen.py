# SPDX-License-Identifier: Apache-2.0
"""s2s_passthrough: RoCE the switch takes no part in is forwarded untouched (routed: TTL - 1,
MACs rewritten, IPv4 checksum afresh; every RoCE byte, the ICRC included, as it came): a WRITE
from w1 to the root on a QPN of no job connection; the root's result WRITE to w1 on a job
connection (the other direction's PSN space); w1's ACK of it toward the root; a CNP w2 sends
the root; a UDP 4791 datagram that is no RoCE (forwarded unmodified, counted malformed)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
import rocepkt  # noqa: E402
from rocepkt import Endpoint  # noqa: E402
from s2spkt import (P0_MAC, P1_MAC, ROOT, ROOT_MAC, WORKER, _to_switch, chunk, i32s,  # noqa: E402
                    routed)
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

other_qp = Endpoint(ROOT_MAC, ROOT[1].ip, 0x99)
no_job = _to_switch(rocepkt.write(WORKER[1], other_qp, 5, rocepkt.WRITE_ONLY_IMM, i32s(chunk(1)),
                                  va=0x9000, rkey=7, imm=1, ackreq=True, sport=0xC001), P0_MAC)
result = _to_switch(rocepkt.write(ROOT[1], WORKER[1], 77, rocepkt.WRITE_ONLY_IMM, i32s(chunk(5)),
                                  va=0x5000, rkey=9, imm=2, ackreq=True, sport=0xD000), P1_MAC)
result_ack = _to_switch(rocepkt.ack(WORKER[1], ROOT[1], 77, 1, sport=0xC001), P0_MAC)
worker_cnp = _to_switch(rocepkt.cnp(WORKER[2], ROOT[2], sport=0xC002), P0_MAC)
not_roce = bytes(Ether(src=WORKER[2].mac, dst=P0_MAC) / IP(src=WORKER[2].ip, dst=ROOT[1].ip)
                 / UDP(sport=1234, dport=4791) / Raw(b"\x01\x02\x03"))
in_p0 = [no_job, result_ack, worker_cnp, not_roce]
in_p1 = [result]
expect_p0 = [routed(result, P0_MAC, WORKER[1].mac)]
expect_p1 = [routed(f, P1_MAC, ROOT_MAC) for f in in_p0]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
