# SPDX-License-Identifier: Apache-2.0
"""Runs in a guest under a bare interpreter (python3 -S: no site, only the encodings package of
the standard library beside it): inaswitch's RDMA extension module `_rdma`, imported from
/root/py, connects rank `rank` of a server-to-switch job and reduces the file `input` `calls`
times on one connection, writing each result to `output`<i>. Arguments key=value. Prints a line
per call and the close's text; exits 1 with the error on any failure."""

import sys

sys.path.insert(0, "/root/py")
import _rdma  # noqa: E402

a = dict(arg.split("=", 1) for arg in sys.argv[1:])
try:
    c = _rdma.SwitchClient(switch_api=a["api"], job=int(a["job"]), rank=int(a["rank"]),
                           world=int(a["world"]), ip=a["ip"], gid_index=int(a["gid"]),
                           dtype=a["dtype"], chunk_bytes=int(a["chunk"]),
                           window=int(a["window"]), timeout_ms=int(a["timeout_ms"]))
    with open(a["input"], "rb") as f:
        data = f.read()
    for i in range(int(a["calls"])):
        buf = bytearray(data)  # in place: the result replaces it
        s = c.allreduce_(buf)
        with open(a["output"] + str(i), "wb") as f:
            f.write(buf)
        print("call", i, "chunks", s["chunks"], "results", s["results"], "next_seq", c.next_seq)
    print("close", repr(c.close()))
except _rdma.RdmaError as e:
    print("RdmaError:", e)
    sys.exit(1)
