# SPDX-License-Identifier: Apache-2.0
"""End to end: AllReduce among 4 workers in network namespaces, every link shaped with tc tbf so
the links (not the switch or the hosts) are the bottleneck.

    h1..h4 (workers, 10.0.i.2) -- p0..p3 [inaswitch] p4 -- h5 (10.0.5.2, the host root)

Every link is shaped to `rate` in both directions: tbf on the host's eth0 (host -> switch) and
on the switch's root-namespace veth end (switch -> host; the switch's af_packet ports run
without qdisc_bypass so their frames pass the qdisc). Three ways to AllReduce the same tensor
(`elements` fp32, 64 MiB by default):
  ina     the switch is the VAT root of the job: each worker sends its tensor once and receives
          the result once (bound: S / rate per link, S the tensor's bytes);
  ina-ps  ina-ps in h5 is a host root, the switch just routes (job unknown to it): h5's link
          carries every worker's tensor in and every result out (bound: N x S / rate);
  gloo    PyTorch's gloo ring AllReduce (TCP) among h1..h4, the switch routing, no INA job:
          each link carries 2 (N-1)/N x S each way (bound: 2 (N-1)/N x S / rate).
Completion time: ina/ina-ps the slowest worker's own run time (ina-worker's "seconds", started
by a barrier: every worker generates its tensor, says it is ready, and all are started at once,
as gloo's ranks are by dist.barrier), gloo the slowest rank's all_reduce time after a barrier.

`busy`: that many CPU-bound processes (a Python busy loop each, in the root namespace, at the
default priority) run beside every method for the whole measurement: the "other work on the
machine" a training job shares its hosts with. The bounds count payload bytes only; the packet
headers' share (INA ~5 %, TCP ~4.5 % at MTU 1500) is reported beside them.
"""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

N = 4
JOB_INA = 1
JOB_PS = 2
CHUNK = 352      # fp32 elements per packet: 1408 B payload, a 1486 B IP packet (MTU 1500)
WINDOW = 128     # chunks in flight per worker (the job's window, a power of two)
GLOO_PORT = 29500
# Retransmission timeout of the ina-workers: above the deepest queue a window can build on a
# shaped link (the host root's link holds N windows: ~60 ms at 200 Mbit/s), so only real losses
# are retransmitted.
RTO_MS = 200


def _shape(tb, rate_mbit, burst_kb, limit_kb):
    from testbed import run
    spec = ["tbf", "rate", "%dmbit" % rate_mbit, "burst", "%dkb" % burst_kb,
            "limit", "%dkb" % limit_kb]
    for p in tb.ports:
        run(["tc", "qdisc", "replace", "dev", p.dev, "root"] + spec)
        p.host.run(["tc", "qdisc", "replace", "dev", p.host.dev, "root"] + spec)


def _collect(procs, what, timeout):
    from testbed import TestFailure
    reports = []
    for i, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except Exception:  # noqa: BLE001 - a hung worker: kill and report
            p.kill()
            out, err = p.communicate(timeout=5)
        lines = out.strip().splitlines()
        r = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
        if p.returncode != 0 or r.get("ok") is not True:
            raise TestFailure("%s %d failed (exit %s): %s %s" % (what, i + 1, p.returncode,
                                                                 out[-800:], err[-1500:]))
        reports.append(r)
    return reports


def _ina_workers(hosts, exe, job, root, elements, seed, timeout_s):
    """The workers, started together once every one has its tensor (--start-on-stdin)."""
    from testbed import TestFailure
    procs = []
    for i, h in enumerate(hosts):
        procs.append(h.popen([exe, "--job", str(job), "--bfr-id", str(i + 1), "--abm", "1-%d" % N,
                              "--root", root, "--bind", h.ip, "--type", "fp32", "--op", "sum",
                              "--elements", str(elements), "--chunk", str(CHUNK), "--window",
                              str(WINDOW), "--seed", str(seed), "--rto-ms", str(RTO_MS),
                              "--timeout-ms", str(int(timeout_s * 1000)), "--start-on-stdin"],
                             stdin=subprocess.PIPE))
    for i, p in enumerate(procs):
        line = p.stdout.readline()  # EOF ('') if the worker died before it was ready
        if '"ready": true' not in line:
            for q in procs:
                q.kill()
            raise TestFailure("ina-worker %d not ready: %r %s" % (i + 1, line, p.stderr.read()))
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
        p.stdin.close()
        p.stdin = None  # communicate() must not touch the closed pipe
    return procs


class Busy:
    """`n` CPU-bound processes for the life of the context (none for n = 0)."""

    def __init__(self, n):
        self.n = n
        self.procs = []

    def __enter__(self):
        for _ in range(self.n):
            self.procs.append(subprocess.Popen(["/usr/bin/python3", "-c", "while True: pass"]))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def run_ina(tb, hosts, exe, elements, timeout_s):
    t0 = time.monotonic()
    reports = _collect(_ina_workers(hosts, exe, JOB_INA, "10.0.1.1", elements, 7, timeout_s),
                       "ina-worker", timeout_s + 60)
    wall = time.monotonic() - t0
    return {"seconds": max(r["seconds"] for r in reports), "wall_s": wall,
            "retransmits": sum(r["retransmits"] for r in reports)}


def run_ps(tb, hosts, ps_host, worker_exe, ps_exe, elements, timeout_s):
    ps = ps_host.popen([ps_exe, "--job", str(JOB_PS), "--abm", "1-%d" % N, "--type", "fp32",
                        "--op", "sum", "--chunk", str(CHUNK), "--window", str(WINDOW), "--bind",
                        ps_host.ip, "--idle-exit-ms", str(int(timeout_s * 1000)), "--workers",
                        ",".join("%d=%s" % (i + 1, h.ip) for i, h in enumerate(hosts))])
    try:
        ps_host.wait_listening(9470, proto="udp")
        t0 = time.monotonic()
        reports = _collect(_ina_workers(hosts, worker_exe, JOB_PS, ps_host.ip, elements, 8,
                                        timeout_s), "ina-worker (ina-ps root)", timeout_s + 60)
        wall = time.monotonic() - t0
    finally:
        ps.terminate()
        try:
            ps.communicate(timeout=10)
        except Exception:  # noqa: BLE001
            ps.kill()
    return {"seconds": max(r["seconds"] for r in reports), "wall_s": wall,
            "retransmits": sum(r["retransmits"] for r in reports)}


def run_gloo(tb, hosts, elements, timeout_s):
    script = os.path.join(HERE, "gloo_allreduce.py")
    master = "%s:%d" % (hosts[0].ip, GLOO_PORT)
    t0 = time.monotonic()
    procs = [h.popen(["/usr/bin/python3", "-B", script, "--rank", str(i), "--world", str(N),
                      "--master", master, "--elements", str(elements)])
             for i, h in enumerate(hosts)]
    reports = _collect(procs, "gloo rank", timeout_s + 120)
    return {"seconds": max(r["seconds"] for r in reports), "wall_s": time.monotonic() - t0,
            "setup_s": max(r["setup_s"] for r in reports), "torch": reports[0]["torch"]}


def _started(Testbed, switch, ports, extra, log, attempts=3):
    """A running testbed. af_packet's PACKET_FANOUT group id is derived from the pid and the
    interface index, so on a host where other switches come and go it can collide
    ("could not set PACKET_FANOUT"): fresh veths (new indexes) avoid it."""
    from testbed import TestFailure
    for attempt in range(attempts):
        tb = Testbed(switch, ports, extra=extra, qdisc_bypass=False, start=False)
        tb.file_prefix = "perf-e2e-%d" % os.getpid()
        try:
            tb.start()
            return tb
        except TestFailure as e:
            tb.close()
            if "PACKET_FANOUT" not in str(e) or attempt + 1 == attempts:
                raise
            log("e2e: af_packet fanout collision, new veths (attempt %d)" % (attempt + 2))
    raise AssertionError("unreachable")


def measure(build, repeat=3, elements=16 << 20, rate_mbit=200, methods=("ina", "ina-ps", "gloo"),
            log=print, busy=0):
    if os.geteuid() != 0:
        return {"skipped": "needs root (network namespaces, tc)"}
    from testbed import Host, Port, Testbed
    switch = os.path.join(build, "src", "app", "inaswitch")
    worker_exe = os.path.join(build, "src", "worker", "ina-worker")
    ps_exe = os.path.join(build, "src", "worker", "ina-ps")
    if "gloo" in methods:
        try:
            import torch  # noqa: F401
        except ImportError:
            methods = tuple(m for m in methods if m != "gloo")
            log("e2e: python3-torch missing, gloo skipped (apt install python3-torch)")
    hosts = [Host("h%d" % i, "10.0.%d.2/24" % i) for i in range(1, N + 2)]
    ports = [Port("p%d" % (i - 1), ipv4=["10.0.%d.1/24" % i], host=hosts[i - 1])
             for i in range(1, N + 2)]
    workers, ps_host = hosts[:N], hosts[N]
    job = {"job_id": JOB_INA, "role": "root", "bsl": 64, "abm": "1-%d" % N, "op": "sum",
           "elem_type": "fp32", "max_elements": CHUNK, "window": WINDOW, "root": "10.0.1.1",
           "workers": [{"bfr_id": i + 1, "ip": h.ip} for i, h in enumerate(workers)]}
    tensor = elements * 4
    # Links of `rate`: bursts of 10 ms at that rate, queues deep enough for every worker's
    # window so tbf shapes rather than drops.
    burst_kb = max(32, rate_mbit * 1000 // 8 // 100)
    limit_kb = max(1024, WINDOW * 1500 * N // 1024 * 2)
    bound = {"ina": tensor * 8 / (rate_mbit * 1e6),
             "ina-ps": N * tensor * 8 / (rate_mbit * 1e6),
             "gloo": 2 * (N - 1) / N * tensor * 8 / (rate_mbit * 1e6)}
    runs = {m: [] for m in methods}
    timeout_s = max(60.0, bound["ina-ps"] * 6)
    extra = {"dataplane": {"idle_sleep_us": 20}}
    with _started(Testbed, switch, ports, extra, log) as tb, Busy(busy):
        _shape(tb, rate_mbit, burst_kb, limit_kb)
        for h in hosts:
            h.wait_reachable("10.0.1.1")
        for h in workers:
            h.wait_reachable(ps_host.ip)
        for r in range(repeat):
            for m in methods:
                if m == "ina":
                    tb.api_json("POST", "/api/v1/jobs", job, expect=None)
                    res = run_ina(tb, workers, worker_exe, elements, timeout_s)
                    tb.api_json("DELETE", "/api/v1/jobs?job_id=%d" % JOB_INA, expect=None)
                elif m == "ina-ps":
                    res = run_ps(tb, workers, ps_host, worker_exe, ps_exe, elements, timeout_s)
                else:
                    res = run_gloo(tb, workers, elements, timeout_s)
                runs[m].append(res)
                log("e2e%s %-6s run %d: %.2f s (bound %.2f s, %.2fx)" % (
                    " busy %d" % busy if busy else "", m, r + 1, res["seconds"], bound[m],
                    res["seconds"] / bound[m]))
    out = {"elements": elements, "tensor_bytes": tensor, "workers": N, "rate_mbit": rate_mbit,
           "tbf": {"burst_kb": burst_kb, "limit_kb": limit_kb}, "chunk_elements": CHUNK,
           "window": WINDOW, "busy": busy, "methods": {}}
    for m in methods:
        secs = [x["seconds"] for x in runs[m]]
        out["methods"][m] = {"seconds": secs, "median_s": statistics.median(secs),
                             "bound_s": bound[m],
                             "to_bound": statistics.median(secs) / bound[m], "runs": runs[m]}
    med = {m: out["methods"][m]["median_s"] for m in methods}
    if "ina" in med and "gloo" in med:
        out["ina_over_gloo"] = med["ina"] / med["gloo"]
    if "ina" in med and "ina-ps" in med:
        out["ina_over_ps"] = med["ina"] / med["ina-ps"]
    return out
