// SPDX-License-Identifier: Apache-2.0
#include "roce/icrc.h"

#include <rte_net_crc.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "roce/wire.h"

namespace ina::roce {

namespace {

constexpr size_t kUdpBytes = 8;
constexpr size_t kMaxMasked = 8 + 60 + kUdpBytes + kBthBytes;

// Copies the IP, UDP and BTH headers at `l3` into `out` behind 8 bytes of 0xFF with the variant
// fields masked; returns the bytes written (0: not a RoCEv2 header). `avail` bytes are readable
// at l3. Also returns the packet's length from its IP header in `total`.
size_t masked_headers(const uint8_t* l3, size_t avail, uint8_t* out, size_t& total) {
    if (avail < 1) {
        return 0;
    }
    const uint8_t version = l3[0] >> 4;
    size_t ip_len = 0;
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
    if (avail < n || total < n + kIcrcBytes) {
        return 0;
    }
    std::memset(out, 0xFF, 8);
    uint8_t* h = out + 8;
    std::memcpy(h, l3, n);
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

}  // namespace

void icrc_init() {
    // rte_net_crc falls back by itself: AVX-512 VPCLMULQDQ, else SSE4.2 PCLMULQDQ, else a table,
    // each only if the CPU has it and EAL allows that SIMD width.
    rte_net_crc_set_alg(RTE_NET_CRC_AVX512);
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
