# SPDX-License-Identifier: Apache-2.0
"""e2e-dumpcap: `dpdk-dumpcap --file-prefix <prefix>` (Debian's dpdk package) captures packets
from a port of the running switch (the switch calls rte_pdump_init), and forwarding loses
nothing while it attaches, captures and detaches.

dpdk-dumpcap is a DPDK secondary process: it maps the primary's memory, which must therefore
be hugepage-backed. A --no-huge primary (what every other e2e test uses) cannot host it: the
secondary fails with "Failed to open shared memory! Cannot get hugepage information". So this
test runs the switch on 64 MB of hugepages on a private hugetlbfs mount, reserving the pages
if too few are free and handing them back at the end; if the kernel cannot provide them it
exits 77 (meson: SKIP) and says why.
"""

import os
import shutil
import sys

from testbed import Hugepages, check, log, main, run, two_subnets

# The switch: each forwarding snapshot has its own DIR-24-8 LPM (a 64 MB tbl24), and two
# coexist while a new one is published; plus the mbuf pool and hashes. dumpcap: its ring and
# mbufs.
HUGEPAGE_MB = 256
CAPTURE = 20


def test(exe: str) -> None:
    if not shutil.which("dpdk-dumpcap") or not shutil.which("tshark"):
        raise SystemExit("dpdk-dumpcap or tshark not installed: run .ci/setup")
    try:
        huge = Hugepages(HUGEPAGE_MB)
    except Hugepages.Unavailable as e:
        log(f"SKIP: no {HUGEPAGE_MB} MB of hugepages for the switch ({e}); dpdk-dumpcap cannot "
            "attach to a --no-huge switch")
        sys.exit(77)
    try:
        run_capture(exe, huge.dir)
    finally:
        huge.close()


def run_capture(exe: str, huge_dir: str) -> None:
    with two_subnets(exe, huge_dir=huge_dir) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)

        p = run(["dpdk-dumpcap", "--file-prefix", tb.file_prefix, "-D"], check_rc=False,
                timeout=30)
        check(p.returncode == 0 and "net_af_packet0" in p.stdout and "net_af_packet1" in p.stdout,
              f"dpdk-dumpcap -D lists both ports (rc {p.returncode}: {p.stdout.strip()!r} "
              f"{p.stderr.strip()!r})")

        # A steady ping runs while dumpcap attaches, captures and detaches.
        pcap = os.path.join(tb.workdir, "p0.pcapng")
        ping = h1.popen(["ping", "-n", "-q", "-i", "0.02", "-c", "200", "-W", "2", h2.ip])
        try:
            p = run(["dpdk-dumpcap", "--file-prefix", tb.file_prefix, "-i", "net_af_packet0",
                     "-s", "256", "-c", str(CAPTURE), "-a", "duration:20", "-w", pcap],
                    check_rc=False, timeout=40)
            check(p.returncode == 0, f"dpdk-dumpcap -i net_af_packet0 -c {CAPTURE} exited 0 "
                                     f"({p.stderr.strip().splitlines()[-1:]})")
            out, _ = ping.communicate(timeout=30)
        finally:
            if ping.poll() is None:
                ping.kill()
                ping.wait(5)
        r = run(["tshark", "-n", "-r", pcap, "-T", "fields", "-e", "ip.src", "-e", "ip.dst",
                 "-e", "icmp.type"], check_rc=False, timeout=30)
        rows = [line.split("\t") for line in r.stdout.splitlines() if line.strip()]
        log(f"captured {len(rows)} packets, first: {rows[:4]}")
        check(len(rows) == CAPTURE, f"the capture holds {CAPTURE} packets (got {len(rows)})")
        requests = [x for x in rows if x == [h1.ip, h2.ip, "8"]]
        replies = [x for x in rows if x == [h2.ip, h1.ip, "0"]]
        check(requests and replies and len(requests) + len(replies) == len(rows),
              f"captured echo requests received on p0 ({len(requests)}) and replies sent on it "
              f"({len(replies)}), nothing else")
        summary = [line for line in out.splitlines() if "transmitted" in line]
        check("200 packets transmitted, 200 received" in out,
              f"no echo lost while dumpcap attached and detached ({summary})")
        check(tb.alive(), "switch still running after dumpcap detached")
        tx, rx = h1.ping(h2.ip, count=5, interval=0.02)
        check(tx == rx == 5, "forwarding still works")


if __name__ == "__main__":
    main(test)
