// SPDX-License-Identifier: Apache-2.0
#include "roce/encode.h"

#include <cstring>

#include "roce/crc32.h"
#include "roce/icrc.h"

namespace ina::roce {

namespace {

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

constexpr size_t ip_bytes(const Ipv4Path&) { return kIpv4Bytes; }
constexpr size_t ip_bytes(const Ipv6Path&) { return kIpv6Bytes; }

void write_udp(uint8_t* udp, uint16_t src_port, size_t udp_payload) {
    detail::put16(udp, src_port);
    detail::put16(udp + 2, kUdpPort);
    detail::put16(udp + 4, static_cast<uint16_t>(kUdpBytes + udp_payload));
    detail::put16(udp + 6, 0);  // RoCEv2 leaves integrity to the ICRC
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
    write_udp(out + kIpv4Bytes, path.src_port, udp_payload);
}

// IPv6 (no extension headers) and UDP headers; IPv6 has no identification field.
void write_ip_udp(uint8_t* out, const Ipv6Path& path, uint16_t /*ip_id*/, size_t udp_payload) {
    detail::put32(out, 6u << 28 | uint32_t{path.traffic_class} << 20 | (path.flow_label & 0xFFFFF));
    detail::put16(out + 4, static_cast<uint16_t>(kUdpBytes + udp_payload));
    out[6] = 17;
    out[7] = path.hop_limit;
    std::memcpy(out + 8, path.src_ip.data(), 16);
    std::memcpy(out + 24, path.dst_ip.data(), 16);
    write_udp(out + kIpv6Bytes, path.src_port, udp_payload);
}

template <class Path>
Bth bth_for(const Path& path, uint8_t opcode, uint32_t psn) {
    Bth b;
    b.opcode = opcode;
    b.pkey = path.pkey;
    b.dest_qp = path.dest_qp & 0xFFFFFF;
    b.psn = psn & 0xFFFFFF;
    return b;
}

template <class Path>
size_t request_header_bytes(const Path& path, const Transmit& tx) {
    return ip_bytes(path) + kUdpBytes + kBthBytes + (tx.has_reth ? kRethBytes : 0) +
           (tx.has_imm ? kImmBytes : 0);
}

// How an encoder sums the ICRC: `separate` needs nothing before `out` (icrc);
// `in_frame` is one pass over the 8 bytes before `out` too (icrc_in_frame: the caller's frame
// has its Ethernet header there).
enum class IcrcPass : uint8_t { separate, in_frame };

void seal(uint8_t* l3, size_t total, IcrcPass pass) {
    write_icrc(l3 + total, pass == IcrcPass::in_frame ? icrc_in_frame(l3, total)
                                                      : icrc(l3, total));
}

template <class Path>
size_t ack_of(uint8_t* out, size_t capacity, const Path& path, uint16_t ip_id, const Reply& reply,
              IcrcPass pass) {
    const size_t bth_at = ip_bytes(path) + kUdpBytes;
    const size_t total = bth_at + kBthBytes + kAethBytes + kIcrcBytes;
    if (capacity < total) {
        return 0;
    }
    write_ip_udp(out, path, ip_id, total - bth_at);
    write_bth(out + bth_at, bth_for(path, op::kAcknowledge, reply.psn));
    write_aeth(out + bth_at + kBthBytes, Aeth{reply.syndrome, reply.msn & 0xFFFFFF});
    seal(out, total, pass);
    return total;
}

template <class Path>
size_t cnp_of(uint8_t* out, size_t capacity, const Path& path, uint16_t ip_id, IcrcPass pass) {
    const size_t bth_at = ip_bytes(path) + kUdpBytes;
    const size_t total = bth_at + kBthBytes + kCnpPadBytes + kIcrcBytes;
    if (capacity < total) {
        return 0;
    }
    write_ip_udp(out, path, ip_id, total - bth_at);
    Bth b = bth_for(path, op::kCnp, 0);
    b.becn = true;
    write_bth(out + bth_at, b);
    std::memset(out + bth_at + kBthBytes, 0, kCnpPadBytes);
    seal(out, total, pass);
    return total;
}

template <class Path>
size_t request_headers_of(uint8_t* out, size_t capacity, const Path& path, uint16_t ip_id,
                          const Transmit& tx) {
    const size_t headers = request_header_bytes(path, tx);
    const uint32_t pad = write_request_pad_bytes(tx.length);
    if (capacity < headers) {
        return 0;
    }
    const size_t bth_at = ip_bytes(path) + kUdpBytes;
    write_ip_udp(out, path, ip_id, headers - bth_at + tx.length + pad + kIcrcBytes);
    Bth b = bth_for(path, tx.opcode, tx.psn);
    b.ack_req = tx.ack_req;
    b.pad = static_cast<uint8_t>(pad);
    write_bth(out + bth_at, b);
    uint8_t* e = out + bth_at + kBthBytes;
    if (tx.has_reth) {
        write_reth(e, tx.reth);
        e += kRethBytes;
    }
    if (tx.has_imm) {
        detail::put32(e, tx.imm);
    }
    return headers;
}

template <class Path>
size_t write_of(uint8_t* out, size_t capacity, const Path& path, uint16_t ip_id,
                const Transmit& tx, const uint8_t* payload) {
    const uint32_t pad = write_request_pad_bytes(tx.length);
    const size_t headers = request_header_bytes(path, tx);
    const size_t total = headers + tx.length + pad + kIcrcBytes;
    if (capacity < total || request_headers_of(out, capacity, path, ip_id, tx) != headers) {
        return 0;
    }
    if (tx.length != 0) {
        std::memcpy(out + headers, payload, tx.length);
    }
    std::memset(out + headers + tx.length, 0, pad);
    finish_icrc(out, total);
    return total;
}

}  // namespace

size_t write_ethernet(uint8_t* out, size_t capacity, const uint8_t dst_mac[6],
                      const uint8_t src_mac[6], uint16_t ethertype) {
    if (capacity < kEthernetBytes) {
        return 0;
    }
    std::memcpy(out, dst_mac, 6);
    std::memcpy(out + 6, src_mac, 6);
    detail::put16(out + 12, ethertype);
    return kEthernetBytes;
}

void finish_icrc(uint8_t* l3, size_t total) {
    write_icrc(l3 + total, icrc(l3, total));
}

size_t encode_ack(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                  const Reply& reply) {
    return ack_of(out, capacity, path, ip_id, reply, IcrcPass::separate);
}
size_t encode_ack(uint8_t* out, size_t capacity, const Ipv6Path& path, const Reply& reply) {
    return ack_of(out, capacity, path, 0, reply, IcrcPass::separate);
}

size_t encode_cnp(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id) {
    return cnp_of(out, capacity, path, ip_id, IcrcPass::separate);
}
size_t encode_cnp(uint8_t* out, size_t capacity, const Ipv6Path& path) {
    return cnp_of(out, capacity, path, 0, IcrcPass::separate);
}

namespace {

constexpr uint16_t ethertype_of(const Ipv4Path&) { return kEthertypeIpv4; }
constexpr uint16_t ethertype_of(const Ipv6Path&) { return kEthertypeIpv6; }

// An ACK or CNP as a whole frame: the Ethernet header, then the packet summed in one pass with
// the header's last 8 bytes standing in for the ICRC's ones.
template <class Path>
size_t ack_frame_of(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                    const uint8_t src_mac[6], const Path& path, uint16_t ip_id,
                    const Reply* reply) {
    if (write_ethernet(frame, capacity, dst_mac, src_mac, ethertype_of(path)) == 0) {
        return 0;
    }
    uint8_t* l3 = frame + kEthernetBytes;
    const size_t room = capacity - kEthernetBytes;
    const size_t n = reply != nullptr ? ack_of(l3, room, path, ip_id, *reply, IcrcPass::in_frame)
                                      : cnp_of(l3, room, path, ip_id, IcrcPass::in_frame);
    return n == 0 ? 0 : kEthernetBytes + n;
}

}  // namespace

size_t encode_ack_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv4Path& path, uint16_t ip_id,
                        const Reply& reply) {
    return ack_frame_of(frame, capacity, dst_mac, src_mac, path, ip_id, &reply);
}
size_t encode_ack_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv6Path& path, const Reply& reply) {
    return ack_frame_of(frame, capacity, dst_mac, src_mac, path, 0, &reply);
}

size_t encode_cnp_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv4Path& path, uint16_t ip_id) {
    return ack_frame_of(frame, capacity, dst_mac, src_mac, path, ip_id, nullptr);
}
size_t encode_cnp_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv6Path& path) {
    return ack_frame_of(frame, capacity, dst_mac, src_mac, path, 0, nullptr);
}

namespace {

// An IPv4 ACK's identification: the covered bytes after it run to the AETH's end (the ICRC is
// not covered), so each of its two bytes changes the ICRC by a fixed function of its value.
constexpr size_t kAckIdAfter = kIpv4Bytes - 6 + kUdpBytes + kBthBytes + kAethBytes;
using ByteDeltas = std::array<uint32_t, 256>;
constexpr ByteDeltas byte_deltas(unsigned after) {
    ByteDeltas t{};
    for (unsigned b = 0; b < 256; ++b) {
        t[b] = crc32_delta_byte(static_cast<uint8_t>(b), after);
    }
    return t;
}
constexpr ByteDeltas kAckIdHigh = byte_deltas(kAckIdAfter + 1);
constexpr ByteDeltas kAckIdLow = byte_deltas(kAckIdAfter);

}  // namespace

AckFrameTemplate::AckFrameTemplate(const uint8_t dst_mac[6], const uint8_t src_mac[6],
                                   const Ipv4Path& path) {
    const size_t n = encode_ack_frame(frame_.data(), frame_.size(), dst_mac, src_mac, path, 0,
                                      Reply{0, 0, 0});
    bytes_ = static_cast<uint8_t>(n);
    bth_at_ = static_cast<uint8_t>(kEthernetBytes + kIpv4Bytes + kUdpBytes);
    icrc_ = read_icrc(frame_.data() + n);
    ip_sum_ = static_cast<uint16_t>(~detail::be16(frame_.data() + kEthernetBytes + 10));
    ipv4_ = true;
}

AckFrameTemplate::AckFrameTemplate(const uint8_t dst_mac[6], const uint8_t src_mac[6],
                                   const Ipv6Path& path) {
    const size_t n =
        encode_ack_frame(frame_.data(), frame_.size(), dst_mac, src_mac, path, Reply{0, 0, 0});
    bytes_ = static_cast<uint8_t>(n);
    bth_at_ = static_cast<uint8_t>(kEthernetBytes + kIpv6Bytes + kUdpBytes);
    icrc_ = read_icrc(frame_.data() + n);
}

size_t AckFrameTemplate::write(uint8_t* frame, size_t capacity, uint16_t ip_id,
                               const Reply& reply) const {
    if (capacity < bytes_ || bytes_ == 0) {
        return 0;
    }
    if (capacity >= kMaxBytes) {
        std::memcpy(frame, frame_.data(), kMaxBytes);  // a fixed size: a few vector moves
    } else {
        std::memcpy(frame, frame_.data(), bytes_);
    }
    uint8_t* bth = frame + bth_at_;
    detail::put24(bth + 9, reply.psn & 0xFFFFFF);
    bth[12] = reply.syndrome;
    detail::put24(bth + 13, reply.msn & 0xFFFFFF);
    // BTH bytes 8..15 (A bit 0, PSN, AETH) are the last covered bytes.
    uint64_t tail;
    std::memcpy(&tail, bth + 8, 8);
    uint32_t crc = icrc_ ^ crc32_delta8(tail);
    if (ipv4_) {
        uint8_t* ip = frame + kEthernetBytes;
        detail::put16(ip + 4, ip_id);
        uint32_t sum = uint32_t{ip_sum_} + ip_id;
        sum = (sum & 0xFFFF) + (sum >> 16);
        detail::put16(ip + 10, static_cast<uint16_t>(~sum));
        crc ^= kAckIdHigh[ip_id >> 8] ^ kAckIdLow[ip_id & 0xFF];
    }
    write_icrc(frame + bytes_, crc);
    return bytes_;
}

size_t write_request_headers(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                             const Transmit& tx) {
    return request_headers_of(out, capacity, path, ip_id, tx);
}
size_t write_request_headers(uint8_t* out, size_t capacity, const Ipv6Path& path,
                             const Transmit& tx) {
    return request_headers_of(out, capacity, path, 0, tx);
}

size_t encode_write(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                    const Transmit& tx, const uint8_t* payload) {
    return write_of(out, capacity, path, ip_id, tx, payload);
}
size_t encode_write(uint8_t* out, size_t capacity, const Ipv6Path& path, const Transmit& tx,
                    const uint8_t* payload) {
    return write_of(out, capacity, path, 0, tx, payload);
}

}  // namespace ina::roce
