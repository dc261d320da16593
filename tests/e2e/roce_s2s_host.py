# SPDX-License-Identifier: Apache-2.0
"""Host side of e2e-rdma-s2s, run inside a host's namespace.

  recv TIMEOUT          print the first UDP 4791 datagram this host receives, as hex (or "none")
  write SRC DST QPN PSN CHUNK VALUES...
                        send one RDMA WRITE_ONLY_WITH_IMM (imm CHUNK << 8 | 1, int32 VALUES)
                        from SRC to DST's QP QPN, built by tests/golden/rocepkt.py (scapy, ICRC
                        included), through a raw IP socket (the kernel keeps the header as built:
                        a non-zero IP identification, DF), then print the first UDP 4791
                        datagram coming back within 10 s (the ACK), as hex
  ack SRC DST QPN PSN MSN
                        send one ACKNOWLEDGE (syndrome 0x1F) from SRC to DST's QP QPN, the same way
"""

import os
import socket
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))


def first_datagram(sock: socket.socket, timeout: float) -> str:
    sock.settimeout(timeout)
    try:
        data, _ = sock.recvfrom(65536)
        return data.hex()
    except socket.timeout:
        return "none"


def main() -> int:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if sys.argv[1] != "ack":
        rx.bind(("0.0.0.0", 4791))
    if sys.argv[1] == "recv":
        print("listening", flush=True)
        print(first_datagram(rx, float(sys.argv[2])), flush=True)
        return 0
    import rocepkt  # noqa: E402  (scapy: only the sender needs it)
    from rocepkt import Endpoint  # noqa: E402
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    if sys.argv[1] == "ack":
        src, dst, qpn, psn, msn = sys.argv[2], sys.argv[3], int(sys.argv[4], 0), \
            int(sys.argv[5]), int(sys.argv[6])
        frame = rocepkt.ack(Endpoint("02:00:00:00:00:bb", src, 0x40),
                            Endpoint("02:00:00:00:00:aa", dst, qpn), psn, msn, ip_id=4322,
                            sport=0xD011)
        raw.sendto(frame[14:], (dst, 0))
        return 0
    src, dst, qpn, psn, chunk = sys.argv[2], sys.argv[3], int(sys.argv[4], 0), int(sys.argv[5]), \
        int(sys.argv[6])
    values = [int(v) for v in sys.argv[7:]]
    frame = rocepkt.write(Endpoint("02:00:00:00:00:aa", src, 17), Endpoint("02:00:00:00:00:bb", dst, qpn),
                          psn, rocepkt.WRITE_ONLY_IMM, struct.pack(f"<{len(values)}i", *values),
                          va=0x10000, rkey=0x111, imm=chunk << 8 | 1, ackreq=True, ip_id=4321,
                          sport=0xC011)
    raw.sendto(frame[14:], (dst, 0))
    print(first_datagram(rx, 10), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
