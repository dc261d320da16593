# SPDX-License-Identifier: Apache-2.0
"""Cross-checks wire/bier_header.h against an independent encoder: scapy's contrib.bier.

Usage: /usr/bin/python3 scapy_crosscheck.py PATH/TO/bier_dump

For the bier.md test vector and a fixed set of pseudo-random headers over every BSL, builds an
Ethernet frame with scapy (ethertype 0xAB37, scapy's BIFT layer for word 0 and its BIER layer for
words 1-2 and the BitString), runs bier_dump with the same fields and compares the bytes after the
Ethernet header. scapy numbers BSL from 0 (BitString bytes = 8 << length), one off from RFC 8296,
so its `length` field is set to the RFC code point by hand and everything is compared by raw
offset, never through scapy's length logic. Exit status: 0 pass, 1 mismatch, 77 (meson's "skip")
when scapy is not installed.
"""

import random
import subprocess
import sys

try:
    from scapy.contrib.bier import BIER, BIFT
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import bind_layers
except ImportError as error:  # Debian: apt-get install python3-scapy, run with /usr/bin/python3
    print(f"SKIP: scapy not importable: {error}")
    sys.exit(77)

BIER_ETHERTYPE = 0xAB37
ETHER_BYTES = 14
FIXED_BYTES = 12

# bier.md §1, checked on Debian 12.
BIER_MD_VECTOR_HEX = "30000140" "50312345" "00040007" "80" + "00" * 30 + "05"


def bitstring_bytes(bsl_code, si, bfr_ids):
    """RFC 8279: BFR-id = SI * BSL + BP; the BitString is a big-endian number whose bit BP-1 is BP."""
    bsl_bits = 32 << bsl_code
    number = 0
    for bfr_id in bfr_ids:
        assert (bfr_id - 1) // bsl_bits == si
        number |= 1 << ((bfr_id - 1) % bsl_bits)
    return number.to_bytes(bsl_bits // 8, "big")


def bfr_id_text(bfr_ids):
    return ",".join(str(i) for i in sorted(bfr_ids))


def scapy_frame(f):
    bift = BIFT(bsl=f["bsl"], sd=f["sd"], set=f["si"], cos=f["tc"], s=f["s"], ttl=f["ttl"])
    bier = BIER(id=5, version=0, length=f["bsl"], entropy=f["entropy"], OAM=f["oam"], RSV=f["rsv"],
                DSCP=f["dscp"], Proto=f["proto"], BFRID=f["bfir_id"],
                BitString=bitstring_bytes(f["bsl"], f["si"], f["bfr_ids"]))
    payload = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=2)
    frame = Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01", type=BIER_ETHERTYPE) / bift / bier / payload
    return bytes(frame)


def bier_dump(tool, f):
    bift_id = (f["bsl"] << 16) | (f["sd"] << 8) | f["si"]  # draft-ietf-bier-non-mpls-bift-encoding
    args = [tool, "--bift-id", hex(bift_id), "--tc", str(f["tc"]), "--s", str(f["s"]),
            "--ttl", str(f["ttl"]), "--bsl", str(f["bsl"]), "--entropy", hex(f["entropy"]),
            "--oam", str(f["oam"]), "--rsv", str(f["rsv"]), "--dscp", str(f["dscp"]),
            "--proto", str(f["proto"]), "--bfir-id", str(f["bfir_id"]), "--si", str(f["si"]),
            "--bfr-ids", bfr_id_text(f["bfr_ids"])]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout.strip()
    return bytes.fromhex(out)


def random_fields(rng, bsl_code):
    bsl_bits = 32 << bsl_code
    si = rng.randrange(0, min(256, 65536 // bsl_bits))
    first, last = si * bsl_bits + 1, min(si * bsl_bits + bsl_bits, 65535)
    ids = {first, last} | {rng.randint(first, last) for _ in range(rng.randrange(0, 12))}
    return dict(bsl=bsl_code, sd=rng.randrange(256), si=si, tc=rng.randrange(8), s=rng.randrange(2),
                ttl=rng.randrange(256), entropy=rng.randrange(1 << 20), oam=rng.randrange(4),
                rsv=rng.randrange(4), dscp=rng.randrange(64), proto=rng.randrange(64),
                bfir_id=rng.randrange(1 << 16), bfr_ids=sorted(ids))


def check(tool, name, f):
    ours = bier_dump(tool, f)
    frame = scapy_frame(f)
    theirs = frame[ETHER_BYTES:ETHER_BYTES + len(ours)]
    if ours != theirs:
        print(f"FAIL {name}: bier_dump and scapy differ\n  ours   {ours.hex()}\n  scapy  {theirs.hex()}")
        return False

    # Decode our fixed bytes with scapy's field definitions (only the fixed fields: its BitString
    # length is wrong by design, see the module docstring).
    parsed = Ether(frame)
    bift, bier = parsed[BIFT], parsed[BIER]
    decoded = dict(bsl=bift.bsl, sd=bift.sd, si=bift.set, tc=bift.cos, s=bift.s, ttl=bift.ttl,
                   entropy=bier.entropy, oam=bier.OAM, rsv=bier.RSV, dscp=bier.DSCP, proto=bier.Proto,
                   bfir_id=bier.BFRID)
    for key, value in decoded.items():
        if value != f[key]:
            print(f"FAIL {name}: scapy decodes {key}={value}, expected {f[key]}")
            return False
    if bier.id != 5 or bier.version != 0 or bier.length != f["bsl"]:
        print(f"FAIL {name}: nibble/version/BSL decode as {bier.id}/{bier.version}/{bier.length}")
        return False
    print(f"ok   {name}: {len(ours)} bytes; for BSL code {f['bsl']} the RFC BitString is "
          f"{4 << f['bsl']} bytes, scapy's dissector wants {8 << f['bsl']} (took {len(bier.BitString)})")
    return True


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    bind_layers(Ether, BIFT, type=BIER_ETHERTYPE)

    vector = dict(bsl=3, sd=0, si=0, tc=0, s=1, ttl=64, entropy=0x12345, oam=0, rsv=0, dscp=0,
                  proto=4, bfir_id=7, bfr_ids=[1, 3, 256])
    ok = check(tool, "bier.md vector", vector)
    ours = bier_dump(tool, vector)
    if ours.hex() != BIER_MD_VECTOR_HEX:
        print(f"FAIL bier.md vector: {ours.hex()} != {BIER_MD_VECTOR_HEX}")
        ok = False
    if len(ours) != FIXED_BYTES + 32:
        ok = False

    rng = random.Random(8296)
    for bsl_code in range(1, 8):
        for i in range(6):
            ok &= check(tool, f"random BSL code {bsl_code} #{i}", random_fields(rng, bsl_code))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
