# SPDX-License-Identifier: Apache-2.0
"""e2e-l2: an L2 group of three ports bridging one subnet, plus one routed port.

    a 10.0.3.11/24 -- g0 (10.0.3.1/24) \\
    b 10.0.3.12/24 -- g1                 } l2_group "rack" [inaswitch] r0 10.0.4.1/24 -- d 10.0.4.2/24
    c 10.0.3.13/24 -- g2                /
"""

from testbed import Host, Port, Testbed, check, delta, log, main, wait_until


def test(exe: str) -> None:
    ports = [
        Port("g0", ipv4=["10.0.3.1/24"], l2_group="rack", host=Host("a", "10.0.3.11/24")),
        Port("g1", l2_group="rack", host=Host("b", "10.0.3.12/24", gw="10.0.3.1")),
        Port("g2", l2_group="rack", host=Host("c", "10.0.3.13/24", gw="10.0.3.1")),
        Port("r0", ipv4=["10.0.4.1/24"], host=Host("d", "10.0.4.2/24")),
    ]
    with Testbed(exe, ports) as tb:
        a, b, c, d = (tb.hosts[n] for n in "abcd")
        m0 = tb.metrics()

        # a -> b: a's ARP request is flooded to g1 and g2, b's reply is bridged (or flooded
        # until a's MAC is learned). Nothing waits for the control plane, so nothing is lost.
        tx, rx = a.ping(b.ip, count=5, interval=0.05)
        check(tx == rx == 5, f"a -> b (bridged): {rx}/{tx} replies")
        tx, rx = b.ping(a.ip, count=5, interval=0.05)
        check(tx == rx == 5, f"b -> a (bridged): {rx}/{tx} replies")

        # MAC learning goes through the control plane: poll until both MACs are in the FDB.
        def fdb_has_both():
            fdb = {e["mac"]: e for e in tb.api_json("GET", "/api/v1/fdb")}
            return fdb if a.mac in fdb and b.mac in fdb else None
        fdb = wait_until(fdb_has_both, 10, "a's and b's MACs in GET /api/v1/fdb")
        for h, port in ((a, "g0"), (b, "g1")):
            e = fdb[h.mac]
            check(e["port"] == port and e["group"] == "rack",
                  f"FDB: {h.name} {h.mac} on {port} in group rack (got {e})")
        check(tb.port("g0").mac not in fdb, "FDB: the switch's own MAC is not learned")

        m1 = tb.metrics()
        bridged = delta(m1, m0, "inaswitch_bridged_packets_total")
        flooded = delta(m1, m0, "inaswitch_flooded_packets_total")
        check(bridged >= 16, f"bridged {bridged:.0f} >= 16 (echoes after learning)")
        check(flooded >= 1, f"flooded {flooded:.0f} >= 1 (a's broadcast ARP request)")
        check(m1.get("inaswitch_fdb_entries") >= 2, "inaswitch_fdb_entries >= 2")
        # A learned MAC is one insert into the in-place FDB, never a new snapshot.
        published = delta(m1, m0, "inaswitch_snapshots_published_total")
        check(published == 0, f"no snapshot published while learning (got {published:.0f})")
        check(m1.get("inaswitch_table_entries", table="fdb") == m1.get("inaswitch_fdb_entries"),
              "FDB table entries == learned MAC addresses")

        # Known unicast is not flooded: c sees none of a <-> b's echoes once both are learned.
        c_rx0 = c.read_stat("rx_packets")
        tx, rx = a.ping(b.ip, count=20, interval=0.02)
        check(tx == rx == 20, f"a -> b again: {rx}/{tx} replies")
        c_rx = c.read_stat("rx_packets") - c_rx0
        check(c_rx <= 2, f"c received {c_rx} frames while a and b exchanged 40 "
                         "(known unicast is bridged, not flooded)")
        m2 = tb.metrics()
        check(delta(m2, m1, "inaswitch_bridged_packets_total") >= 40,
              "bridged moved by >= 40 for 20 echoes")

        # Sustained bridged traffic keeps its MACs: the control thread ages the FDB against the
        # last-seen stamps the worker writes meanwhile, and a stamp newer than the ager's clock
        # once read as an age of ~2^64 cycles (every MAC in use expired and was learned again).
        p = a.run(["ping", "-f", "-q", "-c", "20000", "-w", "3", b.ip], check_rc=False,
                  timeout=20)
        m_flood = tb.metrics()
        expired = delta(m_flood, m2, "inaswitch_fdb_expired_total")
        check(expired == 0, f"no FDB entry expired while a flood-pinged b (got {expired:.0f}; "
                            f"ping: {p.stdout.strip().splitlines()[-2:]})")
        check(delta(m_flood, m2, "inaswitch_bridged_packets_total") >= 1000,
              "the flood ping was bridged (>= 1000 frames)")
        fdb = {e["mac"]: e for e in tb.api_json("GET", "/api/v1/fdb")}
        check(a.mac in fdb and b.mac in fdb and fdb[a.mac]["idle_s"] < 60,
              f"a's and b's MACs still learned, recently seen (got {fdb.get(a.mac)})")

        # The gateway address lives on g0; the switch answers for it on every member.
        tx, rx = c.ping("10.0.3.1", count=3, interval=0.05)
        check(tx == rx == 3, f"c (on g2) -> gateway 10.0.3.1: {rx}/{tx} replies")
        check(c.neigh_mac("10.0.3.1") is not None, "c resolved the gateway's MAC")

        # Routed between the L2 group and a routed port, from a member without the address.
        # The first echoes wait for the switch to ARP for d and c (the request for c is
        # flooded in the group); then every echo must come back.
        b.wait_reachable(d.ip)
        d.wait_reachable(c.ip)
        tx, rx = b.ping(d.ip, count=5, interval=0.05)
        check(tx == rx == 5, f"b (on g1) -> d (routed): {rx}/{tx} replies")
        tx, rx = d.ping(c.ip, count=5, interval=0.05)
        check(tx == rx == 5, f"d -> c (routed into the group): {rx}/{tx} replies")
        neigh = {n["ip"]: n for n in tb.api_json("GET", "/api/v1/neighbours")}
        for h, port in ((b, "g1"), (c, "g2"), (d, "r0")):
            n = neigh.get(h.ip, {})
            check(n.get("port") == port and n.get("mac") == h.mac,
                  f"neighbour {h.ip} learned on {port} (got {n})")
        m3 = tb.metrics()
        check(delta(m3, m2, "inaswitch_routed_packets_total") >= 20,
              "routed moved by >= 20 for the 10 answered routed echoes")
        drops = {k: v for k, v in m3.by_label("inaswitch_drops_total", "reason").items() if v}
        log(f"drops by reason: {drops}")
        check(drops.get("l2_same_port", 0) == 0, "no l2_same_port drops")
        check(tb.alive(), "switch still running")


if __name__ == "__main__":
    main(test)
