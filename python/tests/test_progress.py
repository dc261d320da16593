# SPDX-License-Identifier: Apache-2.0
"""The progress bar of long AllReduces (src/worker/progress.h): ina-worker and inaswitch.Client
draw it on a terminal, run here under a pseudo-terminal (python's pty), and never on a pipe or
with the flag that turns it off (--no-progress, Client(progress=False)). Against ina-ps on
loopback; no root needed.

    PYTHONPATH=build/python INASWITCH_WORKER_DIR=build/src/worker python3 -m pytest test_progress.py
"""

import contextlib
import os
import pty
import re
import socket
import subprocess
import sys

import pytest

WORKER_DIR = os.environ.get("INASWITCH_WORKER_DIR", "build/src/worker")
ELEMENTS = 1 << 20  # 4 MiB of int32: above the bar's 1 MiB threshold
# One frame of the bar: \r, the label, [###---], a percentage.
FRAME = re.compile(r"\r(?P<label>[^\r\n\[]+) \[(?P<bar>[#-]{30})\] +(?P<pct>\d+)%")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def host_root(job: int):
    """ina-ps as root of a one-worker job (BFR-id 1 on 127.0.0.2) on a free port; yields the
    port."""
    port = free_udp_port()
    ps = subprocess.Popen(
        [os.path.join(WORKER_DIR, "ina-ps"), "--job", str(job), "--abm", "1", "--type", "int32",
         "--op", "sum", "--bind", "127.0.0.1", "--port", str(port), "--idle-exit-ms", "30000",
         "--workers", "1=127.0.0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ps.stderr.readline()  # ina-ps says it listens before it polls
        assert "listening" in line, f"ina-ps did not start: {line!r}"
        yield port
    finally:
        ps.terminate()
        ps.communicate(timeout=10)


def run(cmd: list, on_tty: bool, env: dict | None = None) -> tuple[int, str]:
    """Runs cmd with stdout and stderr on a new pseudo-terminal (on_tty) or on a pipe; returns
    its exit status and everything it wrote."""
    if not on_tty:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                           env=env)
        return r.returncode, r.stdout.decode(errors="replace")
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal has closed it
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        p.wait(60)
    return p.returncode, out.decode(errors="replace")


def check_bar(out: str, label: str) -> None:
    frames = list(FRAME.finditer(out))
    assert frames, f"no progress bar in {out!r:.400}"
    assert all(f["label"] == label for f in frames), [f["label"] for f in frames]
    last = frames[-1]
    assert last["pct"] == "100" and last["bar"] == "#" * 30, f"bar ends at {last.group(0)!r}"
    # The finished bar ends its line (the terminal turns \n into \r\n).
    assert re.match(r" [\d.]+/[\d.]+ MiB [\d.]+ Gbit/s\x1b\[K\r?\n", out[last.end():]), \
        f"the finished bar ends its line: {out[last.start():last.start() + 200]!r}"
    pcts = [int(f["pct"]) for f in frames]
    assert pcts == sorted(pcts), f"progress never goes back: {pcts}"


def worker_cmd(port: int, job: int, *extra: str) -> list:
    return [os.path.join(WORKER_DIR, "ina-worker"), "--job", str(job), "--bfr-id", "1", "--abm",
            "1", "--root", "127.0.0.1", "--port", str(port), "--bind", "127.0.0.2", "--type",
            "int32", "--elements", str(ELEMENTS), "--timeout-ms", "30000", "--seed", "3", *extra]


@pytest.mark.parametrize("mode", ["tty", "pipe", "no-progress"])
def test_ina_worker(mode: str) -> None:
    extra = ("--no-progress",) if mode == "no-progress" else ()
    with host_root(job=3) as port:
        rc, out = run(worker_cmd(port, 3, *extra), on_tty=mode != "pipe")
    assert rc == 0 and '"ok": true' in out, out[-400:]
    if mode == "tty":
        check_bar(out, "ina-worker job 3 bfr 1")
    else:
        assert "%" not in out and "\r" not in out.replace("\r\n", "\n"), \
            f"no bar when {mode}: {out!r:.400}"


CLIENT = """
import sys, numpy as np, inaswitch
port, progress = int(sys.argv[1]), sys.argv[2] == "on"
c = inaswitch.Client(4, 1, "1", "127.0.0.1", bind="127.0.0.2", port=port, timeout_ms=30000,
                     progress=progress)
x = np.arange({n}, dtype=np.int32)
c.allreduce_(x)
assert (x == np.arange({n}, dtype=np.int32)).all()
print("reduced")
""".format(n=ELEMENTS)


@pytest.mark.parametrize("mode", ["tty", "pipe", "progress=False"])
def test_python_client(mode: str) -> None:
    with host_root(job=4) as port:
        rc, out = run([sys.executable, "-c", CLIENT, str(port),
                       "off" if mode == "progress=False" else "on"],
                      on_tty=mode != "pipe", env=dict(os.environ))
    assert rc == 0 and "reduced" in out, out[-600:]
    if mode == "tty":
        check_bar(out, "inaswitch job 4 bfr 1")
    else:
        assert "%" not in out, f"no bar when {mode}: {out!r:.400}"
