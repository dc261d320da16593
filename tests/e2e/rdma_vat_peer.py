# SPDX-License-Identifier: Apache-2.0
"""The two ends around a RoCE aggregator switch for e2e-rdma-aggregator, standard library only
(run inside a host namespace):

  ranks  IFACE SWITCH_MAC SWITCH_IP CHUNKS OFFSET [CHUNK_ELEMS PMTU]
                                             two RC ranks (QPNs 17 and 18 at this host): WRITE
         each chunk into the switch (WRITE_ONLY_WITH_IMM, the ICRC computed here with zlib's
         CRC-32), take the switch's ACKs and result WRITEs on UDP 4791, check each result and
         ACK it (a result is the two ranks' sum + OFFSET per element). One chunk at a time
         per rank. Prints a JSON summary. With CHUNK_ELEMS fp32 elements per chunk (default 16)
         above PMTU bytes, a chunk is one multi-packet message each way (WRITE_FIRST with the
         RETH, MIDDLEs of PMTU bytes, WRITE_LAST_WITH_IMM; a lost one is sent again from its
         FIRST), and a result is taken once all its packets are in, in PSN order.
  parent SELF_IP CHUNKS                       the INA parent: takes the switch's partials on UDP
         9470, checks them (job 7, P-BM {1, 2}, BSL 64, fp32 sum of the two ranks), does not
         answer the first copy of chunk 1 (the switch must send it again), and answers every
         other with an INA result whose elements are the partial's + 1000 (another subtree).

RoCEv2 and INA are encoded from docs (reference/rocev2.md, docs/protocol.md), not from the
switch's code."""

import json
import socket
import struct
import sys
import time
import zlib

CHUNK_ELEMS = 16
SWITCH_QPN = {1: 0x100, 2: 0x101}
WORKER_QPN = {1: 17, 2: 18}
WORKER_PSN = {1: 1000, 2: 2000}
AREA_ADDR, AREA_RKEY, WINDOW = 4096, 0x12345678, 4
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST_IMM, WRITE_ONLY_IMM, ACKNOWLEDGE = 0x06, 0x07, 0x09, 0x0B, 0x11
INA_PORT = 9470


def values(rank, s, n=CHUNK_ELEMS):
    return [float(rank * 100 + s + i) for i in range(n)]


def expected(s, offset, n=CHUNK_ELEMS):
    """What the ranks must get for chunk s: the two ranks' sum + offset (what the rest of the
    tree adds)."""
    return [a + b + offset for a, b in zip(values(1, s, n), values(2, s, n))]


def ip_sum(b):
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def roce_frame(dst_mac, src_mac, src_ip, dst_ip, sport, opcode, dest_qp, psn, ext, payload,
               ident, ackreq=False):
    bth = struct.pack("!BBHBBHBBH", opcode, 0, 0xFFFF, 0, dest_qp >> 16, dest_qp & 0xFFFF,
                      0x80 if ackreq else 0, psn >> 16 & 0xFF, psn & 0xFFFF)
    body = bth + ext + payload
    udp_len = 8 + len(body) + 4
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + udp_len, ident, 0x4000, 64, 17,
                               0, socket.inet_aton(src_ip), socket.inet_aton(dst_ip)))
    ip[10:12] = struct.pack("!H", ip_sum(bytes(ip)))
    udp = struct.pack("!HHHH", sport, 4791, udp_len, 0)
    # ICRC: CRC-32 over 8 bytes of 1s, then IP/UDP/BTH with TOS, TTL, IP checksum, UDP checksum
    # and BTH byte 4 set to 1s, then the rest of the packet; least-significant byte first.
    masked = bytearray(ip + udp + body)
    masked[1] = masked[8] = masked[10] = masked[11] = 0xFF
    masked[26] = masked[27] = 0xFF
    masked[28 + 4] = 0xFF
    icrc = zlib.crc32(b"\xff" * 8 + bytes(masked)) & 0xFFFFFFFF
    eth = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) + \
        b"\x08\x00"
    return eth + bytes(ip) + udp + body + struct.pack("<I", icrc)


def ranks(iface, switch_mac, switch_ip, chunks, offset, chunk_elems=CHUNK_ELEMS, pmtu=1024):
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    raw.bind((iface, 0))
    my_mac = ":".join(f"{b:02x}" for b in raw.getsockname()[4][:6])
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("0.0.0.0", 4791))
    rx.settimeout(0.2)
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.connect((switch_ip, 9))
    my_ip = probe.getsockname()[0]
    probe.close()
    chunk_bytes = 4 * chunk_elems
    segments = -(-chunk_bytes // pmtu)  # packets per message, each way
    ident = {1: 0, 2: 0}
    summary = {"results": 0, "wrong": [], "acks": 0, "resent_writes": 0, "packets_per_chunk":
               segments}
    msn = {1: 0, 2: 0}
    seen_psn = {1: set(), 2: set()}
    # The switch's result message being received per rank: PSN -> payload, and its first PSN.
    parts = {1: {}, 2: {}}

    def send(rank, opcode, psn, ext, payload, ackreq):
        ident[rank] += 1
        raw.send(roce_frame(switch_mac, my_mac, my_ip, switch_ip, 0xC000 + rank, opcode,
                            SWITCH_QPN[rank], psn, ext, payload, ident[rank], ackreq=ackreq))

    def send_write(rank, s):
        payload = struct.pack(f"<{chunk_elems}f", *values(rank, s, chunk_elems))
        reth = struct.pack("!QII", AREA_ADDR + (s % WINDOW) * len(payload), AREA_RKEY,
                           len(payload))
        imm = struct.pack("!I", s << 8 | 1)
        first_psn = WORKER_PSN[rank] + s * segments
        if segments == 1:
            send(rank, WRITE_ONLY_IMM, first_psn, reth + imm, payload, True)
            return
        for j in range(segments):
            piece = payload[j * pmtu:(j + 1) * pmtu]
            if j == 0:
                send(rank, WRITE_FIRST, first_psn, reth, piece, False)
            elif j < segments - 1:
                send(rank, WRITE_MIDDLE, first_psn + j, b"", piece, False)
            else:
                send(rank, WRITE_LAST_IMM, first_psn + j, imm, piece, True)

    def ack(rank, psn):
        # ACK up to `psn`: AETH ACK with unlimited credits and the messages completed.
        send(rank, ACKNOWLEDGE, psn, struct.pack("!I", 0x1F << 24 | msn[rank]), b"", False)

    for s in range(chunks):
        got = {}
        for rank in (1, 2):
            send_write(rank, s)
        deadline = time.monotonic() + 20
        last_send = time.monotonic()
        while len(got) < 2 and time.monotonic() < deadline:
            try:
                data, _ = rx.recvfrom(9000)
            except socket.timeout:
                if time.monotonic() - last_send > 2:
                    for rank in (1, 2):  # a lost WRITE: the rank sends it again (same PSNs)
                        if rank not in got:
                            send_write(rank, s)
                    last_send = time.monotonic()
                continue
            opcode, dest_qp = data[0], int.from_bytes(data[5:8], "big")
            psn = int.from_bytes(data[9:12], "big")
            rank = next((r for r, q in WORKER_QPN.items() if q == dest_qp), None)
            if rank is None:
                continue
            if opcode == ACKNOWLEDGE:
                summary["acks"] += 1
                continue
            if opcode in (WRITE_FIRST, WRITE_MIDDLE):
                # RETH (16 bytes) after the BTH on a FIRST; the payload ends before the ICRC.
                start = 12 + (16 if opcode == WRITE_FIRST else 0)
                if opcode == WRITE_FIRST:
                    parts[rank] = {"first": psn}
                if "first" in parts[rank]:
                    parts[rank][psn] = data[start:-4]
                continue
            if opcode not in (WRITE_ONLY_IMM, WRITE_LAST_IMM):
                continue
            if opcode == WRITE_ONLY_IMM:
                imm = struct.unpack("!I", data[28:32])[0]
                body = data[32:-4]
                whole = True
            else:
                imm = struct.unpack("!I", data[12:16])[0]
                first = parts[rank].get("first")
                whole = first is not None and all(
                    q in parts[rank] for q in range(first, psn)) and psn - first + 1 == segments
                body = b"".join(parts[rank][q] for q in range(first, psn)) + data[16:-4] \
                    if whole else b""
                parts[rank] = {}
            if not whole:
                continue  # a packet of it was lost: the switch sends the message again
            elems = list(struct.unpack(f"<{chunk_elems}f", body[:4 * chunk_elems]))
            if psn in seen_psn[rank]:
                summary["resent_writes"] += 1
            else:
                seen_psn[rank].add(psn)
                msn[rank] += 1
            if imm >> 8 == s:
                if elems != expected(s, offset, chunk_elems):
                    summary["wrong"].append([rank, s, elems[:4]])
                got[rank] = True
            ack(rank, psn)  # the result's last PSN: every packet of it
        summary["results"] += len(got)
        if len(got) < 2:
            summary["stuck_at"] = s
            break
    print(json.dumps(summary), flush=True)


def parent(self_ip, chunks):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((self_ip, INA_PORT))
    sock.settimeout(30)
    summary = {"partials": 0, "resent": 0, "bad": [], "answered": []}
    held_back = False
    while len(summary["answered"]) < chunks:
        try:
            data, (src, _) = sock.recvfrom(9000)
        except socket.timeout:
            break
        (m0, m1, vt, flags, op_et, bsl, si, _r, job, seq, count, _r2, _r3) = struct.unpack(
            ">BBBBBBBBIIHHI", data[:24])
        pbm = data[24:32]
        elems = list(struct.unpack(f"<{count}f", data[32:32 + 4 * count]))
        summary["partials"] += 1
        if flags & 0x01:
            summary["resent"] += 1
        want = [a + b for a, b in zip(values(1, seq), values(2, seq))]
        if (m0, m1, vt, op_et, bsl >> 4, job, count) != (0x49, 0x4E, 0x11, 0x01, 1, 7,
                                                          CHUNK_ELEMS) \
                or pbm != bytes(7) + b"\x03" or elems != want:
            summary["bad"].append([seq, flags, pbm.hex(), elems[:4]])
            continue
        if seq == 1 and not held_back:
            held_back = True  # "lost": the switch must send the partial again
            continue
        result = struct.pack(">BBBBBBBBIIHHI", 0x49, 0x4E, 0x12, 0, 0x01, 1 << 4, 0, 0, 7, seq,
                             count, 0, 0) + bytes(7) + b"\x0f" + \
            struct.pack(f"<{count}f", *[x + 1000.0 for x in elems])
        sock.sendto(result, (src, INA_PORT))
        if seq not in summary["answered"]:
            summary["answered"].append(seq)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "ranks":
        ranks(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6]),
              *[int(a) for a in sys.argv[7:9]])
    else:
        parent(sys.argv[2], int(sys.argv[3]))
