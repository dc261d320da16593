# SPDX-License-Identifier: Apache-2.0
"""e2e-tap-checksum-offload: the UDP checksums the switch leaves to a device (TX checksum
offload, docs/protocol.md "Checksum offload") are right when a real consumer checks them.

    ina-worker 10.9.0.2 \                        job 1: aggregator of 1-2, partial -> 10.9.0.4
    ina-worker 10.9.0.3  } kernel <-tap-> [inaswitch 10.9.0.1, port net_tap]
    ina-ps     10.9.0.4 /                        job 2: root, results: unicast -> .2 and .3

The switch's only port is DPDK's net_tap, which offers IPv4/UDP TX checksum offload (it computes
the checksums in software as it writes the frame to the tap), so every port offloads and the
switch marks its partials and unicast results RTE_MBUF_F_TX_UDP_CKSUM. The tap's kernel side,
in the root namespace, holds the three host addresses; Linux verifies the UDP checksum of every
datagram that comes out of the tap and drops a wrong one (`Udp: InCsumErrors` in /proc/net/snmp).
Traffic between the host addresses never crosses the switch (ina-ps's results to the workers in
job 1 go over lo): what is tested is switch -> tap -> kernel socket. Workers send to the switch's
address 10.9.0.1 in both jobs.

- Job 1 (aggregator): the switch aggregates each chunk of workers 1-2 and sends one partial to
  ina-ps over the tap; ina-ps completes every chunk from partials alone (no fallback) and the
  workers verify the int32 sums bit-exact.
- Job 2 (root, `results: unicast`): the switch sends each result to worker 1 and a copy, its
  destination rewritten (the retarget path), to worker 2; both verify bit-exact.
- Then both again on a second switch with an odd mbuf data room (1,001 bytes after the headroom):
  the workers' 1,098-byte frames arrive as chains (scatter RX, which the switch enables when a
  port's MTU frame does not fit one mbuf), and every partial and result the switch builds is a
  chain whose first segment holds an odd number (967) of the datagram's bytes. DPDK 22.11's
  net_tap sums each segment's 16-bit words from the segment's own start, so it wrote a wrong
  checksum on every such chain (InCsumErrors grew by every partial, the workers timed out); the
  switch now leaves only single-mbuf frames to the device (pipeline/ina_input.cc build_ina).

- On each switch, RX: a contribution written into the tap by a packet socket with one bit of its
  UDP checksum wrong is dropped as ina_bad_checksum (net_tap's RX verdict for a single mbuf, the
  switch's own sum across a chain's segments), and the same frame with its right checksum is
  absorbed.

Evidence that the checksums were checked and right: every run completes (a dropped datagram is
retransmitted for ever and the workers time out), the switch's counters show the partials and
results sent, and the root namespace's UDP InCsumErrors and InErrors do not move during a run.
GET /api/v1/status shows `tx_udp_checksum: true` on the tap port. net_tap zeroes the field and
sums the pseudo-header itself, so what the switch writes in the field (the pseudo-header sum
DPDK's contract asks for) is not tested here but in stage_ina_input. The first window of each run
waits for the switch to resolve a host by ARP (`neighbour_unresolved` drops, retransmitted).
Env: INAE2E_TAP_ELEMENTS (default 1 Mi int32 elements per run), INAE2E_INA_WORKER.
"""

import json
import os
import socket
import struct
import subprocess
import time

from testbed import (Metrics, TestFailure, Testbed, check, delta, kill_leftovers, log, main,
                     run, wait_until)
from test_allreduce import ps_exe, worker_exe

SWITCH = "10.9.0.1"
WORKERS = ["10.9.0.2", "10.9.0.3"]
PARENT = "10.9.0.4"  # ina-ps, job 1's parent and root
PREFIX = 24
CHUNK = 256          # int32 elements per packet
WINDOW = 64
AGG_JOB, ROOT_JOB = 1, 2
# An odd data room after the 128-byte headroom: every INA frame (1,098 bytes) is a chain of
# 1,001 + 97 bytes, the first holding 967 (odd) bytes of the UDP datagram.
ODD_ROOM = 1001


def udp_snmp() -> dict[str, int]:
    """The root namespace's `Udp:` counters from /proc/net/snmp."""
    with open("/proc/net/snmp") as f:
        rows = [line.split() for line in f if line.startswith("Udp:")]
    if len(rows) != 2:
        raise TestFailure(f"/proc/net/snmp has no Udp: header and value lines: {rows}")
    return {k: int(v) for k, v in zip(rows[0][1:], rows[1][1:])}


def tap_name(tag: str) -> str:
    """The tap of switch `tag`, named like the testbed's veths (a killed run's leftovers are
    cleaned by the next one)."""
    return f"ie{os.getpid()}s{tag}"


def tap_testbed(switch_exe: str, tag: str, mempool: dict | None = None) -> Testbed:
    """A switch whose only port is net_tap on interface tap_name(tag), with both jobs."""
    iface = tap_name(tag)
    extra = {
        "ports": [{"name": "tap0", "devargs": f"net_tap{tag},iface={iface}",
                   "ipv4": [f"{SWITCH}/{PREFIX}"]}],
        "ina": {"jobs": [
            {"job_id": AGG_JOB, "role": "aggregator", "bsl": 64, "abm": "1-2", "op": "sum",
             "elem_type": "int32", "max_elements": CHUNK, "window": WINDOW,
             "slot_timeout_ms": 1000, "root": PARENT, "parent": PARENT, "on_reject": "drop"},
            {"job_id": ROOT_JOB, "role": "root", "bsl": 64, "abm": "1-2", "op": "sum",
             "elem_type": "int32", "max_elements": CHUNK, "window": WINDOW,
             "slot_timeout_ms": 1000, "root": SWITCH, "results": "unicast",
             "workers": [{"bfr_id": i + 1, "ip": ip} for i, ip in enumerate(WORKERS)],
             "on_reject": "drop"},
        ]},
    }
    if mempool:
        extra["mempool"] = mempool
    taken = json.loads(run(["ip", "-j", "-4", "addr", "show", "to", f"{SWITCH}/{PREFIX}"]).stdout
                       or "[]")
    if taken:
        raise TestFailure(f"{SWITCH}/{PREFIX} is in use in the root namespace already (on "
                          f"{[i.get('ifname') for i in taken]}): the test needs it on its tap")
    tb = Testbed(switch_exe, [], extra=extra, tag=f"t{tag}")
    try:
        if not os.path.exists(f"/sys/class/net/{iface}"):
            raise TestFailure(f"net_tap did not create {iface}")
        # The kernel side: the hosts' addresses, no IPv6 chatter towards the switch.
        run(["sysctl", "-qw", f"net.ipv6.conf.{iface}.disable_ipv6=1"])
        for ip in WORKERS + [PARENT]:
            run(["ip", "addr", "add", f"{ip}/{PREFIX}", "dev", iface])
        run(["ip", "link", "set", iface, "up"])
        status = tb.api_json("GET", "/api/v1/status")
        ports = status["ports"]
        check(len(ports) == 1 and ports[0]["driver"] == "net_tap" and
              ports[0]["tx_udp_checksum"] is True,
              f"GET /api/v1/status: the only port is net_tap with tx_udp_checksum true "
              f"({[(p['name'], p['driver'], p['tx_udp_checksum']) for p in ports]})")
        # Every host address reaches the switch (the kernel has resolved it). The switch
        # resolves a host when it first routes to it: that run's first window is dropped as
        # neighbour_unresolved and retransmitted.
        for ip in WORKERS + [PARENT]:
            wait_until(lambda ip=ip: run(["ping", "-n", "-q", "-c", "1", "-W", "1", "-I", ip,
                                          SWITCH], check_rc=False).returncode == 0,
                       10, f"{ip} to reach the switch at {SWITCH} over the tap", interval=0.01)
    except BaseException:
        tb.close()
        raise
    return tb


def run_popen(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def diagnosis(tb: Testbed, before: Metrics, snmp: dict[str, int]) -> str:
    """What the switch and the kernel counted since `before`/`snmp`: for a failure's message."""
    after, now = tb.metrics(), udp_snmp()
    was = {(n, tuple(sorted(l.items()))): v for n, l, v in before.series}
    moved = {}
    for n, l, v in after.series:
        key = (n, tuple(sorted(l.items())))
        if n.startswith(("inaswitch_drops_total", "inaswitch_ina_", "inaswitch_port_")) and \
                v != was.get(key, 0):
            moved[f"{n}{dict(key[1]) or ''}"] = v - was.get(key, 0)
    return (f"\nkernel Udp counters moved: { {k: now[k] - snmp[k] for k in now} }"
            f"\nswitch counters moved: {moved}")


def checked_by_kernel(tb: Testbed, before: Metrics, snmp: dict[str, int], room: int | None,
                      what: str) -> None:
    """The kernel found no UDP checksum wrong since `snmp`. With a data room `room` below the INA
    frames: the switch received (and aggregated) frames larger than one mbuf, so they came as
    chains, and what it built from them was chains too."""
    if room is not None:
        after = tb.metrics()
        rx_bytes = delta(after, before, "inaswitch_port_rx_bytes_total")
        rx_packets = delta(after, before, "inaswitch_port_rx_packets_total")
        check(rx_packets > 0 and rx_bytes / rx_packets > room,
              f"{what}: the switch received {rx_packets:.0f} frames of "
              f"{rx_bytes / max(rx_packets, 1):.0f} bytes on average, more than the {room} of "
              f"an mbuf (chains, by scatter RX)")
    drops = {k: v - before.by_label("inaswitch_drops_total", "reason").get(k, 0)
             for k, v in tb.metrics().by_label("inaswitch_drops_total", "reason").items()}
    log(f"{what}: the switch's drops by reason: { {k: v for k, v in drops.items() if v} }")
    now = udp_snmp()
    grew = {k: now[k] - snmp[k] for k in ("InCsumErrors", "InErrors")}
    check(all(v == 0 for v in grew.values()),
          f"{what}: the kernel's UDP InCsumErrors and InErrors did not move ({grew}; "
          f"InDatagrams +{now['InDatagrams'] - snmp['InDatagrams']})")


def allreduce(tb: Testbed, exe: str, job_id: int, seed: int, elements: int,
              what: str) -> tuple[Metrics, dict[str, int]]:
    """Runs both workers of `job_id` to the end, each verifying every result bit-exact; returns
    the switch's metrics and the kernel's UDP counters from before they started."""
    chunks = -(-elements // CHUNK)
    timeout_s = 20.0
    before, snmp = tb.metrics(), udp_snmp()
    t0 = time.monotonic()
    procs = [run_popen([exe, "--job", str(job_id), "--bfr-id", str(i + 1), "--abm", "1-2",
                        "--root", SWITCH, "--bind", ip, "--type", "int32", "--op", "sum",
                        "--elements", str(elements), "--chunk", str(CHUNK), "--window",
                        str(WINDOW), "--seed", str(seed), "--no-progress",
                        "--timeout-ms", str(int(timeout_s * 1000))])
             for i, ip in enumerate(WORKERS)]
    try:
        for i, p in enumerate(procs, 1):
            out, err = p.communicate(timeout=timeout_s + 30)
            lines = out.strip().splitlines()
            r = json.loads(lines[-1]) if lines else {}
            if p.returncode != 0 or r.get("ok") is not True or r.get("chunks") != chunks:
                raise TestFailure(f"{what}: worker {i} exited {p.returncode}: {out} {err}"
                                  f"{diagnosis(tb, before, snmp)}")
            log(f"ok: {what}: worker {i} verified {chunks} chunks of int32 sums bit-exact "
                f"({r['retransmits']} retransmits, {r['seconds']:.3f} s)")
    finally:
        kill_leftovers(procs)
    log(f"{what}: {time.monotonic() - t0:.2f} s")
    return before, snmp


def aggregator_run(tb: Testbed, switch_exe: str, exe: str, elements: int, what: str,
                   room: int | None = None) -> None:
    chunks = -(-elements // CHUNK)
    ps = run_popen([ps_exe(switch_exe), "--job", str(AGG_JOB), "--abm", "1-2", "--type", "int32",
                    "--op", "sum", "--chunk", str(CHUNK), "--window", str(WINDOW), "--bind",
                    PARENT, "--idle-exit-ms", "60000", "--workers",
                    ",".join(f"{i}={ip}" for i, ip in enumerate(WORKERS, 1))])
    try:
        wait_udp_bound(PARENT)
        before, snmp = allreduce(tb, exe, AGG_JOB, 11, elements, what)
        after = tb.metrics()
        partials = delta(after, before, "inaswitch_ina_partials_sent_total")
        fallbacks = delta(after, before, "inaswitch_ina_fallbacks_total")
        check(partials >= chunks and fallbacks == 0,
              f"{what}: the switch sent {partials:.0f} partials over the tap (>= {chunks} "
              f"chunks; re-sends counted apart), {fallbacks:.0f} contributions unaggregated")
        ps.terminate()
        out, _ = ps.communicate(timeout=10)
        stats = json.loads(out.strip().splitlines()[-1])
        check(stats["completed"] == chunks and stats["results_sent"] == 2 * chunks,
              f"{what}: ina-ps completed {stats['completed']} chunks (== {chunks}) from the "
              f"switch's partials alone, {stats['results_sent']} results sent")
        checked_by_kernel(tb, before, snmp, room, what)
    finally:
        kill_leftovers([ps])


def root_run(tb: Testbed, exe: str, elements: int, what: str, room: int | None = None) -> None:
    chunks = -(-elements // CHUNK)
    before, snmp = allreduce(tb, exe, ROOT_JOB, 22, elements, what)
    after = tb.metrics()
    results = delta(after, before, "inaswitch_ina_results_sent_total")
    completed = delta(after, before, "inaswitch_ina_job_contributions_total",
                      job=str(ROOT_JOB), verdict="completed")
    check(completed == chunks and results == 2 * chunks,
          f"{what}: {completed:.0f} chunks completed, {results:.0f} unicast results sent "
          f"over the tap (== 2 x {chunks}: each a copy to worker 2)")
    checked_by_kernel(tb, before, snmp, room, what)


def ones_sum(data: bytes) -> int:
    """The folded 16-bit ones' complement sum of `data` (RFC 1071)."""
    data += b"\0" * (len(data) % 2)
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def contribution_frame(tb: Testbed, iface: str, seq: int, udp_checksum_error: int) -> bytes:
    """Worker 1's contribution to job 2, chunk `seq`, as the tap's kernel side would send it,
    with `udp_checksum_error` xor-ed into its UDP checksum."""
    ina = struct.pack("!BBBBBBBBIIHHI", 0x49, 0x4E, 0x11, 0, 0x00, 0x10, 0, 0, ROOT_JOB, seq,
                      CHUNK, 0, 0) + (1).to_bytes(8, "big") + bytes(range(256)) * (CHUNK // 64)
    src, dst = socket.inet_aton(WORKERS[0]), socket.inet_aton(SWITCH)
    udp_len = 8 + len(ina)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", ~ones_sum(ip) & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 9470, 9470, udp_len, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, 17, udp_len)
    field = (~ones_sum(pseudo + udp + ina) & 0xFFFF or 0xFFFF) ^ udp_checksum_error
    mac = bytes.fromhex(tb.api_json("GET", "/api/v1/status")["ports"][0]["mac"].replace(":", ""))
    with open(f"/sys/class/net/{iface}/address") as f:
        own = bytes.fromhex(f.read().strip().replace(":", ""))
    return mac + own + b"\x08\x00" + ip + udp[:6] + struct.pack("!H", field) + ina


def bad_contribution_dropped(tb: Testbed, iface: str, seq: int, what: str) -> None:
    """A contribution whose UDP checksum is wrong by one bit, written into the tap, is dropped as
    ina_bad_checksum before it touches a slot; the same frame with its right checksum, the
    control, is absorbed."""
    before = tb.metrics()
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
        raw.bind((iface, 0))
        raw.send(contribution_frame(tb, iface, seq, 0))
        raw.send(contribution_frame(tb, iface, seq + 1, 0x0100))
    seen = before.get("inaswitch_ina_packets_total") + 2
    tb.wait_metric("inaswitch_ina_packets_total", lambda v: v >= seen)
    after = tb.metrics()
    absorbed = delta(after, before, "inaswitch_ina_job_contributions_total", job=str(ROOT_JOB),
                     verdict="absorbed")
    bad = delta(after, before, "inaswitch_drops_total", reason="ina_bad_checksum")
    check(absorbed == 1 and bad == 1,
          f"{what}: of a contribution with its right UDP checksum and the same with one bit of it "
          f"wrong, {absorbed:.0f} was absorbed (== 1) and {bad:.0f} dropped as ina_bad_checksum "
          f"(== 1)")


def wait_udp_bound(ip: str, port: int = 9470) -> None:
    wait_until(lambda: f"{ip}:{port} " in run(["ss", "-lunH"]).stdout + " ", 10,
               f"a socket bound to udp {ip}:{port}")


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_TAP_ELEMENTS", str(1 << 20)))
    with tap_testbed(switch_exe, "0") as tb:
        aggregator_run(tb, switch_exe, exe, elements, "aggregator, partials offloaded")
        root_run(tb, exe, elements, "root, unicast results offloaded")
        bad_contribution_dropped(tb, tap_name("0"), -(-elements // CHUNK),
                                 "RX of single mbufs, net_tap's checksum verdict")
    # Chained frames: RX scatter gives the switch the workers' frames as chains; everything it
    # sends is a chain too.
    with tap_testbed(switch_exe, "1", mempool={"data_room": 128 + ODD_ROOM}) as tb:
        aggregator_run(tb, switch_exe, exe, elements, "aggregator, chained partials", ODD_ROOM)
        root_run(tb, exe, elements, "root, chained unicast results", ODD_ROOM)
        bad_contribution_dropped(tb, tap_name("1"), -(-elements // CHUNK),
                                 "RX of chains, the switch's own check across segments")


if __name__ == "__main__":
    main(test)
