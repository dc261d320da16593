// SPDX-License-Identifier: Apache-2.0
// port_tx on real ethdevs: ring PMD ports whose TX ring the test owns, so it can see what was
// sent and make the PMD reject packets by giving it a tiny ring.
#include "pipeline/port_tx.h"

#include <rte_bus_vdev.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>

#include "pipeline/l2_bridge.h"
#include "stage_util.h"

namespace ina::test {
namespace {

class PortTx : public StageTest {
protected:
    struct RingPort {
        uint16_t id = 0;
        rte_ring* rx = nullptr;
        rte_ring* tx = nullptr;
    };

    // A started ring port whose TX ring holds exactly `tx_capacity` packets. With `loopback`
    // the TX ring is also the RX ring.
    RingPort make_port(unsigned tx_capacity, bool loopback = false) {
        RingPort p;
        const std::string id = std::to_string(unique_id());
        p.tx = rte_ring_create(("ptx" + id).c_str(), tx_capacity, SOCKET_ID_ANY,
                               RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
        p.rx = loopback ? p.tx
                        : rte_ring_create(("prx" + id).c_str(), 64, SOCKET_ID_ANY,
                                          RING_F_SP_ENQ | RING_F_SC_DEQ);
        EXPECT_NE(p.rx, nullptr);
        EXPECT_NE(p.tx, nullptr);
        const int port = rte_eth_from_rings(("rp" + id).c_str(), &p.rx, 1, &p.tx, 1, SOCKET_ID_ANY);
        EXPECT_GE(port, 0) << rte_strerror(rte_errno);
        p.id = static_cast<uint16_t>(port < 0 ? 0 : port);
        EXPECT_LT(p.id, dp::kMaxPorts);
        rte_eth_conf conf{};
        EXPECT_EQ(rte_eth_dev_configure(p.id, 1, 1, &conf), 0);
        EXPECT_EQ(rte_eth_rx_queue_setup(p.id, 0, 64, SOCKET_ID_ANY, nullptr, pool), 0);
        EXPECT_EQ(rte_eth_tx_queue_setup(p.id, 0, 64, SOCKET_ID_ANY, nullptr), 0);
        EXPECT_EQ(rte_eth_dev_start(p.id), 0);
        ports_.push_back(p);
        return p;
    }

    // Everything the PMD accepted, in order.
    static std::vector<rte_mbuf*> sent(const RingPort& p) {
        std::vector<rte_mbuf*> out;
        void* obj = nullptr;
        while (rte_ring_sc_dequeue(p.tx, &obj) == 0) {
            out.push_back(static_cast<rte_mbuf*>(obj));
        }
        return out;
    }

    rte_mbuf* packet(size_t len, uint8_t seed) {
        return mbuf(eth_frame(kHostA, kHostB, 0x88b5, payload_of(len - kEthLen, seed)), 0);
    }

    void TearDown() override {
        for (auto& p : ports_) {
            free_mbufs(sent(p));
            rte_eth_dev_stop(p.id);
            rte_eth_dev_close(p.id);
            if (p.rx != p.tx) {
                rte_ring_free(p.rx);
            }
            rte_ring_free(p.tx);
        }
        StageTest::TearDown();
    }

    std::vector<RingPort> ports_;
};

TEST_F(PortTx, FlushSendsInOrderAndCountsPacketsAndBytes) {
    const RingPort p = make_port(64);
    ctx->tx_enabled[p.id] = true;
    std::vector<rte_mbuf*> pkts;
    uint64_t bytes = 0;
    for (uint8_t i = 0; i < 5; ++i) {
        pkts.push_back(packet(60 + 100u * i, i));
        bytes += 60 + 100u * i;
        pipeline::tx_enqueue(*ctx, p.id, pkts.back());
    }
    EXPECT_EQ(tx_count(p.id), 5) << "below the burst size nothing is sent yet";
    EXPECT_EQ(rte_ring_count(p.tx), 0u);
    pipeline::tx_flush(*ctx, p.id);
    EXPECT_EQ(tx_count(p.id), 0);
    const auto& pc = ctx->counters.ports[p.id];
    EXPECT_EQ(pc.tx_packets, 5u);
    EXPECT_EQ(pc.tx_bytes, bytes);
    EXPECT_EQ(pc.tx_dropped, 0u);
    EXPECT_EQ(ctx->counters.tx_bursts, 1u);
    EXPECT_EQ(total_drops(), 0u);
    EXPECT_EQ(sent(p), pkts);
    free_mbufs(pkts);
    // The PMD agrees.
    rte_eth_stats st{};
    ASSERT_EQ(rte_eth_stats_get(p.id, &st), 0);
    EXPECT_EQ(st.opackets, 5u);
}

TEST_F(PortTx, FlushingAnEmptyBufferDoesNothing) {
    const RingPort p = make_port(64);
    ctx->tx_enabled[p.id] = true;
    pipeline::tx_flush(*ctx, p.id);
    pipeline::tx_flush_all(*ctx);
    EXPECT_EQ(ctx->counters.tx_bursts, 0u);
    EXPECT_EQ(ctx->counters.ports[p.id].tx_packets, 0u);
}

TEST_F(PortTx, RejectedPacketsAreFreedAndCounted) {
    const RingPort p = make_port(4);
    ctx->tx_enabled[p.id] = true;
    std::vector<rte_mbuf*> pkts;
    for (uint8_t i = 0; i < 7; ++i) {
        pkts.push_back(packet(100 + i, i));
        pipeline::tx_enqueue(*ctx, p.id, pkts.back());
    }
    pipeline::tx_flush(*ctx, p.id);
    const auto& pc = ctx->counters.ports[p.id];
    EXPECT_EQ(pc.tx_packets, 4u);
    EXPECT_EQ(pc.tx_bytes, 100u + 101 + 102 + 103) << "only accepted bytes count";
    EXPECT_EQ(pc.tx_dropped, 3u);
    EXPECT_EQ(drops(dp::DropReason::tx_full), 3u);
    EXPECT_EQ(tx_count(p.id), 0) << "rejected packets are not retried";
    EXPECT_EQ(in_use(), 4u) << "the 3 rejected mbufs went back to the pool";
    const auto accepted = sent(p);
    EXPECT_EQ(accepted, std::vector<rte_mbuf*>(pkts.begin(), pkts.begin() + 4));
    free_mbufs(accepted);
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(PortTx, FullBurstFlushesItself) {
    const RingPort p = make_port(64);
    ctx->tx_enabled[p.id] = true;
    ctx->burst_size = 4;
    for (uint8_t i = 0; i < 4; ++i) {
        pipeline::tx_enqueue(*ctx, p.id, packet(64, i));
    }
    EXPECT_EQ(tx_count(p.id), 0);
    EXPECT_EQ(rte_ring_count(p.tx), 4u);
    EXPECT_EQ(ctx->counters.ports[p.id].tx_packets, 4u);
    EXPECT_EQ(ctx->counters.tx_bursts, 1u);
    for (uint8_t i = 0; i < 3; ++i) {
        pipeline::tx_enqueue(*ctx, p.id, packet(64, i));
    }
    EXPECT_EQ(tx_count(p.id), 3);
    EXPECT_EQ(ctx->counters.tx_bursts, 1u);
}

TEST_F(PortTx, FlushAllTouchesOnlyEnabledPorts) {
    const RingPort a = make_port(64);
    const RingPort b = make_port(64);
    ctx->tx_enabled[a.id] = true;
    pipeline::tx_enqueue(*ctx, a.id, packet(80, 1));
    pipeline::tx_enqueue(*ctx, a.id, packet(80, 2));
    pipeline::tx_enqueue(*ctx, b.id, packet(80, 3));
    pipeline::tx_flush_all(*ctx);
    EXPECT_EQ(tx_count(a.id), 0);
    EXPECT_EQ(rte_ring_count(a.tx), 2u);
    EXPECT_EQ(ctx->counters.ports[a.id].tx_bytes, 160u);
    EXPECT_EQ(tx_count(b.id), 1) << "a disabled port keeps its buffer";
    EXPECT_EQ(rte_ring_count(b.tx), 0u);
    EXPECT_EQ(ctx->counters.tx_bursts, 1u);
}

TEST_F(PortTx, DisabledPortBufferNeverOverflows) {
    // Stage-test mode: the buffer is read directly, but it must not be written past its end.
    const uint16_t port = 20;
    ASSERT_FALSE(ctx->tx_enabled[port]);
    for (int i = 0; i < 70; ++i) {
        pipeline::tx_enqueue(*ctx, port, packet(64, static_cast<uint8_t>(i)));
    }
    EXPECT_EQ(ctx->tx[port + 1].count, 0) << "the next port's buffer was overwritten";
    EXPECT_EQ(ctx->counters.ports[port].tx_dropped + tx_count(port), 70u);
    EXPECT_LE(tx_count(port), pipeline::kMaxBurst);
    EXPECT_EQ(drops(dp::DropReason::tx_full), ctx->counters.ports[port].tx_dropped);
    EXPECT_EQ(in_use(), tx_count(port));
}

TEST_F(PortTx, FloodedMbufIsFreedOnceEveryPortHasSentIt) {
    // Three ring ports bridged in one group: a broadcast is one mbuf with two references, sent
    // by two real PMDs.
    const RingPort a = make_port(64);
    const RingPort b = make_port(64);
    const RingPort c = make_port(64);
    const std::string yaml = R"(version: 1
ports:
  - {name: a, devargs: x0, l2_group: lan}
  - {name: b, devargs: x1, l2_group: lan}
  - {name: c, devargs: x2, l2_group: lan}
)";
    build(yaml, {}, {},
          {{a.id, port_mac(a.id)}, {b.id, port_mac(b.id)}, {c.id, port_mac(c.id)}});
    for (const auto& p : {a, b, c}) {
        ctx->tx_enabled[p.id] = true;
    }
    rte_mbuf* m = mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(100)), b.id);
    pipeline::EdgeBatches<pipeline::BridgeEdge> out;
    pipeline::l2_bridge(*ctx, *snap, &m, 1, out);
    EXPECT_EQ(out.size(pipeline::BridgeEdge::drop), 0);
    pipeline::tx_flush_all(*ctx);
    EXPECT_EQ(ctx->counters.ports[a.id].tx_packets, 1u);
    EXPECT_EQ(ctx->counters.ports[c.id].tx_packets, 1u);
    EXPECT_EQ(ctx->counters.ports[b.id].tx_packets, 0u);
    EXPECT_EQ(ctx->counters.ports[a.id].tx_bytes, 114u);
    const auto sa = sent(a);
    const auto sc = sent(c);
    ASSERT_EQ(sa.size(), 1u);
    ASSERT_EQ(sc.size(), 1u);
    EXPECT_EQ(sa[0], m);
    EXPECT_EQ(sc[0], m);
    EXPECT_EQ(rte_ring_count(b.tx), 0u);
    rte_pktmbuf_free(sa[0]);  // port a's driver done with it
    EXPECT_EQ(in_use(), 1u);
    rte_pktmbuf_free(sc[0]);  // port c's driver done with it
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(PortTx, LoopbackDeliversTheBytes) {
    // A port whose TX ring is also its RX ring: what tx_flush sends comes back intact.
    const uint16_t pid = make_port(64, true).id;
    ctx->tx_enabled[pid] = true;
    const Bytes f = eth_frame(kHostA, kHostB, 0x88b5, payload_of(200, 9));
    pipeline::tx_enqueue(*ctx, pid, mbuf(f, 0));
    pipeline::tx_flush(*ctx, pid);
    rte_mbuf* back[4];
    const uint16_t n = rte_eth_rx_burst(pid, 0, back, 4);
    ASSERT_EQ(n, 1);
    EXPECT_EQ(bytes_of(back[0]), f);
    EXPECT_EQ(back[0]->port, pid);
    EXPECT_EQ(ctx->counters.ports[pid].tx_bytes, f.size());
    rte_pktmbuf_free(back[0]);
}

TEST_F(PortTx, NullPmdAcceptsAndFreesEverything) {
    // net_null created at run time through the vdev bus: it takes every packet and frees it.
    const std::string name = "net_null_st" + std::to_string(unique_id());
    ASSERT_EQ(rte_vdev_init(name.c_str(), ""), 0);
    uint16_t pid = 0;
    ASSERT_EQ(rte_eth_dev_get_port_by_name(name.c_str(), &pid), 0);
    ASSERT_LT(pid, dp::kMaxPorts);
    rte_eth_conf conf{};
    ASSERT_EQ(rte_eth_dev_configure(pid, 1, 1, &conf), 0);
    ASSERT_EQ(rte_eth_rx_queue_setup(pid, 0, 64, SOCKET_ID_ANY, nullptr, pool), 0);
    ASSERT_EQ(rte_eth_tx_queue_setup(pid, 0, 64, SOCKET_ID_ANY, nullptr), 0);
    ASSERT_EQ(rte_eth_dev_start(pid), 0);
    ctx->tx_enabled[pid] = true;
    ctx->burst_size = 8;
    uint64_t bytes = 0;
    for (uint8_t i = 0; i < 20; ++i) {
        bytes += 64 + i;
        pipeline::tx_enqueue(*ctx, pid, packet(64 + i, i));
    }
    EXPECT_EQ(tx_count(pid), 4) << "two full bursts went out by themselves";
    pipeline::tx_flush_all(*ctx);
    EXPECT_EQ(tx_count(pid), 0);
    EXPECT_EQ(ctx->counters.ports[pid].tx_packets, 20u);
    EXPECT_EQ(ctx->counters.ports[pid].tx_bytes, bytes);
    EXPECT_EQ(ctx->counters.ports[pid].tx_dropped, 0u);
    EXPECT_EQ(ctx->counters.tx_bursts, 3u);
    EXPECT_EQ(in_use(), 0u) << "the PMD freed what it sent";
    EXPECT_EQ(rte_eth_dev_stop(pid), 0);
    EXPECT_EQ(rte_eth_dev_close(pid), 0);
    EXPECT_EQ(rte_vdev_uninit(name.c_str()), 0);
}

}  // namespace
}  // namespace ina::test
