# SPDX-License-Identifier: Apache-2.0
"""e2e-telemetry: `dpdk-telemetry.py -f <file-prefix>` (Debian's dpdk package) talks to the
running switch's telemetry socket (/var/run/dpdk/<prefix>/dpdk_telemetry.v2) and answers
/inaswitch/stats, /inaswitch/drops and /inaswitch/ports with values that agree with
GET /metrics, plus DPDK's own /ethdev/list."""

import json
import os
import shutil

from testbed import check, log, main, run, two_subnets


def telemetry(prefix: str, commands: list[str]) -> dict:
    """Runs dpdk-telemetry.py with one command per stdin line; it prints one JSON object per
    command."""
    p = run(["dpdk-telemetry.py", "-f", prefix], input="\n".join(commands) + "\n",
            check_rc=False, timeout=30)
    out = {}
    for line in p.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            out.update(json.loads(line))
    check(p.returncode == 0 and all(c in out for c in commands),
          f"dpdk-telemetry.py -f {prefix} answered {commands} (rc {p.returncode}, "
          f"stderr {p.stderr.strip()!r})")
    return out


def test(exe: str) -> None:
    if not shutil.which("dpdk-telemetry.py"):
        raise SystemExit("dpdk-telemetry.py not installed (Debian package dpdk): run .ci/setup")
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h1.ping(h2.ip, count=10, interval=0.02)
        h2.ping("10.0.2.1", count=3, interval=0.02)

        check(os.path.exists(f"/var/run/dpdk/{tb.file_prefix}/dpdk_telemetry.v2"),
              "the telemetry socket exists under /var/run/dpdk/<file-prefix>/")
        t = telemetry(tb.file_prefix, ["/inaswitch/stats", "/inaswitch/drops",
                                       "/inaswitch/ports", "/ethdev/list"])
        m = tb.metrics()
        stats = t["/inaswitch/stats"]
        log(f"/inaswitch/stats: {stats}")
        check(20 <= stats["routed"] <= m.get("inaswitch_routed_packets_total"),
              f"telemetry routed {stats['routed']} >= 20 and <= a later scrape")
        check(stats["icmp_echo_replies"] >= 3, "telemetry icmp_echo_replies >= 3")
        check(stats["learned_neighbours"] == 2, "telemetry learned_neighbours == 2")
        check(stats["generation"] == m.get("inaswitch_config_generation"),
              "telemetry generation == inaswitch_config_generation")
        check(stats["loops"] >= stats["busy_loops"] > 0, "telemetry loops >= busy_loops > 0")
        check(stats["arp_replies"] >= 1 and stats["reloads_failed"] == 0,
              "telemetry arp_replies >= 1, reloads_failed == 0")
        drops = t["/inaswitch/drops"]
        check(set(drops) == set(m.by_label("inaswitch_drops_total", "reason")),
              "telemetry drop reasons == the reason labels of inaswitch_drops_total")
        check(drops["neighbour_unresolved"] <= m.get("inaswitch_drops_total",
                                                     reason="neighbour_unresolved"),
              "telemetry drops agree with a later scrape")
        ports = t["/inaswitch/ports"]
        check(set(ports) == {"p0", "p1"} and ports["p0"]["port_id"] == 0 and
              ports["p1"]["port_id"] == 1, "telemetry ports p0 (id 0) and p1 (id 1)")
        for name in ("p0", "p1"):
            check(ports[name]["rx_packets"] >= 13 and ports[name]["tx_packets"] >= 10 and
                  ports[name]["rx_bytes"] >= 10 * 98,
                  f"telemetry {name}: rx {ports[name]['rx_packets']}, "
                  f"tx {ports[name]['tx_packets']}")
        check(t["/ethdev/list"] == [0, 1], "telemetry /ethdev/list == [0, 1]")


if __name__ == "__main__":
    main(test)
