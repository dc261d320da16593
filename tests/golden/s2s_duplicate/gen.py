# SPDX-License-Identifier: Apache-2.0
"""s2s_duplicate: rank 1 sends chunk 0 twice (a retransmission of PSN 1000). The copy is
re-ACKed at once as the root (PSN 1000, MSN 1) and not added again: the aggregate rank 2's
chunk 0 completes holds rank 1's values once, with k = 2. Rank 1 gets no second ACK at the
burst's end (the re-ACK covered it); rank 2 its own (PSN 2000, MSN 1)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import PSN, aggregate, as_root, chunk, contribution, total  # noqa: E402

a, b = chunk(3), chunk(10)
in_p0 = [contribution(1, 0, a), contribution(1, 0, a), contribution(2, 0, b)]
in_p1 = []
expect_p0 = [as_root(1, PSN[1], 1, 0x1F, 0), as_root(2, PSN[2], 1, 0x1F, 0)]
expect_p1 = [aggregate(0, total(a, b), 2, PSN[1], 0)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
