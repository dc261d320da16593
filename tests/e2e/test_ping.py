# SPDX-License-Identifier: Apache-2.0
"""e2e-ping: ARP and ICMP across two routed subnets.

h1 10.0.1.2/24 -- p0 10.0.1.1 [inaswitch] p1 10.0.2.1 -- h2 10.0.2.2/24
"""

from testbed import check, delta, main, two_subnets

COUNT = 10


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        p0, p1 = tb.port("p0"), tb.port("p1")
        m0 = tb.metrics()

        # Cold start: the echoes sent while the switch ARPs for h2 are dropped (ping goes on
        # until it has COUNT replies). At 50 ms intervals that is one or two on an idle
        # machine; each must be accounted for as a neighbour_unresolved drop.
        tx1, rx1 = h1.ping(h2.ip, count=COUNT, interval=0.05)
        check(rx1 == COUNT, f"h1 -> h2: {rx1}/{tx1} replies, expected {COUNT}")
        lost_cold = tx1 - rx1
        tx2, rx2 = h2.ping(h1.ip, count=COUNT, interval=0.05)
        check(tx2 == rx2 == COUNT, f"h2 -> h1: {rx2}/{tx2} replies, expected all {COUNT} "
                            "(both neighbours are resolved by now)")

        # The switch's own addresses, from the attached subnet and across the switch.
        local = [(h1, "10.0.1.1"), (h2, "10.0.2.1"), (h1, "10.0.2.1"), (h2, "10.0.1.1")]
        local_rx = 0
        for h, addr in local:
            tx, rx = h.ping(addr, count=3, interval=0.05)
            check(rx == 3, f"{h.name} -> switch {addr}: {rx}/{tx} replies")
            local_rx += rx

        # The hosts resolved their gateways to the switch ports' MACs (ARP answered).
        check(h1.neigh_mac("10.0.1.1") == p0.mac, f"h1 resolved 10.0.1.1 to p0's MAC {p0.mac}")
        check(h2.neigh_mac("10.0.2.1") == p1.mac, f"h2 resolved 10.0.2.1 to p1's MAC {p1.mac}")

        m = tb.metrics()
        # Each port received at least every echo its host sent and sent back every reply.
        h1_sent = tx1 + 6
        h2_sent = tx2 + 6
        for port, sent, received in (("p0", h1_sent, rx1 + rx2 + 6),
                                     ("p1", h2_sent, rx1 + rx2 + 6)):
            rx = delta(m, m0, "inaswitch_port_rx_packets_total", port=port)
            txp = delta(m, m0, "inaswitch_port_tx_packets_total", port=port)
            check(rx >= sent, f"{port} rx_packets {rx:.0f} >= {sent} echoes its host sent")
            check(txp >= received, f"{port} tx_packets {txp:.0f} >= {received} echoes delivered")
            rxb = delta(m, m0, "inaswitch_port_rx_bytes_total", port=port)
            check(rxb >= sent * 98, f"{port} rx_bytes {rxb:.0f} >= {sent} x 98 B")
        routed = delta(m, m0, "inaswitch_routed_packets_total")
        check(routed >= 2 * (rx1 + rx2), f"routed {routed:.0f} >= {2 * (rx1 + rx2)} "
                                         "(each answered echo: request and reply)")
        echo = delta(m, m0, "inaswitch_icmp_echo_replies_total")
        check(echo >= local_rx, f"icmp_echo_replies {echo:.0f} >= {local_rx}")
        arp = m.get("inaswitch_arp_replies_total")
        check(arp >= 1, f"arp_replies {arp:.0f} >= 1")
        unresolved = m.get("inaswitch_drops_total", reason="neighbour_unresolved")
        check(1 <= unresolved and lost_cold <= unresolved <= lost_cold + 1,
              f"neighbour_unresolved drops {unresolved:.0f} account for the {lost_cold} echoes "
              "lost while the switch resolved h2 (and at most one reply to h1)")
        # Counted from the start of the pings: what the hosts' kernels sent while their links
        # came up (before m0) is not the pings' doing.
        for reason in ("ipv4_bad_checksum", "ipv4_malformed", "runt", "no_route", "tx_full",
                       "ttl_exceeded", "not_for_us"):
            v = delta(m, m0, "inaswitch_drops_total", reason=reason)
            check(v == 0, f"drops{{reason={reason}}} == 0 during the pings (got {v:.0f})")
        check(m.get("inaswitch_neighbours", kind="learned") == 2, "2 learned neighbours")
        # Learning h2 (during the cold start) is one insert into the in-place neighbour table,
        # never a new snapshot; the table holds every known neighbour.
        published = delta(m, m0, "inaswitch_snapshots_published_total")
        check(published == 0, f"no snapshot published while learning (got {published:.0f})")
        entries = m.get("inaswitch_table_entries", table="neighbours")
        check(entries == m.get("inaswitch_neighbours"),
              f"neighbour table entries {entries:.0f} == static + learned neighbours")

        neigh = {n["ip"]: n for n in tb.api_json("GET", "/api/v1/neighbours")}
        for h, port in ((h1, "p0"), (h2, "p1")):
            n = neigh.get(h.ip)
            check(n is not None and n["mac"] == h.mac and n["port"] == port and
                  n["kind"] == "learned",
                  f"GET /api/v1/neighbours: {h.ip} learned at {h.mac} on {port} (got {n})")

        status = tb.api_json("GET", "/api/v1/status")
        ports = {p["name"]: p for p in status["ports"]}
        check(set(ports) == {"p0", "p1"} and ports["p0"]["driver"] == "net_af_packet",
              "GET /api/v1/status lists p0 and p1 on net_af_packet")
        check(ports["p0"]["mac"].lower() == p0.mac, f"status: p0's MAC is {p0.mac}")
        check(status["routed"] >= routed, "status: routed agrees with /metrics")
        check(tb.alive(), "switch still running")
        rc = tb.stop()
        check(rc == 0, f"switch exited 0 on SIGTERM (got {rc})")


if __name__ == "__main__":
    main(test)
