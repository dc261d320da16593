# SPDX-License-Identifier: Apache-2.0
"""rdma_ce_cnp: rank 1's contributions arrive CE-marked (ECN 11): the first earns a CNP to the
worker's QP (BECN, PSN 0) at once, the second, within the CNP interval (4 us), none; both are
absorbed and ACKed once at the end of the burst."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import PSN, chunk, cnp, contribution, reply  # noqa: E402

inputs = [contribution(1, 0, chunk(1.0), tos=0x03), contribution(1, 1, chunk(2.0), tos=0x03)]
expect = [cnp(1, 0), reply(1, PSN[1] + 1, 2, 0x1F, 1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
