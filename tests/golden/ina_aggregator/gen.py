# SPDX-License-Identifier: Apache-2.0
"""ina_aggregator: the VAT branches at an aggregating switch (draft-song-ina-00).
A-BM = {1, 2}. w1's and w2's contributions to chunk 0 are absorbed and one partial result
(P-BM = A-BM, the element-wise sum) goes to the root; a duplicate is absorbed once; a
retransmission after completion re-sends the partial with the retransmit flag; a contribution
whose P-BM misses the A-BM (w3) and one of an unknown job are routed on untouched; bits outside
the A-BM, a wrong op and a malformed INA header are rejected and (on_reject: forward) routed
unmodified; a CE-marked contribution makes the partial carry ECN echo; a contribution whose UDP checksum
fails is dropped and counted before it touches a slot, one without a checksum is absorbed.
w2's completing contribution carries its lowest missing result (flag 0x08): the partial goes
up with the flag clear and the word 0 (docs/protocol.md: an aggregator's partials do not carry
it)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from inapkt import DATA, ECN_ECHO, RETRANSMIT, ina, partial_sport  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02"}
ROOT_MAC = "02:00:00:00:12:02"
W = {1: ("02:00:00:00:11:02", "10.0.1.2"), 2: ("02:00:00:00:11:03", "10.0.1.3"),
     3: ("02:00:00:00:11:04", "10.0.1.4")}
PORT = 9470

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}


def from_worker(w, payload, ident, tos=0, chksum=None):
    mac, ip = W[w]
    return Ether(src=mac, dst=SW["p0"]) / \
        IP(src=ip, dst="10.0.2.2", id=ident, flags="DF", tos=tos) / \
        UDP(sport=40000 + w, dport=PORT, chksum=chksum) / Raw(payload)


def routed(pkt):
    """The same packet as routing forwards it to the root: MACs rewritten, TTL - 1."""
    out = pkt.copy()
    out[Ether].src, out[Ether].dst = SW["p1"], ROOT_MAC
    out[IP].ttl -= 1
    del out[IP].chksum
    return bytes(out)


def partial(seq, values, flags=0):
    """What the switch emits to the root: from p1's address, TTL 64 (its own packet: routing
    does not decrement it), DF,
    id 0, a real UDP checksum, from the chunk's steering port to the INA port, P-BM = A-BM."""
    return bytes(Ether(src=SW["p1"], dst=ROOT_MAC) /
                 IP(src="10.0.2.1", dst="10.0.2.2", id=0, flags="DF", ttl=64) /
                 UDP(sport=partial_sport(seq), dport=PORT) /
                 Raw(ina(7, seq, [1, 2], values, DATA, flags)))


def send(pkt):
    inputs["p0"].append(bytes(pkt))


a = [1, 2, 3, -4]
b = [10, 20, 30, 2**31 - 1]
total = [11, 22, 33, (-4 + 2**31 - 1)]

send(from_worker(1, ina(7, 0, [1], a), 1))                    # absorbed
send(from_worker(1, ina(7, 0, [1], a), 2))                    # duplicate: not added twice
send(from_worker(2, ina(7, 0, [2], b, lowest_missing=0), 3))  # completes chunk 0
expect["p1"].append(partial(0, total))
send(from_worker(2, ina(7, 0, [2], b, DATA, RETRANSMIT), 4))  # after completion: re-send
expect["p1"].append(partial(0, total, RETRANSMIT))
p = from_worker(3, ina(7, 1, [3], a), 5)                      # not in A-BM: not ours
send(p)
expect["p1"].append(routed(p))
p = from_worker(1, ina(7, 1, [1, 3], a), 6)                   # bits outside A-BM: rejected
send(p)
expect["p1"].append(routed(p))
p = from_worker(1, ina(99, 0, [1], a), 7)                     # unknown job: routed
send(p)
expect["p1"].append(routed(p))
p = from_worker(1, ina(7, 2, [1], a, op="max"), 8)            # op mismatch: rejected
send(p)
expect["p1"].append(routed(p))
p = from_worker(1, b"IN\x99 not an INA header at all", 9)     # not INA: ordinary UDP
send(p)
expect["p1"].append(routed(p))
# Chunk 3: w1's contribution arrives CE-marked (ECN 11), so the partial echoes congestion.
send(from_worker(1, ina(7, 3, [1], [5, 5, 5, 5]), 10, tos=0x03))
send(from_worker(2, ina(7, 3, [2], [1, 2, 3, 4]), 11))
expect["p1"].append(partial(3, [6, 7, 8, 9], ECN_ECHO))
# Chunk 4: w1 sends without a UDP checksum (0: none, allowed in IPv4) and is absorbed; w2's
# first copy has a corrupted element under a checksum that no longer matches: dropped before it
# touches the slot (ina_bad_checksum); its retransmission completes the chunk with the right sum.
send(from_worker(1, ina(7, 4, [1], [1, 1, 1, 1]), 12, chksum=0))
good = from_worker(2, ina(7, 4, [2], [2, 2, 2, 2]), 13)
corrupt = bytearray(bytes(good))
corrupt[-1] ^= 0x10  # the last element's high byte; the checksum stays the good one's
send(bytes(corrupt))
send(from_worker(2, ina(7, 4, [2], [2, 2, 2, 2], DATA, RETRANSMIT), 14))
expect["p1"].append(partial(4, [3, 3, 3, 3]))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
