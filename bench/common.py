# SPDX-License-Identifier: Apache-2.0
"""Shared by the bench scripts: the machine's description, dpdk-testpmd runs, statistics."""
import os
import platform
import queue
import re
import signal
import statistics
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def dpdk_version():
    out = subprocess.run(["pkg-config", "--modversion", "libdpdk"], capture_output=True, text=True)
    return out.stdout.strip()


def hugepages_available(mb=300):
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        free = int(info["HugePages_Free"].split()[0])
        size_kb = int(info["Hugepagesize"].split()[0])
        return free * size_kb >= mb * 1024 and os.path.ismount("/dev/hugepages")
    except (OSError, KeyError, ValueError):
        return False


def hypervisor():
    try:
        with open("/proc/cpuinfo") as f:
            return "hypervisor" in f.read()
    except OSError:
        return False


def environment():
    """What every figure states: CPU model, cores, hugepages, DPDK version, kernel."""
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "virtual_machine": hypervisor(),
        "hugepages": hugepages_available(),
        "dpdk": dpdk_version(),
        "kernel": platform.release(),
        "loadavg_at_start": os.getloadavg()[0],
    }


def mmm(values):
    """min / median / max of a list of numbers (None for an empty list)."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    return {"min": vals[0], "median": statistics.median(vals), "max": vals[-1], "n": len(vals),
            "runs": vals}


def eal_memory(huge):
    return ["-m", "256"] if huge else ["--no-huge", "-m", "512"]


def worker_cpu_ns(pid, name="rte-worker-1"):
    """CPU time (ns) the kernel gave process `pid`'s thread `name` (EAL names its first worker
    lcore's thread rte-worker-1), from schedstat; None when there is no such thread. Rates per
    CPU second of the forwarding thread do not move with the neighbours' load on a shared machine
    the way wall-clock rates do (the busy-polling thread is switched out for whole slices)."""
    try:
        for tid in os.listdir("/proc/%d/task" % pid):
            base = "/proc/%d/task/%s/" % (pid, tid)
            with open(base + "comm") as f:
                if f.read().strip() != name:
                    continue
            with open(base + "schedstat") as f:
                return int(f.read().split()[0])
    except OSError:
        return None
    return None


def testpmd(vdevs, mode, seconds, prefix, sink_port, huge=False, extra=None, cpu_rates=None):
    """dpdk-testpmd with one forwarding lcore on `vdevs` in --forward-mode=`mode`; the median of
    the sink port's per-second Tx-pps after the first (start-up) period. With a list `cpu_rates`,
    also appends the sink port's packets per CPU second of the forwarding thread over the same
    periods (its TX-packets and the thread's CPU time read as each period's statistics arrive)."""
    cmd = ["dpdk-testpmd", "-l", "0-1", "--no-pci", "--file-prefix", prefix,
           "--log-level", "*:error"] + eal_memory(huge)
    for v in vdevs:
        cmd += ["--vdev", v]
    cmd += ["--", "--total-num-mbufs=16384", "--forward-mode=" + mode, "--stats-period", "1",
            "--auto-start", "--no-flush-rx"] + (extra or [])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            stdin=subprocess.DEVNULL)
    # Stop testpmd once it has printed `seconds` sink-port periods after the first (start-up)
    # one, however long its start takes on a loaded machine; the deadline only bounds a
    # testpmd that never forwards.
    lines = queue.Queue()

    def read_lines():
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=read_lines, daemon=True)
    reader.start()
    out, rates, port, cpu_marks = [], [], None, []
    deadline = time.monotonic() + seconds + 120
    try:
        while len(rates) < seconds + 1:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            out.append(line)
            m = re.search(r"NIC statistics for port (\d+)", line)
            if m:
                port = int(m.group(1))
            m = re.search(r"TX-packets:\s+(\d+)", line)
            if m and port == sink_port and cpu_rates is not None:
                cpu_marks.append((int(m.group(1)), worker_cpu_ns(proc.pid)))
            m = re.search(r"Tx-pps:\s+(\d+)", line)
            if m and port == sink_port and int(m.group(1)) > 0:
                rates.append(int(m.group(1)))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
    if not rates:
        raise RuntimeError("testpmd reported no rate:\n" + "".join(out)[-3000:])
    if cpu_rates is not None:
        # From the mark before the first counted period to the last one.
        marks = [mk for mk in cpu_marks if mk[1] is not None][-(len(rates[1:] or rates) + 1):]
        if len(marks) >= 2 and marks[-1][1] > marks[0][1]:
            cpu_rates.append((marks[-1][0] - marks[0][0]) / ((marks[-1][1] - marks[0][1]) / 1e9))
        else:
            cpu_rates.append(None)
    return statistics.median(rates[1:] or rates)
