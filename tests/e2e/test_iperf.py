# SPDX-License-Identifier: Apache-2.0
"""e2e-iperf: TCP and UDP (iperf3) routed across the switch, h1 (client) -> h2 (server).

h1 10.0.1.2/24 -- p0 10.0.1.1 [inaswitch] p1 10.0.2.1 -- h2 10.0.2.2/24
"""

import json
import os

from testbed import check, delta, log, main, two_subnets

SECONDS = int(os.environ.get("INAE2E_IPERF_SECONDS", "2"))
UDP_RATE = os.environ.get("INAE2E_UDP_RATE", "20M")
UDP_MAX_LOSS_PERCENT = 1.0
PORT = 5201


def iperf(tb, client_args: list[str]) -> dict:
    """One iperf3 run: a one-shot server in h2, the client in h1; returns the client's JSON."""
    h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
    server = h2.popen(["iperf3", "-s", "-1", "-B", h2.ip, "-p", str(PORT)])
    try:
        h2.wait_listening(PORT)
        timeout = SECONDS + 30
        p = h1.run(["iperf3", "-c", h2.ip, "-p", str(PORT), "-t", str(SECONDS), "--json",
                    "--connect-timeout", "3000"] + client_args, check_rc=False, timeout=timeout)
        result = json.loads(p.stdout) if p.stdout.strip() else {}
        check(p.returncode == 0 and "error" not in result,
              f"iperf3 {' '.join(client_args) or 'TCP'} completed "
              f"(rc {p.returncode}, {result.get('error', p.stderr.strip())})")
        server.wait(15)
        return result
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(5)


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h2.wait_reachable(h1.ip)

        p0 = tb.port("p0")

        def ring_drops(k0: int, m_before, m_after) -> int:
            """Frames the kernel delivered to p0's veth end that the switch never received:
            the af_packet RX ring overflowed (the PMD does not count these)."""
            return (p0.kernel_stat("rx_packets") - k0) - int(
                delta(m_after, m_before, "inaswitch_port_rx_packets_total", port="p0"))

        # TCP
        m0 = tb.metrics()
        k0 = p0.kernel_stat("rx_packets")
        r = iperf(tb, [])
        sent = r["end"]["sum_sent"]
        recv = r["end"]["sum_received"]
        mbps = recv["bits_per_second"] / 1e6
        log(f"TCP: {sent['bytes']} B sent, {recv['bytes']} B received, {mbps:.0f} Mbit/s, "
            f"{sent.get('retransmits', 0)} retransmits")
        check(recv["bytes"] > 0 and recv["bytes"] >= 0.9 * sent["bytes"],
              f"TCP: received {recv['bytes']} of {sent['bytes']} B")
        m1 = tb.metrics()
        rx_bytes = delta(m1, m0, "inaswitch_port_rx_bytes_total", port="p0")
        tx_bytes = delta(m1, m0, "inaswitch_port_tx_bytes_total", port="p1")
        check(rx_bytes >= recv["bytes"], f"p0 rx_bytes {rx_bytes:.0f} >= TCP payload "
                                         f"{recv['bytes']} received")
        check(tx_bytes >= recv["bytes"], f"p1 tx_bytes {tx_bytes:.0f} >= TCP payload "
                                         f"{recv['bytes']} received")
        # Every segment carries at most one MSS (1448 B with timestamps) of payload.
        min_segments = recv["bytes"] // 1460
        routed = delta(m1, m0, "inaswitch_routed_packets_total")
        check(routed >= min_segments, f"routed {routed:.0f} >= {min_segments} TCP segments")
        missed = {p: delta(m1, m0, "inaswitch_port_hw_rx_missed_total", port=p) for p in ("p0", "p1")}
        txdrop = {p: delta(m1, m0, "inaswitch_port_tx_dropped_total", port=p) for p in ("p0", "p1")}
        log(f"TCP: p0 af_packet RX ring overflow {ring_drops(k0, m0, m1)} frames (hw_rx_missed "
            f"says {missed}), TX rejected {txdrop}; TCP probes for the limit, so some are "
            "expected")
        for reason in ("ipv4_bad_checksum", "mtu_exceeded", "ipv4_malformed"):
            v = delta(m1, m0, "inaswitch_drops_total", reason=reason)
            check(v == 0, f"TCP: drops{{reason={reason}}} == 0 (got {v:.0f}; offloads off?)")

        # UDP at a modest rate
        m1 = tb.metrics()
        k1 = p0.kernel_stat("rx_packets")
        r = iperf(tb, ["-u", "-b", UDP_RATE])
        s = r["end"]["sum"]
        packets, lost = s["packets"], s["lost_packets"]
        log(f"UDP {UDP_RATE}: {packets} datagrams, {lost} lost ({s['lost_percent']:.2f}%), "
            f"{s['bits_per_second'] / 1e6:.1f} Mbit/s, jitter {s['jitter_ms']:.3f} ms")
        check(packets > 0, f"UDP: {packets} datagrams sent")
        check(s["lost_percent"] <= UDP_MAX_LOSS_PERCENT,
              f"UDP loss {s['lost_percent']:.2f}% <= {UDP_MAX_LOSS_PERCENT}%")
        m2 = tb.metrics()
        log(f"UDP: p0 af_packet RX ring overflow {ring_drops(k1, m1, m2)} frames")
        routed = delta(m2, m1, "inaswitch_routed_packets_total")
        check(routed >= packets - lost, f"routed {routed:.0f} >= {packets - lost} datagrams "
                                        "delivered")
        rx_p0 = delta(m2, m1, "inaswitch_port_rx_packets_total", port="p0")
        tx_p1 = delta(m2, m1, "inaswitch_port_tx_packets_total", port="p1")
        check(rx_p0 >= packets - lost, f"p0 rx_packets {rx_p0:.0f} >= {packets - lost}")
        check(tx_p1 >= packets - lost, f"p1 tx_packets {tx_p1:.0f} >= {packets - lost}")
        udp_bytes = s["bytes"]
        rx_bytes = delta(m2, m1, "inaswitch_port_rx_bytes_total", port="p0")
        check(rx_bytes >= udp_bytes * (1 - lost / max(packets, 1)),
              f"p0 rx_bytes {rx_bytes:.0f} >= UDP payload delivered")
        drops = {k: v for k, v in tb.metrics().by_label("inaswitch_drops_total", "reason").items()
                 if v}
        log(f"drops by reason (whole run): {drops}")
        check(tb.alive(), "switch still running")


if __name__ == "__main__":
    main(test)
