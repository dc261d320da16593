# SPDX-License-Identifier: Apache-2.0
"""e2e-rdma-s2s: the RoCE server-to-server mode on a live switch between two Linux hosts
(docs/rdma.md "Server-to-server mode (as built)").

h1 (the worker, rank 1, QPN 17) and h2 (the root, QPN 0x40 of the connection) on two subnets,
rdma_s2s job 9 with world 1. h1 sends one WRITE_ONLY_WITH_IMM of chunk 0 (PSN 1000) through
the switch toward h2: h1 gets the ACK from h2's address (PSN 1000, DestQP 17) and h2 gets ONE
WRITE toward its QP 0x40 (PSN 1000, immediate 0 << 8 | 1, the same values), both with a valid
ICRC, and /metrics counts it. The running config's rdma_s2s section round-trips through
GET/PUT /api/v1/config (the job's state is kept: same counters); a server-to-switch `rdma`
section is added beside it (both modes share UDP 4791): RoCE to the switch's own address
reaches the endpoint, and everything below runs with both bound. With drain: true (state kept) and the root's ACK of the
aggregate, h1's next WRITE is forwarded to h2 as h1 sent it (the carrier's PSNs agree). The
job then changed (window): the new state starts from 0 while the old one is kept, leaving
(`leaving_job` series, the jobs_leaving gauge), and still forwards h1's next WRITE translated;
once over (its idle limit) it is released without a config change.
"""

import os
import struct
import subprocess
import zlib

from testbed import check, main, to_yaml, two_subnets, wait_until

HOST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "roce_s2s_host.py")
PY = "/usr/bin/python3"
VALUES = [7, -1, 300, 42]


def icrc_ok(src: str, dst: str, sport: int, udp_payload: bytes) -> bool:
    """rocev2.md §2: CRC-32 over 8 x 0xFF, the IPv4 header with TOS/TTL/checksum masked, the UDP
    header with its checksum masked, the BTH with byte 4 masked, the rest. A UDP socket does not
    see the IP identification, so the header is rebuilt with what the switch sends (DF, an
    identification counting from 0: the first few are tried)."""
    total = 20 + 8 + len(udp_payload)
    for ip_id in range(0, 8):
        ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0xFF, total, ip_id, 0x4000, 0xFF, 17, 0xFFFF,
                         bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
        udp = struct.pack(">HHHH", sport, 4791, 8 + len(udp_payload), 0xFFFF)
        body = bytearray(udp_payload[:-4])
        body[4] = 0xFF
        crc = zlib.crc32(b"\xff" * 8 + ip + udp + bytes(body)) & 0xFFFFFFFF
        if struct.pack("<I", crc) == udp_payload[-4:]:
            return True
    return False


def write_through(h1, h2, psn: int) -> bytes:
    """h1's WRITE of chunk 1 at `psn` toward the root's QP 0x40; what h2 received of it."""
    root = h2.popen([PY, "-B", HOST, "recv", "15"], stdout=subprocess.PIPE, text=True)
    check(root.stdout.readline().strip() == "listening", "the root listens again")
    h1.run([PY, "-B", HOST, "write", h1.ip, h2.ip, "0x40", str(psn), "1", *map(str, VALUES)],
           timeout=30)
    out, _ = root.communicate(timeout=20)
    return bytes.fromhex(out.strip().splitlines()[-1])


def test(exe: str) -> None:
    job = {"id": 9, "root": "10.0.2.2", "world": 1, "dtype": "int32", "chunk_bytes": 16,
           "window": 4, "timeout": 0,
           "connections": [{"rank": 1, "ip": "10.0.1.2", "qpn": 17, "root_qpn": 0x40,
                            "psn": 1000}]}
    with two_subnets(exe, extra={"rdma_s2s": {"jobs": [job]}}, tag="rdmas2s") as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        root = h2.popen([PY, "-B", HOST, "recv", "15"], stdout=subprocess.PIPE,
                        text=True)
        check(root.stdout.readline().strip() == "listening", "the root listens on UDP 4791")
        sent = h1.run([PY, "-B", HOST, "write", h1.ip, h2.ip, "0x40", "1000", "0",
                       *map(str, VALUES)], timeout=30)
        ack = bytes.fromhex(sent.stdout.strip().splitlines()[-1]) \
            if sent.stdout.strip().splitlines()[-1] != "none" else b""
        check(len(ack) == 12 + 4 + 4, f"h1 got an ACK back ({sent.stdout.strip()})")
        check(ack[0] == 0x11 and int.from_bytes(ack[5:8], "big") == 17 and
              int.from_bytes(ack[9:12], "big") == 1000 and ack[12] == 0x1F and
              int.from_bytes(ack[13:16], "big") == 1,
              f"ACK: opcode 0x11, DestQP 17, PSN 1000, AETH 0x1F MSN 1 ({ack.hex()})")
        sport_root = 0xC000 | ((0x40 * 0x9E3779B1) & 0xFFFFFFFF) >> 18
        check(icrc_ok(h2.ip, h1.ip, sport_root, ack), "the ACK's ICRC is valid, from h2's address")
        out, _ = root.communicate(timeout=20)
        got = out.strip().splitlines()[-1]
        check(got != "none", "h2 got the aggregate")
        agg = bytes.fromhex(got)
        check(agg[0] == 0x0B and int.from_bytes(agg[5:8], "big") == 0x40 and
              int.from_bytes(agg[9:12], "big") == 1000,
              f"aggregate: WRITE_ONLY_WITH_IMM to QP 0x40, PSN 1000 ({agg[:12].hex()})")
        imm = int.from_bytes(agg[28:32], "big")
        data = list(struct.unpack("<4i", agg[32:48]))
        check(imm == 0 << 8 | 1 and data == VALUES, f"immediate {imm:#x}, values {data}")
        sport_agg = 0xC000 | ((17 * 0x9E3779B1) & 0xFFFFFFFF) >> 18
        check(icrc_ok(h1.ip, h2.ip, sport_agg, agg), "the aggregate's ICRC is valid")

        m = tb.metrics()
        check(m.get("inaswitch_rdma_s2s_absorbed_total", job="9") == 1 and
              m.get("inaswitch_rdma_s2s_acks_synthesized_total", job="9") == 1 and
              m.get("inaswitch_rdma_s2s_aggregates_sent_total", job="9") == 1,
              "absorbed, ACKed, aggregated once")

        cfg = tb.api_json("GET", "/api/v1/config")
        check(cfg["rdma_s2s"]["jobs"][0]["connections"][0]["root_qpn"] == 0x40,
              f"GET /api/v1/config shows the rdma_s2s section ({cfg.get('rdma_s2s')})")
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200, f"the running config PUT back: {status} {text.strip()}")
        check(tb.metrics().get("inaswitch_rdma_s2s_absorbed_total", job="9") == 1,
              "an unchanged job keeps its state")

        # Both RoCE modes on one switch (they share UDP 4791): a server-to-switch job beside
        # the server-to-server one, kept for the rest of the test, so everything below runs
        # with the endpoint bound first and this job's packets passed on to rdma_s2s.
        cfg["rdma"] = {"jobs": [{"id": 7, "world": 2}]}
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200, f"rdma beside rdma_s2s: {status} {text.strip()[:200]}")
        cfg = tb.api_json("GET", "/api/v1/config")
        check(cfg["rdma"]["jobs"][0]["id"] == 7 and
              tb.metrics().get("inaswitch_rdma_s2s_absorbed_total", job="9") == 1,
              "both sections run; the server-to-server job keeps its state")
        unknown = tb.metrics().by_label("inaswitch_rdma_packets_total", "reason") \
            .get("unknown_qp", 0)
        h1.run([PY, "-B", HOST, "ack", h1.ip, h1.gw, "0x99", "5", "1"], timeout=30)
        wait_until(lambda: tb.metrics().by_label("inaswitch_rdma_packets_total", "reason")
                   .get("unknown_qp", 0) == unknown + 1, 10,
                   "RoCE to the switch's own address reaching the endpoint (unknown QP 0x99)")

        cfg["rdma_s2s"]["jobs"][0]["drain"] = True
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200, f"drain: true: {status} {text.strip()}")
        h2.run([PY, "-B", HOST, "ack", h2.ip, h1.ip, "17", "1000", "1"], timeout=30)
        wait_until(lambda: tb.metrics().get("inaswitch_rdma_s2s_aggregates_acked_total",
                                            job="9") == 1, 10, "the root's ACK consumed")
        fwd = write_through(h1, h2, 1001)
        check(fwd[0] == 0x0B and int.from_bytes(fwd[9:12], "big") == 1001 and
              int.from_bytes(fwd[28:32], "big") == 1 << 8 | 1,
              f"drained: h1's own WRITE reaches h2 (PSN 1001, chunk 1) ({fwd[:32].hex()})")
        m = tb.metrics()
        check(m.get("inaswitch_rdma_s2s_forwarded_total", job="9") == 1 and
              m.get("inaswitch_rdma_s2s_absorbed_total", job="9") == 1,
              "forwarded, not absorbed")

        cfg["rdma_s2s"]["jobs"][0]["window"] = 8
        # The old state's idle limit (below: released without a config change once over); h1's
        # write below waits ~10 s for an ACK nobody sends, so well above that.
        cfg["rdma_s2s"]["leave_timeout_ms"] = 20000
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200, f"a changed job: {status} {text.strip()}")
        m = tb.metrics()
        check(m.get("inaswitch_rdma_s2s_absorbed_total", job="9") == 0,
              "a changed job starts with a new state")
        # The old state leaves (docs/rdma.md "Leaving a job"): kept by the switch, its static
        # connection still translated, until a DREQ or rdma_s2s leave_timeout_ms of silence.
        check(m.get("inaswitch_rdma_s2s_absorbed_total", leaving_job="9") == 1 and
              m.get("inaswitch_rdma_s2s_jobs_leaving") == 1,
              "the replaced job's state is kept, leaving")
        fwd = write_through(h1, h2, 1002)
        check(fwd[0] == 0x0B and int.from_bytes(fwd[9:12], "big") == 1002,
              f"after the change h1's WRITE still reaches h2 translated by the leaving state "
              f"(PSN 1002) ({fwd[:32].hex()})")
        m = tb.metrics()
        check(m.get("inaswitch_rdma_s2s_forwarded_total", leaving_job="9") == 2 and
              m.get("inaswitch_rdma_s2s_leave_connections_translated_total",
                    leaving_job="9") == 1 and
              m.get("inaswitch_rdma_s2s_absorbed_total", job="9") == 0,
              "forwarded by the leaving state, not absorbed by the new job")
        # Over (leave_timeout_ms without a packet: its connection's CM does not cross the
        # switch here), the state is released WITHOUT a config change: the control plane's
        # tick detaches it (the feature's `release` hook) and publishes the running config
        # again, without its entries; its `leaving_job` series keep their final values (a
        # scrape after the release still reads what the leaving state did).
        published = m.get("inaswitch_snapshots_published_total")
        wait_until(lambda: tb.metrics().get("inaswitch_snapshots_published_total") > published,
                   60, "the left state released without a config change")
        m = tb.metrics()
        check(m.get("inaswitch_rdma_s2s_absorbed_total", leaving_job="9") == 1 and
              m.get("inaswitch_rdma_s2s_forwarded_total", leaving_job="9") == 2 and
              m.get("inaswitch_rdma_s2s_leave_ended_timeout_total", leaving_job="9") == 1 and
              m.get("inaswitch_rdma_s2s_slots_in_use", leaving_job="9") == 0,
              "the released state's counters outlive it: absorbed 1, forwarded 2, ended by "
              "the timeout, no slot held")
        check(m.get("inaswitch_rdma_s2s_jobs_leaving") == 0 and
              m.get("inaswitch_rdma_s2s_absorbed_total", job="9") == 0 and
              tb.api_json("GET", "/api/v1/config") == cfg,
              "a snapshot published for the release, the running config and the new job "
              "unchanged")


if __name__ == "__main__":
    main(test)
