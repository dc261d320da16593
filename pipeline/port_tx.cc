// SPDX-License-Identifier: Apache-2.0
#include "pipeline/port_tx.h"

#include <rte_ethdev.h>

namespace ina::pipeline {

void tx_flush(LcoreContext& ctx, uint16_t port) {
    auto& buf = ctx.tx[port];
    if (buf.count == 0) {
        return;
    }
    if (!ctx.tx_enabled[port]) {
        // Stage tests read buffers directly; a buffer that fills there must not overflow.
        if (buf.count < buf.pkts.size()) {
            return;
        }
        ctx.counters.ports[port].tx_dropped += buf.count;
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::tx_full)] += buf.count;
        rte_pktmbuf_free_bulk(buf.pkts.data(), buf.count);
        buf.count = 0;
        buf.bytes = 0;
        return;
    }
    uint64_t bytes = buf.bytes;
    uint16_t sent = rte_eth_tx_burst(port, ctx.tx_queue, buf.pkts.data(), buf.count);
    ++ctx.counters.tx_bursts;
    auto& pc = ctx.counters.ports[port];
    if (sent < buf.count) [[unlikely]] {
        for (uint16_t i = sent; i < buf.count; ++i) {
            bytes -= rte_pktmbuf_pkt_len(buf.pkts[i]);
        }
        const uint16_t rejected = static_cast<uint16_t>(buf.count - sent);
        pc.tx_dropped += rejected;
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::tx_full)] += rejected;
        rte_pktmbuf_free_bulk(&buf.pkts[sent], rejected);
    }
    pc.tx_packets += sent;
    pc.tx_bytes += bytes;
    buf.count = 0;
    buf.bytes = 0;
}

void tx_flush_all(LcoreContext& ctx) {
    for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
        if (ctx.tx[p].count != 0 && ctx.tx_enabled[p]) {
            tx_flush(ctx, p);
        }
    }
}

}  // namespace ina::pipeline
