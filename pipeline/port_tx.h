// SPDX-License-Identifier: Apache-2.0
// Terminal stage: per-lcore, per-port TX buffers (l3fwd's mbuf_table). A buffer is sent when it
// fills or when the drain timer fires; whatever the PMD rejects is freed and counted, so a slow
// port costs drops, never a stall or a leak.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

void tx_flush(LcoreContext& ctx, uint16_t port);
void tx_flush_all(LcoreContext& ctx);

inline void tx_enqueue(LcoreContext& ctx, uint16_t port, rte_mbuf* m) {
    auto& buf = ctx.tx[port];
    buf.pkts[buf.count++] = m;
    buf.bytes += rte_pktmbuf_pkt_len(m);
    if (buf.count >= ctx.burst_size) [[unlikely]] {
        tx_flush(ctx, port);
    }
}

}  // namespace ina::pipeline
