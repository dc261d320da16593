# SPDX-License-Identifier: Apache-2.0
"""s2s_absorb_ack: ranks 1 and 2 each WRITE chunks 0 and 1 toward the root (one burst on p0).
Every contribution is absorbed: each worker gets one coalesced ACK from the root's address
(PSN of its last packet, MSN 2, its own QPN); the root gets ONE WRITE per chunk on the carrier
(rank 1's connection): PSNs 1000 and 1001 (the root-side PSNs of the carrier), rank 1's RETH of
the chunk, immediate c << 8 | 2, the element-wise sum. Then (p1, a later burst) the root ACKs
PSN 1001: consumed, never forwarded; both slots are released."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import PSN, aggregate, as_root, chunk, contribution, root_reply, total  # noqa: E402

a = {(1, 0): chunk(1), (2, 0): chunk(100), (1, 1): chunk(-5), (2, 1): chunk(7)}
in_p0 = [contribution(r, c, a[(r, c)]) for c in (0, 1) for r in (1, 2)]
in_p1 = [root_reply(1, PSN[1] + 1, 2)]
expect_p0 = [as_root(1, PSN[1] + 1, 2, 0x1F, 0), as_root(2, PSN[2] + 1, 2, 0x1F, 0)]
expect_p1 = [aggregate(c, total(a[(1, c)], a[(2, c)]), 2, PSN[1] + c, c) for c in (0, 1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
