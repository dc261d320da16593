# SPDX-License-Identifier: Apache-2.0
"""roce-vm-rocecheck: the checks roce-vm-forward relies on can fail. On the 48 frames Linux
rdma_rxe sent (tests/data/rxe-rocev2-sample.pcap):
- every frame parses and its ICRC verifies; a flipped bit anywhere the ICRC covers is caught,
  a change to a field it masks (TTL, TOS, IP and UDP checksums, BTH FECN/BECN) is not;
- a frame routed correctly (MACs replaced, TTL - 1, IPv4 checksum recomputed) passes
  routed_pair_diff, and each wrong routing (TTL unchanged, a stale checksum, a changed address,
  port, BTH field, payload byte or ICRC, a dropped byte) is named.

    /usr/bin/python3 tests/roce_vm/test_rocecheck.py
"""

from __future__ import annotations

import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "golden"))

import rocecheck  # noqa: E402
from pcapio import read_pcap  # noqa: E402

SAMPLE = os.path.join(os.path.dirname(HERE), "data", "rxe-rocev2-sample.pcap")
IP = rocecheck.ETH_LEN
failures: list[str] = []


def expect(cond: bool, what: str) -> None:
    if not cond:
        failures.append(what)


def with_ipv4_checksum(frame: bytearray) -> bytearray:
    ihl = (frame[IP] & 0x0F) * 4
    frame[IP + 10:IP + 12] = b"\0\0"
    total = sum(struct.unpack(f"!{ihl // 2}H", bytes(frame[IP:IP + ihl])))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    frame[IP + 10:IP + 12] = struct.pack("!H", ~total & 0xFFFF)
    return frame


def routed(frame: bytes) -> bytearray:
    out = bytearray(frame)
    out[0:12] = bytes.fromhex("525400aaaaaa" "525400bbbbbb")
    out[IP + 8] -= 1
    return with_ipv4_checksum(out)


def main() -> int:
    frames = read_pcap(SAMPLE)
    parsed = [rocecheck.parse(f) for f in frames]
    expect(len(frames) == 48 and all(parsed), "all 48 sample frames parse as RoCEv2")
    for i, (raw, f) in enumerate(zip(frames, parsed)):
        if f is None:
            continue
        expect(rocecheck.icrc_ok(raw), f"frame {i}: ICRC verifies")
        ihl = f.ihl
        masked = {IP + 1, IP + 8, IP + 10, IP + 11, IP + ihl + 6, IP + ihl + 7, f.bth_offset + 4}
        for at in (IP + 12, IP + ihl, f.bth_offset, f.bth_offset + 7, len(raw) - 10,
                   len(raw) - 1):
            bad = bytearray(raw)
            bad[at] ^= 0x10
            expect(not rocecheck.icrc_ok(bytes(bad)), f"frame {i}: flipped byte {at} caught")
        for at in masked:
            same = bytearray(raw)
            same[at] ^= 0x01
            expect(rocecheck.icrc_ok(bytes(same)), f"frame {i}: masked byte {at} ignored")

        good = routed(raw)
        g = rocecheck.parse(bytes(good))
        expect(rocecheck.routed_pair_diff(f, g) is None, f"frame {i}: correct routing accepted")
        expect(rocecheck.ipv4_checksum_ok(bytes(good)), f"frame {i}: recomputed checksum valid")
        wrong = {
            "TTL unchanged": with_ipv4_checksum(bytearray(good[:IP + 8]) + bytes([raw[IP + 8]])
                                                + good[IP + 9:]),
            "stale checksum": bytearray(good[:IP + 10]) + raw[IP + 10:IP + 12] + good[IP + 12:],
            "source address": with_ipv4_checksum(bytearray(good[:IP + 12]) + b"\x0a\x00\x00\x63"
                                                 + good[IP + 16:]),
            "UDP source port": bytearray(good[:IP + ihl]) + b"\xc0\x01" + good[IP + ihl + 2:],
            "BTH PSN": bytearray(good[:f.bth_offset + 11]) + bytes([good[f.bth_offset + 11] ^ 1])
            + good[f.bth_offset + 12:],
            "last payload or header byte": bytearray(good[:-5]) + bytes([good[-5] ^ 0x80])
            + good[-4:],
            "ICRC": bytearray(good[:-1]) + bytes([good[-1] ^ 0xFF]),
            "a byte dropped": bytearray(good[:-5]) + good[-4:],
        }
        for what, frame in wrong.items():
            w = rocecheck.parse(bytes(frame))
            expect(w is not None and rocecheck.routed_pair_diff(f, w) is not None,
                   f"frame {i}: routing that changed the {what} rejected")
    if failures:
        for f in failures[:20]:
            print(f"FAIL: {f}")
        print(f"{len(failures)} checks failed")
        return 1
    print(f"PASS: {len(frames)} rxe frames: ICRC, masks, routing comparisons")
    return 0


if __name__ == "__main__":
    sys.exit(main())
