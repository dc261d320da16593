# SPDX-License-Identifier: Apache-2.0
"""Figure 1 of draft-song-ina-00 as a live testbed: 7 inaswitch processes, 8 hosts.

                               s7
                         .-----+-----.
                        s5           s6
                     .--+--.      .--+--.
                    s1     s2    s3     s4
                   /  \\   /  \\  /  \\   /  \\
                  w1  w2 w3  w4 w5  w6 w7  w8

Every switch and every host is a network namespace ("<prefix>-s1", "<prefix>-w1"; the prefix is
"inaf1-<pid>" unless given). A switch's namespace holds one veth end per link, named after the
node on the other end ("w1", "s5"); veths are created directly inside their namespaces, so their
names never exist in the root namespace. Each switch is its own inaswitch process, run with
`ip netns exec` on net_af_packet vdevs, --no-huge, a small mempool, two EAL lcores on one CPU
(switches alternate between CPU 0 and 1) and an idle back-off so seven of them share two CPUs.
Its control API listens on 127.0.0.1:9464 inside its namespace (Switch.http enters the namespace
with setns(2) on a helper thread; no process per request).

Addressing (docs/testbed-fig1.md):
    host link of wi:        10.1.i.0/24   switch .1, wi .2 (default route via .1)
    switch link sX-sY, X<Y: 10.0.XY.0/24  sX .X, sY .Y    (e.g. s6-s7: 10.0.67.6 / 10.0.67.7)
Static routes on each switch reach every other subnet through the (unique) tree path.
A switch's "router address" (VAT root / parent address) is its address on its uplink:
s1,s2 -> s5; s3,s4 -> s6; s5,s6 -> s7; s7 -> s6 (so s6 is 10.0.67.6).

INA jobs are described by VatJob (workers by BFR-id, the aggregators with their A-BMs, the root).
Results go back by unicast (`workers:` at the root) or, with results="bier", by BIER: every
switch then gets a `bier:` section (BFR-id 100+N, one BIFT whose neighbours carry the BFR-ids of
the hosts behind them, local bits for its own hosts) and the root job `results: bier`.

Run by hand (as root):
    /usr/bin/python3 tests/e2e/fig1.py --up   [--exe build/src/app/inaswitch] [--bier]
    /usr/bin/python3 tests/e2e/fig1.py --down
--up builds the testbed under the prefix "inaf1-up", starts the switches with the Figure 1 job
(and a second job on w5..w8), prints how to reach everything and exits leaving it running;
--down stops those switches (by the pids --up recorded) and removes everything.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import testbed  # noqa: E402
from testbed import Host, Metrics, TestFailure, check, log, run, to_yaml, wait_until  # noqa: E402,F401

PREFIX = "inaf1-"
UP_PREFIX = "inaf1-up"
API_PORT = 9464
INA_PORT = 9470

# The topology of Figure 1.
SWITCHES = ["s1", "s2", "s3", "s4", "s5", "s6", "s7"]
HOSTS = {f"w{i}": f"s{(i + 1) // 2}" for i in range(1, 9)}   # w1,w2 -> s1 ... w7,w8 -> s4
LINKS = [("s1", "s5"), ("s2", "s5"), ("s5", "s7"), ("s3", "s6"), ("s4", "s6"), ("s6", "s7")]
# A redundant spine link, off by default: with Fig1(backup_links=True) s5 and s6 get a direct
# link (10.0.56.0/24) that no primary path uses; routes whose primary gateway is s7 name the
# peer across it as `backup_via`, so the tree survives s7's death (the R11 failover test).
BACKUP_LINKS = [("s5", "s6")]
UPLINK = {"s1": "s5", "s2": "s5", "s3": "s6", "s4": "s6", "s5": "s7", "s6": "s7", "s7": "s6"}
CPU = {"s1": 0, "s2": 1, "s3": 0, "s4": 1, "s5": 0, "s6": 1, "s7": 0}


def num(node: str) -> int:
    return int(node[1:])


def link_net(a: str, b: str) -> str:
    x, y = sorted((num(a), num(b)))
    return f"10.0.{x}{y}"


def switch_addr(sw: str, peer: str) -> str:
    """sw's address on the link to peer (a switch or a host)."""
    if peer.startswith("w"):
        return f"10.1.{num(peer)}.1"
    return f"{link_net(sw, peer)}.{num(sw)}"


def host_addr(h: str) -> str:
    return f"10.1.{num(h)}.2"


def router_addr(sw: str) -> str:
    return switch_addr(sw, UPLINK[sw])


def bfr_id_of(h: str) -> int:
    """Every host wi is BFR-id i (BP i of set 0)."""
    return num(h)


def ids_text(ids: list[int]) -> str:
    """[1,2,3,5] -> "1-3,5" (the abm / bfr_ids notation)."""
    ids = sorted(set(ids))
    out: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)


def neighbours(node: str) -> list[str]:
    """A switch's neighbours, hosts first, in a stable order."""
    out = [h for h, s in HOSTS.items() if s == node]
    for a, b in LINKS:
        if a == node:
            out.append(b)
        elif b == node:
            out.append(a)
    return out


def next_hop(src: str, dst: str) -> str:
    """The neighbour of switch src on the (unique: the graph is a tree) path to node dst."""
    prev = {src: None}
    queue = [src]
    while queue:
        n = queue.pop(0)
        if n == dst:
            break
        for m in (neighbours(n) if n.startswith("s") else [HOSTS[n]]):
            if m not in prev:
                prev[m] = n
                queue.append(m)
    if dst not in prev:
        raise ValueError(f"no path {src} -> {dst}")
    n = dst
    while prev[n] != src:
        n = prev[n]
    return n


def path(src: str, dst: str) -> list[str]:
    """The nodes from switch src to node dst, both included."""
    out = [src]
    while out[-1] != dst:
        out.append(next_hop(out[-1], dst))
    return out


def hosts_behind(sw: str, peer: str) -> list[str]:
    """Hosts reached from switch sw through its neighbour peer."""
    return [h for h in HOSTS if next_hop(sw, h) == peer]


def backup_peers(sw: str) -> list[str]:
    """The switches sw reaches over a backup link."""
    return [b if a == sw else a for a, b in BACKUP_LINKS if sw in (a, b)]


def switch_routes(sw: str, backup_links: bool = False) -> list[dict]:
    """Static routes of sw: every subnet not connected to it, via the next hop on the path;
    with backup_links, a route also names the peer across sw's backup link as `backup_via`
    when that peer reaches the subnet without the primary next hop."""
    connected = {f"10.1.{num(h)}.0/24" for h in neighbours(sw) if h.startswith("w")}
    connected |= {f"{link_net(sw, p)}.0/24" for p in neighbours(sw) if p.startswith("s")}
    targets: list[tuple[str, str]] = [(f"10.1.{num(h)}.0/24", HOSTS[h]) for h in HOSTS]
    for a, b in LINKS:
        targets.append((f"{link_net(a, b)}.0/24", a))
    routes = []
    for prefix, far in targets:
        if prefix in connected:
            continue
        nh = next_hop(sw, far)
        route = {"prefix": prefix, "via": switch_addr(nh, sw)}
        if backup_links:
            backups = [switch_addr(b, sw) for b in backup_peers(sw)
                       if b != nh and nh not in path(b, far)]
            if backups:
                route["backup_via"] = backups
        routes.append(route)
    return routes


def bier_section(sw: str, bsl: int = 256, groups: list[dict] | None = None) -> dict:
    """The switch's `bier:` section: BFR-id 100+N; one BIFT (sub-domain 0, set 0) whose
    neighbours carry the BFR-ids of the hosts behind them; its own hosts as local bits; the
    multicast groups it is the BFIR of ({"group": "239.1.1.1", "bfr_ids": "3,6,8"})."""
    nbrs = []
    local = []
    for p in neighbours(sw):
        if p.startswith("w"):
            local.append({"bfr_id": bfr_id_of(p), "host": host_addr(p)})
        else:
            ids = [bfr_id_of(h) for h in hosts_behind(sw, p)]
            if ids:
                nbrs.append({"via": switch_addr(p, sw), "bfr_ids": ids_text(ids)})
    bift: dict[str, Any] = {"bsl": bsl, "set_id": 0}
    if nbrs:
        bift["neighbours"] = nbrs
    if local:
        bift["local"] = local
    out = {"sub_domain": 0, "bfr_id": 100 + num(sw), "ttl": 64, "bifts": [bift]}
    if groups:
        out["groups"] = groups
    return out


# ---------------------------------------------------------------------------------------------
# INA jobs

@dataclasses.dataclass
class VatJob:
    """One AllReduce job laid on the topology: workers (host -> BFR-id is wi -> i), the
    aggregators {switch: [hosts they aggregate]}, the root switch. An aggregator's parent is the
    next aggregator (or the root) above it in `parents`, default the root."""
    job_id: int
    workers: list[str]
    aggregators: dict[str, list[str]]
    root: str
    parents: dict[str, str] = dataclasses.field(default_factory=dict)
    op: str = "sum"
    elem_type: str = "int32"
    bsl: int = 256
    chunk: int = 256
    window: int = 64
    slot_timeout_ms: int = 1000

    @property
    def abm(self) -> str:
        return ids_text([bfr_id_of(h) for h in self.workers])

    @property
    def root_addr(self) -> str:
        return router_addr(self.root)

    def switch_job(self, sw: str, results: str) -> dict | None:
        common = {"job_id": self.job_id, "bsl": self.bsl, "op": self.op,
                  "elem_type": self.elem_type, "max_elements": self.chunk, "window": self.window,
                  "slot_timeout_ms": self.slot_timeout_ms, "root": self.root_addr,
                  "on_reject": "drop"}
        if sw == self.root:
            j = {"job_id": self.job_id, "role": "root", "abm": self.abm, **common}
            if results == "bier":
                j["results"] = "bier"
            else:
                j["workers"] = [{"bfr_id": bfr_id_of(h), "ip": host_addr(h)}
                                for h in self.workers]
            return j
        if sw in self.aggregators:
            parent = self.parents.get(sw, self.root)
            return {"job_id": self.job_id, "role": "aggregator",
                    "abm": ids_text([bfr_id_of(h) for h in self.aggregators[sw]]),
                    **common, "parent": router_addr(parent)}
        return None

    def result_copies(self, sw: str, port: str, results: str) -> int:
        """Result packets per chunk that switch sw sends out of its port to neighbour `port`:
        one per worker whose path from the root crosses sw -> port by unicast, one if any does
        by BIER (the copies branch where the paths part)."""
        n = 0
        for h in self.workers:
            p = path(self.root, h)
            n += any(p[i] == sw and p[i + 1] == port for i in range(len(p) - 1))
        return n if results == "unicast" else min(n, 1)

    def worker_cmd(self, exe: str, h: str, elements: int, seed: int, timeout_s: float) -> list[str]:
        return [exe, "--job", str(self.job_id), "--bfr-id", str(bfr_id_of(h)), "--abm", self.abm,
                "--bsl", str(self.bsl), "--root", self.root_addr, "--bind", host_addr(h),
                "--type", self.elem_type, "--op", self.op, "--elements", str(elements),
                "--chunk", str(self.chunk), "--window", str(self.window), "--seed", str(seed),
                "--rto-ms", "50", "--timeout-ms", str(int(timeout_s * 1000))]


# A multicast group for BIER mode: w1's datagrams to 239.1.1.1 enter BIER at s1 (the BFIR) and
# reach the hosts of BFR-ids 3, 6, 8 (w3, w6, w8).
EXAMPLE_GROUPS = {"s1": [{"group": "239.1.1.1", "bfr_ids": "3,6,8"}]}


def figure1_job(job_id: int = 1, **kw) -> VatJob:
    """The draft's job: w1..w4; s1 aggregates w1,w2, s7 aggregates w3,w4, s6 is the root."""
    return VatJob(job_id, ["w1", "w2", "w3", "w4"], {"s1": ["w1", "w2"], "s7": ["w3", "w4"]},
                  "s6", **kw)


def second_job(job_id: int = 2, **kw) -> VatJob:
    """A job on w5..w8: s3 aggregates w5,w6, s4 aggregates w7,w8, s6 is the root."""
    kw.setdefault("elem_type", "fp32")
    kw.setdefault("op", "max")
    return VatJob(job_id, ["w5", "w6", "w7", "w8"], {"s3": ["w5", "w6"], "s4": ["w7", "w8"]},
                  "s6", **kw)


# ---------------------------------------------------------------------------------------------
# Namespaces

_libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG = 1


def ns_connect(ns: str, host: str, port: int, timeout: float) -> socket.socket:
    """A TCP connection made from inside network namespace `ns` (a helper thread enters it with
    setns; the socket stays in that namespace whoever uses it)."""
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, f"setns {ns}: {os.strerror(e)}")
            finally:
                os.close(fd)
            box["sock"] = socket.create_connection((host, port), timeout=timeout)
        except Exception as e:  # noqa: BLE001 - handed to the caller
            box["err"] = e
    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(timeout + 5)
    if "err" in box:
        raise box["err"]
    if "sock" not in box:
        raise TimeoutError(f"connect to {host}:{port} in {ns}")
    return box["sock"]


def _die_with_parent() -> None:
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Switch:
    def __init__(self, fig: "Fig1", name: str):
        self.fig = fig
        self.name = name
        self.ns = f"{fig.prefix}-{name}"
        self.file_prefix = f"{fig.prefix}-{name}"
        self.cpu = CPU[name]
        self.config_path = os.path.join(fig.workdir, f"{name}.yaml")
        self.log_path = os.path.join(fig.workdir, f"{name}.log")
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None

    @property
    def addr(self) -> str:
        return router_addr(self.name)

    def config_dict(self) -> dict:
        ports = []
        peers = neighbours(self.name) + (backup_peers(self.name) if self.fig.backup_links else [])
        for i, p in enumerate(peers):
            ports.append({"name": p, "devargs": f"net_af_packet{i},iface={p},qdisc_bypass=1",
                          "ipv4": [f"{switch_addr(self.name, p)}/24"]})
        cfg: dict[str, Any] = {
            "version": 1,
            "eal": {"args": ["--lcores", f"0@{self.cpu},1@{self.cpu}", "--no-huge", "-m", "256",
                             "--no-pci", "--log-level", "*:warning"]},
            "mempool": {"mbufs": 2047, "cache_size": 64},
            "ports": ports,
            "dataplane": {"idle_sleep_us": self.fig.idle_sleep_us},
            "routes": switch_routes(self.name, self.fig.backup_links),
            "control": {"listen": f"127.0.0.1:{API_PORT}"},
        }
        if self.fig.neighbour_timeout_s is not None:
            cfg["arp"] = {"neighbour_timeout_s": self.fig.neighbour_timeout_s,
                          "request_interval_ms": 500}
        if self.fig.results == "bier":
            cfg["bier"] = bier_section(self.name, self.fig.bier_bsl,
                                       self.fig.bier_groups.get(self.name))
        jobs = [j for j in (job.switch_job(self.name, self.fig.results) for job in self.fig.jobs)
                if j]
        if jobs:
            cfg["ina"] = {"jobs": jobs}
        return cfg

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            f.write("# SPDX-License-Identifier: Apache-2.0\n# generated by tests/e2e/fig1.py\n"
                    + to_yaml(self.config_dict()))

    def check_config(self) -> None:
        p = run([self.fig.exe, "--check-config", self.config_path], check_rc=False)
        if p.returncode != 0:
            raise TestFailure(f"{self.name}: --check-config {self.config_path} exited "
                              f"{p.returncode}:\n{p.stderr.strip()}")

    def start(self) -> None:
        cmd = ["ip", "netns", "exec", self.ns, self.fig.exe, "-c", self.config_path,
               "--file-prefix", self.file_prefix]
        with open(self.log_path, "w") as logf:
            self.proc = subprocess.Popen(
                cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                # A test's switches die with it; --up's outlive the command that started them.
                preexec_fn=None if self.fig.persist else _die_with_parent,
                start_new_session=self.fig.persist)
        self.pid = self.proc.pid  # ip netns exec execs the switch: same pid

    def ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise TestFailure(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
        if self.http("GET", "/api/v1/status", timeout=1)[0] != 200:
            return False
        return all(v == 1 for v in self.metrics().by_label("inaswitch_port_link_up",
                                                           "port").values())

    def log(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def http(self, method: str, path: str, body: Any = None, timeout: float = 5) -> tuple[int, str]:
        sock = ns_connect(self.ns, "127.0.0.1", API_PORT, timeout)
        conn = http.client.HTTPConnection("127.0.0.1", API_PORT, timeout=timeout)
        conn.sock = sock
        try:
            headers = {}
            data = None
            if body is not None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    def metrics(self) -> Metrics:
        status, text = self.http("GET", "/metrics")
        if status != 200:
            raise TestFailure(f"{self.name}: GET /metrics: HTTP {status}")
        return Metrics(text)

    def stop(self, timeout: float = 10) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log(f"{self.name} ignored SIGTERM; killing it")
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


def _netns_list() -> list[str]:
    out = run(["ip", "netns", "list"], check_rc=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def _switch_pids(prefix: str) -> list[int]:
    """inaswitch processes whose --file-prefix starts with `prefix-` (ours: each name is unique
    to the test process or the --up testbed that created it)."""
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        for i, a in enumerate(argv[:-1]):
            if a == "--file-prefix" and argv[i + 1].startswith(prefix + "-") and \
                    any(x.endswith("inaswitch") for x in argv):
                pids.append(int(d))
    return pids


def remove_prefix(prefix: str, pids: list[int] | None = None) -> None:
    """Stops the switches of `prefix` (the recorded pids, else found by file prefix), deletes its
    namespaces (their veths go with them), DPDK runtime dirs and work dir."""
    victims = set(pids or []) | set(_switch_pids(prefix))
    for pid in victims:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    if victims:
        try:
            wait_until(lambda: not any(_pid_alive(p) for p in victims), 10,
                       f"switches of {prefix} to exit")
        except TestFailure:
            for pid in victims:
                if _pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)
    for ns in _netns_list():
        if ns.startswith(prefix + "-"):
            run(["ip", "netns", "del", ns], check_rc=False)
    if os.path.isdir("/var/run/dpdk"):
        for d in os.listdir("/var/run/dpdk"):
            if d.startswith(prefix + "-"):
                shutil.rmtree(os.path.join("/var/run/dpdk", d), ignore_errors=True)


def cleanup_stale() -> None:
    """Removes what a Fig1 test process that no longer exists left behind (it was SIGKILLed)."""
    seen = set()
    for ns in _netns_list():
        m = re.match(re.escape(PREFIX) + r"(\d+)-", ns)
        if m:
            seen.add(int(m.group(1)))
    if os.path.isdir("/var/run/dpdk"):
        for d in os.listdir("/var/run/dpdk"):
            m = re.match(re.escape(PREFIX) + r"(\d+)-", d)
            if m:
                seen.add(int(m.group(1)))
    for pid in seen:
        if pid != os.getpid() and not _pid_alive(pid):
            log(f"removing leftovers of dead fig1 test {pid}")
            remove_prefix(f"{PREFIX}{pid}")
    for name in os.listdir(tempfile.gettempdir()):
        m = re.match(re.escape(PREFIX) + r"(\d+)-", name)
        if m and not _pid_alive(int(m.group(1))):
            shutil.rmtree(os.path.join(tempfile.gettempdir(), name), ignore_errors=True)


class Fig1:
    """The whole testbed. Fig1(exe, jobs=[figure1_job(), second_job()]) builds the namespaces
    and links, writes and checks every switch's config and starts the switches (start=False to
    do that later with start()); results="bier" adds the `bier:` sections (bier_groups: the
    multicast groups per BFIR switch); close() (also at exit and on SIGTERM/SIGINT) removes it all."""

    def __init__(self, exe: str, jobs: list[VatJob] | None = None, *, results: str = "unicast",
                 prefix: str | None = None, persist: bool = False, start: bool = True,
                 idle_sleep_us: int = 50, bier_bsl: int = 256,
                 bier_groups: dict[str, list[dict]] | None = None,
                 backup_links: bool = False, neighbour_timeout_s: int | None = None,
                 impair: dict[str, Any] | None = None):
        if results not in ("unicast", "bier"):
            raise ValueError(f"results: unicast or bier, not {results!r}")
        self.exe = os.path.abspath(exe)
        self.jobs = list(jobs or [])
        self.results = results
        self.persist = persist
        self.idle_sleep_us = idle_sleep_us
        self.bier_bsl = bier_bsl
        self.bier_groups = bier_groups or {}   # switch -> groups it is the BFIR of
        self.backup_links = backup_links
        self.neighbour_timeout_s = neighbour_timeout_s
        # host -> testbed.Impairment, or (up, down): impair.py between the host and its switch,
        # in a namespace "<prefix>-imp-<host>" of its own (host eth0 <-> to-host ==impair.py==
        # to-sw <-> the switch's veth). self.impairers[host].counts() reads its counters.
        self.impair = dict(impair or {})
        self.impairers: dict[str, testbed.Impairer] = {}
        self.prefix = prefix or f"{PREFIX}{os.getpid()}"
        self._closed = False
        if not persist:
            testbed._install_handlers()
            cleanup_stale()
            testbed._live.append(self)   # torn down by testbed's exit and signal handlers
        if persist:
            self.workdir = os.path.join(tempfile.gettempdir(), self.prefix)
            os.makedirs(self.workdir, exist_ok=True)
        else:
            self.workdir = tempfile.mkdtemp(prefix=f"{self.prefix}-")
        self.switches = {s: Switch(self, s) for s in SWITCHES}
        self.hosts: dict[str, Host] = {}
        try:
            self._build_network()
            for sw in self.switches.values():
                sw.write_config()
            for sw in self.switches.values():
                sw.check_config()
            if start:
                self.start()
        except BaseException:
            if not persist:
                self.close()
            raise

    # -- network -----------------------------------------------------------------------------

    def _ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def _in(self, node: str, cmd: list[str]) -> None:
        run(["ip", "netns", "exec", self._ns(node)] + cmd)

    def _build_network(self) -> None:
        for node in SWITCHES + list(HOSTS):
            ns = self._ns(node)
            run(["ip", "netns", "add", ns])
            for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
                self._in(node, ["sysctl", "-qw", f"{key}=1"])
            self._in(node, ["ip", "link", "set", "lo", "up"])
        for sw in SWITCHES:
            # The switch's veth ends belong to it: the kernel must not forward, or answer ARP.
            for key, v in (("net.ipv4.conf.all.forwarding", 0), ("net.ipv4.ip_forward", 0),
                           ("net.ipv4.conf.default.arp_ignore", 8),
                           ("net.ipv4.conf.all.arp_ignore", 8)):
                self._in(sw, ["sysctl", "-qw", f"{key}={v}"])
        for a, b in LINKS + (BACKUP_LINKS if self.backup_links else []):
            self._veth(a, b, b, a)
        for h, sw in HOSTS.items():
            if h in self.impair:
                self._impaired_veth(sw, h)
            else:
                self._veth(sw, h, h, "eth0")
            host = Host(h, f"{host_addr(h)}/24", gw=switch_addr(sw, h))
            host.ns = self._ns(h)
            host.dev = "eth0"
            host.run(["ip", "addr", "add", host.addr, "dev", "eth0"])
            host.run(["ip", "link", "set", "eth0", "up"])
            host.run(["ip", "route", "add", "default", "via", host.gw, "dev", "eth0"])
            host.mac = json.loads(host.run(["ip", "-j", "link", "show", "eth0"]).stdout)[0]["address"]
            self.hosts[h] = host

    def _impaired_veth(self, sw: str, h: str) -> None:
        """sw's veth `h` <-> "to-sw" in namespace imp-<h> ==impair.py== "to-host" <-> h's eth0.
        (Not "h" and "s": `ip link set h up` reads "h" as "help".)"""
        imp = f"imp-{h}"
        run(["ip", "netns", "add", self._ns(imp)])
        self._in(imp, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])
        self._veth(sw, h, imp, "to-sw")
        self._veth(imp, "to-host", h, "eth0")
        for dev in ("to-sw", "to-host"):
            self._in(imp, ["ip", "link", "set", "dev", dev, "up"])
        spec = self.impair[h]
        link = argparse.Namespace(name=h, impair=spec)   # what testbed.Impairer reads
        self.impairers[h] = testbed.Impairer(self._ns(imp), link, "to-host", "to-sw",
                                             os.environ.get("INAE2E_IMPAIR_SEED", "1"))

    def _veth(self, node_a: str, dev_a: str, node_b: str, dev_b: str) -> None:
        """A veth pair created directly inside the two namespaces: dev_a in node_a's, dev_b in
        node_b's. Offloads off (af_packet would see partial checksums and GSO frames)."""
        run(["ip", "link", "add", "name", dev_a, "netns", self._ns(node_a), "type", "veth",
             "peer", "name", dev_b, "netns", self._ns(node_b)])
        for node, dev in ((node_a, dev_a), (node_b, dev_b)):
            self._in(node, ["ethtool", "-K", dev, "rx", "off", "tx", "off", "sg", "off", "tso",
                            "off", "gso", "off", "gro", "off"])
            if node.startswith("s"):
                self._in(node, ["ip", "link", "set", dev, "up"])

    # -- switches ----------------------------------------------------------------------------

    def start(self, timeout: float = 60) -> None:
        for sw in self.switches.values():
            sw.start()
        log(f"started {len(self.switches)} switches: " +
            ", ".join(f"{s.name} (pid {s.pid}, cpu {s.cpu})" for s in self.switches.values()))
        for sw in self.switches.values():
            try:
                wait_until(sw.ready, timeout, f"{sw.name}'s control API and links")
            except TestFailure as e:
                raise TestFailure(f"{e}\n{sw.name} log:\n{sw.log()}") from None
        log("every switch is up, every link up")
        if self.persist:
            with open(os.path.join(self.workdir, "state.json"), "w") as f:
                json.dump({"prefix": self.prefix, "exe": self.exe,
                           "pids": {s.name: s.pid for s in self.switches.values()}}, f)

    def metrics(self) -> dict[str, Metrics]:
        return {name: sw.metrics() for name, sw in self.switches.items()}

    def ping_all_pairs(self, count: int = 3, timeout: float = 60) -> None:
        """Every host reaches every other host (first resolving ARP along each path), then each
        pair exchanges `count` pings with no loss."""
        names = list(self.hosts)
        pairs = [(a, b) for a in names for b in names if a != b]
        # Warm-up: one ping per pair at once starts every ARP resolution on every path.
        procs = [self.hosts[a].popen(["ping", "-n", "-q", "-c", "1", "-W", "1", host_addr(b)])
                 for a, b in pairs]
        for p in procs:
            p.communicate(timeout=30)
        for a, b in pairs:
            self.hosts[a].wait_reachable(host_addr(b), timeout=timeout)
        procs = [(a, b, self.hosts[a].popen(["ping", "-n", "-q", "-c", str(count), "-i", "0.2",
                                              "-W", "2", host_addr(b)]))
                 for a, b in pairs]
        lost = []
        for a, b, p in procs:
            out, _ = p.communicate(timeout=60)
            m = re.search(r"(\d+) packets transmitted, (\d+) received", out)
            if not m or m.group(1) != m.group(2):
                lost.append(f"{a}->{b}: {m.group(0) if m else out.strip()}")
        check(not lost, f"all {len(pairs)} host pairs ping each other, {count} of {count}"
              + (f"; lost: {lost}" if lost else ""))

    def hops(self, a: str, b: str) -> int:
        """Switch hops from host a to host b, from the TTL of b's echo reply (64 on Linux)."""
        p = self.hosts[a].run(["ping", "-n", "-c", "1", "-W", "2", host_addr(b)], check_rc=False)
        m = re.search(r"ttl=(\d+)", p.stdout)
        if not m:
            raise TestFailure(f"{a} -> {b}: no echo reply: {p.stdout} {p.stderr}")
        return 64 - int(m.group(1))

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            for imp in self.impairers.values():
                imp.stop()
            for sw in self.switches.values() if hasattr(self, "switches") else []:
                rc = sw.stop()
                if rc not in (None, 0):
                    log(f"{sw.name} exited with {rc}; log:\n{sw.log()}")
        finally:
            remove_prefix(self.prefix)
            if os.environ.get("INAE2E_KEEP"):
                log(f"kept {self.workdir}")
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if self in testbed._live:
                testbed._live.remove(self)

    def __enter__(self) -> "Fig1":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ---------------------------------------------------------------------------------------------
# By hand: --up / --down

def default_exe() -> str:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for b in ("build-fig1", "build"):
        p = os.path.join(root, b, "src", "app", "inaswitch")
        if os.path.exists(p):
            return p
    return os.path.join(root, "build", "src", "app", "inaswitch")


def down(prefix: str) -> None:
    state = os.path.join(tempfile.gettempdir(), prefix, "state.json")
    pids: list[int] = []
    try:
        with open(state) as f:
            pids = [int(p) for p in json.load(f)["pids"].values()]
    except (OSError, ValueError, KeyError):
        pass
    # Only pids that are still the switches we started (their file prefix is ours).
    pids = [p for p in pids if p in _switch_pids(prefix)]
    remove_prefix(prefix, pids)
    shutil.rmtree(os.path.join(tempfile.gettempdir(), prefix), ignore_errors=True)
    print(f"{prefix}: removed")


def up(exe: str, prefix: str, results: str) -> None:
    if any(ns.startswith(prefix + "-") for ns in _netns_list()):
        sys.exit(f"{prefix} already exists; run --down first")
    try:
        fig = Fig1(exe, [figure1_job(), second_job()], results=results, prefix=prefix,
                   persist=True, bier_groups=EXAMPLE_GROUPS if results == "bier" else None)
    except BaseException:
        down(prefix)
        raise
    fig.ping_all_pairs(count=1)   # resolves ARP on every path, so the first packets get through
    print(f"\nFigure 1 testbed '{prefix}' is up (results by {results}). Hosts:")
    for h, host in fig.hosts.items():
        print(f"  {h}: {host_addr(h)}  ip netns exec {host.ns} ...")
    print("Switches (configs and logs in " + fig.workdir + "):")
    for s, sw in fig.switches.items():
        print(f"  {s}: pid {sw.pid}, {sw.addr}; metrics: ip netns exec {sw.ns} "
              f"curl -s 127.0.0.1:{API_PORT}/metrics")
    worker = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(exe))), "worker",
                          "ina-worker")
    j = fig.jobs[0]
    print("An AllReduce of job 1 (run all four at once):")
    for h in j.workers:
        print(f"  ip netns exec {fig.hosts[h].ns} " +
              " ".join(j.worker_cmd(worker, h, 262144, 1, 60)) + " &")
    print(f"Tear down: {sys.executable} {os.path.abspath(__file__)} --down")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--up", action="store_true", help="build and start the testbed, leave it up")
    g.add_argument("--down", action="store_true", help="stop and remove the testbed")
    ap.add_argument("--exe", default=default_exe(), help="path of inaswitch")
    ap.add_argument("--prefix", default=UP_PREFIX, help=f"name prefix (default {UP_PREFIX})")
    ap.add_argument("--bier", action="store_true", help="results by BIER instead of unicast")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces)")
    if a.down:
        down(a.prefix)
    else:
        up(a.exe, a.prefix, "bier" if a.bier else "unicast")


if __name__ == "__main__":
    main()
