# SPDX-License-Identifier: Apache-2.0
"""inaswitch.Client against ina-ps (a host INA root) on loopback, no root privileges: four
workers as threads of this process (127.0.0.2-5; they can only all make progress because
allreduce_ releases the GIL), every buffer kind (numpy, a slice of a larger array, torch incl.
bfloat16, __array_interface__) and element type, results checked exactly (the data are small
multiples of 1/8, so every summation order gives the same float), in place at the same
address; then every error class with the reason it names.

    PYTHONPATH=build/python INASWITCH_WORKER_DIR=build/src/worker python3 -m pytest test_client.py
"""

import contextlib
import os
import socket
import subprocess
import threading

import numpy as np
import pytest

import inaswitch

N = 4
WORKER_DIR = os.environ.get("INASWITCH_WORKER_DIR", "build/src/worker")


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = free_udp_port()


@contextlib.contextmanager
def host_root(etype: str, op: str = "sum", job: int = 1, chunk: int = 256):
    """ina-ps as the job's root on 127.0.0.1:PORT; yields, then checks it saw no stray data."""
    ps = subprocess.Popen(
        [os.path.join(WORKER_DIR, "ina-ps"), "--job", str(job), "--abm", f"1-{N}", "--type",
         etype, "--op", op, "--chunk", str(chunk), "--bind", "127.0.0.1", "--port", str(PORT),
         "--idle-exit-ms", "30000", "--workers",
         ",".join(f"{i}=127.0.0.{i + 1}" for i in range(1, N + 1))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = ps.stderr.readline()  # ina-ps says it listens before it polls
        assert "listening" in line, f"ina-ps did not start: {line!r}"
        yield ps
    finally:
        ps.terminate()
        ps.communicate(timeout=10)


def clients(job: int = 1, **kw) -> list:
    return [inaswitch.Client(job, i, f"1-{N}", "127.0.0.1", bind=f"127.0.0.{i + 1}", port=PORT,
                             timeout_ms=kw.pop("timeout_ms", 20000), **kw)
            for i in range(1, N + 1)]


def run_workers(cs: list, tensors: list, op: str = "sum") -> list:
    """allreduce_ on every client at once (one thread each); returns their stats."""
    out: list = [None] * len(cs)
    errors: list = []

    def work(i):
        try:
            out[i] = cs[i].allreduce_(tensors[i], op)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(cs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a worker thread hung"
    if errors:
        raise errors[0]
    return out


def data(i: int, n: int, dtype) -> np.ndarray:
    """Worker i's tensor: multiples of 1/8 in [-8, 8) (integers: any value), so float sums are
    exact whatever the order."""
    rng = np.random.default_rng(1000 + i)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return (rng.integers(-64, 64, n) / 8).astype(dtype)


def close_all(cs):
    for c in cs:
        c.close()


@pytest.mark.parametrize("dtype,etype", [(np.float32, "fp32"), (np.int32, "int32"),
                                         (np.float16, "fp16"), (np.float64, "fp64"),
                                         (np.int64, "int64")])
def test_numpy_in_place(dtype, etype):
    n = 3000  # 12 chunks, the last one short
    inputs = [data(i, n, dtype) for i in range(1, N + 1)]
    with np.errstate(over="ignore"):
        expect = inputs[0].copy()
        for x in inputs[1:]:
            expect += x  # integers wrap, as the switch's sum does
    # Worker 1 reduces a slice of a larger array: the result must land in that memory and
    # nowhere else (no copy, no stray writes).
    big = np.full(n + 20, 7, dtype=dtype)
    big[10:10 + n] = inputs[0]
    tensors = [big[10:10 + n]] + [x.copy() for x in inputs[1:]]
    cs = clients()
    try:
        with host_root(etype):
            stats = run_workers(cs, tensors)
    finally:
        close_all(cs)
    for t in tensors:
        np.testing.assert_array_equal(t, expect)
    assert (big[:10] == 7).all() and (big[10 + n:] == 7).all()
    assert all(s["chunks"] == 12 and s["results"] == 12 for s in stats), stats


def test_torch_tensors_zero_copy():
    torch = pytest.importorskip("torch")
    n = 1000
    for dtype, etype in ((torch.float32, "fp32"), (torch.bfloat16, "bf16"),
                         (torch.float16, "fp16"), (torch.int32, "int32")):
        src = [torch.from_numpy(data(i, n, np.int32 if dtype == torch.int32 else np.float32))
               for i in range(1, N + 1)]
        tensors = [s.to(dtype) for s in src]
        expect = sum(s.to(torch.float64) for s in src)
        ptrs = [t.data_ptr() for t in tensors]
        cs = clients()
        try:
            with host_root(etype):
                run_workers(cs, tensors)
        finally:
            close_all(cs)
        assert [t.data_ptr() for t in tensors] == ptrs
        for t in tensors:
            if dtype == torch.int32:
                assert torch.equal(t, expect.to(torch.int64).to(torch.int32))
            else:
                assert torch.equal(t.to(torch.float64), expect), f"{dtype}"


class Interface:
    """Memory exposed only through __array_interface__ (not the buffer protocol)."""

    def __init__(self, a: np.ndarray):
        self._a = a
        self.__array_interface__ = a.__array_interface__


def test_array_interface_and_op_change_continue_sequence():
    n = 512  # 2 chunks
    inputs = [data(i, n, np.int32) for i in range(1, N + 1)]
    arrays = [x.copy() for x in inputs]
    cs = clients()
    try:
        with host_root("int32", "max"):
            run_workers(cs, [Interface(a) for a in arrays], "max")
        np.testing.assert_array_equal(arrays[0], np.maximum.reduce(inputs))
        assert all(c.next_seq == 2 for c in cs)
        # Another op: each client replaces its socket and continues at seq 2.
        with host_root("int32", "min"):
            run_workers(cs, [x.copy() for x in inputs], "min")
        assert all(c.next_seq == 4 for c in cs)
    finally:
        close_all(cs)


def test_bad_buffers_and_options():
    c = inaswitch.Client(1, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT)
    try:
        with pytest.raises(inaswitch.InvalidError, match="contiguous"):
            c.allreduce_(np.zeros(64, np.float32)[::2])
        ro = np.zeros(8, np.float32)
        ro.flags.writeable = False
        with pytest.raises(inaswitch.InvalidError, match="in place"):
            c.allreduce_(ro)
        with pytest.raises(inaswitch.InvalidError, match="format"):
            c.allreduce_(np.zeros(8, np.uint8))
        with pytest.raises(inaswitch.InvalidError, match="op"):
            c.allreduce_(np.zeros(8, np.float32), "mean")
    finally:
        c.close()
    with pytest.raises(inaswitch.InvalidError, match="closed"):
        c.allreduce_(np.zeros(8, np.float32))
    with pytest.raises(inaswitch.InvalidError, match="A-BM"):
        inaswitch.Client(1, 5, "1-4", "127.0.0.1", bind="127.0.0.2", port=PORT)
    with pytest.raises(inaswitch.InvalidError, match="abm"):
        inaswitch.Client(1, 1, "x", "127.0.0.1", bind="127.0.0.2", port=PORT)
    with pytest.raises(inaswitch.InvalidError, match="root"):
        inaswitch.Client(1, 1, "1-4", "10.0.0", bind="127.0.0.2", port=PORT)


def test_nothing_at_the_root_is_job_unknown():
    # Nobody listens at 127.0.0.1:PORT: the kernel answers with ICMP port unreachable.
    with inaswitch.Client(7, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT,
                          timeout_ms=400) as c:
        with pytest.raises(inaswitch.JobUnknownError, match="job 7 .*unreachable") as e:
            c.allreduce_(np.ones(300, np.float32))
        assert e.value.reason == "root_unreachable"


def test_root_without_the_job_times_out():
    # ina-ps aggregates job 1; job 2's data reach it and are ignored: no result, no ICMP.
    with host_root("fp32", job=1), \
            inaswitch.Client(2, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT,
                             timeout_ms=400) as c:
        with pytest.raises(inaswitch.TimeoutError, match="0 of 2 results.*no result at all") as e:
            c.allreduce_(np.ones(300, np.float32))
        assert isinstance(e.value, TimeoutError) and e.value.reason == "timeout"


def test_steered_source_ports():
    # Four clients each sending chunk seq from 2048 | (seq & 3) (their own 127.0.0.x, so the
    # ranges do not clash): ina-ps aggregates whatever the source port and answers on PORT.
    n = 3000
    inputs = [data(i, n, np.float32) for i in range(1, N + 1)]
    expect = sum(inputs[1:], inputs[0].copy())
    tensors = [x.copy() for x in inputs]
    # PORT is ephemeral (32768 and up): steer from below it, so the ranges never meet.
    cs = clients(steer_ports=4, steer_base_port=2048)
    try:
        with host_root("fp32"):
            stats = run_workers(cs, tensors)
    finally:
        close_all(cs)
    for t in tensors:
        np.testing.assert_array_equal(t, expect)
    assert all(s["results"] == 12 for s in stats), stats


def test_steered_nothing_at_the_root_is_job_unknown():
    # The ICMP errors come back on the steered sockets, not the INA port's.
    with inaswitch.Client(7, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT,
                          timeout_ms=400, steer_ports=8, steer_base_port=2048) as c:
        with pytest.raises(inaswitch.JobUnknownError, match="job 7 .*unreachable"):
            c.allreduce_(np.ones(3000, np.float32))


def test_bad_steering_options_name_the_option():
    with pytest.raises(inaswitch.InvalidError, match="steer_ports .* power of two .* got 3"):
        inaswitch.Client(1, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT,
                         steer_ports=3)
    with pytest.raises(inaswitch.InvalidError, match="steer_base_port .* multiple of"):
        inaswitch.Client(1, 1, f"1-{N}", "127.0.0.1", bind="127.0.0.2", port=PORT,
                         steer_ports=4, steer_base_port=40961)
