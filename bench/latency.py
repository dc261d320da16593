# SPDX-License-Identifier: Apache-2.0
"""Added latency per switch hop: runs bench/latency_bench (the switch's own worker loop between
two net_ring ports, TSC stamps at RX and TX; see its header) and summarises repeated runs."""
import json
import os
import subprocess

from common import mmm

LOADS = (0.5, 0.9)


def run(exe, traffic, seconds, loads=LOADS):
    cmd = [exe, "--traffic", traffic, "--seconds", str(seconds),
           "--warmup", str(min(0.3, seconds)), "--load", ",".join(str(x) for x in loads),
           "--file-prefix", "perf-lat-%d" % os.getpid()]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60 + seconds * 10)
    if p.returncode != 0:
        raise RuntimeError("latency_bench failed (%d): %s %s" % (p.returncode, p.stdout,
                                                                 p.stderr[-2000:]))
    return json.loads(p.stdout.strip().splitlines()[-1])


def summarise(runs):
    keys = ("offered_mpps", "delivered_mpps", "p50_us", "p99_us", "p999_us", "max_us", "mean_us")
    first = runs[0]
    out = {"traffic": first["traffic"], "workers": first["workers"],
           "payload_bytes": first["payload_bytes"], "tx_drain_us": first["tx_drain_us"],
           "burst": first["burst"], "peak_in_mpps": mmm([r["peak_in_mpps"] for r in runs]),
           "floor": {k: mmm([r["floor"][k] for r in runs]) for k in keys},
           "jitter": {k: mmm([r["jitter"][k] for r in runs])
                      for k in ("gaps_per_s", "lost_pct", "gap_p50_us", "gap_p99_us",
                                "gap_max_us")} if "jitter" in first else None,
           "loads": []}
    for i, ld in enumerate(first["loads"]):
        at = {"fraction": ld["at"]["fraction"]}
        for k in keys + ("refused", "samples"):
            at[k] = mmm([r["loads"][i]["at"][k] for r in runs])
        out["loads"].append(at)
    return out
