# SPDX-License-Identifier: Apache-2.0
"""AllReduce through an inaswitch over RDMA: the server-to-switch RoCEv2 mode (docs/rdma.md).

    from inaswitch.rdma import SwitchClient
    c = SwitchClient(switch_api="http://10.0.0.1:9464", job=7, rank=1, world=4,
                     dtype="fp32", chunk_bytes=1024, window=64)
    c.allreduce_(buffer)     # in place; a writable contiguous buffer of the job's type
    c.close()

One RC connection from this process to the switch's own RDMA endpoint (set up through the
switch's control API, or by RDMA CM with `switch_cm=ADDRESS`), kept across calls: the chunks of
successive calls continue one session sequence, as `ina-rdma-worker --mode server-to-switch`
does (src/worker/README.md). `dtype`, `op`, `chunk_bytes`, `window` and `pmtu` must be the
switch's rdma job's; `ip` (this host's address on the RDMA NIC) picks the RoCE v2 GID, or
`gid_index` names it. The GIL is released while the call waits. Errors raise RdmaError (an
inaswitch.Error) with the C++ client's text: a refused connect carries the switch's reason, a
failed session the rank that failed it (docs/rdma.md "A rank that fails").
"""

from __future__ import annotations

from typing import Any

from . import Error

try:
    from . import _rdma
except ImportError as e:  # built without libibverbs/librdmacm, or they are not installed
    raise ImportError("inaswitch.rdma needs the package's _rdma extension and libibverbs / "
                      f"librdmacm at run time ({e})") from e


class RdmaError(Error):
    """The RDMA client failed: no RDMA device, a refused connect, a failed work completion, a
    timeout or a failed session (the message says which)."""


class SwitchClient:
    """Rank `rank` of the switch's rdma job `job` (see the module's docstring)."""

    def __init__(self, *, job: int, rank: int, world: int, **options: Any) -> None:
        try:
            self._c = _rdma.SwitchClient(job=job, rank=rank, world=world, **options)
        except _rdma.RdmaError as e:
            raise RdmaError(str(e)) from None

    def allreduce_(self, buffer: Any) -> dict:
        """Reduces `buffer` with every other rank, in place; returns the call's counters."""
        try:
            return self._c.allreduce_(buffer)
        except _rdma.RdmaError as e:
            raise RdmaError(str(e)) from None

    @property
    def next_seq(self) -> int:
        return self._c.next_seq

    def close(self) -> str:
        """Tears the connection down (DELETE, or the CM's disconnect): "" or why not cleanly."""
        return self._c.close()

    def __enter__(self) -> "SwitchClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
