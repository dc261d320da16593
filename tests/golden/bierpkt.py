# SPDX-License-Identifier: Apache-2.0
"""An independent encoder of BIER packets for golden cases, written from the RFC text (RFC 8279
section 5 for the BitString, RFC 8296 section 2 for the header), not from the C++.

Non-MPLS BIER over Ethernet (ethertype 0xAB37), three big-endian 32-bit words then the
BitString:

  word0  BIFT-id(20) | TC(3) | S(1) | TTL(8)
  word1  nibble 0101(4) | Ver(4) | BSL code(4: 1=64, 2=128 ... 7=4096) | Entropy(20)
  word2  OAM(2) | Rsv(2) | DSCP(6) | Proto(6) | BFIR-id(16)
  BitString, BSL bits: BP 1 is the least significant bit of the last octet, BP BSL the most
  significant bit of the first.

A BFR-id N lies in set SI = (N - 1) div BSL at bit position BP = (N - 1) mod BSL + 1. The
switch's default BIFT-id for a BIFT without an explicit one is BSL code << 16 | SD << 8 | SI
(the expired draft-ietf-bier-non-mpls-bift-encoding). Every field is given explicitly, so a
case can also write headers a BFR must reject (reserved BSL, bad nibble, bad version).
scapy's BIER contrib is not used: its BSL is off by one (reference/bier.md)."""

import os
import sys

from pcapio import write_case_pcaps
from scapy.all import Ether

ETHERTYPE = 0xAB37
BSL_CODE = {64: 1, 128: 2, 256: 3, 512: 4, 1024: 5, 2048: 6, 4096: 7}
# IANA "BIER Next Protocol Identifiers" (RFC 8296 section 6).
PROTO_ETHERNET, PROTO_IPV4, PROTO_OAM, PROTO_IPV6 = 3, 4, 5, 6


def set_of(bsl, bfr_id):
    return (bfr_id - 1) // bsl


def bp_of(bsl, bfr_id):
    return (bfr_id - 1) % bsl + 1


def bitstring(bsl, bfr_ids, si=None):
    """The BitString (bsl // 8 octets) with the bits of `bfr_ids`, all in one set (`si`, or the
    set of the first id)."""
    ids = sorted(set(bfr_ids))
    if si is None:
        si = set_of(bsl, ids[0]) if ids else 0
    octets = bytearray(bsl // 8)
    for n in ids:
        assert set_of(bsl, n) == si, f"BFR-id {n} is not in set {si} of BSL {bsl}"
        bp = bp_of(bsl, n)
        # BP 1..8 in the last octet, 9..16 in the one before, ...
        octets[len(octets) - 1 - (bp - 1) // 8] |= 1 << ((bp - 1) % 8)
    return bytes(octets)


def bfr_ids_of(bs, si=0):
    """The BFR-ids whose bits are set in the BitString `bs` of set `si` (for self-checks)."""
    bsl = len(bs) * 8
    ids = []
    for i, octet in enumerate(reversed(bs)):
        for b in range(8):
            if octet >> b & 1:
                ids.append(si * bsl + i * 8 + b + 1)
    return ids


def bift_id(bsl, sd=0, si=0):
    """The default BIFT-id of (BSL, sub-domain, set)."""
    return BSL_CODE[bsl] << 16 | sd << 8 | si


def header(bift, ttl, bsl_code, entropy=0, proto=PROTO_IPV4, bfir=0, tc=0, s=1,
           nibble=0b0101, ver=0, oam=0, rsv=0, dscp=0):
    """The 12 fixed octets, every field as given (checked only against its width)."""
    for value, bits, name in ((bift, 20, "BIFT-id"), (tc, 3, "TC"), (s, 1, "S"),
                              (ttl, 8, "TTL"), (nibble, 4, "nibble"), (ver, 4, "Ver"),
                              (bsl_code, 4, "BSL"), (entropy, 20, "entropy"), (oam, 2, "OAM"),
                              (rsv, 2, "Rsv"), (dscp, 6, "DSCP"), (proto, 6, "Proto"),
                              (bfir, 16, "BFIR-id")):
        assert 0 <= value < 1 << bits, f"{name} {value} does not fit {bits} bits"
    w0 = bift << 12 | tc << 9 | s << 8 | ttl
    w1 = nibble << 28 | ver << 24 | bsl_code << 20 | entropy
    w2 = oam << 30 | rsv << 28 | dscp << 22 | proto << 16 | bfir
    return b"".join(w.to_bytes(4, "big") for w in (w0, w1, w2))


def bier(bsl, bfr_ids, ttl, si=0, sd=0, bift=None, bsl_code=None, **fields):
    """Fixed header + BitString for BFR-ids in set `si` of BSL `bsl`. The BIFT-id defaults to
    the default encoding and the BSL field to the code of `bsl`; both can be overridden."""
    if bift is None:
        bift = bift_id(bsl, sd, si)
    if bsl_code is None:
        bsl_code = BSL_CODE[bsl]
    return header(bift, ttl, bsl_code, **fields) + bitstring(bsl, bfr_ids, si)


def frame(src, dst, bier_header, payload):
    """An Ethernet frame of type 0xAB37 carrying `bier_header` then `payload` (bytes or a
    scapy packet)."""
    return bytes(Ether(src=src, dst=dst, type=ETHERTYPE)) + bier_header + bytes(payload)


def group_entropy(src, group):
    """The entropy this switch gives a multicast packet it encapsulates as BFIR. RFC 8296
    leaves the entropy to the BFIR (packets of one flow must share it); the switch hashes the
    flow's source and group as below, each address read as a 32-bit number (big-endian, the
    value the dotted quad names). Not a protocol rule: a case that checks a BFIR's multicast
    packets needs it to predict their headers."""
    import socket

    s = int.from_bytes(socket.inet_aton(src), "big")
    g = int.from_bytes(socket.inet_aton(group), "big")
    x = (s ^ (g * 0x9E3779B1)) & 0xFFFFFFFF
    return (x ^ (x >> 15)) & 0xFFFFF


def check_case_metrics(case_dir, metrics):
    """gen.py's own count of what the switch must do, against case.yaml's `metrics` (which the
    runner checks), so a rule changed in gen.py cannot leave a stale case.yaml behind.
    `gen.py --update-metrics` rewrites case.yaml's `metrics` (its last key) from the count."""
    import yaml

    path = os.path.join(case_dir, "case.yaml")
    with open(path) as f:
        text = f.read()
    want = {k: v for k, v in sorted(metrics.items())}
    if "--update-metrics" in sys.argv:
        head = text[:text.index("\nmetrics:") + 1]
        lines = [f"  '{k}': {v}" if "{" in k else f"  {k}: {v}" for k, v in want.items()]
        with open(path, "w") as f:
            f.write(head + "metrics:\n" + "\n".join(lines) + "\n")
        return
    listed = yaml.safe_load(text).get("metrics") or {}
    diff = sorted(set(listed) ^ set(want)) + sorted(k for k in set(listed) & set(want)
                                                    if listed[k] != want[k])
    if diff:
        raise SystemExit(f"{path}: metrics differ from gen.py's count (run gen.py "
                         f"--update-metrics and review the diff): {diff}")


def group_mac(group):
    """The Ethernet address of IPv4 group `group` (RFC 1112 section 6.4: 01:00:5e and its low
    23 bits)."""
    o = [int(x) for x in group.split(".")]
    return "01:00:5e:%02x:%02x:%02x" % (o[1] & 0x7F, o[2], o[3])


def labels(bsl, si=0, sd=0):
    """The labels of a BIFT's per-BIFT series (its default BIFT-id, sub-domain, BSL, set)."""
    return f'bift_id="{bift_id(bsl, sd, si)}",sd="{sd}",bsl="{bsl}",set="{si}"'


class Case:
    """What a BIER gen.py builds: `inputs` (frames each port receives), `expect` (frames each
    port must send) and `metrics` (what the switch must count), for ports p0, p1, ... whose MACs
    (`sw`) are 02:00:00:00:00:01, :02, ... as in the cases' config.yaml. The case's own rules
    say which frames go where; `copy` and `deliver` add a frame with the counters the switch
    keeps for it, and `finish` adds the port counters, writes the pcaps and checks case.yaml."""

    def __init__(self, nports=4):
        self.ports = [f"p{i}" for i in range(nports)]
        self.sw = {p: "02:00:00:00:00:%02x" % (i + 1) for i, p in enumerate(self.ports)}
        self.inputs = {p: [] for p in self.ports}
        self.expect = {p: [] for p in self.ports}
        self.metrics = {}

    def count(self, series, n=1):
        self.metrics[series] = self.metrics.get(series, 0) + n

    def copy(self, bift_labels, neighbour, port, mac, bier_header, payload):
        """A neighbour copy: `bier_header` + `payload` to `mac` (the neighbour at address
        `neighbour`) on `port`, from the port's MAC."""
        self.expect[port].append(frame(self.sw[port], mac, bier_header, payload))
        self.count("inaswitch_bier_copies_total")
        self.count(f'inaswitch_bier_copies_by_neighbour_total{{{bift_labels},'
                   f'neighbour="{neighbour}"}}')

    def deliver(self, bift_labels, port, mac, packet):
        """An own bit delivered: the IPv4 `packet` (bytes or scapy) to host `mac` on `port`."""
        self.expect[port].append(bytes(Ether(src=self.sw[port], dst=mac, type=0x0800)) +
                                 bytes(packet))
        self.count("inaswitch_bier_delivered_total")
        self.count(f"inaswitch_bier_bift_delivered_total{{{bift_labels}}}")

    def finish(self, here):
        """Counts every port's frames in and out, writes the case's pcaps into `here` and checks
        (with --update-metrics: rewrites) the metrics of its case.yaml."""
        for p in self.ports:
            self.count(f'inaswitch_port_rx_packets_total{{port="{p}"}}', len(self.inputs[p]))
            self.count(f'inaswitch_port_tx_packets_total{{port="{p}"}}', len(self.expect[p]))
        write_case_pcaps(here, self.ports, self.inputs, self.expect)
        check_case_metrics(here, self.metrics)
        for p in self.ports:
            print(f"{p}: {len(self.inputs[p])} in, {len(self.expect[p])} expected out")


def _selftest():
    # reference/bier.md test vector: BIFT-id 0x30000, TTL 64, entropy 0x12345, Proto 4,
    # BFIR-id 7, BFR-ids {1, 3, 256} in BSL 256.
    got = bier(256, [1, 3, 256], 64, entropy=0x12345, proto=PROTO_IPV4, bfir=7)
    want = bytes.fromhex("30000140" "50312345" "00040007") + b"\x80" + b"\x00" * 30 + b"\x05"
    assert got == want, got.hex()
    assert bift_id(64, 0, 0) == 0x10000 and bift_id(4096, 2, 5) == 0x70205
    assert bitstring(64, [65, 128], si=1) == b"\x80" + b"\x00" * 6 + b"\x01"
    assert bfr_ids_of(bitstring(4096, [1, 9, 4096])) == [1, 9, 4096]
    assert header(0xFFFFF, 255, 15, 0xFFFFF, 63, 0xFFFF, 7, 1, 15, 15, 3, 3, 63) == b"\xff" * 12


if __name__ == "__main__":
    _selftest()
    print("bierpkt: self-test passed")
