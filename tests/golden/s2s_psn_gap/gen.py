# SPDX-License-Identifier: Apache-2.0
"""s2s_psn_gap: rank 1's chunk 0 (PSN 1000) is late: chunks 1 and 2 (PSNs 1001, 1002) arrive
first. The first one past the gap earns exactly one NAK-sequence from the root's address with
the PSN the root expects (1000, MSN 0); the next is dropped silently while that NAK is out;
nothing of them is absorbed. Then PSN 1000 arrives: absorbed and ACKed (PSN 1000, MSN 1) at the
burst's end. Nothing reaches the root (rank 2 never contributes)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import PSN, as_root, chunk, contribution  # noqa: E402

in_p0 = [contribution(1, 1, chunk(1)), contribution(1, 2, chunk(2)), contribution(1, 0, chunk(0))]
in_p1 = []
expect_p0 = [as_root(1, PSN[1], 0, 0x60, 0), as_root(1, PSN[1], 1, 0x1F, 1)]
expect_p1 = []

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
