# SPDX-License-Identifier: Apache-2.0
"""s2s_replicate_fanout: replicate: true. The root WRITEs the results of chunks 0 and 1 ONCE,
on the carrier (rank 1; root-side PSNs 5000, 5001; p1). Each goes on to rank 1 routed as it is
(TTL - 1) and is copied to rank 2 on its own connection: DestQP 18, PSNs 9000 and 9001 (the
leg's fixed delta from the config's root_psn), RETH VA rank 2's result buffer + c * 64 and its
rkey, the same payload and immediate, its own ICRC. Both workers' ACKs (p0) are consumed: the
root hears ONE ACK on the carrier, PSN 5001 MSN 2, the least both acknowledged. Rank 1's ACK
alone advances nothing whatever the order (rank 2 acknowledged nothing before its own ACK)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from pcapio import write_case_pcaps  # noqa: E402
from s2spkt import (P0_MAC, ROOT_PSN, WORKER, chunk, result_copy, root_result,  # noqa: E402
                    routed, to_root_on_carrier, worker_reply)

values = {0: chunk(10), 1: chunk(-20)}
ident = {0: 0x100, 1: 0x101}
in_p1 = [root_result(c, c, values[c], ident[c]) for c in (0, 1)]
in_p0 = [worker_reply(1, ROOT_PSN[1] + 1, 2), worker_reply(2, ROOT_PSN[2] + 1, 2)]
expect_p0 = ([routed(in_p1[c], P0_MAC, WORKER[1].mac) for c in (0, 1)] +
             [result_copy(2, c, c, values[c], ident[c]) for c in (0, 1)])
expect_p1 = [to_root_on_carrier(ROOT_PSN[1] + 1, 2, 0x1F, 0)]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0", "p1"], {"p0": in_p0, "p1": in_p1},
                     {"p0": expect_p0, "p1": expect_p1})
    print(f"p0: {len(in_p0)} in, {len(expect_p0)} out; p1: {len(in_p1)} in, {len(expect_p1)} out")
