// SPDX-License-Identifier: Apache-2.0
#include "roce/encode.h"

#include <cstring>

#include "roce/icrc.h"

namespace ina::roce {

namespace {

constexpr size_t kIpUdpBth = kIpv4Bytes + kUdpBytes + kBthBytes;

uint16_t ipv4_checksum(const uint8_t* h) {
    uint32_t sum = 0;
    for (size_t i = 0; i < kIpv4Bytes; i += 2) {
        sum += static_cast<uint32_t>(h[i] << 8 | h[i + 1]);
    }
    while (sum >> 16) {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    return static_cast<uint16_t>(~sum);
}

// IPv4 (no options, DF) and UDP headers for a datagram of `udp_payload` bytes (BTH .. ICRC).
void write_ip_udp(uint8_t* out, const Ipv4Path& path, uint16_t ip_id, size_t udp_payload) {
    const size_t total = kIpv4Bytes + kUdpBytes + udp_payload;
    out[0] = 0x45;
    out[1] = path.tos;
    detail::put16(out + 2, static_cast<uint16_t>(total));
    detail::put16(out + 4, ip_id);
    detail::put16(out + 6, 0x4000);  // DF: RoCE is never fragmented
    out[8] = path.ttl;
    out[9] = 17;
    detail::put16(out + 10, 0);
    detail::put32(out + 12, path.src_ip);
    detail::put32(out + 16, path.dst_ip);
    detail::put16(out + 10, ipv4_checksum(out));
    uint8_t* udp = out + kIpv4Bytes;
    detail::put16(udp, path.src_port);
    detail::put16(udp + 2, kUdpPort);
    detail::put16(udp + 4, static_cast<uint16_t>(kUdpBytes + udp_payload));
    detail::put16(udp + 6, 0);
}

Bth bth_for(const Ipv4Path& path, uint8_t opcode, uint32_t psn) {
    Bth b;
    b.opcode = opcode;
    b.pkey = path.pkey;
    b.dest_qp = path.dest_qp & 0xFFFFFF;
    b.psn = psn & 0xFFFFFF;
    return b;
}

size_t request_header_bytes(const Transmit& tx) {
    return kIpUdpBth + (tx.has_reth ? kRethBytes : 0) + (tx.has_imm ? kImmBytes : 0);
}

}  // namespace

size_t write_ethernet(uint8_t* out, size_t capacity, const uint8_t dst_mac[6],
                      const uint8_t src_mac[6]) {
    if (capacity < kEthernetBytes) {
        return 0;
    }
    std::memcpy(out, dst_mac, 6);
    std::memcpy(out + 6, src_mac, 6);
    detail::put16(out + 12, 0x0800);
    return kEthernetBytes;
}

void finish_icrc(uint8_t* l3, size_t total) { write_icrc(l3 + total, icrc(l3, total)); }

size_t encode_ack(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                  const Reply& reply) {
    const size_t total = kIpUdpBth + kAethBytes + kIcrcBytes;
    if (capacity < total) {
        return 0;
    }
    write_ip_udp(out, path, ip_id, total - kIpv4Bytes - kUdpBytes);
    write_bth(out + kIpv4Bytes + kUdpBytes, bth_for(path, op::kAcknowledge, reply.psn));
    write_aeth(out + kIpUdpBth, Aeth{reply.syndrome, reply.msn & 0xFFFFFF});
    finish_icrc(out, total);
    return total;
}

size_t encode_cnp(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id) {
    const size_t total = kIpUdpBth + kCnpPadBytes + kIcrcBytes;
    if (capacity < total) {
        return 0;
    }
    write_ip_udp(out, path, ip_id, total - kIpv4Bytes - kUdpBytes);
    Bth b = bth_for(path, op::kCnp, 0);
    b.becn = true;
    write_bth(out + kIpv4Bytes + kUdpBytes, b);
    std::memset(out + kIpUdpBth, 0, kCnpPadBytes);
    finish_icrc(out, total);
    return total;
}

size_t write_request_headers(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                             const Transmit& tx) {
    const size_t headers = request_header_bytes(tx);
    const uint32_t pad = write_request_pad_bytes(tx.length);
    if (capacity < headers) {
        return 0;
    }
    const size_t udp_payload = headers - kIpv4Bytes - kUdpBytes + tx.length + pad + kIcrcBytes;
    write_ip_udp(out, path, ip_id, udp_payload);
    Bth b = bth_for(path, tx.opcode, tx.psn);
    b.ack_req = tx.ack_req;
    b.pad = static_cast<uint8_t>(pad);
    write_bth(out + kIpv4Bytes + kUdpBytes, b);
    uint8_t* e = out + kIpUdpBth;
    if (tx.has_reth) {
        write_reth(e, tx.reth);
        e += kRethBytes;
    }
    if (tx.has_imm) {
        detail::put32(e, tx.imm);
    }
    return headers;
}

size_t encode_write(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                    const Transmit& tx, const uint8_t* payload) {
    const uint32_t pad = write_request_pad_bytes(tx.length);
    const size_t headers = request_header_bytes(tx);
    const size_t total = headers + tx.length + pad + kIcrcBytes;
    if (capacity < total || write_request_headers(out, capacity, path, ip_id, tx) != headers) {
        return 0;
    }
    if (tx.length != 0) {
        std::memcpy(out + headers, payload, tx.length);
    }
    std::memset(out + headers + tx.length, 0, pad);
    finish_icrc(out, total);
    return total;
}

}  // namespace ina::roce
