// SPDX-License-Identifier: Apache-2.0
// Helpers for stages that originate frames (the RoCE features' ACKs, NAKs, CNPs and WRITEs):
// the loop's time in nanoseconds and a frame built in scratch copied into fresh mbufs, marked
// originated (routing keeps its TTL). No allocation beyond the mbufs, no syscalls.
#pragma once

#include <rte_mbuf.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "pipeline/context.h"
#include "pipeline/mbuf_chain.h"

namespace ina::pipeline {

// The loop's TSC stamp in nanoseconds (the TSC itself when its rate is unknown, as in tests).
inline uint64_t now_ns(const LcoreContext& ctx) {
    if (ctx.tsc_hz == 0) {
        return ctx.now_tsc;
    }
    const uint64_t t = ctx.now_tsc;
    return t / ctx.tsc_hz * 1'000'000'000ull + t % ctx.tsc_hz * 1'000'000'000ull / ctx.tsc_hz;
}

// A frame of `len` bytes (Ethernet header first) copied into mbufs of `pool`, chained when it
// is larger than one, sent from `port`'s context and marked originated; nullptr (nothing held)
// when the pool runs dry.
inline rte_mbuf* originated_frame(rte_mempool* pool, const uint8_t* bytes, size_t len,
                                  uint16_t port) {
    rte_mbuf* head = nullptr;
    for (size_t done = 0; done < len;) {
        rte_mbuf* seg = rte_pktmbuf_alloc(pool);
        if (seg == nullptr) [[unlikely]] {
            rte_pktmbuf_free(head);
            return nullptr;
        }
        const auto take = static_cast<uint16_t>(std::min<size_t>(len - done,
                                                                 rte_pktmbuf_tailroom(seg)));
        std::memcpy(rte_pktmbuf_append(seg, take), bytes + done, take);
        done += take;
        if (head == nullptr) {
            head = seg;
        } else if (rte_pktmbuf_chain(head, seg) != 0) [[unlikely]] {
            rte_pktmbuf_free(seg);
            rte_pktmbuf_free(head);
            return nullptr;
        }
    }
    head->port = port;
    head->ol_flags = g_originated_flag;
    return head;
}

}  // namespace ina::pipeline
