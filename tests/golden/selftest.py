# SPDX-License-Identifier: Apache-2.0
"""Checks that run_case.py fails when it should: it runs copies of the arp case with one
expectation broken at a time and requires exit status 1 (the switch differs from the case)
for each, 2 where the case contradicts itself, and 0 for the unbroken copy and for a
reordering on a port the case declares unordered.

    selftest.py --binary PATH/TO/inaswitch
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pcapio import read_pcap, write_pcap  # noqa: E402


def flip_byte(case, port, index, offset):
    path = os.path.join(case, f"expect_{port}.pcap")
    frames = read_pcap(path)
    b = bytearray(frames[index])
    b[offset] ^= 0x01
    frames[index] = bytes(b)
    write_pcap(path, frames)


def flip_byte_async(case):
    path = os.path.join(case, "async_p1.pcap")
    frames = read_pcap(path)
    b = bytearray(frames[0])
    b[41] ^= 0x01  # last byte of the target address
    frames[0] = bytes(b)
    write_pcap(path, frames)


def swap_first_two(case, port):
    path = os.path.join(case, f"expect_{port}.pcap")
    frames = read_pcap(path)
    frames[0], frames[1] = frames[1], frames[0]
    write_pcap(path, frames)


def drop_last(case, name):
    path = os.path.join(case, name)
    write_pcap(path, read_pcap(path)[:-1])


def edit_case_yaml(case, old, new):
    path = os.path.join(case, "case.yaml")
    with open(path) as f:
        text = f.read()
    assert old in text, f"{old!r} not in case.yaml"
    with open(path, "w") as f:
        f.write(text.replace(old, new))


# (what is broken, how) on the arp case: p0 sends 4 ordered replies, p1 2 async requests.
MUTATIONS = [
    ("a byte of an expected reply", lambda c: flip_byte(c, "p0", 2, 40)),
    ("the order of two expected replies", lambda c: swap_first_two(c, "p0")),
    ("one expected reply fewer", lambda c: (
        drop_last(c, "expect_p0.pcap"),
        edit_case_yaml(c, "tx_packets_total{port=\"p0\"}': 4",
                       "tx_packets_total{port=\"p0\"}': 3"))),
    ("case.yaml disagreeing with its pcaps (exit 2)", lambda c: drop_last(c, "expect_p0.pcap")),
    ("a byte of an expected ARP request (async)", flip_byte_async),
    ("nothing but the order, on an unordered port (exit 0)", lambda c: (
        swap_first_two(c, "p0"), edit_case_yaml(c, "ports: [p0, p1]\n",
                                                "ports: [p0, p1]\nunordered_ports: [p0]\n"))),
    ("a byte on an unordered port", lambda c: (
        flip_byte(c, "p0", 2, 40), edit_case_yaml(c, "ports: [p0, p1]\n",
                                                   "ports: [p0, p1]\nunordered_ports: [p0]\n"))),
    ("a drop counter value", lambda c: edit_case_yaml(
        c, "'inaswitch_drops_total{reason=\"arp_not_for_us\"}': 4",
        "'inaswitch_drops_total{reason=\"arp_not_for_us\"}': 5")),
    ("an unlisted non-zero counter", lambda c: edit_case_yaml(
        c, "  inaswitch_arp_replies_total: 4\n", "")),
]


def run(case, binary):
    # --workdir inside the temporary tree: failing runs keep their files, and these fail.
    return subprocess.run([sys.executable, os.path.join(HERE, "run_case.py"), case,
                           "--binary", binary, "--workdir", case + "-work"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT).returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    args = ap.parse_args()
    binary = os.path.abspath(args.binary)
    failed = False
    with tempfile.TemporaryDirectory(prefix="golden-selftest-") as tmp:
        for i, (what, mutate) in enumerate([("nothing", lambda c: None)] + MUTATIONS):
            case = os.path.join(tmp, f"arp{i}")
            shutil.copytree(os.path.join(HERE, "arp"), case)
            mutate(case)
            want = 0 if what == "nothing" or "exit 0" in what else 2 if "exit 2" in what else 1
            rc = run(case, binary)
            ok = rc == want
            failed |= not ok
            print(f"{'ok  ' if ok else 'FAIL'} broken: {what}: run_case.py exited {rc}, "
                  f"expected {want}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
