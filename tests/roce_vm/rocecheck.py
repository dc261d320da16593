# SPDX-License-Identifier: Apache-2.0
"""Checks on captured RoCEv2 frames (Ethernet / IPv4 / UDP 4791 / BTH ... / ICRC), written
from the specification and independent of the switch's code (src/roce):

- icrc_ok(frame): the Invariant CRC recomputed with zlib's CRC-32 over 8 bytes of 0xFF (the
  masked LRH), the IPv4 header with TOS, TTL and header checksum set to 0xFF, the UDP header with
  its checksum set to 0xFF, the BTH with byte 4 (FECN/BECN/reserved) set to 0xFF, and the rest
  unchanged; stored least-significant byte first in the last 4 bytes.
- ipv4_checksum_ok(frame): the IPv4 header checksum (RFC 1071).
- routed_pair_diff(before, after): which bytes a router may change (MACs, TTL, IP checksum) and
  whether only those changed, with the TTL one lower.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib

ETH_LEN = 14
ROCE_PORT = 4791

# BTH opcodes (IBA vol. 1, 9.2) that the harness expects to see, by name.
OPCODES = {
    0: "RC SEND_FIRST", 1: "RC SEND_MIDDLE", 2: "RC SEND_LAST", 4: "RC SEND_ONLY",
    6: "RC RDMA_WRITE_FIRST", 7: "RC RDMA_WRITE_MIDDLE", 8: "RC RDMA_WRITE_LAST",
    10: "RC RDMA_WRITE_ONLY", 12: "RC RDMA_READ_REQUEST", 13: "RC RDMA_READ_RESPONSE_FIRST",
    14: "RC RDMA_READ_RESPONSE_MIDDLE", 15: "RC RDMA_READ_RESPONSE_LAST",
    16: "RC RDMA_READ_RESPONSE_ONLY", 17: "RC ACKNOWLEDGE", 100: "UD SEND_ONLY",
    101: "UD SEND_ONLY_IMM", 129: "CNP",
}


@dataclasses.dataclass
class RoceFrame:
    raw: bytes
    eth_dst: str
    eth_src: str
    ip_src: str
    ip_dst: str
    ttl: int
    ihl: int           # IPv4 header length in bytes
    opcode: int
    dest_qp: int
    psn: int

    @property
    def bth_offset(self) -> int:
        return ETH_LEN + self.ihl + 8


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def _ip(b: bytes) -> str:
    return ".".join(str(x) for x in b)


def parse(frame: bytes) -> RoceFrame | None:
    """The frame's fields if it is Ethernet/IPv4/UDP to port 4791 with a whole BTH and ICRC;
    None otherwise."""
    if len(frame) < ETH_LEN + 20 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[ETH_LEN:]
    ihl = (ip[0] & 0x0F) * 4
    if ip[0] >> 4 != 4 or ihl < 20 or ip[9] != 17 or len(ip) < ihl + 8 + 12 + 4:
        return None
    (dport,) = struct.unpack("!H", ip[ihl + 2:ihl + 4])
    if dport != ROCE_PORT:
        return None
    bth = ip[ihl + 8:]
    return RoceFrame(raw=bytes(frame), eth_dst=_mac(frame[0:6]), eth_src=_mac(frame[6:12]),
                     ip_src=_ip(ip[12:16]), ip_dst=_ip(ip[16:20]), ttl=ip[8], ihl=ihl,
                     opcode=bth[0], dest_qp=int.from_bytes(bth[5:8], "big"),
                     psn=int.from_bytes(bth[9:12], "big") & 0xFFFFFF)


def icrc(frame: bytes) -> bytes:
    """The ICRC a frame should carry (4 bytes, as on the wire)."""
    ip = bytearray(frame[ETH_LEN:-4])
    ihl = (ip[0] & 0x0F) * 4
    ip[1] = 0xFF                      # TOS (DSCP + ECN)
    ip[8] = 0xFF                      # TTL
    ip[10:12] = b"\xff\xff"           # header checksum
    ip[ihl + 6:ihl + 8] = b"\xff\xff"  # UDP checksum
    ip[ihl + 8 + 4] = 0xFF            # BTH: FECN, BECN, reserved
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(ip)) & 0xFFFFFFFF)


def icrc_ok(frame: bytes) -> bool:
    return icrc(frame) == frame[-4:]


def ipv4_checksum_ok(frame: bytes) -> bool:
    ihl = (frame[ETH_LEN] & 0x0F) * 4
    hdr = frame[ETH_LEN:ETH_LEN + ihl]
    total = sum(struct.unpack(f"!{ihl // 2}H", hdr))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total == 0xFFFF


def routed_pair_diff(before: RoceFrame, after: RoceFrame) -> str | None:
    """None if `after` is `before` routed by one IPv4 hop: new MACs, TTL one lower, a valid
    header checksum, every other byte (IP header, UDP, BTH, payload, ICRC) unchanged. Otherwise
    what differs."""
    a, b = before.raw, after.raw
    if len(a) != len(b):
        return f"length {len(a)} -> {len(b)}"
    if after.ttl != before.ttl - 1:
        return f"TTL {before.ttl} -> {after.ttl}"
    if not ipv4_checksum_ok(b):
        return "IPv4 header checksum wrong after routing"
    ttl_at, csum_at = ETH_LEN + 8, ETH_LEN + 10
    for i in range(12, len(a)):
        if i in (ttl_at, csum_at, csum_at + 1):
            continue
        if a[i] != b[i]:
            return f"byte {i} changed: {a[i]:#04x} -> {b[i]:#04x}"
    return None
