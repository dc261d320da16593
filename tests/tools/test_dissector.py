# SPDX-License-Identifier: Apache-2.0
"""tshark with tools/wireshark/ina.lua decodes every INA packet of the golden pcaps right.

For every frame on UDP port 9470 in the INA golden cases, the dissector's fields (tshark -T
fields) must equal what an independent parse of the UDP payload (struct, from docs/protocol.md)
says: job, seq, type, flags, op, element type, BSL, set, element count, the P-BM as BFR-ids and
every int32 element. A payload that is not INA (bad magic, wrong length) must be flagged with
the dissector's malformed expert info instead.

usage: test_dissector.py REPO_ROOT"""

import os
import struct
import subprocess
import sys

CASES = ["ina_aggregator", "ina_root", "ina_tree", "chained"]
FIELDS = ["frame.number", "ina.job_id", "ina.seq", "ina.type", "ina.flags", "ina.op",
          "ina.elem_type", "ina.bsl_bits", "ina.set_id", "ina.elem_count", "ina.pbm.bfr_ids",
          "ina.element", "_ws.expert.message"]
BSL = {1: 64, 2: 128, 3: 256, 4: 512, 5: 1024, 6: 2048, 7: 4096}
SIZE = {0: 4, 1: 4, 2: 2, 3: 2, 4: 8, 5: 8}


def udp_payloads(path: str) -> dict[int, bytes]:
    """frame number -> UDP payload, for IPv4/UDP frames to or from port 9470 (no VLAN)."""
    out = {}
    with open(path, "rb") as f:
        data = f.read()
    off, n = 24, 0
    while off + 16 <= len(data):
        caplen = struct.unpack_from("<I", data, off + 8)[0]
        frame = data[off + 16: off + 16 + caplen]
        off += 16 + caplen
        n += 1
        if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue
        ihl = (frame[14] & 0x0F) * 4
        sport, dport, ulen = struct.unpack_from(">HHH", frame, 14 + ihl)
        if 9470 in (sport, dport):
            out[n] = frame[14 + ihl + 8: 14 + ihl + ulen]
    return out


def expected(p: bytes) -> dict | None:
    """The fields of an INA v1 payload, or None when it is not one."""
    if len(p) < 24 or p[:2] != b"IN":
        return None
    bits = BSL.get(p[5] >> 4)
    etype, count = p[4] & 0x0F, struct.unpack_from(">H", p, 16)[0]
    if bits is None or etype not in SIZE or 24 + bits // 8 + count * SIZE[etype] != len(p):
        return None
    bs = int.from_bytes(p[24:24 + bits // 8], "big")
    si = p[6]
    ids = [str(si * bits + bp + 1) for bp in range(bits) if bs >> bp & 1]
    e = {"ina.job_id": str(struct.unpack_from(">I", p, 8)[0]),
         "ina.seq": str(struct.unpack_from(">I", p, 12)[0]),
         "ina.type": str(p[2] & 0x0F), "ina.flags": "0x%02x" % p[3],
         "ina.op": str(p[4] >> 4), "ina.elem_type": str(etype), "ina.bsl_bits": str(bits),
         "ina.set_id": str(si), "ina.elem_count": str(count), "ina.pbm.bfr_ids": ",".join(ids)}
    if etype == 0:
        vals = struct.unpack_from("<%di" % count, p, 24 + bits // 8)
        e["ina.element"] = ",".join(str(v) for v in vals)
    return e


def main() -> int:
    root = os.path.abspath(sys.argv[1])
    script = os.path.join(root, "tools", "wireshark", "ina.lua")
    checked = malformed = 0
    failures = []
    for case in CASES:
        folder = os.path.join(root, "tests", "golden", case)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".pcap"):
                continue
            path = os.path.join(folder, name)
            payloads = udp_payloads(path)
            if not payloads:
                continue
            cmd = ["tshark", "-X", f"lua_script:{script}", "-r", path, "-T", "fields",
                   "-E", "separator=\t", "-E", "occurrence=a", "-E", "aggregator=,"]
            for fld in FIELDS:
                cmd += ["-e", fld]
            run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if run.returncode != 0:
                failures.append(f"{case}/{name}: tshark exited {run.returncode}: {run.stderr}")
                continue
            rows = {}
            for line in run.stdout.splitlines():
                cols = line.split("\t")
                rows[int(cols[0])] = dict(zip(FIELDS, cols))
            for number, payload in payloads.items():
                got = rows.get(number, {})
                want = expected(payload)
                if want is None:
                    malformed += 1
                    if "Malformed" not in got.get("_ws.expert.message", "") and \
                            "magic" not in got.get("_ws.expert.message", "") and \
                            "length" not in got.get("_ws.expert.message", ""):
                        failures.append(f"{case}/{name} frame {number}: not INA, yet no "
                                        f"malformed expert info ({got})")
                    continue
                checked += 1
                for k, v in want.items():
                    if got.get(k) != v:
                        failures.append(f"{case}/{name} frame {number}: {k} = {got.get(k)!r}, "
                                        f"expected {v!r}")
    for f in failures[:20]:
        print("FAIL", f)
    print(f"{checked} INA packets decoded and compared, {malformed} malformed flagged, "
          f"{len(failures)} mismatches")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
