# SPDX-License-Identifier: Apache-2.0
"""Minimal pcap reading and writing for the golden tests.

The runner compares frame bytes, never file bytes: the switch's net_pcap PMD writes
nanosecond timestamps of the moment it sent each frame. Inputs and expectations are written
here with fixed timestamps, so regenerating a case reproduces the committed files exactly.
No scapy dependency: the runner needs scapy only to explain a mismatch.
"""

import struct

LINKTYPE_ETHERNET = 1
_MAGIC_US = 0xA1B2C3D4
_MAGIC_NS = 0xA1B23C4D
_BASE_TS = 1_700_000_000  # fixed epoch second for written records


class PcapError(Exception):
    pass


def _frame_bytes(frame):
    """bytes of a frame given as bytes, bytearray or a scapy packet."""
    if isinstance(frame, (bytes, bytearray)):
        return bytes(frame)
    return bytes(frame)  # scapy Packet builds itself


def write_pcap(path, frames):
    """Writes `frames` (bytes or scapy packets) as a microsecond, little-endian pcap with
    deterministic timestamps (one microsecond apart). An empty list writes a valid empty pcap."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", _MAGIC_US, 2, 4, 0, 0, 65535, LINKTYPE_ETHERNET))
        for i, frame in enumerate(frames):
            data = _frame_bytes(frame)
            f.write(struct.pack("<IIII", _BASE_TS, i, len(data), len(data)))
            f.write(data)


def read_pcap(path):
    """Returns the frames of a pcap file as a list of bytes. Raises PcapError on a malformed
    file, a link type other than Ethernet, or a truncated record (caplen < wire length)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 24:
        raise PcapError(f"{path}: {len(data)} bytes, shorter than a pcap file header")
    for endian in ("<", ">"):
        (magic,) = struct.unpack(endian + "I", data[:4])
        if magic in (_MAGIC_US, _MAGIC_NS):
            break
    else:
        raise PcapError(f"{path}: not a pcap file (magic {data[:4].hex()})")
    _, _, _, _, _, linktype = struct.unpack(endian + "HHiIII", data[4:24])
    if linktype != LINKTYPE_ETHERNET:
        raise PcapError(f"{path}: link type {linktype}, expected Ethernet (1)")
    frames = []
    off = 24
    while off < len(data):
        if off + 16 > len(data):
            raise PcapError(f"{path}: truncated record header at offset {off}")
        _, _, caplen, wirelen = struct.unpack(endian + "IIII", data[off:off + 16])
        off += 16
        if off + caplen > len(data):
            raise PcapError(f"{path}: record {len(frames)} runs past the end of the file")
        if caplen != wirelen:
            raise PcapError(f"{path}: record {len(frames)} captured {caplen} of {wirelen} bytes")
        frames.append(data[off:off + caplen])
        off += caplen
    return frames


def write_case_pcaps(case_dir, ports, inputs, expect, asynchronous=None):
    """Writes a case's pcaps, as gen.py scripts call it:
      in_<port>.pcap      for each port with frames in `inputs`
      expect_<port>.pcap  for every port (empty when it must send nothing)
      async_<port>.pcap   for each port with frames in `asynchronous` (control-plane frames
                          whose position among the others is not fixed)
    and removes stale in_/async_ files of ports that no longer have any."""
    import os

    asynchronous = asynchronous or {}
    for mapping, what in ((inputs, "inputs"), (expect, "expect"), (asynchronous, "async")):
        unknown = set(mapping) - set(ports)
        if unknown:
            raise ValueError(f"{what}: unknown port(s) {sorted(unknown)}")
    for p in ports:
        for prefix, mapping, always in (("in", inputs, False), ("expect", expect, True),
                                        ("async", asynchronous, False)):
            path = os.path.join(case_dir, f"{prefix}_{p}.pcap")
            frames = mapping.get(p, [])
            if frames or always:
                write_pcap(path, frames)
            elif os.path.exists(path):
                os.remove(path)
