# SPDX-License-Identifier: Apache-2.0
"""e2e-chunk-steering: workers steering chunks by UDP source port, through a switch whose
devices cannot steer (docs/operations.md "Chunk steering").

The switch runs two worker lcores, every port two RX queues (af_packet queue pairs). af_packet
has no rte_flow, so each port with chunk_steering auto reports "hand-off" with the device's
refusal in GET /api/v1/status (and inaswitchctl status, and
inaswitch_port_chunk_steering_rules{mode="hand-off"} 0); p0, configured chunk_steering: off,
reports "off". Four workers AllReduce int32 (bit-exact) with --steer-ports 4, 2, 1 and 64: a
capture on h1's and h4's links (tcpdump in their namespaces) shows every data packet leaving
from source port 40960 | (seq & (N - 1)), every one of the N ports used, every chunk seen, and
the results come back to the INA port (the workers verify them). The switch aggregates them
whatever their source port: every chunk completed once, one result per worker per chunk,
contributions handed between the lcores (the hand-off path the status names). Then a switch
whose port is net_tap (2 queues, 2 lcores): net_tap's rte_flow needs the kernel's TC flower,
which this CI's kernel lacks, so it reports hand-off with net_tap's refusal (here
rte_flow_validate passes and rte_flow_create refuses: "item not supported").
"""

import os
import signal
import struct
import subprocess
import tempfile

from test_allreduce import CHUNK, N, ROOT, check_switch, job, run_allreduce, worker_exe
from testbed import (Host, Port, Testbed, TestFailure, check, delta, kill_leftovers, log, main,
                     wait_until)

BASE = 40960           # ina-worker's default --steer-base-port
INA_PORT = 9470
STEER = {0: 4, 1: 2, 2: 1, 3: 64}   # --steer-ports by host index
CAPTURED = (0, 3)                   # hosts whose links are captured
MARKER = b"inae2e-steering-capture-end"
CTL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                   "inaswitchctl")


def pcap_udp(path: str):
    """(source port, destination port, UDP payload) of every IPv4/UDP frame of a pcap file
    (Ethernet link type, either byte order); a truncated frame raises."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    order = "<" if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
    linktype = struct.unpack(order + "I", data[20:24])[0]
    if linktype != 1:
        raise TestFailure(f"{path}: link type {linktype}, expected Ethernet")
    off = 24
    while off + 16 <= len(data):
        _, _, incl, orig = struct.unpack(order + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + incl]
        off += 16 + incl
        if incl != orig:
            raise TestFailure(f"{path}: a frame of {orig} bytes captured as {incl}")
        if len(frame) < 14 + 20 + 8 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        sport, dport, ulen = struct.unpack("!HHH", frame[udp:udp + 6])
        yield sport, dport, frame[udp + 8:udp + ulen]


def ina_data_seqs(payload: bytes):
    """seq of every INA data message in a UDP payload: one datagram, or a GSO run captured
    before segmentation (the segments' payloads back to back)."""
    off = 0
    while off + 24 <= len(payload):
        m = payload[off:]
        if m[:2] != b"IN" or (m[2] & 0x0F) != 1:  # magic, then type 1 = data
            raise TestFailure(f"not an INA data message at offset {off}: {m[:8].hex()}")
        bsl_bytes = 8 << ((m[5] >> 4) - 1)  # BSL code 1 = 64 bits
        elem_bytes = {0: 4, 1: 4, 2: 2, 3: 2, 4: 8, 5: 8}[m[4] & 0x0F]  # int32 .. fp64
        seq = struct.unpack("!I", m[12:16])[0]
        count = struct.unpack("!H", m[16:18])[0]
        yield seq
        off += 24 + bsl_bytes + count * elem_bytes


def start_capture(h: Host, path: str) -> subprocess.Popen:
    p = h.popen(["tcpdump", "-i", h.dev, "-n", "-U", "-s", "0", "-w", path,
                 f"udp and src host {h.ip} and dst port {INA_PORT}"])
    # tcpdump says it listens once the socket and filter are in place.
    while True:
        line = p.stderr.readline()
        if not line:
            raise TestFailure(f"tcpdump in {h.name} exited: {p.communicate()}")
        if "listening on" in line:
            return p


def stop_capture(h: Host, p: subprocess.Popen, path: str) -> None:
    """Ends a capture once everything the host sent before is in the file: a marker datagram
    sent last must be in it (tcpdump writes packets in the order it reads them)."""
    h.run(["python3", "-c",
           "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
           f"s.bind(('{h.ip}', 0)); s.sendto({MARKER!r}, ('{ROOT}', {INA_PORT}))"])
    wait_until(lambda: MARKER in open(path, "rb").read(), 10, f"the marker in {h.name}'s capture")
    p.send_signal(signal.SIGINT)
    p.communicate(timeout=10)


def check_capture(h: Host, path: str, ports: int, chunks: int) -> None:
    bad = []
    seqs = set()
    used = set()
    packets = 0
    for sport, dport, payload in pcap_udp(path):
        if payload == MARKER:
            continue
        if dport != INA_PORT:
            raise TestFailure(f"{h.name}: data to port {dport}, not the INA port {INA_PORT}")
        for seq in ina_data_seqs(payload):
            packets += 1
            want = BASE | (seq & (ports - 1)) if ports > 1 else INA_PORT
            if sport != want:
                bad.append((seq, sport, want))
            seqs.add(seq)
            used.add(sport)
    check(not bad, f"{h.name} (--steer-ports {ports}): all {packets} data packets left from "
                   f"{BASE} | (seq & {ports - 1}) (wrong: {bad[:5]})")
    check(seqs == set(range(chunks)), f"{h.name}: the capture holds every chunk 0..{chunks - 1} "
                                      f"({len(seqs)} seqs)")
    check(used == {BASE | k for k in range(ports)},
          f"{h.name}: each of its {ports} source ports used ({sorted(used)[:8]}...)")


def tap_refuses(switch_exe: str) -> None:
    """net_tap implements rte_flow through the kernel's TC flower classifier: where the kernel
    has none (this CI's), the rules are refused and the port says so with the PMD's message."""
    iface = f"ie{os.getpid()}steer"
    extra = {"ports": [{"name": "tap0", "devargs": f"net_tap9,iface={iface}", "rx_queues": 2,
                        "ipv4": ["10.9.7.1/24"]}],
             "eal": {"args": ["--lcores", "0@0,1@1,2@1", "--no-huge", "-m", "512", "--no-pci",
                              "--log-level", "*:warning"]}}
    with Testbed(switch_exe, [], extra=extra, tag="steertap") as tb:
        port = tb.api_json("GET", "/api/v1/status")["ports"][0]
        check(port["driver"] == "net_tap" and port["chunk_steering"] in ("hand-off", "rte_flow"),
              f"net_tap with 2 queues and 2 lcores: {port['chunk_steering']}, "
              f"{port['chunk_steering_rules']} rules, {port['chunk_steering_reason']!r}")
        if port["chunk_steering"] == "rte_flow":
            check(port["chunk_steering_rules"] == 2, "a kernel with TC flower took both rules")
        else:
            check(port["chunk_steering_rules"] == 0 and
                  port["chunk_steering_reason"].startswith("net_tap: rte_flow_"),
                  "the refusal names the PMD and the call")


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_STEERING_ELEMENTS", str(1 << 20)))
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1], queues=2,
                  chunk_steering="off" if i == 1 else None)
             for i in range(1, N + 1)]
    extra = {"ina": {"jobs": [job(1, "int32", hosts)]},
             "eal": {"args": ["--lcores", "0@0,1@1,2@1", "--no-huge", "-m", "512", "--no-pci",
                              "--log-level", "*:warning"]}}
    workdir = tempfile.mkdtemp(prefix="inae2e-steer-")
    with Testbed(switch_exe, ports, extra=extra, tag="steer") as tb:
        status = tb.api_json("GET", "/api/v1/status")
        by_name = {p["name"]: p for p in status["ports"]}
        check(len(status["lcores"]) == 2, f"two worker lcores ({status['lcores']})")
        p0 = by_name["p0"]
        check(p0["chunk_steering"] == "off" and p0["chunk_steering_rules"] == 0 and
              "off" in p0["chunk_steering_reason"],
              f"p0 (chunk_steering: off) reports off: {p0['chunk_steering_reason']!r}")
        for name in ("p1", "p2", "p3"):
            p = by_name[name]
            reason = p["chunk_steering_reason"]
            check(p["chunk_steering"] == "hand-off" and p["chunk_steering_rules"] == 0 and
                  reason.startswith(p["driver"] + ": rte_flow_validate refused the rule of lane 0"),
                  f"{name} ({p['driver']}, 2 queues, 2 lcores) falls back to the hand-off with "
                  f"the device's refusal: {reason!r}")
        m = tb.metrics()
        check(m.get("inaswitch_port_chunk_steering_rules", port="p1", mode="hand-off") == 0 and
              m.get("inaswitch_port_chunk_steering_rules", port="p0", mode="off") == 0,
              "inaswitch_port_chunk_steering_rules names each port's mode")
        ctl = subprocess.run(["/usr/bin/python3", "-B", CTL, "--url",
                              f"http://127.0.0.1:{tb.api_port}", "status"],
                             capture_output=True, text=True, timeout=30)
        check(ctl.returncode == 0 and "STEERING" in ctl.stdout and "hand-off" in ctl.stdout and
              "chunk steering by hand-off:" in ctl.stdout and
              f"p1: {by_name['p1']['chunk_steering_reason']}" in ctl.stdout,
              f"inaswitchctl status shows the mode and why:\n{ctl.stdout}{ctl.stderr}")

        for h in hosts:
            h.wait_reachable(ROOT)
        caps = {}
        try:
            for i in CAPTURED:
                path = os.path.join(workdir, f"{hosts[i].name}.pcap")
                caps[i] = (path, start_capture(hosts[i], path))
            before = tb.metrics()
            reports = run_allreduce(
                tb, exe, hosts, 1, "int32", elements, 11, max(60.0, elements / (1 << 20) * 40),
                host_extra={i: ["--steer-ports", str(n)] for i, n in STEER.items()})
            after = tb.metrics()
            chunks = reports[0]["chunks"]
            check_switch(tb, before, 1, chunks)
            handed = delta(after, before, "inaswitch_ina_handed_off_total")
            check(handed > 0, f"{handed:.0f} contributions handed to the lcore owning their "
                              "chunk (no NIC steering here)")
            for i, (path, p) in caps.items():
                stop_capture(hosts[i], p, path)
            for i, (path, _) in caps.items():
                check_capture(hosts[i], path, STEER[i], chunks)
        finally:
            kill_leftovers([p for _, p in caps.values()])
        log(f"{elements} int32 x {N} workers steering over {sorted(STEER.values())} source "
            f"ports, switch on hand-off: ok")
    tap_refuses(switch_exe)


if __name__ == "__main__":
    main(test)
