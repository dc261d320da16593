# SPDX-License-Identifier: Apache-2.0
"""ina_tree: the upper aggregator of a two-level VAT (draft-song-ina-00 Fig. 1: s6 aggregating
s1's and s7's partials). A-BM = {1,2,3,4}. A child switch's partial result carries the multi-bit
P-BM {1,2}; workers 3 and 4 contribute directly; the chunk completes once and one partial with
P-BM = {1,2,3,4} goes to the root. Contributions with the wrong element type, more elements
than the job allows, or a count different from the chunk's first contribution are rejected and
(on_reject: forward) routed on unmodified; a child partial overlapping bits already absorbed
(its P-BM {2,3} after 3 was absorbed) cannot be subtracted and is dropped."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from inapkt import DATA, ina, partial_sport  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
ROOT_MAC = "02:00:00:00:12:02"
SRC = {"child": ("02:00:00:00:11:05", "10.0.1.5"), 3: ("02:00:00:00:11:03", "10.0.1.3"),
       4: ("02:00:00:00:11:04", "10.0.1.4")}
PORT = 9470

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def pkt(src, payload, ident):
    mac, ip = SRC[src]
    return Ether(src=mac, dst=SW["p0"]) / IP(src=ip, dst="10.0.2.2", id=ident, flags="DF") / \
        UDP(sport=PORT, dport=PORT) / Raw(payload)


def routed(p):
    out = p.copy()
    out[Ether].src, out[Ether].dst = SW["p1"], ROOT_MAC
    out[IP].ttl -= 1
    del out[IP].chksum
    return bytes(out)


def forward_unmodified(p):
    inputs["p0"].append(bytes(p))
    expect["p1"].append(routed(p))


inputs["p0"].append(bytes(pkt(3, ina(3, 0, [3], [100, 200, 300, 400]), 1)))
forward_unmodified(pkt(4, ina(3, 0, [4], [1.0, 2.0, 3.0, 4.0], etype="fp32"), 2))  # wrong type
forward_unmodified(pkt(4, ina(3, 0, [4], [1, 2, 3, 4, 5]), 3))        # over max_elements
forward_unmodified(pkt(4, ina(3, 0, [4], [1, 2]), 4))                 # count differs
inputs["p0"].append(bytes(pkt("child", ina(3, 0, [2, 3], [9, 9, 9, 9]), 5)))  # overlap: dropped
inputs["p0"].append(bytes(pkt("child", ina(3, 0, [1, 2], [10, 20, 30, 40]), 6)))  # child partial
inputs["p0"].append(bytes(pkt(4, ina(3, 0, [4], [1, 2, 3, 4]), 7)))   # completes the chunk
expect["p1"].append(bytes(Ether(src=SW["p1"], dst=ROOT_MAC) /
                          IP(src="10.0.2.1", dst="10.0.2.2", id=0, flags="DF", ttl=64) /
                          UDP(sport=partial_sport(0), dport=PORT) /
                          Raw(ina(3, 0, [1, 2, 3, 4], [111, 222, 333, 444], DATA))))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
