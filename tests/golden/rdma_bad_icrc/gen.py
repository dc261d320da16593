# SPDX-License-Identifier: Apache-2.0
"""rdma_bad_icrc: rank 1's contribution with its ICRC off by one bit is dropped and counted
(per QP and per lcore); nothing is answered or aggregated, and the same packet with a good
ICRC afterwards is taken (expected PSN unchanged) and ACKed."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from rocepkt import icrc_of, with_icrc  # noqa: E402
from roceswitch import PSN, chunk, contribution, reply  # noqa: E402

good = contribution(1, 0, chunk(1.0))
inputs = [with_icrc(good, icrc_of(good) ^ 1), good]
expect = [reply(1, PSN[1], 1, 0x1F, 0)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": expect})
    print(f"p0: {len(inputs)} in, {len(expect)} expected out")
