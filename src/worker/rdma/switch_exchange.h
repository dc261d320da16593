// SPDX-License-Identifier: Apache-2.0
// Server-to-switch mode, the pure part (docs/rdma.md "Server-to-switch mode"; the contract both
// the switch and the worker implement): the JSON of the connect exchange over the control API,
// and the address and immediate arithmetic of the data path over the session sequence.
//
// Session sequence. A worker's connection numbers its chunks across AllReduce calls: chunk c of
// the current call is s = base + c (32 bits here, 24 on the wire), and base advances by the
// call's chunk count. The worker WRITEs chunk s with immediate (s mod 2^24) << 8 | 1 to
//     area_addr + (s mod window) * chunk_bytes
// and the switch WRITEs the reduced chunk with immediate (s mod 2^24) << 8 | world to
//     result_addr + (s mod result_slots) * chunk_bytes,   result_slots = result_length / chunk_bytes.
// Window: s is posted only once the results of every s' <= s - window are in, so with
// result_slots >= window a result never lands in a slot whose previous result is still unread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "reduce/reduce.h"

namespace ina::rdma {

inline constexpr uint32_t kSeqBits = 24;
inline constexpr uint32_t kSeqMask = (1u << kSeqBits) - 1;

// Worker -> switch: POST /api/v1/rdma/jobs/{id}/connect.
struct SwitchConnectRequest {
    uint16_t rank = 0;
    uint32_t qpn = 0;         // the worker's QP number (24 bits)
    uint32_t psn = 0;         // the worker's initial send PSN (24 bits)
    std::string ip;           // the worker's IPv4 (GID ::ffff:ip) or IPv6 address (GID = ip)
    uint32_t pmtu = 1024;     // 256..4096
    uint64_t result_addr = 0;
    uint32_t result_rkey = 0;
    uint64_t result_length = 0;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    reduce::Op op = reduce::Op::sum;
    uint16_t world = 0;
    // The switch requester's QP attributes for the result WRITEs (IB encodings).
    uint8_t timeout = 14;
    uint8_t retry_cnt = 7;
    uint8_t rnr_retry = 7;

    std::string to_json() const;
    // nullopt with *why on bad JSON, a missing or out-of-range field (the optional three default).
    static std::optional<SwitchConnectRequest> from_json(std::string_view text, std::string* why);
};

// Switch -> worker: the 200 answer.
struct SwitchConnectReply {
    uint32_t qpn = 0;  // the switch's QP for this connection
    uint32_t psn = 0;  // the switch's initial send PSN (the worker's first expected PSN)
    std::string ip;    // the switch address the worker targets (of the worker's family)
    std::string gid;   // its GID: "::ffff:a.b.c.d", or the IPv6 address itself
    uint64_t area_addr = 0;
    uint32_t area_rkey = 0;
    uint64_t area_length = 0;
    uint32_t pmtu = 0;

    std::string to_json() const;
    // nullopt with *why on bad JSON, a missing field, a QPN/PSN beyond 24 bits, an ip that is
    // neither IPv4 nor IPv6 or a gid that is not IPv6 text.
    static std::optional<SwitchConnectReply> from_json(std::string_view text, std::string* why);
};

// The RoCE v2 GID of an address, as text: "::ffff:a.b.c.d" for IPv4, an IPv6 address as given;
// "" for anything else.
std::string gid_text(const std::string& ip);

// --switch-cm's value: "a.b.c.d", "a.b.c.d:PORT", an IPv6 address alone, "[IPv6]" or
// "[IPv6]:PORT" (an IPv6 address with a port needs the brackets). nullopt with *why otherwise.
struct CmTarget {
    std::string ip;
    std::optional<uint16_t> port;
};
std::optional<CmTarget> parse_cm_target(std::string_view text, std::string* why);

// The text of an API error answer: `{"error": "..."}`'s message (the contract's shape), or the
// messages of the API's generic `{"errors": [...]}` joined by "; ", else the body itself (cut to
// 200 bytes), prefixed with the HTTP status.
std::string api_error_text(int status, std::string_view body);

// Immediates of the data path (host order; big-endian on the wire).
constexpr uint32_t contribution_imm(uint32_t seq) { return (seq & kSeqMask) << 8 | 1u; }
constexpr uint32_t result_imm(uint32_t seq, uint8_t world) {
    return (seq & kSeqMask) << 8 | world;
}

// The switch's failure notice (docs/rdma.md "A rank that fails"): when one rank's QP goes into
// error the job's session cannot complete, and every other rank gets a zero-length WRITE with
// immediate failure << 24 | rank << 8: count 0, which no result carries. `failure`: the failed
// QP's result side error at the switch (1 retries exhausted, 2 RNR retries exhausted, 3..6 a
// fatal NAK received: invalid request, remote access, remote operational, other), or
// kFailureReceiveSide (the switch sent it a fatal NAK), or kFailureRankLeft (its QP was
// deleted or disconnected while the others still needed its contributions).
inline constexpr uint8_t kFailureReceiveSide = 0x80;
inline constexpr uint8_t kFailureRankLeft = 0x81;
constexpr uint32_t failure_notice_imm(uint16_t rank, uint8_t failure) {
    return uint32_t{failure} << 24 | uint32_t{rank} << 8;
}
constexpr bool is_failure_notice(uint32_t imm) { return (imm & 0xFF) == 0; }
// "rank R's connection failed (why)" for a failure notice's immediate.
std::string failure_notice_text(uint32_t imm);

// Where the worker's WRITE of s goes and where the switch's result of s lands.
struct SwitchLayout {
    uint64_t area_addr = 0;
    uint32_t chunk_bytes = 0;
    uint32_t window = 0;        // > 0
    uint64_t result_addr = 0;
    uint32_t result_slots = 0;  // result_length / chunk_bytes, > 0

    uint64_t contribution_addr(uint32_t seq) const {
        return area_addr + uint64_t{seq % window} * chunk_bytes;
    }
    uint32_t result_slot(uint32_t seq) const { return seq % result_slots; }
    uint64_t result_offset(uint32_t seq) const { return uint64_t{result_slot(seq)} * chunk_bytes; }
};

// The session sequence of one connection across AllReduce calls.
class SessionSequence {
public:
    uint32_t base() const { return base_; }
    uint32_t seq(uint32_t chunk) const { return base_ + chunk; }
    // The chunk of the current call (of `chunks`) a result immediate names, or nullopt when its
    // 24-bit sequence lies outside [base, base + chunks) (mod 2^24).
    std::optional<uint32_t> chunk_of(uint32_t imm_host_order, uint32_t chunks) const {
        const uint32_t c = ((imm_host_order >> 8) - base_) & kSeqMask;
        if (c >= chunks) {
            return std::nullopt;
        }
        return c;
    }
    // After a call of `chunks` chunks completed.
    void advance(uint32_t chunks) { base_ += chunks; }

private:
    uint32_t base_ = 0;
};

}  // namespace ina::rdma
