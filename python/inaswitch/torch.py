# SPDX-License-Identifier: Apache-2.0
"""PyTorch DistributedDataParallel through an inaswitch: a communication hook that reduces each
gradient bucket in the switch instead of with the process group's AllReduce.

    import torch.distributed as dist, inaswitch.torch
    dist.init_process_group("gloo", ...)              # setup, parameter broadcast, the rest
    model = torch.nn.parallel.DistributedDataParallel(net)
    state = inaswitch.torch.HookState(job=1, root="10.0.1.1", bind=my_ip)
    model.register_comm_hook(state, inaswitch.torch.allreduce_hook)

Worker r of the process group is BFR-id r + 1 of the job, whose A-BM is 1..world size (pass a
client of your own for another numbering). Buckets are reduced in the order DDP hands them over,
one at a time on a background thread per state (every rank hands them over in the same order,
and a job's chunks share one sequence space), so backward keeps computing while a bucket is on
the wire. The result is the mean, as with DDP's default hook: the bucket is divided by the world
size first (exact for powers of two), then summed by the switch.

Buckets the switch cannot take (not on the CPU, or an element type without a job: see
`types`) go through the process group's all_reduce, as DDP would send them.

`fixed_point_hook` sends the buckets through an int32 job instead, as fixed-point integers the
switch sums exactly: reproducible bit for bit whatever the order the contributions arrive in.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import Any

import torch
import torch.distributed as dist

from . import Client, element_type_of

__all__ = ["HookState", "allreduce_hook", "fixed_point_hook", "to_fixed_point",
           "from_fixed_point"]


class HookState:
    """What allreduce_hook needs: the client (or the arguments to make one for this rank) and
    the process group for the world size and the buckets the switch does not take.

    `types` are the element types the switch's job reduces (its `elem_type`; one job has
    one); buckets of other types fall back to the process group. Counters: `buckets` and
    `chunks` through the switch, `fallback_buckets`, `seconds` (time on the wire),
    `last_stats` (the client's counters of the latest bucket)."""

    def __init__(self, job: int | None = None, root: str | None = None, *,
                 client: Client | None = None, process_group: Any = None,
                 types: tuple[str, ...] = ("fp32",), fraction_bits: int = 24,
                 **client_options: Any):
        self.process_group = process_group
        self.world_size = dist.get_world_size(process_group)
        if client is None:
            if job is None or root is None:
                raise ValueError("HookState needs a client, or job and root to make one")
            rank = dist.get_rank(process_group)
            # A bar per gradient bucket every step would flood a training's terminal.
            client_options.setdefault("progress", False)
            client = Client(job, rank + 1, f"1-{self.world_size}", root, **client_options)
        self.client = client
        self.types = tuple(types)
        self.fraction_bits = fraction_bits  # fixed_point_hook's resolution: 2^-fraction_bits
        self.buckets = 0
        self.chunks = 0
        self.fallback_buckets = 0
        self.seconds = 0.0
        self.last_stats: dict = {}
        # One thread: buckets leave in DDP's order, which is the same on every rank.
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="inaswitch-ddp")

    def _reduce(self, tensor: torch.Tensor, fut: torch.futures.Future,
                wire: torch.Tensor | None = None, fraction_bits: int = 0) -> None:
        """Sums `wire` (default: `tensor` itself) through the switch; with `wire` an int32
        fixed-point copy, the sum is converted back into `tensor`."""
        try:
            t0 = time.perf_counter()
            self.last_stats = self.client.allreduce_(tensor if wire is None else wire, "sum")
            if wire is not None:
                from_fixed_point(wire, fraction_bits, out=tensor)
            self.seconds += time.perf_counter() - t0
            self.buckets += 1
            self.chunks += self.last_stats["chunks"]
            fut.set_result(tensor)
        except BaseException as e:  # noqa: BLE001 - the training loop's wait() raises it
            fut.set_exception(e)

    def close(self) -> None:
        """Waits for buckets in flight, then closes the client."""
        self._executor.shutdown(wait=True)
        self.client.close()


def _switch_takes(state: HookState, tensor: torch.Tensor) -> bool:
    if tensor.device.type != "cpu" or not tensor.is_contiguous():
        return False
    try:
        return element_type_of(tensor) in state.types
    except ValueError:
        return False


def allreduce_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future:
    """DDP communication hook: the bucket's mean over the ranks, summed by the switch."""
    tensor = bucket.buffer()
    tensor.div_(state.world_size)
    if not _switch_takes(state, tensor):
        state.fallback_buckets += 1
        work = dist.all_reduce(tensor, group=state.process_group, async_op=True)
        return work.get_future().then(lambda f: f.value()[0])
    fut: torch.futures.Future = torch.futures.Future()
    state._executor.submit(state._reduce, tensor, fut)
    return fut


def to_fixed_point(tensor: torch.Tensor, fraction_bits: int, world_size: int) -> torch.Tensor:
    """round(tensor × 2^fraction_bits) as int32, saturated at ±(2^31 − 1) // world_size so
    that the sum of world_size of them cannot wrap."""
    limit = (2 ** 31 - 1) // world_size
    scaled = torch.round(tensor.double() * 2.0 ** fraction_bits)
    return scaled.clamp_(-limit, limit).to(torch.int32)


def from_fixed_point(summed: torch.Tensor, fraction_bits: int,
                     out: torch.Tensor) -> torch.Tensor:
    """out = summed / 2^fraction_bits (an int32 sum of to_fixed_point values)."""
    return out.copy_(summed.double() / 2.0 ** fraction_bits)


def fixed_point_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future:
    """DDP communication hook through an **int32** job: each rank sends its share of the mean
    (bucket / world size) as fixed-point integers with `state.fraction_bits` fractional bits
    (default 24), the switch sums them exactly, and the result is converted back. Integer sums
    do not depend on the order of addition, so the result is bit-identical to any other exact
    integer AllReduce of the same integers (gloo's, for one): runs are reproducible
    bit for bit. Resolution is 2^-fraction_bits; values beyond ±2^(31 − fraction_bits) /
    world size saturate."""
    tensor = bucket.buffer()
    bits = state.fraction_bits
    wire = to_fixed_point(tensor.cpu() / state.world_size, bits, state.world_size)
    fut: torch.futures.Future = torch.futures.Future()
    state._executor.submit(state._reduce, tensor, fut, wire, bits)
    return fut
