# SPDX-License-Identifier: Apache-2.0
"""Cross-checks the RC endpoint's encoders (src/roce/encode.h) against an independent encoder:
scapy's contrib.roce (BTH, AETH, CNPPadding, and the ICRC its BTH computes), with RETH and
ImmDt as raw bytes since upstream scapy does not define them.

Usage: /usr/bin/python3 scapy_roce_crosscheck.py PATH/TO/roce_dump

For reference/rocev2.md's vectors (a) and (c) and a fixed set of pseudo-random ACKs, NAKs, CNPs,
WRITE packets of every opcode and whole WRITE messages segmented by the C++ requester, runs
roce_dump and compares every byte (IPv4 header and checksum, UDP, BTH, extension headers,
payload, pad, ICRC) with what scapy builds from the same fields. The same over IPv6, where
scapy builds every header but (as of 2.5) computes no ICRC: there it is computed here with zlib
by the recipe of reference/rocev2.md §2. Exit status: 0 pass, 1 mismatch, 77 (meson's "skip")
when scapy is not installed.
"""

import random
import struct
import subprocess
import sys
import zlib

try:
    from scapy.contrib.roce import AETH, BTH, CNPPadding
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.packet import Raw
except ImportError as error:  # Debian: apt-get install python3-scapy, run with /usr/bin/python3
    print(f"SKIP: scapy not importable: {error}")
    sys.exit(77)

ROCE_PORT = 4791
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(6, 12)
WITH_RETH = {WRITE_FIRST, WRITE_ONLY, WRITE_ONLY_IMM}
WITH_IMM = {WRITE_LAST_IMM, WRITE_ONLY_IMM}

# reference/rocev2.md §2, vectors (a) (from the IP header on) and (c): fields and bytes.
PATH_KEYS = ["src", "dst", "sport", "tos", "ttl", "id", "pkey", "qp", "flow"]
ACK_KEYS = PATH_KEYS + ["psn", "syndrome", "msn"]
VECTOR_C = dict(src="10.0.0.2", dst="10.0.0.1", sport=0xC001, tos=2, ttl=64, id=0, pkey=0xFFFF,
                qp=0x11, psn=0x100, msn=5, flow=0)
VECTORS = {
    "(a) CNP": ("cnp", dict(src="10.0.17.1", dst="10.0.18.1", sport=0, tos=0xC2, ttl=64, id=0x718C,
                            pkey=0xFFFF, qp=0x118, flow=0),
                "45c2003c718c400040119161" "0a001101" "0a001201" "000012b700280000"
                "8100ffff40000118" "00000000" + "00" * 16 + "82fd002a"),
    "(c) ACK": ("ack", dict(VECTOR_C, syndrome=0x1F),
                "4502003000004000401126b90a0000020a000001c00112b7001c0000"
                "1100ffff0000001100000100" "1f000005" "c02cf9f7"),
    "(c) NAK-seq": ("ack", dict(VECTOR_C, syndrome=0x60),
                    "4502003000004000401126b90a0000020a000001c00112b7001c0000"
                    "1100ffff0000001100000100" "60000005" "0a9ca5c4"),
}


def payload(seed, start, n):
    return bytes((seed + 31 * (start + i)) & 0xFF for i in range(n))


def is_v6(f):
    return ":" in f["src"]


def ip_udp(f, sport):
    if is_v6(f):
        ip = IPv6(src=f["src"], dst=f["dst"], tc=f["tos"], fl=f["flow"], hlim=f["ttl"])
    else:
        ip = IP(src=f["src"], dst=f["dst"], tos=f["tos"], ttl=f["ttl"], id=f["id"], flags="DF")
    return ip / UDP(sport=sport, dport=ROCE_PORT, chksum=0)


def icrc_ipv6(packet):
    """rocev2.md §2 over IPv6: 8 x 0xFF, the IPv6 header with traffic class, flow label and hop
    limit set to ones, the UDP header with its checksum set to ones, the BTH with byte 4 set to
    ones, then the rest; the CRC-32 sent least-significant byte first."""
    masked = bytearray(b"\xff" * 8 + packet[:-4])
    ip = 8
    masked[ip:ip + 4] = bytes([0x6F, 0xFF, 0xFF, 0xFF])
    masked[ip + 7] = 0xFF
    masked[ip + 40 + 6:ip + 40 + 8] = b"\xff\xff"
    masked[ip + 48 + 4] = 0xFF
    return packet[:-4] + struct.pack("<I", zlib.crc32(bytes(masked)) & 0xFFFFFFFF)


def finish(f, packet):
    """scapy's frame; over IPv6 its ICRC computed here (scapy writes the placeholder 0)."""
    return icrc_ipv6(bytes(packet)) if is_v6(f) else bytes(packet)


def bth(f, **fields):
    # Over IPv6, scapy's BTH would warn and write 0 for the ICRC: give it the 0 itself.
    return BTH(icrc=0, **fields) if is_v6(f) else BTH(**fields)


def scapy_ack(f):
    return finish(f, ip_udp(f, f["sport"]) / bth(f, opcode=0x11, pkey=f["pkey"], dqpn=f["qp"], psn=f["psn"])
                  / AETH(syndrome=f["syndrome"], msn=f["msn"]))


def scapy_cnp(f):
    return finish(f, ip_udp(f, f["sport"]) / bth(f, opcode=0x81, pkey=f["pkey"], becn=1, dqpn=f["qp"], psn=0)
                  / CNPPadding())


def scapy_write(f, opcode, psn, ackreq, dmalen, data):
    ext = b""
    if opcode in WITH_RETH:
        ext += struct.pack(">QII", f["va"], f["rkey"], dmalen)
    if opcode in WITH_IMM:
        ext += struct.pack(">I", f["imm"])
    pad = (-len(data)) & 3
    header = bth(f, opcode=opcode, padcount=pad, pkey=f["pkey"], dqpn=f["qp"], ackreq=ackreq, psn=psn)
    return finish(f, ip_udp(f, f["sport"]) / header / Raw(ext + data + b"\x00" * pad))


def args_of(kind, f, keys):
    return [kind] + [f"{k}={f[k]}" for k in keys]


def roce_dump(tool, argv):
    out = subprocess.run([tool] + argv, check=True, capture_output=True, text=True).stdout
    return [bytes.fromhex(line) for line in out.split()]


COMPARED = []  # every frame of ours compared with scapy's


def compare(name, ours, theirs):
    COMPARED.append(ours)
    if ours == theirs:
        return True
    print(f"FAIL {name}\n  ours   {ours.hex()}\n  scapy  {theirs.hex()}")
    return False


def random_path(rng):
    if rng.randrange(3) == 0:
        src = "2001:db8:%x::%x" % (rng.randrange(1 << 16), rng.randrange(1, 1 << 16))
        dst = "fe80::%x:%x" % (rng.randrange(1 << 16), rng.randrange(1, 1 << 16))
    else:
        src = f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
        dst = f"192.168.{rng.randrange(256)}.{rng.randrange(1, 255)}"
    return dict(src=src, dst=dst, sport=rng.randrange(0xC000, 0x10000), tos=rng.randrange(256),
                ttl=rng.randrange(1, 256), id=rng.randrange(65536),
                pkey=rng.choice([0xFFFF, 0x7FFF, 0x8001]), qp=rng.randrange(1 << 24),
                flow=rng.randrange(1 << 20))


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    ok = True
    for name, (kind, f, expected) in VECTORS.items():
        ours = roce_dump(tool, args_of(kind, f, ACK_KEYS if kind == "ack" else PATH_KEYS))[0]
        ok &= compare(name + " vs rocev2.md", ours, bytes.fromhex(expected))
        ok &= compare(name + " vs scapy", ours, scapy_ack(f) if kind == "ack" else scapy_cnp(f))

    rng = random.Random(4791)
    for i in range(40):
        f = random_path(rng)
        f.update(psn=rng.randrange(1 << 24), msn=rng.randrange(1 << 24),
                 syndrome=rng.choice([0x1F, 0x20 | rng.randrange(32), 0x60, 0x61, 0x62, 0x63]))
        ok &= compare(f"ack #{i}", roce_dump(tool, args_of("ack", f, ACK_KEYS))[0], scapy_ack(f))
        ok &= compare(f"cnp #{i}", roce_dump(tool, args_of("cnp", f, PATH_KEYS))[0], scapy_cnp(f))
    for i in range(60):
        f = random_path(rng)
        opcode = WRITE_FIRST + i % 6
        length = rng.choice([0, 1, 2, 3, 4, 5, 255, 256, 1023, 4096, rng.randrange(4097)])
        f.update(opcode=opcode, psn=rng.randrange(1 << 24), ackreq=rng.randrange(2),
                 va=rng.randrange(1 << 64), rkey=rng.randrange(1 << 32), dmalen=rng.randrange(1 << 32),
                 imm=rng.randrange(1 << 32), len=length, seed=rng.randrange(256))
        keys = PATH_KEYS + ["opcode", "psn", "ackreq", "va", "rkey", "dmalen", "imm", "len", "seed"]
        theirs = scapy_write(f, opcode, f["psn"], f["ackreq"], f["dmalen"], payload(f["seed"], 0, length))
        ok &= compare(f"write opcode {opcode:#x} len {length} #{i}",
                      roce_dump(tool, args_of("write", f, keys))[0], theirs)
    # Whole messages through the requester: scapy's side segments them itself (rocev2.md §1:
    # FIRST/MIDDLE carry PMTU, LAST/ONLY the rest; RETH on FIRST/ONLY; ImmDt on the last; AckReq
    # on the last, these messages being shorter than the periodic AckReq interval).
    for i in range(30):
        f = random_path(rng)
        pmtu = rng.choice([256, 512, 1024, 2048, 4096])
        length = rng.choice([0, 1, pmtu - 1, pmtu, pmtu + 1, 4 * pmtu, rng.randrange(4097)])
        length = min(length, 4096)
        start = rng.choice([rng.randrange(1 << 24), 0xFFFFFE, 0xFFFFFF])
        f.update(psn=start, pmtu=pmtu, va=rng.randrange(1 << 64), rkey=rng.randrange(1 << 32),
                 imm=rng.randrange(1 << 32), hasimm=rng.randrange(2), len=length, seed=rng.randrange(256))
        keys = PATH_KEYS + ["psn", "pmtu", "va", "rkey", "imm", "hasimm", "len", "seed"]
        ours = roce_dump(tool, args_of("segments", f, keys))
        count = max(1, -(-length // pmtu))
        if len(ours) != count:
            print(f"FAIL segments #{i}: {len(ours)} packets for {length} bytes at PMTU {pmtu}, want {count}")
            ok = False
            continue
        for k in range(count):
            first, last = k == 0, k == count - 1
            if first and last:
                opcode = WRITE_ONLY_IMM if f["hasimm"] else WRITE_ONLY
            elif first:
                opcode = WRITE_FIRST
            elif last:
                opcode = WRITE_LAST_IMM if f["hasimm"] else WRITE_LAST
            else:
                opcode = WRITE_MIDDLE
            chunk = payload(f["seed"], k * pmtu, min(pmtu, length - k * pmtu))
            theirs = scapy_write(f, opcode, (start + k) & 0xFFFFFF, int(last), length, chunk)
            ok &= compare(f"segments #{i} packet {k} (PMTU {pmtu}, {length} B)", ours[k], theirs)
    v6_checked = sum(1 for frame in COMPARED if frame[0] >> 4 == 6)
    print(f"{len(COMPARED) - 2 * len(VECTORS)} frames ({v6_checked} over IPv6) compared with scapy, "
          f"plus the {len(VECTORS)} reference vectors compared with rocev2.md and with scapy")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
