# SPDX-License-Identifier: Apache-2.0
"""One rank of test_ddp.py's training run: an MLP on scikit-learn's digits with PyTorch
DistributedDataParallel over gloo, its gradients reduced by gloo (--mode gloo) or by the switch
through inaswitch.torch.allreduce_hook (--mode inaswitch). Prints one JSON line per step (loss
before the step, a digest of every parameter after it), one per epoch (its wall time) and a last
one with the hook's counters.

With --mode inaswitch every bucket is also checked against the exact sum: each rank keeps its
contribution, all_gathers the contributions over gloo after backward, and requires every element
of the switch's result r to satisfy |r - s| <= 2 (n - 1) u S + ulp(s) (s the exact sum in
float64, S the sum of magnitudes, u = 2^-24, n ranks): the recursive-summation bound for fp32 in
any order, with a factor 2 of margin. A violation exits 1.
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
    ap.add_argument("--job", type=int, default=1)
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
    mine = order[a.rank::a.world]
    steps_per_epoch = (len(x) // a.world) // BATCH  # equal on every rank

    torch.manual_seed(a.rank)  # different initial weights: DDP must broadcast rank 0's
    net = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    # Small buckets, two per step, so the hook's ordering across buckets counts: DDP's first
    # bucket is tunable by this module attribute (its source says so), and torch 1.13 puts
    # everything in one bucket unless find_unused_parameters is set.
    dist._DEFAULT_FIRST_BUCKET_BYTES = 8192
    model = torch.nn.parallel.DistributedDataParallel(net, bucket_cap_mb=0.01,
                                                      find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    state = None
    checked: list[tuple[torch.Tensor, torch.Tensor]] = []
    if a.mode == "inaswitch":
        import inaswitch.torch as ina_torch

        state = ina_torch.HookState(a.job, a.root, bind=a.bind, port=a.port, chunk=a.chunk,
                                    window=a.window, timeout_ms=30000)

        def hook(st, bucket):
            mine_part = bucket.buffer().clone().div_(a.world)  # exactly what the hook sends
            fut = ina_torch.allreduce_hook(st, bucket)

            def keep(f):
                checked.append((mine_part, f.value().clone()))
                return f.value()
            return fut.then(keep)

        model.register_comm_hook(state, hook)

    eps = 2.0 ** -24
    worst = 0.0
    step = 0
    for epoch in range(a.epochs):
        t0 = time.perf_counter()
        for s in range(steps_per_epoch):
            idx = mine[s * BATCH:(s + 1) * BATCH]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            for part, result in checked:
                parts = [torch.empty_like(part) for _ in range(a.world)]
                dist.all_gather(parts, part)
                stacked = torch.stack(parts).double()
                exact = stacked.sum(0)
                bound = 2 * (a.world - 1) * eps * stacked.abs().sum(0) + \
                    torch.from_numpy(np.spacing(exact.float().abs().numpy())).double()
                err = (result.double() - exact).abs()
                if not bool((err <= bound).all()):
                    i = int((err - bound).argmax())
                    emit(error=f"step {step}: element {i}: switch {float(result[i])!r}, exact "
                               f"{float(exact[i])!r}, error {float(err[i])} > bound "
                               f"{float(bound[i])}")
                    return 1
                nz = bound > 0
                if bool(nz.any()):
                    worst = max(worst, float((err[nz] / bound[nz]).max()))
            buckets = len(checked)
            checked.clear()
            opt.step()
            emit(step=step, epoch=epoch, loss=float(loss), digest=digest(model), buckets=buckets)
            step += 1
        emit(epoch_time=epoch, seconds=time.perf_counter() - t0, steps=steps_per_epoch)

    summary = {"done": True, "worst_error_to_bound": worst}
    if state is not None:
        summary.update(buckets=state.buckets, chunks=state.chunks, fallback_buckets=state.fallback_buckets,
                       hook_seconds=state.seconds)
        state.close()
    emit(**summary)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
