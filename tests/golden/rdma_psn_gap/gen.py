# SPDX-License-Identifier: Apache-2.0
"""rdma_psn_gap: rank 1's first packet is lost; its next two arrive. The first one past the
gap earns exactly one NAK-sequence (PSN = the expected 1000, MSN 0); the one after it is
dropped silently while that NAK is out; nothing is aggregated."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import PSN, chunk, contribution, reply  # noqa: E402

inputs = [contribution(1, 1, chunk(1.0)), contribution(1, 2, chunk(2.0))]
expect = [reply(1, PSN[1], 0, 0x60, 0)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
