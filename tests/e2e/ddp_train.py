# SPDX-License-Identifier: Apache-2.0
"""One rank of test_ddp.py's training runs: an MLP on scikit-learn's digits with PyTorch
DistributedDataParallel over gloo, trained twice from the same start: phase fp32 (DDP's mean
gradient in fp32) and phase fixed (the mean as int32 fixed point, 24 fractional bits). The
gradients are reduced by gloo (--mode gloo) or by the switch (--mode inaswitch: fp32 job
--job through inaswitch.torch.allreduce_hook, int32 job --fixed-job through
fixed_point_hook). Prints one JSON line per step (loss before the step, a digest of every
parameter after it), one per epoch (its wall time) and one per phase with the hook's counters.

With --mode inaswitch every bucket is also checked against the exact sum: each rank keeps its
contribution, all_gathers the contributions over gloo after backward, and requires every element
of the switch's result r to satisfy, in phase fp32, |r - s| <= 2 (n - 1) u S + ulp(s) (s the
exact sum in float64, S the sum of magnitudes, u = 2^-24, n ranks): the recursive-summation
bound for fp32 in any order, with a factor 2 of margin; in phase fixed, r == s exactly. A
violation exits 1.
"""

import argparse
import datetime
import hashlib
import json
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from sklearn.datasets import load_digits

BATCH = 32  # samples per rank and step


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="rendezvous address:port (rank 0's host)")
    ap.add_argument("--mode", choices=("gloo", "inaswitch"), required=True)
    ap.add_argument("--job", type=int, default=1, help="the fp32 job")
    ap.add_argument("--fixed-job", type=int, default=2, help="the int32 job (fixed point)")
    ap.add_argument("--root", default="")
    ap.add_argument("--bind", default="0.0.0.0")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--port", type=int, default=9470, help="INA UDP port")
    ap.add_argument("--chunk", type=int, default=256)
    ap.add_argument("--window", type=int, default=64)
    a = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}", rank=a.rank,
                            world_size=a.world, timeout=datetime.timedelta(seconds=60))

    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1))
    data = (x, y, order[a.rank::a.world], (len(x) // a.world) // BATCH)  # equal steps per rank
    for phase, job in (("fp32", a.job), ("fixed", a.fixed_job)):
        failed = train(a, phase, job, data)
        if failed:
            emit(error=failed)
            return 1
    dist.destroy_process_group()
    return 0


def check_fp32(a, part: torch.Tensor, result: torch.Tensor, exact: torch.Tensor,
               stacked: torch.Tensor) -> tuple[str | None, float]:
    """The recursive-summation bound (module docstring); returns (violation, error / bound)."""
    bound = 2 * (a.world - 1) * 2.0 ** -24 * stacked.abs().sum(0) + \
        torch.from_numpy(np.spacing(exact.float().abs().numpy())).double()
    err = (result.double() - exact).abs()
    if not bool((err <= bound).all()):
        i = int((err - bound).argmax())
        return (f"element {i}: switch {float(result[i])!r}, exact {float(exact[i])!r}, error "
                f"{float(err[i])} > bound {float(bound[i])}"), 0.0
    nz = bound > 0
    return None, float((err[nz] / bound[nz]).max()) if bool(nz.any()) else 0.0


def train(a, phase: str, job: int, data) -> str | None:
    """One training run; `phase` fp32 (DDP's mean in fp32) or fixed (int32 fixed point)."""
    import inaswitch.torch as ina_torch

    x, y, mine, steps_per_epoch = data
    torch.manual_seed(a.rank)  # different initial weights: DDP must broadcast rank 0's
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    # Small buckets, two per step, so the hook's ordering across buckets counts: DDP's first
    # bucket is tunable by this module attribute (its source says so), and torch 1.13 puts
    # everything in one bucket unless find_unused_parameters is set.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.01,
                                                      find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    bits = 24

    state = None
    # (what this rank sent, what came back) per bucket of the current step
    checked: list[tuple[torch.Tensor, torch.Tensor]] = []
    if a.mode == "inaswitch":
        state = ina_torch.HookState(job, a.root, bind=a.bind, port=a.port, chunk=a.chunk,
                                    window=a.window, timeout_ms=30000, fraction_bits=bits)
        inner = ina_torch.allreduce_hook if phase == "fp32" else ina_torch.fixed_point_hook

        def hook(st, bucket):
            t = bucket.buffer()
            # Exactly what the hook sends.
            sent = t.clone().div_(a.world) if phase == "fp32" else \
                ina_torch.to_fixed_point(t / a.world, bits, a.world)
            fut = inner(st, bucket)

            def keep(f):
                checked.append((sent, f.value().clone()))
                return f.value()
            return fut.then(keep)

        model.register_comm_hook(state, hook)
    elif phase == "fixed":
        # gloo's exact int32 AllReduce of the same integers: the reference the switch's run must
        # equal bit for bit.
        def gloo_fixed(st, bucket):
            t = bucket.buffer()
            q = ina_torch.to_fixed_point(t / a.world, bits, a.world)
            work = dist.all_reduce(q, async_op=True)
            return work.get_future().then(
                lambda f: ina_torch.from_fixed_point(f.value()[0], bits, out=t))

        model.register_comm_hook(None, gloo_fixed)

    worst = 0.0
    step = 0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = mine[s * BATCH:(s + 1) * BATCH]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            for sent, result in checked:
                parts = [torch.empty_like(sent) for _ in range(a.world)]
                dist.all_gather(parts, sent)
                if phase == "fp32":
                    stacked = torch.stack(parts).double()
                    violation, ratio = check_fp32(a, sent, result, stacked.sum(0), stacked)
                    worst = max(worst, ratio)
                else:
                    exact = ina_torch.from_fixed_point(torch.stack(parts).sum(0), bits,
                                                       out=torch.empty_like(result))
                    violation = None if torch.equal(result, exact) else \
                        f"fixed-point result differs from the exact integer sum in " \
                        f"{int((result != exact).sum())} elements"
                if violation:
                    return f"{phase} step {step}: {violation}"
            buckets = len(checked)
            checked.clear()
            opt.step()
            emit(phase=phase, step=step, epoch=epoch, loss=float(loss), digest=digest(model),
                 buckets=buckets)
            step += 1
        emit(phase=phase, epoch_time=epoch, seconds=time.perf_counter() - t0,
             steps=steps_per_epoch)

    summary = {"phase": phase, "done": True, "worst_error_to_bound": worst}
    if state is not None:
        summary.update(buckets=state.buckets, chunks=state.chunks,
                       fallback_buckets=state.fallback_buckets, hook_seconds=state.seconds)
        state.close()  # releases the INA port for the next phase's client
    emit(**summary)
    return None


if __name__ == "__main__":
    sys.exit(main())
