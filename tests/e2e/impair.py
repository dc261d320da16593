# SPDX-License-Identifier: Apache-2.0
"""impair.py: a link impairer for the e2e tests, in place of `tc netem` (which this project's CI
kernel does not have).

It bridges two interfaces at L2 with AF_PACKET raw sockets: every frame received on A is sent
out of B ("a2b") and every frame received on B out of A ("b2a"), unchanged, with independent
impairments per direction, decided by a seeded RNG:

    loss=P        drop the frame with probability P
    dup=P         send the frame twice with probability P
    reorder=P     hold the frame and send it right after the next frame of that direction (which
                  thus overtakes it), or after reorder_ms if no frame comes first
    reorder_ms=N  how long a held frame waits for a frame to overtake it (default 5)
    delay_ms=N    a fixed delay on every frame (default 0: sent at once)

Both ends see an ordinary link: MACs, addresses and payloads are never touched. Put the two
interfaces in a namespace of their own (veth A to one end, veth B to the other) with offloads
off, so frames are what is on the wire.

    impair.py A B [--a2b SPEC] [--b2a SPEC] [--seed S]     SPEC: loss=0.01,dup=0.01,reorder=0.05

Prints "ready" once both sockets are bound; on SIGUSR1 prints a JSON line of its counters, and
on SIGTERM/SIGINT sends what it still holds, prints them and exits 0. Counters per
direction: rx (frames received), tx (frames sent, duplicates included), dropped, duplicated,
reordered (held frames a later frame overtook), held_timeout (held frames released by their
timer, nobody overtook them), delayed, tx_errors (the kernel refused a send, e.g. ENOBUFS) and
sock_drops (frames the kernel dropped because this socket's buffer was full: losses that were
not decided by the RNG). Standard library only (Debian's /usr/bin/python3).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import time

ETH_P_ALL = 0x0003
SOL_PACKET = 263
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
BATCH = 64                       # frames read from one socket before looking at the other


class Spec:
    def __init__(self, text: str = ""):
        self.loss = self.dup = self.reorder = 0.0
        self.reorder_ms = 5.0
        self.delay_ms = 0.0
        for item in filter(None, (t.strip() for t in text.split(","))):
            k, _, v = item.partition("=")
            if k not in ("loss", "dup", "reorder", "reorder_ms", "delay_ms"):
                raise ValueError(f"unknown impairment {k!r}")
            x = float(v)
            if k in ("loss", "dup", "reorder") and not 0 <= x <= 1:
                raise ValueError(f"{k}={v}: a probability in [0, 1]")
            if x < 0:
                raise ValueError(f"{k}={v}: negative")
            setattr(self, k, x)

    def as_dict(self) -> dict:
        return {"loss": self.loss, "dup": self.dup, "reorder": self.reorder,
                "reorder_ms": self.reorder_ms, "delay_ms": self.delay_ms}


def open_socket(ifname: str) -> socket.socket:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # What we send on an interface must not come back to us as received on it.
    s.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
    for opt, force in ((socket.SO_RCVBUF, 33), (socket.SO_SNDBUF, 32)):  # SO_*BUFFORCE
        try:
            s.setsockopt(socket.SOL_SOCKET, force, 8 << 20)
        except OSError:
            s.setsockopt(socket.SOL_SOCKET, opt, 8 << 20)
    s.bind((ifname, ETH_P_ALL))
    s.setblocking(False)
    return s


class Direction:
    """One direction of the link: frames read from `src` go out of `dst`."""

    def __init__(self, name: str, src: socket.socket, dst: socket.socket, spec: Spec, seed: str):
        self.name, self.src, self.dst, self.spec = name, src, dst, spec
        self.rng = random.Random(seed)
        self.held: bytes | None = None
        self.held_until = 0.0
        self.held_copies = 1
        self.delayed: collections.deque[tuple[float, bytes]] = collections.deque()
        self.c = dict.fromkeys(("rx", "tx", "dropped", "duplicated", "reordered",
                                "held_timeout", "delayed", "tx_errors"), 0)
        self.sock_drops = 0

    # -- emission --------------------------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        try:
            self.dst.send(frame)
            self.c["tx"] += 1
        except (BlockingIOError, OSError):
            self.c["tx_errors"] += 1

    def _emit(self, frame: bytes, now: float) -> None:
        if self.spec.delay_ms > 0:
            # A fixed delay keeps the order: the queue is FIFO.
            self.delayed.append((now + self.spec.delay_ms / 1000, frame))
            self.c["delayed"] += 1
        else:
            self._send(frame)

    # -- input -----------------------------------------------------------------------------

    def frame(self, frame: bytes, now: float) -> None:
        c, rng, spec = self.c, self.rng, self.spec
        c["rx"] += 1
        # One draw per decision, always in the same order: the sequence of decisions depends
        # only on the seed and the number of frames, never on timing.
        lose = rng.random() < spec.loss
        dup = rng.random() < spec.dup
        hold = rng.random() < spec.reorder
        if lose:
            c["dropped"] += 1
            return
        copies = 2 if dup else 1
        if dup:
            c["duplicated"] += 1
        if hold and self.held is None:
            self.held, self.held_until, self.held_copies = frame, now + spec.reorder_ms / 1000, \
                copies
            return
        for _ in range(copies):
            self._emit(frame, now)
        if self.held is not None:  # this frame overtook the held one
            held, self.held = self.held, None
            c["reordered"] += 1
            for _ in range(self.held_copies):
                self._emit(held, now)

    def timers(self, now: float) -> float | None:
        """Releases what is due; returns when the next thing is due (None: nothing pending)."""
        if self.held is not None and now >= self.held_until:
            held, self.held = self.held, None
            self.c["held_timeout"] += 1
            for _ in range(self.held_copies):
                self._emit(held, now)
        while self.delayed and self.delayed[0][0] <= now:
            self._send(self.delayed.popleft()[1])
        due = [t for t in ((self.held_until if self.held is not None else None),
                           (self.delayed[0][0] if self.delayed else None)) if t is not None]
        return min(due) if due else None

    def flush(self) -> None:
        if self.held is not None:
            for _ in range(self.held_copies):
                self._send(self.held)
            self.held = None
        while self.delayed:
            self._send(self.delayed.popleft()[1])

    def counters(self) -> dict:
        try:
            # struct tpacket_stats {unsigned tp_packets, tp_drops}; reading resets it.
            _, drops = struct.unpack("II", self.src.getsockopt(SOL_PACKET, PACKET_STATISTICS, 8))
            self.sock_drops += drops
        except OSError:
            pass
        return {**self.c, "sock_drops": self.sock_drops, "spec": self.spec.as_dict()}


def _die_with_parent() -> None:
    """SIGTERM when the process that started us exits (a test killed with SIGKILL), so no
    impairer outlives its test."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="interface A")
    ap.add_argument("b", help="interface B")
    ap.add_argument("--a2b", default="", help="impairments of frames from A to B")
    ap.add_argument("--b2a", default="", help="impairments of frames from B to A")
    ap.add_argument("--seed", default="1")
    ap.add_argument("--name", default="", help="a label for the counters")
    args = ap.parse_args()
    try:
        spec_ab, spec_ba = Spec(args.a2b), Spec(args.b2a)
    except ValueError as e:
        ap.error(str(e))

    _die_with_parent()
    sa, sb = open_socket(args.a), open_socket(args.b)
    dirs = {sa.fileno(): Direction("a2b", sa, sb, spec_ab, f"{args.seed}/{args.name}/a2b"),
            sb.fileno(): Direction("b2a", sb, sa, spec_ba, f"{args.seed}/{args.name}/b2a")}
    start = time.monotonic()

    def report() -> str:
        d = {"name": args.name, "a": args.a, "b": args.b,
             "seconds": round(time.monotonic() - start, 3)}
        for x in dirs.values():
            d[x.name] = x.counters()
        return json.dumps(d)

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    want_report = []
    signal.signal(signal.SIGUSR1, lambda *_: want_report.append(1))

    poller = select.poll()
    for fd in dirs:
        poller.register(fd, select.POLLIN)
    # Signals wake the poll at once (the handlers only set flags).
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    poller.register(wake_r, select.POLLIN)
    print("ready", flush=True)
    buf = bytearray(65536)
    view = memoryview(buf)
    next_due: float | None = None
    while not stop:
        if want_report:
            want_report.clear()
            print(report(), flush=True)
        now = time.monotonic()
        timeout = 200 if next_due is None else max(0, (next_due - now) * 1000)
        try:
            events = poller.poll(timeout)
        except InterruptedError:
            events = []
        now = time.monotonic()
        for fd, _ in events:
            if fd == wake_r:
                try:
                    os.read(wake_r, 512)
                except BlockingIOError:
                    pass
                continue
            d = dirs[fd]
            for _ in range(BATCH):
                try:
                    n = d.src.recv_into(buf)
                except BlockingIOError:
                    break
                except OSError as e:  # the interface went away (its namespace was deleted)
                    print(report(), flush=True)
                    print(f"impair.py: {d.name}: {e}", file=sys.stderr)
                    return 1
                d.frame(bytes(view[:n]), now)
        next_due = None
        for d in dirs.values():
            t = d.timers(now)
            if t is not None and (next_due is None or t < next_due):
                next_due = t
    for d in dirs.values():
        d.flush()
    print(report(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
