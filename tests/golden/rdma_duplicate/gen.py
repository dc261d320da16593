# SPDX-License-Identifier: Apache-2.0
"""rdma_duplicate: rank 1 sends chunk 0 twice (a retransmission of the same PSN). The copy is
re-ACKed at once (PSN 1000, MSN 1) and not added again: when rank 2's chunk 0 completes the
unit, the result holds rank 1's values once."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import PSN, chunk, contribution, reply, result, total  # noqa: E402

a, b = chunk(3.0), chunk(10.0)
inputs = [contribution(1, 0, a), contribution(1, 0, a), contribution(2, 0, b)]
# The duplicate's re-ACK also covers the first copy (no second ACK for rank 1).
expect = [reply(1, PSN[1], 1, 0x1F, 0), reply(2, PSN[2], 1, 0x1F, 0),
          result(1, 0, total(a, b), 0, 1), result(2, 0, total(a, b), 0, 1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
