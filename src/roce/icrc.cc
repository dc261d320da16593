// SPDX-License-Identifier: Apache-2.0
// rte_vect_{get,set}_max_simd_bitwidth are experimental in DPDK 22.11, and its rte_vect.h
// declares them without C linkage for C++: it is included first, inside extern "C".
#define ALLOW_EXPERIMENTAL_API 1
extern "C" {
#include <rte_vect.h>
}
#include "roce/icrc.h"

#include <rte_cpuflags.h>
#include <rte_net_crc.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>

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
void mask_variant_fields(uint8_t* h, uint8_t version, size_t ip_len) {
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

// Below this many bytes, continuing zlib's CRC over the data costs less than rte_net_crc plus
// crc32_combine (whose fixed cost is about a hundred nanoseconds): ACKs, NAKs and CNPs carry
// 4 to 16 bytes after the BTH.
constexpr size_t kCombineThreshold = 128;

// CRC-32 of b appended to a with CRC crc_a: zlib joins two CRCs in O(log len) without the data.
uint32_t append(uint32_t crc_a, const uint8_t* b, size_t len) {
    if (len < kCombineThreshold) {
        return static_cast<uint32_t>(crc32(crc_a, b, static_cast<uInt>(len)));
    }
    const uint32_t crc_b = rte_net_crc_calc(b, static_cast<uint32_t>(len), RTE_NET_CRC32_ETH);
    return static_cast<uint32_t>(crc32_combine(crc_a, crc_b, static_cast<z_off_t>(len)));
}

uint32_t crc_of(const uint8_t* p, size_t len) {
    return static_cast<uint32_t>(crc32(0, p, static_cast<uInt>(len)));
}

// The reflected CRC-32's byte table (polynomial 0xEDB88320: one byte in is
// reg = reg >> 8 ^ table[(reg ^ byte) & 0xFF]) and, for running it backwards, the index of
// each top byte (the tables' top bytes are a permutation of 0..255).
struct CrcTables {
    std::array<uint32_t, 256> table{};
    std::array<uint8_t, 256> index_of_top{};
};
constexpr CrcTables make_tables() {
    CrcTables t;
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t r = i;
        for (int k = 0; k < 8; ++k) {
            r = (r & 1) != 0 ? (r >> 1) ^ 0xEDB88320u : r >> 1;
        }
        t.table[i] = r;
        t.index_of_top[r >> 24] = static_cast<uint8_t>(i);
    }
    return t;
}
constexpr CrcTables kTables = make_tables();

// The 4 bytes that take the CRC register from its start (all ones) to `reg`: the register runs
// back over 4 zero bytes to `start ^ bytes`.
void forge(uint32_t reg, uint8_t out[4]) {
    for (int k = 0; k < 4; ++k) {
        const uint8_t i = kTables.index_of_top[reg >> 24];
        reg = (reg ^ kTables.table[i]) << 8 | i;
    }
    const uint32_t bytes = ~reg;
    out[0] = static_cast<uint8_t>(bytes);
    out[1] = static_cast<uint8_t>(bytes >> 8);
    out[2] = static_cast<uint8_t>(bytes >> 16);
    out[3] = static_cast<uint8_t>(bytes >> 24);
}

}  // namespace

void icrc_init() {
    // rte_net_crc falls back by itself: AVX-512 VPCLMULQDQ, else SSE4.2 PCLMULQDQ, else a table,
    // each only if the CPU has it and EAL allows that SIMD width. EAL's default cap is 256 bits,
    // which leaves the CRC on its SSE path: 3-4x slower per KiB on an AVX-512 CPU (bench/
    // icrc_bench). rte_net_crc picks its handler once, here, so the cap is raised for this
    // choice alone and put back: every other DPDK library keeps the width EAL chose. A cap the
    // user forced (--force-max-simd-bitwidth) cannot be changed and is kept.
    const uint16_t cap = rte_vect_get_max_simd_bitwidth();
    const bool raise = cap < RTE_VECT_SIMD_512 && rte_cpu_get_flag_enabled(RTE_CPUFLAG_AVX512F) > 0 &&
                       rte_cpu_get_flag_enabled(RTE_CPUFLAG_VPCLMULQDQ) > 0 &&
                       rte_vect_set_max_simd_bitwidth(RTE_VECT_SIMD_512) == 0;
    rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
    if (raise) {
        rte_vect_set_max_simd_bitwidth(cap);
    }
}

uint32_t icrc(const uint8_t* l3, size_t len) {
    uint8_t masked[kMaxMasked];
    size_t total = 0;
    const size_t m = masked_headers(l3, len, masked, total);
    if (m == 0 || total > len) {
        return 0;
    }
    const size_t covered_headers = m - 8;
    return append(crc_of(masked, m), l3 + covered_headers, total - covered_headers - kIcrcBytes);
}

uint32_t icrc_in_place(uint8_t* l3, size_t len) {
    uint8_t masked[kMaxMasked];
    size_t total = 0;
    const size_t m = masked_headers(l3, len, masked, total);
    if (m == 0 || total > len) {
        return 0;
    }
    // The register after the masked headers; then one pass over the rest, started from that
    // register by the 4 bytes before the rest (the BTH's last 4) forged to reach it.
    const uint32_t reg = ~rte_net_crc_calc(masked, static_cast<uint32_t>(m), RTE_NET_CRC32_ETH);
    uint8_t* seam = l3 + (m - 8) - 4;
    uint8_t kept[4];
    std::memcpy(kept, seam, 4);
    forge(reg, seam);
    const uint32_t crc = rte_net_crc_calc(
        seam, static_cast<uint32_t>(total - (m - 8) - kIcrcBytes + 4), RTE_NET_CRC32_ETH);
    std::memcpy(seam, kept, 4);
    return crc;
}

namespace {
// One rte_net_crc pass over the 8 bytes before l3 and the packet's first `covered` bytes, those
// 8 bytes set to ones and the variant fields masked in place for the pass and put back.
// `covered` lies within the packet; the headers' shape was checked (header_shape).
uint32_t masked_pass(uint8_t* l3, uint8_t version, size_t ip_len, size_t covered) {
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
    const uint32_t crc =
        rte_net_crc_calc(l3 - 8, static_cast<uint32_t>(8 + covered), RTE_NET_CRC32_ETH);
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

uint32_t icrc_payload(const uint8_t* payload, size_t len) {
    return rte_net_crc_calc(payload, static_cast<uint32_t>(len), RTE_NET_CRC32_ETH);
}

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
        crc = append(crc, rte_pktmbuf_mtod_offset(s, const uint8_t*, off), take);
        left -= take;
        off = 0;
    }
    return crc;
}

}  // namespace ina::roce
