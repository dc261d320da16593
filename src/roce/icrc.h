// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 Invariant CRC (IBTA Annex A17; reference/rocev2.md §2): the Ethernet CRC-32 (not
// CRC-32C) over 8 bytes of 0xFF, the IP header with its variant fields masked to ones (IPv4 TOS,
// TTL, header checksum; IPv6 traffic class, flow label, hop limit), the UDP header with its
// checksum masked, the BTH with byte 4 (FECN, BECN, reserved) masked, then everything up to the
// ICRC unmasked. Sent least-significant byte first. Because every field a router or an ECN
// marker changes is masked, forwarding (TTL, DSCP/ECN) never invalidates it; any change to
// addresses, ports, lengths, QPN, PSN, AETH or payload needs it recomputed.
//
// The masked headers (at most 8 + 60 + 8 + 12 bytes) are summed from a stack copy (or masked in
// place), and that CRC is continued over the rest where it lies (crc32.h: our own
// carry-less-multiply CRC-32, which starts from any CRC): nothing is copied but the headers,
// nothing is joined, and chained mbufs are continued segment by segment.
#pragma once

#include <rte_mbuf.h>

#include <array>
#include <cstddef>
#include <cstdint>

namespace ina::roce {

// The ICRC of a RoCEv2 packet whose IP header (IPv4 or IPv6, told by its version nibble) starts
// at `l3` and which runs contiguously for `len` bytes: through the end of the UDP datagram,
// ICRC included (the ICRC's own 4 bytes are not covered). 0 if the bytes cannot be a RoCEv2
// packet (too short for IP + UDP + BTH + ICRC, or an IPv4 IHL below 5).
uint32_t icrc(const uint8_t* l3, size_t len);

// The same over an mbuf (chained or not) whose IP header is at byte `l3_off`; the packet's
// length comes from its IP header (Ethernet padding after it is not covered). 0 as above, or
// if the frame is shorter than the IP header says.
uint32_t icrc(const rte_mbuf* m, uint32_t l3_off);


// The same again in one pass over the 8 bytes before `l3` and the packet: those 8 bytes and the
// variant header fields are seen as ones, masked in registers as the CRC loads them (IPv4
// without options or IPv6, 64 bytes or more) or else set to ones in place for the pass and put
// back before it returns (no header copy, no second pass). So the 8 bytes before l3 must be
// writable too (in a frame: the Ethernet header's), and no one else may read the bytes
// meanwhile (the packet path's own mbufs, a frame being built).
uint32_t icrc_in_frame(uint8_t* l3, size_t len);

// icrc(m, l3_off) for an mbuf the caller owns: icrc_in_frame when it is direct, not shared
// (refcnt 1), one segment and has 8 bytes before l3; otherwise the const path above.
uint32_t icrc_writable(rte_mbuf* m, uint32_t l3_off);

// The bytes and the 64-byte mask of icrc_writable's one masked-load pass over m, when it takes
// that path (direct, unshared, one segment, 8 bytes before l3, IPv4 without options or IPv6, a
// sound RoCEv2 header): then icrc_writable(m, l3_off) ==
// crc32_update_masked(0, span.start, span.len, span.mask), which a caller may compute in a
// fused pass (crc32_masked_with_add). False (span untouched) otherwise.
struct IcrcSpan {
    const uint8_t* start = nullptr;
    size_t len = 0;
    const uint8_t* mask = nullptr;
};
bool icrc_masked_span(rte_mbuf* m, uint32_t l3_off, IcrcSpan& span);

// The CRC of the 8 bytes of ones and the first `header_bytes` of the packet at `l3` (IP, UDP,
// BTH and its extension headers) with the variant fields masked, as icrc_in_frame (the same
// provisos): the ICRC's first part, for IcrcJoin. 0 if they cannot be RoCEv2 headers.
uint32_t icrc_headers_in_frame(uint8_t* l3, size_t header_bytes);

// The CRC of `len` payload bytes (pad included): the ICRC's second part, for IcrcJoin.
uint32_t icrc_payload(const uint8_t* payload, size_t len);

// The ICRC of a packet from its two parts, so that one payload's CRC serves every packet that
// carries it behind other headers (a result WRITE to each rank): the CRC of A then B is the CRC
// of A advanced over |B| zero bytes, xor the CRC of B (zlib's crc32_combine), and advancing by
// a fixed |B| is linear in the CRC, so four 256-entry tables (4 KiB) make it four loads.
// Built for one payload length (zlib's operator, a few thousand operations: not per packet).
class IcrcJoin {
public:
    explicit IcrcJoin(uint32_t payload_bytes);
    uint32_t payload_bytes() const { return payload_bytes_; }
    // The ICRC of headers_crc's headers (icrc_headers_in_frame) followed by payload_bytes() of
    // payload whose CRC is payload_crc (icrc_payload).
    uint32_t join(uint32_t headers_crc, uint32_t payload_crc) const {
        return shift_[0][headers_crc & 0xFF] ^ shift_[1][(headers_crc >> 8) & 0xFF] ^
               shift_[2][(headers_crc >> 16) & 0xFF] ^ shift_[3][headers_crc >> 24] ^ payload_crc;
    }

private:
    uint32_t payload_bytes_;
    std::array<std::array<uint32_t, 256>, 4> shift_{};
};

// The ICRC as the packet carries it: the 4 bytes before `end`, least-significant byte first.
inline uint32_t read_icrc(const uint8_t* end) {
    return static_cast<uint32_t>(end[-4]) | static_cast<uint32_t>(end[-3]) << 8 |
           static_cast<uint32_t>(end[-2]) << 16 | static_cast<uint32_t>(end[-1]) << 24;
}
inline void write_icrc(uint8_t* end, uint32_t crc) {
    end[-4] = static_cast<uint8_t>(crc);
    end[-3] = static_cast<uint8_t>(crc >> 8);
    end[-2] = static_cast<uint8_t>(crc >> 16);
    end[-1] = static_cast<uint8_t>(crc >> 24);
}

}  // namespace ina::roce
