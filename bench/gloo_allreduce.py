#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of a PyTorch gloo AllReduce (ring) of a float32 tensor; prints a JSON line with the
time of the all_reduce alone (after a barrier), measured in this process.

    gloo_allreduce.py --rank R --world N --master 10.0.1.2:29500 --elements 16777216
"""
import argparse
import json
import os
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="host:port of rank 0's TCP store")
    ap.add_argument("--elements", type=int, required=True)
    ap.add_argument("--ifname", default="eth0")
    args = ap.parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", args.ifname)
    import torch  # noqa: E402  (slow import: after argument errors)
    import torch.distributed as dist  # noqa: E402
    torch.set_num_threads(1)
    t0 = time.monotonic()
    dist.init_process_group("gloo", init_method="tcp://" + args.master, rank=args.rank,
                            world_size=args.world)
    setup = time.monotonic() - t0
    x = torch.full((args.elements,), float(args.rank + 1), dtype=torch.float32)
    dist.barrier()
    t1 = time.monotonic()
    dist.all_reduce(x)
    seconds = time.monotonic() - t1
    expect = args.world * (args.world + 1) / 2
    ok = bool(torch.all(x == expect).item())
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": args.rank, "ok": ok, "seconds": seconds, "setup_s": setup,
                      "torch": torch.__version__}), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
