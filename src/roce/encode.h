// SPDX-License-Identifier: Apache-2.0
// Frames the switch's RC endpoint sends, built into a caller's buffer from the IP header on
// (IPv4 or IPv6; the caller puts the Ethernet header in front, write_ethernet() if it has
// none): ACK and NAK
// (opcode 0x11 + AETH), CNP (0x81, BECN, 16 zero bytes) and the RDMA WRITEs of results (BTH,
// RETH on FIRST/ONLY, ImmDt on LAST/ONLY with immediate, payload, zero pad). UDP checksum 0
// (RoCEv2 leaves it to the ICRC), the IPv4 header checksum and the ICRC (roce/icrc.h) computed.
// IPv4 frames carry DF and the caller's IP identification; IPv6 ones no extension headers.
// Pure: no allocation, no DPDK state; every function returns the bytes written, or 0 (nothing
// written) when `capacity` is too small.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "roce/rc_requester.h"
#include "roce/rc_responder.h"
#include "roce/wire.h"

namespace ina::roce {

inline constexpr size_t kEthernetBytes = 14;
inline constexpr size_t kIpv4Bytes = 20;
inline constexpr size_t kIpv6Bytes = 40;
inline constexpr uint16_t kEthertypeIpv4 = 0x0800;
inline constexpr uint16_t kEthertypeIpv6 = 0x86DD;
inline constexpr size_t kUdpBytes = 8;

// UDP source port for a QP: per-QP entropy for ECMP in 0xC000..0xFFFF (as Linux rxe's range;
// receivers ignore it), a fixed mixing of the QPN so that a QP's packets keep one path.
constexpr uint16_t source_port_for_qp(uint32_t qpn) {
    const uint32_t mixed = (qpn & 0xFFFFFF) * 0x9E3779B1u;
    return static_cast<uint16_t>(0xC000 | (mixed >> 18));
}

// The addressing of one connection's outgoing packets.
struct Ipv4Path {
    uint32_t src_ip = 0;      // host byte order
    uint32_t dst_ip = 0;
    uint16_t src_port = 0xC000;
    uint8_t tos = 0x02;       // DSCP << 2 | ECN; ECT(0) lets congested hops mark CE
    uint8_t ttl = 64;
    uint32_t dest_qp = 0;     // the peer's QPN (for a CNP: the QP to slow down)
    uint16_t pkey = kDefaultPkey;
};

// The same over IPv6 (a RoCEv2 GID is an IPv6 address; IPv4-mapped ones go over IPv4).
struct Ipv6Path {
    std::array<uint8_t, 16> src_ip{};
    std::array<uint8_t, 16> dst_ip{};
    uint16_t src_port = 0xC000;
    uint8_t traffic_class = 0x02;  // DSCP << 2 | ECN
    uint32_t flow_label = 0;       // 20 bits
    uint8_t hop_limit = 64;
    uint32_t dest_qp = 0;
    uint16_t pkey = kDefaultPkey;
};

// 14 bytes: destination MAC, source MAC, ethertype.
size_t write_ethernet(uint8_t* out, size_t capacity, const uint8_t dst_mac[6],
                      const uint8_t src_mac[6], uint16_t ethertype = kEthertypeIpv4);

// ACK or NAK (opcode 0x11): BTH.PSN = reply.psn, AETH = reply.syndrome | reply.msn.
size_t encode_ack(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                  const Reply& reply);
size_t encode_ack(uint8_t* out, size_t capacity, const Ipv6Path& path, const Reply& reply);

// CNP to path.dest_qp: BECN 1, PSN 0, A 0, 16 reserved zero bytes.
size_t encode_cnp(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id);
size_t encode_cnp(uint8_t* out, size_t capacity, const Ipv6Path& path);

// The same two as whole frames for the packet path, which builds them straight into an
// mbuf: the Ethernet header (the path's ethertype) then the packet, its ICRC summed in one pass over
// the frame (icrc_in_frame: the Ethernet header's last 8 bytes stand in for the 8 bytes of ones
// and are put back), so no header copy and one CRC call where encode_ack makes two. Returns the
// frame's bytes (Ethernet header included), or 0. Byte for byte write_ethernet + encode_ack.
size_t encode_ack_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv4Path& path, uint16_t ip_id,
                        const Reply& reply);
size_t encode_cnp_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv4Path& path, uint16_t ip_id);
// The IPv6 frames (ethertype 0x86DD): byte for byte write_ethernet + encode_ack / encode_cnp.
size_t encode_ack_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv6Path& path, const Reply& reply);
size_t encode_cnp_frame(uint8_t* frame, size_t capacity, const uint8_t dst_mac[6],
                        const uint8_t src_mac[6], const Ipv6Path& path);

// One QP's ACK/NAK frames (encode_ack_frame, byte for byte) from a frame written once: per
// reply only the IPv4 identification and checksum, the PSN, the AETH and the ICRC change. The
// checksum moves by the identification (RFC 1624), and the ICRC, affine in the packet's bytes
// at a fixed length (crc32_delta8), is the template's (those bytes zero) xor the change's: the
// PSN and AETH end the covered bytes (one 8-byte table step), the identification's two bytes
// sit a fixed distance before the end (two lookups in tables the compiler builds). A reply
// costs a copy of under 96 bytes and a dozen loads: no CRC pass, no header encoding.
class AckFrameTemplate {
public:
    static constexpr size_t kMaxBytes = 96;  // Ethernet + IPv6 + UDP + BTH + AETH + ICRC: 82

    AckFrameTemplate() = default;
    AckFrameTemplate(const uint8_t dst_mac[6], const uint8_t src_mac[6], const Ipv4Path& path);
    AckFrameTemplate(const uint8_t dst_mac[6], const uint8_t src_mac[6], const Ipv6Path& path);

    size_t bytes() const { return bytes_; }
    // The frame of `reply` (IPv4: with identification ip_id; IPv6 ignores it) written to
    // `frame`; returns bytes(), or 0 when capacity is smaller or the template is empty.
    size_t write(uint8_t* frame, size_t capacity, uint16_t ip_id, const Reply& reply) const;

private:
    std::array<uint8_t, kMaxBytes> frame_{};
    uint32_t icrc_ = 0;     // the ICRC with identification, PSN and AETH zero
    uint16_t ip_sum_ = 0;   // IPv4: the header's folded one's-complement sum, identification 0
    uint8_t bth_at_ = 0;    // from the frame's start
    uint8_t bytes_ = 0;
    bool ipv4_ = false;
};

// The headers of an RDMA WRITE packet (IPv4 .. BTH, RETH, ImmDt) for `tx`, with the IP and
// UDP lengths already counting tx.length payload bytes, pad and ICRC: the caller appends the
// payload and zero pad (write_request_pad_bytes) and then finish_icrc(). Returns the header
// bytes written.
size_t write_request_headers(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                             const Transmit& tx);
size_t write_request_headers(uint8_t* out, size_t capacity, const Ipv6Path& path,
                             const Transmit& tx);
constexpr uint32_t write_request_pad_bytes(uint32_t payload) { return (0u - payload) & 3u; }
// Computes and stores the ICRC of the complete packet at `l3` of `total` bytes (ICRC
// included).
void finish_icrc(uint8_t* l3, size_t total);

// The whole WRITE packet: headers, tx.length bytes copied from `payload`, pad, ICRC.
size_t encode_write(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                    const Transmit& tx, const uint8_t* payload);
size_t encode_write(uint8_t* out, size_t capacity, const Ipv6Path& path, const Transmit& tx,
                    const uint8_t* payload);

}  // namespace ina::roce
