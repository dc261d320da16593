# SPDX-License-Identifier: Apache-2.0
"""A lab of qemu VMs running Linux's own RDMA stack (rdma_rxe, Soft-RoCE), joined by host tap
devices through a Linux bridge or through inaswitch: the project's RoCEv2 interop harness.

    from lab import Lab
    with Lab(2, fabric="inaswitch", switch_exe="build/src/app/inaswitch") as lab:
        a, b = lab.vms                        # .name .ip .mac .gid_index .tap
        server = a.start(f"ibv_rc_pingpong -d rxe0 -g {a.gid_index}")
        a.wait_tcp_listen(18515)              # polls in the guest, no fixed sleep
        rc, out = b.run(f"ibv_rc_pingpong -d rxe0 -g {b.gid_index} {a.ip}", timeout=120)
        rc, out = server.wait(timeout=60)
        lab.switch.metrics().get("inaswitch_bridged_packets_total")

Topology. Everything lives in a private network namespace "inavm-<pid>-<n>" that the lab
creates and deletes; no address exists outside it. VM i has eth0 on tap<i> (qemu -netdev tap,
vnet_hdr=off: a userspace forwarder on the taps must see finished checksums and no GSO frames)
and rxe0 on eth0.
  fabric="bridge"     tap0..tapN-1 in a Linux bridge (the reference: no switch at all).
  fabric="inaswitch"  inaswitch in the namespace, net_af_packet port p<i> on tap<i>, EAL
                      --no-huge, its own --file-prefix, the control API on 127.0.0.1:9464 of
                      the namespace (reached from here through a socket made inside it).
  routed=False        one subnet 10.77.0.0/24, VM i = 10.77.0.<i+2>; with inaswitch every port
                      is in the L2 group "vms".
  routed=True         VM i alone in 10.77.<i+1>.0/24 as .2, its gateway the switch port's .1
                      (inaswitch answers ARP and routes between them). Needs fabric="inaswitch".
  switch_config       None: the generated config above; a str: used verbatim; a callable
                      f(default_config_dict, lab) returning a dict or YAML text (add jobs etc.).
  links=["sw"]        veth pairs made in the namespace before the switch starts ("sw0" <-> "sw1"
                      for "sw", offloads off): links between switch processes (lab.add_switch),
                      each end a net_af_packet port of one of them or of e2e's impair.py.
  guest_api=True      every VM also gets eth1 on qemu's user-mode network (restrict=on: it
                      reaches nothing else), where GUEST_API_IP:API_PORT is forwarded to the
                      switch's control API in the namespace (api_relay.py per connection):
                      lab.guest_api_url is "http://10.0.2.100:9464" for the guests.

Guests. Debian 12's kernel boots the initramfs of image.py by PVH under `-accel tcg`; its /init
(guest_init.sh) loads rdma_rxe, configures eth0 and rxe0, and then serves commands on a
virtio-serial port: vm.run() and vm.start() send a shell script, the guest runs it in its own
session and returns its exit status and combined output. The serial console (kernel messages)
goes to a log file (vm.console()). `extra_files` are host files for every guest (executables
land in /usr/local/bin with their shared libraries), as a second cpio after the cached base.

Also: vm.netem("loss 1%", direction="egress"|"ingress"|"both") impairs a guest's link (netem
in the guest kernel; None removes it); vm.drop_sent_roce(opcode, aeth_msn) /
vm.hold_sent_roce(opcode) (the sender's stack sees those sent) /
vm.drop_received_roce(opcode, imm_count) drop RoCE frames by BTH opcode (an ACK's MSN, a
WRITE's immediate count) with a tc u32 rule in the guest until called with None (the count back);
lab.capture(bpf) runs tcpdump on every tap (both directions, what the switch sends
included) and stop() returns the pcaps; lab.reach_all() has every VM resolve every other by
ARP; lab.readdress(routed) moves a running inaswitch lab between L2 and routed addressing;
lab.reload_switch(switch_config) has the running switch apply another config;
lab.add_switch(exe, config_text, tag) starts one more inaswitch in the namespace (its own
--file-prefix, config, log and API address 127.0.0.<n>): several switches on the lab's taps and
links, e.g. a tree of two.

Waiting. Nothing sleeps for synchronisation: boots wait for the guest's READY message, commands
for their exit status, switch start for its API and links, captures for tcpdump's "listening"
line, each with a deadline. Boots take 4 s on a quiet machine and 8-50 s under load.

Resources. At most MAX_VMS (3, env INA_ROCE_VM_MAX) VMs run at once on the machine across all
processes using this module: a lab takes its slots (flock) before booting and waits for them.
close() (also at exit, on SIGTERM/SIGINT/SIGHUP, and after a failed start) kills every process
the lab started by its process group, deletes the namespace and the scratch directory
(INA_ROCE_VM_KEEP=1 keeps the directory: console logs, switch log, captures).
"""

from __future__ import annotations

import base64
import fcntl
import http.client
import ipaddress
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
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
sys.path.insert(0, HERE)

import image as guest_image_mod  # noqa: E402
import fig1  # noqa: E402
import testbed  # noqa: E402
from testbed import EAL_ARGS, Metrics, TestFailure, check, log, to_yaml, wait_until  # noqa: E402,F401

NS_PREFIX = "inavm-"
MAX_VMS = int(os.environ.get("INA_ROCE_VM_MAX", "3"))
SLOT_DIR = "/run/inaswitch-roce-vm"
API_PORT = fig1.API_PORT     # inaswitch's control API, on 127.0.0.1 inside the namespace
QEMU = "qemu-system-x86_64"
# Per tap: bursts toward a slow guest outrun tcpdump's default 2 MiB. No --immediate-mode: with
# it libpcap takes TPACKET_V2 with one 64 KiB slot per frame (512 frames in 32 MiB: a tcpdump
# starved for a moment on a loaded machine dropped thousands, roce-vm-forward failed on it);
# TPACKET_V3 packs frames into blocks (~30,000 RoCE frames), and -U still writes each one
# once its block is handed over (within the block timeout, which Capture's drain waits out).
CAPTURE_BUFFER_KIB = 32768
PERFTEST_PORT = 18515        # perftest's and ibv_*_pingpong's out-of-band TCP port
GUEST_API_IP = "10.0.2.100"  # guest_api: where a guest reaches the switch's control API
GUEST_API_NET = "10.0.2.15/24"  # guest_api: the guests' eth1 (qemu user-mode network)


# ---------------------------------------------------------------------------------------------
# Processes: each started in its own session, so close() can kill it and all its children.

def _popen(cmd: list[str], **kw) -> subprocess.Popen:
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.Popen(cmd, start_new_session=True, **kw)


def _kill_group(p: subprocess.Popen, term_timeout: float = 5) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(term_timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(10)


def _sh(cmd: list[str], timeout: float = 30, check_rc: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check_rc and p.returncode != 0:
        raise TestFailure(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def _tail(path: str, n: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - n))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# A guest's ifb0, up: the module creates it (a plain `ip link add` races the module's own ifb0).
IFB0_UP = ["modprobe ifb numifbs=1", "[ -e /sys/class/net/ifb0 ]", "ip link set ifb0 up"]


# ---------------------------------------------------------------------------------------------
# VM slots shared by every process on the machine.

class _Slots:
    """n of the MAX_VMS slot locks, taken all at once (a gate lock serialises takers so two
    labs cannot each hold half of what they need)."""

    def __init__(self, n: int, timeout: float):
        if n > MAX_VMS:
            raise TestFailure(f"a lab of {n} VMs exceeds the machine's limit of {MAX_VMS}")
        os.makedirs(SLOT_DIR, exist_ok=True)
        self.held: list[Any] = []

        def take() -> bool:
            with open(os.path.join(SLOT_DIR, "gate"), "w") as gate:
                fcntl.flock(gate, fcntl.LOCK_EX)
                for i in range(MAX_VMS):
                    f = open(os.path.join(SLOT_DIR, f"slot{i}"), "w")
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        f.close()
                        continue
                    self.held.append(f)
                    if len(self.held) == n:
                        return True
                self.release()
                return False
        if not take():
            log(f"waiting for {n} VM slots (another lab holds them)")
            wait_until(take, timeout, f"{n} free VM slots of {MAX_VMS}", interval=0.5)
            log("VM slots free")

    def release(self) -> None:
        for f in self.held:
            f.close()
        self.held = []


# ---------------------------------------------------------------------------------------------
# Guests

class GuestJob:
    """A command running in a guest. wait() returns (exit status, combined stdout+stderr)."""

    def __init__(self, vm: "VM", job_id: int, cmd: str):
        self.vm, self.id, self.cmd = vm, job_id, cmd
        self.chunks: list[bytes] = []
        self.rc: int | None = None
        self.t_start = time.monotonic()
        self.t_end: float | None = None

    def done(self) -> bool:
        with self.vm._cond:
            return self.rc is not None

    @property
    def seconds(self) -> float | None:
        return None if self.t_end is None else self.t_end - self.t_start

    def output(self) -> str:
        with self.vm._cond:
            return b"".join(self.chunks).decode("utf-8", "replace")

    def wait(self, timeout: float = 60) -> tuple[int, str]:
        """Waits for the command to end. On timeout the guest kills its session and this
        raises TestFailure with whatever it had printed."""
        if not self.vm._wait_for(lambda: self.rc is not None, timeout):
            self.kill()
            self.vm._wait_for(lambda: self.rc is not None, 15)
            raise TestFailure(f"{self.vm.name}: `{self.cmd}` did not finish within {timeout}s; "
                              f"output:\n{self.output()[-3000:]}")
        return self.rc, self.output()

    def kill(self) -> None:
        """Kills the command's session in the guest (nothing if it ended or the VM is gone)."""
        if not self.done() and not self.vm._stopped:
            try:
                self.vm._send(f"K {self.id}")
            except TestFailure:
                pass  # the guest went away: nothing left to kill


class VM:
    """One qemu guest. Attributes: name, index, ip, prefix_len, gw, mac, tap, gid_index."""

    def __init__(self, lab: "Lab", index: int, ip: str, prefix_len: int, gw: str | None):
        self.lab, self.index = lab, index
        self.name = f"vm{index}"
        self.ip, self.prefix_len, self.gw = ip, prefix_len, gw
        self.mac = f"52:54:00:4d:00:{index + 1:02x}"
        self.api_mac = f"52:54:00:a1:00:{index + 1:02x}"  # guest_api's eth1
        self.tap = f"tap{index}"
        self.gid_index: int | None = None
        self.ip6: str | None = None        # add_ipv6()
        self.gw6: str | None = None
        self.gid6_index: int | None = None
        self.boot_seconds: float | None = None
        self.guest_uptime: float | None = None
        d = os.path.join(lab.workdir, self.name)
        os.makedirs(d)
        self.console_path = os.path.join(d, "console.log")
        self.qemu_log = os.path.join(d, "qemu.log")
        self.ctl_path = os.path.join(d, "ctl.sock")
        self.proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._cond = threading.Condition()
        self._jobs: dict[int, GuestJob] = {}
        self._next_id = 0
        self._ready = False
        self._failed: str | None = None
        self._eof = False
        self._stopped = False

    # -- lifecycle ---------------------------------------------------------------------------

    def boot(self, kernel: str, initrd: str, mem_mb: int) -> None:
        append = (f"console=ttyS0 quiet panic=-1 ina.name={self.name} "
                  f"ina.ip={self.ip}/{self.prefix_len}" + (f" ina.gw={self.gw}" if self.gw else "")
                  + (f" ina.api={GUEST_API_NET},{self.api_mac}" if self.lab.guest_api else ""))
        cmd = ["ip", "netns", "exec", self.lab.ns, QEMU, "-accel", "tcg", "-m", str(mem_mb),
               "-smp", "1", "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
               "-kernel", kernel, "-initrd", initrd, "-append", append,
               "-serial", f"file:{self.console_path}",
               "-netdev", f"tap,id=net0,ifname={self.tap},script=no,downscript=no,vnet_hdr=off",
               # romfile=: no iPXE option ROM, the kernel is booted directly. event_idx=off:
               # with event-index notification a guest's data NIC stopped transmitting for
               # good about once in 130 loaded rounds of roce-vm-switch-allreduce's fp32 round
               # (rxe's packets queued in eth0's TX ring, nothing more reached the tap; session
               # 19, docs/rdma.md), none in 400 with it off (qemu 7.2, TCG).
               "-device", f"virtio-net-pci,netdev=net0,mac={self.mac},romfile=,event_idx=off",
               *self._api_nic(),
               "-device", "virtio-serial-pci,id=vser0",
               "-chardev", f"socket,id=ctl,path={self.ctl_path},server=on,wait=off",
               "-device", "virtserialport,bus=vser0.0,chardev=ctl,name=ina.ctl"]
        self.t_boot = time.monotonic()
        with open(self.qemu_log, "w") as qlog:
            self.proc = _popen(cmd, stdout=qlog, stderr=subprocess.STDOUT)

        def connect():
            if self.proc.poll() is not None:
                raise TestFailure(f"{self.name}: qemu exited ({self.proc.returncode}): "
                                  f"{_tail(self.qemu_log)}")
            if not os.path.exists(self.ctl_path):
                return None
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.ctl_path)
            except OSError:
                s.close()
                return None
            return s
        # The guest cannot reach its port before qemu listens, and it boots for seconds more.
        self._sock = wait_until(connect, 60, f"{self.name}: qemu's control socket")
        threading.Thread(target=self._reader, name=f"{self.name}-ctl", daemon=True).start()

    def _api_nic(self) -> list[str]:
        """qemu arguments of eth1 (guest_api): user-mode network, isolated (restrict=on), whose
        only service is GUEST_API_IP:API_PORT, relayed to the switch's API by a process per
        connection (qemu runs inside the namespace, so 127.0.0.1 is the switch's)."""
        if not self.lab.guest_api:
            return []
        relay = os.path.join(HERE, "api_relay.py")
        if "," in relay or " " in relay:
            raise TestFailure(f"guest_api: the relay's path {relay} has a comma or a space")
        fwd = f"tcp:{GUEST_API_IP}:{API_PORT}-cmd:{sys.executable} {relay} 127.0.0.1 {API_PORT}"
        return ["-netdev", f"user,id=api0,restrict=on,net=10.0.2.0/24,guestfwd={fwd}",
                "-device", f"virtio-net-pci,netdev=api0,mac={self.api_mac},romfile="]

    def wait_ready(self, timeout: float) -> None:
        ok = self._wait_for(lambda: self._ready or self._failed or self._eof, timeout)
        if not ok or not self._ready:
            why = self._failed or ("control channel closed" if self._eof else
                                   f"no READY within {timeout}s")
            raise TestFailure(f"{self.name}: boot failed: {why}\nconsole:\n"
                              f"{_tail(self.console_path)}\nqemu:\n{_tail(self.qemu_log, 1000)}")
        self.boot_seconds = time.monotonic() - self.t_boot

    def stop(self) -> None:
        self._stopped = True
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self.proc is not None:
            _kill_group(self.proc)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def console(self) -> str:
        with open(self.console_path, errors="replace") as f:
            return f.read()

    def qemu_rss_mib(self) -> int | None:
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) // 1024
        except (OSError, AttributeError):
            pass
        return None

    # -- control channel ---------------------------------------------------------------------

    def _reader(self) -> None:
        buf = b""
        while True:
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                with self._cond:
                    self._eof = True
                    self._cond.notify_all()
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            with self._cond:
                for line in lines:
                    try:
                        self._on_message(line.decode("ascii", "replace").strip())
                    except ValueError:  # not ours: noise before the guest opened the port
                        pass
                self._cond.notify_all()

    def _on_message(self, line: str) -> None:
        op, _, rest = line.partition(" ")
        if op == "O":
            job_id, _, b64 = rest.partition(" ")
            job = self._jobs.get(int(job_id))
            if job is not None:
                job.chunks.append(base64.b64decode(b64))
        elif op == "E":
            job_id, rc = rest.split()
            job = self._jobs.get(int(job_id))
            if job is not None:
                job.rc = int(rc)
                job.t_end = time.monotonic()
        elif op == "READY":
            m = re.search(r"gid=(\d*) uptime=([\d.]+)", rest)
            if m and m.group(1):
                self.gid_index = int(m.group(1))
                self.guest_uptime = float(m.group(2))
                self._ready = True
            else:
                self._failed = f"bad READY message {line!r}"
        elif op == "FAIL":
            self._failed = rest
        # anything else: line noise before the guest opened the port

    def _wait_for(self, pred: Callable[[], Any], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not pred():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                if self._eof or (self.proc is not None and self.proc.poll() is not None):
                    if pred():
                        return True
                    raise TestFailure(f"{self.name}: the guest went away (qemu "
                                      f"{self.proc.poll() if self.proc else None}); console:\n"
                                      f"{_tail(self.console_path)}")
                self._cond.wait(min(left, 0.5))
            return True

    def _send(self, line: str) -> None:
        try:
            self._sock.sendall(line.encode() + b"\n")
        except OSError as e:
            raise TestFailure(f"{self.name}: control channel: {e}") from None

    # -- commands ----------------------------------------------------------------------------

    def start(self, cmd: str) -> GuestJob:
        """Runs `cmd` (a shell script: busybox sh, PATH with /usr/local/bin) in the background
        in its own session in the guest, in /root."""
        if not self._ready:
            raise TestFailure(f"{self.name} is not up")
        with self._cond:
            self._next_id += 1
            job = GuestJob(self, self._next_id, cmd)
            self._jobs[job.id] = job
        self._send(f"R {job.id} {base64.b64encode(cmd.encode()).decode()}")
        return job

    def run(self, cmd: str, timeout: float = 60, check: bool = False) -> tuple[int, str]:
        """Runs `cmd` and waits; (exit status, output). check=True: a non-zero status raises."""
        rc, out = self.start(cmd).wait(timeout)
        if check and rc != 0:
            raise TestFailure(f"{self.name}: `{cmd}` exited {rc}:\n{out[-3000:]}")
        return rc, out

    def netem(self, spec: str | None, direction: str = "egress") -> None:
        """Impairs this guest's link with netem (e.g. "loss 2%", "delay 5ms reorder 10%") on
        what it sends ("egress"), what it receives ("ingress": redirected through ifb0) or
        both. A call sets only its direction(s); spec None removes every impairment. RoCE
        frames pass through it like any other."""
        if spec is None:
            self.run("tc qdisc del dev eth0 root; tc qdisc del dev eth0 ingress; "
                     "tc qdisc del dev ifb0 root; tc qdisc del dev eth0 clsact; true",
                     check=True)
            return
        if direction not in ("egress", "ingress", "both"):
            raise ValueError(f"direction must be egress, ingress or both, not {direction!r}")
        script = []
        if direction in ("egress", "both"):
            script.append(f"tc qdisc replace dev eth0 root netem {spec}")
        if direction in ("ingress", "both"):
            script += IFB0_UP + [f"tc qdisc replace dev ifb0 root netem {spec}",
                       "{ tc qdisc del dev eth0 ingress 2>/dev/null; true; }",
                       "tc qdisc add dev eth0 handle ffff: ingress",
                       "tc filter add dev eth0 parent ffff: matchall "
                       "action mirred egress redirect dev ifb0"]
        self.run(" && ".join(script), check=True)

    def drop_sent_roce(self, opcode: int | None, aeth_msn: int | None = None) -> int:
        """Drops the RoCEv2 frames this guest sends whose BTH opcode is `opcode` (e.g. 0x11,
        ACKNOWLEDGE: an RC responder that executes what it receives and is never heard), over
        IPv4 without options; None stops it. With `aeth_msn`, only an ACKNOWLEDGE whose AETH
        MSN is that (e.g. a responder's ACK of its n-th message, and every re-ACK of it).
        Returns how many frames the rule dropped (when stopping: the rule's count then)."""
        return self._drop_roce("egress", opcode, aeth_msn=aeth_msn)

    def hold_sent_roce(self, opcode: int | None) -> int:
        """As drop_sent_roce, but the sender's stack sees each dropped frame sent (tc's mirred
        redirects it to ifb0, whose netem loses it): an RC requester's own WRITEs can be lost
        this way. (A gact drop of a request makes rxe's send fail and retry at once: its
        process spins in the kernel, a soft lockup on one vCPU.) The receiver never sees
        them; the requester's RC timer sends them again once the rule is gone. Not with
        netem(direction="ingress"), which uses ifb0 too."""
        return self._drop_roce("egress", opcode, as_sent=True)

    def drop_received_roce(self, opcode: int | None, imm_count: int | None = None) -> int:
        """Drops the RoCEv2 frames this guest receives (before its RDMA stack sees them) whose
        BTH opcode is `opcode`; with `imm_count`, only a WRITE_ONLY_WITH_IMM (0x0B) whose
        immediate's low byte (the contribution count of ina-rdma's `chunk << 8 | count`) is
        that, e.g. a switch's aggregates carrying every rank. None stops it; returns the count
        as drop_sent_roce does."""
        return self._drop_roce("ingress", opcode, imm_count)

    def _drop_roce(self, hook: str, opcode: int | None, imm_count: int | None = None,
                   as_sent: bool = False, aeth_msn: int | None = None) -> int:
        """A tc clsact u32 rule on eth0's `hook` (egress or ingress) dropping RoCEv2 frames by
        BTH opcode (and immediate count), or, with opcode None, its drop count and removal. One
        such rule at a time per guest (the clsact qdisc carries both hooks)."""
        if opcode is not None:
            # Offsets from the IPv4 header (20 bytes, no options): UDP destination port at 22,
            # the BTH at 28 (opcode its first byte), a WRITE_ONLY_WITH_IMM's RETH at 40 and
            # immediate at 56 (big-endian: the count's byte at 59); an ACKNOWLEDGE's AETH at 40
            # (the syndrome, then the 24-bit MSN).
            count = "" if imm_count is None else f"match u8 {imm_count:#x} 0xff at 59 "
            if imm_count is not None and opcode != 0x0B:
                raise ValueError("imm_count matches a WRITE_ONLY_WITH_IMM (opcode 0x0b) only")
            if aeth_msn is not None:
                if opcode != 0x11:
                    raise ValueError("aeth_msn matches an ACKNOWLEDGE (opcode 0x11) only")
                count += f"match u32 {aeth_msn & 0xFFFFFF:#x} 0xffffff at 40 "
            ifb = IFB0_UP + ["tc qdisc replace dev ifb0 root netem loss 100%"] if as_sent else []
            action = "action mirred egress redirect dev ifb0" if as_sent else "action drop"
            self.run(" && ".join(ifb + [
                f"tc qdisc replace dev eth0 clsact && tc filter add dev eth0 {hook} "
                "protocol ip u32 match ip protocol 17 0xff match u16 4791 0xffff at 22 "
                f"match u8 {opcode:#x} 0xff at 28 {count}{action}"]), check=True)
            return 0
        _rc, out = self.run(f"tc -s filter show dev eth0 {hook}; tc qdisc del dev eth0 clsact; "
                            "tc qdisc del dev ifb0 root 2>/dev/null; true", check=True)
        # The action's statistics: "Sent <bytes> bytes <packets> pkt (dropped <n>, ...)": gact
        # counts its drops, mirred what it redirected (to be lost).
        found = re.search(r"Sent \d+ bytes (\d+) pkt" if "mirred" in out else
                          r"\(dropped (\d+),", out)
        if found is None:
            raise TestFailure(f"{self.name}: no drop statistics in tc's output:\n{out}")
        return int(found.group(1))

    def wait_tcp_listen(self, port: int = PERFTEST_PORT, timeout: float = 60) -> None:
        """Waits until a TCP socket listens on `port` in this guest (polled inside it)."""
        self.run(f"until netstat -ltn | grep -q ':{port} '; do sleep 0.05; done",
                   timeout=timeout, check=True)

    def wait_rdma_cm_listen(self, timeout: float = 60) -> None:
        """Waits until an rdma_cm id listens in this guest (rping -s, ib_*_bw -R)."""
        self.run("until rdma resource show cm_id | grep -q LISTEN; do sleep 0.05; done",
                 timeout=timeout, check=True)

    def add_ipv6(self, addr: str, prefix_len: int, gw: str | None, timeout: float = 90) -> int:
        """Gives eth0 the IPv6 address addr/prefix_len beside its IPv4 one, `nodad` (usable at
        once: no duplicate address detection to wait out) and no router advertisements taken, a
        default route via `gw`; returns once `gw` answers a ping (neighbour discovery done both
        ways) and rxe0 lists the address as a RoCE v2 GID. Sets vm.ip6, vm.gw6, vm.gid6_index."""
        route = f" && ip -6 route replace default via {gw} dev eth0" if gw else ""
        ping = f" && until ping -6 -c 1 -W 1 {gw} >/dev/null; do :; done" if gw else ""
        rc, out = self.run(f"echo 0 > /proc/sys/net/ipv6/conf/eth0/accept_ra && "
                           f"ip -6 addr replace {addr}/{prefix_len} dev eth0 nodad{route}{ping} && "
                           f"ina-gid-index {ipaddress.IPv6Address(addr).exploded}", timeout=timeout)
        if rc != 0 or not out.strip().isdigit():
            raise TestFailure(f"{self.name}: IPv6 address {addr} failed ({rc}): {out}")
        self.ip6, self.gw6, self.gid6_index = addr, gw, int(out.strip())
        return self.gid6_index

    def __repr__(self) -> str:
        return f"VM({self.name} {self.ip} {self.mac} gid={self.gid_index})"


# ---------------------------------------------------------------------------------------------
# The switch

class Switch:
    """inaswitch running inside the lab's namespace: metrics() (a live scrape), api_json(),
    http(), wait_metric(), reload(yaml), log(), stop() (SIGTERM, exit status) and stats() (the
    final metrics it wrote on exit, or a live scrape while it runs)."""

    def __init__(self, lab: "Lab", exe: str, config_text: str, tag: str = "",
                 api_host: str = "127.0.0.1"):
        self.lab = lab
        self.ns = lab.ns
        self.exe = os.path.abspath(exe)
        # One more switch of the lab (add_switch): its own runtime directory, files and API
        # address (the namespace's loopback holds 127/8; the port is API_PORT for all).
        self.api_host = api_host
        self.tag = tag
        self.file_prefix = f"inavm{os.getpid()}x{lab.serial}{tag}"
        self.config_path = os.path.join(lab.workdir, f"switch{tag}.yaml")
        self.log_path = os.path.join(lab.workdir, f"switch{tag}.log")
        self.stats_path = os.path.join(lab.workdir, f"switch{tag}-final.prom")
        self.proc: subprocess.Popen | None = None
        self.final_metrics: Metrics | None = None
        self.write_config(config_text)

    def write_config(self, text: str) -> None:
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.config_path)

    def start(self, timeout: float = 60) -> None:
        cmd = ["ip", "netns", "exec", self.lab.ns, self.exe, "-c", self.config_path,
               "--file-prefix", self.file_prefix, "--stats-file", self.stats_path]
        log(f"starting: {' '.join(cmd)}")
        with open(self.log_path, "w") as f:
            self.proc = _popen(cmd, stdout=f, stderr=subprocess.STDOUT)

        def api_up():
            if self.proc.poll() is not None:
                raise TestFailure(f"inaswitch exited ({self.proc.returncode}):\n{self.log()}")
            return self.http("GET", "/api/v1/status", timeout=2)[0] == 200
        wait_until(api_up, timeout, "inaswitch's control API")
        wait_until(lambda: all(v == 1 for v in self.metrics().by_label(
            "inaswitch_port_link_up", "port").values()), 30, "every switch port's link up")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        return _tail(self.log_path, 20000)

    # http(method, path, body, timeout) into the switch's API in the namespace (api_host,
    # API_PORT: the Figure 1 testbed's request through a socket made inside the namespace), and
    # the e2e testbed's helpers built on http(): api_json(method, path, body, expect=200),
    # metrics() -> Metrics, metrics_text(), wait_metric(name, pred, timeout, **labels).
    def http(self, method: str, path: str, body: Any = None, timeout: float = 5) -> tuple[int, str]:
        sock = fig1.ns_connect(self.ns, self.api_host, API_PORT, timeout)
        conn = http.client.HTTPConnection(self.api_host, API_PORT, timeout=timeout)
        conn.sock = sock
        try:
            data = None if body is None else (
                body if isinstance(body, str) else json.dumps(body)).encode()
            conn.request(method, path, body=data,
                         headers={} if data is None else {"Content-Type": "application/json"})
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()
    api_json = testbed.Testbed.api_json
    metrics_text = testbed.Testbed.metrics_text
    metrics = testbed.Testbed.metrics
    wait_metric = testbed.Testbed.wait_metric

    def stats(self) -> Metrics:
        """The final metrics (--stats-file) once stopped; a live scrape while running."""
        if self.alive():
            return self.metrics()
        if self.final_metrics is None:
            raise TestFailure(f"inaswitch wrote no final metrics ({self.stats_path}):\n"
                              f"{self.log()}")
        return self.final_metrics

    def reload(self, config_text: str) -> None:
        """Writes a new config and has the running switch apply it (POST /api/v1/reload)."""
        self.write_config(config_text)
        self.api_json("POST", "/api/v1/reload")

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM; returns the exit status and reads the final metrics (--stats-file)."""
        if self.proc is None:
            return None
        _kill_group(self.proc, timeout)
        if self.final_metrics is None and os.path.exists(self.stats_path):
            with open(self.stats_path) as f:
                self.final_metrics = Metrics(f.read())
        return self.proc.returncode


# ---------------------------------------------------------------------------------------------
# Captures

class Capture:
    """tcpdump on each VM's tap (both directions), full frames unless snaplen is given.
    stop() returns {vm name: pcap path} and fills .stats {vm name: (captured, dropped)}."""

    def __init__(self, lab: "Lab", bpf: str, snaplen: int, tag: str, timeout: float = 30):
        self.lab = lab
        self.paths: dict[str, str] = {}
        self.stats: dict[str, tuple[int, int]] = {}
        self._procs: dict[str, subprocess.Popen] = {}
        self._errs: dict[str, str] = {}
        try:
            for vm in lab.vms:
                path = os.path.join(lab.workdir, f"{tag}-{vm.tap}.pcap")
                err = path + ".err"
                self.paths[vm.name] = path
                self._errs[vm.name] = err
                cmd = ["ip", "netns", "exec", lab.ns, "tcpdump", "-i", vm.tap, "-U", "-n",
                       "-B", str(CAPTURE_BUFFER_KIB), "-Z", "root", "-s", str(snaplen), "-w", path] + \
                    (bpf.split() if bpf else [])
                with open(err, "w") as f:
                    self._procs[vm.name] = _popen(cmd, stdout=subprocess.DEVNULL, stderr=f)
            for name, err in self._errs.items():
                p = self._procs[name]

                def listening(p=p, err=err):
                    if p.poll() is not None:
                        raise TestFailure(f"tcpdump exited: {_tail(err)}")
                    return "listening on" in _tail(err)
                wait_until(listening, timeout, f"tcpdump on {name}'s tap")
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _reports(err: str) -> list[tuple[int, int, int]]:
        """tcpdump's reports so far: (captured, received by filter, dropped by kernel)."""
        found = re.findall(r"(\d+) packets? captured[,\s]+(\d+) packets? received by filter"
                           r"[,\s]+(\d+) packets? dropped by kernel", _tail(err, 1 << 20))
        return [tuple(int(x) for x in f) for f in found]

    def _drain(self, name: str, p: subprocess.Popen, timeout: float = 30) -> None:
        """Waits until tcpdump has written every packet its filter accepted (SIGINT discards
        what it has not read yet): SIGUSR1 makes it report its counts."""
        err = self._errs[name]

        def drained():
            n = len(self._reports(err))
            p.send_signal(signal.SIGUSR1)
            wait_until(lambda: p.poll() is not None or len(self._reports(err)) > n, 10,
                       f"tcpdump on {name} to report its counts")
            if p.poll() is not None:
                return True
            captured, received, dropped = self._reports(err)[-1]
            return captured + dropped == received
        wait_until(drained, timeout, f"tcpdump on {name} to write every packet it received")

    def stop(self, drain: bool = True) -> dict[str, str]:
        """Stops tcpdump, first waiting until it has written all it received (drain)."""
        for name, p in self._procs.items():
            if p.poll() is None:
                if drain:
                    self._drain(name, p)
                p.send_signal(signal.SIGINT)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                _kill_group(p, 1)
            reports = self._reports(self._errs[name])
            if reports:
                self.stats[name] = (reports[-1][0], reports[-1][2])
        self._procs = {}
        return dict(self.paths)

    def __enter__(self) -> "Capture":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


# ---------------------------------------------------------------------------------------------
# The lab

_serial = 0


def _dead(pid: int) -> bool:
    return pid != os.getpid() and not os.path.exists(f"/proc/{pid}")


# Every process a lab starts names the lab's pid in its arguments: qemu and tcpdump through the
# work directory (<tmp>/inavm<pid>-...), inaswitch through its file prefix (inavm<pid>x<n>).
_LAB_ARG = re.compile(rb"/inavm(\d+)-|inavm(\d+)x\d")


def cleanup_stale() -> None:
    """Removes what labs of dead processes left (a SIGKILL, or a crash in teardown): their
    processes (qemu, inaswitch, tcpdump), namespaces and DPDK runtime directories."""
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read()
        except OSError:
            continue
        m = _LAB_ARG.search(args)
        if m and _dead(int(m.group(1) or m.group(2))):
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    out = _sh(["ip", "netns", "list"], check_rc=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        # A lab's own, or a test's beside it named after it (<lab ns>-<tag>).
        m = re.match(re.escape(NS_PREFIX) + r"(\d+)-\d+(-[a-z]+)?$", name)
        if m and _dead(int(m.group(1))):
            for pid in _sh(["ip", "netns", "pids", name], check_rc=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                    killed += 1
                except (ProcessLookupError, ValueError):
                    pass
            _sh(["ip", "netns", "del", name], check_rc=False)
            log(f"removed stale lab namespace {name}")
    if os.path.isdir("/var/run/dpdk"):
        for d in os.listdir("/var/run/dpdk"):
            m = re.match(r"inavm(\d+)x\d+$", d)
            if m and _dead(int(m.group(1))):
                shutil.rmtree(os.path.join("/var/run/dpdk", d), ignore_errors=True)
    if killed:
        log(f"killed {killed} processes left by labs of dead processes")


class Lab:
    def __init__(self, n_vms: int, fabric: str = "bridge", switch_exe: str | None = None,
                 switch_config: str | Callable[[dict, "Lab"], dict | str] | None = None,
                 routed: bool = False, extra_files: list | None = None, mem_mb: int = 256,
                 boot_timeout: float = 240, slot_timeout: float = 900, guest_api: bool = False,
                 links: list[str] | None = None):
        global _serial
        if fabric not in ("bridge", "inaswitch"):
            raise ValueError(f"fabric must be 'bridge' or 'inaswitch', not {fabric!r}")
        if fabric == "inaswitch" and not switch_exe:
            raise ValueError("fabric='inaswitch' needs switch_exe")
        if routed and fabric != "inaswitch":
            raise ValueError("routed=True needs fabric='inaswitch' (a bridge does not route)")
        if not 1 <= n_vms <= 253:
            raise ValueError(f"n_vms={n_vms}")
        if os.geteuid() != 0:
            raise TestFailure("the RoCE lab needs root (namespaces, taps)")
        if shutil.which(QEMU) is None:
            raise TestFailure(f"{QEMU} is not installed (package qemu-system-x86; .ci/setup)")
        # The e2e testbed's teardown: close() runs at exit and on SIGTERM/SIGINT/SIGHUP.
        testbed._install_handlers()
        cleanup_stale()
        _serial += 1
        self.serial = _serial
        self.fabric, self.routed = fabric, routed
        if guest_api and fabric != "inaswitch":
            raise ValueError("guest_api=True needs fabric='inaswitch' (it reaches the switch's API)")
        self.guest_api = guest_api
        self.guest_api_url = f"http://{GUEST_API_IP}:{API_PORT}"
        self._switch_config = switch_config
        self.ns = f"{NS_PREFIX}{os.getpid()}-{self.serial}"
        self.workdir = tempfile.mkdtemp(prefix=f"inavm{os.getpid()}-")
        self.vms: list[VM] = []
        self.switch: Switch | None = None
        self.links = list(links or [])
        self.more_switches: list[Switch] = []  # add_switch
        self._captures: list[Capture] = []
        self._slots: _Slots | None = None
        self._ns_created = False
        self._closed = False
        self._links_logged = False  # log_guest_links ran (the failure path logs them once)
        self.timings: dict[str, float] = {}
        testbed._live.append(self)
        try:
            t0 = time.monotonic()
            self.image = guest_image_mod.guest_image()
            self.timings["image_s"] = time.monotonic() - t0
            initrd = self.image.initrd
            if extra_files:
                extra = guest_image_mod.extras_initrd(
                    self.image, extra_files, os.path.join(self.workdir, "extra.cpio.gz"),
                    self.workdir)
                initrd = os.path.join(self.workdir, "initrd.cpio.gz")
                with open(initrd, "wb") as out:
                    for part in (self.image.initrd, extra):
                        with open(part, "rb") as f:
                            shutil.copyfileobj(f, out)
            for i in range(n_vms):
                self.vms.append(VM(self, i, *self._address(i, routed)))
            self._build_network()
            if fabric == "inaswitch":
                self.switch = Switch(self, switch_exe, self._config_text(switch_config))
            self._slots = _Slots(n_vms, slot_timeout)
            t0 = time.monotonic()
            log(f"booting {n_vms} VMs in {self.ns} (fabric {fabric}"
                f"{', routed' if routed else ''}; work dir {self.workdir})")
            for vm in self.vms:
                vm.boot(self.image.kernel, initrd, mem_mb)
            if self.switch:
                self.switch.start()
            for vm in self.vms:
                vm.wait_ready(boot_timeout)
                log(f"{vm.name} up: {vm.ip} gid {vm.gid_index}, {vm.boot_seconds:.1f}s "
                    f"(guest uptime {vm.guest_uptime}s)")
            self.timings["boot_s"] = time.monotonic() - t0
        except BaseException:
            self.close()
            raise

    # -- network and config ------------------------------------------------------------------

    def ns_run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        """Runs a host command inside the lab's namespace."""
        return _sh(["ip", "netns", "exec", self.ns] + cmd, **kw)

    def _build_network(self) -> None:
        _sh(["ip", "netns", "add", self.ns])
        self._ns_created = True
        for key in ("net.ipv6.conf.all.disable_ipv6", "net.ipv6.conf.default.disable_ipv6"):
            self.ns_run(["sysctl", "-qw", f"{key}=1"])
        self.ns_run(["ip", "link", "set", "lo", "up"])
        if self.fabric == "bridge":
            self.ns_run(["ip", "link", "add", "br0", "type", "bridge"])
        for vm in self.vms:
            self.ns_run(["ip", "tuntap", "add", "dev", vm.tap, "mode", "tap"])
            if self.fabric == "bridge":
                self.ns_run(["ip", "link", "set", vm.tap, "master", "br0"])
            self.ns_run(["ip", "link", "set", vm.tap, "up"])
        if self.fabric == "bridge":
            self.ns_run(["ip", "link", "set", "br0", "up"])
        for name in self.links:
            self.ns_run(["ip", "link", "add", f"{name}0", "type", "veth", "peer", "name",
                         f"{name}1"])
            for end in (f"{name}0", f"{name}1"):
                # Offloads off: af_packet would see partial checksums and GSO frames otherwise.
                self.ns_run(["ethtool", "-K", end, "rx", "off", "tx", "off", "sg", "off", "tso",
                             "off", "gso", "off", "gro", "off"])
                self.ns_run(["ip", "link", "set", end, "up"])

    @staticmethod
    def _address(index: int, routed: bool) -> tuple[str, int, str | None]:
        """(address, prefix length, gateway) of VM `index`."""
        if routed:
            return f"10.77.{index + 1}.2", 24, f"10.77.{index + 1}.1"
        return f"10.77.0.{index + 2}", 24, None

    def readdress(self, routed: bool, timeout: float = 120) -> None:
        """Switches the running lab between one L2 segment and routed subnets without a
        reboot: the switch reloads the matching config (ports' l2_group and ipv4 are reloadable)
        and every guest takes its new address, gateway and GID (vm.ip, .gw, .gid_index change;
        the old address's QPs and neighbours are gone)."""
        if routed and self.fabric != "inaswitch":
            raise ValueError("routed=True needs fabric='inaswitch' (a bridge does not route)")
        self.routed = routed
        for vm in self.vms:
            vm.ip, vm.prefix_len, vm.gw = self._address(vm.index, routed)
        if self.switch is not None:
            self.switch.reload(self._config_text(self._switch_config))
        jobs = []
        for vm in self.vms:
            route = f" && ip route add default via {vm.gw} dev eth0" if vm.gw else ""
            jobs.append(vm.start(f"ip addr flush dev eth0 && ip neigh flush dev eth0 && "
                                 f"ip addr add {vm.ip}/{vm.prefix_len} dev eth0{route} && "
                                 f"ina-gid-index {vm.ip}"))
        for vm, job in zip(self.vms, jobs):
            rc, out = job.wait(timeout)
            if rc != 0 or not out.strip().isdigit():
                raise TestFailure(f"{vm.name}: readdressing to {vm.ip} failed ({rc}): {out}")
            vm.gid_index = int(out.strip())
        log(f"readdressed: {'routed' if routed else 'one L2 segment'}, "
            + ", ".join(f"{vm.name} {vm.ip} gid {vm.gid_index}" for vm in self.vms))

    def reload_switch(self, switch_config) -> None:
        """Has the running switch apply `switch_config` (the forms of Lab's switch_config) by
        POST /api/v1/reload; readdress() keeps it from then on."""
        self._switch_config = switch_config
        self.switch.reload(self._config_text(switch_config))

    def log_guest_links(self, why: str) -> None:
        """Logs each guest's data link and rxe counters and its kernel log's tail: whether a
        guest's NIC stopped transmitting (rxe's sent_pkts above eth0's TX packets) shows here."""
        self._links_logged = True
        for vm in self.vms:
            if not vm.alive():
                log(f"{vm.name} {why}: its qemu is not running")
                continue
            try:
                _, out = vm.run("ip -s link show dev eth0; rdma statistic show 2>&1 | head -3; "
                                "dmesg | grep -v 'speed is unknown' | tail -n 60", timeout=30)
            except Exception as e:  # noqa: BLE001 - a guest that cannot answer says so here
                out = f"not read: {e}"
            log(f"{vm.name} {why}:\n{out.strip()}")

    def reach_all(self, timeout: float = 60) -> None:
        """Makes every VM resolve every other VM (and its gateway) by ARP, each pinging until a
        reply comes, so that the first RDMA connection does not wait for neighbour resolution
        (rdma_cm's first REQ can otherwise stall for seconds)."""
        jobs = []
        for vm in self.vms:
            peers = [o.ip for o in self.vms if o is not vm] + ([vm.gw] if vm.gw else [])
            jobs.append((vm, vm.start("; ".join(
                f"until ping -c 1 -W 1 {ip} >/dev/null; do :; done" for ip in peers))))
        for vm, job in jobs:
            job.wait(timeout)

    def default_switch_config(self) -> dict:
        ports = []
        for vm in self.vms:
            # qdisc_bypass=0 (the PMD's default is 1): frames sent around the qdisc layer skip
            # the device's packet taps, and capture() must see what the switch sends.
            port: dict[str, Any] = {
                "name": f"p{vm.index}",
                "devargs": f"net_af_packet{vm.index},iface={vm.tap},qdisc_bypass=0"}
            if self.routed:
                port["ipv4"] = [f"{vm.gw}/{vm.prefix_len}"]
            else:
                port["l2_group"] = "vms"
                port["promiscuous"] = True
            ports.append(port)
        return {
            "version": 1,
            "eal": {"args": list(EAL_ARGS)},
            "ports": ports,
            "dataplane": {"idle_sleep_us": 20},
            "control": {"listen": f"127.0.0.1:{API_PORT}"},
        }

    def _config_text(self, spec) -> str:
        header = "# SPDX-License-Identifier: Apache-2.0\n# generated by tests/roce_vm/lab.py\n"
        if spec is None:
            return header + to_yaml(self.default_switch_config())
        if isinstance(spec, str):
            return spec
        got = spec(self.default_switch_config(), self)
        return got if isinstance(got, str) else header + to_yaml(got)

    def add_switch(self, exe: str, config_text: str, tag: str) -> Switch:
        """Starts one more inaswitch in the namespace (its API on 127.0.0.<2 + n>), stopped by
        close(); `config_text` names its ports (the lab's taps, links' ends) and its
        control.listen must be the returned switch's api_host:API_PORT (add_switch_listen)."""
        sw = Switch(self, exe, config_text, tag, self.add_switch_host())
        self.more_switches.append(sw)
        sw.start()
        return sw

    def add_switch_host(self) -> str:
        """The API address the next add_switch gives its switch."""
        return f"127.0.0.{2 + len(self.more_switches)}"

    def port_name(self, vm: VM) -> str:
        """The switch port facing `vm` in the default config."""
        return f"p{vm.index}"

    def tap_mac(self, vm: VM) -> str:
        """The host end of vm's tap: the switch port's MAC (net_af_packet takes it)."""
        out = self.ns_run(["ip", "-j", "link", "show", vm.tap]).stdout
        return json.loads(out)[0]["address"]

    # -- captures ----------------------------------------------------------------------------

    def capture(self, bpf: str = "", snaplen: int = 0, tag: str | None = None) -> Capture:
        """Starts tcpdump on every tap (returns once each is listening); use as a context
        manager or call stop(). bpf: a tcpdump filter, e.g. "udp port 4791"."""
        tag = tag or f"capture{len(self._captures)}"
        cap = Capture(self, bpf, snaplen, tag)
        self._captures.append(cap)
        return cap

    # -- teardown ----------------------------------------------------------------------------

    def close(self) -> None:
        """Tears everything down; each step runs even if an earlier one fails (a capture that
        will not stop must not leave qemu running)."""
        if self._closed:
            return
        self._closed = True
        problems = []

        def step(what: str, fn: Callable[[], Any]) -> None:
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - teardown goes on; reported below
                problems.append(f"{what}: {e}")
        for cap in self._captures:
            step("capture", lambda cap=cap: cap.stop(drain=False))
        for sw in self.more_switches + ([self.switch] if self.switch is not None else []):
            def stop_switch(sw=sw):
                rc = sw.stop()
                if rc not in (None, 0):
                    log(f"inaswitch exited {rc}; log:\n{sw.log()}")
            step("inaswitch", stop_switch)
        for vm in self.vms:
            step(vm.name, vm.stop)
        if self._slots is not None:
            self._slots.release()
        if self._ns_created:
            step("netns", lambda: _sh(["ip", "netns", "del", self.ns], check_rc=False))
        for sw in self.more_switches + ([self.switch] if self.switch is not None else []):
            shutil.rmtree(f"/var/run/dpdk/{sw.file_prefix}", ignore_errors=True)
        if os.environ.get("INA_ROCE_VM_KEEP"):
            log(f"kept {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self in testbed._live:
            testbed._live.remove(self)
        if problems:
            log("teardown problems: " + "; ".join(problems))

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, exc_type, *_exc) -> None:
        if exc_type is not None:
            # Every test's failure shows whether a guest's NIC stopped sending (the rare
            # virtio-net stall docs/rdma.md names), unless the test logged it already.
            if not self._links_logged:
                self.log_guest_links("at the failure")
            for vm in self.vms:
                log(f"{vm.name} console (tail):\n{_tail(vm.console_path, 2000)}")
            for sw in ([self.switch] if self.switch is not None else []) + self.more_switches:
                if sw.proc is not None:
                    log(f"inaswitch{sw.tag} log (tail):\n{_tail(sw.log_path, 3000)}")
        self.close()


def run_test(name: str, usage: str, test: Callable[..., None], arg_counts: tuple[int, ...]) -> int:
    """A roce-vm test's main: `test(*sys.argv[1:])` as root with one of `arg_counts` arguments;
    0 on a pass, 1 on a failure (TestFailure or no guest image), 2 on wrong usage, 77 (skip)
    without root: CI runs as root, where a skip counts as a failure; a user learns why."""
    if os.geteuid() != 0:
        print(f"{name} needs root (namespaces, taps, qemu)", flush=True)
        return 77
    if len(sys.argv) - 1 not in arg_counts:
        print(usage, file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        test(*sys.argv[1:])
    except (TestFailure, guest_image_mod.ImageUnavailable) as e:
        log(f"FAIL: {e}")
        return 1
    log(f"PASS ({time.monotonic() - start:.1f}s)")
    return 0


def main() -> int:
    """Boots a lab and runs one command in each guest: a smoke check and an example.
    /usr/bin/python3 tests/roce_vm/lab.py [N] [--switch build/src/app/inaswitch [--routed]]"""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=2)
    ap.add_argument("--switch")
    ap.add_argument("--routed", action="store_true")
    ap.add_argument("--cmd", default="rdma link; ibv_devices; ip -br addr")
    a = ap.parse_args()
    fabric = "inaswitch" if a.switch else "bridge"
    with Lab(a.n, fabric=fabric, switch_exe=a.switch, routed=a.routed) as lab:
        for vm in lab.vms:
            rc, out = vm.run(a.cmd)
            print(f"--- {vm.name} ({vm.ip}, gid {vm.gid_index}) rc={rc}\n{out}")
        print(json.dumps(lab.timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
