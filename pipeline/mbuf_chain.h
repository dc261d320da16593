// SPDX-License-Identifier: Apache-2.0
// Chained (multi-segment) mbufs on the packet path. Scatter RX on a NIC, a jumbo port with the
// default data room, or net_pcap with a small data room deliver a frame as a chain: the first
// segment holds up to the data room, the rest follow. Invariants the stages rely on:
//   - eth_input puts the first kHeadBytes of every frame (or the whole frame if shorter) in its
//     first segment (pull_up), so every stage reads Ethernet, IPv4 with options, UDP/TCP/ICMP
//     headers, ARP and the INA fixed header through rte_pktmbuf_mtod;
//   - what lies past the headers (INA elements, an ICMP message's checksum, BIER payloads) is read
//     across segments (rte_pktmbuf_read, rte_raw_cksum_mbuf) or carried by reference;
//   - a frame sent to several ports holds one reference per copy on EVERY segment
//     (rte_pktmbuf_refcnt_update), because each TX frees the whole chain.
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "net/checksum.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

// An mbuf dynamic flag (rte_mbuf_dynflag) marking a packet this switch originated (an INA
// partial or result): routing sends it with the TTL it was built with, as a host would, instead
// of decrementing it like transit. 0 until register_mbuf_flags() ran (then nothing is marked).
inline uint64_t g_originated_flag = 0;

// Registers the flag and the classifier's metadata (packet_meta.h); call once after
// rte_eal_init, before any worker runs. False on failure.
inline bool register_mbuf_flags() {
    if (!register_packet_meta()) {
        return false;
    }
    static const rte_mbuf_dynflag desc = {"inaswitch_originated", 0};
    const int bit = rte_mbuf_dynflag_register(&desc);
    if (bit < 0) {
        return false;
    }
    g_originated_flag = uint64_t{1} << bit;
    return true;
}

// Ethernet 14 + IPv4 with options 60 + UDP 8 + INA fixed header 24 = 106, rounded up.
inline constexpr uint32_t kHeadBytes = 128;

// Moves bytes from the following segments into the first until it holds `want` bytes (or the
// whole frame). The frame's bytes and length do not change, only where they sit; emptied
// segments are freed. False when the first segment has no room for them or a segment is shared
// (its buffer or mbuf referenced elsewhere): the caller drops the frame.
[[nodiscard]] inline bool pull_up(rte_mbuf* m, uint32_t want) {
    want = std::min(want, rte_pktmbuf_pkt_len(m));
    if (rte_pktmbuf_data_len(m) >= want) [[likely]] {
        return true;
    }
    if (!RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) != 1 ||
        rte_pktmbuf_tailroom(m) < want - rte_pktmbuf_data_len(m)) {
        return false;
    }
    for (const rte_mbuf* s = m->next; s != nullptr; s = s->next) {
        if (rte_mbuf_refcnt_read(s) != 1) {
            return false;
        }
    }
    while (m->data_len < want) {
        rte_mbuf* next = m->next;
        if (next == nullptr) {  // segment lengths short of pkt_len: a broken chain
            return false;
        }
        const auto take = static_cast<uint16_t>(std::min<uint32_t>(want - m->data_len,
                                                                   next->data_len));
        std::memcpy(rte_pktmbuf_mtod_offset(m, uint8_t*, m->data_len),
                    rte_pktmbuf_mtod(next, const uint8_t*), take);
        m->data_len = static_cast<uint16_t>(m->data_len + take);
        next->data_off = static_cast<uint16_t>(next->data_off + take);
        next->data_len = static_cast<uint16_t>(next->data_len - take);
        if (next->data_len == 0) {
            m->next = next->next;
            --m->nb_segs;
            next->next = nullptr;
            next->nb_segs = 1;
            rte_pktmbuf_free_seg(next);
        }
    }
    return true;
}

// The one's-complement sum of `len` bytes at `off`, across segments, is 0xffff: a message that
// holds its own checksum verifies. False too if the frame is shorter than off + len. (DPDK
// 22.11's rte_raw_cksum_mbuf loses carries on a segment that starts at an odd offset.)
// `initial` is a folded sum to start from (a pseudo-header's).
[[nodiscard]] inline bool sum_ok(const rte_mbuf* m, uint32_t off, uint32_t len,
                                 uint16_t initial = 0) {
    if (off + len > rte_pktmbuf_pkt_len(m)) {
        return false;
    }
    uint32_t sum = initial;
    uint32_t done = 0;
    for (const rte_mbuf* s = m; s != nullptr && done < len; s = s->next) {
        const uint32_t seg_len = rte_pktmbuf_data_len(s);
        if (off >= seg_len) {
            off -= seg_len;
            continue;
        }
        const uint32_t take = std::min(seg_len - off, len - done);
        uint16_t part = net::ones_complement_sum(rte_pktmbuf_mtod_offset(s, const uint8_t*, off),
                                                 take);
        // A piece that starts at an odd position of the message sums its bytes in swapped
        // halves of each 16-bit word (RFC 1071 2(B)).
        if ((done & 1) != 0) {
            part = static_cast<uint16_t>(part << 8 | part >> 8);
        }
        sum += part;
        done += take;
        off = 0;
    }
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return done == len && sum == 0xffff;
}

}  // namespace ina::pipeline
