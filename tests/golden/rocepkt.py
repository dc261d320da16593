# SPDX-License-Identifier: Apache-2.0
"""An independent encoder of RoCEv2 frames for golden cases, written from
reference/rocev2.md (not from the C++): scapy's contrib.roce builds the BTH, the AETH and the
CNP padding and computes the ICRC; RETH, ImmDt and DETH (which upstream scapy lacks) are packed
here as raw big-endian bytes.

    Ether | IPv4 (DF) | UDP dport 4791, checksum 0 | BTH | ext headers | payload | pad | ICRC
    Ether | IPv6      | UDP dport 4791, checksum 0 | BTH | ...      (an endpoint with an IPv6 ip)

Over IPv6 the ICRC is this file's own (`compute_icrc`, rocev2.md §2: the traffic class, flow label and
hop limit masked), since Debian's scapy 2.5 computes it for IPv4 only; the self-test checks
`compute_icrc` against scapy's on IPv4 frames first.

The cases it serves: in-order WRITEs into the switch, a PSN gap answered by one NAK-sequence, a
duplicate answered by a re-ACK, a bad ICRC, an unknown QP, a CE-marked packet answered by a CNP.
Every field can be given explicitly, so a case can also build what a switch must refuse (bad
pad, wrong opcode sequence, corrupted ICRC).

    python3 rocepkt.py [PATH/TO/rxe-rocev2-sample.pcap]

runs the self-test: reference/rocev2.md vectors (a)-(c) reproduced byte for byte, and every
frame of the rxe capture (Linux rdma_rxe's own packets) re-encoded from its dissected fields
to the same bytes, ICRC included."""

import os
import struct
import sys

from scapy.contrib.roce import AETH, BTH, CNPPadding
import zlib

from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from scapy.packet import Raw

ROCE_PORT = 4791
PKEY_DEFAULT = 0xFFFF
CM_QKEY = 0x80010000

# Opcodes (reference/rocev2.md §1): RC = 0x00 | op, UC = 0x20 | op, UD SEND ONLY 0x64, CNP 0x81.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(0x00, 0x06)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(0x06, 0x0C)
READ_REQUEST = 0x0C
READ_RESP_FIRST, READ_RESP_MIDDLE, READ_RESP_LAST, READ_RESP_ONLY = range(0x0D, 0x11)
ACKNOWLEDGE = 0x11
UC = 0x20
UD_SEND_ONLY = 0x64
CNP = 0x81

# AETH syndromes.
ACK_UNLIMITED = 0x1F
RNR_NAK = 0x20  # | timer code
NAK_PSN_SEQUENCE, NAK_INVALID_REQUEST, NAK_REMOTE_ACCESS, NAK_REMOTE_OPERATIONAL = 0x60, 0x61, 0x62, 0x63

# Extension headers after the BTH, per RC/UC operation (low 5 bits of the opcode), in order.
_RC_EXT = {
    SEND_FIRST: (), SEND_MIDDLE: (), SEND_LAST: (), SEND_LAST_IMM: ("imm",), SEND_ONLY: (),
    SEND_ONLY_IMM: ("imm",), WRITE_FIRST: ("reth",), WRITE_MIDDLE: (), WRITE_LAST: (),
    WRITE_LAST_IMM: ("imm",), WRITE_ONLY: ("reth",), WRITE_ONLY_IMM: ("reth", "imm"),
    READ_REQUEST: ("reth",), READ_RESP_FIRST: ("aeth",), READ_RESP_MIDDLE: (),
    READ_RESP_LAST: ("aeth",), READ_RESP_ONLY: ("aeth",), ACKNOWLEDGE: ("aeth",),
}
EXT_BYTES = {"reth": 16, "imm": 4, "aeth": 4, "deth": 8, "cnp": 16}


def ext_headers(opcode):
    """The extension headers an opcode carries, in wire order (KeyError: not encoded here)."""
    if opcode == CNP:
        return ("cnp",)
    if opcode == UD_SEND_ONLY:
        return ("deth",)
    if opcode & 0xE0 == UC:
        op = opcode & 0x1F
        if op > WRITE_ONLY_IMM:
            raise KeyError(opcode)
        return _RC_EXT[op]
    return _RC_EXT[opcode]


def reth(va, rkey, length):
    return struct.pack(">QII", va, rkey, length)


def immdt(value):
    return struct.pack(">I", value)


def aeth(syndrome, msn):
    return struct.pack(">I", (syndrome << 24) | (msn & 0xFFFFFF))


def deth(qkey, src_qp):
    return struct.pack(">II", qkey, src_qp & 0xFFFFFF)


def pad_bytes(payload_len):
    return (-payload_len) & 3


def compute_icrc(l3):
    """The ICRC of the RoCEv2 packet `l3` (IPv4 or IPv6 header first, its own 4 ICRC bytes last,
    not covered), from rocev2.md §2: CRC-32 over 8 bytes of 0xFF and the packet with the
    variant fields set to ones (IPv4: TOS, TTL, header checksum; IPv6: traffic class, flow
    label, hop limit), the UDP checksum and BTH byte 4 too."""
    b = bytearray(l3[:-4])
    if b[0] >> 4 == 4:
        ihl = (b[0] & 0x0F) * 4
        b[1], b[8], b[10], b[11] = 0xFF, 0xFF, 0xFF, 0xFF
    else:
        ihl = 40
        b[0] |= 0x0F
        b[1:4] = b"\xff\xff\xff"
        b[7] = 0xFF
    b[ihl + 6:ihl + 8] = b"\xff\xff"
    b[ihl + 8 + 4] = 0xFF
    return zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF


class Endpoint:
    """One side of a connection: its MAC, IP address (IPv4, or IPv6 when it has a colon) and
    QPN."""

    def __init__(self, mac, ip, qpn):
        self.mac, self.ip, self.qpn = mac, ip, qpn


def roce(src, dst, opcode, psn, ext=b"", payload=b"", *, dqpn=None, ackreq=False, se=False,
         migreq=False, pad=None, pkey=PKEY_DEFAULT, fecn=False, becn=False, sport=0xC000,
         tos=0x02, ttl=64, ip_id=0, ip_flags="DF", udp_checksum=0, icrc=None):
    """An Ethernet frame from endpoint `src` to `dst` (DestQP = dst.qpn unless dqpn is given).
    `ext` is the extension headers' bytes, `payload` the data; `pad` zero bytes follow (by
    default what aligns the payload to 4). `icrc` None: computed by scapy; an int: that value
    (least-significant byte first on the wire), e.g. a wrong one. `udp_checksum` None lets
    scapy compute it; RoCEv2 senders put 0."""
    if pad is None:
        pad = pad_bytes(len(payload))
    v6 = ":" in src.ip
    given = icrc
    bth = BTH(opcode=opcode, solicited=int(se), migreq=int(migreq), padcount=pad, pkey=pkey,
              fecn=int(fecn), becn=int(becn), dqpn=dst.qpn if dqpn is None else dqpn,
              ackreq=int(ackreq), psn=psn & 0xFFFFFF, icrc=0 if v6 else icrc)
    # IPv6: `tos` is the traffic class and `ttl` the hop limit (ip_id and ip_flags have none).
    ip = (IPv6(src=src.ip, dst=dst.ip, tc=tos, hlim=ttl) if v6
          else IP(src=src.ip, dst=dst.ip, tos=tos, ttl=ttl, id=ip_id, flags=ip_flags))
    frame = Ether(src=src.mac, dst=dst.mac) / ip / UDP(sport=sport, dport=ROCE_PORT,
                                                       chksum=udp_checksum)
    if opcode == ACKNOWLEDGE and len(ext) == 4 and not payload and not pad:
        syndrome, msn = ext[0], int.from_bytes(ext[1:], "big")
        out = bytes(frame / bth / AETH(syndrome=syndrome, msn=msn))
    elif opcode == CNP and not ext and not payload:
        out = bytes(frame / bth / CNPPadding())
    else:
        out = bytes(frame / bth / Raw(ext + payload + b"\x00" * pad))
    if v6:
        value = compute_icrc(out[14:]) if given is None else given
        out = out[:-4] + struct.pack("<I", value & 0xFFFFFFFF)
    return out


def ack(src, dst, psn, msn, syndrome=ACK_UNLIMITED, **kw):
    """ACKNOWLEDGE (0x11 + AETH): an ACK (0x1F), RNR NAK (0x20 | timer) or NAK (0x60..0x63)."""
    return roce(src, dst, ACKNOWLEDGE, psn, aeth(syndrome, msn), **kw)


def cnp(src, dst, **kw):
    """CNP to dst.qpn (the QP to slow down): BECN, PSN 0, 16 zero bytes."""
    return roce(src, dst, CNP, 0, b"", b"", becn=True, **kw)


def write(src, dst, psn, opcode, payload=b"", va=0, rkey=0, dma_len=None, imm=0, **kw):
    """One RC WRITE packet: RETH on FIRST/ONLY (dma_len defaults to len(payload)), ImmDt on
    LAST_IMM/ONLY_IMM."""
    ext = b""
    if "reth" in ext_headers(opcode):
        ext += reth(va, rkey, len(payload) if dma_len is None else dma_len)
    if "imm" in ext_headers(opcode):
        ext += immdt(imm)
    return roce(src, dst, opcode, psn, ext, payload, **kw)


def write_message(src, dst, first_psn, data, pmtu, va, rkey, imm=None, ackreq_last=True, **kw):
    """A whole RDMA WRITE message segmented by PMTU (rocev2.md §1 length rules): FIRST and
    MIDDLE carry exactly PMTU bytes, LAST/ONLY the rest; with `imm`, the last packet is *_IMM.
    AckReq on the last packet. Returns the frames."""
    count = max(1, -(-len(data) // pmtu))
    frames = []
    for k in range(count):
        first, last = k == 0, k == count - 1
        if first and last:
            opcode = WRITE_ONLY if imm is None else WRITE_ONLY_IMM
        elif first:
            opcode = WRITE_FIRST
        elif last:
            opcode = WRITE_LAST if imm is None else WRITE_LAST_IMM
        else:
            opcode = WRITE_MIDDLE
        frames.append(write(src, dst, first_psn + k, opcode, data[k * pmtu:(k + 1) * pmtu], va=va,
                            rkey=rkey, dma_len=len(data), imm=imm or 0,
                            ackreq=ackreq_last and last, **kw))
    return frames


def send(src, dst, psn, opcode, payload=b"", imm=0, **kw):
    """One RC (or UC, with opcode | UC) SEND packet; ImmDt on *_IMM."""
    ext = immdt(imm) if "imm" in ext_headers(opcode) else b""
    return roce(src, dst, opcode, psn, ext, payload, **kw)


def with_icrc(frame, value):
    """The frame with its last 4 bytes (the ICRC) replaced by `value`, least-significant byte
    first: a bad-ICRC case keeps every other byte."""
    return frame[:-4] + struct.pack("<I", value & 0xFFFFFFFF)


def icrc_of(frame):
    """The ICRC a frame carries (its last 4 bytes, least-significant byte first)."""
    return struct.unpack("<I", frame[-4:])[0]


def fields(frame):
    """Dissects a RoCEv2 Ethernet/IPv4 frame into the keyword arguments roce() takes (plus the
    endpoints), so that roce(**fields(f)) rebuilds it."""
    eth = Ether(frame)
    ip, udp = eth[IP], eth[UDP]
    end = 14 + ip.len  # Ethernet padding after the IP packet is not the frame's RoCE content
    body = bytes(frame[14 + ip.ihl * 4 + 8:end])
    b = BTH(body[:12] + b"\x00\x00\x00\x00")
    opcode = b.opcode
    ext_len = sum(EXT_BYTES[h] for h in ext_headers(opcode))
    ext = body[12:12 + ext_len]
    data = body[12 + ext_len:len(body) - 4]
    payload = data[:len(data) - b.padcount] if b.padcount else data
    return dict(
        src=Endpoint(eth.src, ip.src, None), dst=Endpoint(eth.dst, ip.dst, b.dqpn), opcode=opcode,
        psn=b.psn, ext=b"" if opcode == CNP else ext, payload=payload, ackreq=bool(b.ackreq),
        se=bool(b.solicited), migreq=bool(b.migreq), pad=b.padcount, pkey=b.pkey, fecn=bool(b.fecn),
        becn=bool(b.becn), sport=udp.sport, tos=ip.tos, ttl=ip.ttl, ip_id=ip.id, ip_flags=ip.flags,
        udp_checksum=udp.chksum)


def _selftest(rxe_pcap):
    # (a) CNP captured on a ConnectX-4 Lx: DSCP 48 / ECN 10, sport 0, BECN, QP 0x118.
    a_src = Endpoint("7c:fe:90:64:3b:32", "10.0.17.1", None)
    a_dst = Endpoint("e4:1d:2d:ab:2b:c2", "10.0.18.1", 0x118)
    want = bytes.fromhex("e41d2dab2bc27cfe90643b320800" "45c2003c718c400040119161" "0a0011010a001201"
                         "000012b700280000" "8100ffff4000011800000000" + "00" * 16 + "82fd002a")
    got = cnp(a_src, a_dst, sport=0, tos=0xC2, ip_id=0x718C)
    assert got == want, f"(a)\n{got.hex()}\n{want.hex()}"
    assert icrc_of(got) == 0x2A00FD82

    # (b) scapy's UC SEND ONLY: M=1, PadCnt 2, PSN 0xCF1710 (UDP checksum computed, not 0).
    b_end = Endpoint("02:00:00:00:00:01", "192.168.0.7", 0xD3)
    want = bytes.fromhex("45010040047840004011b4d5c0a80007c0a80007c00012b7002caca2"
                         "2460ffff000000d300cf1710" "4630818be28935d90e9a95505401be885e500000" "78f353f3")
    got = send(b_end, b_end, 0xCF1710, UC | SEND_ONLY, bytes.fromhex("4630818be28935d90e9a95505401be885e50"),
               migreq=True, tos=1, ip_id=0x0478, udp_checksum=None)
    assert got[14:] == want, f"(b)\n{got[14:].hex()}\n{want.hex()}"

    # (c) ACK and NAK-sequence (MSN 5, PSN 0x100, QP 0x11, 10.0.0.2 -> .1), WRITE ONLY.
    one = Endpoint("02:00:00:00:00:01", "10.0.0.1", 0x11)
    two = Endpoint("02:00:00:00:00:02", "10.0.0.2", 0x22)
    head = "4502003000004000401126b90a0000020a000001c00112b7001c0000" "1100ffff0000001100000100"
    got = ack(two, one, 0x100, 5, sport=0xC001)
    assert got[14:].hex() == head + "1f000005" "c02cf9f7", got[14:].hex()
    got = ack(two, one, 0x100, 5, NAK_PSN_SEQUENCE, sport=0xC001)
    assert got[14:].hex() == head + "60000005" "0a9ca5c4", got[14:].hex()
    floats = struct.pack(">4f", 1.0, 2.0, 3.0, 4.0)
    got = write(one, two, 0x200, WRITE_ONLY, floats, va=0x7F0000001000, rkey=0x1234, ackreq=True,
                sport=0xC002)
    want = ("4502004c000040004011269d0a0000010a000002c00212b700380000" "0a00ffff0000002280000200"
            "00007f000000100000001234000000103f800000400000004040000040800000" "c9b14f1c")
    assert got[14:].hex() == want, got[14:].hex()
    assert write_message(one, two, 0x200, floats, 256, 0x7F0000001000, 0x1234, sport=0xC002) == [got]

    # A message over PMTU: FIRST (RETH) / MIDDLE / LAST_IMM, PSNs across the 2^24 wrap.
    frames = write_message(one, two, 0xFFFFFF, bytes(range(256)) * 2 + b"xyz", 256, 0x1000, 7, imm=9)
    assert [fields(f)["opcode"] for f in frames] == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST_IMM]
    assert [fields(f)["psn"] for f in frames] == [0xFFFFFF, 0, 1]
    assert [fields(f)["ackreq"] for f in frames] == [False, False, True]
    assert fields(frames[2])["pad"] == 1 and fields(frames[2])["payload"] == b"xyz"
    assert with_icrc(frames[0], 0) != frames[0] and icrc_of(with_icrc(frames[0], 0x1234)) == 0x1234

    # This file's ICRC (what IPv6 frames get) equals scapy's on IPv4 frames; over IPv6 the
    # variant fields (traffic class, flow label, hop limit) do not change it, anything else does.
    for f in (got, frames[0], frames[2], ack(two, one, 0x100, 5, sport=0xC001)):
        assert compute_icrc(f[14:]) == icrc_of(f), f.hex()
    s6 = Endpoint("02:00:00:00:00:01", "2001:db8::1", 0x11)
    d6 = Endpoint("02:00:00:00:00:02", "2001:db8::2", 0x22)
    f6 = write(s6, d6, 0x200, WRITE_ONLY, floats, va=0x1000, rkey=7, sport=0xC002)
    assert f6[12:14] == b"\x86\xdd" and compute_icrc(f6[14:]) == icrc_of(f6)
    marked = bytearray(f6)
    marked[14:18] = bytes.fromhex("6e312345")  # traffic class 0xE3, a flow label
    marked[14 + 7] = 1
    assert compute_icrc(bytes(marked[14:])) == icrc_of(f6)
    assert compute_icrc(f6[14:].replace(bytes.fromhex("20010db8000000000000000000000002"),
                                bytes.fromhex("20010db8000000000000000000000003"))) != icrc_of(f6)

    # Every frame Linux rdma_rxe sent, rebuilt from its dissected fields.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from pcapio import read_pcap  # noqa: E402
    captured = read_pcap(rxe_pcap)
    assert len(captured) == 48, len(captured)
    for i, frame in enumerate(captured):
        rebuilt = roce(**fields(frame))
        assert rebuilt == frame, f"rxe frame {i}\n{rebuilt.hex()}\n{frame.hex()}"
    return len(captured)


if __name__ == "__main__":
    here = os.path.dirname(os.path.abspath(__file__))
    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "data", "rxe-rocev2-sample.pcap")
    n = _selftest(path)
    print(f"rocepkt: self-test passed (vectors (a)-(c), {n} rxe frames re-encoded identically)")
