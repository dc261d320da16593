// SPDX-License-Identifier: Apache-2.0
// RoCEv2 wire format (IBTA vol. 1 ch. 9, Annex A17; reference/rocev2.md §1): the Base Transport
// Header, the extension headers an opcode carries, and a parser that validates a UDP/4791
// payload (BTH .. ICRC) without reading past it. Pure code, inline for the packet path: parsing
// reads bytes, building writes bytes; neither allocates nor throws. Multi-byte fields are big-
// endian on the wire except the ICRC, which is sent least-significant byte first (icrc.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ina::roce {

inline constexpr uint16_t kUdpPort = 4791;
inline constexpr uint16_t kDefaultPkey = 0xFFFF;

inline constexpr size_t kBthBytes = 12;
inline constexpr size_t kRethBytes = 16;
inline constexpr size_t kAethBytes = 4;
inline constexpr size_t kImmBytes = 4;
inline constexpr size_t kDethBytes = 8;
inline constexpr size_t kAtomicEthBytes = 28;
inline constexpr size_t kAtomicAckEthBytes = 8;
inline constexpr size_t kIethBytes = 4;
inline constexpr size_t kCnpPadBytes = 16;
inline constexpr size_t kIcrcBytes = 4;

// Opcodes (transport << 5 | operation): RC 0x00, UC 0x20, UD 0x60; CNP 0x81.
namespace op {
inline constexpr uint8_t kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02,
                         kSendLastImm = 0x03, kSendOnly = 0x04, kSendOnlyImm = 0x05,
                         kWriteFirst = 0x06, kWriteMiddle = 0x07, kWriteLast = 0x08,
                         kWriteLastImm = 0x09, kWriteOnly = 0x0A, kWriteOnlyImm = 0x0B,
                         kReadRequest = 0x0C, kReadRespFirst = 0x0D, kReadRespMiddle = 0x0E,
                         kReadRespLast = 0x0F, kReadRespOnly = 0x10, kAcknowledge = 0x11,
                         kAtomicAck = 0x12, kCompareSwap = 0x13, kFetchAdd = 0x14,
                         kSendLastInv = 0x16, kSendOnlyInv = 0x17;
inline constexpr uint8_t kUc = 0x20;
inline constexpr uint8_t kUdSendOnly = 0x64, kUdSendOnlyImm = 0x65;
inline constexpr uint8_t kCnp = 0x81;
}  // namespace op

// Extension headers after the BTH, in wire order.
namespace ext {
inline constexpr uint8_t kDeth = 0x01;       // UD
inline constexpr uint8_t kReth = 0x02;
inline constexpr uint8_t kAtomicEth = 0x04;
inline constexpr uint8_t kAeth = 0x08;
inline constexpr uint8_t kAtomicAckEth = 0x10;
inline constexpr uint8_t kImm = 0x20;
inline constexpr uint8_t kIeth = 0x40;
inline constexpr uint8_t kCnpPad = 0x80;     // CNP: 16 reserved bytes
}  // namespace ext

enum class Position : uint8_t { none, first, middle, last, only };

// What an opcode carries. `known` false: an opcode this codec does not decode.
struct OpcodeInfo {
    bool known = false;
    uint8_t ext = 0;            // ext:: bits
    bool payload = false;       // may carry payload bytes
    Position position = Position::none;  // place in a multi-packet message (SEND/WRITE/READ resp)
};

// By cases; opcode_info below is its table.
constexpr OpcodeInfo decode_opcode(uint8_t code) {
    using P = Position;
    if (code == op::kCnp) {
        return {true, ext::kCnpPad, false, P::none};
    }
    if (code == op::kUdSendOnly) {
        return {true, ext::kDeth, true, P::only};
    }
    if (code == op::kUdSendOnlyImm) {
        return {true, ext::kDeth | ext::kImm, true, P::only};
    }
    const uint8_t transport = code & 0xE0;
    const uint8_t o = code & 0x1F;
    if (transport != 0x00 && transport != op::kUc) {
        return {};
    }
    const bool rc = transport == 0x00;
    switch (o) {
    case op::kSendFirst: return {true, 0, true, P::first};
    case op::kSendMiddle: return {true, 0, true, P::middle};
    case op::kSendLast: return {true, 0, true, P::last};
    case op::kSendLastImm: return {true, ext::kImm, true, P::last};
    case op::kSendOnly: return {true, 0, true, P::only};
    case op::kSendOnlyImm: return {true, ext::kImm, true, P::only};
    case op::kWriteFirst: return {true, ext::kReth, true, P::first};
    case op::kWriteMiddle: return {true, 0, true, P::middle};
    case op::kWriteLast: return {true, 0, true, P::last};
    case op::kWriteLastImm: return {true, ext::kImm, true, P::last};
    case op::kWriteOnly: return {true, ext::kReth, true, P::only};
    case op::kWriteOnlyImm: return {true, ext::kReth | ext::kImm, true, P::only};
    default: break;
    }
    if (!rc) {
        return {};  // UC has SEND and WRITE only
    }
    switch (o) {
    case op::kReadRequest: return {true, ext::kReth, false, P::none};
    case op::kReadRespFirst: return {true, ext::kAeth, true, P::first};
    case op::kReadRespMiddle: return {true, 0, true, P::middle};
    case op::kReadRespLast: return {true, ext::kAeth, true, P::last};
    case op::kReadRespOnly: return {true, ext::kAeth, true, P::only};
    case op::kAcknowledge: return {true, ext::kAeth, false, P::none};
    case op::kAtomicAck: return {true, ext::kAeth | ext::kAtomicAckEth, false, P::none};
    case op::kCompareSwap:
    case op::kFetchAdd: return {true, ext::kAtomicEth, false, P::none};
    case op::kSendLastInv: return {true, ext::kIeth, true, P::last};
    case op::kSendOnlyInv: return {true, ext::kIeth, true, P::only};
    default: return {};
    }
}

constexpr size_t sum_ext_bytes(uint8_t e) {
    return ((e & ext::kDeth) ? kDethBytes : 0) + ((e & ext::kReth) ? kRethBytes : 0) +
           ((e & ext::kAtomicEth) ? kAtomicEthBytes : 0) + ((e & ext::kAeth) ? kAethBytes : 0) +
           ((e & ext::kAtomicAckEth) ? kAtomicAckEthBytes : 0) + ((e & ext::kImm) ? kImmBytes : 0) +
           ((e & ext::kIeth) ? kIethBytes : 0) + ((e & ext::kCnpPad) ? kCnpPadBytes : 0);
}

// Both as tables the compiler fills: one load per packet where the cases cost a dozen branches
// (every packet the switch terminates is parsed).
inline constexpr std::array<OpcodeInfo, 256> kOpcodeInfo = [] {
    std::array<OpcodeInfo, 256> t{};
    for (unsigned c = 0; c < t.size(); ++c) {
        t[c] = decode_opcode(static_cast<uint8_t>(c));
    }
    return t;
}();
inline constexpr std::array<uint8_t, 256> kExtBytes = [] {
    std::array<uint8_t, 256> t{};
    for (unsigned e = 0; e < t.size(); ++e) {
        t[e] = static_cast<uint8_t>(sum_ext_bytes(static_cast<uint8_t>(e)));
    }
    return t;
}();
constexpr OpcodeInfo opcode_info(uint8_t code) { return kOpcodeInfo[code]; }
constexpr size_t ext_bytes(uint8_t e) { return kExtBytes[e]; }

// AETH syndromes (bits 6:5 the kind, 4:0 the value; bit 7 reserved 0).
namespace aeth {
inline constexpr uint8_t kAckUnlimited = 0x1F;  // ACK, credit field "invalid": no credit limit
inline constexpr uint8_t kRnrNak = 0x20;        // | timer code
inline constexpr uint8_t kNakPsnSequence = 0x60;
inline constexpr uint8_t kNakInvalidRequest = 0x61;
inline constexpr uint8_t kNakRemoteAccess = 0x62;
inline constexpr uint8_t kNakRemoteOperational = 0x63;
enum class Kind : uint8_t { ack, rnr_nak, reserved, nak };
constexpr Kind kind(uint8_t syndrome) { return static_cast<Kind>((syndrome >> 5) & 3); }
}  // namespace aeth

// PSNs are 24-bit serial numbers: the signed distance a - b in (-2^23, 2^23].
constexpr int32_t psn_diff(uint32_t a, uint32_t b) {
    return static_cast<int32_t>((a - b) << 8) >> 8;
}
constexpr uint32_t psn_add(uint32_t a, uint32_t n) { return (a + n) & 0xFFFFFF; }

struct Bth {
    uint8_t opcode = 0;
    bool solicited = false;  // SE
    bool mig_req = false;    // M
    uint8_t pad = 0;         // PadCnt: 0..3 bytes of zero padding before the ICRC
    uint8_t tver = 0;        // transport header version: 0
    uint16_t pkey = kDefaultPkey;
    bool fecn = false;
    bool becn = false;
    uint32_t dest_qp = 0;    // 24 bits
    bool ack_req = false;    // A
    uint32_t psn = 0;        // 24 bits
};

struct Reth {
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t dma_len = 0;
};

struct Aeth {
    uint8_t syndrome = aeth::kAckUnlimited;
    uint32_t msn = 0;  // 24 bits
};

struct Deth {
    uint32_t qkey = 0;
    uint32_t src_qp = 0;  // 24 bits
};

// Why bytes on UDP/4791 are not a well-formed RoCEv2 packet. Each is a counter reason.
enum class ParseError : uint8_t {
    truncated,       // shorter than BTH + its extension headers + ICRC
    bad_tver,        // transport version not 0
    unknown_opcode,  // an opcode this codec does not decode
    bad_pad,         // more pad bytes (PadCnt) than bytes between the headers and the ICRC
    bad_length,      // bytes between the headers and the ICRC on an opcode without payload
    count
};
constexpr std::string_view to_string(ParseError e) {
    constexpr std::string_view names[] = {"truncated", "bad_tver", "unknown_opcode", "bad_pad",
                                          "bad_length"};
    return names[static_cast<size_t>(e)];
}

struct Packet {
    Bth bth;
    OpcodeInfo info;
    Reth reth;           // valid if info.ext & ext::kReth
    Aeth aeth;           // ext::kAeth
    Deth deth;           // ext::kDeth
    uint32_t imm = 0;    // ext::kImm (as on the wire, network order)
    uint32_t ieth = 0;   // ext::kIeth
    uint16_t header_bytes = 0;   // BTH + extension headers
    uint32_t payload_bytes = 0;  // without pad and ICRC
    uint32_t icrc = 0;           // as received (the CRC value, read least-significant byte first)
};

struct ParseResult {
    std::optional<Packet> packet;
    ParseError error = ParseError::truncated;
};

namespace detail {
inline uint16_t be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t be24(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) << 16 | static_cast<uint32_t>(p[1]) << 8 | p[2];
}
inline uint32_t be32(const uint8_t* p) {
    return static_cast<uint32_t>(p[0]) << 24 | be24(p + 1);
}
inline uint64_t be64(const uint8_t* p) {
    return static_cast<uint64_t>(be32(p)) << 32 | be32(p + 4);
}
inline void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}
inline void put24(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 16);
    p[1] = static_cast<uint8_t>(v >> 8);
    p[2] = static_cast<uint8_t>(v);
}
inline void put32(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24);
    put24(p + 1, v);
}
inline void put64(uint8_t* p, uint64_t v) {
    put32(p, static_cast<uint32_t>(v >> 32));
    put32(p + 4, static_cast<uint32_t>(v));
}
}  // namespace detail

// Fills `b` in place from the BTH at `p` (no Bth built on the stack and copied: parse_into).
inline void read_bth_into(const uint8_t* p, Bth& b) {
    b.opcode = p[0];
    b.solicited = (p[1] & 0x80) != 0;
    b.mig_req = (p[1] & 0x40) != 0;
    b.pad = static_cast<uint8_t>((p[1] >> 4) & 3);
    b.tver = p[1] & 0x0F;
    b.pkey = detail::be16(p + 2);
    b.fecn = (p[4] & 0x80) != 0;
    b.becn = (p[4] & 0x40) != 0;
    b.dest_qp = detail::be24(p + 5);
    b.ack_req = (p[8] & 0x80) != 0;
    b.psn = detail::be24(p + 9);
}

inline Bth read_bth(const uint8_t* p) {
    Bth b;
    read_bth_into(p, b);
    return b;
}

inline void write_bth(uint8_t* p, const Bth& b) {
    p[0] = b.opcode;
    p[1] = static_cast<uint8_t>((b.solicited ? 0x80 : 0) | (b.mig_req ? 0x40 : 0) |
                                (b.pad & 3) << 4 | (b.tver & 0x0F));
    detail::put16(p + 2, b.pkey);
    p[4] = static_cast<uint8_t>((b.fecn ? 0x80 : 0) | (b.becn ? 0x40 : 0));
    detail::put24(p + 5, b.dest_qp);
    p[8] = b.ack_req ? 0x80 : 0;
    detail::put24(p + 9, b.psn);
}

inline void write_reth(uint8_t* p, const Reth& r) {
    detail::put64(p, r.va);
    detail::put32(p + 8, r.rkey);
    detail::put32(p + 12, r.dma_len);
}

inline void write_aeth(uint8_t* p, const Aeth& a) {
    p[0] = a.syndrome;
    detail::put24(p + 1, a.msn);
}

// Parses the UDP payload of a RoCEv2 datagram: `p` at the BTH, `len` bytes through the ICRC
// (the UDP length less 8), into `k`; false with `error` when it is not one (k then holds
// anything). Reads nothing beyond p[len - 1]. The packet path's form: the fields land where the
// caller reads them, never assembled on the stack and copied (a store-forwarding stall per
// packet, as INA's parse had: bench/notes.md).
inline bool parse_into(const uint8_t* p, size_t len, Packet& k, ParseError& error) {
    const auto fail = [&error](ParseError e) {
        error = e;
        return false;
    };
    if (len < kBthBytes + kIcrcBytes) {
        return fail(ParseError::truncated);
    }
    // Field by field into the caller's packet (a `k = Packet{}` or a Bth returned by value is
    // a stack temporary read back in wide loads: a store-forwarding stall per packet).
    read_bth_into(p, k.bth);
    if (k.bth.tver != 0) {
        return fail(ParseError::bad_tver);
    }
    k.info = opcode_info(k.bth.opcode);
    if (!k.info.known) {
        return fail(ParseError::unknown_opcode);
    }
    const size_t hdr = kBthBytes + ext_bytes(k.info.ext);
    if (len < hdr + kIcrcBytes) {
        return fail(ParseError::truncated);
    }
    const size_t rest = len - hdr - kIcrcBytes;  // payload + pad
    if (k.bth.pad > rest) {
        return fail(ParseError::bad_pad);
    }
    if (!k.info.payload && rest != 0) {
        return fail(ParseError::bad_length);
    }
    const uint8_t* e = p + kBthBytes;
    // Extension headers the opcode lacks keep their defaults (as in a fresh Packet).
    k.deth.qkey = 0;
    k.deth.src_qp = 0;
    if (k.info.ext & ext::kDeth) {
        k.deth.qkey = detail::be32(e);
        k.deth.src_qp = detail::be24(e + 5);
        e += kDethBytes;
    }
    k.reth.va = 0;
    k.reth.rkey = 0;
    k.reth.dma_len = 0;
    if (k.info.ext & ext::kReth) {
        k.reth.va = detail::be64(e);
        k.reth.rkey = detail::be32(e + 8);
        k.reth.dma_len = detail::be32(e + 12);
        e += kRethBytes;
    }
    if (k.info.ext & ext::kAtomicEth) {
        e += kAtomicEthBytes;
    }
    k.aeth.syndrome = aeth::kAckUnlimited;
    k.aeth.msn = 0;
    if (k.info.ext & ext::kAeth) {
        k.aeth.syndrome = e[0];
        k.aeth.msn = detail::be24(e + 1);
        e += kAethBytes;
    }
    if (k.info.ext & ext::kAtomicAckEth) {
        e += kAtomicAckEthBytes;
    }
    k.imm = 0;
    if (k.info.ext & ext::kImm) {
        k.imm = detail::be32(e);
        e += kImmBytes;
    }
    k.ieth = 0;
    if (k.info.ext & ext::kIeth) {
        k.ieth = detail::be32(e);
    }
    k.header_bytes = static_cast<uint16_t>(hdr);
    k.payload_bytes = static_cast<uint32_t>(rest - k.bth.pad);
    const uint8_t* c = p + len - kIcrcBytes;
    k.icrc = static_cast<uint32_t>(c[0]) | static_cast<uint32_t>(c[1]) << 8 |
             static_cast<uint32_t>(c[2]) << 16 | static_cast<uint32_t>(c[3]) << 24;
    error = ParseError::count;
    return true;
}

// The same as a value: the packet, or the reason it is none.
inline ParseResult parse(const uint8_t* p, size_t len) {
    Packet k;
    ParseError error = ParseError::count;
    if (!parse_into(p, len, k, error)) {
        return ParseResult{std::nullopt, error};
    }
    return ParseResult{k, error};
}

}  // namespace ina::roce
