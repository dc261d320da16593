# SPDX-License-Identifier: Apache-2.0
"""An independent encoder of INA v1 packets, written from docs/protocol.md (not from the C++),
for golden cases: header fields big-endian, P-BM as an RFC 8279 BitString (BP 1 = least
significant bit of the last octet), elements little-endian."""

import struct

OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3}
TYPES = {"int32": (0, "<i"), "fp32": (1, "<f")}
DATA, RESULT = 1, 2


def partial_sport(seq):
    """The UDP source port of a switch's partial for chunk `seq`: the chunk's steering port
    (docs/protocol.md "Transport": 40960 | (seq & 63)), so a parent's NIC rules can steer it."""
    return 40960 | (seq & 63)
RETRANSMIT, ECN_ECHO, FALLBACK, LOWEST_MISSING = 0x01, 0x02, 0x04, 0x08
BSL_CODE = {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}


def bitstring(bsl, bfr_ids, si=0):
    value = 0
    for i in bfr_ids:
        assert si * bsl < i <= (si + 1) * bsl
        value |= 1 << (i - 1 - si * bsl)
    return value.to_bytes(bsl // 8, "big")


def ina(job, seq, bfr_ids, values, kind=DATA, flags=0, op="sum", etype="int32", bsl=64, si=0,
        lowest_missing=None):
    """lowest_missing (data): the sender's lowest missing result, in the word at offset 20 with
    flag LOWEST_MISSING; None: the flag clear and the word 0."""
    code, fmt = TYPES[etype]
    if lowest_missing is not None:
        flags |= LOWEST_MISSING
    head = struct.pack(">BBBBBBBBIIHHI", 0x49, 0x4E, (1 << 4) | kind, flags,
                       (OPS[op] << 4) | code, BSL_CODE[bsl] << 4, si, 0,
                       job, seq, len(values), 0, lowest_missing or 0)
    assert len(head) == 24
    return head + bitstring(bsl, bfr_ids, si) + b"".join(struct.pack(fmt, v) for v in values)
