# SPDX-License-Identifier: Apache-2.0
"""s2s_replicate_nak: replicate: true. The root WRITEs the results of chunks 0 and 1 once on the
carrier (PSNs 5000, 5001; p1); rank 2 gets its copies (PSNs 9000, 9001). On p0, in order: rank
1 ACKs 5001 (MSN 2); rank 2 lost its copy of 9001 and NAKs it (NAK-sequence, PSN 9001, MSN 1):
the root gets the NAK on the carrier translated, PSN 5001 MSN 1 (the least MSN), and no ACK
(rank 2 acknowledged no more than the NAK says). Then rank 2's CNP (for the root's QP 0x41,
which sends it nothing) goes to the root as a CNP for the carrier's QP 0x40."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import (P0_MAC, ROOT_PSN, WORKER, chunk, cnp_to_root_on_carrier,  # noqa: E402
                    result_copy, root_result, routed, to_root_on_carrier, worker_cnp,
                    worker_reply)

values = {0: chunk(3), 1: chunk(4)}
ident = {0: 0x200, 1: 0x201}
in_p1 = [root_result(c, c, values[c], ident[c]) for c in (0, 1)]
in_p0 = [worker_reply(1, ROOT_PSN[1] + 1, 2), worker_reply(2, ROOT_PSN[2] + 1, 1, 0x60),
         worker_cnp(2)]
expect_p0 = ([routed(in_p1[c], P0_MAC, WORKER[1].mac) for c in (0, 1)] +
             [result_copy(2, c, c, values[c], ident[c]) for c in (0, 1)])
expect_p1 = [to_root_on_carrier(ROOT_PSN[1] + 1, 1, 0x60, 0), cnp_to_root_on_carrier(1)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
