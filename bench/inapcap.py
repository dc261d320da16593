#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Traffic profiles as pcap files, standard library only (no scapy): INA v1 contributions of N
workers (docs/protocol.md) and plain IPv4/UDP frames for L3 forwarding.

    bench/inapcap.py ina --workers 8 --payload 1024 --type fp32 --chunks 16 --out ina.pcap
    bench/inapcap.py ina --workers 8 --payload 1024 --chunks 128 --loop --out ina_loop.pcap
    bench/inapcap.py l3 --frames 1000 --size 64 --destinations 200 --out l3.pcap

INA frames: worker w (BFR-id w, 1..N) is 10.0.1.<w> with MAC 02:00:00:00:00:<w>, sends from UDP
40000 to <dst>:9470 (default 10.0.2.2, the job's root/parent behind the switch), job 1, op sum,
BSL 64, chunk after chunk: seq 0 from workers 1..N, then seq 1, ... The destination MAC is the
switch port's (default 02:00:00:00:00:01, as in bench/ina_bench.cc and the switch configs of
docs/benchmarking.md). Element values are finite (exponent's top bit clear; elements are little-endian).
"""
import argparse
import struct
import sys

ETYPES = {"int32": (0, 4), "fp32": (1, 4), "fp16": (2, 2), "bf16": (3, 2), "int64": (4, 8),
          "fp64": (5, 8)}
INA_PORT = 9470


def mac(text):
    return bytes(int(x, 16) for x in text.split(":"))


def ip4(text):
    return bytes(int(x) for x in text.split("."))


def checksum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


def ipv4_udp(src_mac, dst_mac, src, dst, sport, dport, payload, ttl=64):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, ttl, 17, 0, ip4(src),
                      ip4(dst))
    hdr = hdr[:10] + struct.pack("!H", checksum(hdr)) + hdr[12:]
    return mac(dst_mac) + mac(src_mac) + b"\x08\x00" + hdr + udp


def bitstring(bfr_ids, bsl_bits=64):
    bs = bytearray(bsl_bits // 8)
    for b in bfr_ids:
        k = b - 1
        bs[len(bs) - 1 - k // 8] |= 1 << (k % 8)
    return bytes(bs)


def ina_header(job, seq, bfr_ids, etype, count, op=0, ptype=1, flags=0):
    code, _ = ETYPES[etype]
    bsl_code = 1  # 64 bits
    return struct.pack("!BBBBBBBBIIHHI", 0x49, 0x4E, (1 << 4) | ptype, flags, (op << 4) | code,
                       bsl_code << 4, 0, 0, job, seq, count, 0, 0) + bitstring(bfr_ids)


def elements(etype, payload, worker):
    _, size = ETYPES[etype]
    data = bytearray((i * 7 + worker) & 0xFF for i in range(payload))
    if etype in ("fp32", "bf16", "fp16", "fp64"):
        for i in range(size - 1, payload, size):  # little-endian: the last byte holds the exponent
            data[i] &= 0x3F
    return bytes(data)


def loop_seqs(chunks, epochs=8):
    """Sequence numbers for a pcap replayed in a loop: `epochs` epochs of `chunks` chunks, epoch
    e's chunk c is e * 2^32/epochs + c. In RFC 1982 serial order every epoch is after the one
    before it, the first after the last too (the gap is 2^29 < 2^31), so a looped replay never
    sends a chunk the switch has already completed and released (stale). Within an epoch the
    chunks are consecutive, so the release proofs free them as they would in a real job; with
    `chunks` >= 4 x the job's window every entry left over from one epoch is evicted as obsolete
    during the next, and none survives to meet its own sequence number a cycle later (which
    would be answered as a re-send instead of aggregated)."""
    step = (1 << 32) // epochs
    return [(e * step + c) & 0xFFFFFFFF for e in range(epochs) for c in range(chunks)]


def ina_frames(workers, payload, etype, chunks, dst="10.0.2.2", dst_mac="02:00:00:00:00:01",
               job=1, first_seq=0, seqs=None):
    _, size = ETYPES[etype]
    count = payload // size
    frames = []
    for seq in seqs if seqs is not None else range(first_seq, first_seq + chunks):
        for w in range(1, workers + 1):
            body = ina_header(job, seq, [w], etype, count) + elements(etype, count * size, w)
            frames.append(ipv4_udp("02:00:00:00:00:%02x" % w, dst_mac, "10.0.1.%d" % w, dst,
                                   40000, INA_PORT, body))
    return frames


def l3_frames(n, size=64, destinations=200, dst_mac="02:00:00:00:00:01"):
    pad = max(0, size - 14 - 20 - 8)
    return [ipv4_udp("02:00:00:00:01:02", dst_mac, "10.0.1.2", "10.0.2.%d" % (2 + i % destinations),
                     1024 + i % 60000, 5000, b"\0" * pad) for i in range(n)]


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i // 1000000, i % 1000000, len(fr), len(fr)))
            f.write(fr)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="kind", required=True)
    a = sub.add_parser("ina", help="N workers' contributions, chunk after chunk")
    a.add_argument("--workers", type=int, default=8)
    a.add_argument("--payload", type=int, default=1024, help="payload bytes per packet")
    a.add_argument("--type", default="fp32", choices=sorted(ETYPES))
    a.add_argument("--chunks", type=int, default=16)
    a.add_argument("--first-seq", type=int, default=0)
    a.add_argument("--loop", action="store_true",
                   help="replayable in a loop: 8 epochs of --chunks chunks 2^29 apart; give "
                        "the job a window <= --chunks / 4")
    a.add_argument("--job", type=int, default=1)
    a.add_argument("--dst", default="10.0.2.2")
    a.add_argument("--dst-mac", default="02:00:00:00:00:01")
    a.add_argument("--out", required=True)
    b = sub.add_parser("l3", help="IPv4/UDP frames to many destinations")
    b.add_argument("--frames", type=int, default=1000)
    b.add_argument("--size", type=int, default=64, help="frame bytes without FCS")
    b.add_argument("--destinations", type=int, default=200)
    b.add_argument("--dst-mac", default="02:00:00:00:00:01")
    b.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.kind == "ina":
        frames = ina_frames(args.workers, args.payload, args.type, args.chunks, args.dst,
                            args.dst_mac, args.job, args.first_seq,
                            loop_seqs(args.chunks) if args.loop else None)
    else:
        frames = l3_frames(args.frames, args.size, args.destinations, args.dst_mac)
    write_pcap(args.out, frames)
    print("wrote %d frames to %s" % (len(frames), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
