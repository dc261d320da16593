#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Where the time goes: `perf record -e cpu-clock` (hardware counters are not exposed in most
VMs; where they are, use -e cycles) of the two per-core figures, top symbols as JSON for
bench/run.py --profile (and docs/performance.md).

    /usr/bin/python3 bench/profile.py [--build build-perf] [--out bench/results/profile.json]

  l3           inaswitch forwarding the l3-pcap-null scenario (the worker lcore, whole process)
  aggregation  bench/ina_bench, 1 KiB fp32, 8 workers (the generator's copy included)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import forwarding  # noqa: E402


def top(data, n=25):
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol",
                          "--stdio"], capture_output=True, text=True).stdout
    out = []
    for line in rep.splitlines():
        m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.+?)[\s-]*$", line)
        if m:
            sym = re.sub(r"\(anonymous namespace\)::", "", m.group(3)).strip()
            sym = re.sub(r"ina::reduce::detail::", "", sym)
            out.append([float(m.group(1)), "%s (%s)" % (sym[:110], m.group(2))])
        if len(out) >= n:
            break
    return out


def profile_aggregation(build, seconds):
    with tempfile.TemporaryDirectory() as d:
        data = os.path.join(d, "perf.data")
        subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", data,
                        os.path.join(build, "bench", "ina_bench"), "--seconds", str(seconds),
                        "--file-prefix", "perf-prof-agg"], capture_output=True, check=True)
        return {"how": "perf record -e cpu-clock, bench/ina_bench --workers 8 --payload 1024 "
                       "--type fp32 (one lcore: generator + pipeline)", "top": top(data)}


def profile_l3(build, seconds):
    with tempfile.TemporaryDirectory() as d:
        pcap = os.path.join(d, "l3.pcap")
        forwarding.make_pcap(pcap, 1000)
        cfg = [s for s in forwarding.scenarios(d) if s[0] == "l3-pcap-null"][0][3]
        api = forwarding.free_port()
        eal = ["-l", "0-1", "--no-pci", "--log-level", "*:error", "--no-huge", "-m", "512"]
        path = os.path.join(d, "sw.yaml")
        with open(path, "w") as f:
            f.write("version: 1\neal:\n  args: %s\ncontrol: {listen: \"127.0.0.1:%d\"}\n" % (
                json.dumps(eal), api) + cfg.replace(os.path.join(d, "l3_64B.pcap"), pcap))
        sw = subprocess.Popen([os.path.join(build, "src", "app", "inaswitch"), "-c", path,
                               "--file-prefix", "perf-prof-l3"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    forwarding.scrape("http://127.0.0.1:%d/metrics" % api)
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("switch did not start")
                    time.sleep(0.05)  # polling for readiness
            data = os.path.join(d, "perf.data")
            subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-p", str(sw.pid), "-o",
                            data, "--", "sleep", str(seconds)], capture_output=True, check=True)
        finally:
            sw.terminate()
            sw.wait(15)
        return {"how": "perf record -e cpu-clock -p <inaswitch>, l3-pcap-null (worker lcore; "
                       "the control lcore sleeps)", "top": top(data)}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-perf"))
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "profile.json"))
    a = ap.parse_args()
    res = {"l3 forwarding (inaswitch)": profile_l3(a.build, a.seconds),
           "aggregation (ina_bench)": profile_aggregation(a.build, a.seconds)}
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)
    for name, r in res.items():
        print("== " + name)
        for share, sym in r["top"][:15]:
            print("%5.1f%%  %s" % (share, sym))
    return 0


if __name__ == "__main__":
    sys.exit(main())
