# SPDX-License-Identifier: Apache-2.0
"""A counted UDP stream for loss measurements; runs inside a host's namespace.

    udpflow.py recv --bind IP --port P --count N [--idle S] [--timeout S]
        prints "ready" once bound, then one JSON line: received, unique, duplicates, missing,
        reordered, first_missing, first/last arrival times.
    udpflow.py send --dst IP --port P --count N --rate PPS [--size B]
        sends datagrams 0..N-1 (8-byte big-endian sequence number, padded to B bytes), paced
        at PPS, then prints one JSON line: sent, send_retries, start, end.

Every datagram the sender reports as sent was handed to the kernel; a sendto() that fails
(ENOBUFS) is retried, so `sent` is exact.
"""

import argparse
import errno
import json
import socket
import struct
import sys
import time


def recv(a) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # As root, FORCE passes net.core.rmem_max: a receiver stall must not cost datagrams.
    try:
        s.setsockopt(socket.SOL_SOCKET, getattr(socket, "SO_RCVBUFFORCE", 33), 8 << 20)
    except OSError:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.bind((a.bind, a.port))
    print("ready", flush=True)
    seen = bytearray(a.count)
    received = unique = duplicates = reordered = 0
    highest = -1
    first = last = None
    last_mono = 0.0
    deadline = time.monotonic() + a.timeout
    while unique < a.count:
        now = time.monotonic()
        if now > deadline:
            break
        wait = deadline - now
        if last is not None:
            wait = min(wait, a.idle - (now - last_mono))
            if wait <= 0:
                break
        s.settimeout(max(wait, 0.001))
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        last_mono = time.monotonic()
        last = time.time()
        if first is None:
            first = last
        if len(data) < 8:
            continue
        (seq,) = struct.unpack_from("!Q", data)
        if seq >= a.count:
            continue
        received += 1
        if seen[seq]:
            duplicates += 1
        else:
            unique += 1
        seen[seq] = 1
        if seq < highest:
            reordered += 1
        highest = max(highest, seq)
    missing = [i for i in range(a.count) if not seen[i]]
    print(json.dumps({"received": received, "unique": a.count - len(missing),
                      "duplicates": duplicates, "missing": len(missing),
                      "reordered": reordered, "first_missing": missing[:20],
                      "first": first, "last": last}), flush=True)


def send(a) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect((a.dst, a.port))
    pad = b"\0" * max(0, a.size - 8)
    interval = 1.0 / a.rate
    retries = 0
    start = time.time()
    t0 = time.monotonic()
    for seq in range(a.count):
        due = t0 + seq * interval
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        payload = struct.pack("!Q", seq) + pad
        while True:
            try:
                s.send(payload)
                break
            except OSError as e:
                if e.errno not in (errno.ENOBUFS, errno.EAGAIN):
                    raise
                retries += 1
                time.sleep(0.001)
    print(json.dumps({"sent": a.count, "send_retries": retries, "start": start,
                      "end": time.time()}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    r = sub.add_parser("recv")
    r.add_argument("--bind", required=True)
    r.add_argument("--port", type=int, required=True)
    r.add_argument("--count", type=int, required=True)
    r.add_argument("--idle", type=float, default=2.0, help="stop this long after the last packet")
    r.add_argument("--timeout", type=float, default=120.0)
    sd = sub.add_parser("send")
    sd.add_argument("--dst", required=True)
    sd.add_argument("--port", type=int, required=True)
    sd.add_argument("--count", type=int, required=True)
    sd.add_argument("--rate", type=float, required=True)
    sd.add_argument("--size", type=int, default=64)
    a = p.parse_args()
    (recv if a.mode == "recv" else send)(a)


if __name__ == "__main__":
    sys.exit(main())
