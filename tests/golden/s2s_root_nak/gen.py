# SPDX-License-Identifier: Apache-2.0
"""s2s_root_nak: chunks 0 and 1 complete (one burst on p0): aggregates PSN 1000 and 1001 go
toward the root. The root lost the first and NAKs (NAK-sequence, PSN 1000; p1, a later burst):
the NAK is consumed (never forwarded to the worker) and the switch goes back N from 1000,
resending both aggregates from the kept sums with their PSNs (IP identifications 2 and 3)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import PSN, aggregate, as_root, chunk, contribution, root_reply, total  # noqa: E402

a = {(1, 0): chunk(1), (2, 0): chunk(2), (1, 1): chunk(30), (2, 1): chunk(-40)}
in_p0 = [contribution(r, c, a[(r, c)]) for c in (0, 1) for r in (1, 2)]
in_p1 = [root_reply(1, PSN[1], 0, 0x60)]
expect_p0 = [as_root(1, PSN[1] + 1, 2, 0x1F, 0), as_root(2, PSN[2] + 1, 2, 0x1F, 0)]
sums = {c: total(a[(1, c)], a[(2, c)]) for c in (0, 1)}
expect_p1 = [aggregate(c, sums[c], 2, PSN[1] + c, c) for c in (0, 1)]
expect_p1 += [aggregate(c, sums[c], 2, PSN[1] + c, 2 + c) for c in (0, 1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
