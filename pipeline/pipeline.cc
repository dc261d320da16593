// SPDX-License-Identifier: Apache-2.0
#include "pipeline/pipeline.h"

#include "pipeline/arp_input.h"
#include "pipeline/bier_encap.h"
#include "pipeline/bier_input.h"
#include "pipeline/classify.h"
#include "pipeline/eth_input.h"
#include "pipeline/feature_stages.h"
#include "pipeline/icmp6_local.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/ipv6_forward.h"
#include "pipeline/l2_bridge.h"
#include "pipeline/local_input.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

namespace {

template <typename Edge>
void free_drops(LcoreContext& ctx, EdgeBatches<Edge>& b) {
    if (b.size(Edge::drop) != 0) {
        rte_pktmbuf_free_bulk(b.begin(Edge::drop), b.size(Edge::drop));
    }
    if (b.overflowed != 0) [[unlikely]] {
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::stage_contract)] += b.overflowed;
    }
}

template <Ipv4Input kInput>
void route_by(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    EdgeBatches<Ipv4Edge> ip;
    ipv4_forward(ctx, snap, pkts, n, ip, kInput);
    free_drops(ctx, ip);
    if (ip.size(Ipv4Edge::local) != 0) {
        EdgeBatches<LocalEdge> local;
        local_input(ctx, snap, ip.begin(Ipv4Edge::local), ip.size(Ipv4Edge::local), local);
        free_drops(ctx, local);
    }
}

// Routing of packets that may carry the classifier's metadata.
constexpr auto route = route_by<Ipv4Input::any>;
// Routing for the IPv4 frames eth_input found when no binding asks for routed packets: nobody
// classified them, so ipv4_forward checks each header without the metadata test.
constexpr auto route_unclassified = route_by<Ipv4Input::unclassified>;

// IPv6 to the switch's MAC or its solicited-node groups (classified by process_burst), what
// features passed on or emitted over IPv6: routed, or answered (ND, echo).
void route6(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    EdgeBatches<Ipv6Edge> ip;
    ipv6_forward(ctx, snap, pkts, n, ip);
    free_drops(ctx, ip);
    if (ip.size(Ipv6Edge::local) != 0) {
        EdgeBatches<Icmp6Edge> local;
        icmp6_local(ctx, snap, ip.begin(Ipv6Edge::local), ip.size(Ipv6Edge::local), local);
        free_drops(ctx, local);
    }
}

void bridge(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    EdgeBatches<BridgeEdge> br;
    l2_bridge(ctx, snap, pkts, n, br);
    free_drops(ctx, br);
}

// Packets on their way to one stage, gathered in arrival order across feature runs; a full
// sink runs its stage first, so any number of packets can pass through it.
struct Sink {
    using Run = void (*)(LcoreContext&, const dp::Snapshot&, rte_mbuf**, uint16_t);
    explicit Sink(Run r, Sink* ipv6 = nullptr) : run(r), six(ipv6) {}
    Run run;
    // The routed sink's IPv6 sibling: while some binding takes IPv6 (dp::kScopeRouted6), what a
    // feature puts on `route` is either family (an IPv4 contribution completes a chunk whose
    // result goes to IPv6 ranks too), so route() splits it by ethertype. Without such a
    // binding no feature holds IPv6 and nothing is looked at.
    Sink* six;
    uint16_t n = 0;
    rte_mbuf* pkts[kMaxBurst];

    void add(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* ms, uint16_t k) {
        for (uint16_t i = 0; i < k; ++i) {
            if (n == kMaxBurst) [[unlikely]] {
                flush(ctx, snap);
            }
            pkts[n++] = ms[i];
        }
    }
    void flush(LcoreContext& ctx, const dp::Snapshot& snap) {
        if (n != 0) {
            run(ctx, snap, pkts, n);
            n = 0;
        }
    }
    // A feature's `route` output: to this sink, or IPv6 to its sibling.
    void route(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* ms, uint16_t k) {
        if (six == nullptr || (snap.features.scopes & dp::kScopeRouted6) == 0) [[likely]] {
            add(ctx, snap, ms, k);
            return;
        }
        for (uint16_t i = 0; i < k; ++i) {
            (is_ipv6(ms[i]) ? *six : *this).add(ctx, snap, ms + i, 1);
        }
    }
    static bool is_ipv6(const rte_mbuf* m) {
        return rte_pktmbuf_mtod(m, const rte_ether_hdr*)->ether_type ==
               rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    }
};

// The scope of a classified packet passed on `pass`: bridged, or routed of its family.
uint8_t scope_of(const PacketMeta& pm, FeatureEdge pass) {
    if (pass != FeatureEdge::route) {
        return dp::kScopeBridged;
    }
    return (pm.flags & kMetaIpv6) != 0 ? dp::kScopeRouted6 : dp::kScopeRouted;
}

void dispatch(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
              const uint8_t* features, uint16_t n, uint8_t scope, FeatureEdge pass, Sink& routed,
              Sink& bridged);

// What `feature` passed on `next`: each packet re-handled by the feature bound after it to its
// (protocol, port) on this path, or sent where it was going. The chain only moves forward in
// the binding table, so this recursion is at most FeatureTable::kMaxBindings deep.
void hand_to_next(LcoreContext& ctx, const dp::Snapshot& snap, uint8_t feature, rte_mbuf** pkts,
                  uint16_t n, FeatureEdge pass, Sink& routed, Sink& bridged) {
    uint8_t next[EdgeBatches<FeatureEdge>::kCapacity];
    for (uint16_t i = 0; i < n; ++i) {
        next[i] = dp::kFeatureNone;  // unclassified: it goes where it was going (no feature)
        if (classified(pkts[i]) != nullptr) {
            PacketMeta& pm = meta_of(pkts[i]);
            pm.feature =
                snap.features.next_after(pm.proto, pm.udp_dport, scope_of(pm, pass), feature);
            next[i] = pm.feature;
        }
    }
    // A run is of one family, and what a stage passes on carries its metadata.
    dispatch(ctx, snap, pkts, next, n, scope_of(meta_of(pkts[0]), pass), pass, routed, bridged);
}

// Which of a stage's entries a run of packets takes.
enum class Entry : uint8_t {
    classified,  // classify checked them and stored their metadata (FeatureStage::input)
    unchecked,   // nobody classified them: the stage does (input_unchecked)
    handed,      // another lcore handed them to this one (input_handed)
};

// Runs `feature`'s stage on `pkts` (all bound to it, on `scope`), as often as its emission
// limit requires: each call takes what its edges have room for, the edges are drained, and the
// stage runs again on the rest. `pass` is where packets it leaves alone continue; when features
// share a port the stage passes to `next` instead, and the pipeline hands those packets on.
void run_feature(LcoreContext& ctx, const dp::Snapshot& snap, uint8_t feature, Entry entry,
                 rte_mbuf** pkts, uint16_t n, uint8_t scope, FeatureEdge pass, Sink& routed,
                 Sink& bridged) {
    const FeatureStage& stage = feature_stage(feature);
    // Only registered entries are chosen for unchecked and handed runs (sole_unchecked,
    // process_handoff's test), so only `input` can be missing.
    const FeatureInputFn input = entry == Entry::unchecked ? stage.input_unchecked
                                 : entry == Entry::handed  ? stage.input_handed
                                                           : stage.input;
    if (input == nullptr) [[unlikely]] {
        if (pass == FeatureEdge::route) {
            routed.route(ctx, snap, pkts, n);
        } else {
            bridged.add(ctx, snap, pkts, n);
        }
        return;  // bound in the snapshot, no stage registered: the packets go on untouched
    }
    const FeatureEdge stage_pass =
        (snap.features.followed[feature] & scope) != 0 ? FeatureEdge::next : pass;
    for (uint16_t done = 0; done < n;) {
        EdgeBatches<FeatureEdge> out;
        const uint16_t took =
            input(ctx, snap, pkts + done, static_cast<uint16_t>(n - done), stage_pass, out);
        routed.route(ctx, snap, out.begin(FeatureEdge::route), out.size(FeatureEdge::route));
        bridged.add(ctx, snap, out.begin(FeatureEdge::bridge), out.size(FeatureEdge::bridge));
        if (out.size(FeatureEdge::next) != 0) {
            hand_to_next(ctx, snap, feature, out.begin(FeatureEdge::next),
                         out.size(FeatureEdge::next), pass, routed, bridged);
        }
        if (out.size(FeatureEdge::bier) != 0) {
            EdgeBatches<BierEncapEdge> enc;
            bier_encap_results(ctx, snap, out.begin(FeatureEdge::bier),
                               out.size(FeatureEdge::bier), enc);
            free_drops(ctx, enc);
        }
        free_drops(ctx, out);
        if (took == 0) [[unlikely]] {
            // With empty edges a stage always has room for one input: taking none is a bug in
            // the stage. Count and free the rest rather than loop forever.
            ctx.counters.drops[static_cast<size_t>(dp::DropReason::stage_contract)] +=
                static_cast<uint16_t>(n - done);
            rte_pktmbuf_free_bulk(pkts + done, static_cast<unsigned>(n - done));
            return;
        }
        done = static_cast<uint16_t>(done + took);
    }
}

// Walks classified packets in arrival order, one run of equal feature handles at a time: runs
// without a feature go straight to `plain`, the others through their feature's stage. Every
// output joins its sink in order, so a path's packets keep their arrival order. `features[i]`
// is pkts[i]'s handle as classify stored it (read from this array, not the mbufs again). One
// edge's packets (one family) at a time: `scope` is theirs.
void dispatch(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
              const uint8_t* features, uint16_t n, uint8_t scope, FeatureEdge pass, Sink& routed,
              Sink& bridged) {
    for (uint16_t i = 0; i < n;) {
        const uint8_t feature = features[i];
        uint16_t j = static_cast<uint16_t>(i + 1);
        while (j < n && features[j] == feature) {
            ++j;
        }
        if (feature == dp::kFeatureNone) [[likely]] {
            if (pass == FeatureEdge::route) {
                routed.route(ctx, snap, pkts + i, static_cast<uint16_t>(j - i));
            } else {
                bridged.add(ctx, snap, pkts + i, static_cast<uint16_t>(j - i));
            }
        } else {
            run_feature(ctx, snap, feature, Entry::classified, pkts + i,
                        static_cast<uint16_t>(j - i), scope, pass, routed, bridged);
        }
        i = j;
    }
}

// The feature whose stage classifies the routed IPv4 path's frames itself (input_unchecked),
// when every routed IPv4 binding is that one feature's (UDP; a port it shares with no other
// feature on this path, so it never passes to `next`); else kFeatureNone. A handful of
// bindings, scanned once per burst.
uint8_t sole_unchecked(const dp::FeatureTable& table) {
    uint8_t sole = dp::kFeatureNone;
    for (size_t i = 0; i < table.n && i < dp::FeatureTable::kMaxBindings; ++i) {
        const dp::FeatureBinding& b = table.bindings[i];
        if ((b.scopes & dp::kScopeRouted) == 0) {
            continue;
        }
        if (b.proto != dp::kIpProtoUdp || (sole != dp::kFeatureNone && b.feature != sole)) {
            return dp::kFeatureNone;
        }
        sole = b.feature;
    }
    if (sole == dp::kFeatureNone || (unchecked_features() >> sole & 1u) == 0 ||
        (table.followed[sole] & dp::kScopeRouted) != 0) {
        return dp::kFeatureNone;
    }
    return sole;
}

}  // namespace

void route_emitted(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    if ((snap.features.scopes & dp::kScopeRouted6) == 0) [[likely]] {
        route(ctx, snap, pkts, n);  // no feature holds IPv6: all of it is IPv4
        return;
    }
    Sink routed6(route6);
    Sink routed(route, &routed6);
    routed.route(ctx, snap, pkts, n);
    routed.flush(ctx, snap);
    routed6.flush(ctx, snap);
}

namespace {

void run_stages(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n);

// A plain ToR (no binding asks for routed packets): the leading run of frames that are only to
// be routed is forwarded in one pass (ipv4_fast_path), or, with no binding at all, a burst
// that is only to be bridged, whole (l2_fast_path); the rest of the burst, from the first
// frame that needs anything else, takes the stages, so arrival order holds. Returns how many
// frames the fast path took, their lengths added to `bytes`.
uint16_t fast_path(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                   uint64_t& bytes) {
    if ((snap.features.scopes & dp::kScopeRouted) != 0) {
        return 0;
    }
    const uint16_t routed = ipv4_fast_path(ctx, snap, pkts, n, bytes);
    // The bridged pass takes a whole burst or nothing (an RX burst is one port's: routed or in
    // a group).
    // It needs no binding at all: a feature on any path may hand frames to the bridged sink,
    // which the general path sends after its own; with none, nothing but eth_input feeds it.
    if (routed != 0 || snap.features.scopes != 0) {
        return routed;
    }
    return l2_fast_path(ctx, snap, pkts, n, bytes);
}

}  // namespace

void process_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    uint64_t bytes = 0;
    const uint16_t done = fast_path(ctx, snap, pkts, n, bytes);
    if (done != n) {
        run_stages(ctx, snap, pkts + done, static_cast<uint16_t>(n - done));
    }
}

uint64_t process_rx_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                          uint16_t n) {
    uint64_t bytes = 0;
    const uint16_t done = fast_path(ctx, snap, pkts, n, bytes);
    if (done != n) {
        for (uint16_t i = done; i < n; ++i) {
            bytes += rte_pktmbuf_pkt_len(pkts[i]);  // before the stages send or free them
        }
        run_stages(ctx, snap, pkts + done, static_cast<uint16_t>(n - done));
    }
    return bytes;
}

namespace {

// The stages, for what the fast path left.
void run_stages(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    // Prefetch the first cache line of every frame before classification touches it: a burst
    // is small enough that all of them fit in L1 at once.
    for (uint16_t i = 0; i < n; ++i) {
        rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
    }
    EdgeBatches<EthEdge> eth;
    eth_input(ctx, snap, pkts, n, eth);
    free_drops(ctx, eth);

    EdgeBatches<ArpEdge> arp;
    if (eth.size(EthEdge::arp) != 0) {
        arp_input(ctx, snap, eth.begin(EthEdge::arp), eth.size(EthEdge::arp), arp);
        free_drops(ctx, arp);
    }
    // Frames for the bridge come from eth_input and from arp_input. Both lists are
    // subsequences of the burst, so merging them by walking the burst restores arrival order:
    // a bridge must not reorder frames between the same pair of stations (802.1D).
    rte_mbuf* to_bridge[kMaxBurst];
    uint16_t n_bridge = 0;
    {
        uint16_t from_eth = 0;
        uint16_t from_arp = 0;
        const uint16_t n_eth = eth.size(EthEdge::bridge);
        const uint16_t n_arp = arp.size(ArpEdge::bridge);
        for (uint16_t i = 0; i < n && (from_eth < n_eth || from_arp < n_arp); ++i) {
            if (from_eth < n_eth && eth.at(EthEdge::bridge, from_eth) == pkts[i]) {
                to_bridge[n_bridge++] = pkts[i];
                ++from_eth;
            } else if (from_arp < n_arp && arp.at(ArpEdge::bridge, from_arp) == pkts[i]) {
                to_bridge[n_bridge++] = pkts[i];
                ++from_arp;
            }
        }
    }
    Sink routed6(route6);
    Sink routed(route, &routed6);
    Sink bridged(bridge);
    // Routed IPv4: classified once, then features (INA absorbs contributions and emits partials
    // and results) and routing, in arrival order. With no binding for routed packets (a plain
    // ToR) there is nothing to classify for: routing checks the headers itself, as it always
    // does for packets nobody classified, and the metadata's cache line is never touched.
    if (eth.size(EthEdge::ipv4) != 0) {
        const uint8_t sole = (snap.features.scopes & dp::kScopeRouted) != 0
                                 ? sole_unchecked(snap.features)
                                 : dp::kFeatureNone;
        if (sole != dp::kFeatureNone && g_classified_flag != 0) {
            // One walk: the one feature of this path classifies its frames in its own loop
            // and puts every frame not bound to it on `route`, classified.
            run_feature(ctx, snap, sole, Entry::unchecked, eth.begin(EthEdge::ipv4),
                        eth.size(EthEdge::ipv4), dp::kScopeRouted, FeatureEdge::route, routed,
                        bridged);
            routed.flush(ctx, snap);
        } else if ((snap.features.scopes & dp::kScopeRouted) != 0) {
            uint8_t features[kMaxBurst];
            classify(ctx, snap, eth.begin(EthEdge::ipv4), eth.size(EthEdge::ipv4),
                     dp::kScopeRouted, features);
            dispatch(ctx, snap, eth.begin(EthEdge::ipv4), features, eth.size(EthEdge::ipv4),
                     dp::kScopeRouted, FeatureEdge::route, routed, bridged);
            routed.flush(ctx, snap);
        } else {
            // Nothing is in the routed sink yet (it was made just above): the burst's IPv4
            // frames are routed where they stand, not copied into it first (~5 Ir a packet).
            route_unclassified(ctx, snap, eth.begin(EthEdge::ipv4), eth.size(EthEdge::ipv4));
        }
    }
    // Routed IPv6: classified, then the features that take IPv6 (RoCEv2 to the switch) and
    // routing, in arrival order. The routed sink is empty here (flushed above).
    if (eth.size(EthEdge::ipv6) != 0) {
        uint8_t features[kMaxBurst];
        classify(ctx, snap, eth.begin(EthEdge::ipv6), eth.size(EthEdge::ipv6),
                 dp::kScopeRouted6, features);
        if ((snap.features.scopes & dp::kScopeRouted6) != 0) {
            dispatch(ctx, snap, eth.begin(EthEdge::ipv6), features, eth.size(EthEdge::ipv6),
                     dp::kScopeRouted6, FeatureEdge::route, routed, bridged);
            routed.flush(ctx, snap);
            routed6.flush(ctx, snap);
        } else {
            route6(ctx, snap, eth.begin(EthEdge::ipv6), eth.size(EthEdge::ipv6));
        }
    }
    if (eth.size(EthEdge::bier) != 0) {
        EdgeBatches<BierEdge> bier;
        bier_input(ctx, snap, eth.begin(EthEdge::bier), eth.size(EthEdge::bier), bier);
        free_drops(ctx, bier);
    }
    if (eth.size(EthEdge::mcast) != 0) {
        EdgeBatches<BierEncapEdge> enc;
        bier_encap_groups(ctx, snap, eth.begin(EthEdge::mcast), eth.size(EthEdge::mcast), enc);
        free_drops(ctx, enc);
    }
    if (n_bridge != 0) {
        // Bridged frames meet a feature only when some binding asks for the bridged path (RoCE
        // between two servers of one group); otherwise they are not even classified.
        if ((snap.features.scopes & dp::kScopeBridged) != 0) {
            uint8_t features[kMaxBurst];
            classify(ctx, snap, to_bridge, n_bridge, dp::kScopeBridged, features);
            dispatch(ctx, snap, to_bridge, features, n_bridge, dp::kScopeBridged,
                     FeatureEdge::bridge, routed, bridged);
        } else {
            bridged.add(ctx, snap, to_bridge, n_bridge);
        }
    }
    // What bridged features sent to routing (and what any feature emitted over IPv6), then the
    // bridge (which may also hold what a routed feature passed to it).
    routed.flush(ctx, snap);
    routed6.flush(ctx, snap);
    bridged.flush(ctx, snap);
    end_burst(ctx);  // e.g. INA's hand-offs, one enqueue per owner
}

}  // namespace

void process_handoff(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n) {
    // The mbufs and their metadata were last written by the sending lcore: fetch every mbuf's
    // two lines (the metadata is a dynamic field in the second) before any is read, then each
    // frame's first line as its mbuf gives the address, before the stage walks them.
    for (uint16_t i = 0; i < n; ++i) {
        rte_prefetch0(pkts[i]);
        rte_prefetch0(reinterpret_cast<const uint8_t*>(pkts[i]) + RTE_CACHE_LINE_SIZE);
    }
    // A frame whose feature takes handed input goes to that entry; anything else (a feature
    // without it, or a frame nobody classified) through the whole pipeline as it came.
    uint8_t features[kMaxBurst];
    rte_mbuf* rest[kMaxBurst];
    uint16_t n_rest = 0;
    uint16_t n_handed = 0;
    uint8_t memo_feature = dp::kFeatureNone;  // the last frame's feature, and whether it
    bool memo_handed = false;                 // takes handed input (mostly one feature)
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        const uint8_t feature = feature_of(m);
        if (feature != memo_feature) {
            memo_feature = feature;
            memo_handed = feature != dp::kFeatureNone &&
                          feature_stage(feature).input_handed != nullptr;
        }
        if (!memo_handed) {
            rest[n_rest++] = m;
            continue;
        }
        rte_prefetch0(rte_pktmbuf_mtod(m, void*));
        features[n_handed] = feature;
        pkts[n_handed++] = m;  // n_handed <= i: the kept packets move up in place
    }
    if (n_handed != 0) {
        Sink routed6(route6);
        Sink routed(route, &routed6);
        Sink bridged(bridge);
        for (uint16_t i = 0; i < n_handed;) {
            uint16_t j = static_cast<uint16_t>(i + 1);
            while (j < n_handed && features[j] == features[i]) {
                ++j;
            }
            // Handed frames were taken from a routed IPv4 run (input_handed's contract).
            run_feature(ctx, snap, features[i], Entry::handed, pkts + i,
                        static_cast<uint16_t>(j - i), dp::kScopeRouted, FeatureEdge::route, routed,
                        bridged);
            i = j;
        }
        routed.flush(ctx, snap);
        routed6.flush(ctx, snap);
        bridged.flush(ctx, snap);
        end_burst(ctx);
    }
    if (n_rest != 0) {
        process_burst(ctx, snap, rest, n_rest);
    }
}

}  // namespace ina::pipeline
