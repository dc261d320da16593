# SPDX-License-Identifier: Apache-2.0
"""bier_bfer_l4: what else a BFER's rewrite of a unicast inner destination must keep right
(bier_bfer has the UDP and ICMP cases). Rewriting the IPv4 destination changes the pseudo-header
of every transport checksum that has one, as a NAT does (RFC 3022 section 4.2, RFC 1624):
  - TCP: its checksum must be updated too, or the host drops the segment;
  - a UDP first fragment (MF set, offset 0): the UDP checksum covers the whole datagram, so the
    incremental update of the field in the first fragment is right (expected: the checksum of
    the reassembled datagram to the new destination);
  - a non-first fragment (offset != 0): there is no transport header in it; its payload must
    not be touched (only the IPv4 header changes).
Delivery is otherwise as in bier_bfer (Ethernet to the host, IPv4 checksum fixed, TTL kept).

This case expects the correct behaviour. At the time of writing the switch patches only UDP
checksums and does so at IHL + 6 in every fragment, so the TCP segment leaves with a stale
checksum and the non-first fragment has two payload octets changed: the case fails until
pipeline/bier_forward.cc deliver_local is fixed."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(HERE))
from bierpkt import bier, bift_id, check_case_metrics, frame  # noqa: E402
from pcapio import write_case_pcaps  # noqa: E402
from scapy.all import IP, TCP, UDP, Ether, Raw  # noqa: E402

PORTS = ["p0", "p1", "p2", "p3"]
SW = {"p0": "02:00:00:00:00:01", "p1": "02:00:00:00:00:02", "p2": "02:00:00:00:00:03",
      "p3": "02:00:00:00:00:04"}
UP = "02:00:00:00:10:02"
OWN = {2: ("p2", "02:00:00:00:12:10", "10.0.2.10"),
       3: ("p3", "02:00:00:00:13:10", "10.0.3.10"),
       4: ("p3", "02:00:00:00:13:11", "10.0.3.11")}
BSL = 256
LABELS = f'bift_id="{bift_id(BSL)}",sd="0",bsl="{BSL}",set="0"'
PLACEHOLDER = "192.0.2.1"

inputs = {p: [] for p in PORTS}
expect = {p: [] for p in PORTS}
metrics = {}


def count(series, n=1):
    metrics[series] = metrics.get(series, 0) + n


def packet(ids, make_inner, ident):
    """make_inner(dst) gives the inner IPv4 packet's bytes for destination `dst`."""
    inputs["p0"].append(frame(UP, SW["p0"], bier(BSL, ids, 64, entropy=ident, bfir=9),
                              make_inner(PLACEHOLDER)))
    count(f"inaswitch_bier_packets_total{{{LABELS}}}")
    for bfr_id in sorted(set(ids) & set(OWN)):
        port, mac, host = OWN[bfr_id]
        expect[port].append(bytes(Ether(src=SW[port], dst=mac, type=0x0800)) + make_inner(host))
        count("inaswitch_bier_delivered_total")
        count(f"inaswitch_bier_bift_delivered_total{{{LABELS}}}")


def tcp(dst):
    return bytes(IP(src="10.9.0.1", dst=dst, ttl=61, id=1, flags="DF") /
                 TCP(sport=443, dport=50000, flags="PA", seq=1000, ack=2000) /
                 Raw(b"a TCP segment for every worker"))


def fragment(index):
    """Fragment `index` of a UDP datagram built for each destination with its own checksum: the
    first (offset 0, MF) carries the UDP header; the second (offset 24 octets) only payload."""
    def make(dst):
        whole = IP(src="10.9.0.1", dst=dst, ttl=61, id=77) / UDP(sport=9470, dport=9470) / \
            Raw(bytes(range(48)))
        udp = bytes(whole)[20:]                          # 8 + 48 octets, checksum included
        parts = [(0, udp[:24], "MF"), (3, udp[24:], 0)]
        off, body, flags = parts[index]
        return bytes(IP(src="10.9.0.1", dst=dst, ttl=61, id=77, flags=flags, frag=off,
                        proto=17) / Raw(body))
    return make


packet({2, 3}, tcp, 1)
packet({4}, fragment(0), 2)
packet({4}, fragment(1), 3)

for p in PORTS:
    count(f'inaswitch_port_rx_packets_total{{port="{p}"}}', len(inputs[p]))
    count(f'inaswitch_port_tx_packets_total{{port="{p}"}}', len(expect[p]))

if __name__ == "__main__":
    write_case_pcaps(HERE, PORTS, inputs, expect)
    check_case_metrics(HERE, metrics)
    for port in PORTS:
        print(f"{port}: {len(inputs[port])} in, {len(expect[port])} expected out")
