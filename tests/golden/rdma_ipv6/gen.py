# SPDX-License-Identifier: Apache-2.0
"""rdma_ipv6: the server-to-switch endpoint over an IPv6 underlay. Ranks 1 and 2 (IPv6 GIDs on
p0's prefix) each WRITE chunks s = 0 and 1 in order, in one burst, over IPv6: every
contribution is absorbed, each rank's QP gets one coalesced ACK (PSN of its last packet, MSN
2), then the results: one WRITE_ONLY_WITH_IMM per rank and chunk, the switch's PSNs 5000 and
5001, immediate s << 8 | 2, the element-wise sum. The switch's frames are IPv6 from
2001:db8:1::1 (p0's address on the workers' prefix) to the worker's static neighbour MAC:
traffic class ECT(0), flow label 0, hop limit 64, UDP from the QP's port with checksum 0, the
ICRC over the IPv6 masking rules (rocepkt.compute_icrc, written from rocev2.md). Then a
contribution with its ICRC off by one bit (dropped, counted per QP and per lcore), one whose
datagram ends inside the BTH (malformed) and one whose frame ends before its IPv6 payload
length (ipv6_bad_length) are dropped, nothing answered."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from rocepkt import Endpoint, icrc_of, with_icrc  # noqa: E402
from scapy.layers.inet import UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from roceswitch import (AREA_ADDR, AREA_RKEY, CHUNK, RESULT_ADDR, RESULT_LENGTH,  # noqa: E402
                        RESULT_RKEY, SWITCH_PSN, WINDOW, WORLD, chunk, f32s, source_port, total)

SW_MAC, SW_IP = "02:00:00:00:00:01", "2001:db8:1::1"
WORKER = {1: Endpoint("02:00:00:00:11:02", "2001:db8:1::2", 17),
          2: Endpoint("02:00:00:00:11:03", "2001:db8:1::3", 18)}
SWITCH = {1: Endpoint(SW_MAC, SW_IP, 0x100), 2: Endpoint(SW_MAC, SW_IP, 0x101)}
PSN = {1: 1000, 2: 2000}


def contribution(rank, s, values, psn=None):
    return rocepkt.write(WORKER[rank], SWITCH[rank], PSN[rank] + s if psn is None else psn,
                         rocepkt.WRITE_ONLY_IMM, f32s(values),
                         va=AREA_ADDR + (s % WINDOW) * CHUNK, rkey=AREA_RKEY,
                         imm=(s & 0xFFFFFF) << 8 | 1, ackreq=True, tos=0x02,
                         sport=0xC000 + rank)


def from_switch(rank):
    return {"sport": source_port(SWITCH[rank].qpn), "tos": 0x02, "ttl": 64}


def reply(rank, psn, msn, syndrome):
    return rocepkt.ack(SWITCH[rank], WORKER[rank], psn, msn, syndrome, **from_switch(rank))


def result(rank, s, values, k):
    slot = s % (RESULT_LENGTH // CHUNK)
    return rocepkt.write(SWITCH[rank], WORKER[rank], SWITCH_PSN + k, rocepkt.WRITE_ONLY_IMM,
                         f32s(values), va=RESULT_ADDR + slot * CHUNK, rkey=RESULT_RKEY,
                         imm=(s & 0xFFFFFF) << 8 | WORLD, ackreq=True, **from_switch(rank))


a = {(1, 0): chunk(1.0), (2, 0): chunk(100.0), (1, 1): chunk(-5.0), (2, 1): chunk(0.5)}
inputs = [contribution(r, s, a[(r, s)]) for s in (0, 1) for r in (1, 2)]
expect = [reply(1, PSN[1] + 1, 2, 0x1F), reply(2, PSN[2] + 1, 2, 0x1F)]
for r in (1, 2):
    for s in (0, 1):
        expect.append(result(r, s, total(a[(1, s)], a[(2, s)]), s))

# Bad frames after the good ones, each for PSN 1002 (rank 1's next).
good = contribution(1, 2, chunk(7.0))
# A datagram of 4 bytes after the UDP header: not even a BTH.
short_bth = bytes(Ether(src=WORKER[1].mac, dst=SW_MAC)
                  / IPv6(src=WORKER[1].ip, dst=SW_IP, tc=0x02, hlim=64)
                  / UDP(sport=0xC001, dport=rocepkt.ROCE_PORT, chksum=0)
                  / Raw(good[14 + 48:14 + 48 + 4]))
inputs += [with_icrc(good, icrc_of(good) ^ 1), short_bth, good[:-20]]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
