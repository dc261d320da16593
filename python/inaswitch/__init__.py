# SPDX-License-Identifier: Apache-2.0
"""AllReduce through an inaswitch (In-Network Aggregation over UDP, docs/protocol.md) from Python.

    import numpy as np, inaswitch
    client = inaswitch.Client(job=1, bfr_id=2, abm="1-4", root="10.0.1.1", bind="10.0.2.2")
    grad = np.ones(1 << 20, dtype=np.float32)
    stats = client.allreduce_(grad, "sum")   # in place: grad now holds the sum over the 4 workers

A worker is one BFR-id of one job; the job (its element type, op, A-BM) is configured on the
switch that is its root. allreduce_ works in place and without copies on contiguous CPU buffers:
numpy arrays and anything else with the buffer protocol, torch tensors (float32, float16,
bfloat16, int32, float64, int64), and objects with __array_interface__. The GIL is released
while the packets fly. `inaswitch.torch.allreduce_hook` is the DistributedDataParallel hook.
"""

from __future__ import annotations

import builtins
import sys
from typing import Any

from . import _native

__all__ = ["Client", "Error", "TimeoutError", "JobUnknownError", "SocketError", "InvalidError",
           "element_type_of"]


class Error(RuntimeError):
    """An AllReduce failed. `reason` is the client's classification: "timeout",
    "root_unreachable", "socket" or "invalid"."""

    reason = "error"


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - inaswitch.TimeoutError
    """Results were still missing when the client's timeout passed. The message says how many
    chunks completed; with none at all it asks whether the job is configured at the root with
    this element type, op and BFR-id (a switch silently routes data of jobs it does not know,
    and refuses data whose type or op differ from its job's)."""

    reason = "timeout"


class JobUnknownError(Error):
    """No result came, and the root's host answered the data with ICMP destination-unreachable:
    no switch on the path aggregates the job (a switch routes data of a job it does not know on,
    untouched) and nothing listens on the INA port at the root address."""

    reason = "root_unreachable"


class SocketError(Error, OSError):
    """A socket call failed (e.g. the INA port is already bound on this address)."""

    reason = "socket"


class InvalidError(Error, ValueError):
    """Bad options (A-BM, BFR-id, window, ...) or a buffer that cannot be sent as it is
    (non-contiguous, read-only, an element type the protocol lacks, not on the CPU)."""

    reason = "invalid"


_ERRORS = {cls.reason: cls for cls in (TimeoutError, JobUnknownError, SocketError, InvalidError)}


def _raise(e: _native.NativeError) -> None:
    kind, message = e.args if len(e.args) == 2 else ("error", str(e))
    raise _ERRORS.get(kind, Error)(message) from None


# torch dtypes by name (no torch import needed to recognise a tensor) -> wire element type.
_TORCH_TYPES = {"torch.float32": "fp32", "torch.float16": "fp16", "torch.bfloat16": "bf16",
                "torch.int32": "int32", "torch.float64": "fp64", "torch.int64": "int64"}
# __array_interface__ typestr (little-endian or native) -> wire element type.
_TYPESTRS = {"f4": "fp32", "f2": "fp16", "i4": "int32", "f8": "fp64", "i8": "int64"}
_OPS = ("sum", "prod", "min", "max")


def _is_torch_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr") and \
        hasattr(x, "is_contiguous")


def element_type_of(x: Any) -> str:
    """The wire element type ("fp32", "bf16", ...) allreduce_ would send `x` as."""
    if _is_torch_tensor(x):
        t = _TORCH_TYPES.get(str(x.dtype))
        if t is None:
            raise InvalidError(f"unsupported tensor dtype {x.dtype}: float32, float16, bfloat16, "
                               "int32, float64 or int64")
        return t
    ai = getattr(x, "__array_interface__", None)
    if ai is not None:
        return _typestr_type(ai["typestr"])
    fmt = memoryview(x).format
    typestr = {"f": "f4", "e": "f2", "d": "f8", "i": "i4"}.get(fmt.lstrip("<=@"))
    if typestr is None:
        raise InvalidError(f"unsupported buffer format {fmt!r}")
    return _TYPESTRS[typestr]


def _typestr_type(typestr: str) -> str:
    if typestr[0] not in "<|=" or typestr[1:] not in _TYPESTRS:
        raise InvalidError(f"unsupported array element type {typestr!r}: little-endian float32, "
                           "float16, int32, float64 or int64")
    return _TYPESTRS[typestr[1:]]


class Client:
    """One worker (BFR-id `bfr_id`) of INA job `job` whose full A-BM is `abm` (BFR-ids, e.g.
    "1-4"), sending its data to `root` (the VAT root's or first switch's IPv4 address) on UDP
    `port`, which it also binds on `bind` for the results. `chunk` elements per packet and
    `window` chunks in flight must fit the job on the switch (window <= the job's window, chunk
    <= its max_elements). `timeout_ms` bounds one allreduce_, `rto_ms` is the retransmission
    timeout. The socket is bound here: a second client on the same address and port would steal
    this one's results, so a host runs one client per address at a time (close() releases it).
    `progress` draws a bar on stderr for tensors of 1 MiB or more while stderr is a terminal
    (never on a pipe or file); False turns it off. `steer_ports` N > 1 (a power of two up to 64)
    sends chunk seq from UDP source port `steer_base_port` | (seq & (N - 1)), one socket bound
    per port, so a switch whose NIC steers by source port puts each chunk on the lcore owning it
    (docs/operations.md "Chunk steering"); results still arrive on `port`.
    """

    def __init__(self, job: int, bfr_id: int, abm: str, root: str, *, bind: str = "0.0.0.0",
                 port: int = 9470, chunk: int = 256, window: int = 64, bsl: int = 64,
                 timeout_ms: int = 60000, rto_ms: float = 20.0, first_seq: int = 0,
                 progress: bool = True, steer_ports: int = 1, steer_base_port: int = 40960):
        self.job = job
        self.progress = progress
        self.bfr_id = bfr_id
        self.abm = abm
        self.root = root
        try:
            self._native = _native.NativeClient(job, bfr_id, abm, root, bind, port, chunk,
                                                window, bsl, timeout_ms, rto_ms, first_seq,
                                                steer_ports, steer_base_port)
        except _native.NativeError as e:
            _raise(e)
        except TypeError as e:  # out-of-range integers (pybind11's conversion refused them)
            raise InvalidError(str(e)) from None

    def allreduce_(self, tensor: Any, op: str = "sum") -> dict:
        """Reduces `tensor` with every other worker of the job, in place (the trailing
        underscore is torch's convention for in-place operations). Returns the client's counters
        for this AllReduce (chunks, retransmits, seconds, gbit_per_s, ...). The element type
        is the tensor's; the switch's job must have the same type and op."""
        if op not in _OPS:
            raise InvalidError(f"unknown op {op!r}: one of {', '.join(_OPS)}")
        try:
            if _is_torch_tensor(tensor):
                return self._allreduce_torch(tensor, op)
            ai = getattr(tensor, "__array_interface__", None)
            if ai is not None and not isinstance(tensor, memoryview) and \
                    type(tensor).__module__ != "numpy":
                return self._allreduce_interface(tensor, ai, op)
            return self._native.allreduce_buffer(tensor, op, self._show_progress())
        except _native.NativeError as e:
            _raise(e)
        except InvalidError:
            raise
        except (BufferError, ValueError) as e:  # the buffer protocol refused a writable view
            raise InvalidError(f"the buffer cannot be written in place: {e}") from None

    def _allreduce_torch(self, t: Any, op: str) -> dict:
        etype = element_type_of(t)
        if t.device.type != "cpu":
            raise InvalidError(f"the tensor is on {t.device}: the UDP client reduces CPU memory")
        if not t.is_contiguous():
            raise InvalidError("the tensor is not contiguous (use .contiguous() and copy back)")
        if t.requires_grad and t.is_leaf:
            raise InvalidError("in-place AllReduce of a leaf tensor that requires grad: pass "
                               "tensor.data or its .grad")
        # `t` stays referenced by this frame for the whole call, so its storage outlives it.
        return self._native.allreduce_address(t.data_ptr(), t.numel() * t.element_size(),
                                              etype, op, self._show_progress())

    def _allreduce_interface(self, x: Any, ai: dict, op: str) -> dict:
        etype = _typestr_type(ai["typestr"])
        address, readonly = ai["data"]
        if readonly:
            raise InvalidError("the array is read-only: the result goes in place")
        if ai.get("strides") is not None:
            raise InvalidError("the array is not C-contiguous")
        n = 1
        for extent in ai["shape"]:
            n *= extent
        return self._native.allreduce_address(address, n * int(ai["typestr"][2:]), etype, op,
                                              self._show_progress())

    def _show_progress(self) -> bool:
        """The native side draws on fd 2 when it is a terminal; Python's own sys.stderr must be
        one too (not redirected or captured)."""
        if not self.progress:
            return False
        try:
            return sys.stderr is not None and sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False

    @property
    def next_seq(self) -> int:
        """The sequence number the next AllReduce's first chunk carries."""
        return self._native.next_seq

    def close(self) -> None:
        """Closes the socket (releasing the port); further AllReduces raise Error."""
        self._native.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
