# SPDX-License-Identifier: Apache-2.0
"""tools/scapy/ina.py decodes every INA packet of the golden pcaps right, and builds them
byte for byte as tests/golden/inapkt.py encodes them.

For every frame on UDP port 9470 in the INA golden cases (read by scapy's rdpcap): the layer's
fields must equal test_dissector.py's independent parse of the UDP payload (job, seq, type,
flags, op, element type, BSL, set, count, P-BM as BFR-ids, int32 elements); a payload that is
not INA must decode as Raw, not INA. Every decoded packet is then rebuilt twice, with
ina_packet() from its decoded values and with inapkt.ina(), and both must give the captured
payload's bytes.

usage: test_scapy_ina.py REPO_ROOT"""

import os
import sys

ROOT = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "."
sys.path[:0] = [os.path.join(ROOT, "tools", "scapy"), os.path.join(ROOT, "tests", "golden"),
                os.path.dirname(os.path.abspath(__file__))]

from scapy.layers.inet import UDP  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from scapy.utils import rdpcap  # noqa: E402

import inapkt  # noqa: E402
from ina import INA, ELEM_TYPES, OPS, TYPES, ina_packet  # noqa: E402
from test_dissector import CASES, expected, udp_payloads  # noqa: E402


def compare(p: INA, want: dict) -> list[str]:
    got = {"ina.job_id": str(p.job_id), "ina.seq": str(p.seq), "ina.type": str(p.type),
           "ina.flags": "0x%02x" % int(p.flags), "ina.op": str(p.op),
           "ina.elem_type": str(p.etype), "ina.bsl_bits": str(p.bsl_bits()),
           "ina.set_id": str(p.set_id), "ina.elem_count": str(p.count),
           "ina.pbm.bfr_ids": ",".join(str(i) for i in p.bfr_ids())}
    if p.etype == 0:
        got["ina.element"] = ",".join(str(v) for v in p.values())
    return [f"{k} = {got.get(k)!r}, expected {v!r}" for k, v in want.items() if got.get(k) != v]


def rebuilt(p: INA) -> list[tuple[str, bytes]]:
    kind, op, etype = TYPES[p.type], OPS[p.op], ELEM_TYPES[p.etype]
    out = [("ina_packet", bytes(ina_packet(p.job_id, p.seq, p.bfr_ids(), p.values(), etype=etype,
                                           op=op, kind=kind, flags=int(p.flags),
                                           bsl=p.bsl_bits(), si=p.set_id)))]
    if etype in inapkt.TYPES:
        out.append(("inapkt.ina", inapkt.ina(p.job_id, p.seq, p.bfr_ids(), p.values(),
                                             kind=p.type, flags=int(p.flags), op=op, etype=etype,
                                             bsl=p.bsl_bits(), si=p.set_id)))
    return out


def main() -> int:
    decoded = raw = rebuilt_count = 0
    failures = []
    for case in CASES:
        folder = os.path.join(ROOT, "tests", "golden", case)
        for name in sorted(os.listdir(folder)):
            if not name.endswith(".pcap"):
                continue
            path = os.path.join(folder, name)
            payloads = udp_payloads(path)
            frames = rdpcap(path)
            for number, payload in payloads.items():
                where = f"{case}/{name} frame {number}"
                pkt = frames[number - 1]
                want = expected(payload)
                if want is None:
                    raw += 1
                    if INA in pkt or Raw not in pkt[UDP]:
                        failures.append(f"{where}: not INA, yet decoded as {pkt[UDP].summary()}")
                    continue
                if INA not in pkt:
                    failures.append(f"{where}: INA payload not decoded as INA")
                    continue
                decoded += 1
                failures += [f"{where}: {m}" for m in compare(pkt[INA], want)]
                for how, data in rebuilt(pkt[INA]):
                    rebuilt_count += 1
                    if data != payload:
                        failures.append(f"{where}: {how} rebuilt {data.hex()}, captured "
                                        f"{payload.hex()}")
    for f in failures[:20]:
        print("FAIL", f)
    print(f"{decoded} INA packets decoded and compared, {rebuilt_count} rebuilds byte-equal, "
          f"{raw} non-INA payloads left Raw, {len(failures)} mismatches")
    return 1 if failures or decoded == 0 or raw == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
