# SPDX-License-Identifier: Apache-2.0
"""bier_malformed: BIER headers a BFR must not forward, each dropped and counted.
RFC 8296: the BitString length comes from the BIFT-id, never from the BSL field, but the
field must still agree with it; its values 0 and 8-15 are reserved; the first nibble is 0101
and the version 0. A BIFT-id with no BIFT cannot be forwarded either.
  - readable BIFT-id of a configured BIFT: inaswitch_bier_malformed_total{<BIFT>,reason=...}
    (reserved_bsl, bsl_mismatch, bad_nibble, bad_version, truncated) and drop reason
    bier_malformed;
  - fewer than 4 octets after the Ethernet header (no BIFT-id to blame): drop reason
    bier_malformed only;
  - unknown BIFT-id: drop reason bier_unknown_bift.
A well-formed packet before, between and after them is forwarded as usual (TTL - 1, BitString
AND F-BM). The BSL field agreeing with the BIFT matters, not its size: a BSL 64 BIFT takes
BSL code 1 and refuses code 3."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import Case, bier, frame, labels  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

case = Case()
UP = "02:00:00:00:10:02"
N1 = ("10.0.1.2", "p1", "02:00:00:00:11:02")


def data(ident):
    return bytes(IP(src="10.9.0.1", dst="232.1.1.1", ttl=9, id=ident) /
                 UDP(sport=1000, dport=5000) / Raw(b"malformed %d" % ident + bytes(20)))


def good(bsl, ident):
    case.inputs["p0"].append(frame(UP, case.sw["p0"], bier(bsl, {1, 2}, 64, entropy=ident),
                                   data(ident)))
    case.count(f"inaswitch_bier_packets_total{{{labels(bsl)}}}")
    case.count(f"inaswitch_bier_bits_no_neighbour_total{{{labels(bsl)}}}")   # BFR-id 2
    case.copy(labels(bsl), N1[0], N1[1], N1[2], bier(bsl, {1}, 63, entropy=ident), data(ident))


def bad(raw, bsl, reason):
    """A frame whose BIER part is `raw`; `bsl` names the BIFT it is counted in (None: none)."""
    case.inputs["p0"].append(bytes(Ether(src=UP, dst=case.sw["p0"], type=0xAB37)) + raw)
    if reason == "unknown_bift":
        case.count('inaswitch_drops_total{reason="bier_unknown_bift"}')
        return
    case.count('inaswitch_drops_total{reason="bier_malformed"}')
    if bsl is not None:
        case.count(f'inaswitch_bier_malformed_total{{{labels(bsl)},reason="{reason}"}}')


good(256, 1)
bad(bier(256, {1}, 64, bsl_code=0) + data(2), 256, "reserved_bsl")        # BSL field 0
bad(bier(256, {1}, 64, bsl_code=8) + data(3), 256, "reserved_bsl")        # BSL field 8
bad(bier(256, {1}, 64, bsl_code=15) + data(4), 256, "reserved_bsl")       # BSL field 15
bad(bier(256, {1}, 64, bsl_code=1) + data(5), 256, "bsl_mismatch")        # 64 in a 256 BIFT
bad(bier(256, {1}, 64, bsl_code=7) + data(6), 256, "bsl_mismatch")        # 4096 in a 256 BIFT
bad(bier(64, {1}, 64, bsl_code=3) + data(7), 64, "bsl_mismatch")          # 256 in a 64 BIFT
bad(bier(256, {1}, 64, nibble=0b0100) + data(8), 256, "bad_nibble")       # an IPv4 nibble
bad(bier(256, {1}, 64, nibble=0) + data(9), 256, "bad_nibble")
bad(bier(256, {1}, 64, ver=1) + data(10), 256, "bad_version")
bad(bier(256, {1}, 64)[:12 + 20], 256, "truncated")                       # 20 of 32 octets
bad(bier(256, {1}, 64)[:12 + 31], 256, "truncated")                       # one octet short
bad(bier(64, {1}, 64)[:12 + 7], 64, "truncated")
bad(bier(256, {1}, 64)[:11], 256, "truncated")                            # fixed header cut
bad(bier(256, {1}, 64)[:4], 256, "truncated")                             # word 0 only
bad(bier(256, {1}, 64)[:3], None, "truncated")                            # no BIFT-id
bad(b"", None, "truncated")                                               # nothing at all
good(64, 11)
bad(bier(256, {1}, 64, bift=0x30001) + data(12), None, "unknown_bift")    # set 1: no BIFT
bad(bier(256, {1}, 64, bift=0x30100) + data(13), None, "unknown_bift")    # sub-domain 1
bad(bier(256, {1}, 64, bift=0x20000, bsl_code=2) + data(14), None, "unknown_bift")  # BSL 128
bad(bier(256, {1}, 64, bift=16) + data(15), None, "unknown_bift")
good(256, 16)

if __name__ == "__main__":
    case.finish(HERE)
