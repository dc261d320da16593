// SPDX-License-Identifier: Apache-2.0
#include "roce/icrc.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "roce/crc32.h"
#include "roce/wire.h"

namespace ina::roce {

namespace {

constexpr size_t kUdpBytes = 8;
constexpr size_t kMaxMasked = 8 + 60 + kUdpBytes + kBthBytes;

// Where a RoCEv2 packet's headers end: the IP, UDP and BTH headers' length (0: not a RoCEv2
// header), with the IP version, the IP header's length and the packet's length from its IP
// header. `avail` bytes are readable at l3.
size_t header_shape(const uint8_t* l3, size_t avail, uint8_t& version, size_t& ip_len,
                    size_t& total) {
    if (avail < 1) {
        return 0;
    }
    version = l3[0] >> 4;
    if (version == 4) {
        ip_len = (l3[0] & 0x0F) * 4u;
        if (ip_len < 20 || avail < ip_len) {
            return 0;
        }
        total = static_cast<size_t>(l3[2]) << 8 | l3[3];
    } else if (version == 6) {
        ip_len = 40;
        if (avail < ip_len) {
            return 0;
        }
        total = ip_len + (static_cast<size_t>(l3[4]) << 8 | l3[5]);
    } else {
        return 0;
    }
    const size_t n = ip_len + kUdpBytes + kBthBytes;
    return avail < n || total < n + kIcrcBytes ? 0 : n;
}

// Sets the variant fields of the headers at h to ones. Every byte it changes lies in the IP
// header's first 12, the UDP checksum or the BTH's byte 4.
constexpr void mask_variant_fields(uint8_t* h, uint8_t version, size_t ip_len) {
    if (version == 4) {
        h[1] = 0xFF;                 // TOS (DSCP, ECN)
        h[8] = 0xFF;                 // TTL
        h[10] = h[11] = 0xFF;        // header checksum
    } else {
        h[0] |= 0x0F;                // traffic class (high half) ...
        h[1] = h[2] = h[3] = 0xFF;   // ... and flow label
        h[7] = 0xFF;                 // hop limit
    }
    h[ip_len + 6] = h[ip_len + 7] = 0xFF;  // UDP checksum
    h[ip_len + kUdpBytes + 4] = 0xFF;      // BTH FECN, BECN, reserved
}

// What the ICRC sees as ones in the 8 bytes before the IP header and the 56 after it (8 bytes
// of ones; IPv4 without options or IPv6, its UDP and BTH), for crc32_update_masked.
constexpr size_t kMaskBytes = 64;
constexpr std::array<uint8_t, kMaskBytes> make_mask(uint8_t version, size_t ip_len) {
    std::array<uint8_t, kMaskBytes> m{};
    for (size_t i = 0; i < 8; ++i) {
        m[i] = 0xFF;
    }
    mask_variant_fields(m.data() + 8, version, ip_len);
    return m;
}
alignas(64) constexpr std::array<uint8_t, kMaskBytes> kMask4 = make_mask(4, 20);
alignas(64) constexpr std::array<uint8_t, kMaskBytes> kMask6 = make_mask(6, 40);
static_assert(8 + 40 + kUdpBytes + 4 < kMaskBytes, "IPv6's BTH byte 4 lies in the mask");

// Copies the IP, UDP and BTH headers at `l3` into `out` behind 8 bytes of 0xFF with the variant
// fields masked; returns the bytes written (0: not a RoCEv2 header). `avail` bytes are readable
// at l3. Also returns the packet's length from its IP header in `total`.
size_t masked_headers(const uint8_t* l3, size_t avail, uint8_t* out, size_t& total) {
    uint8_t version = 0;
    size_t ip_len = 0;
    const size_t n = header_shape(l3, avail, version, ip_len, total);
    if (n == 0) {
        return 0;
    }
    std::memset(out, 0xFF, 8);
    std::memcpy(out + 8, l3, n);
    mask_variant_fields(out + 8, version, ip_len);
    return 8 + n;
}

// The CRC of the masked headers (or of any prefix) continued over the bytes that follow, where
// they lie: one pass, no copy of the payload, no join.
uint32_t crc_of(const uint8_t* p, size_t len) { return crc32_update(0, p, len); }

}  // namespace

uint32_t icrc(const uint8_t* l3, size_t len) {
    uint8_t masked[kMaxMasked];
    size_t total = 0;
    const size_t m = masked_headers(l3, len, masked, total);
    if (m == 0 || total > len) {
        return 0;
    }
    const size_t covered_headers = m - 8;
    return crc32_update(crc_of(masked, m), l3 + covered_headers,
                        total - covered_headers - kIcrcBytes);
}

namespace {
// One CRC pass over the 8 bytes before l3 and the packet's first `covered` bytes, those
// 8 bytes set to ones and the variant fields masked in place for the pass and put back.
// `covered` lies within the packet; the headers' shape was checked (header_shape).
uint32_t masked_pass(uint8_t* l3, uint8_t version, size_t ip_len, size_t covered) {
    if ((version == 6 || ip_len == 20) && 8 + covered >= kMaskBytes) {
        // Every masked byte lies in the first 64 (IPv4 without options, IPv6): masked as the
        // CRC loads them, nothing written.
        return crc32_update_masked(0, l3 - 8, 8 + covered,
                                   version == 4 ? kMask4.data() : kMask6.data());
    }
    // Everything mask_variant_fields changes, and the 8 bytes before l3, kept and put back.
    uint8_t before[8];
    uint8_t ip_head[12];
    uint8_t udp_sum[2];
    std::memcpy(before, l3 - 8, 8);
    std::memcpy(ip_head, l3, 12);
    std::memcpy(udp_sum, l3 + ip_len + 6, 2);
    const uint8_t bth4 = l3[ip_len + kUdpBytes + 4];
    std::memset(l3 - 8, 0xFF, 8);
    mask_variant_fields(l3, version, ip_len);
    const uint32_t crc = crc_of(l3 - 8, 8 + covered);
    std::memcpy(l3 - 8, before, 8);
    std::memcpy(l3, ip_head, 12);
    std::memcpy(l3 + ip_len + 6, udp_sum, 2);
    l3[ip_len + kUdpBytes + 4] = bth4;
    return crc;
}
}  // namespace

uint32_t icrc_in_frame(uint8_t* l3, size_t len) {
    uint8_t version = 0;
    size_t ip_len = 0;
    size_t total = 0;
    const size_t n = header_shape(l3, len, version, ip_len, total);
    if (n == 0 || total > len) {
        return 0;
    }
    return masked_pass(l3, version, ip_len, total - kIcrcBytes);
}

uint32_t icrc_headers_in_frame(uint8_t* l3, size_t header_bytes) {
    uint8_t version = 0;
    size_t ip_len = 0;
    size_t total = 0;
    const size_t n = header_shape(l3, header_bytes, version, ip_len, total);
    if (n == 0 || header_bytes + kIcrcBytes > total) {
        return 0;
    }
    return masked_pass(l3, version, ip_len, header_bytes);
}

uint32_t icrc_payload(const uint8_t* payload, size_t len) { return crc_of(payload, len); }

IcrcJoin::IcrcJoin(uint32_t payload_bytes) : payload_bytes_(payload_bytes) {
    // zlib's operator for |B| = payload_bytes; advancing a CRC c is crc32_combine_op(c, 0, op),
    // linear in c: its value on each of the 32 bits, then every byte value of each byte
    // position as the xor of its bits' values.
    const uLong op = crc32_combine_gen(static_cast<z_off_t>(payload_bytes));
    std::array<uint32_t, 32> bit{};
    for (size_t i = 0; i < bit.size(); ++i) {
        bit[i] = static_cast<uint32_t>(crc32_combine_op(uLong{1} << i, 0, op));
    }
    for (size_t k = 0; k < shift_.size(); ++k) {
        for (uint32_t b = 1; b < 256; ++b) {
            // b without its lowest bit was filled before b.
            shift_[k][b] = shift_[k][b & (b - 1)] ^ bit[8 * k + static_cast<size_t>(__builtin_ctz(b))];
        }
    }
}

uint32_t icrc_writable(rte_mbuf* mb, uint32_t l3_off) {
    if (RTE_MBUF_DIRECT(mb) && rte_mbuf_refcnt_read(mb) == 1 && mb->next == nullptr &&
        l3_off >= 8 && l3_off < rte_pktmbuf_data_len(mb)) {
        return icrc_in_frame(rte_pktmbuf_mtod_offset(mb, uint8_t*, l3_off),
                             rte_pktmbuf_data_len(mb) - l3_off);
    }
    return icrc(static_cast<const rte_mbuf*>(mb), l3_off);
}

bool icrc_masked_span(rte_mbuf* mb, uint32_t l3_off, IcrcSpan& span) {
    if (!RTE_MBUF_DIRECT(mb) || rte_mbuf_refcnt_read(mb) != 1 || mb->next != nullptr ||
        l3_off < 8 || l3_off >= rte_pktmbuf_data_len(mb)) {
        return false;
    }
    uint8_t* l3 = rte_pktmbuf_mtod_offset(mb, uint8_t*, l3_off);
    uint8_t version = 0;
    size_t ip_len = 0;
    size_t total = 0;
    const size_t len = rte_pktmbuf_data_len(mb) - l3_off;
    if (header_shape(l3, len, version, ip_len, total) == 0 || total > len ||
        !(version == 6 || ip_len == 20) || 8 + total - kIcrcBytes < kMaskBytes) {
        return false;
    }
    // masked_pass's first branch, as icrc_writable takes it.
    span.start = l3 - 8;
    span.len = 8 + total - kIcrcBytes;
    span.mask = version == 4 ? kMask4.data() : kMask6.data();
    return true;
}

uint32_t icrc(const rte_mbuf* mb, uint32_t l3_off) {
    if (l3_off >= rte_pktmbuf_pkt_len(mb)) {
        return 0;
    }
    uint8_t head[kMaxMasked - 8];
    const uint32_t avail =
        std::min<uint32_t>(static_cast<uint32_t>(sizeof head), rte_pktmbuf_pkt_len(mb) - l3_off);
    const auto* h = static_cast<const uint8_t*>(rte_pktmbuf_read(mb, l3_off, avail, head));
    uint8_t masked[kMaxMasked];
    size_t total = 0;
    const size_t m = h != nullptr ? masked_headers(h, avail, masked, total) : 0;
    if (m == 0 || l3_off + total > rte_pktmbuf_pkt_len(mb)) {
        return 0;
    }
    uint32_t crc = crc_of(masked, m);
    // The rest, in place, segment by segment.
    uint32_t off = l3_off + static_cast<uint32_t>(m - 8);
    uint32_t left = static_cast<uint32_t>(total - (m - 8) - kIcrcBytes);
    for (const rte_mbuf* s = mb; s != nullptr && left != 0; s = s->next) {
        const uint32_t seg = rte_pktmbuf_data_len(s);
        if (off >= seg) {
            off -= seg;
            continue;
        }
        const uint32_t take = std::min(seg - off, left);
        crc = crc32_update(crc, rte_pktmbuf_mtod_offset(s, const uint8_t*, off), take);
        left -= take;
        off = 0;
    }
    return crc;
}

}  // namespace ina::roce
