# SPDX-License-Identifier: Apache-2.0
"""scapy layer for INA v1 (docs/protocol.md), for test authors and for looking at captures.

    import sys; sys.path.insert(0, "tools/scapy")
    from ina import INA, ina_packet
    from scapy.all import rdpcap
    for p in rdpcap("tests/golden/ina_root/in_p0.pcap"):
        if INA in p:
            print(p[INA].job_id, p[INA].seq, p[INA].bfr_ids(), p[INA].values())

    pkt = Ether() / IP(dst="10.0.1.1") / UDP(sport=9470, dport=9470) / \\
        ina_packet(job=1, seq=0, bfr_ids=[2], values=[1, 2, 3], etype="int32")

Bound to UDP port 9470 (either direction; `bind_port(p)` adds another). As the protocol says,
a payload on the port is INA only if it parses: anything else decodes as Raw. Header fields are
big-endian, the P-BM is an RFC 8279 BitString of BSL bits (BP 1 = least-significant bit of the
last octet), elements are little-endian; `count` and `bsl` are filled in from the elements and
the P-BM when left unset.
"""

import struct

from scapy.fields import (BitEnumField, BitField, ByteField, FlagsField, IntField, ShortField,
                          StrLenField, XShortField)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers

INA_PORT = 9470
MAGIC = 0x494E
TYPES = {1: "data", 2: "result"}
OPS = {0: "sum", 1: "prod", 2: "min", 3: "max"}
ELEM_TYPES = {0: "int32", 1: "fp32", 2: "fp16", 3: "bf16", 4: "int64", 5: "fp64"}
ELEM_SIZE = {0: 4, 1: 4, 2: 2, 3: 2, 4: 8, 5: 8}
BSL_CODES = {1: 64, 2: 128, 3: 256, 4: 512, 5: 1024, 6: 2048, 7: 4096}
FLAGS = ["retransmit", "ecn_echo", "fallback", "lowest_missing"]
LOWEST_MISSING = 0x08  # data only: the word at offset 20 is the sender's lowest missing result


def _bsl_bytes(code: int) -> int:
    return BSL_CODES.get(code, 0) // 8


class INA(Packet):
    name = "INA"
    fields_desc = [
        XShortField("magic", MAGIC),
        BitField("version", 1, 4),
        BitEnumField("type", 1, 4, TYPES),
        FlagsField("flags", 0, 8, FLAGS),
        BitEnumField("op", 0, 4, OPS),
        BitEnumField("etype", 0, 4, ELEM_TYPES),
        BitEnumField("bsl", None, 4, {c: str(b) for c, b in BSL_CODES.items()}),
        BitField("reserved0", 0, 4),
        ByteField("set_id", 0),
        ByteField("reserved1", 0),
        IntField("job_id", 0),
        IntField("seq", 0),
        ShortField("count", None),
        ShortField("reserved2", 0),
        IntField("lowest_missing", 0),  # with flag lowest_missing (data); else reserved, 0
        StrLenField("pbm", b"\x00" * 8, length_from=lambda p: _bsl_bytes(p.bsl)),
        StrLenField("elements", b"",
                    length_from=lambda p: (p.count or 0) * ELEM_SIZE.get(p.etype, 0)),
    ]

    @classmethod
    def dispatch_hook(cls, _pkt=None, *args, **kargs):
        """INA only if the payload parses (magic, version, known codes, exact length); else
        Raw, as a switch treats such datagrams as ordinary UDP."""
        if _pkt is not None and not is_ina(bytes(_pkt)):
            return Raw
        return cls

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.bsl is None:
            code = {b // 8: c for c, b in BSL_CODES.items()}.get(len(self.pbm))
            if code is None:
                raise ValueError(f"P-BM of {len(self.pbm)} bytes is no BSL")
            pkt = pkt[:5] + bytes([code << 4 | (pkt[5] & 0x0F)]) + pkt[6:]
        if self.count is None:
            count = len(self.elements) // ELEM_SIZE[self.etype]
            pkt = pkt[:16] + struct.pack(">H", count) + pkt[18:]
        return pkt + pay

    def extract_padding(self, s: bytes):
        return b"", s  # nothing follows an INA message inside its datagram

    def bsl_bits(self) -> int:
        return BSL_CODES[self.bsl]

    def bfr_ids(self) -> list[int]:
        """The P-BM as BFR-ids (set SI holds SI*BSL+1 .. (SI+1)*BSL)."""
        bits = len(self.pbm) * 8
        value = int.from_bytes(self.pbm, "big")
        return [self.set_id * bits + bp + 1 for bp in range(bits) if value >> bp & 1]

    def values(self) -> list:
        """The elements as numbers (fp16 and bf16 widened to float)."""
        n = len(self.elements) // ELEM_SIZE[self.etype]
        if self.etype == 3:  # bfloat16: the high half of an fp32
            halves = struct.unpack(f"<{n}H", self.elements)
            return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
        fmt = {0: "i", 1: "f", 2: "e", 4: "q", 5: "d"}[self.etype]
        return list(struct.unpack(f"<{n}{fmt}", self.elements))


def is_ina(payload: bytes) -> bool:
    """Whether a UDP payload is an INA v1 message (docs/protocol.md's validity rules)."""
    if len(payload) < 24 or payload[:2] != b"IN" or payload[2] >> 4 != 1:
        return False
    if payload[2] & 0x0F not in TYPES or payload[3] & ~0x0F or payload[4] >> 4 not in OPS:
        return False
    lowest = payload[3] & LOWEST_MISSING
    if lowest and payload[2] & 0x0F != 1:
        return False  # only a contributor states what it lacks
    if payload[4] & 0x0F not in ELEM_SIZE or payload[5] >> 4 not in BSL_CODES:
        return False
    reserved = payload[18:20] if lowest else payload[18:24]
    if payload[5] & 0x0F or payload[7] or any(reserved):
        return False
    count = struct.unpack_from(">H", payload, 16)[0]
    size = 24 + _bsl_bytes(payload[5] >> 4) + count * ELEM_SIZE[payload[4] & 0x0F]
    return size == len(payload)


def bitstring(bfr_ids, bsl: int = 64, si: int = 0) -> bytes:
    value = 0
    for i in bfr_ids:
        if not si * bsl < i <= (si + 1) * bsl:
            raise ValueError(f"BFR-id {i} is not in set {si} of BSL {bsl}")
        value |= 1 << (i - 1 - si * bsl)
    return value.to_bytes(bsl // 8, "big")


def ina_packet(job: int, seq: int, bfr_ids, values, *, etype: str = "int32", op: str = "sum",
               kind: str = "data", flags: int = 0, bsl: int = 64, si: int = 0,
               lowest_missing: int | None = None) -> INA:
    """An INA message with P-BM = bfr_ids and these elements; `lowest_missing` (data) sets the
    flag and the sender's lowest missing result."""
    code = {v: k for k, v in ELEM_TYPES.items()}[etype]
    if etype == "bf16":
        elements = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:]
                            for v in values)
    else:
        fmt = {0: "i", 1: "f", 2: "e", 4: "q", 5: "d"}[code]
        elements = struct.pack(f"<{len(values)}{fmt}", *values)
    if lowest_missing is not None:
        flags |= LOWEST_MISSING
    return INA(type={v: k for k, v in TYPES.items()}[kind], flags=flags,
               lowest_missing=lowest_missing or 0,
               op={v: k for k, v in OPS.items()}[op], etype=code, set_id=si, job_id=job,
               seq=seq, pbm=bitstring(bfr_ids, bsl, si), elements=elements)


def bind_port(port: int) -> None:
    bind_layers(UDP, INA, dport=port)
    bind_layers(UDP, INA, sport=port)


bind_port(INA_PORT)
