# SPDX-License-Identifier: Apache-2.0
"""End-to-end testbed for inaswitch: Linux hosts in network namespaces, one veth pair per switch
port, and the switch on the root-namespace ends through DPDK's af_packet PMD.

    with Testbed(exe, [Port("p0", ipv4=["10.0.1.1/24"], host=Host("h1", "10.0.1.2/24")),
                       Port("p1", ipv4=["10.0.2.1/24"], host=Host("h2", "10.0.2.2/24"))]) as tb:
        tb.hosts["h1"].ping("10.0.2.2", count=5)
        m = tb.metrics()
        m.get("inaswitch_routed_packets_total")

Everything the testbed creates is named after the test process's pid (namespaces
"inae2e-<pid>-<host>", veths "ie<pid>s<i>"/"ie<pid>h<i>", EAL file prefix "inae2e<pid>") and
removed on close(), at interpreter exit and on SIGTERM/SIGINT. Leftovers of a test process that
died without cleaning up (SIGKILL) are removed by the next Testbed.
Every wait polls a condition with a deadline; nothing sleeps for synchronisation.

A port can have an impaired link, the stand-in for `tc netem` on kernels without sch_netem:
Port(..., impair=Impairment(loss=0.01, dup=0.01, reorder=0.05)) (or a tuple (up, down)) puts
impair.py between the host and the switch (host eth0 <-> h<i> in namespace
"inae2e-<pid>-impair" <-> s<i> <-> the switch's veth); port.impairer.counts() returns what it
dropped, duplicated and reordered in each direction.
"""

from __future__ import annotations

import atexit
import dataclasses
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, Callable

NS_PREFIX = "inae2e-"
VETH_PREFIX = "ie"
EAL_ARGS = ["-l", "0-1", "--no-huge", "-m", "512", "--no-pci", "--log-level", "*:warning"]
HUGEPAGE_SYSFS = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"


class TestFailure(AssertionError):
    pass


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(cond: bool, what: str) -> None:
    """Assert with a message that says what was expected; logs passing checks too."""
    if not cond:
        raise TestFailure(what)
    log(f"ok: {what}")


def run(cmd: list[str], *, timeout: float = 30, check_rc: bool = True,
        input: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=input)
    if check_rc and p.returncode != 0:
        raise TestFailure(f"command failed ({p.returncode}): {' '.join(cmd)}\n"
                          f"stdout: {p.stdout}\nstderr: {p.stderr}")
    return p


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05) -> Any:
    """Polls pred() until it returns something truthy, or fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while True:
        try:
            v = pred()
            if v:
                return v
        except TestFailure:
            raise  # the condition can never hold (e.g. the switch exited)
        except Exception as e:  # noqa: BLE001 - the condition may not be checkable yet
            last_exc = e
        if time.monotonic() > deadline:
            extra = f" (last error: {last_exc})" if last_exc else ""
            raise TestFailure(f"timed out after {timeout}s waiting for {what}{extra}")
        time.sleep(interval)


def kill_leftovers(procs) -> None:
    """Kills and reaps every process of `procs` still running: the cleanup of a test that
    stopped waiting for them (a failure, a timeout) before they exited."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(5)


def request_body(body: Any) -> tuple[bytes | None, dict[str, str]]:
    """An API request body (text as is, anything else as JSON) and its headers."""
    if body is None:
        return None, {}
    data = (body if isinstance(body, str) else json.dumps(body)).encode()
    return data, {"Content-Type": "application/json"}


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------------------------
# YAML: the switch reads YAML; this emits the small block-style subset the configs need.

def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    return json.dumps(str(v))  # a double-quoted YAML string


def to_yaml(v: Any, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(v, dict):
        out = ""
        for k, x in v.items():
            if isinstance(x, dict) and x:
                out += f"{pad}{k}:\n{to_yaml(x, indent + 2)}"
            elif isinstance(x, list) and x and any(isinstance(e, dict) for e in x):
                out += f"{pad}{k}:\n{to_yaml(x, indent + 2)}"
            elif isinstance(x, list):
                out += f"{pad}{k}: [{', '.join(_scalar(e) for e in x)}]\n"
            else:
                out += f"{pad}{k}: {_scalar(x)}\n"
        return out
    if isinstance(v, list):
        out = ""
        for e in v:
            body = to_yaml(e, indent + 2) if isinstance(e, dict) else f"{pad}  {_scalar(e)}\n"
            out += f"{pad}- {body[indent + 2:]}"
        return out
    return f"{pad}{_scalar(v)}\n"


# ---------------------------------------------------------------------------------------------
# Metrics

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    """A parsed Prometheus text scrape: get(name, **labels) sums every series of `name` whose
    labels include the given ones."""

    def __init__(self, text: str):
        self.text = text
        self.series: list[tuple[str, dict[str, str], float]] = []
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = _LINE.match(line)
            if not m:
                raise TestFailure(f"unparsable metrics line: {line!r}")
            labels = dict(_LABEL.findall(m.group(2) or ""))
            self.series.append((m.group(1), labels, float(m.group(3))))

    def get(self, name: str, **labels: str) -> float:
        found = False
        total = 0.0
        for n, l, v in self.series:
            if n == name and all(l.get(k) == str(x) for k, x in labels.items()):
                found = True
                total += v
        if not found:
            raise TestFailure(f"metric {name}{labels or ''} not in the scrape")
        return total

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {l[label]: v for n, l, v in self.series if n == name and label in l}

    def nonzero(self) -> list[tuple[str, dict[str, str], float]]:
        return [(n, l, v) for n, l, v in self.series if v != 0]


def delta(after: Metrics, before: Metrics, name: str, **labels: str) -> float:
    return after.get(name, **labels) - before.get(name, **labels)


# ---------------------------------------------------------------------------------------------
# Topology

@dataclasses.dataclass
class Host:
    name: str
    addr: str                 # "10.0.1.2/24"
    gw: str | None = None     # default route; None: the port's first ipv4 address
    addr6: str | None = None  # "2001:db8:1::2/64": IPv6 on (else the namespace has IPv6 off)
    gw6: str | None = None    # IPv6 default route; None: the port's first ipv6 address
    # Filled in by the testbed:
    ns: str = ""
    dev: str = ""
    mac: str = ""

    @property
    def ip(self) -> str:
        return self.addr.split("/")[0]

    @property
    def ip6(self) -> str:
        return (self.addr6 or "").split("/")[0]

    def cmd(self, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns] + cmd

    def run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return run(self.cmd(cmd), **kw)

    def popen(self, cmd: list[str], **kw) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        return subprocess.Popen(self.cmd(cmd), **kw)

    def ping(self, dst: str, count: int = 5, interval: float = 0.2, deadline: float | None = None,
             size: int | None = None) -> tuple[int, int]:
        """Returns (transmitted, received)."""
        deadline = deadline or max(5, int(count * interval) + 5)
        cmd = ["ping", "-n", "-q", "-c", str(count), "-i", str(interval), "-W", "1",
               "-w", str(int(deadline))]
        if size is not None:
            cmd += ["-s", str(size)]
        p = self.run(cmd + [dst], check_rc=False, timeout=deadline + 10)
        m = re.search(r"(\d+) packets transmitted, (\d+) received", p.stdout)
        if not m:
            raise TestFailure(f"cannot parse ping output: {p.stdout} {p.stderr}")
        tx, rx = int(m.group(1)), int(m.group(2))
        log(f"{self.name}: ping {dst} x{count}: {tx} sent, {rx} received")
        return tx, rx

    def wait_reachable(self, dst: str, timeout: float = 10) -> None:
        """Pings `dst` once at a time until one reply comes back (ARP resolution on the way)."""
        def once():
            return self.run(["ping", "-n", "-q", "-c", "1", "-W", "1", dst], check_rc=False,
                            timeout=5).returncode == 0
        wait_until(once, timeout, f"{self.name} to reach {dst}", interval=0.01)

    def read_stat(self, counter: str) -> int:
        """A counter of the host's interface, e.g. rx_packets."""
        return int(self.run(["cat", f"/sys/class/net/{self.dev}/statistics/{counter}"]).stdout)

    def wait_listening(self, port: int, proto: str = "tcp", timeout: float = 10) -> None:
        flag = "-ltnH" if proto == "tcp" else "-lunH"
        wait_until(lambda: f":{port} " in self.run(["ss", flag]).stdout + " ", timeout,
                   f"{proto} port {port} listening in {self.name}")

    def neigh_mac(self, ip: str) -> str | None:
        out = self.run(["ip", "-j", "neigh", "show", ip]).stdout
        for e in json.loads(out or "[]"):
            if e.get("lladdr"):
                return e["lladdr"]
        return None


@dataclasses.dataclass
class Port:
    name: str
    ipv4: list[str] = dataclasses.field(default_factory=list)
    ipv6: list[str] = dataclasses.field(default_factory=list)
    l2_group: str | None = None
    host: Host | None = None   # the host on the far end of this port's veth
    queues: int = 1            # RX queues (and af_packet queue pairs)
    ring_frames: int = 0       # af_packet ring frames per queue (0: the PMD's default, 512)
    chunk_steering: str | None = None  # the port's chunk_steering key (None: the default, auto)
    # Filled in by the testbed:
    index: int = 0
    dev: str = ""              # root-namespace veth end the switch opens
    mac: str = ""              # the switch port's MAC (af_packet takes the interface's)
    # An impaired link (impair.py between the host and the switch port): one Impairment for
    # both directions, or (up, down) = (host -> switch, switch -> host). None: a plain veth.
    impair: "Impairment | tuple[Impairment, Impairment] | None" = None
    impairer: "Impairer | None" = None   # filled in by the testbed when `impair` is set

    def kernel_stat(self, counter: str) -> int:
        """A counter of the root-namespace veth end, e.g. rx_packets: what the kernel handed
        towards the switch's af_packet socket (which may drop some when its ring is full; DPDK
        22.11's af_packet PMD does not report those in imissed)."""
        with open(f"/sys/class/net/{self.dev}/statistics/{counter}") as f:
            return int(f.read())


IMPAIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "impair.py")


@dataclasses.dataclass
class Impairment:
    """What impair.py does to one direction of a link: probabilities of loss, duplication and
    reordering (a held frame is overtaken by the next one, or released after reorder_ms), and
    a fixed delay. Decisions come from an RNG seeded per link and direction."""
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0
    reorder_ms: float = 5.0
    delay_ms: float = 0.0

    def spec(self) -> str:
        return (f"loss={self.loss},dup={self.dup},reorder={self.reorder},"
                f"reorder_ms={self.reorder_ms},delay_ms={self.delay_ms}")


class Impairer:
    """A running impair.py bridging a host's link to its switch port (in the testbed's
    "inae2e-<pid>-impair" namespace: host eth0 <-> h<i> ==impair.py== s<i> <-> the switch's
    ie<pid>s<i>). counts() and stop() return its counters as {"up": {...}, "down": {...}}, up
    being host -> switch."""

    def __init__(self, ns: str, port: "Port", host_if: str, switch_if: str, seed: str,
                 timeout: float = 10):
        up, down = port.impair if isinstance(port.impair, tuple) else (port.impair,) * 2
        self.name = port.name
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, PYTHON, "-B", IMPAIR, host_if, switch_if,
             "--a2b", up.spec(), "--b2a", down.spec(), "--seed", seed, "--name", port.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.final: dict | None = None
        self.stopped = False
        line = self._line(timeout)
        if line.strip() != "ready":
            self.proc.kill()
            raise TestFailure(f"impair.py on {port.name} did not start: {line!r} "
                              f"{self.proc.stderr.read()}")

    def _line(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        return self.proc.stdout.readline() if ready else ""

    @staticmethod
    def _parse(line: str) -> dict:
        d = json.loads(line)
        return {"up": d["a2b"], "down": d["b2a"], "seconds": d["seconds"]}

    def counts(self, timeout: float = 10) -> dict:
        """The counters now (SIGUSR1 makes impair.py print them)."""
        if self.stopped:
            return self.final or {}
        self.proc.send_signal(signal.SIGUSR1)
        line = self._line(timeout)
        if not line:
            raise TestFailure(f"impair.py on {self.name} did not report its counters "
                              f"(exit {self.proc.poll()})")
        return self._parse(line)

    def stop(self, timeout: float = 10) -> dict | None:
        """Stops it (SIGTERM); returns its final counters."""
        if self.stopped:
            return self.final
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate(timeout=5)
        lines = [x for x in out.splitlines() if x.startswith("{")]
        self.final = self._parse(lines[-1]) if lines else None
        return self.final


def netem_available() -> tuple[bool, str]:
    """Whether `tc qdisc add ... netem` works on this kernel (tried on lo in a scratch
    namespace named after the pid); (False, tc's error) if not."""
    ns = f"{NS_PREFIX}{os.getpid()}-netemprobe"
    run(["ip", "netns", "add", ns])
    try:
        p = run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                 "delay", "1ms"], check_rc=False)
        return p.returncode == 0, (p.stderr or p.stdout).strip()
    finally:
        run(["ip", "netns", "del", ns], check_rc=False)


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def cleanup_stale() -> None:
    """Removes namespaces, veths and DPDK runtime dirs of e2e processes that no longer exist."""
    me = os.getpid()
    out = run(["ip", "netns", "list"], check_rc=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(re.escape(NS_PREFIX) + r"(\d+)-", name)
        if m and int(m.group(1)) != me and not _pid_alive(int(m.group(1))):
            run(["ip", "netns", "del", name], check_rc=False)
    out = run(["ip", "-o", "link", "show"], check_rc=False).stdout
    for m in re.finditer(r"^\d+: (" + VETH_PREFIX + r"(\d+)[sh]\d+)[@:]", out, re.M):
        if int(m.group(2)) != me and not _pid_alive(int(m.group(2))):
            run(["ip", "link", "del", m.group(1)], check_rc=False)
    if os.path.isdir("/var/run/dpdk"):
        for d in os.listdir("/var/run/dpdk"):
            m = re.match(r"inae2e(\d+)", d)
            if m and int(m.group(1)) != me and not _pid_alive(int(m.group(1))):
                shutil.rmtree(os.path.join("/var/run/dpdk", d), ignore_errors=True)
    with open("/proc/mounts") as f:
        mounts = [line.split()[1] for line in f if line.split()[2:3] == ["hugetlbfs"]]
    for mnt in mounts:
        m = re.match(r"/tmp/inae2e(\d+)-huge-", mnt)
        if m and int(m.group(1)) != me and not _pid_alive(int(m.group(1))):
            _release_hugetlbfs(mnt)
    for name in os.listdir("/tmp"):
        m = re.match(r"inae2e(\d+)-", name)
        if not m or int(m.group(1)) == me or _pid_alive(int(m.group(1))):
            continue
        path = os.path.join("/tmp", name)
        if name.endswith("-hugepages-added"):
            # Pages a killed test reserved: hand them back.
            try:
                with open(path) as f:
                    added = int(f.read())
                Hugepages._set_nr(max(0, Hugepages._nr() - added))
                log(f"handed back {added} hugepages reserved by killed test {m.group(1)}")
            except (OSError, ValueError, Hugepages.Unavailable):
                pass
            os.unlink(path)
        elif os.path.isdir(path) and not os.path.ismount(path):
            shutil.rmtree(path, ignore_errors=True)


def _release_hugetlbfs(mnt: str) -> None:
    for f in os.listdir(mnt):
        try:
            os.unlink(os.path.join(mnt, f))
        except OSError:
            pass
    run(["umount", mnt], check_rc=False)
    try:
        os.rmdir(mnt)
    except OSError:
        pass


class Hugepages:
    """`mb` MB of 2 MB hugepages on a private hugetlbfs mount, for one test. Pages that are not
    free are reserved (nr_hugepages += missing) and handed back on close(), which also removes
    the EAL's page files and the mount. Raises Unavailable if the kernel cannot provide them."""

    class Unavailable(Exception):
        pass

    def __init__(self, mb: int):
        self.added = 0
        self.dir = ""
        need = (mb + 1) // 2
        free = free_hugepage_mb() // 2
        try:
            if free < need:
                if not os.path.exists(HUGEPAGE_SYSFS):
                    raise Hugepages.Unavailable("no 2 MB hugepage support in this kernel")
                current = self._nr()
                self._set_nr(current + need - free)
                self.added = max(0, self._nr() - current)
                with open(self._record(), "w") as f:  # for cleanup_stale, if we are killed
                    f.write(str(self.added))
                got = free_hugepage_mb() // 2
                if got < need:
                    raise Hugepages.Unavailable(
                        f"asked the kernel for {need - free} more 2 MB hugepages, {got} free "
                        f"after (memory too fragmented or a limit)")
                log(f"reserved {self.added} hugepages for this test (nr_hugepages "
                    f"{current} -> {current + self.added}); they are released at the end")
            self.dir = tempfile.mkdtemp(prefix=f"inae2e{os.getpid()}-huge-")
            p = run(["mount", "-t", "hugetlbfs", "-o", "pagesize=2M", "nodev", self.dir],
                    check_rc=False)
            if p.returncode != 0:
                raise Hugepages.Unavailable(f"cannot mount hugetlbfs: {p.stderr.strip()}")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _record() -> str:
        return f"/tmp/inae2e{os.getpid()}-hugepages-added"

    @staticmethod
    def _nr() -> int:
        with open(HUGEPAGE_SYSFS) as f:
            return int(f.read())

    @staticmethod
    def _set_nr(n: int) -> None:
        try:
            with open(HUGEPAGE_SYSFS, "w") as f:
                f.write(str(n))
        except OSError as e:
            raise Hugepages.Unavailable(f"cannot change {HUGEPAGE_SYSFS}: {e}") from None

    def close(self) -> None:
        if self.dir and os.path.ismount(self.dir):
            _release_hugetlbfs(self.dir)
        elif self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = ""
        if self.added:
            try:
                self._set_nr(max(0, self._nr() - self.added))
            except Hugepages.Unavailable as e:
                log(f"could not hand back {self.added} hugepages: {e}")
            self.added = 0
            try:
                os.unlink(self._record())
            except OSError:
                pass


def free_hugepage_mb() -> int:
    """Free memory in the default-size hugepage pool, in MB."""
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = v.split()
    try:
        return int(info["HugePages_Free"][0]) * int(info["Hugepagesize"][0]) // 1024
    except (KeyError, ValueError):
        return 0


_live: list["Testbed"] = []
_handlers_installed = False


def _on_signal(signum, _frame):
    log(f"signal {signum}: tearing down")
    for tb in list(_live):
        tb.close()
    sys.exit(128 + signum)


def _install_handlers() -> None:
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(lambda: [tb.close() for tb in list(_live)])
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGHUP, _on_signal)


class Testbed:
    """Creates the namespaces, veths and config; start() runs the switch."""

    def __init__(self, exe: str, ports: list[Port], *, routes: list[dict] | None = None,
                 neighbours: list[dict] | None = None, extra: dict | None = None,
                 qdisc_bypass: bool = True, start: bool = True, tag: str = "",
                 huge_dir: str | None = None, args: list[str] | None = None):
        _install_handlers()
        cleanup_stale()
        self.exe = os.path.abspath(exe)
        self.ports = ports
        self.hosts: dict[str, Host] = {}
        self.routes = routes or []
        self.neighbours = neighbours or []
        self.extra = extra or {}
        self.qdisc_bypass = qdisc_bypass
        # --no-huge by default: the tests must run on a host without hugepages. With hugepages
        # (a hugetlbfs mount, see Hugepages) the EAL memory is shareable, so secondary
        # processes (dpdk-dumpcap) can attach.
        self.huge_dir = huge_dir
        self.args = args or []
        self.pid = os.getpid()
        self.file_prefix = f"inae2e{self.pid}{tag}"
        self.api_port = free_tcp_port()
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.workdir = tempfile.mkdtemp(prefix=f"inae2e{self.pid}-")
        self.config_path = os.path.join(self.workdir, "switch.yaml")
        self.log_path = os.path.join(self.workdir, "switch.log")
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self._namespaces: list[str] = []
        self._veths: list[str] = []
        self._impair_ns = ""
        self.impairers: list[Impairer] = []
        self._closed = False
        _live.append(self)
        try:
            self._build_network()
            self.write_config()
            if start:
                self.start()
        except BaseException:
            self.close()
            raise

    # -- network -----------------------------------------------------------------------------

    def _build_network(self) -> None:
        for i, port in enumerate(self.ports):
            port.index = i
            port.dev = f"{VETH_PREFIX}{self.pid}s{i}"
            host_dev = f"{VETH_PREFIX}{self.pid}h{i}"
            run(["ip", "link", "add", port.dev, "type", "veth", "peer", "name", host_dev])
            self._veths.append(port.dev)
            self._quiet_root_end(port.dev)
            port.mac = self._mac(port.dev)
            h = port.host
            if h is None:
                # A port with no host still needs a carrier: its peer stays in the root
                # namespace, up, with nothing configured on it.
                self._quiet_root_end(host_dev)
                continue
            h.ns = f"{NS_PREFIX}{self.pid}-{h.name}"
            h.dev = "eth0"
            if h.gw is None and port.ipv4:
                h.gw = port.ipv4[0].split("/")[0]
            self.hosts[h.name] = h
            run(["ip", "netns", "add", h.ns])
            self._namespaces.append(h.ns)
            if port.impair is None:
                run(["ip", "link", "set", host_dev, "netns", h.ns, "name", h.dev])
            else:
                self._impaired_link(port, host_dev)
            for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
                h.run(["sysctl", "-qw", f"{key}={0 if h.addr6 else 1}"])
            self._offloads_off(h.dev, h)
            h.run(["ip", "link", "set", "lo", "up"])
            h.run(["ip", "addr", "add", h.addr, "dev", h.dev])
            if h.addr6:
                # No DAD wait; no router advertisements to listen for (the route is static).
                h.run(["sysctl", "-qw", f"net.ipv6.conf.{h.dev}.accept_ra=0"])
                h.run(["ip", "-6", "addr", "add", h.addr6, "dev", h.dev, "nodad"])
            h.run(["ip", "link", "set", h.dev, "up"])
            if h.gw:
                h.run(["ip", "route", "add", "default", "via", h.gw, "dev", h.dev])
            if h.addr6 and h.gw6 is None and port.ipv6:
                h.gw6 = port.ipv6[0].split("/")[0]
            if h.addr6 and h.gw6:
                h.run(["ip", "-6", "route", "add", "default", "via", h.gw6, "dev", h.dev])
            h.mac = json.loads(h.run(["ip", "-j", "link", "show", h.dev]).stdout)[0]["address"]
        for port in self.ports:
            if port.impair is not None:
                port.impairer = Impairer(self._impair_ns, port, f"h{port.index}",
                                         f"s{port.index}",
                                         os.environ.get("INAE2E_IMPAIR_SEED", "1"))
                self.impairers.append(port.impairer)
                up, down = port.impair if isinstance(port.impair, tuple) else \
                    (port.impair,) * 2
                log(f"{port.name}: {port.host.name} <-> impair.py <-> switch (up "
                    f"{up.spec()}; down {down.spec()})")

    def _impaired_link(self, port: Port, host_dev: str) -> None:
        """host eth0 <-> h<i> [impair ns] s<i> <-> port.dev: the root-namespace pair's far end
        becomes s<i> in the impair namespace, and a second pair joins h<i> there to the host's
        eth0. impair.py (started once every host is set up) bridges h<i> and s<i>."""
        h = port.host
        assert h is not None
        if not self._impair_ns:
            self._impair_ns = f"{NS_PREFIX}{self.pid}-impair"
            run(["ip", "netns", "add", self._impair_ns])
            self._namespaces.append(self._impair_ns)
            for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
                run(["ip", "netns", "exec", self._impair_ns, "sysctl", "-qw", f"{key}=1"])
        ns = self._impair_ns
        hi, si = f"h{port.index}", f"s{port.index}"
        run(["ip", "link", "set", host_dev, "netns", ns, "name", si])
        run(["ip", "-n", ns, "link", "add", hi, "type", "veth", "peer", "name", h.dev,
             "netns", h.ns])
        for dev in (hi, si):
            run(["ip", "netns", "exec", ns, "ethtool", "-K", dev, "rx", "off", "tx", "off", "sg",
                 "off", "tso", "off", "gso", "off", "gro", "off"])
            run(["ip", "-n", ns, "link", "set", dev, "up"])

    def _offloads_off(self, dev: str, host: Host | None = None) -> None:
        # Without this the kernel hands af_packet TCP/UDP packets with partial checksums and
        # 64 KB GSO frames.
        cmd = ["ethtool", "-K", dev, "rx", "off", "tx", "off", "sg", "off", "tso", "off",
               "gso", "off", "gro", "off"]
        (host.run if host else run)(cmd)

    def _quiet_root_end(self, dev: str) -> None:
        """The root-namespace end belongs to the switch: the kernel must not speak on it
        (IPv6 ND/MLD), nor answer ARP or forward what arrives on it. It has no IPv4 address."""
        run(["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
        run(["sysctl", "-qw", f"net.ipv4.conf.{dev}.forwarding=0"])
        run(["sysctl", "-qw", f"net.ipv4.conf.{dev}.arp_ignore=8"])
        self._offloads_off(dev)
        run(["ip", "link", "set", dev, "up"])

    @staticmethod
    def _mac(dev: str) -> str:
        return json.loads(run(["ip", "-j", "link", "show", dev]).stdout)[0]["address"]

    # -- config ------------------------------------------------------------------------------

    def port(self, name: str) -> Port:
        return next(p for p in self.ports if p.name == name)

    def config_dict(self, routes: list[dict] | None = None) -> dict:
        ports = []
        for p in self.ports:
            devargs = f"net_af_packet{p.index},iface={p.dev}"
            if self.qdisc_bypass:
                devargs += ",qdisc_bypass=1"
            if p.queues > 1:
                devargs += f",qpairs={p.queues}"
            if p.ring_frames:
                devargs += f",framecnt={p.ring_frames}"
            d: dict[str, Any] = {"name": p.name, "devargs": devargs}
            if p.queues > 1:
                d["rx_queues"] = p.queues
            if p.ipv4:
                d["ipv4"] = list(p.ipv4)
            if p.ipv6:
                d["ipv6"] = list(p.ipv6)
            if p.l2_group:
                d["l2_group"] = p.l2_group
            if p.chunk_steering:
                d["chunk_steering"] = p.chunk_steering
            ports.append(d)
        cfg: dict[str, Any] = {
            "version": 1,
            "eal": {"args": EAL_ARGS if not self.huge_dir else
                    ["-l", "0-1", "--huge-dir", self.huge_dir, "--no-pci", "--log-level",
                     "*:warning"]},
            "ports": ports,
            "dataplane": {"idle_sleep_us": 20},
            "control": {"listen": f"127.0.0.1:{self.api_port}"},
        }
        if self.huge_dir:
            cfg["mempool"] = {"mbufs": 2047, "cache_size": 64}
        r = self.routes if routes is None else routes
        if r:
            cfg["routes"] = r
        if self.neighbours:
            cfg["neighbours"] = self.neighbours
        for k, v in self.extra.items():
            if isinstance(v, dict) and isinstance(cfg.get(k), dict):
                cfg[k] = {**cfg[k], **v}
            else:
                cfg[k] = v
        return cfg

    def config_yaml(self, **kw) -> str:
        return "# SPDX-License-Identifier: Apache-2.0\n# generated by tests/e2e/testbed.py\n" + \
            to_yaml(self.config_dict(**kw))

    def write_config(self, text: str | None = None) -> None:
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text if text is not None else self.config_yaml())
        os.replace(tmp, self.config_path)

    # -- switch ------------------------------------------------------------------------------

    def start(self, timeout: float = 30) -> None:
        self._log_file = open(self.log_path, "w")
        cmd = [self.exe, "-c", self.config_path, "--file-prefix", self.file_prefix] + self.args
        log(f"starting: {' '.join(cmd)}")
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)

        def ready():
            if self.proc.poll() is not None:
                raise TestFailure(f"switch exited with {self.proc.returncode}:\n{self.switch_log()}")
            return self.http("GET", "/api/v1/status", timeout=1)[0] == 200
        try:
            wait_until(ready, timeout, "the switch's control API")
        except TestFailure as e:
            raise TestFailure(f"{e}\nswitch log:\n{self.switch_log()}") from None
        # Links come up asynchronously; wait until the switch sees every port up.
        wait_until(lambda: all(v == 1 for v in self.metrics().by_label(
            "inaswitch_port_link_up", "port").values()), 10, "every port's link up")
        log(f"switch up (pid {self.proc.pid}, API {self.api})")

    def switch_log(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def stop(self, timeout: float = 10) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log("switch ignored SIGTERM; killing it")
                self.proc.kill()
                self.proc.wait(5)
        rc = self.proc.returncode
        if self._log_file:
            self._log_file.close()
            self._log_file = None
        return rc

    # -- API ---------------------------------------------------------------------------------

    def http(self, method: str, path: str, body: Any = None,
             timeout: float = 5) -> tuple[int, str]:
        data, headers = request_body(body)
        req = urllib.request.Request(self.api + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def api_json(self, method: str, path: str, body: Any = None,
                 expect: int | None = 200) -> Any:
        status, text = self.http(method, path, body)
        if expect is not None and status != expect:
            raise TestFailure(f"{method} {path}: HTTP {status}, expected {expect}: {text}")
        return json.loads(text) if text.strip() else None

    def metrics_text(self) -> str:
        status, text = self.http("GET", "/metrics")
        if status != 200:
            raise TestFailure(f"GET /metrics: HTTP {status}")
        return text

    def metrics(self) -> Metrics:
        return Metrics(self.metrics_text())

    def wait_metric(self, name: str, pred: Callable[[float], bool], timeout: float = 10,
                    **labels: str) -> float:
        """Polls until pred(value of name{labels}) holds; returns the value."""
        holder = {}

        def ok():
            holder["v"] = self.metrics().get(name, **labels)
            return pred(holder["v"])
        try:
            wait_until(ok, timeout, f"{name}{labels or ''} (last value {holder.get('v')})")
        except TestFailure as e:
            raise TestFailure(f"{e}") from None
        return holder["v"]

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            rc = self.stop()
            if rc not in (None, 0):
                log(f"switch exited with {rc}; log:\n{self.switch_log()}")
        finally:
            for imp in self.impairers:
                imp.stop()
            for ns in self._namespaces:
                run(["ip", "netns", "del", ns], check_rc=False)
            for dev in self._veths:
                if os.path.exists(f"/sys/class/net/{dev}"):
                    run(["ip", "link", "del", dev], check_rc=False)
            shutil.rmtree(f"/var/run/dpdk/{self.file_prefix}", ignore_errors=True)
            if self.huge_dir:  # the EAL leaves its page files behind, holding the pages
                for f in os.listdir(self.huge_dir):
                    if f.startswith(self.file_prefix):
                        os.unlink(os.path.join(self.huge_dir, f))
            if os.environ.get("INAE2E_KEEP"):
                log(f"kept {self.workdir}")
            else:
                shutil.rmtree(self.workdir, ignore_errors=True)
            if self in _live:
                _live.remove(self)

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None and self.proc is not None:
            log(f"switch log:\n{self.switch_log()}")
        self.close()


UDPFLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "udpflow.py")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class UdpFlow:
    """A counted UDP stream src -> dst (udpflow.py): starts the receiver, waits until it is
    bound, then starts the paced sender. result() waits for both and merges their reports."""

    def __init__(self, src: Host, dst: Host, count: int, rate: float, port: int = 9000,
                 size: int = 64, idle: float = 2.0):
        self.count, self.rate = count, rate
        self.receiver = dst.popen([PYTHON, "-B", UDPFLOW, "recv", "--bind", dst.ip, "--port",
                                   str(port), "--count", str(count), "--idle", str(idle),
                                   "--timeout", str(count / rate + 60)])
        self.sender: subprocess.Popen | None = None
        try:
            ready, _, _ = select.select([self.receiver.stdout], [], [], 10)
            line = self.receiver.stdout.readline() if ready else ""
            if line.strip() != "ready":
                raise TestFailure(f"UDP receiver in {dst.name} did not start: {line!r} "
                                  f"{self.receiver.stderr.read() if self.receiver.poll() else ''}")
            self.sender = src.popen([PYTHON, "-B", UDPFLOW, "send", "--dst", dst.ip, "--port",
                                     str(port), "--count", str(count), "--rate", str(rate),
                                     "--size", str(size)])
        except BaseException:
            self.kill()
            raise

    def sending(self) -> bool:
        return self.sender is not None and self.sender.poll() is None

    def result(self) -> dict:
        timeout = self.count / self.rate + 60
        try:
            out, err = self.sender.communicate(timeout=timeout)
            if self.sender.returncode != 0:
                raise TestFailure(f"UDP sender failed: {err}")
            sent = json.loads(out.strip().splitlines()[-1])
            out, err = self.receiver.communicate(timeout=timeout)
            if self.receiver.returncode != 0:
                raise TestFailure(f"UDP receiver failed: {err}")
            got = json.loads(out.strip().splitlines()[-1])
        finally:
            self.kill()
        return {**sent, **got}

    def kill(self) -> None:
        for p in (self.sender, self.receiver):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(5)


def two_subnets(exe: str, **kw) -> Testbed:
    """h1 10.0.1.2/24 - p0 10.0.1.1 [switch] p1 10.0.2.1 - h2 10.0.2.2/24"""
    return Testbed(exe, [
        Port("p0", ipv4=["10.0.1.1/24"], host=Host("h1", "10.0.1.2/24")),
        Port("p1", ipv4=["10.0.2.1/24"], host=Host("h2", "10.0.2.2/24")),
    ], **kw)


def require_root() -> None:
    if os.geteuid() != 0:
        print("e2e tests need root (network namespaces); skipping", flush=True)
        sys.exit(77)  # meson: skipped


def main(test: Callable[[str], None]) -> None:
    """Entry point for a test script: `test(exe)`; exit 0 on success, 1 on failure."""
    require_root()
    if len(sys.argv) < 2:
        print(f"usage: {sys.argv[0]} PATH/TO/inaswitch", file=sys.stderr)
        sys.exit(2)
    start = time.monotonic()
    try:
        test(sys.argv[1])
    except TestFailure as e:
        log(f"FAIL: {e}")
        sys.exit(1)
    log(f"PASS ({time.monotonic() - start:.1f}s)")
