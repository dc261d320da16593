# SPDX-License-Identifier: Apache-2.0
"""RDMA CM MADs for the golden cases of the switch's passive CM (docs/rdma.md "RDMA CM on the
switch"), packed from the IBA vol. 1 ch. 12.6 layouts, independently of src/roce/cm.cc (scapy
has no CM MAD layer: contrib.roce stops at the BTH/AETH). Addresses are IPv4 ("10.0.1.2") or
IPv6 ("2001:db8:1::2"): the path's GIDs are an IPv4 address's IPv4-mapped form or the IPv6
address itself, and rdma_cm's header says which (ip_version 4 or 6)."""

import ipaddress
import struct

import rocepkt

PORT = 7471
REQ, REJ, REP, RTU, DREQ, DREP = 0x10, 0x12, 0x13, 0x14, 0x15, 0x16
INAR = 0x494E4152


def gid(text):
    """The RoCEv2 GID of an address: ::ffff:a.b.c.d for IPv4, the IPv6 address itself."""
    a = ipaddress.ip_address(text)
    return (bytes(10) + b"\xff\xff" + a.packed) if a.version == 4 else a.packed


def mad(attr, tid, body):
    """A 256-byte CM MAD: common header (base 1, class 7, version 2, method Send) + body."""
    header = struct.pack(">BBBBHHQHHI", 1, 0x07, 2, 0x03, 0, 0, tid, attr, 0, 0)
    data = header + body
    assert len(data) <= 256
    return data + bytes(256 - len(data))


def cma_header(src_ip, dst_ip):
    """rdma_cm's 36-byte header: version 0, IP version << 4, the active side's port, then the
    addresses (IPv4: in the last 4 bytes of each 16)."""
    s, d = ipaddress.ip_address(src_ip), ipaddress.ip_address(dst_ip)
    if s.version == 4:
        return struct.pack(">BBH", 0, 0x40, 40001) + bytes(12) + s.packed + bytes(12) + d.packed
    return struct.pack(">BBH", 0, 0x60, 40001) + s.packed + d.packed


def req_body(comm, job, rank, src_ip, dst_ip, qpn, psn):
    inar = struct.pack(">IBBBBIHHQIIQI", INAR, 1, 2, 0, 0, job, rank, 2, 1 << 18, 64, 4,
                       0x7F0000000000, 0x1234)  # int32 sum, world 2, chunk 64, window 4
    private = (cma_header(src_ip, dst_ip) + inar).ljust(92, b"\x00")
    path = (struct.pack(">HH", 0xFFFF, 0xFFFF) + gid(src_ip) + gid(dst_ip)
            + struct.pack(">IBBBB", 0, 0, 64, 0, 19 << 3))
    return (struct.pack(">II", comm, 0)
            + struct.pack(">Q", 0x0106 << 16 | PORT)    # service ID
            + struct.pack(">Q", 0x505400FFFE770002)     # CA GUID
            + bytes(4) + struct.pack(">I", 0)           # reserved, Q_Key
            + struct.pack(">I", qpn << 8 | 1)           # QPN, responder resources
            + struct.pack(">I", 0 << 8 | 1)             # EECN, initiator depth
            + struct.pack(">I", 0 << 8 | 20 << 3)       # remote EECN, CM timeout, RC, no E2E
            + struct.pack(">I", psn << 8 | 20 << 3 | 7)  # Starting PSN, CM timeout, retry 7
            + struct.pack(">HBB", 0xFFFF, 3 << 4 | 7, 15 << 4)  # P_Key, MTU 1024 / RNR 7, retries
            + path + bytes(44) + private)


def reply_bytes(status, job, addr, rkey):
    return struct.pack(">IBBHIQI", INAR, 1, status, 0, job, addr, rkey)


def rep_body(switch_comm, worker_comm, switch_ip, area_addr, area_rkey):
    """The switch's REP: its QPN 0x100, Starting PSN = the worker's communication ID *
    2654435761 mod 2^24, target ACK delay 15, RNR retry 7, CA GUID 0x020000fffe << 24 | the
    low 24 bits of the switch's address, the INAR accept for job 7."""
    psn = (worker_comm * 2654435761) & 0xFFFFFF
    low = int.from_bytes(ipaddress.ip_address(switch_ip).packed[-3:], "big")
    guid = 0x020000FFFE << 24 | low
    return (struct.pack(">IIIIII", switch_comm, worker_comm, 0, 0x100 << 8, 0, psn << 8)
            + struct.pack(">BBBB", 0, 0, 15 << 3, 7 << 5) + struct.pack(">Q", guid)
            + reply_bytes(0, 7, area_addr, area_rkey))


def source_port(qpn):
    """The UDP source port the switch uses on a QP (docs/rdma.md)."""
    return 0xC000 | (((qpn & 0xFFFFFF) * 0x9E3779B1) & 0xFFFFFFFF) >> 18


def from_worker(w, switch_qp1, attr, tid, body, **kw):
    """A worker's CM MAD to the switch's QP1: UD SEND ONLY with AckReq, DETH Q_Key 0x80010000
    source QP 1, TOS (traffic class) 0."""
    return rocepkt.roce(w, switch_qp1, rocepkt.UD_SEND_ONLY, 0,
                        rocepkt.deth(rocepkt.CM_QKEY, 1), mad(attr, tid, body),
                        ackreq=True, tos=0, sport=0xD000, **kw)


def from_switch(switch_qp1, w, attr, tid, body, k):
    """The switch's k-th CM frame: QP1's PSN k, IPv4 identification k (IPv6 has none), TOS 0,
    TTL (hop limit) 64, the UDP source port of QPN 1."""
    return rocepkt.roce(switch_qp1, w, rocepkt.UD_SEND_ONLY, k,
                        rocepkt.deth(rocepkt.CM_QKEY, 1), mad(attr, tid, body),
                        ackreq=True, tos=0, sport=source_port(1), ip_id=k)
