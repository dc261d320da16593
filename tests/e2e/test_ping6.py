# SPDX-License-Identifier: Apache-2.0
"""e2e-ping6: IPv6 across the switch between two routed subnets, and to the switch itself:
Neighbor Discovery both ways (hosts resolve the switch; the switch solicits the hosts and
learns them into its IPv6 neighbour table), ICMPv6 echo, the hop limit, and iperf3 -6 (TCP).

h1 2001:db8:1::2/64 -- p0 2001:db8:1::1 [inaswitch] p1 2001:db8:2::1 -- h2 2001:db8:2::2/64
(IPv4 on the same ports, as a dual-stack ToR has it.)
"""

import json

from testbed import Host, Port, Testbed, check, delta, log, main

COUNT = 10
IPERF_PORT = 5201


def test(exe: str) -> None:
    ports = [
        Port("p0", ipv4=["10.0.1.1/24"], ipv6=["2001:db8:1::1/64"],
             host=Host("h1", "10.0.1.2/24", addr6="2001:db8:1::2/64")),
        Port("p1", ipv4=["10.0.2.1/24"], ipv6=["2001:db8:2::1/64"],
             host=Host("h2", "10.0.2.2/24", addr6="2001:db8:2::2/64")),
    ]
    with Testbed(exe, ports) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        p0, p1 = tb.port("p0"), tb.port("p1")
        m0 = tb.metrics()

        # Across first, while the switch knows neither host: h1 resolves the switch by ND, the
        # switch solicits h2; the echoes sent meanwhile are dropped (counted) and ping goes on
        # until it has COUNT replies. The reverse direction finds both hosts known.
        tx1, rx1 = h1.ping(h2.ip6, count=COUNT, interval=0.05)
        check(rx1 == COUNT, f"h1 -> h2: {rx1}/{tx1} replies, expected {COUNT}")
        tx2, rx2 = h2.ping(h1.ip6, count=COUNT, interval=0.05)
        check(tx2 == rx2 == COUNT, f"h2 -> h1: {rx2}/{tx2} replies, expected all {COUNT}")

        # The switch's own addresses, from the attached subnet and across the switch.
        local_rx = 0
        for h, addr in ((h1, "2001:db8:1::1"), (h2, "2001:db8:2::1"), (h1, "2001:db8:2::1")):
            tx, rx = h.ping(addr, count=3, interval=0.05)
            check(rx == tx == 3, f"{h.name} -> switch {addr}: {rx}/{tx} replies")
            local_rx += rx
        check(h1.neigh_mac("2001:db8:1::1") == p0.mac, f"h1 resolved 2001:db8:1::1 to p0's MAC")
        check(h2.neigh_mac("2001:db8:2::1") == p1.mac, f"h2 resolved 2001:db8:2::1 to p1's MAC")

        # Hop limit 1 expires at the switch: counted, nothing crosses.
        m1 = tb.metrics()
        p = h1.run(["ping", "-n", "-q", "-c", "3", "-i", "0.05", "-W", "1", "-t", "1", h2.ip6],
                   check_rc=False, timeout=15)
        check("3 packets transmitted, 0 received" in p.stdout,
              f"hop limit 1: nothing answered ({p.stdout.strip().splitlines()[-2:]})")
        m2 = tb.metrics()
        expired = delta(m2, m1, "inaswitch_drops_total", reason="hop_limit_exceeded")
        check(expired == 3, f"hop_limit_exceeded drops {expired:.0f} == 3")

        m = tb.metrics()
        routed = delta(m, m0, "inaswitch_routed6_packets_total")
        check(routed >= 2 * (rx1 + rx2), f"routed6 {routed:.0f} >= {2 * (rx1 + rx2)}")
        echo = delta(m, m0, "inaswitch_icmp6_echo_replies_total")
        check(echo == local_rx, f"icmp6_echo_replies {echo:.0f} == {local_rx}")
        check(delta(m, m0, "inaswitch_nd_advertisements_total") >= 1,
              "the switch advertised its address to h1")
        check(delta(m, m0, "inaswitch_nd_solicitations_total") >= 1,
              "the switch solicited at least one host")
        unresolved = delta(m, m0, "inaswitch_drops_total", reason="neighbour_unresolved")
        lost = tx1 - rx1
        check(lost <= unresolved <= lost + 1,
              f"neighbour_unresolved drops {unresolved:.0f} account for the {lost} echoes lost "
              "while the switch resolved h2 (and at most one reply to h1)")
        entries = m.get("inaswitch_table_entries", table="neighbours6")
        check(entries == 2, f"IPv6 neighbour table holds h1 and h2 (got {entries:.0f})")
        check(m.get("inaswitch_table_capacity", table="neighbours6") > 0, "capacity reported")
        for reason in ("ipv6_malformed", "ipv6_bad_length", "nd_invalid", "icmp6_bad_checksum",
                       "no_route", "tx_full"):
            v = delta(m, m0, "inaswitch_drops_total", reason=reason)
            check(v == 0, f"drops{{reason={reason}}} == 0 (got {v:.0f})")

        # iperf3 -6: a short TCP run routed across.
        server = h2.popen(["iperf3", "-s", "-1", "-B", h2.ip6, "-p", str(IPERF_PORT)])
        try:
            h2.wait_listening(IPERF_PORT)
            r = h1.run(["iperf3", "-6", "-c", h2.ip6, "-p", str(IPERF_PORT), "-t", "2",
                        "--json", "--connect-timeout", "3000"], check_rc=False, timeout=40)
            res = json.loads(r.stdout) if r.stdout.strip() else {}
            check(r.returncode == 0 and "error" not in res,
                  f"iperf3 -6 completed (rc {r.returncode}, {res.get('error', r.stderr.strip())})")
            recv = res["end"]["sum_received"]
            log(f"iperf3 -6 TCP: {recv['bytes']} B, {recv['bits_per_second'] / 1e6:.0f} Mbit/s")
            check(recv["bytes"] > 0, "iperf3 -6 moved data")
            server.wait(15)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(5)


if __name__ == "__main__":
    main(test)
