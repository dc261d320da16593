# SPDX-License-Identifier: Apache-2.0
"""chained: frames larger than one mbuf (512 data bytes here) reach every stage as chains of
segments. Broadcasts of 1500 and 4000 octets are flooded to the other two members of the group,
byte for byte, 200 times each (one reference per copy on every segment: a chain freed once per
copy corrupted the pool within a few hundred frames); a 3000-octet UDP datagram is routed (TTL - 1,
MACs rewritten, the rest unchanged); an ICMP echo request of 1228 octets to the switch is
answered whole; two workers' 1 KiB contributions (256 int32) to chunk 0 are absorbed and one
partial result, larger than one mbuf, goes to the root as the element-wise sum."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from inapkt import DATA, ina, partial_sport  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import ICMP, IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["g0", "g1", "g2", "r0", "r1"]
GROUP = ["g0", "g1", "g2"]
SW = {"g0": "02:00:00:00:00:11", "g1": "02:00:00:00:00:12", "g2": "02:00:00:00:00:13",
      "r0": "02:00:00:00:00:14", "r1": "02:00:00:00:00:15"}
ROOT = ("02:00:00:00:12:02", "10.0.2.2")
HOST = ("02:00:00:00:10:07", "10.0.10.7")
W = {1: ("02:00:00:00:01:02", "10.0.1.2"), 2: ("02:00:00:00:01:03", "10.0.1.3")}
PORT = 9470
BCAST = "ff:ff:ff:ff:ff:ff"

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def payload(n, seed):
    return bytes((seed + 7 * i) & 0xFF for i in range(n))


def flood(in_port, frame):
    inputs[in_port].append(frame)
    for p in GROUP:
        if p != in_port:
            expect[p].append(frame)


def broadcast(size, ident):
    """A UDP broadcast in the segment, `size` octets on the wire."""
    head = Ether(src=HOST[0], dst=BCAST) / IP(src=HOST[1], dst="10.0.10.255", id=ident) / \
        UDP(sport=7000, dport=7001)
    return bytes(head / Raw(payload(size - len(head), ident)))


for k in range(200):
    flood("g0", broadcast(1500, 2 * k))
    flood("g0", broadcast(4000, 2 * k + 1))

# A jumbo datagram from a host behind r0, routed to the root's network on r1.
big = lambda ttl: IP(src=W[1][1], dst=ROOT[1], ttl=ttl, id=77) / UDP(sport=5000, dport=5001) / \
    Raw(payload(3000 - 42, 3))
inputs["r0"].append(bytes(Ether(src=W[1][0], dst=SW["r0"]) / big(64)))
expect["r1"].append(bytes(Ether(src=SW["r1"], dst=ROOT[0]) / big(63)))

# An echo request to the switch, answered on r0 with the whole message echoed.
data = payload(1200, 9)
inputs["r0"].append(bytes(Ether(src=W[1][0], dst=SW["r0"]) /
                          IP(src=W[1][1], dst="10.0.1.1", id=78) / ICMP(id=5, seq=1) / Raw(data)))
expect["r0"].append(bytes(Ether(src=SW["r0"], dst=W[1][0]) /
                          IP(src="10.0.1.1", dst=W[1][1], id=78, ttl=64) /
                          ICMP(type=0, id=5, seq=1) / Raw(data)))

# Two 1 KiB contributions to chunk 0; the partial result (1130 octets) leaves as a chain.
a = [i * 3 - 100 for i in range(256)]
b = [1000 - i for i in range(256)]
for w, values, ident in ((1, a, 79), (2, b, 80)):
    mac, ip = W[w]
    inputs["r0"].append(bytes(Ether(src=mac, dst=SW["r0"]) /
                              IP(src=ip, dst=ROOT[1], id=ident, flags="DF") /
                              UDP(sport=40000 + w, dport=PORT) / Raw(ina(7, 0, [w], values))))
expect["r1"].append(bytes(Ether(src=SW["r1"], dst=ROOT[0]) /
                          IP(src="10.0.2.1", dst=ROOT[1], id=0, flags="DF", ttl=64) /
                          UDP(sport=partial_sport(0), dport=PORT) /
                          Raw(ina(7, 0, [1, 2], [x + y for x, y in zip(a, b)], DATA))))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
