// SPDX-License-Identifier: Apache-2.0
// process_burst end to end: every mbuf of a mixed burst ends up queued for TX or freed.
#include "pipeline/pipeline.h"

#include <rte_arp.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_mempool.h>

#include <algorithm>
#include <functional>
#include <tuple>

#include "pipeline/arp_input.h"
#include "pipeline/eth_input.h"
#include "pipeline/l2_bridge.h"
#include "pipeline/feature_stages.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/local_input.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/packet_meta.h"
#include "stage_util.h"

namespace ina::test {
namespace {

constexpr rte_ether_addr kClient{{0x02, 0x77, 0x00, 0x00, 0x00, 0x01}};

class Pipeline : public StageTest {
protected:
    Bytes udp_to(uint16_t in, uint32_t src, uint32_t dst, uint8_t ttl = 64) {
        return eth_frame(port_mac(in), kClient, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, 4000, 5000, payload_of(40)), ttl));
    }
    Bytes arp_request(const rte_ether_addr& sha, uint32_t sip, uint32_t tip) {
        return eth_frame(kBroadcast, sha, RTE_ETHER_TYPE_ARP,
                         arp_payload(RTE_ARP_OP_REQUEST, sha, sip, kZeroMac, tip));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    void free_all_tx() {
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            free_mbufs(take_tx(p));
        }
    }
};

TEST_F(Pipeline, MixedBurstEndToEnd) {
    Bytes bad_ck = udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.1"));
    bad_ck[kEthLen + 10] ^= 0x5a;
    std::vector<rte_mbuf*> in = {
        /* 0 */ mbuf(arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.1")), kR0),  // reply r0
        /* 1 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR0),         // -> r1
        /* 2 */ mbuf(eth_frame(port_mac(kR1), kClient, RTE_ETHER_TYPE_IPV4,
                               ipv4_packet(ip4("10.0.2.9"), ip4("10.0.2.1"), IPPROTO_ICMP,
                                           icmp_echo(8, 1, 1, payload_of(32)))),
                     kR1),                                                             // echo r1
        /* 3 */ mbuf(eth_frame(kStranger, kClient, 0x88b5, payload_of(50)), kG0),     // flood
        /* 4 */ mbuf(Bytes(10, 0xab), kR0),                                            // runt
        /* 5 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR1),         // not us
        /* 6 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("10.99.1.1")), kR0),           // unresolved
        /* 7 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("10.0.1.1")), kR0),            // local UDP
        /* 8 */ mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")), kG1), // ARP flood
        /* 9 */ mbuf(arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.77")), kR0),  // ARP not us
        /* 10 */ mbuf(eth_frame(kHostA, kHostB, 0x88b5, payload_of(70)), kG0),        // -> g1
        /* 11 */ mbuf(bad_ck, kR0),                                                    // bad ck
        /* 12 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.5.3"), 1), kR0),     // ttl
        /* 13 */ mbuf(udp_to(kR1, ip4("10.0.2.9"), ip4("10.0.10.20")), kR1),         // -> g1
    };
    const auto orig = in;
    ASSERT_EQ(in_use(), in.size());
    run(in);

    // Where everything went.
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(ctx->tx[kR0].pkts[0], orig[0]);
    ASSERT_EQ(tx_count(kR1), 2);
    EXPECT_EQ(ctx->tx[kR1].pkts[0], orig[1]);  // routed stage runs before local
    EXPECT_EQ(ctx->tx[kR1].pkts[1], orig[2]);
    ASSERT_EQ(tx_count(kG0), 1);
    EXPECT_EQ(ctx->tx[kG0].pkts[0], orig[8]);
    ASSERT_EQ(tx_count(kG1), 3);
    EXPECT_EQ(ctx->tx[kG1].pkts[0], orig[13]);  // routed first, then the bridge
    EXPECT_EQ(ctx->tx[kG1].pkts[1], orig[3]);
    EXPECT_EQ(ctx->tx[kG1].pkts[2], orig[10]);
    ASSERT_EQ(tx_count(kG2), 2);
    EXPECT_EQ(ctx->tx[kG2].pkts[0], orig[3]);
    EXPECT_EQ(ctx->tx[kG2].pkts[1], orig[8]);
    EXPECT_EQ(total_tx(), 9u);
    EXPECT_EQ(rte_mbuf_refcnt_read(orig[3]), 2);
    EXPECT_EQ(rte_mbuf_refcnt_read(orig[8]), 2);

    // What was counted.
    const auto& c = ctx->counters;
    EXPECT_EQ(c.arp_replies, 1u);
    EXPECT_EQ(c.routed, 2u);
    EXPECT_EQ(c.icmp_echo_replies, 1u);
    EXPECT_EQ(c.flooded, 2u);
    EXPECT_EQ(c.bridged, 1u);
    EXPECT_EQ(drops(dp::DropReason::runt), 1u);
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 1u);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 1u);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 1u);
    EXPECT_EQ(drops(dp::DropReason::arp_not_for_us), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 1u);
    EXPECT_EQ(drops(dp::DropReason::ttl_exceeded), 1u);
    EXPECT_EQ(total_drops(), 7u);

    // What the control plane heard.
    int learn = 0, seen = 0, refresh = 0, resolve = 0;
    for (const auto& ev : events()) {
        switch (ev.type) {
            case dp::EventType::fdb_learn:
                ++learn;
                break;
            case dp::EventType::neighbour_seen:
                ++seen;
                EXPECT_EQ(ev.ip, ip4("10.0.1.9"));
                break;
            case dp::EventType::neighbour_refresh:
                ++refresh;
                break;
                break;
            case dp::EventType::resolve_request:
                ++resolve;
                EXPECT_EQ(ev.ip, ip4("10.0.2.50"));
                break;
            case dp::EventType::neighbour6_seen:
                ADD_FAILURE() << "no IPv6 in this burst";
                break;
        }
    }
    EXPECT_EQ(learn, 1) << "kClient is new on g0; kHostB (g0) and kHostA (g1) are known";
    EXPECT_EQ(seen, 1);
    EXPECT_EQ(refresh, 2);  // the LAN ARP (10.0.10.30) and the ARP for 10.0.1.77
    EXPECT_EQ(resolve, 1);

    // Drops were freed at once; the rest are freed by TX.
    EXPECT_EQ(in_use(), 7u);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u) << "no mbuf leaked";
}

TEST_F(Pipeline, ManyBurstsLeaveNothingBehind) {
    // 200 bursts of up to 64 packets cycling through every path; TX is drained after each.
    const std::vector<Bytes> kinds = {
        arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.1")),
        udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")),
        eth_frame(port_mac(kR1), kClient, RTE_ETHER_TYPE_IPV4,
                  ipv4_packet(ip4("10.0.2.9"), ip4("10.0.2.1"), IPPROTO_ICMP,
                              icmp_echo(8, 1, 1, payload_of(32)))),
        eth_frame(kBroadcast, kHostB, 0x88b5, payload_of(50)),
        Bytes(5, 1),
        udp_to(kR0, ip4("10.0.1.9"), ip4("8.8.8.8")),
        udp_to(kR0, ip4("10.0.1.9"), ip4("10.99.1.1")),
        eth_frame(kHostA, kHostB, 0x88b5, payload_of(70)),
        arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")),
        eth_frame(kHostC, kStranger, 0x88b5, payload_of(70)),
    };
    const std::vector<uint16_t> in_port = {kR0, kR0, kR1, kG0, kR0, kR0, kR0, kG0, kG2, kH0};
    for (int burst = 0; burst < 200; ++burst) {
        const auto n = static_cast<uint16_t>(1 + (burst * 37) % pipeline::kMaxBurst);
        std::vector<rte_mbuf*> in;
        for (uint16_t i = 0; i < n; ++i) {
            const size_t k = (static_cast<size_t>(burst) * 7 + i) % kinds.size();
            in.push_back(mbuf(kinds[k], in_port[k]));
        }
        run(in);
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            ASSERT_LE(tx_count(p), pipeline::kMaxBurst);
        }
        free_all_tx();
        ASSERT_EQ(in_use(), 0u) << "burst " << burst;
        events();
    }
    const auto& c = ctx->counters;
    EXPECT_GT(c.arp_replies, 0u);
    EXPECT_GT(c.routed, 0u);
    EXPECT_GT(c.icmp_echo_replies, 0u);
    EXPECT_GT(c.flooded, 0u);
    EXPECT_GT(c.bridged, 0u);
    EXPECT_EQ(c.drops[static_cast<size_t>(dp::DropReason::tx_full)], 0u);
}

TEST_F(Pipeline, EmptyBurstIsANoOp) {
    pipeline::process_burst(*ctx, *snap, nullptr, 0);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(Pipeline, BridgeKeepsArrivalOrderAcrossArpAndOtherFrames) {
    // An ARP that arp_input hands to the bridge must not fall behind later frames of the burst
    // (802.1D: no reordering between the same pair of stations).
    std::vector<rte_mbuf*> in = {
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(50)), kG0),
        mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")), kG0),
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(60)), kG0),
        mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.41")), kG0),
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(70)), kG0),
    };
    const auto orig = in;
    run(in);
    const auto out = take_tx(kG1);
    ASSERT_EQ(out.size(), orig.size());
    for (size_t i = 0; i < orig.size(); ++i) {
        EXPECT_EQ(out[i], orig[i]) << "frame " << i << " left out of order";
    }
    free_mbufs(out);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Pipeline, FullBurstOfFloodsStaysWithinTheBuffers) {
    // 64 broadcasts from g0: each of g1 and g2 receives 64 references. With TX disabled
    // (stage-test mode) a full buffer is dropped as tx_full; either way every reference is
    // accounted for and released exactly once.
    std::vector<rte_mbuf*> in;
    for (int i = 0; i < pipeline::kMaxBurst; ++i) {
        in.push_back(mbuf(eth_frame(kBroadcast, kHostB, 0x88b5, payload_of(46)), kG0));
    }
    run(in);
    EXPECT_EQ(ctx->counters.flooded, 64u);
    EXPECT_EQ(tx_count(kG1) + ctx->counters.ports[kG1].tx_dropped, 64u);
    EXPECT_EQ(tx_count(kG2) + ctx->counters.ports[kG2].tx_dropped, 64u);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u);
}


// ipv4_fast_path (a plain ToR's leading run of transit IPv4) against the general path it stands
// in for. The reference runs the stages process_burst runs without it: eth_input, ipv4_forward
// on the ipv4 edge (Ipv4Input::unclassified, as route_unclassified), local_input on the local
// edge, drops freed. Every frame variant below must leave the same bytes on the same ports in
// the same order, with the same counters and control-plane events, whether process_burst or
// the reference handled the burst it sits in.
class FastPath : public Pipeline {
protected:
    void SetUp() override {
        Pipeline::SetUp();
        const std::string id = std::to_string(unique_id());
        ref_ring = rte_ring_create_elem(("fpref" + id).c_str(), sizeof(dp::Event), 64,
                                        SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
        ASSERT_NE(ref_ring, nullptr);
        ref = std::make_unique<pipeline::LcoreContext>();
        ref->burst_size = ctx->burst_size;
        ref->tsc_hz = ctx->tsc_hz;
        ref->now_tsc = ctx->now_tsc;
        ref->event_interval_tsc = ctx->event_interval_tsc;
        pipeline::init_timers(*ref, kStartTsc);
        ref->events = ref_ring;
        ref_fdb_seen.assign(64, 0);
        ref->fdb_seen = ref_fdb_seen.data();
        ref->fdb_seen_len = static_cast<uint32_t>(ref_fdb_seen.size());
    }
    void TearDown() override {
        if (ref) {
            for (auto& b : ref->tx) {
                rte_pktmbuf_free_bulk(b.pkts.data(), b.count);
                b.count = 0;
                b.bytes = 0;
            }
        }
        rte_ring_free(ref_ring);
        Pipeline::TearDown();
    }
    // The stages run_stages runs with no binding, in its order: eth_input; arp_input on the
    // arp edge; routing of the ipv4 edge (then local_input); the bridge, fed by eth_input's and
    // arp_input's bridge edges merged in arrival order.
    void general(std::vector<rte_mbuf*> in) {
        const auto n = static_cast<uint16_t>(in.size());
        pipeline::EdgeBatches<pipeline::EthEdge> eth;
        pipeline::eth_input(*ref, *snap, in.data(), n, eth);
        for (auto e : {pipeline::EthEdge::bier, pipeline::EthEdge::mcast, pipeline::EthEdge::ipv6}) {
            ASSERT_EQ(eth.size(e), 0) << "the variants stay off the BIER and IPv6 edges";
        }
        rte_pktmbuf_free_bulk(eth.begin(pipeline::EthEdge::drop), eth.size(pipeline::EthEdge::drop));
        pipeline::EdgeBatches<pipeline::ArpEdge> arp;
        pipeline::arp_input(*ref, *snap, eth.begin(pipeline::EthEdge::arp),
                            eth.size(pipeline::EthEdge::arp), arp);
        rte_pktmbuf_free_bulk(arp.begin(pipeline::ArpEdge::drop), arp.size(pipeline::ArpEdge::drop));
        std::vector<rte_mbuf*> to_bridge;
        for (rte_mbuf* m : in) {
            for (uint16_t k = 0; k < eth.size(pipeline::EthEdge::bridge); ++k) {
                if (eth.at(pipeline::EthEdge::bridge, k) == m) {
                    to_bridge.push_back(m);
                }
            }
            for (uint16_t k = 0; k < arp.size(pipeline::ArpEdge::bridge); ++k) {
                if (arp.at(pipeline::ArpEdge::bridge, k) == m) {
                    to_bridge.push_back(m);
                }
            }
        }
        pipeline::EdgeBatches<pipeline::Ipv4Edge> ip;
        pipeline::ipv4_forward(*ref, *snap, eth.begin(pipeline::EthEdge::ipv4),
                               eth.size(pipeline::EthEdge::ipv4), ip,
                               pipeline::Ipv4Input::unclassified);
        rte_pktmbuf_free_bulk(ip.begin(pipeline::Ipv4Edge::drop), ip.size(pipeline::Ipv4Edge::drop));
        pipeline::EdgeBatches<pipeline::LocalEdge> local;
        pipeline::local_input(*ref, *snap, ip.begin(pipeline::Ipv4Edge::local),
                              ip.size(pipeline::Ipv4Edge::local), local);
        rte_pktmbuf_free_bulk(local.begin(pipeline::LocalEdge::drop),
                              local.size(pipeline::LocalEdge::drop));
        pipeline::EdgeBatches<pipeline::BridgeEdge> br;
        pipeline::l2_bridge(*ref, *snap, to_bridge.data(), static_cast<uint16_t>(to_bridge.size()),
                            br);
        rte_pktmbuf_free_bulk(br.begin(pipeline::BridgeEdge::drop), br.size(pipeline::BridgeEdge::drop));
    }
    // What a context sent per port (bytes, in order), then emptied its TX buffers.
    static std::vector<std::vector<Bytes>> sent(pipeline::LcoreContext& c) {
        std::vector<std::vector<Bytes>> out(dp::kMaxPorts);
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            auto& b = c.tx[p];
            for (uint16_t i = 0; i < b.count; ++i) {
                out[p].push_back(bytes_of(b.pkts[i]));
            }
            rte_pktmbuf_free_bulk(b.pkts.data(), b.count);
            b.count = 0;
            b.bytes = 0;
        }
        return out;
    }
    static std::vector<std::tuple<int, uint32_t, uint16_t>> drained(rte_ring* r) {
        std::vector<std::tuple<int, uint32_t, uint16_t>> out;
        dp::Event ev{};
        while (rte_ring_sc_dequeue_elem(r, &ev, sizeof ev) == 0) {
            out.emplace_back(static_cast<int>(ev.type), ev.ip, ev.port);
        }
        return out;
    }
    // One burst of `frames` (frame, ingress port, mbuf flags) through both paths: same result.
    struct In {
        Bytes frame;
        uint16_t port = kR0;
        uint64_t ol_flags = 0;
        bool chained = false;
        // Chained, its first segment referenced elsewhere too (a clone's parent): eth_input
        // cannot pull its header up and drops it (chain_unreadable). The test holds that
        // reference until the burst is done.
        bool shared = false;
    };
    rte_mbuf* make(const In& f) {
        rte_mbuf* m = f.chained || f.shared ? chained(f.frame, f.port, {20}) : mbuf(f.frame, f.port);
        m->ol_flags |= f.ol_flags;
        if (f.shared) {
            rte_mbuf_refcnt_update(m, 1);
            held.push_back(m);
        }
        return m;
    }
    std::vector<rte_mbuf*> held;
    // `rx`: through process_rx_burst (the RX loop's entry), else process_burst.
    void both(const std::vector<In>& frames, const std::string& what, bool rx = true) {
        std::vector<rte_mbuf*> a;
        std::vector<rte_mbuf*> b;
        for (const auto& f : frames) {
            a.push_back(make(f));
            b.push_back(make(f));
        }
        uint64_t length = 0;
        for (const auto& f : frames) {
            length += f.frame.size();
        }
        if (rx) {
            // The same path, and the burst's length for the port counter.
            EXPECT_EQ(pipeline::process_rx_burst(*ctx, *snap, a.data(),
                                                 static_cast<uint16_t>(a.size())),
                      length)
                << what;
        } else {
            run(a);
        }
        general(b);
        const auto got = sent(*ctx);
        const auto want = sent(*ref);
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            EXPECT_EQ(got[p], want[p]) << what << ": port " << p;
        }
        EXPECT_EQ(ctx->counters.routed, ref->counters.routed) << what;
        EXPECT_EQ(ctx->counters.icmp_echo_replies, ref->counters.icmp_echo_replies) << what;
        EXPECT_EQ(ctx->counters.bridged, ref->counters.bridged) << what;
        EXPECT_EQ(ctx->counters.flooded, ref->counters.flooded) << what;
        EXPECT_EQ(fdb_seen, ref_fdb_seen) << what << ": FDB ageing refreshes";
        for (size_t r = 0; r < dp::kDropReasonCount; ++r) {
            EXPECT_EQ(ctx->counters.drops[r], ref->counters.drops[r])
                << what << ": drop reason " << dp::kDropReasonNames[r];
        }
        EXPECT_EQ(drained(ring), drained(ref_ring)) << what;
        for (rte_mbuf* m : held) {
            rte_pktmbuf_free(m);
        }
        held.clear();
        EXPECT_EQ(in_use(), 0u) << what;
    }
    Bytes udp_from(uint16_t in, uint32_t src, uint32_t dst, uint8_t ttl = 64, size_t len = 40) {
        return eth_frame(port_mac(in), kClient, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, 4000, 5000, payload_of(len)), ttl));
    }
    std::unique_ptr<pipeline::LcoreContext> ref;
    rte_ring* ref_ring = nullptr;
    std::vector<uint64_t> ref_fdb_seen;
};

TEST_F(FastPath, EveryVariantLeavesWhatTheGeneralPathLeaves) {
    const uint32_t host = ip4("10.0.1.9");
    const Bytes via_gw = udp_from(kR0, host, ip4("192.168.1.9"));     // gateway 10.0.2.2 on r1
    const Bytes to_neighbour = udp_from(kR0, host, ip4("10.0.2.7"));  // learned, on r1
    const Bytes back_out = udp_from(kR0, host, ip4("192.168.5.3"));   // gateway on r0 itself
    std::vector<std::pair<std::string, In>> variants = {
        {"via gateway", {via_gw}},
        {"to a learned neighbour", {to_neighbour}},
        {"out of the ingress port", {back_out}},
        {"TTL 2", {udp_from(kR0, host, ip4("192.168.1.9"), 2)}},
        {"TTL 1", {udp_from(kR0, host, ip4("192.168.1.9"), 1)}},
        {"TTL 0", {udp_from(kR0, host, ip4("192.168.1.9"), 0)}},
        {"device route, no neighbour", {udp_from(kR0, host, ip4("172.16.0.5"))}},
        {"unresolved gateway", {udp_from(kR0, host, ip4("10.99.1.1"))}},
        {"local UDP", {udp_from(kR0, host, ip4("10.0.1.1"))}},
        {"echo to the switch",
         {eth_frame(port_mac(kR0), kClient, RTE_ETHER_TYPE_IPV4,
                    ipv4_packet(host, ip4("10.0.1.1"), IPPROTO_ICMP,
                                icmp_echo(8, 1, 1, payload_of(32))))}},
        {"subnet broadcast", {udp_from(kR0, host, ip4("10.0.2.255"))}},
        {"no route", {udp_from(kR0, host, ip4("8.8.8.8"))}},
        {"loopback destination", {udp_from(kR0, host, ip4("127.0.0.1"))}},
        {"multicast destination", {udp_from(kR0, host, ip4("224.0.0.5"))}},
        {"this-network destination", {udp_from(kR0, host, ip4("0.1.2.3"))}},
        {"source 0.0.0.0", {udp_from(kR0, 0, ip4("192.168.1.9"))}},
        {"source 255.255.255.255", {udp_from(kR0, 0xffffffff, ip4("192.168.1.9"))}},
        {"loopback source", {udp_from(kR0, ip4("127.0.0.9"), ip4("192.168.1.9"))}},
        {"beyond r1's MTU", {udp_from(kR0, host, ip4("192.168.1.9"), 64, 1000)}},
        {"at r1's MTU", {udp_from(kR0, host, ip4("192.168.1.9"), 64, 1000 - 28)}},
        {"another MAC", {eth_frame(kStranger, kClient, RTE_ETHER_TYPE_IPV4,
                                   Bytes(via_gw.begin() + kEthLen, via_gw.end()))}},
        {"on a group port", {udp_from(kG0, ip4("10.0.10.9"), ip4("192.168.1.9")), kG0}},
        {"on an unused port id", {via_gw, 5}},
        {"on a port beyond the snapshot", {via_gw, 30}},
        {"chained", {via_gw, kR0, 0, true}},
        {"checksum verified by the NIC", {via_gw, kR0, RTE_MBUF_F_RX_IP_CKSUM_GOOD}},
        {"checksum bad by the NIC", {via_gw, kR0, RTE_MBUF_F_RX_IP_CKSUM_BAD}},
        {"checksum NONE by the NIC", {via_gw, kR0, RTE_MBUF_F_RX_IP_CKSUM_NONE}},
        {"originated by the switch", {via_gw, kR0, pipeline::g_originated_flag}},
    };
    {
        Bytes f = via_gw;
        f[kEthLen + 10] ^= 0x5a;
        variants.push_back({"bad checksum", {f}});
        variants.push_back({"bad checksum, NIC says good", {f, kR0, RTE_MBUF_F_RX_IP_CKSUM_GOOD}});
    }
    {
        Bytes f = eth_frame(port_mac(kR0), kClient, RTE_ETHER_TYPE_IPV4,
                            ipv4_packet(host, ip4("192.168.1.9"), IPPROTO_UDP, payload_of(20), 64,
                                        Bytes{1, 1, 1, 0}));
        variants.push_back({"options", {f}});
    }
    for (const auto& [name, edit] :
         std::vector<std::pair<std::string, std::function<void(Bytes&)>>>{
             {"version 6 in an IPv4 frame", [](Bytes& f) { f[kEthLen] = 0x65; }},
             {"IHL 4", [](Bytes& f) { f[kEthLen] = 0x44; }},
             {"total length beyond the frame", [](Bytes& f) { put16(&f[kEthLen + 2], 200); }},
             {"total length 19", [](Bytes& f) { put16(&f[kEthLen + 2], 19); }},
             {"truncated header", [](Bytes& f) { f.resize(kEthLen + 12); }},
             {"Ethernet header only", [](Bytes& f) { f.resize(kEthLen); }},
         }) {
        Bytes f = via_gw;
        edit(f);
        if (f.size() >= kEthLen + kIpLen) {
            fix_ipv4_checksum(f);
        }
        variants.push_back({name, {f}});
    }
    // A first burst fills the neighbour memos (a memo miss takes the general path).
    both({{to_neighbour}, {via_gw}}, "warm-up");
    for (const auto& [name, v] : variants) {
        both({v}, name + ", alone");
        both({{via_gw}, {to_neighbour}, v, {back_out}, {via_gw}}, name + ", in a burst");
        both({{via_gw}, v, v, {to_neighbour}}, name + ", twice in a burst");
        both({{via_gw}, {back_out}, v}, name + ", last in a burst (process_burst)", false);
    }
}

// The bridged fast path (l2_fast_path, with no binding at all): frames on group ports, each
// alone and in bursts with frames it takes and frames it leaves, against the general stages.
TEST_F(FastPath, EveryBridgedVariantLeavesWhatTheGeneralPathLeaves) {
    auto l2 = [](const rte_ether_addr& dst, const rte_ether_addr& src, uint16_t type = 0x88b5,
                 size_t len = 50) { return eth_frame(dst, src, type, payload_of(len)); };
    const rte_ether_addr kNew{{0x02, 0xee, 0x00, 0x00, 0x00, 0x01}};
    const rte_ether_addr kZero{{0, 0, 0, 0, 0, 0}};
    const rte_ether_addr kMcast{{0x01, 0x00, 0x5e, 0x00, 0x00, 0x05}};
    const rte_ether_addr kSolicited{{0x33, 0x33, 0xff, 0x00, 0x00, 0x01}};
    const rte_ether_addr kGroupSrc{{0x03, 0x00, 0x00, 0x00, 0x00, 0x01}};
    const Bytes to_a = l2(kHostA, kHostB);  // known unicast g0 -> g1, source known on g0
    const Bytes flood = l2(kBroadcast, kHostB);
    const Bytes zeros = l2(kZero, kZero);  // the bench's frame: unknown unicast from 00:..:00
    std::vector<std::pair<std::string, In>> variants = {
        {"known unicast", {to_a, kG0}},
        {"known unicast to the ingress port", {l2(kHostB, kHostA), kG0}},
        {"known unicast, source moved", {to_a, kG2}},
        {"unknown unicast flood", {l2(kStranger, kHostB), kG0}},
        {"broadcast", {flood, kG0}},
        {"IPv4 multicast MAC", {l2(kMcast, kHostB, RTE_ETHER_TYPE_IPV4), kG0}},
        {"all-zero frame", {zeros, kG0}},
        {"source new", {l2(kBroadcast, kNew), kG1}},
        {"source multicast", {l2(kBroadcast, kGroupSrc), kG0}},
        {"another group", {l2(kHostC, kNew), kH0}},
        {"known in another group", {l2(kHostC, kHostB), kG0}},
        {"to the ingress port's MAC", {l2(port_mac(kG0), kHostB, RTE_ETHER_TYPE_IPV4), kG0}},
        {"to a member's MAC", {l2(port_mac(kG2), kHostB, 0x88b5), kG0}},
        {"IPv4 to a member's MAC",
         {eth_frame(port_mac(kG1), kHostB, RTE_ETHER_TYPE_IPV4,
                    ipv4_packet(ip4("10.0.10.9"), ip4("192.168.1.9"), IPPROTO_UDP,
                                udp_datagram(ip4("10.0.10.9"), ip4("192.168.1.9"), 1, 2,
                                             payload_of(20)))),
          kG0}},
        {"to another group's member MAC", {l2(port_mac(kH0), kHostB), kG0}},
        {"ARP broadcast", {eth_frame(kBroadcast, kHostB, RTE_ETHER_TYPE_ARP,
                                     arp_payload(RTE_ARP_OP_REQUEST, kHostB, ip4("10.0.10.30"),
                                                 kZeroMac, ip4("10.0.10.40"))),
                           kG0}},
        {"ARP unicast to a host", {eth_frame(kHostA, kHostB, RTE_ETHER_TYPE_ARP,
                                             arp_payload(RTE_ARP_OP_REPLY, kHostB,
                                                         ip4("10.0.10.30"), kHostA,
                                                         ip4("10.0.10.40"))),
                                   kG0}},
        {"ND to a solicited-node group", {l2(kSolicited, kHostB, RTE_ETHER_TYPE_IPV6), kG0}},
        {"VLAN-tagged", {l2(kHostA, kHostB, RTE_ETHER_TYPE_VLAN), kG0}},
        {"Ethernet header only", {l2(kHostA, kHostB, 0x88b5, 0), kG0}},
        {"runt", {Bytes(to_a.begin(), to_a.begin() + 13), kG0}},
        {"chained", {l2(kHostA, kHostB, 0x88b5, 60), kG0, 0, true}},
        {"chained, unreadable", {l2(kBroadcast, kHostB, 0x88b5, 60), kG0, 0, true, true}},
        {"routed port", {l2(kBroadcast, kHostB), kR0}},
        {"IPv4 to the switch, routed to g1",
         {eth_frame(port_mac(kG0), kHostB, RTE_ETHER_TYPE_IPV4,
                    ipv4_packet(ip4("10.0.10.9"), ip4("10.0.10.20"), IPPROTO_UDP,
                                udp_datagram(ip4("10.0.10.9"), ip4("10.0.10.20"), 1, 2,
                                             payload_of(20)))),
          kG0}},
        {"on a port beyond the snapshot", {flood, 30}},
    };
    for (const auto& [name, v] : variants) {
        both({v}, name + ", alone");
        both({{to_a, kG0}, {flood, kG0}, v, {zeros, kG0}, {to_a, kG0}}, name + ", in a burst");
        both({{flood, kG1}, v, v, {to_a, kG2}}, name + ", twice in a burst");
        both({{zeros, kG0}, {to_a, kG0}, v}, name + ", last in a burst (process_burst)", false);
        both({v, {to_a, kG0}, {flood, kG0}}, name + ", first in a burst");
    }
}

// A binding on any path keeps the bridged fast path off: a bridged binding's frames must meet
// classify and their feature, which only the general path runs.
TEST_F(FastPath, BridgedRunWaitsForNoBinding) {
    snap->features.scopes = dp::kScopeBridged;
    std::vector<rte_mbuf*> in = {mbuf(eth_frame(kBroadcast, kHostB, RTE_ETHER_TYPE_IPV4,
                                                payload_of(50)),
                                      kG0)};
    run(in);
    ASSERT_EQ(tx_count(kG1), 1);
    EXPECT_NE(pipeline::classified(ctx->tx[kG1].pkts[0]), nullptr)
        << "the general path classified it for the bridged binding";
    snap->features.scopes = 0;
    free_all_tx();
}

TEST_F(FastPath, TakesTheLeadingRunAndLeavesTheRestUntouched) {
    const uint32_t host = ip4("10.0.1.9");
    const Bytes via_gw = udp_from(kR0, host, ip4("192.168.1.9"));
    const Bytes local = udp_from(kR0, host, ip4("10.0.1.1"));
    std::vector<rte_mbuf*> in = {mbuf(via_gw, kR0), mbuf(via_gw, kR0), mbuf(local, kR0),
                                 mbuf(via_gw, kR0)};
    uint64_t bytes = 7;
    EXPECT_EQ(pipeline::ipv4_fast_path(*ctx, *snap, in.data(), 4, bytes), 2);
    EXPECT_EQ(bytes, 7 + 2 * via_gw.size()) << "the lengths of the frames it took, added";
    EXPECT_EQ(bytes_of(in[2]), local) << "the frame it stopped at is untouched";
    EXPECT_EQ(bytes_of(in[3]), via_gw) << "and so is every frame after it";
    ASSERT_EQ(tx_count(kR1), 2);
    for (uint16_t i = 0; i < 2; ++i) {
        const Bytes out = bytes_of(ctx->tx[kR1].pkts[i]);
        EXPECT_EQ(ctx->tx[kR1].pkts[i], in[i]) << "in arrival order";
        EXPECT_TRUE(same_mac(*reinterpret_cast<const rte_ether_addr*>(&out[0]), kNbR1Gw));
        EXPECT_TRUE(same_mac(*reinterpret_cast<const rte_ether_addr*>(&out[6]), port_mac(kR1)));
        EXPECT_EQ(out[kEthLen + 8], 63) << "TTL";
        EXPECT_TRUE(ref_checksum_ok(&out[kEthLen], kIpLen));
        // Nothing else moved: the ethertype and the header up to the TTL, the protocol, and
        // everything from the source address on.
        ASSERT_EQ(out.size(), via_gw.size());
        EXPECT_TRUE(std::equal(out.begin() + 12, out.begin() + kEthLen + 8, via_gw.begin() + 12));
        EXPECT_EQ(out[kEthLen + 9], via_gw[kEthLen + 9]);
        EXPECT_TRUE(std::equal(out.begin() + kEthLen + 12, out.end(), via_gw.begin() + kEthLen + 12));
    }
    EXPECT_EQ(ctx->counters.routed, 2u);
    EXPECT_EQ(pipeline::ipv4_fast_path(*ctx, *snap, in.data() + 2, 2, bytes), 0)
        << "a burst that starts with a local frame is all left to the general path";
    EXPECT_EQ(total_drops(), 0u);
    rte_pktmbuf_free_bulk(in.data() + 2, 2);
    free_all_tx();
}

}  // namespace
}  // namespace ina::test
