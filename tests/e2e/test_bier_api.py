# SPDX-License-Identifier: Apache-2.0
"""e2e-bier-api: BIER configured at run time through the control API, carrying a multicast group.

A running switch without BIER gets a `bier` section by PUT /api/v1/bier: one BIFT (BSL 64) whose
own bits 1 and 2 are the hosts h1 and h2, and BFR-id 50 as BFIR. POST /api/v1/bier/groups adds
239.5.5.5 with bits {2}: h1 sends to the group, the switch encapsulates (it is the BFIR), its own
bit 2 delivers to h2, whose group socket gets every datagram; GET /api/v1/bier and /metrics
count the packets and deliveries per BIFT. A bad body is refused with api:line:col and changes
nothing; the running config (GET /api/v1/config) PUT back is accepted unchanged. DELETE removes the group: later datagrams are dropped as mcast_no_group, h2 gets none,
and deleting it again answers 404.
"""

import json
import subprocess
import os

from testbed import check, delta, main, to_yaml, two_subnets

HERE = os.path.dirname(os.path.abspath(__file__))
MCAST = os.path.join(HERE, "fig1", "mcast.py")
GROUP, PORT = "239.5.5.5", 9555


def send(h, count: int) -> None:
    out = h.run(["/usr/bin/python3", MCAST, "send", "--group", GROUP, "--port", str(PORT),
                 "--iface-addr", h.ip, "--count", str(count), "--rate", "2000"], timeout=30)
    check(json.loads(out.stdout)["sent"] == count, f"{h.name} sent {count} datagrams to {GROUP}")


def receive_while(h, action) -> dict:
    """Runs `action()` while a group socket in `h` counts datagrams; returns its report."""
    p = h.popen(["/usr/bin/python3", MCAST, "recv", "--group", GROUP, "--port", str(PORT),
                 "--iface-addr", h.ip, "--timeout", "30"], stdin=subprocess.PIPE)
    check(p.stdout.readline().strip() == "ready", f"{h.name} joined {GROUP}")
    try:
        action()
    finally:
        out, _ = p.communicate(input="", timeout=30)
    return json.loads(out.strip().splitlines()[-1])


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h2.wait_reachable(h1.ip)  # both hosts' MACs known: own-bit delivery needs them

        bier = {"bfr_id": 50, "bifts": [{"bsl": 64, "local": [
            {"bfr_id": 1, "host": h1.ip}, {"bfr_id": 2, "host": h2.ip}]}]}
        status, text = tb.http("PUT", "/api/v1/bier", bier)
        check(status == 200, f"PUT /api/v1/bier: HTTP {status} {text.strip()}")
        status, text = tb.http("PUT", "/api/v1/bier", {"bfr_id": 50, "bifts": [{"bsl": 100}]})
        check(status == 422 and "api:" in text and "64, 128, 256" in text,
              f"a bad BSL is refused with its place ({status} {text.strip()})")
        status, text = tb.http("POST", "/api/v1/bier/groups", {"group": GROUP, "bfr_ids": "2"})
        check(status == 200, f"POST /api/v1/bier/groups: HTTP {status} {text.strip()}")
        status, text = tb.http("POST", "/api/v1/bier/groups", {"group": "10.1.1.1", "bfr_ids": "2"})
        check(status == 422 and "multicast" in text, f"a unicast group is refused ({status})")

        got = tb.api_json("GET", "/api/v1/bier")
        check(got["bfr_id"] == 50 and got["groups"] == [{"group": GROUP, "bfr_ids": "2"}] and
              got["bifts"][0]["bift_id"] == 0x10000,
              f"GET /api/v1/bier shows the BIFT 0x10000 and the group ({got})")

        # The running config round-trips: GET /api/v1/config, PUT it back, nothing changes.
        cfg = tb.api_json("GET", "/api/v1/config")
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200 and tb.api_json("GET", "/api/v1/config") == cfg,
              f"GET /api/v1/config with its bier section PUT back unchanged ({status} {text.strip()})")

        before = tb.metrics()
        report = receive_while(h2, lambda: send(h1, 100))
        after = tb.metrics()
        check(report["distinct"] == 100, f"h2 received all 100 datagrams of the group ({report})")
        check(report["sources"] == [h1.ip], "from h1, the group address kept")
        labels = {"bift_id": str(0x10000), "sd": "0", "bsl": "64", "set": "0"}
        check(delta(after, before, "inaswitch_bier_packets_total", **labels) == 100,
              "100 packets encapsulated into the BIFT")
        check(delta(after, before, "inaswitch_bier_bift_delivered_total", **labels) == 100,
              "100 deliveries to bit 2 (h2), none to bit 1")
        check(delta(after, before, "inaswitch_bier_mcast_encapsulated_total") == 100,
              "the switch was the BFIR for each")
        stats = tb.api_json("GET", "/api/v1/bier")["bifts"][0]["stats"]
        check(stats["delivered"] >= 100, f"the API shows the deliveries ({stats})")

        status, _ = tb.http("DELETE", f"/api/v1/bier/groups?group={GROUP}")
        check(status == 200, "DELETE the group")
        dropped = tb.metrics().get("inaswitch_drops_total", reason="mcast_no_group")
        report = receive_while(h2, lambda: send(h1, 20))
        tb.wait_metric("inaswitch_drops_total", lambda v: v >= dropped + 20,
                       reason="mcast_no_group")
        check(report["received"] == 0, f"no group, no delivery ({report})")
        check(tb.metrics().get("inaswitch_drops_total", reason="mcast_no_group") == dropped + 20,
              "exactly the 20 datagrams dropped as mcast_no_group")
        status, _ = tb.http("DELETE", f"/api/v1/bier/groups?group={GROUP}")
        check(status == 404, "deleting it again: 404")


if __name__ == "__main__":
    main(test)
