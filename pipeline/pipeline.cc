// SPDX-License-Identifier: Apache-2.0
#include "pipeline/pipeline.h"

#include "pipeline/arp_input.h"
#include "pipeline/bier_encap.h"
#include "pipeline/bier_input.h"
#include "pipeline/eth_input.h"
#include "pipeline/ina_input.h"
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

    EdgeBatches<ArpEdge> arp;
    if (eth.size(EthEdge::arp) != 0) {
        arp_input(ctx, snap, eth.begin(EthEdge::arp), eth.size(EthEdge::arp), arp);
        free_drops(arp);
    }
    // Frames for the bridge come from eth_input and from arp_input. Both lists are
    // subsequences of the burst, so merging them by walking the burst restores arrival order:
    // a bridge must not reorder frames between the same pair of stations (802.1D).
    rte_mbuf* bridge[kMaxBurst];
    uint16_t n_bridge = 0;
    {
        uint16_t from_eth = 0;
        uint16_t from_arp = 0;
        const uint16_t n_eth = eth.size(EthEdge::bridge);
        const uint16_t n_arp = arp.size(ArpEdge::bridge);
        for (uint16_t i = 0; i < n && (from_eth < n_eth || from_arp < n_arp); ++i) {
            if (from_eth < n_eth && eth.at(EthEdge::bridge, from_eth) == pkts[i]) {
                bridge[n_bridge++] = pkts[i];
                ++from_eth;
            } else if (from_arp < n_arp && arp.at(ArpEdge::bridge, from_arp) == pkts[i]) {
                bridge[n_bridge++] = pkts[i];
                ++from_arp;
            }
        }
    }
    // IPv4 meets INA first: contributions are absorbed, emitted results join the routed packets.
    // ina_input may stop early to keep room for a root's result fan-out; loop until done.
    for (uint16_t done = 0; done < eth.size(EthEdge::ipv4);) {
        EdgeBatches<InaEdge> in;
        done = static_cast<uint16_t>(
            done + ina_input(ctx, snap, eth.begin(EthEdge::ipv4) + done,
                             static_cast<uint16_t>(eth.size(EthEdge::ipv4) - done), in));
        free_drops(in);
        if (in.size(InaEdge::bier) != 0) {
            EdgeBatches<BierEncapEdge> enc;
            bier_encap_results(ctx, snap, in.begin(InaEdge::bier), in.size(InaEdge::bier), enc);
            free_drops(enc);
        }
        if (in.size(InaEdge::route) == 0) {
            continue;
        }
        EdgeBatches<Ipv4Edge> ip;
        ipv4_forward(ctx, snap, in.begin(InaEdge::route), in.size(InaEdge::route), ip);
        free_drops(ip);
        if (ip.size(Ipv4Edge::local) != 0) {
            EdgeBatches<LocalEdge> local;
            local_input(ctx, snap, ip.begin(Ipv4Edge::local), ip.size(Ipv4Edge::local), local);
            free_drops(local);
        }
    }
    if (eth.size(EthEdge::bier) != 0) {
        EdgeBatches<BierEdge> bier;
        bier_input(ctx, snap, eth.begin(EthEdge::bier), eth.size(EthEdge::bier), bier);
        free_drops(bier);
    }
    if (eth.size(EthEdge::mcast) != 0) {
        EdgeBatches<BierEncapEdge> enc;
        bier_encap_groups(ctx, snap, eth.begin(EthEdge::mcast), eth.size(EthEdge::mcast), enc);
        free_drops(enc);
    }
    if (n_bridge != 0) {
        EdgeBatches<BridgeEdge> br;
        l2_bridge(ctx, snap, bridge, n_bridge, br);
        free_drops(br);
    }
}

}  // namespace ina::pipeline
