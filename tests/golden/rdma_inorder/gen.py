# SPDX-License-Identifier: Apache-2.0
"""rdma_inorder: ranks 1 and 2 each WRITE chunks s = 0 and 1 in order (one burst): every
contribution is absorbed, each rank's QP gets one coalesced ACK (PSN of its last packet, MSN
2), then the results: one WRITE_ONLY_WITH_IMM per rank and chunk, the switch's PSNs 5000 and
5001, immediate s << 8 | 2, the element-wise sum."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import PSN, chunk, contribution, reply, result, total  # noqa: E402

a = {(1, 0): chunk(1.0), (2, 0): chunk(100.0), (1, 1): chunk(-5.0), (2, 1): chunk(0.5)}
inputs = [contribution(r, s, a[(r, s)]) for s in (0, 1) for r in (1, 2)]
expect = [reply(1, PSN[1] + 1, 2, 0x1F, 0), reply(2, PSN[2] + 1, 2, 0x1F, 0)]
for r in (1, 2):
    for s in (0, 1):
        expect.append(result(r, s, total(a[(1, s)], a[(2, s)]), s, 1 + s))

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
