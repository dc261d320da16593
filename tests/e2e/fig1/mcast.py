# SPDX-License-Identifier: Apache-2.0
"""IPv4 multicast for the Figure 1 testbed (run inside a host's namespace).

    mcast.py recv --group 239.1.1.1 --port 9500 --iface-addr 10.1.3.2
        joins the group on the interface with that address, prints "ready", counts datagrams
        to the group until its stdin closes (or --timeout), then prints
        {"received": N, "distinct": D, "sources": [...]} as one JSON line.
    mcast.py send --group 239.1.1.1 --port 9500 --iface-addr 10.1.1.2 --count 200 --rate 500
        sends `count` numbered datagrams to the group (multicast TTL 8) at `rate` per second,
        then prints {"sent": N}.
"""

import argparse
import json
import select
import socket
import struct
import sys
import time


def recv(a: argparse.Namespace) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", a.port))
    mreq = struct.pack("4s4s", socket.inet_aton(a.group), socket.inet_aton(a.iface_addr))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
    s.setblocking(False)
    print("ready", flush=True)
    received, seqs, sources = 0, set(), set()
    deadline = time.monotonic() + a.timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([s, sys.stdin], [], [], 0.5)
            if sys.stdin in r and not sys.stdin.readline():
                break  # stdin closed (the test is done sending; by hand: Ctrl-D or Ctrl-C)
            if s in r:
                while True:
                    try:
                        data, src = s.recvfrom(2048)
                    except BlockingIOError:
                        break
                    received += 1
                    sources.add(src[0])
                    if len(data) >= 4:
                        seqs.add(struct.unpack("!I", data[:4])[0])
    except KeyboardInterrupt:
        pass
    print(json.dumps({"received": received, "distinct": len(seqs), "sources": sorted(sources)}),
          flush=True)


def send(a: argparse.Namespace) -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 8)
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(a.iface_addr))
    s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 0)
    s.bind((a.iface_addr, 0))
    t0 = time.monotonic()
    for i in range(a.count):
        due = t0 + i / a.rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)  # pacing, not synchronisation
        s.sendto(struct.pack("!I", i) + b"x" * 60, (a.group, a.port))
    print(json.dumps({"sent": a.count}), flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("recv", "send"):
        c = sub.add_parser(name)
        c.add_argument("--group", required=True)
        c.add_argument("--port", type=int, required=True)
        c.add_argument("--iface-addr", required=True)
        if name == "recv":
            c.add_argument("--timeout", type=float, default=60.0)
        else:
            c.add_argument("--count", type=int, required=True)
            c.add_argument("--rate", type=float, default=500.0)
    a = p.parse_args()
    (recv if a.cmd == "recv" else send)(a)


if __name__ == "__main__":
    main()
