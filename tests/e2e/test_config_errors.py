# SPDX-License-Identifier: Apache-2.0
"""e2e-config-errors: bad configuration files are refused with file:line:col, both by
`inaswitch --check-config FILE` and by `inaswitch -c FILE` (which must not start), exit 2."""

import os
import shutil
import tempfile

from testbed import check, log, main, run

VALID = """\
version: 1
eal:
  args: ["-l", "0-1", "--no-huge", "-m", "256", "--no-pci"]
ports:
  - name: p0
    devargs: "net_null0"
    ipv4: [10.0.1.1/24]
  - name: p1
    devargs: "net_null1"
    ipv4: [10.0.2.1/24]
routes:
  - prefix: 10.9.0.0/16
    via: 10.0.2.2
control:
  listen: ""
"""


def edit(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new, 1)


# name -> (file text, [(line, col, message fragment), ...]); lines and columns are 1-based.
CASES = {
    "unknown-key": (
        edit("routes:\n", "bogus: 1\nroutes:\n"),
        [(11, 1, "unknown key 'bogus' in the top level")]),
    "kebab-key": (
        edit('    devargs: "net_null1"\n', '    devargs: "net_null1"\n    rx-queues: 2\n'),
        [(10, 5, "unknown key 'rx-queues' in a port; keys are snake_case: did you mean "
                 "'rx_queues'?")]),
    "wrong-type-int": (
        edit("    ipv4: [10.0.2.1/24]\n", "    ipv4: [10.0.2.1/24]\n    mtu: big\n"),
        [(11, 10, "expected mtu: an integer from 68 to 9600, got 'big'")]),
    "wrong-type-list": (
        edit("    ipv4: [10.0.1.1/24]\n", "    ipv4: 10.0.1.1/24\n"),
        [(7, 11, "expected a list of interface addresses")]),
    "out-of-range": (
        edit("routes:\n", "dataplane:\n  burst_size: 65\nroutes:\n"),
        [(12, 15, "expected burst_size: an integer from 1 to 64, got '65'")]),
    "bad-address": (
        edit("10.0.2.1/24", "10.0.2.300/24"),
        [(10, 12, "expected an interface address like 10.0.1.1/24, got '10.0.2.300/24'")]),
    "bad-gateway": (
        edit("    via: 10.0.2.2\n", "    via: 10.0.2\n"),
        [(13, 10, "expected a gateway address like 10.0.2.2, got '10.0.2'"),
         (12, 5, "expected 'via' (a gateway) or 'port' (a device route) in a route")]),
    "host-bits": (
        edit("  - prefix: 10.9.0.0/16\n", "  - prefix: 10.9.0.1/16\n"),
        [(12, 13, "expected a network address with no host bits set; did you mean "
                  "'10.9.0.0/16'?")]),
    "unknown-port-route": (
        edit("    via: 10.0.2.2\n", "    port: p9\n"),
        [(12, 5, "unknown port 'p9' in route 10.9.0.0/16")]),
    "unknown-port-neighbour": (
        edit("control:\n", "neighbours:\n  - ip: 10.0.1.9\n    mac: \"02:00:00:00:00:09\"\n"
                           "    port: nope\ncontrol:\n"),
        [(15, 5, "unknown port 'nope' for neighbour 10.0.1.9")]),
    "unknown-port-lcore": (
        edit("routes:\n", "lcores:\n  - lcore: 1\n    rx: [{port: p0}, {port: p1}, {port: p7}]\n"
                           "routes:\n"),
        [(13, 34, "unknown port 'p7'; expected a name from 'ports'")]),
    "gateway-unreachable": (
        edit("    via: 10.0.2.2\n", "    via: 10.7.0.1\n"),
        [(12, 5, "gateway 10.7.0.1 of route 10.9.0.0/16 is in no connected subnet")]),
    "overlapping-subnets": (
        edit("10.0.2.1/24", "10.0.1.2/16"),
        [(8, 5, "prefix 10.0.1.2/16 on port 'p1' overlaps 10.0.1.1/24 on port 'p0'")]),
    "missing-key": (
        edit('    devargs: "net_null1"\n', ""),
        [(8, 5, "missing key 'devargs' in a port")]),
    "syntax-unclosed-flow": (
        edit('"--no-pci"]', '"--no-pci"'),
        [(4, 1, "YAML syntax error: end of sequence flow not found")]),
    "syntax-indentation": (
        edit('    devargs: "net_null0"\n', '    devargs: "net_null0"\n   bad: 1\n'),
        [(7, 4, "YAML syntax error")]),
    # Issue 9 defect 5: a root (no fallback) with a workers' window above its slots could wedge.
    "root-worker-window": (
        edit("control:\n", "ina:\n  jobs:\n    - job_id: 1\n      role: root\n      abm: \"1-2\"\n"
                           "      op: sum\n      elem_type: int32\n      root: 10.0.1.1\n"
                           "      window: 64\n      worker_window: 128\n"
                           "      workers: [{bfr_id: 1, ip: 10.0.1.2}, {bfr_id: 2, ip: 10.0.1.3}]\n"
                           "control:\n"),
        [(23, 22, "worker_window 128 above 'window' (64) at a root")]),
    "several-errors": (
        edit("routes:\n", "bogus: 1\nroutes:\n").replace("10.0.2.1/24", "10.0.2.300/24"),
        [(10, 12, "got '10.0.2.300/24'"), (11, 1, "unknown key 'bogus'")]),
}


def test(exe: str) -> None:
    work = tempfile.mkdtemp(prefix="inae2e-config-")
    try:
        valid = os.path.join(work, "valid.yaml")
        with open(valid, "w") as f:
            f.write(VALID)
        p = run([exe, "--check-config", valid], check_rc=False, timeout=20)
        check(p.returncode == 0 and "valid (2 ports, 1 routes)" in p.stdout,
              f"--check-config accepts the valid file (rc {p.returncode}: "
              f"{(p.stdout + p.stderr).strip()})")
        example = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "config",
                               "example-tor.yaml")
        if os.path.exists(example):
            p = run([exe, "--check-config", example], check_rc=False, timeout=20)
            check(p.returncode == 0, f"--check-config accepts config/example-tor.yaml "
                                     f"(rc {p.returncode}: {p.stderr.strip()})")

        for name, (text, expected) in CASES.items():
            path = os.path.join(work, f"{name}.yaml")
            with open(path, "w") as f:
                f.write(text)
            p = run([exe, "--check-config", path], check_rc=False, timeout=20)
            lines = p.stderr.splitlines()
            check(p.returncode == 2, f"{name}: --check-config exits 2 (got {p.returncode})")
            check(len(lines) == len(expected),
                  f"{name}: {len(expected)} error line(s) on stderr (got {p.stderr!r})")
            # Every error is reported (in the order the loader finds them, not by line).
            for line, col, fragment in expected:
                prefix = f"{path}:{line}:{col}: "
                check(any(got.startswith(prefix) and fragment in got for got in lines),
                      f"{name}: stderr has a line starting {prefix!r} that says {fragment!r}")

            # -c with the same file: refused before the EAL starts (no runtime directory, no
            # "running" line), with the same errors.
            prefix = f"inae2e{os.getpid()}cfg"
            p2 = run([exe, "-c", path, "--file-prefix", prefix], check_rc=False, timeout=20)
            check(p2.returncode == 2 and p2.stderr == p.stderr and
                  "running" not in p2.stderr and not os.path.exists(f"/var/run/dpdk/{prefix}"),
                  f"{name}: -c exits 2 with the same errors, without starting "
                  f"(rc {p2.returncode})")

        missing = os.path.join(work, "missing.yaml")
        p = run([exe, "--check-config", missing], check_rc=False, timeout=20)
        check(p.returncode == 2 and p.stderr.startswith(f"{missing}: cannot open file"),
              f"--check-config of a missing file exits 2 naming it ({p.stderr.strip()})")
        log(f"{len(CASES)} bad files refused with the right file:line:col")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(test)
