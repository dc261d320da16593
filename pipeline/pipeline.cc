// SPDX-License-Identifier: Apache-2.0
#include "pipeline/pipeline.h"

#include "pipeline/arp_input.h"
#include "pipeline/eth_input.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/l2_bridge.h"
#include "pipeline/local_input.h"

namespace ina::pipeline {

namespace {

template <typename Edge>
void free_drops(EdgeBatches<Edge>& b) {
    if (b.size(Edge::drop) != 0) {
        rte_pktmbuf_free_bulk(b.begin(Edge::drop), b.size(Edge::drop));
    }
}

}  // namespace

void process_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    // Prefetch the first cache line of every frame before classification touches it: a burst
    // is small enough that all of them fit in L1 at once.
    for (uint16_t i = 0; i < n; ++i) {
        rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    }
    EdgeBatches<EthEdge> eth;
    eth_input(ctx, snap, pkts, n, eth);
    free_drops(eth);

    // Frames for the bridge come from eth_input and from arp_input.
    rte_mbuf* bridge[kMaxBurst];
    uint16_t n_bridge = 0;
    for (uint16_t i = 0; i < eth.size(EthEdge::bridge); ++i) {
        bridge[n_bridge++] = eth.at(EthEdge::bridge, i);
    }

    if (eth.size(EthEdge::arp) != 0) {
        EdgeBatches<ArpEdge> arp;
        arp_input(ctx, snap, eth.begin(EthEdge::arp), eth.size(EthEdge::arp), arp);
        free_drops(arp);
        for (uint16_t i = 0; i < arp.size(ArpEdge::bridge); ++i) {
            bridge[n_bridge++] = arp.at(ArpEdge::bridge, i);
        }
    }
    if (eth.size(EthEdge::ipv4) != 0) {
        EdgeBatches<Ipv4Edge> ip;
        ipv4_forward(ctx, snap, eth.begin(EthEdge::ipv4), eth.size(EthEdge::ipv4), ip);
        free_drops(ip);
        if (ip.size(Ipv4Edge::local) != 0) {
            EdgeBatches<LocalEdge> local;
            local_input(ctx, snap, ip.begin(Ipv4Edge::local), ip.size(Ipv4Edge::local), local);
            free_drops(local);
        }
    }
    if (n_bridge != 0) {
        EdgeBatches<BridgeEdge> br;
        l2_bridge(ctx, snap, bridge, n_bridge, br);
        free_drops(br);
    }
}

}  // namespace ina::pipeline
