#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Rack-scale forwarding state (issue 13): how fast the switch learns hosts from live traffic,
what a large route table costs, and how fast routes change through the API.

    /usr/bin/python3 bench/scale.py [--smoke] [--binary PATH]

Learning: a net_pcap port replays (in a loop) ARP requests to the switch from N hosts, another
replays frames from M source MACs; a reload adds the hosts' subnet (then another the L2 group,
without the subnet), and the figures are the time from the reload's answer to N (M) entries in the in-place tables
(inaswitch_table_entries, sampled every 20 ms), the learning rate, how many snapshots were
published meanwhile (learning publishes none), and the resident memory. Routes: R routes through one gateway loaded from the config (start-up and reload time,
memory), then single routes added and deleted through POST/DELETE /api/v1/routes, timed one by
one on a keep-alive connection and in batches of 1000 (POST /api/v1/routes/batch), each change
one in-place LPM operation (no snapshot); then the single requests again from C++ clients
(bench/api_client), one keep-alive connection and 4 concurrent ones. RX stalls, diffed over the
hosts' arrival, over an idle second before it, and over the route changes: the raw poll gaps
(inaswitch_lcore_poll_gaps_total), split into the loop iterations' own time when the kernel did
not switch the worker out (inaswitch_lcore_loop_work_total: the switch's) and those it did
(inaswitch_lcore_loop_descheduled_total), with the worker threads' preemptions and run-queue
wait and the machine's softirq and steal time. A wall-clock benchmark on a
shared machine: the figures are as measured, never a pass/fail.
"""
import argparse
import http.client
import json
import os
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from common import eal_memory, hugepages_available  # noqa: E402
from forwarding import free_port  # noqa: E402
from inapcap import mac, write_pcap  # noqa: E402

SWITCH_MAC = "02:00:00:00:00:01"
SWITCH_IP = "10.0.0.1"  # /16 on the hosts port: room for every host


def host_ip(i):
    return "10.0.%d.%d" % (16 + i // 250, 2 + i % 250)


def ip_bytes(text):
    return bytes(int(x) for x in text.split("."))


def arp_request(i):
    sha = mac("02:10:%02x:%02x:%02x:%02x" % (i >> 24 & 255, i >> 16 & 255, i >> 8 & 255, i & 255))
    eth = b"\xff" * 6 + sha + struct.pack("!H", 0x0806)
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + sha + ip_bytes(host_ip(i)) + b"\0" * 6 + \
        ip_bytes(SWITCH_IP)
    return eth + arp + b"\0" * 18


def l2_frame(i):
    src = mac("02:20:%02x:%02x:%02x:%02x" % (i >> 24 & 255, i >> 16 & 255, i >> 8 & 255, i & 255))
    return mac("02:30:00:00:00:01") + src + struct.pack("!H", 0x88b5) + b"\0" * 46


def get(url, timeout=30):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def call(method, url, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode() or "{}")


def metric(text, name, labels=""):
    key = name + ("{" + labels + "}" if labels else "")
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    return 0.0


def poll_gaps(text, name="inaswitch_lcore_poll_gaps_total"):
    """A loop-time histogram: {(lcore, le_us): count} (le_us "+Inf" for the last bucket)."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:line.index("}")].split(","))
            out[(labels["lcore"].strip('"'), labels["le_us"].strip('"'))] = float(line.split()[-1])
    return out


def worst_gap_us(before, after):
    """The upper bound (us) of the highest poll-gap bucket that moved between two scrapes: the
    worst RX stall of that interval, within a factor of 2. inf when the open bucket moved."""
    worst = 0.0
    for key, n in after.items():
        if n > before.get(key, 0.0):
            worst = max(worst, float("inf") if key[1] == "+Inf" else float(key[1]))
    return worst


def gaps_over(before, after, bound_us):
    """Poll gaps of bound_us or more between two scrapes (from the buckets above bound_us)."""
    return sum(n - before.get(key, 0.0) for key, n in after.items()
               if key[1] == "+Inf" or float(key[1]) > bound_us)


class Stalls:
    """The workers' stall figures between two scrapes: the raw poll gaps (all causes), the loop
    iterations' own time when the kernel did not switch the worker out (what the switch's work
    costs, plus interrupts and hypervisor steal the guest cannot see per iteration), the
    iterations it did switch out, the worker threads' preemptions and run-queue wait, and the
    machine's interrupt and steal time (/proc/stat)."""
    HISTOGRAMS = {"raw": "inaswitch_lcore_poll_gaps_total",
                  "work": "inaswitch_lcore_loop_work_total",
                  "descheduled": "inaswitch_lcore_loop_descheduled_total"}

    def __init__(self, text):
        self.t = time.monotonic()
        self.hist = {k: poll_gaps(text, n) for k, n in self.HISTOGRAMS.items()}
        self.involuntary = sum_metric(text, "inaswitch_lcore_context_switches_total",
                                      'kind="involuntary"')
        self.run_delay = sum_metric(text, "inaswitch_lcore_run_delay_seconds_total")
        self.detecting = sum_metric(text, "inaswitch_lcore_deschedule_detection")
        self.cpu = cpu_ticks()

    def since(self, before):
        """The figures of the interval [before, self], as a dict for the result file."""
        seconds = max(self.t - before.t, 1e-9)
        out = {"seconds": round(seconds, 3)}
        for k in self.HISTOGRAMS:
            out[k + "_worst_us_le"] = worst_gap_us(before.hist[k], self.hist[k])
            out[k + "_over_128us_per_s"] = round(gaps_over(before.hist[k], self.hist[k], 128) /
                                                 seconds, 1)
        out["preemptions_per_s"] = round((self.involuntary - before.involuntary) / seconds, 1)
        out["run_delay_ms_per_s"] = round((self.run_delay - before.run_delay) * 1e3 / seconds, 2)
        hz = os.sysconf("SC_CLK_TCK")
        for k in ("irq", "softirq", "steal"):
            out[k + "_ms_per_s"] = round((self.cpu[k] - before.cpu[k]) * 1e3 / hz / seconds, 1)
        out["descheduling_detected"] = self.detecting > 0
        return out


def sum_metric(text, name, labels_contain=""):
    """The sum of a metric's samples whose labels contain labels_contain."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and labels_contain in line:
            total += float(line.split()[-1])
    return total


def cpu_ticks():
    """The machine's irq, softirq and steal time so far (/proc/stat, all CPUs, in ticks)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return {"irq": v[5], "softirq": v[6], "steal": v[7]}


def stall_text(r):
    return ("raw poll gaps <= %s us (%s/s over 128 us), switch's own work <= %s us (%s/s over "
            "128 us), descheduled <= %s us; %s preemptions/s, run-queue wait %s ms/s, softirq "
            "%s ms/s, steal %s ms/s" % (
                r["raw_worst_us_le"], r["raw_over_128us_per_s"], r["work_worst_us_le"],
                r["work_over_128us_per_s"], r["descheduled_worst_us_le"], r["preemptions_per_s"],
                r["run_delay_ms_per_s"], r["softirq_ms_per_s"], r["steal_ms_per_s"]))


def rss_mib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


class Switch:
    """inaswitch on the given config body; the API on a free loopback port."""

    def __init__(self, binary, body, prefix, huge):
        self.api = free_port()
        eal = ["-l", "0-1", "--no-pci", "--log-level", "*:error"] + eal_memory(huge)
        cfg = ("version: 1\neal:\n  args: %s\ncontrol: {listen: \"127.0.0.1:%d\", "
               "allow_unauthenticated: true}\n" % (json.dumps(eal), self.api)) + body
        f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
        f.write(cfg)
        f.close()
        self.path = f.name
        self.base = "http://127.0.0.1:%d" % self.api
        t0 = time.monotonic()
        # Output to a file, not a pipe: every API change writes an audit line to stderr, and a
        # pipe nobody reads would fill and block the switch's API thread.
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([binary, "-c", self.path, "--file-prefix", prefix],
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True)
        deadline = t0 + 300
        while True:
            try:
                get(self.base + "/metrics", timeout=5)
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    self.log.seek(0)
                    raise RuntimeError("inaswitch did not start:\n" + self.log.read())
                time.sleep(0.05)  # polling an HTTP endpoint for readiness
        self.start_s = time.monotonic() - t0
        # The reload path re-reads the file; rewrite() keeps these four header lines.
        assert cfg.count("\n", 0, cfg.index(body)) == 4

    def rewrite(self, body):
        """Replaces the config file's body (the header stays): POST /api/v1/reload reads it."""
        with open(self.path) as f:
            head = f.read().split("\n", 4)[:4]
        with open(self.path, "w") as f:
            f.write("\n".join(head) + "\n" + body)

    def metrics(self):
        return get(self.base + "/metrics")

    def wait_for(self, name, labels, target, timeout, t0):
        """Polls until metric >= target; returns the samples (seconds since t0, value)."""
        series = []
        while True:
            v = metric(self.metrics(), name, labels)
            series.append((time.monotonic() - t0, v))
            if v >= target:
                return series
            if time.monotonic() - t0 > timeout:
                raise RuntimeError("%s{%s} reached %d of %d in %ds; %s" % (
                    name, labels, v, target, timeout, self.diagnosis()))
            time.sleep(0.02)  # sampling interval of the learning curve

    # What says where learning stopped when a table does not fill: frames not arriving (RX
    # counts, mbufs), events not reaching the control plane (lost), or inserts refused (full).
    DIAGNOSIS = ("inaswitch_port_hw_rx_packets_total", "inaswitch_port_hw_rx_nombuf_total",
                 "inaswitch_mempool_mbufs_in_use", "inaswitch_mempool_mbufs",
                 "inaswitch_control_events_lost_total", "inaswitch_fdb_learned_total",
                 "inaswitch_neighbours_learned_total", "inaswitch_table_full_total",
                 "inaswitch_lcore_loop_descheduled_total")

    def diagnosis(self, seconds=1.0):
        """The diagnostic series now and their change over `seconds`, plus the log's tail."""
        def pick(text):
            return [l for l in text.splitlines()
                    if not l.startswith("#") and l.split("{")[0].split(" ")[0] in self.DIAGNOSIS]
        before = pick(self.metrics())
        time.sleep(seconds)  # a measurement window, not synchronisation
        after = pick(self.metrics())
        self.log.seek(0)
        tail = self.log.read()[-2000:]
        return ("metrics %.0f s apart:\n%s\n---\n%s\nswitch log tail:\n%s" %
                (seconds, "\n".join(before), "\n".join(after), tail))

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        os.unlink(self.path)


def learning(binary, hosts, macs, huge, work, log):
    arp_pcap = os.path.join(work, "arp.pcap")
    l2_pcap = os.path.join(work, "l2.pcap")
    write_pcap(arp_pcap, [arp_request(i) for i in range(hosts)])
    write_pcap(l2_pcap, [l2_frame(i) for i in range(macs)])
    # The switch starts with the hosts' subnet and the L2 group absent (their frames are
    # dropped, nothing is learned); a reload adds one, and its hosts "arrive" at once.
    # net_pcap's infinite_rx holds every frame of its file in mbufs: room for both files.
    body = """mempool: {mbufs: %d}
arp: {max_neighbours: %d}
l2: {max_fdb_entries: %d}
ports:
  - {name: hosts, devargs: "net_pcap0,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null", mac: "%s"%s}
  - {name: la, devargs: "net_pcap1,rx_pcap=%s,infinite_rx=1,tx_pcap=/dev/null"%s}
  - {name: lb, devargs: "net_null0,no-rx=1"%s}
"""
    args = (hosts + macs + 16383, 2 * hosts, 2 * macs, arp_pcap, SWITCH_MAC)
    sw = Switch(binary, body % (args + ("", l2_pcap, "", "")),
                "scale-learn-tor-scale-%d" % os.getpid(), huge)
    try:
        def arrive(subnet, group):
            """Reloads with the hosts' subnet and/or the L2 group; returns the reload's time."""
            sw.rewrite(body % (args + (", ipv4: [%s/16]" % SWITCH_IP if subnet else "",
                                       l2_pcap, group, group)))
            r = call("POST", sw.base + "/api/v1/reload")
            if not r.get("ok"):
                raise RuntimeError("reload refused: %s" % r)
            return time.monotonic()
        # One table at a time: every replayed sender repeats at line rate, far above what a
        # host sends, and two such storms at once fill the worker's event ring with
        # refreshes of what is already learned (counted in events_lost).
        rss0 = rss_mib(sw.proc.pid)
        # Baseline: the worst poll gap over a second with nothing changing (what the busy
        # machine's scheduler alone costs a worker).
        s0 = Stalls(sw.metrics())
        time.sleep(1.0)  # a measurement window, not synchronisation
        s1 = Stalls(sw.metrics())
        idle = s1.since(s0)
        t0 = arrive(True, "")
        published0 = metric(sw.metrics(), "inaswitch_snapshots_published_total")
        nb = sw.wait_for("inaswitch_table_entries", 'table="neighbours"', hosts, 300, t0)
        mid = sw.metrics()
        # The stalls a worker saw while the hosts arrived (the reload that lets them in
        # included): the highest bucket that moved, of each histogram.
        arrival = Stalls(mid).since(s1)
        t0 = arrive(False, ", l2_group: rack")
        published1 = metric(sw.metrics(), "inaswitch_snapshots_published_total")
        fdb = sw.wait_for("inaswitch_table_entries", 'table="fdb"', macs, 300, t0)
        after = sw.metrics()

        nb_total, fdb_total = nb[-1][0], fdb[-1][0]
        res = {
            "hosts": hosts, "macs": macs,
            "neighbours_learned_s": round(nb_total, 3),
            "neighbours_per_s": round(hosts / nb_total, 1),
            "fdb_learned_s": round(fdb_total, 3),
            "fdb_per_s": round(macs / fdb_total, 1),
            "snapshots_published_while_learning":
                metric(mid, "inaswitch_snapshots_published_total") - published0 +
                metric(after, "inaswitch_snapshots_published_total") - published1,
            "events_lost": metric(after, "inaswitch_control_events_lost_total"),
            # Entries aged out while their hosts kept sending: always 0 (a worker's last-seen
            # stamp newer than the ager's clock once read as a huge age; see bench/notes.md).
            "expired_while_learning": metric(after, "inaswitch_fdb_expired_total") +
            metric(after, "inaswitch_neighbours_expired_total"),
            "table_full": metric(after, "inaswitch_table_full_total", 'table="neighbours"') +
            metric(after, "inaswitch_table_full_total", 'table="fdb"'),
            "rss_mib_before": round(rss0, 1), "rss_mib_after": round(rss_mib(sw.proc.pid), 1),
            # Raw poll gaps (all causes; the figure before the split): while the hosts
            # arrived, and idle.
            "worst_rx_stall_us_le": arrival["raw_worst_us_le"],
            "idle_worst_rx_stall_us_le": idle["raw_worst_us_le"],
            "stalls_over_128us_per_s": arrival["raw_over_128us_per_s"],
            "idle_stalls_over_128us_per_s": idle["raw_over_128us_per_s"],
            "stalls_arrival": arrival, "stalls_idle": idle,
        }
        if res["expired_while_learning"]:
            raise RuntimeError("%d entries aged out while their hosts were sending" %
                               res["expired_while_learning"])
        log("learning: %(hosts)d neighbours in %(neighbours_learned_s).2f s (%(neighbours_per_s)s/s), "
            "%(macs)d MACs in %(fdb_learned_s).2f s (%(fdb_per_s)s/s), %(snapshots_published_while_learning)d "
            "snapshots published, RSS %(rss_mib_before).0f -> %(rss_mib_after).0f MiB, worst RX stall "
            "while the hosts arrived <= %(worst_rx_stall_us_le)s us (1 s idle: <= "
            "%(idle_worst_rx_stall_us_le)s us); gaps over 128 us: %(stalls_over_128us_per_s)s/s "
            "(idle %(idle_stalls_over_128us_per_s)s/s)" % res)
        log("stalls while the hosts arrived: " + stall_text(arrival))
        log("stalls in the idle second: " + stall_text(idle))
        return res
    finally:
        sw.close()


def routes(binary, n_routes, api_changes, batch_changes, batch_size, huge, log, api_client=None):
    lines = "\n".join("  - {prefix: %d.%d.%d.0/24, via: 10.1.0.2}" % (
        20 + i // 65536, i // 256 % 256, i % 256) for i in range(n_routes))
    body = """mempool: {mbufs: 4095}
ports:
  - {name: up, devargs: "net_null0,no-rx=1", ipv4: [10.1.0.1/24]}
  - {name: down, devargs: "net_null1,no-rx=1", ipv4: [10.2.0.1/24]}
routes:
%s
""" % lines
    sw = Switch(binary, body, "scale-routes-tor-scale-%d" % os.getpid(), huge)
    try:
        m = sw.metrics()
        res = {"routes": n_routes, "start_s": round(sw.start_s, 2),
               "rss_mib": round(rss_mib(sw.proc.pid), 1),
               "lpm_rules": metric(m, "inaswitch_table_entries", 'table="routes"'),
               "nexthops": metric(m, "inaswitch_table_entries", 'table="nexthops"')}
        t0 = time.monotonic()
        call("POST", sw.base + "/api/v1/reload")
        res["reload_s"] = round(time.monotonic() - t0, 3)
        s0 = Stalls(sw.metrics())
        published0 = metric(sw.metrics(), "inaswitch_snapshots_published_total")
        conn = http.client.HTTPConnection("127.0.0.1", sw.api, timeout=60)  # one keep-alive

        def send(method, path, body=None):
            data = json.dumps(body) if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            answer = json.loads(r.read().decode() or "{}")
            if r.status != 200 or not answer.get("ok"):
                raise RuntimeError("%s %s refused: %d %s" % (method, path, r.status, answer))
            return answer

        def api_prefix(i):
            return "99.%d.%d.0/24" % (i // 256 % 256, i % 256)
        add, delete = [], []
        cpu_single = time.process_time()  # the Python client's own CPU time
        t_single = time.monotonic()
        for i in range(api_changes):
            t0 = time.monotonic()
            send("POST", "/api/v1/routes", {"prefix": api_prefix(i), "via": "10.1.0.2"})
            add.append(time.monotonic() - t0)
        for i in range(api_changes):
            t0 = time.monotonic()
            send("DELETE", "/api/v1/routes?prefix=" + api_prefix(i))
            delete.append(time.monotonic() - t0)
        t_single = time.monotonic() - t_single
        cpu_single = time.process_time() - cpu_single
        # The batch endpoint: batch_size changes a request, adds then deletes.
        batches = []
        t_batch = time.monotonic()
        for op in ("add", "delete"):
            for first in range(0, batch_changes, batch_size):
                ids = range(first, min(batch_changes, first + batch_size))
                body = {op: [{"prefix": api_prefix(i), "via": "10.1.0.2"} for i in ids]} \
                    if op == "add" else {op: [api_prefix(i) for i in ids]}
                t0 = time.monotonic()
                r = send("POST", "/api/v1/routes/batch", body)
                batches.append(time.monotonic() - t0)
                if r.get("applied") != len(ids):
                    raise RuntimeError("batch applied %s of %d" % (r.get("applied"), len(ids)))
        t_batch = time.monotonic() - t_batch
        conn.close()
        # The same single requests from C++ clients (bench/api_client.cc): one keep-alive
        # connection, then 4 concurrent ones (an operator's route agents), each request waiting
        # for its answer. The Python client above costs more CPU per request than the server.
        native = {}
        if api_client and os.path.exists(api_client):
            for clients, octet in ((1, 97), (4, 98)):
                per_client = max(1, min(api_changes, 4096 // clients))
                out = subprocess.run([api_client, "--port", str(sw.api), "--clients", str(clients),
                                      "--changes", str(per_client), "--first-octet", str(octet)],
                                     capture_output=True, text=True, timeout=300)
                if out.returncode != 0:
                    raise RuntimeError("api_client failed: %s" % out.stderr)
                native["clients_%d" % clients] = json.loads(out.stdout)
        after = sw.metrics()
        stalls = Stalls(after).since(s0)

        def pct(v, p):
            v = sorted(v)
            return round(v[min(len(v) - 1, int(p / 100.0 * len(v)))] * 1e3, 3)
        res.update({"api_changes": api_changes,
                    "add_ms_p50": pct(add, 50), "add_ms_p99": pct(add, 99),
                    "delete_ms_p50": pct(delete, 50), "delete_ms_p99": pct(delete, 99),
                    "api_routes_per_s": round(2 * api_changes / t_single, 1),
                    "python_client_cpu_us_per_change": round(cpu_single / (2 * api_changes) * 1e6,
                                                             1),
                    "native_client": native,
                    "batch_changes": 2 * batch_changes, "batch_size": batch_size,
                    "batch_ms_p50": pct(batches, 50), "batch_ms_p99": pct(batches, 99),
                    "batch_routes_per_s": round(2 * batch_changes / t_batch, 1),
                    "snapshots_published": metric(after, "inaswitch_snapshots_published_total") -
                    published0,
                    "changed_in_place": metric(after, "inaswitch_routes_changed_in_place_total"),
                    "worst_rx_stall_us_le": stalls["raw_worst_us_le"],
                    "stalls": stalls})
        log("routes: %(routes)d from config: start %(start_s).1f s, reload %(reload_s).2f s, "
            "RSS %(rss_mib).0f MiB; API single (keep-alive) add p50 %(add_ms_p50)s ms p99 "
            "%(add_ms_p99)s ms, delete p50 %(delete_ms_p50)s ms p99 %(delete_ms_p99)s ms: "
            "%(api_routes_per_s)s changes/s; batch of %(batch_size)d p50 %(batch_ms_p50)s ms p99 "
            "%(batch_ms_p99)s ms: %(batch_routes_per_s)s changes/s; %(changed_in_place)d in place, "
            "%(snapshots_published)d snapshots; worst RX stall <= %(worst_rx_stall_us_le)s us" % res)
        log("routes: Python client CPU %s us per change" % res["python_client_cpu_us_per_change"])
        for k, v in native.items():
            log("routes: C++ client, %d keep-alive connection(s): %s changes/s, p50 %s ms, p99 "
                "%s ms, client CPU %s us per change" % (
                    v["clients"], v["changes_per_s"], v["ms_p50"], v["ms_p99"],
                    v["client_cpu_us_per_change"]))
        log("stalls during the route changes: " + stall_text(stalls))
        return res
    finally:
        sw.close()


def measure(binary, smoke, log=print, api_client=None):
    huge = hugepages_available()
    if api_client is None:  # build/src/app/inaswitch -> build/bench/api_client
        api_client = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(binary))),
                                  "bench", "api_client")
    hosts, macs, n_routes, api, batch = (256, 1024, 1000, 200, 2000) if smoke else \
        (4096, 16384, 100000, 5000, 20000)
    with tempfile.TemporaryDirectory() as work:
        learned = learning(binary, hosts, macs, huge, work, log)
        # rte_lpm scans the rules of a prefix's length on every add and delete: the API rate
        # with a small table too, as a reference.
        # Its LPM holds the config's prefixes plus 4096 (compile::kRouteHeadroom): fewer changes.
        small = None if smoke else routes(binary, 1000, 2000, 4000, 1000, huge, log, api_client)
        return {"learning": learned,
                "routes": routes(binary, n_routes, api, batch, 1000, huge, log, api_client),
                "routes_small_table": small,
                # The goal's figure: the switch's own work per loop iteration while the hosts
                # arrived (iterations the kernel switched out excluded); the raw poll gap beside.
                "worst_rx_stall_us_le": learned["stalls_arrival"]["work_worst_us_le"],
                "worst_rx_stall_raw_us_le": learned["worst_rx_stall_us_le"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "src", "app", "inaswitch"))
    ap.add_argument("--smoke", action="store_true")
    a = ap.parse_args()
    print(json.dumps(measure(a.binary, a.smoke), indent=2))


if __name__ == "__main__":
    main()
