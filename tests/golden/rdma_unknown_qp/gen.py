# SPDX-License-Identifier: Apache-2.0
"""rdma_unknown_qp: a WRITE to a QPN the switch does not have (0x555) and a CM MAD to QP1
(UD SEND ONLY; this switch answers no RDMA CM: rdma.cm_port 0) reach the switch's address: both are
dropped and counted by reason; nothing is answered."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
import rocepkt  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from roceswitch import SWITCH, WORKER, chunk, contribution  # noqa: E402

mad = rocepkt.roce(WORKER[1], SWITCH[1], rocepkt.UD_SEND_ONLY, 0,
                   rocepkt.deth(rocepkt.CM_QKEY, 1), bytes(256), dqpn=1)
inputs = [contribution(1, 0, chunk(1.0), dqpn=0x555), mad]

if __name__ == "__main__":
    write_case_pcaps(HERE, ["p0"], {"p0": inputs}, {"p0": []})
    print(f"p0: {len(inputs)} in, 0 expected out")
