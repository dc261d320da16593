// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 server-to-switch stage (src/features/roce/datapath_roce.*) on mbufs through the
// whole pipeline: contributions from two ranks aggregate into one result WRITE per rank with
// the right sum, PSN and immediate; PSN gap, duplicate, bad ICRC, unknown QP, CE, result ACK,
// result loss and retransmission, back-pressure and chained input; chunks larger than the PMTU
// (RoceMultiPacket: multi-packet WRITEs both ways); and the aggregator role
// (datapath_roce_parent.*): a complete chunk goes up as one INA contribution, the parent's INA
// result comes down as the ranks' result WRITEs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "features/roce/compile_roce.h"
#include "features/roce/config_roce.h"
#include "features/roce/control_roce.h"
#include "features/roce/datapath_roce.h"
#include "ina/protocol.h"
#include "net/checksum.h"
#include "pipeline/ina_encode.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "roce/cm.h"
#include "roce/encode.h"
#include "roce/icrc.h"
#include "features/roce/metrics_roce.h"
#include "roce_states.h"
#include "stage_util.h"

namespace ina::test {
namespace {

namespace fr = features::roce;
namespace rc = ina::roce;

constexpr uint32_t kWorker1 = 0x0A000102;  // 10.0.1.2 on r0 (static neighbour)
constexpr uint32_t kWorker2 = 0x0A000202;  // 10.0.2.2 on r1 (static neighbour)
constexpr uint32_t kSwitch1 = 0x0A000101;
constexpr uint32_t kSwitch2 = 0x0A000201;
constexpr uint32_t kChunk = 64;            // 16 fp32
constexpr uint32_t kWindow = 4;
constexpr uint32_t kQpn1 = 0x100, kQpn2 = 0x101;
constexpr uint32_t kWorkerQpn1 = 17, kWorkerQpn2 = 18;
constexpr uint32_t kPsn1 = 1000, kPsn2 = 2000;
constexpr uint32_t kSwitchPsn = 5000;
constexpr uint64_t kResultAddr = 0x7f0000000000;

// Job 7 with static QPs for ranks 1 and 2 (the fixtures' QPs mirror them).
std::string roce_yaml(const std::string& dtype = "fp32", uint32_t chunk_bytes = 64,
                      uint32_t result_length = 1024) {
    const std::string qp_tail = ", result_addr: 0x7f0000000000, result_rkey: 0x1234, "
                                "result_length: " + std::to_string(result_length) + "}\n";
    return std::string(kStageYaml) + "rdma:\n  jobs:\n    - id: 7\n      world: 2\n" +
           "      op: sum\n      dtype: " + dtype + "\n      chunk_bytes: " +
           std::to_string(chunk_bytes) + "\n      window: 4\n      pmtu: 1024\n      qps:\n" +
           "        - {rank: 1, ip: 10.0.1.2, qpn: 17, psn: 1000, switch_qpn: 0x100, "
           "switch_psn: 5000" + qp_tail +
           "        - {rank: 2, ip: 10.0.2.2, qpn: 18, psn: 2000, switch_qpn: 0x101, "
           "switch_psn: 5000" + qp_tail;
}

void register_once() {
    static const bool ok = [] {
        return config::register_section(fr::section_hooks()) &&
               compile::register_extension(fr::compile_roce) &&
               pipeline::register_feature(fr::kFeatureRoce, fr::stage());
    }();
    ASSERT_TRUE(ok);
}

// A frame as the switch's port sees it, parsed back: IPv4 addresses and the RoCE packet.
struct Seen {
    uint32_t src = 0, dst = 0;
    uint8_t tos = 0;
    rc::Packet p;
    std::vector<uint8_t> payload;
    bool icrc_ok = false;
};

class RoceSwitch : public StageTest {
protected:
    // What the fixture's job is: its own root here, an aggregator in RoceAggregator.
    virtual std::string config_yaml() const { return roce_yaml(); }
    virtual fr::ParentParams parent_params() const { return {}; }
    virtual fr::JobParams job_params() const {
        return fr::JobParams{7, 2, reduce::Op::sum, reduce::ElemType::fp32, kChunk, kWindow};
    }

    void SetUp() override {
        register_once();
        StageTest::SetUp();
        ctx->pool = pool;
        build(config_yaml());
        job = std::make_unique<fr::JobState>(job_params(), parent_params());
        qp1 = make_qp(1, kWorker1, kSwitch1, kWorkerQpn1, kPsn1, kQpn1);
        qp2 = make_qp(2, kWorker2, kSwitch2, kWorkerQpn2, kPsn2, kQpn2);
        attach_roce_job(*ctx, *snap, *job, *qp1, *qp2);
    }
    void TearDown() override {
        detach_roce_job(*ctx);
        StageTest::TearDown();
    }

    std::unique_ptr<fr::QpState> make_qp(uint16_t rank, uint32_t worker, uint32_t sw,
                                         uint32_t wqpn, uint32_t wpsn, uint32_t sqpn) {
        fr::QpParams p;
        p.switch_qpn = sqpn;
        p.switch_psn = kSwitchPsn;
        p.switch_ip = sw;
        p.worker_qpn = wqpn;
        p.worker_psn = wpsn;
        p.worker_ip = worker;
        p.rank = rank;
        p.pmtu = 1024;
        p.result_addr = kResultAddr;
        p.result_rkey = 0x1234;
        p.result_length = std::max<uint64_t>(1024, uint64_t{job->params.chunk_bytes} * kWindow);
        p.timeout = 10;  // 4.2 ms
        p.area_addr = fr::kAreaAddr;
        p.area_rkey = fr::kAreaRkey;
        return std::make_unique<fr::QpState>(p, job.get());
    }

    // A worker's contribution: WRITE_ONLY_WITH_IMM of `values` for session sequence s.
    Bytes contribution(uint16_t rank, uint32_t psn, uint32_t s, const std::vector<float>& values,
                       uint8_t tos = 0x02, bool ack_req = true, uint32_t chunk = kChunk) {
        const bool one = rank == 1;
        rc::Ipv4Path path;
        path.src_ip = one ? kWorker1 : kWorker2;
        path.dst_ip = one ? switch1 : switch2;
        path.dest_qp = one ? kQpn1 : kQpn2;
        path.tos = tos;
        rc::Transmit tx;
        tx.opcode = rc::op::kWriteOnlyImm;
        tx.psn = psn;
        tx.ack_req = ack_req;
        tx.has_reth = true;
        tx.length = static_cast<uint32_t>(values.size() * 4);
        tx.reth = {fr::kAreaAddr + (s % kWindow) * chunk, fr::kAreaRkey, tx.length};
        tx.has_imm = true;
        tx.imm = s << 8 | 1;
        return frame(one, path, [&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx,
                                    reinterpret_cast<const uint8_t*>(values.data()));
        });
    }
    // The worker's ACK of the switch's result PSN.
    Bytes ack_of(uint16_t rank, uint32_t psn, uint8_t syndrome = rc::aeth::kAckUnlimited) {
        const bool one = rank == 1;
        rc::Ipv4Path path;
        path.src_ip = one ? kWorker1 : kWorker2;
        path.dst_ip = one ? switch1 : switch2;
        path.dest_qp = one ? kQpn1 : kQpn2;
        return frame(one, path, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, path, 1, rc::Reply{syndrome, psn, 1});
        });
    }
    template <typename Encode>
    Bytes frame(bool one, const rc::Ipv4Path&, Encode encode) {
        std::vector<uint8_t> buf(2048);
        const rte_ether_addr dst = port_mac(one ? kR0 : kR1);
        const rte_ether_addr src = one ? kNbR0Gw : kNbR1Gw;
        size_t l2 = rc::write_ethernet(buf.data(), buf.size(), dst.addr_bytes, src.addr_bytes);
        size_t l3 = encode(buf.data() + l2, buf.size() - l2);
        buf.resize(l2 + l3);
        return Bytes(buf.begin(), buf.end());
    }

    void run(const std::vector<rte_mbuf*>& ms) {
        std::vector<rte_mbuf*> v = ms;
        pipeline::process_burst(*ctx, *snap, v.data(), static_cast<uint16_t>(v.size()));
    }
    void send(const Bytes& f, uint16_t port) { run({mbuf(f, port)}); }

    // Everything sent on `port`, parsed.
    std::vector<Seen> seen(uint16_t port) {
        std::vector<Seen> out;
        for (rte_mbuf* m : take_tx(port)) {
            const Bytes b = bytes_of(m);
            rte_pktmbuf_free(m);
            Seen s;
            const uint8_t* ip = b.data() + 14;
            s.tos = ip[1];
            s.src = static_cast<uint32_t>(ip[12]) << 24 | ip[13] << 16 | ip[14] << 8 | ip[15];
            s.dst = static_cast<uint32_t>(ip[16]) << 24 | ip[17] << 16 | ip[18] << 8 | ip[19];
            const size_t ip_len = static_cast<size_t>(ip[2]) << 8 | ip[3];
            if ((ip[22] << 8 | ip[23]) == proto::kDefaultUdpPort) {
                inas.push_back(b);  // an INA datagram (the aggregator role's partials)
                continue;
            }
            const auto parsed = rc::parse(ip + 28, ip_len - 28);
            EXPECT_TRUE(parsed.packet.has_value());
            if (!parsed.packet) {
                continue;
            }
            s.p = *parsed.packet;
            s.payload.assign(ip + 28 + s.p.header_bytes,
                             ip + 28 + s.p.header_bytes + s.p.payload_bytes);
            s.icrc_ok = rc::icrc(ip, ip_len) == s.p.icrc;
            out.push_back(s);
        }
        return out;
    }
    static std::vector<float> floats(const std::vector<uint8_t>& b) {
        std::vector<float> v(b.size() / 4);
        std::memcpy(v.data(), b.data(), v.size() * 4);
        return v;
    }
    static std::vector<float> fill(float base) {
        std::vector<float> v(kChunk / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = base + static_cast<float>(i);
        }
        return v;
    }
    uint64_t lcore(fr::LcoreCounter c) const {
        return ctx->feature_counters[fr::kFeatureRoce][static_cast<size_t>(c)];
    }
    // The QP in feature slot `slot` (11: rank 1's, 12: rank 2's) leaves, as a DELETE detaches it.
    void leave(uint16_t slot) {
        pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fr::kFeatureRoce, slot,
                                                  ctx->feature_slots[slot].id, nullptr});
    }

    void advance_ms(uint64_t ms) {
        ctx->now_tsc += ms * ctx->tsc_hz / 1000;
        pipeline::service_timers(*ctx, *snap);
    }

    std::unique_ptr<fr::JobState> job;
    std::unique_ptr<fr::QpState> qp1, qp2;
    std::vector<Bytes> inas;  // INA frames seen() set aside
    // The switch addresses the workers' frames go to (each QP's source).
    uint32_t switch1 = kSwitch1, switch2 = kSwitch2;
};

TEST_F(RoceSwitch, InOrderWritesFromTwoRanksGiveOneResultPerRank) {
    for (uint32_t s = 0; s < 2; ++s) {
        send(contribution(1, kPsn1 + s, s, fill(static_cast<float>(s))), kR0);
        auto r0 = seen(kR0);
        ASSERT_EQ(r0.size(), 1u) << "rank 1's contribution is ACKed, nothing else yet";
        EXPECT_EQ(r0[0].p.bth.opcode, rc::op::kAcknowledge);
        EXPECT_EQ(r0[0].p.bth.psn, kPsn1 + s);
        EXPECT_EQ(r0[0].p.bth.dest_qp, kWorkerQpn1);
        EXPECT_EQ(r0[0].src, kSwitch1);
        EXPECT_TRUE(r0[0].icrc_ok);

        send(contribution(2, kPsn2 + s, s, fill(100.0f)), kR1);
        for (const uint16_t port : {kR0, kR1}) {
            auto out = seen(port);
            const Seen* result = nullptr;
            for (const auto& x : out) {
                if (x.p.bth.opcode == rc::op::kWriteOnlyImm) {
                    EXPECT_EQ(result, nullptr) << "one result per rank";
                    result = &x;
                }
            }
            ASSERT_NE(result, nullptr) << "port " << port;
            EXPECT_EQ(result->p.bth.psn, kSwitchPsn + s) << "the switch's send PSNs run on";
            EXPECT_EQ(result->p.bth.dest_qp, port == kR0 ? kWorkerQpn1 : kWorkerQpn2);
            EXPECT_EQ(result->p.imm, s << 8 | 2) << "session sequence and world";
            EXPECT_EQ(result->p.reth.va, kResultAddr + s * kChunk);
            EXPECT_EQ(result->p.reth.rkey, 0x1234u);
            EXPECT_TRUE(result->icrc_ok);
            const auto sum = floats(result->payload);
            ASSERT_EQ(sum.size(), kChunk / 4);
            for (size_t i = 0; i < sum.size(); ++i) {
                EXPECT_EQ(sum[i], static_cast<float>(s) + 100.0f + 2.0f * static_cast<float>(i));
            }
        }
    }
    EXPECT_EQ(qp1->counters.contributions, 2u);
    EXPECT_EQ(qp2->counters.results_sent, 2u);
}

TEST_F(RoceSwitch, PsnGapGivesExactlyOneNakSequence) {
    send(contribution(1, kPsn1 + 1, 1, fill(1)), kR0);
    send(contribution(1, kPsn1 + 2, 2, fill(1)), kR0);
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u) << "one NAK per gap, the next packet of the gap is dropped";
    EXPECT_EQ(out[0].p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kNakPsnSequence);
    EXPECT_EQ(out[0].p.bth.psn, kPsn1);
    EXPECT_EQ(qp1->counters.naks_sent, 1u);
    EXPECT_EQ(qp1->counters.out_of_sequence, 1u) << "the gap's next packet, dropped as RC does";
    EXPECT_EQ(qp1->counters.refused, 0u) << "loss is no refusal";
    EXPECT_EQ(job->table.in_use(), 0u) << "nothing out of order was added";
}

TEST_F(RoceSwitch, DuplicateIsReAckedAndNotAddedTwice) {
    const Bytes c = contribution(1, kPsn1, 0, fill(1));
    send(c, kR0);
    send(c, kR0);
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[1].p.bth.psn, kPsn1);
    EXPECT_EQ(qp1->counters.duplicates, 1u);
    EXPECT_EQ(qp1->counters.contributions, 1u);
    send(contribution(2, kPsn2, 0, fill(0)), kR1);
    for (const auto& x : seen(kR1)) {
        if (x.p.bth.opcode == rc::op::kWriteOnlyImm) {
            EXPECT_EQ(floats(x.payload)[3], 2.0f * 3.0f + 1.0f) << "rank 1 counted once";
        }
    }
    free_mbufs(take_tx(kR0));
}

TEST_F(RoceSwitch, BadIcrcIsDroppedAndCounted) {
    Bytes c = contribution(1, kPsn1, 0, fill(1));
    c[c.size() - 10] ^= 0x01;  // a payload bit
    send(c, kR0);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(qp1->counters.icrc_errors, 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::icrc_error), 1u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1);
}

TEST_F(RoceSwitch, UnknownQpAndCmWithoutRingAreDroppedAndCounted) {
    Bytes c = contribution(1, kPsn1, 0, fill(1));
    // Rewrite DestQP (BTH bytes 5..7 after Eth 14 + IP 20 + UDP 8) and recompute the ICRC.
    c[14 + 28 + 7] = 0x55;
    rc::write_icrc(c.data() + c.size(), rc::icrc(c.data() + 14, c.size() - 14));
    send(c, kR0);
    c[14 + 28 + 5] = 0;
    c[14 + 28 + 6] = 0;
    c[14 + 28 + 7] = 1;
    send(c, kR0);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(lcore(fr::LcoreCounter::unknown_qp), 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::cm_unsupported), 1u);
}

TEST_F(RoceSwitch, CmMadsGoToTheControlRingChecked) {
    rte_ring* cm_ring = rte_ring_create(("rcm" + std::to_string(unique_id())).c_str(), 4, SOCKET_ID_ANY,
                                     RING_F_SP_ENQ | RING_F_SC_DEQ);  // room for 3
    ASSERT_NE(cm_ring, nullptr);
    auto* view = static_cast<fr::RoceView*>(snap->feature_views[fr::kFeatureRoce].get());
    view->cm_rings.assign(1, cm_ring);  // worker index 0
    auto mad = [&](uint32_t comm_id) {
        rc::cm::Message m;
        m.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::req);
        m.req.local_comm_id = comm_id;
        rc::Ipv4Path path;
        path.src_ip = kWorker1;
        path.dst_ip = kSwitch1;
        path.dest_qp = fr::kCmQpn;
        return frame(true, path, [&](uint8_t* out, size_t cap) {
            return rc::cm::encode_packet(out, cap, path, 1, 0, m);
        });
    };
    send(mad(1), kR0);
    EXPECT_EQ(rte_ring_count(cm_ring), 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::cm_received), 1u);
    Bytes bad = mad(2);
    bad[bad.size() - 5] ^= 0x01;  // the MAD's last byte
    send(bad, kR0);
    EXPECT_EQ(lcore(fr::LcoreCounter::icrc_error), 1u);
    EXPECT_EQ(rte_ring_count(cm_ring), 1u);
    // An RC WRITE to QP1 is no MAD.
    Bytes c = contribution(1, kPsn1, 0, fill(1));
    c[14 + 28 + 5] = 0;
    c[14 + 28 + 6] = 0;
    c[14 + 28 + 7] = 1;
    rc::write_icrc(c.data() + c.size(), rc::icrc(c.data() + 14, c.size() - 14));
    send(c, kR0);
    EXPECT_EQ(lcore(fr::LcoreCounter::cm_unsupported), 1u);
    // The ring full: dropped and counted, never waited on.
    send(mad(3), kR0);
    send(mad(4), kR0);
    send(mad(5), kR0);
    EXPECT_EQ(rte_ring_count(cm_ring), 3u);
    EXPECT_EQ(lcore(fr::LcoreCounter::cm_received), 3u);
    EXPECT_EQ(lcore(fr::LcoreCounter::cm_full), 1u);
    EXPECT_EQ(total_tx(), 0u);
    // What reached the ring is the frame itself, in order.
    rte_mbuf* got[3];
    ASSERT_EQ(rte_ring_sc_dequeue_burst(cm_ring, reinterpret_cast<void**>(got), 3, nullptr), 3u);
    EXPECT_EQ(bytes_of(got[0]), mad(1));
    EXPECT_EQ(bytes_of(got[2]), mad(4));
    for (rte_mbuf* m : got) {
        rte_pktmbuf_free(m);
    }
    view->cm_rings.clear();
    rte_ring_free(cm_ring);
}

TEST_F(RoceSwitch, CeMarkedContributionEarnsOneCnp) {
    send(contribution(1, kPsn1, 0, fill(1), 0x03), kR0);
    send(contribution(1, kPsn1 + 1, 1, fill(1), 0x03), kR0);  // within the CNP interval
    int cnps = 0;
    for (const auto& x : seen(kR0)) {
        if (x.p.bth.opcode == rc::op::kCnp) {
            ++cnps;
            EXPECT_EQ(x.p.bth.dest_qp, kWorkerQpn1);
            EXPECT_TRUE(x.p.bth.becn);
            EXPECT_TRUE(x.icrc_ok);
        }
    }
    EXPECT_EQ(cnps, 1);
    EXPECT_EQ(qp1->counters.cnps_sent, 1u);
}

TEST_F(RoceSwitch, AckOfEveryRankReleasesTheSlot) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(1)), kR1);
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    EXPECT_EQ(job->table.in_use(), 1u) << "the result is kept until acknowledged";
    send(ack_of(1, kSwitchPsn), kR0);
    EXPECT_EQ(job->table.in_use(), 1u) << "rank 2 has not acknowledged";
    send(ack_of(2, kSwitchPsn), kR1);
    EXPECT_EQ(job->table.in_use(), 0u);
    EXPECT_EQ(job->results_released, 1u);
    EXPECT_EQ(qp1->counters.acks_received, 1u);
}

TEST_F(RoceSwitch, LostResultIsRetransmittedAfterTheTimeout) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    free_mbufs(take_tx(kR0));  // rank 1's result is lost
    send(ack_of(2, kSwitchPsn), kR1);
    free_mbufs(take_tx(kR1));
    advance_ms(1);
    EXPECT_EQ(tx_count(kR0), 0u) << "not before the ACK timeout (4.2 ms)";
    advance_ms(10);
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(out[0].p.bth.psn, kSwitchPsn);
    EXPECT_EQ(floats(out[0].payload)[0], 3.0f);
    EXPECT_EQ(qp1->counters.retransmissions, 1u);
    EXPECT_EQ(tx_count(kR1), 0u) << "rank 2 acknowledged: nothing again";
}

TEST_F(RoceSwitch, BusySlotGivesRnrNak) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(1)), kR1);  // complete, kept until acknowledged
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    // s = window maps to the same slot, which still holds s = 0.
    for (uint32_t s = 1; s < kWindow; ++s) {
        send(contribution(1, kPsn1 + s, s, fill(1)), kR0);
    }
    free_mbufs(take_tx(kR0));
    send(contribution(1, kPsn1 + kWindow, kWindow, fill(1)), kR0);
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(rc::aeth::kind(out[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
    EXPECT_EQ(out[0].p.bth.psn, kPsn1 + kWindow);
    EXPECT_EQ(qp1->counters.rnr_naks_sent, 1u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1 + kWindow) << "nothing advanced";
}

// The failure notice rank 2 is sent when rank `failed`'s QP failed the session: a zero-length
// WRITE ONLY with immediate to the result ring's start, count 0, the rank and the reason.
void expect_failure_notice(const std::vector<Seen>& out, uint16_t failed, uint8_t failure,
                           uint32_t psn) {
    ASSERT_EQ(out.size(), 1u);
    const Seen& n = out[0];
    EXPECT_EQ(n.p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(n.p.bth.psn, psn);
    EXPECT_EQ(n.p.imm, rdma::failure_notice_imm(failed, failure));
    EXPECT_EQ(n.p.imm & 0xFF, 0u) << "count 0: no result";
    EXPECT_EQ(n.p.reth.va, kResultAddr);
    EXPECT_EQ(n.p.reth.dma_len, 0u);
    EXPECT_TRUE(n.payload.empty());
    EXPECT_TRUE(n.icrc_ok);
}

// One state per QP: the result side out of retries (a worker that stopped answering) takes the
// QP into error, so the worker's next WRITE is answered with NAK remote operational error
// (which ends the worker's QP: rxe would retransmit a dropped one until its deadline) rather
// than taken or RNR-NAKed, what follows is dropped, and nothing more is sent. The job's
// session cannot complete without the
// rank: the other rank is sent a failure notice (reliably: resent until acknowledged) and its
// WRITEs are dropped from then on.
TEST_F(RoceSwitch, ResultSideOutOfRetriesPutsTheWholeQpInErrorAndFailsTheSession) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    free_mbufs(take_tx(kR0));  // rank 1's result is lost, and so is every resend of it
    send(ack_of(2, kSwitchPsn), kR1);
    free_mbufs(take_tx(kR1));
    for (int i = 0; i < 10 && fr::qp_state_code(*qp1) == 0; ++i) {
        advance_ms(5);  // one ACK timeout (4.2 ms) each
        free_mbufs(take_tx(kR0));
    }
    ASSERT_EQ(fr::qp_state_code(*qp1), 2) << "the result side is in error";
    EXPECT_EQ(qp1->counters.retransmissions, 7u) << "retry_cnt 7: the eighth timeout ends it";
    EXPECT_EQ(job->failed_rank, 1u);
    EXPECT_EQ(fr::session_failure_name(job->failure), "retry_exceeded");
    send(contribution(1, kPsn1 + 1, 1, fill(1)), kR0);
    auto nak = seen(kR0);
    ASSERT_EQ(nak.size(), 1u) << "one NAK, no ACK, no RNR NAK";
    EXPECT_EQ(nak[0].p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(nak[0].p.aeth.syndrome, rc::aeth::kNakRemoteOperational);
    EXPECT_EQ(nak[0].p.bth.psn, kPsn1 + 1);
    EXPECT_EQ(fr::qp_state_code(*qp1), 3) << "both sides in error";
    send(contribution(1, kPsn1 + 1, 1, fill(1)), kR0);
    EXPECT_EQ(tx_count(kR0), 0u) << "after the NAK the QP drops what comes";
    EXPECT_EQ(qp1->counters.dropped_in_error, 2u);
    EXPECT_EQ(qp1->counters.contributions, 1u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1 + 1) << "nothing advanced";
    advance_ms(1);  // rank 2's QP's own tick sends its notice
    ASSERT_NO_FATAL_FAILURE(expect_failure_notice(
        seen(kR1), 1, static_cast<uint8_t>(rc::RequesterError::retry_exceeded), kSwitchPsn + 1));
    EXPECT_EQ(qp2->counters.failure_notices, 1u);
    EXPECT_EQ(qp2->counters.results_sent, 1u) << "the notice is no result";
    advance_ms(5);
    ASSERT_NO_FATAL_FAILURE(expect_failure_notice(
        seen(kR1), 1, static_cast<uint8_t>(rc::RequesterError::retry_exceeded), kSwitchPsn + 1))
        << "not acknowledged: sent again";
    send(ack_of(2, kSwitchPsn + 1), kR1);
    EXPECT_EQ(qp2->requester.completed_messages(), 2u);
    send(contribution(2, kPsn2 + 1, 1, fill(2)), kR1);
    EXPECT_EQ(tx_count(kR1), 0u) << "the failed session takes nothing more";
    EXPECT_EQ(qp2->counters.dropped_session_failed, 1u);
    EXPECT_EQ(qp2->counters.dropped_in_error, 0u) << "rank 2's QP itself is not in error";
    EXPECT_EQ(fr::qp_state_code(*qp2), 0);
    advance_ms(50);
    EXPECT_EQ(tx_count(kR0), 0u) << "and rank 1's QP sends nothing more";
    EXPECT_EQ(tx_count(kR1), 0u);
}

// ... and the receive side in error (it NAKed a fatal error) stops the QP's results, and fails
// the session the same way, in the burst that saw it.
TEST_F(RoceSwitch, ReceiveSideInErrorSendsNoMoreResultsAndFailsTheSession) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    free_mbufs(take_tx(kR0));
    // A WRITE beyond the area (chunk 1 at a 1 MiB stride): NAK remote access error.
    send(contribution(1, kPsn1 + 1, 1, fill(1), 0x02, true, 1u << 20), kR0);
    auto nak = seen(kR0);
    ASSERT_EQ(nak.size(), 1u);
    EXPECT_EQ(nak[0].p.aeth.syndrome, rc::aeth::kNakRemoteAccess);
    EXPECT_EQ(fr::qp_state_code(*qp1), 1) << "the receive side is in error";
    EXPECT_EQ(job->failed_rank, 1u);
    EXPECT_EQ(fr::session_failure_name(job->failure), "fatal_nak_sent");
    ASSERT_NO_FATAL_FAILURE(
        expect_failure_notice(seen(kR1), 1, rdma::kFailureReceiveSide, kSwitchPsn));
    send(contribution(2, kPsn2, 0, fill(2)), kR1);  // would complete chunk 0
    EXPECT_EQ(tx_count(kR1), 0u) << "dropped: neither ACKed nor a result";
    EXPECT_EQ(tx_count(kR0), 0u) << "rank 1's QP is in error: nothing goes to it";
    EXPECT_EQ(job->results_completed, 0u);
    EXPECT_EQ(qp2->counters.dropped_session_failed, 1u);
    advance_ms(50);
    EXPECT_EQ(tx_count(kR0), 0u);
    free_mbufs(take_tx(kR1));  // the unacknowledged notice, sent again
}

// Liveness: a worker silent for a second while its job holds slots, with nothing in flight to
// it, is probed with a zero-length WRITE (no immediate). A live one's NIC acknowledges it; a
// dead one's QP (destroyed with its process) does not, its QP here runs out of retries and the
// session fails, as when a result goes unacknowledged.
TEST_F(RoceSwitch, ASilentRankIsProbedAndADeadOneFailsTheSession) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);  // chunk 0 waits for rank 2
    free_mbufs(take_tx(kR0));
    advance_ms(1);  // the QPs' first tick: silence counts from here
    advance_ms(900);
    EXPECT_EQ(tx_count(kR0) + tx_count(kR1), 0u) << "not before a second of silence";
    advance_ms(200);
    for (auto [port, qp, rank, psn] : {std::tuple{kR0, qp1.get(), 1, kSwitchPsn},
                                       std::tuple{kR1, qp2.get(), 2, kSwitchPsn}}) {
        auto out = seen(port);
        ASSERT_EQ(out.size(), 1u) << "rank " << rank << " probed";
        EXPECT_EQ(out[0].p.bth.opcode, rc::op::kWriteOnly);
        EXPECT_EQ(out[0].p.bth.psn, psn);
        EXPECT_EQ(out[0].p.reth.va, kResultAddr);
        EXPECT_EQ(out[0].p.reth.dma_len, 0u);
        EXPECT_TRUE(out[0].payload.empty());
        EXPECT_TRUE(out[0].icrc_ok);
        EXPECT_EQ(qp->counters.probes_sent, 1u);
    }
    send(ack_of(1, kSwitchPsn), kR0);  // rank 1 is alive
    EXPECT_EQ(job->table.in_use(), 1u) << "a probe's ACK releases nothing";
    EXPECT_EQ(job->table.counters()[agg::AckVerdict::duplicate], 0u);
    for (int i = 0; i < 10 && fr::qp_state_code(*qp2) == 0; ++i) {
        advance_ms(5);  // rank 2 never answers: one ACK timeout (4.2 ms) each
        free_mbufs(take_tx(kR1));
    }
    ASSERT_EQ(fr::qp_state_code(*qp2), 2) << "rank 2's QP ran out of retries";
    EXPECT_EQ(job->failed_rank, 2u);
    EXPECT_EQ(fr::session_failure_name(job->failure), "retry_exceeded");
    ASSERT_NO_FATAL_FAILURE(expect_failure_notice(
        seen(kR0), 2, static_cast<uint8_t>(rc::RequesterError::retry_exceeded), kSwitchPsn + 1));
}

// ... a live silent worker answers each probe, nothing fails, and it is probed again only
// after another second of silence; a job that holds no slot probes nobody.
TEST_F(RoceSwitch, ALiveSilentRankAnswersItsProbesAndAnIdleJobProbesNobody) {
    advance_ms(1);
    advance_ms(2500);
    EXPECT_EQ(tx_count(kR0) + tx_count(kR1), 0u) << "no slot held: no probe";
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    free_mbufs(take_tx(kR0));
    advance_ms(1100);
    ASSERT_EQ(seen(kR0).size(), 1u);
    ASSERT_EQ(seen(kR1).size(), 1u);
    send(ack_of(1, kSwitchPsn), kR0);
    send(ack_of(2, kSwitchPsn), kR1);
    advance_ms(600);
    EXPECT_EQ(tx_count(kR0) + tx_count(kR1), 0u) << "heard from 0.6 s ago: not yet";
    advance_ms(500);
    EXPECT_EQ(seen(kR0).size(), 1u) << "silent for 1.1 s again: probed again";
    EXPECT_EQ(seen(kR1).size(), 1u);
    send(ack_of(1, kSwitchPsn + 1), kR0);
    send(ack_of(2, kSwitchPsn + 1), kR1);
    EXPECT_EQ(qp1->counters.probes_sent, 2u);
    EXPECT_EQ(job->failed_rank, 0u);
    EXPECT_EQ(fr::qp_state_code(*qp1) + fr::qp_state_code(*qp2), 0);
    send(contribution(2, kPsn2, 0, fill(2)), kR1);  // chunk 0 completes as ever
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(out[0].p.bth.psn, kSwitchPsn + 2);
    EXPECT_EQ(floats(out[0].payload)[0], 3.0f);
    free_mbufs(take_tx(kR1));
}

// A rank whose QP leaves (DELETE, disconnect) while the other stays: behind the others (they
// went beyond its last chunk) it fails the session at once; ...
TEST_F(RoceSwitch, ARankThatLeavesBehindTheOthersFailsTheSession) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    send(contribution(2, kPsn2 + 1, 1, fill(2)), kR1);  // chunk 1 waits for rank 1
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    leave(11);  // rank 1's QP
    EXPECT_EQ(job->failed_rank, 1u);
    EXPECT_EQ(fr::session_failure_name(job->failure), "rank_left");
    advance_ms(1);  // rank 2's tick sends the notice, behind chunk 0's result
    ASSERT_NO_FATAL_FAILURE(
        expect_failure_notice(seen(kR1), 1, rdma::kFailureRankLeft, kSwitchPsn + 1));
}

// ... level with them (its last call done, the others finishing theirs) nothing fails: every
// chunk they still send it contributed to; the first chunk beyond its last fails the session.
TEST_F(RoceSwitch, ARankThatLeavesAfterItsLastChunkFailsTheSessionOnlyWhenOthersGoBeyond) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    send(contribution(1, kPsn1 + 1, 1, fill(1)), kR0);
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    leave(11);
    EXPECT_EQ(job->failed_rank, 0u);
    send(contribution(2, kPsn2 + 1, 1, fill(2)), kR1);  // chunk 1: rank 1's is in
    auto out = seen(kR1);
    ASSERT_EQ(out.size(), 2u) << "an ACK and chunk 1's result";
    EXPECT_EQ(floats(out[1].payload)[0], 3.0f);
    EXPECT_EQ(job->results_completed, 2u);
    send(contribution(2, kPsn2 + 2, 2, fill(2)), kR1);  // chunk 2: rank 1 never sends it
    EXPECT_EQ(job->failed_rank, 1u);
    EXPECT_EQ(fr::session_failure_name(job->failure), "rank_left");
    EXPECT_EQ(qp2->counters.dropped_session_failed, 1u) << "not taken, not ACKed";
    out = seen(kR1);
    ASSERT_FALSE(out.empty());
    ASSERT_NO_FATAL_FAILURE(expect_failure_notice({out.back()}, 1, rdma::kFailureRankLeft,
                                                  kSwitchPsn + 2));
}

TEST_F(RoceSwitch, ChainedContributionAggregates) {
    const Bytes c1 = contribution(1, kPsn1, 0, fill(1));
    run({chained(c1, kR0, {20, 40, 13})});
    send(contribution(2, kPsn2, 0, fill(1)), kR1);
    bool got = false;
    for (const auto& x : seen(kR1)) {
        if (x.p.bth.opcode == rc::op::kWriteOnlyImm) {
            got = true;
            EXPECT_EQ(floats(x.payload)[5], 12.0f);
        }
    }
    EXPECT_TRUE(got);
    free_mbufs(take_tx(kR0));
}

TEST_F(RoceSwitch, RoceBetweenOtherHostsPassesUntouched) {
    Bytes c = contribution(1, kPsn1, 0, fill(1));
    // To 10.0.2.7 (a learned host on r1) instead of the switch: routed, not terminated.
    c[14 + 16] = 10, c[14 + 17] = 0, c[14 + 18] = 2, c[14 + 19] = 7;
    uint16_t sum = 0;
    c[14 + 10] = 0, c[14 + 11] = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < 20; i += 2) {
        acc += static_cast<uint32_t>(c[14 + i]) << 8 | c[14 + i + 1];
    }
    while (acc >> 16) {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    sum = static_cast<uint16_t>(~acc);
    c[14 + 10] = static_cast<uint8_t>(sum >> 8), c[14 + 11] = static_cast<uint8_t>(sum);
    send(c, kR0);
    EXPECT_EQ(tx_count(kR1), 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::passed), 1u);
    EXPECT_EQ(qp1->counters.packets_in, 0u);
}

TEST_F(RoceSwitch, PacketOnAnotherLcoreIsHandedToTheJobsHome) {
    rte_ring* to_home = rte_ring_create(("rh" + std::to_string(unique_id())).c_str(), 64,
                                        SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(to_home, nullptr);
    ctx->n_workers = 2;
    ctx->worker_index = 1;  // the job's home is worker 0 (the view's home)
    ctx->handoff[0] = to_home;
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(lcore(fr::LcoreCounter::handed_off), 1u);
    EXPECT_EQ(qp1->counters.packets_in, 0u) << "the home lcore counts it";
    rte_mbuf* m = nullptr;
    ASSERT_EQ(rte_ring_sc_dequeue(to_home, reinterpret_cast<void**>(&m)), 0);
    ctx->worker_index = 0;
    ctx->handoff[0] = nullptr;
    run({m});
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn1) << "the home lcore took and ACKed it";
    EXPECT_EQ(qp1->counters.contributions, 1u);
    rte_ring_free(to_home);
}

// r1 answers on 10.0.2.1/24 and the secondary 10.0.3.1/24: rank 2 (10.0.2.2) names the second
// as its QP's `source`, rank 1 names none. The QPs are built from the loaded config as the
// control plane builds them (qp_params), so what leaves is what the config says.
constexpr uint32_t kSecondary2 = 0x0A000301;  // 10.0.3.1 on r1

class RoceSecondAddress : public RoceSwitch {
protected:
    std::string config_yaml() const override {
        std::string y = roce_yaml();
        const std::string rank2 = "ip: 10.0.2.2,";
        y.replace(y.find(rank2), rank2.size(), "ip: 10.0.2.2, source: 10.0.3.1,");
        return y;
    }
    void SetUp() override {
        RoceSwitch::SetUp();
        detach_roce_job(*ctx);
        auto r = config::load_string(config_yaml(), "t.yaml");
        ASSERT_TRUE(r.ok()) << r.error_text();
        const fr::JobConfig& j = fr::rdma_of(*r.config)->jobs.at(0);
        qp1 = std::make_unique<fr::QpState>(fr::qp_params(*r.config, j, j.qps.at(0)), job.get());
        qp2 = std::make_unique<fr::QpState>(fr::qp_params(*r.config, j, j.qps.at(1)), job.get());
        attach_roce_job(*ctx, *snap, *job, *qp1, *qp2);
        switch2 = kSecondary2;
    }
};

TEST_F(RoceSecondAddress, AckAndResultLeaveFromTheQpsSourceAndTheFirstAddressWithoutOne) {
    send(contribution(1, kPsn1, 0, fill(1)), kR0);
    auto r0 = seen(kR0);
    ASSERT_EQ(r0.size(), 1u);
    EXPECT_EQ(r0[0].src, kSwitch1) << "no source: the address whose subnet holds the worker";
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    const auto r1 = seen(kR1);
    ASSERT_EQ(r1.size(), 2u) << "rank 2's ACK and its result WRITE";
    for (const auto& x : r1) {
        EXPECT_EQ(x.src, kSecondary2) << "opcode " << int{x.p.bth.opcode};
        EXPECT_EQ(x.dst, kWorker2);
        EXPECT_EQ(x.p.bth.dest_qp, kWorkerQpn2);
        EXPECT_TRUE(x.icrc_ok) << "the ICRC covers the source address";
    }
    const bool ack_first = r1[0].p.bth.opcode == rc::op::kAcknowledge;
    const Seen& ack = r1[ack_first ? 0 : 1];
    const Seen& result = r1[ack_first ? 1 : 0];
    EXPECT_EQ(ack.p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(ack.p.bth.psn, kPsn2);
    EXPECT_EQ(result.p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(floats(result.payload)[1], 1.0f + 2.0f + 2.0f * 1.0f);
    r0 = seen(kR0);
    ASSERT_EQ(r0.size(), 1u);
    EXPECT_EQ(r0[0].p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(r0[0].src, kSwitch1);
    EXPECT_TRUE(r0[0].icrc_ok);
}

// The worker's RC connected to (address, QPN): the QPN at the port's other address is not its.
TEST_F(RoceSecondAddress, WriteToTheQpnAtAnotherSwitchAddressIsDroppedAndCounted) {
    switch2 = kSwitch2;
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(lcore(fr::LcoreCounter::wrong_address), 1u);
    EXPECT_EQ(qp2->counters.packets_in, 0u);
    EXPECT_EQ(job->table.in_use(), 0u);
    switch2 = kSecondary2;
    send(contribution(2, kPsn2, 0, fill(2)), kR1);
    EXPECT_EQ(seen(kR1).size(), 1u) << "at its source: ACKed";
    EXPECT_EQ(qp2->counters.contributions, 1u);
}

// Multi-packet chunks (docs/rdma.md "Multi-packet chunks"): job 7 with int32 chunks of 4096
// bytes at PMTU 1024, so every contribution is WRITE FIRST, MIDDLE, MIDDLE, LAST_WITH_IMM as
// rxe sends it (RETH on FIRST only, the immediate on LAST only, AckReq on LAST), and every
// result goes back to each rank as the same four packets with consecutive PSNs.
// 1 KiB fp32 chunks (256 elements): the adds that carry the next packet's ICRC check
// (datapath_roce.cc "Hiding the ICRC check"; on a CPU with VPCLMULQDQ) run here.
// A deterministic job (`deterministic: true`, fraction bits 32): the slots add exact int64 fixed
// point, so a result is RN_fp32(sum of round_half_even(x * 2^32) * 2^-32) whatever the order of
// the ranks' chunks (src/reduce/README.md "Deterministic mode"), not the float sum.
class RoceDeterministic : public RoceSwitch {
protected:
    std::string config_yaml() const override {
        std::string y = roce_yaml();
        const std::string pmtu = "      pmtu: 1024\n";
        y.replace(y.find(pmtu), pmtu.size(), pmtu + "      deterministic: true\n");
        return y;
    }
    fr::JobParams job_params() const override {
        fr::JobParams p{7, 2, reduce::Op::sum, reduce::ElemType::fp32, kChunk, kWindow};
        p.deterministic = true;
        p.fraction_bits = 32;
        return p;
    }
    // The fixed-point result, computed here without the reduce kernels: every quantized value
    // and the sum are below 2^53, so the doubles are exact and the float conversion rounds once.
    static float fixed_sum(float a, float b) {
        const auto q = [](float x) {
            return static_cast<int64_t>(std::nearbyint(static_cast<double>(x) * 0x1p32));
        };
        return static_cast<float>(static_cast<double>(q(a) + q(b)) * 0x1p-32);
    }
    // Rank `first`'s chunk s, then the other's; every result WRITE's elements (both ranks').
    std::vector<std::vector<float>> chunk(uint32_t s, uint16_t first, const std::vector<float>& a,
                                          const std::vector<float>& b) {
        const Bytes one = contribution(1, kPsn1 + s, s, a);
        const Bytes two = contribution(2, kPsn2 + s, s, b);
        if (first == 1) {
            send(one, kR0);
            send(two, kR1);
        } else {
            send(two, kR1);
            send(one, kR0);
        }
        std::vector<std::vector<float>> out;
        for (const uint16_t port : {kR0, kR1}) {
            for (const auto& x : seen(port)) {
                if (x.p.bth.opcode == rc::op::kWriteOnlyImm) {
                    EXPECT_TRUE(x.icrc_ok) << "the result's ICRC covers the dequantized elements";
                    out.push_back(floats(x.payload));
                }
            }
        }
        return out;
    }
};

TEST_F(RoceDeterministic, ResultsAreTheExactFixedPointSumInEitherOrder) {
    EXPECT_FALSE(job->fused) << "the fused kernels add floats; a deterministic job quantizes";
    std::vector<float> a(kChunk / 4), b(kChunk / 4);
    for (size_t i = 0; i < a.size(); ++i) {
        a[i] = 0.1f * static_cast<float>(i) - 0.7f;
        b[i] = 1000.7f / static_cast<float>(i + 3);
    }
    a[0] = b[0] = 0x1p-33f;  // each rounds to 0 (half to even): the float sum would be 2^-32
    a[1] = 0x1p-33f * 3;     // 1.5 -> 2, with b's 2^-32 (1): 3 x 2^-32, the float sum's 4 x 2^-33
    b[1] = 0x1p-32f;
    for (uint16_t first : {uint16_t{1}, uint16_t{2}}) {
        const uint32_t s = first - 1u;
        const auto results = chunk(s, first, a, b);
        ASSERT_EQ(results.size(), 2u) << "one result WRITE per rank, rank " << first << " first";
        for (const auto& r : results) {
            ASSERT_EQ(r.size(), a.size());
            EXPECT_EQ(r[0], 0.0f) << "below the resolution: quantized to 0, not summed as floats";
            EXPECT_EQ(r[1], 0x1p-32f * 3);
            for (size_t i = 0; i < r.size(); ++i) {
                EXPECT_EQ(r[i], fixed_sum(a[i], b[i])) << "element " << i;
            }
        }
        send(ack_of(1, kSwitchPsn + s), kR0);
        send(ack_of(2, kSwitchPsn + s), kR1);
    }
    EXPECT_EQ(job->results_released, 2u);
    EXPECT_EQ(job->table.core().fixed_stats().underflow, 4u)
        << "a[0] and b[0] of both chunks: counted, never silent";
    fr::JobSample sample;
    sample.job_id = 7;
    sample.deterministic = true;
    sample.counts = fr::JobCounts{}.plus(*job);
    const std::string text = fr::render_metrics({sample}, {}, fr::LcoreTotals{});
    EXPECT_NE(text.find("inaswitch_rdma_job_fixed_point_total{job=\"7\",event=\"underflow\"} 4\n"),
              std::string::npos)
        << text;
}

TEST(RoceConfig, DeterministicOnFloatSums) {
    register_once();
    const std::string base = std::string(kStageYaml) + "rdma:\n  jobs:\n";
    auto r = config::load_string(base + "    - {id: 7, world: 2, deterministic: true}\n", "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->jobs[0].fixed_fraction_bits(), 32) << "fp32's default";
    r = config::load_string(base + "    - {id: 7, world: 2, dtype: bf16, "
                                   "deterministic: {fraction_bits: 20}}\n",
                            "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->jobs[0].fixed_fraction_bits(), 20);
    // GET /api/v1/config renders it so that the loader reads the same job back (the API's
    // connects rewrite the running config through it: a lost key would start a new session).
    const auto sections = config::sections_json(*r.config);
    ASSERT_EQ(sections.size(), 1u);
    const auto back = config::load_string(std::string(kStageYaml) + "rdma: " +
                                              sections[0].second + "\n",
                                          "back.yaml");
    ASSERT_TRUE(back.ok()) << back.error_text() << "\n" << sections[0].second;
    EXPECT_TRUE(fr::same_job(fr::rdma_of(*back.config)->jobs[0], fr::rdma_of(*r.config)->jobs[0]))
        << sections[0].second;
    r = config::load_string(base + "    - {id: 7, world: 2, deterministic: false}\n", "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->jobs[0].fixed_fraction_bits(), 0);
    const auto line = std::to_string(std::count(base.begin(), base.end(), '\n') + 1);
    r = config::load_string(base + "    - {id: 7, world: 2, dtype: int32, deterministic: true}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:" + line + ":54: deterministic on an int32 job"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, op: max, deterministic: true}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("deterministic on op max"), std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, deterministic: {fraction_bits: 127}}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("fraction_bits"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7, "
                                   "deterministic: true}\n",
                            "t.yaml");
    EXPECT_TRUE(r.ok()) << "1 KiB fp32 segments go up as 2 KiB of int64: " << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7, "
                                   "chunk_bytes: 4096, pmtu: 4096, deterministic: true}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:" + line + ":107: deterministic on rdma job 7: its "
                                  "partials carry 8-byte fixed-point elements, so a segment of "
                                  "4096 bytes goes up as 8192, above 4096; expected "
                                  "min(chunk_bytes, pmtu) at most 2048"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, chunk_bytes: 4096, pmtu: 4096, "
                                   "deterministic: true}\n",
                            "t.yaml");
    EXPECT_TRUE(r.ok()) << "a root sends no partial: " << r.error_text();
}

class RoceFusedCheck : public RoceSwitch {
protected:
    static constexpr uint32_t kKib = 1024;
    std::string config_yaml() const override {
        std::string y = roce_yaml("fp32", kKib, kKib * kWindow);
        const std::string mtu = "    mtu: 1000\n";
        y.replace(y.find(mtu), mtu.size(), "    mtu: 1500\n");  // a 1 KiB result WRITE leaves
        return y;
    }
    fr::JobParams job_params() const override {
        return fr::JobParams{7, 2, reduce::Op::sum, reduce::ElemType::fp32, kKib, kWindow};
    }
    static std::vector<float> kib(float base) {
        std::vector<float> v(kKib / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = base + 0.25f * static_cast<float>(i);
        }
        return v;
    }
    Bytes chunk_of(uint16_t rank, uint32_t s, float base) {
        return contribution(rank, (rank == 1 ? kPsn1 : kPsn2) + s, s, kib(base), 0x02, true,
                            kKib);
    }
    // Each rank's result WRITE of chunk s on its port, as floats (empty: none).
    std::vector<std::vector<float>> results(uint32_t s) {
        std::vector<std::vector<float>> out;
        for (const uint16_t port : {kR0, kR1}) {
            std::vector<float> r;
            for (const auto& x : seen(port)) {
                if (x.p.bth.opcode == rc::op::kWriteOnlyImm && x.p.imm >> 8 == s) {
                    EXPECT_TRUE(x.icrc_ok);
                    r = floats(x.payload);
                }
            }
            out.push_back(r);
        }
        return out;
    }
};

TEST_F(RoceFusedCheck, ChecksFoldedIntoTheAddsBeforeAcceptGoodPacketsAndExactSums) {
    // One burst of four: every packet after the first has its ICRC summed while the one before
    // it is added (when the CPU has VPCLMULQDQ), and is taken on that value.
    run({mbuf(chunk_of(1, 0, 1.0f), kR0), mbuf(chunk_of(2, 0, 100.0f), kR1),
         mbuf(chunk_of(1, 1, 2.0f), kR0), mbuf(chunk_of(2, 1, 200.0f), kR1)});
    EXPECT_EQ(qp1->counters.icrc_errors + qp2->counters.icrc_errors, 0u);
    EXPECT_EQ(qp1->counters.contributions + qp2->counters.contributions, 4u);
    const auto r = results(0);  // both chunks' results leave in the burst; seen() takes them all
    ASSERT_EQ(r.size(), 2u);
    for (const auto& sum : r) {
        ASSERT_EQ(sum.size(), kKib / 4);
        for (size_t i = 0; i < sum.size(); ++i) {
            ASSERT_EQ(sum[i], kib(1.0f)[i] + kib(100.0f)[i]) << i;
        }
    }
    EXPECT_EQ(job->results_completed, 2u);
}

TEST_F(RoceFusedCheck, ABadIcrcSummedInTheAddBeforeItIsDroppedCountedAndAddsNothing) {
    // Rank 2's first copy has a payload bit flipped: its ICRC is summed while rank 1's chunk is
    // added; it is dropped and counted, and the intact copy behind it (same PSN) is the one
    // added. Then a bad packet after a good one of the same rank, last in its burst.
    Bytes bad = chunk_of(2, 0, 100.0f);
    bad[bad.size() - 10] ^= 0x01;
    run({mbuf(chunk_of(1, 0, 1.0f), kR0), mbuf(bad, kR1), mbuf(chunk_of(2, 0, 100.0f), kR1)});
    EXPECT_EQ(qp2->counters.icrc_errors, 1u);
    EXPECT_EQ(lcore(fr::LcoreCounter::icrc_error), 1u);
    EXPECT_EQ(qp2->counters.contributions, 1u);
    const auto r = results(0);
    ASSERT_EQ(r.size(), 2u);
    for (const auto& sum : r) {
        ASSERT_EQ(sum.size(), kKib / 4) << "the chunk completed once, with the intact copy";
        for (size_t i = 0; i < sum.size(); ++i) {
            ASSERT_EQ(sum[i], kib(1.0f)[i] + kib(100.0f)[i]) << i;
        }
    }
    Bytes bad1 = chunk_of(1, 1, 2.0f);
    bad1[60] ^= 0x80;  // a payload byte near the front
    run({mbuf(chunk_of(2, 1, 200.0f), kR1), mbuf(bad1, kR0)});
    EXPECT_EQ(qp1->counters.icrc_errors, 1u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1 + 1) << "the bad packet advanced nothing";
    EXPECT_EQ(job->results_completed, 1u) << "chunk 1 still waits for rank 1";
    run({mbuf(chunk_of(1, 1, 2.0f), kR0)});
    const auto r1 = results(1);
    ASSERT_EQ(r1.size(), 2u);
    for (const auto& sum : r1) {
        ASSERT_EQ(sum.size(), kKib / 4);
        for (size_t i = 0; i < sum.size(); ++i) {
            ASSERT_EQ(sum[i], kib(2.0f)[i] + kib(200.0f)[i]) << i;
        }
    }
}

constexpr uint32_t kBigChunk = 4096;
constexpr uint32_t kPmtu = 1024;
constexpr uint32_t kSegments = kBigChunk / kPmtu;

class RoceMultiPacket : public RoceSwitch {
protected:
    // r1's MTU (1000 in kStageYaml) raised to 1500, as on the rxe links: a result packet of
    // PMTU 1024 with DF is 1024 + 60 bytes of IP.
    std::string config_yaml() const override {
        std::string y = roce_yaml("int32", kBigChunk, kBigChunk * kWindow);
        const std::string mtu = "    mtu: 1000\n";
        y.replace(y.find(mtu), mtu.size(), "    mtu: 1500\n");
        return y;
    }
    fr::JobParams job_params() const override {
        return fr::JobParams{7, 2, reduce::Op::sum, reduce::ElemType::int32, kBigChunk, kWindow,
                             kPmtu};
    }

    // Chunk s of `rank` (kBigChunk / 4 int32 values) as the NIC segments one WRITE with
    // immediate: packet i of kSegments, PSN psn + i. `length` overrides a packet's payload
    // bytes, `opcode` its opcode (sequence errors).
    Bytes segment(uint16_t rank, uint32_t psn, uint32_t s, const std::vector<int32_t>& v,
                  uint32_t i, uint32_t length = kPmtu, uint8_t opcode = 0) {
        const bool one = rank == 1;
        rc::Ipv4Path path;
        path.src_ip = one ? kWorker1 : kWorker2;
        path.dst_ip = one ? kSwitch1 : kSwitch2;
        path.dest_qp = one ? kQpn1 : kQpn2;
        rc::Transmit tx;
        const bool last = i + 1 == kSegments;
        tx.opcode = opcode != 0 ? opcode
                    : i == 0    ? rc::op::kWriteFirst
                    : last      ? rc::op::kWriteLastImm
                                : rc::op::kWriteMiddle;
        tx.psn = psn + i;
        tx.ack_req = last;
        tx.has_reth = tx.opcode == rc::op::kWriteFirst;
        tx.length = length;
        tx.reth = {fr::kAreaAddr + (s % kWindow) * kBigChunk, fr::kAreaRkey, kBigChunk};
        tx.has_imm = tx.opcode == rc::op::kWriteLastImm;
        tx.imm = s << 8 | 1;
        const auto* bytes = reinterpret_cast<const uint8_t*>(v.data()) + i * kPmtu;
        return frame(one, path, [&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx, bytes);
        });
    }
    std::vector<Bytes> message(uint16_t rank, uint32_t psn, uint32_t s,
                               const std::vector<int32_t>& v) {
        std::vector<Bytes> out;
        for (uint32_t i = 0; i < kSegments; ++i) {
            out.push_back(segment(rank, psn, s, v, i));
        }
        return out;
    }
    void send_all(const std::vector<Bytes>& frames, uint16_t port) {
        for (const Bytes& f : frames) {
            send(f, port);
        }
    }
    static std::vector<int32_t> ints(int32_t base) {
        std::vector<int32_t> v(kBigChunk / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = base * 1'000'003 + static_cast<int32_t>(i * 7919);
        }
        return v;
    }
    static std::vector<int32_t> sum(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
        std::vector<int32_t> v(a.size());
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = static_cast<int32_t>(static_cast<uint32_t>(a[i]) + static_cast<uint32_t>(b[i]));
        }
        return v;
    }
    static bool is_write(uint8_t op) {
        return op >= rc::op::kWriteFirst && op <= rc::op::kWriteOnlyImm;
    }
    // The result WRITE packets and the ACK/NAKs `port` sent, parsed, in order.
    std::vector<Seen> results(uint16_t port, std::vector<Seen>* acks = nullptr) {
        std::vector<Seen> out;
        for (auto& x : seen(port)) {
            if (is_write(x.p.bth.opcode)) {
                out.push_back(x);
            } else if (acks != nullptr) {
                acks->push_back(x);
            }
        }
        return out;
    }
    // Checks packets [from, from + kSegments) of `w` are one whole result message for chunk
    // s starting at PSN `psn`: opcodes, PSNs, RETH, immediate, AckReq, ICRC, and the values.
    void expect_message(const std::vector<Seen>& w, size_t from, uint32_t psn, uint32_t s,
                        const std::vector<int32_t>& want) {
        ASSERT_GE(w.size(), from + kSegments);
        std::vector<uint8_t> bytes;
        for (uint32_t i = 0; i < kSegments; ++i) {
            const Seen& x = w[from + i];
            const uint8_t op = i == 0                ? rc::op::kWriteFirst
                               : i + 1 == kSegments ? rc::op::kWriteLastImm
                                                    : rc::op::kWriteMiddle;
            EXPECT_EQ(x.p.bth.opcode, op) << "packet " << i;
            EXPECT_EQ(x.p.bth.psn, (psn + i) & 0xFFFFFF) << "consecutive PSNs";
            EXPECT_EQ(x.p.bth.ack_req, i + 1 == kSegments) << "AckReq on the LAST";
            EXPECT_TRUE(x.icrc_ok) << "packet " << i;
            EXPECT_EQ(x.payload.size(), kPmtu);
            if (i == 0) {
                EXPECT_EQ(x.p.reth.va, kResultAddr + (s % kWindow) * kBigChunk);
                EXPECT_EQ(x.p.reth.dma_len, kBigChunk);
            }
            if (i + 1 == kSegments) {
                EXPECT_EQ(x.p.imm, s << 8 | 2);
            }
            bytes.insert(bytes.end(), x.payload.begin(), x.payload.end());
        }
        ASSERT_EQ(bytes.size(), want.size() * 4);
        EXPECT_EQ(std::memcmp(bytes.data(), want.data(), bytes.size()), 0) << "the sum";
    }
};

TEST_F(RoceMultiPacket, FourPacketChunksFromEveryRankGiveFourPacketResultsPerRank) {
    for (uint32_t s = 0; s < 2; ++s) {
        send_all(message(1, kPsn1 + s * kSegments, s, ints(static_cast<int32_t>(s) + 1)), kR0);
        std::vector<Seen> acks;
        EXPECT_TRUE(results(kR0, &acks).empty()) << "nothing complete yet";
        ASSERT_EQ(acks.size(), 1u) << "only the LAST asked for an ACK";
        EXPECT_EQ(acks[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
        EXPECT_EQ(acks[0].p.bth.psn, kPsn1 + s * kSegments + kSegments - 1);
        send_all(message(2, kPsn2 + s * kSegments, s, ints(-7)), kR1);
        const auto want = sum(ints(static_cast<int32_t>(s) + 1), ints(-7));
        for (const uint16_t port : {kR0, kR1}) {
            const auto w = results(port);
            ASSERT_EQ(w.size(), kSegments) << "port " << port;
            expect_message(w, 0, kSwitchPsn + s * kSegments, s, want);
            EXPECT_EQ(w[0].p.bth.dest_qp, port == kR0 ? kWorkerQpn1 : kWorkerQpn2);
        }
    }
    EXPECT_EQ(qp1->counters.contributions, 2u);
    EXPECT_EQ(qp1->counters.segments, 2 * kSegments);
    EXPECT_EQ(qp2->counters.results_sent, 2 * kSegments);
    EXPECT_EQ(qp1->counters.bad_contributions, 0u);
    // An ACK inside the message releases nothing; every rank's ACK of the LAST does.
    EXPECT_EQ(job->table.in_use(), 2u);
    send(ack_of(1, kSwitchPsn + kSegments - 2), kR0);
    send(ack_of(2, kSwitchPsn + kSegments - 2), kR1);
    EXPECT_EQ(job->table.in_use(), 2u) << "the LAST is not acknowledged yet";
    send(ack_of(1, kSwitchPsn + kSegments - 1), kR0);
    EXPECT_EQ(job->table.in_use(), 2u) << "rank 2 has not acknowledged chunk 0's LAST";
    send(ack_of(2, kSwitchPsn + 2 * kSegments - 1), kR1);
    send(ack_of(1, kSwitchPsn + 2 * kSegments - 1), kR0);
    EXPECT_EQ(job->table.in_use(), 0u);
    EXPECT_EQ(job->results_released, 2u);
    EXPECT_EQ(total_tx(), 0u) << "ACKs need no answer";
}

TEST_F(RoceMultiPacket, LostMiddleGivesOneNakAndGoBackNAddsOnce) {
    const auto a = ints(3);
    const auto m = message(1, kPsn1, 0, a);
    send(m[0], kR0);
    send(m[2], kR0);  // m[1] lost
    send(m[3], kR0);
    std::vector<Seen> acks;
    EXPECT_TRUE(results(kR0, &acks).empty());
    ASSERT_EQ(acks.size(), 1u) << "one NAK for the gap, the rest of it dropped";
    EXPECT_EQ(acks[0].p.aeth.syndrome, rc::aeth::kNakPsnSequence);
    EXPECT_EQ(acks[0].p.bth.psn, kPsn1 + 1);
    // Go-back-N from the NAK'd PSN, then (an ACK timeout at the worker) the whole message
    // again: the FIRST and every packet already taken are re-ACKed duplicates.
    send(m[1], kR0);
    send(m[2], kR0);
    send(m[3], kR0);
    send_all(m, kR0);
    EXPECT_EQ(qp1->counters.contributions, 1u);
    EXPECT_EQ(qp1->counters.duplicates, kSegments);
    EXPECT_EQ(qp1->counters.naks_sent, 1u);
    free_mbufs(take_tx(kR0));
    send_all(message(2, kPsn2, 0, ints(4)), kR1);
    expect_message(results(kR1), 0, kSwitchPsn, 0, sum(a, ints(4)));
    EXPECT_EQ(job->table.counters()[agg::AckVerdict::duplicate], 0u);
    free_mbufs(take_tx(kR0));
}

TEST_F(RoceMultiPacket, LostResultMiddleIsResentGoBackNFromTheNakedPsn) {
    send_all(message(1, kPsn1, 0, ints(1)), kR0);
    send_all(message(2, kPsn2, 0, ints(2)), kR1);
    const auto want = sum(ints(1), ints(2));
    expect_message(results(kR0), 0, kSwitchPsn, 0, want);
    free_mbufs(take_tx(kR1));
    // Rank 1 lost packet 1 of the result: its NAK-sequence names it, the switch resends 1..3.
    send(ack_of(1, kSwitchPsn + 1, rc::aeth::kNakPsnSequence), kR0);
    const auto again = results(kR0);
    ASSERT_EQ(again.size(), kSegments - 1);
    std::vector<uint8_t> bytes;
    for (uint32_t i = 0; i < again.size(); ++i) {
        EXPECT_EQ(again[i].p.bth.psn, kSwitchPsn + 1 + i);
        EXPECT_EQ(again[i].p.bth.opcode,
                  i + 2 == kSegments ? rc::op::kWriteLastImm : rc::op::kWriteMiddle);
        EXPECT_TRUE(again[i].icrc_ok);
        bytes.insert(bytes.end(), again[i].payload.begin(), again[i].payload.end());
    }
    EXPECT_EQ(std::memcmp(bytes.data(), reinterpret_cast<const uint8_t*>(want.data()) + kPmtu,
                          bytes.size()),
              0);
    EXPECT_EQ(qp1->counters.retransmissions, kSegments - 1);
}

TEST_F(RoceMultiPacket, SequenceErrorsGetNakInvalidRequestCounted) {
    // Rank 1: a MIDDLE with no FIRST before it, at the expected PSN.
    send(segment(1, kPsn1 - 1, 0, ints(1), 1), kR0);
    std::vector<Seen> acks;
    results(kR0, &acks);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.aeth.syndrome, rc::aeth::kNakInvalidRequest);
    EXPECT_EQ(acks[0].p.bth.psn, kPsn1);
    EXPECT_EQ(qp1->counters.invalid_requests, 1u);
    EXPECT_EQ(fr::qp_state_code(*qp1), 1) << "the responder is in error";
    EXPECT_EQ(job->table.in_use(), 0u) << "nothing was added";
    EXPECT_EQ(qp1->counters.contributions, 0u);
}

TEST_F(RoceMultiPacket, ShortMiddleGetsNakInvalidRequestCounted) {
    // Rank 2: a FIRST, then a MIDDLE shorter than the PMTU.
    send(segment(2, kPsn2, 0, ints(1), 0), kR1);
    send(segment(2, kPsn2, 0, ints(1), 1, kPmtu - 4), kR1);
    std::vector<Seen> acks;
    results(kR1, &acks);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.aeth.syndrome, rc::aeth::kNakInvalidRequest);
    EXPECT_EQ(acks[0].p.bth.psn, kPsn2 + 1);
    EXPECT_EQ(qp2->counters.invalid_requests, 1u);
    EXPECT_EQ(job->table.in_use(), 0u) << "nothing was added";
    EXPECT_EQ(qp2->counters.contributions, 0u);
    EXPECT_EQ(job->failed_rank, 2u);
    free_mbufs(take_tx(kR0));  // rank 1's failure notice
}

TEST_F(RoceMultiPacket, FirstInsideAMessageGetsNakInvalidRequest) {
    send(segment(1, kPsn1, 0, ints(1), 0), kR0);
    send(segment(1, kPsn1, 0, ints(1), 1, kPmtu, rc::op::kWriteFirst), kR0);
    std::vector<Seen> acks;
    results(kR0, &acks);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.aeth.syndrome, rc::aeth::kNakInvalidRequest);
    EXPECT_EQ(acks[0].p.bth.psn, kPsn1 + 1);
    EXPECT_EQ(qp1->counters.invalid_requests, 1u);
    EXPECT_EQ(qp1->counters.refused, 1u);
}

TEST_F(RoceMultiPacket, ChainedSegmentsAggregate) {
    for (const Bytes& f : message(1, kPsn1, 0, ints(5))) {
        run({chained(f, kR0, {20, 40, 600})});
    }
    for (const Bytes& f : message(2, kPsn2, 0, ints(6))) {
        run({chained(f, kR1, {50, 9, 1000})});
    }
    expect_message(results(kR1), 0, kSwitchPsn, 0, sum(ints(5), ints(6)));
    free_mbufs(take_tx(kR0));
}

TEST_F(RoceMultiPacket, BusySlotRefusesTheFirstOfALaterChunk) {
    send_all(message(1, kPsn1, 0, ints(1)), kR0);
    send_all(message(2, kPsn2, 0, ints(1)), kR1);  // complete, held until acknowledged
    for (uint32_t s = 1; s < kWindow; ++s) {
        send_all(message(1, kPsn1 + s * kSegments, s, ints(1)), kR0);
    }
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    // Chunk kWindow maps to chunk 0's slot, complete and unacknowledged: rank 1 contributed to
    // it, so this is a later chunk. Its FIRST gets the RNR NAK (rxe would resend the whole
    // WRITE after a refused LAST anyway); the MIDDLEs and LAST pipelined behind it are dropped.
    const uint32_t base = kPsn1 + kWindow * kSegments;
    const auto m = message(1, base, kWindow, ints(9));
    send_all(m, kR0);
    std::vector<Seen> acks;
    results(kR0, &acks);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(rc::aeth::kind(acks[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
    EXPECT_EQ(acks[0].p.bth.psn, base);
    EXPECT_EQ(qp1->responder.expected_psn(), base) << "nothing advanced";
    EXPECT_EQ(qp1->counters.segments, kWindow * kSegments) << "nothing of chunk kWindow taken";
    // Both ranks acknowledge chunk 0: its slot frees and the WRITE again is taken whole.
    send(ack_of(1, kSwitchPsn + kSegments - 1), kR0);
    send(ack_of(2, kSwitchPsn + kSegments - 1), kR1);
    send_all(m, kR0);
    for (uint32_t s = 1; s < kWindow; ++s) {
        send_all(message(2, kPsn2 + s * kSegments, s, ints(2)), kR1);
    }
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    send_all(message(2, kPsn2 + kWindow * kSegments, kWindow, ints(10)), kR1);
    const auto w = results(kR1);
    ASSERT_EQ(w.size(), kSegments);
    expect_message(w, 0, kSwitchPsn + kWindow * kSegments, kWindow, sum(ints(9), ints(10)));
    EXPECT_EQ(qp1->counters.contributions, kWindow + 1);
    EXPECT_EQ(qp1->counters.rnr_naks_sent, 1u);
    free_mbufs(take_tx(kR0));
}

TEST_F(RoceMultiPacket, LastForASlotHeldByAnotherChunkIsRefusedAtItsPsn) {
    // Rank 2 runs a window ahead (no worker does: it would need chunk 0's result first), so
    // chunk 0's slot holds chunk kWindow, incomplete, when rank 1's chunk 0 arrives: its FIRST
    // and MIDDLEs are taken (the slot holds no complete result), its LAST is refused with an
    // RNR NAK for the LAST's own PSN and nothing is added.
    send_all(message(2, kPsn2, kWindow, ints(5)), kR1);
    free_mbufs(take_tx(kR1));
    send_all(message(1, kPsn1, 0, ints(1)), kR0);
    std::vector<Seen> acks;
    results(kR0, &acks);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(rc::aeth::kind(acks[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
    EXPECT_EQ(acks[0].p.bth.psn, kPsn1 + kSegments - 1);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1 + kSegments - 1) << "the LAST is owed";
    EXPECT_EQ(qp1->counters.contributions, 0u);
    EXPECT_EQ(qp1->counters.segments, kSegments - 1) << "FIRST and MIDDLEs staged";
    EXPECT_EQ(job->table.counters()[agg::AckVerdict::no_slot], 1u);
}

TEST_F(RoceMultiPacket, MultiPacketWriteToASinglePacketJobIsNoContribution) {
    // The same four packets to a job whose chunk is one packet are executed by RC rules and
    // counted once as a bad contribution (covered by RoceSwitch's job; here the LAST's offset
    // check): a message starting inside a chunk is not added.
    auto v = ints(1);
    rc::Ipv4Path path;
    path.src_ip = kWorker1;
    path.dst_ip = kSwitch1;
    path.dest_qp = kQpn1;
    for (uint32_t i = 0; i < 2; ++i) {
        rc::Transmit tx;
        tx.opcode = i == 0 ? rc::op::kWriteFirst : rc::op::kWriteLastImm;
        tx.psn = kPsn1 + i;
        tx.ack_req = i == 1;
        tx.has_reth = i == 0;
        tx.length = kPmtu;
        tx.reth = {fr::kAreaAddr + kPmtu, fr::kAreaRkey, 2 * kPmtu};  // inside chunk 0
        tx.has_imm = i == 1;
        tx.imm = 0 << 8 | 1;
        send(frame(true, path,
                   [&](uint8_t* out, size_t cap) {
                       return rc::encode_write(out, cap, path, 1, tx,
                                               reinterpret_cast<const uint8_t*>(v.data()));
                   }),
             kR0);
    }
    EXPECT_EQ(qp1->counters.bad_contributions, 1u);
    EXPECT_EQ(qp1->counters.contributions, 0u);
    EXPECT_EQ(qp1->responder.expected_psn(), kPsn1 + 2) << "consumed: the connection goes on";
    EXPECT_EQ(job->table.in_use(), 0u);
    free_mbufs(take_tx(kR0));
}

// The aggregator role: job 7's ranks 1 and 2 stand for BFR-ids 5 and 6 of an INA job 7 whose
// parent is 10.0.2.7 (a host on r1); partials are sent again after 5 ms without a result.
constexpr uint32_t kParent = 0x0A000207;

std::string aggregator_yaml() {
    std::string y = roce_yaml();
    const std::string at = "      pmtu: 1024\n";
    y.insert(y.find(at) + at.size(),
             "      role: aggregator\n      parent: 10.0.2.7\n      bsl: 64\n"
             "      abm: \"5-6\"\n      partial_timeout_ms: 5\n");
    return y;
}

// An INA datagram as the switch emitted it, parsed.
struct InaSeen {
    uint32_t src = 0, dst = 0;
    proto::Header h;
    std::vector<uint8_t> pbm;
    std::vector<float> elements;  // 4-byte elements (fp32); payload: the raw bytes
    std::vector<uint8_t> payload;
    bool checksum_ok = false;
};

InaSeen ina_of(const Bytes& b) {
    InaSeen s;
    const uint8_t* ip = b.data() + 14;
    s.src = static_cast<uint32_t>(ip[12]) << 24 | ip[13] << 16 | ip[14] << 8 | ip[15];
    s.dst = static_cast<uint32_t>(ip[16]) << 24 | ip[17] << 16 | ip[18] << 8 | ip[19];
    const size_t udp_len = static_cast<size_t>(ip[24]) << 8 | ip[25];
    // The UDP checksum over the pseudo-header and datagram sums to 0xffff when it holds.
    std::vector<uint8_t> pseudo(ip + 12, ip + 20);
    pseudo.insert(pseudo.end(), {0, 17, static_cast<uint8_t>(udp_len >> 8),
                                 static_cast<uint8_t>(udp_len)});
    pseudo.insert(pseudo.end(), ip + 20, ip + 20 + udp_len);
    s.checksum_ok = net::ones_complement_sum(pseudo.data(), pseudo.size()) == 0xffff;
    const auto parsed = proto::parse(ip + 28, udp_len - 8);
    EXPECT_TRUE(parsed.packet.has_value());
    if (parsed.packet) {
        s.h = parsed.packet->header;
        s.pbm.assign(parsed.packet->bitstring,
                     parsed.packet->bitstring + s.h.bitstring_bytes());
        s.payload.assign(parsed.packet->payload, parsed.packet->payload + s.h.payload_bytes());
        s.elements.resize(s.h.payload_bytes() / 4);
        std::memcpy(s.elements.data(), parsed.packet->payload, s.elements.size() * 4);
    }
    return s;
}

// The parent's INA result for INA seq `seq` (`count` elements of 4 bytes at `values`): from
// 10.0.2.7, one hop away, to the switch's r1 address (MAC `to`).
Bytes ina_result_frame(uint32_t seq, const void* values, size_t count, uint8_t elem_type,
                       const std::vector<wire::BfrId>& pbm, const rte_ether_addr& to) {
    proto::Header h;
    h.type = proto::PacketType::result;
    h.op = 0;
    h.elem_type = elem_type;
    h.bsl_code = 1;
    h.job_id = 7;
    h.seq = seq;
    h.elem_count = static_cast<uint16_t>(count);
    const auto root_abm = *wire::BitString::from_bfr_ids(64, 0, pbm);
    Bytes b(pipeline::kInaFrameHeadBytes + h.total_bytes());
    uint8_t* at = pipeline::write_ina_headers(b.data(), h, root_abm.data(), kParent, kSwitch2,
                                              proto::kDefaultUdpPort);
    std::memcpy(at, values, count * 4);
    pipeline::seal_ina_datagram(b.data());
    std::memcpy(b.data(), to.addr_bytes, 6);
    std::memcpy(b.data() + 6, kNbR1Host.addr_bytes, 6);
    b[22] = 63;  // one hop away
    b[24] = 0, b[25] = 0;
    const uint16_t sum = net::internet_checksum(b.data() + 14, 20);
    std::memcpy(b.data() + 24, &sum, 2);
    return b;
}

class RoceAggregator : public RoceSwitch {
protected:
    std::string config_yaml() const override { return aggregator_yaml(); }
    fr::ParentParams parent_params() const override {
        fr::ParentParams p;
        p.parent_ip = kParent;
        p.bsl_code = 1;  // 64 bits
        p.abm = *wire::BitString::from_bfr_ids(64, 0, std::vector<wire::BfrId>{5, 6});
        p.timeout_ns = 5'000'000;
        return p;
    }
    // The parent's INA result for chunk `seq`: from 10.0.2.7 to the switch's r1 address.
    Bytes ina_result(uint32_t seq, const std::vector<float>& values, uint8_t elem_type = 1,
                     const std::vector<wire::BfrId>& pbm = {1, 2, 3, 4, 5, 6}) {
        return ina_result_frame(seq, values.data(), values.size(), elem_type, pbm,
                                port_mac(kR1));
    }
    // Both ranks contribute chunk s; returns the partial it sent up (exactly one INA packet).
    InaSeen complete(uint32_t s, float a, float b) {
        send(contribution(1, kPsn1 + s, s, fill(a)), kR0);
        send(contribution(2, kPsn2 + s, s, fill(b)), kR1);
        for (const uint16_t port : {kR0, kR1}) {
            for (const auto& x : seen(port)) {
                EXPECT_EQ(x.p.bth.opcode, rc::op::kAcknowledge) << "no result WRITE yet";
            }
        }
        EXPECT_EQ(inas.size(), 1u) << "one INA contribution per complete chunk";
        InaSeen up = inas.empty() ? InaSeen{} : ina_of(inas.back());
        inas.clear();
        return up;
    }
    // Result WRITEs seen on both ports, by rank.
    std::vector<Seen> writes() {
        std::vector<Seen> out;
        for (const uint16_t port : {kR0, kR1}) {
            for (const auto& x : seen(port)) {
                if (x.p.bth.opcode == rc::op::kWriteOnlyImm) {
                    out.push_back(x);
                }
            }
        }
        return out;
    }
    const fr::ParentCounters& up() const { return job->parent->counters; }
};

TEST_F(RoceAggregator, CompleteChunkGoesUpAsOneInaPacketAndTheResultComesDownAsWrites) {
    const InaSeen partial = complete(0, 1.0f, 100.0f);
    EXPECT_EQ(partial.dst, kParent);
    EXPECT_EQ(partial.src, kSwitch2) << "the address of the interface towards the parent";
    EXPECT_EQ(partial.h.type, proto::PacketType::data);
    EXPECT_EQ(partial.h.job_id, 7u);
    EXPECT_EQ(partial.h.seq, 0u);
    EXPECT_EQ(partial.h.flags, 0u);
    EXPECT_EQ(partial.h.elem_type, 1u);
    EXPECT_EQ(partial.h.bsl_code, 1u);
    EXPECT_EQ(partial.pbm, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0x30}))
        << "P-BM = A-BM: BFR-ids 5 and 6";
    EXPECT_TRUE(partial.checksum_ok);
    ASSERT_EQ(partial.elements.size(), kChunk / 4);
    for (size_t i = 0; i < partial.elements.size(); ++i) {
        EXPECT_EQ(partial.elements[i], 101.0f + 2.0f * static_cast<float>(i)) << "the local sum";
    }
    EXPECT_EQ(up().partial_sent, 1u);
    EXPECT_EQ(job->table.in_use(), 1u) << "the slot is held until the result is in and ACKed";

    send(ina_result(0, fill(5000.0f)), kR1);
    const auto w = writes();
    ASSERT_EQ(w.size(), 2u) << "one result WRITE per rank";
    for (const auto& x : w) {
        EXPECT_EQ(x.p.bth.psn, kSwitchPsn);
        EXPECT_EQ(x.p.imm, 0u << 8 | 2);
        EXPECT_EQ(x.p.reth.va, kResultAddr);
        EXPECT_TRUE(x.icrc_ok);
        EXPECT_EQ(floats(x.payload), fill(5000.0f)) << "the parent's result, not the local sum";
    }
    EXPECT_EQ(up().result_in, 1u);
    EXPECT_TRUE(inas.empty()) << "the result is not forwarded as INA";

    send(ack_of(1, kSwitchPsn), kR0);
    EXPECT_EQ(job->table.in_use(), 1u);
    send(ack_of(2, kSwitchPsn), kR1);
    EXPECT_EQ(job->table.in_use(), 0u) << "every rank acknowledged: released";
    EXPECT_EQ(job->results_released, 1u);

    send(ina_result(0, fill(5000.0f)), kR1);  // a late copy
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(up().result_not_held, 1u);
}

// A deterministic aggregator (`deterministic: true`): its partial carries the exact int64
// fixed-point sums (INA element type int64, 8 bytes an element, F = 32) for a deterministic
// parent, which adds them as they are; the parent's fp32 result comes down as ever.
class RoceAggregatorDeterministic : public RoceAggregator {
protected:
    std::string config_yaml() const override {
        std::string y = aggregator_yaml();
        const std::string at = "      pmtu: 1024\n";
        y.insert(y.find(at) + at.size(), "      deterministic: true\n");
        return y;
    }
    fr::JobParams job_params() const override {
        fr::JobParams p = RoceAggregator::job_params();
        p.deterministic = true;
        p.fraction_bits = 32;
        return p;
    }
};

TEST_F(RoceAggregatorDeterministic, ThePartialCarriesTheExactFixedPointSums) {
    const InaSeen partial = complete(0, 0.75f, 0x1p-33f);  // 2^-33 quantizes to 0 (half even)
    EXPECT_EQ(partial.h.elem_type, static_cast<uint8_t>(reduce::kFixedWireType));
    EXPECT_EQ(partial.h.elem_count, kChunk / 4);
    EXPECT_TRUE(partial.checksum_ok) << "the checksum covers the int64 elements";
    ASSERT_EQ(partial.payload.size(), kChunk / 4 * 8);
    for (size_t i = 0; i < kChunk / 4; ++i) {
        int64_t q = 0;
        std::memcpy(&q, partial.payload.data() + i * 8, 8);  // little-endian on the wire
        // fill(a)[i] = a + i: q(0.75 + i) + q(2^-33 + i) = (0.75 + 2i) x 2^32 exactly.
        EXPECT_EQ(q, static_cast<int64_t>((0.75 + 2.0 * static_cast<double>(i)) * 0x1p32))
            << "element " << i;
    }
    send(ina_result(0, fill(42.0f)), kR1);
    const auto w = writes();
    ASSERT_EQ(w.size(), 2u);
    for (const auto& x : w) {
        EXPECT_TRUE(x.icrc_ok);
        EXPECT_EQ(floats(x.payload), fill(42.0f)) << "the parent's result, in the job's type";
    }
}

TEST_F(RoceAggregator, ACeMarkedContributionMakesItsChunksPartialCarryEcnEcho) {
    send(contribution(1, kPsn1, 0, fill(1.0f), 0x03), kR0);  // CE (RFC 3168)
    send(contribution(2, kPsn2, 0, fill(2.0f)), kR1);
    bool cnp = false;
    for (const auto& x : seen(kR0)) {
        cnp = cnp || x.p.bth.opcode == rc::op::kCnp;
    }
    EXPECT_TRUE(cnp) << "rank 1 is sent a CNP as by a root";
    seen(kR1);  // sets the partial aside in `inas`
    ASSERT_EQ(inas.size(), 1u);
    const InaSeen first = ina_of(inas.back());
    inas.clear();
    EXPECT_EQ(first.h.flags, proto::kFlagEcnEcho) << "the congestion goes up with the partial";
    EXPECT_TRUE(first.checksum_ok);
    const InaSeen next = complete(1, 1.0f, 2.0f);
    EXPECT_EQ(next.h.flags, 0u) << "the next chunk saw no CE";
}

TEST_F(RoceAggregator, DuplicateResultWhileHeldIsCountedAndDropped) {
    complete(0, 1.0f, 2.0f);
    send(ina_result(0, fill(7.0f)), kR1);
    EXPECT_EQ(writes().size(), 2u);
    send(ina_result(0, fill(8.0f)), kR1);  // the unicast root's copy for the other BFR-id
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(up().result_duplicate, 1u);
    EXPECT_EQ(qp1->counters.results_sent, 1u);
    send(ina_result(1, fill(7.0f)), kR1);  // a chunk never sent up
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(up().result_not_held, 1u);
}

TEST_F(RoceAggregator, ResultThatDisagreesWithTheJobIsRefused) {
    complete(0, 1.0f, 2.0f);
    send(ina_result(0, std::vector<float>(3, 1.0f)), kR1);  // another element count
    send(ina_result(0, fill(1.0f), 0), kR1);                 // int32, the job is fp32
    send(ina_result(0, fill(1.0f), 1, {1, 2, 3, 5}), kR1);    // P-BM without rank 2's BFR-id
    Bytes corrupt = ina_result(0, fill(1.0f));
    corrupt[corrupt.size() - 1] ^= 0x40;  // an element bit: the UDP checksum fails
    send(corrupt, kR1);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(up().result_bad, 4u);
    send(ina_result(0, fill(1.0f)), kR1);
    EXPECT_EQ(writes().size(), 2u) << "a good result still comes down";
}

TEST_F(RoceAggregator, SilentParentGetsThePartialAgainAndTheJobGoesOn) {
    const InaSeen first = complete(0, 1.0f, 2.0f);
    advance_ms(1);
    EXPECT_EQ(tx_count(kR1), 0u) << "not before partial_timeout_ms";
    advance_ms(10);
    ASSERT_EQ(tx_count(kR1), 1u);
    seen(kR1);
    ASSERT_EQ(inas.size(), 1u);
    const InaSeen again = ina_of(inas[0]);
    inas.clear();
    EXPECT_EQ(again.h.seq, 0u);
    EXPECT_EQ(again.h.flags, proto::kFlagRetransmit);
    EXPECT_EQ(again.pbm, first.pbm);
    EXPECT_EQ(again.elements, first.elements);
    EXPECT_TRUE(again.checksum_ok);
    EXPECT_EQ(up().partial_resent, 1u);
    EXPECT_EQ(job->table.in_use(), 1u);

    send(ina_result(0, fill(3.0f)), kR1);
    EXPECT_EQ(writes().size(), 2u);
    send(ack_of(1, kSwitchPsn), kR0);
    send(ack_of(2, kSwitchPsn), kR1);
    EXPECT_EQ(job->table.in_use(), 0u);
    advance_ms(20);
    EXPECT_EQ(total_tx(), 0u) << "answered and released: nothing goes again";
    const InaSeen next = complete(1, 4.0f, 5.0f);
    EXPECT_EQ(next.h.seq, 1u) << "the job is not wedged";
    EXPECT_EQ(next.h.flags, 0u);
}

TEST_F(RoceAggregator, ResultAnsweredBeforeTheTimeoutIsNotSentAgain) {
    complete(0, 1.0f, 2.0f);
    send(ina_result(0, fill(3.0f)), kR1);
    EXPECT_EQ(writes().size(), 2u);
    advance_ms(6);  // past partial_timeout_ms; the ranks' ACK timeout (4.2 ms) re-sends WRITEs
    writes();
    EXPECT_TRUE(inas.empty()) << "the result is in: no partial again";
    EXPECT_EQ(up().partial_resent, 0u);
}

TEST_F(RoceAggregator, ChainedResultComesDown) {
    complete(0, 1.0f, 2.0f);
    run({chained(ina_result(0, fill(42.0f)), kR1, {20, 40, 13})});
    const auto w = writes();
    ASSERT_EQ(w.size(), 2u);
    for (const auto& x : w) {
        EXPECT_EQ(floats(x.payload), fill(42.0f));
    }
}

TEST_F(RoceAggregator, ResultOnAnotherLcoreIsHandedToTheJobsHome) {
    complete(0, 1.0f, 2.0f);
    rte_ring* to_home = rte_ring_create(("ra" + std::to_string(unique_id())).c_str(), 64,
                                        SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
    ASSERT_NE(to_home, nullptr);
    ctx->n_workers = 2;
    ctx->worker_index = 1;  // the job's home is worker 0
    ctx->handoff[0] = to_home;
    send(ina_result(0, fill(9.0f)), kR1);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(lcore(fr::LcoreCounter::handed_off), 1u);
    EXPECT_EQ(up().result_in, 0u) << "the home lcore takes it";
    rte_mbuf* m = nullptr;
    ASSERT_EQ(rte_ring_sc_dequeue(to_home, reinterpret_cast<void**>(&m)), 0);
    ctx->worker_index = 0;
    ctx->handoff[0] = nullptr;
    run({m});
    EXPECT_EQ(writes().size(), 2u);
    EXPECT_EQ(up().result_in, 1u);
    rte_ring_free(to_home);
}

TEST_F(RoceAggregator, ResultForAnotherHostIsRoutedOnUntouched) {
    complete(0, 1.0f, 2.0f);
    Bytes b = ina_result(0, fill(9.0f));
    // To 10.0.1.2 (a worker of the job in another subtree, behind r0): not for the switch.
    b[14 + 16] = 10, b[14 + 17] = 0, b[14 + 18] = 1, b[14 + 19] = 2;
    b[24] = 0, b[25] = 0;
    const uint16_t sum = net::internet_checksum(b.data() + 14, 20);
    std::memcpy(b.data() + 24, &sum, 2);
    send(b, kR1);
    ASSERT_EQ(tx_count(kR0), 1u) << "routed on";
    free_mbufs(take_tx(kR0));
    EXPECT_EQ(tx_count(kR1), 0u);
    EXPECT_EQ(up().result_in + up().result_bad + up().result_not_held, 0u);
}

// The aggregator role with chunks above the pmtu (4096-byte int32 chunks at PMTU 1024): a
// complete chunk goes up as one INA contribution per pmtu segment, INA seq = key x 4 + j; the
// parent's four results come down as ONE four-packet result WRITE per rank once all are in.
class RoceAggregatorMultiPacket : public RoceMultiPacket {
protected:
    std::string config_yaml() const override {
        std::string y = RoceMultiPacket::config_yaml();
        const std::string at = "      pmtu: 1024\n";
        y.insert(y.find(at) + at.size(),
                 "      role: aggregator\n      parent: 10.0.2.7\n      bsl: 64\n"
                 "      abm: \"5-6\"\n      partial_timeout_ms: 5\n");
        return y;
    }
    fr::ParentParams parent_params() const override {
        fr::ParentParams p;
        p.parent_ip = kParent;
        p.bsl_code = 1;
        p.abm = *wire::BitString::from_bfr_ids(64, 0, std::vector<wire::BfrId>{5, 6});
        p.timeout_ns = 5'000'000;
        return p;
    }
    // The parent's result for INA seq `seq`: elements [seg x 256, +256) of `v`.
    Bytes parent_result(uint32_t seq, const std::vector<int32_t>& v) {
        const size_t per = kPmtu / 4;
        return ina_result_frame(seq, v.data() + (seq % kSegments) * per, per, 0,
                                {1, 2, 3, 4, 5, 6}, port_mac(kR1));
    }
    // Both ranks' chunk s as rxe segments it; returns the INA contributions sent up, in order.
    std::vector<InaSeen> complete(uint32_t s, const std::vector<int32_t>& a,
                                  const std::vector<int32_t>& b) {
        send_all(message(1, kPsn1 + s * kSegments, s, a), kR0);
        send_all(message(2, kPsn2 + s * kSegments, s, b), kR1);
        EXPECT_TRUE(results(kR0).empty() && results(kR1).empty()) << "no result WRITE yet";
        std::vector<InaSeen> up;
        for (const Bytes& f : inas) {
            up.push_back(ina_of(f));
        }
        inas.clear();
        return up;
    }
    static std::vector<int32_t> ints_of(const InaSeen& x) {
        std::vector<int32_t> v(x.elements.size());
        std::memcpy(v.data(), x.elements.data(), v.size() * 4);
        return v;
    }
    const fr::ParentCounters& up() const { return job->parent->counters; }
};

TEST_F(RoceAggregatorMultiPacket, ChunkGoesUpPerSegmentAndComesDownAsOneMultiPacketWrite) {
    const auto a = ints(1), b = ints(-7);
    const auto local = sum(a, b);
    const auto ups = complete(0, a, b);
    ASSERT_EQ(ups.size(), kSegments) << "one INA contribution per pmtu segment";
    for (uint32_t j = 0; j < kSegments; ++j) {
        EXPECT_EQ(ups[j].dst, kParent);
        EXPECT_EQ(ups[j].h.seq, j) << "INA seq = key x segments + j";
        EXPECT_EQ(ups[j].h.type, proto::PacketType::data);
        EXPECT_EQ(ups[j].h.flags, 0u);
        EXPECT_EQ(ups[j].h.elem_type, 0u) << "int32";
        EXPECT_EQ(ups[j].pbm, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0x30}));
        EXPECT_TRUE(ups[j].checksum_ok);
        const auto got = ints_of(ups[j]);
        ASSERT_EQ(got.size(), kPmtu / 4);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), local.begin() + j * (kPmtu / 4)))
            << "segment " << j << " of the local sum";
    }
    EXPECT_EQ(up().partial_sent, kSegments);

    // The parent's results, out of order, one twice: nothing goes down until all four are in.
    std::vector<int32_t> parent(local.size());
    for (size_t i = 0; i < parent.size(); ++i) {
        parent[i] = local[i] + 1000;
    }
    for (const uint32_t seq : {3u, 1u, 0u, 1u}) {
        send(parent_result(seq, parent), kR1);
        EXPECT_TRUE(results(kR0).empty() && results(kR1).empty()) << "seq " << seq;
    }
    EXPECT_EQ(up().result_in, 3u);
    EXPECT_EQ(up().result_duplicate, 1u);
    send(parent_result(2, parent), kR1);
    EXPECT_EQ(up().result_in, 4u);
    for (const uint16_t port : {kR0, kR1}) {
        const auto w = results(port);
        ASSERT_EQ(w.size(), kSegments) << "one four-packet WRITE per rank, port " << port;
        expect_message(w, 0, kSwitchPsn, 0, parent);
    }
    EXPECT_TRUE(inas.empty()) << "the results are not forwarded as INA";
    send(parent_result(2, parent), kR1);  // a copy after the whole result is in
    EXPECT_EQ(up().result_duplicate, 2u);
    EXPECT_EQ(total_tx(), 0u);
    send(ack_of(1, kSwitchPsn + kSegments - 1), kR0);
    send(ack_of(2, kSwitchPsn + kSegments - 1), kR1);
    EXPECT_EQ(job->table.in_use(), 0u) << "every rank acknowledged the LAST: released";

    // The next chunk's segments are INA seqs 4..7.
    const auto next = complete(1, b, a);
    ASSERT_EQ(next.size(), kSegments);
    for (uint32_t j = 0; j < kSegments; ++j) {
        EXPECT_EQ(next[j].h.seq, kSegments + j);
    }
}

TEST_F(RoceAggregatorMultiPacket, SilentParentGetsOnlyTheUnansweredSegmentsAgain) {
    const auto a = ints(3), b = ints(4);
    const auto local = sum(a, b);
    ASSERT_EQ(complete(0, a, b).size(), kSegments);
    send(parent_result(0, local), kR1);
    send(parent_result(2, local), kR1);
    advance_ms(1);
    EXPECT_EQ(tx_count(kR1), 0u) << "not before partial_timeout_ms";
    advance_ms(10);
    seen(kR1);
    seen(kR0);
    ASSERT_EQ(inas.size(), 2u) << "segments 1 and 3 only";
    std::vector<uint32_t> seqs;
    for (const Bytes& f : inas) {
        const InaSeen x = ina_of(f);
        seqs.push_back(x.h.seq);
        EXPECT_EQ(x.h.flags, proto::kFlagRetransmit);
        EXPECT_TRUE(x.checksum_ok);
        const auto got = ints_of(x);
        EXPECT_TRUE(std::equal(got.begin(), got.end(),
                               local.begin() + (x.h.seq % kSegments) * (kPmtu / 4)));
    }
    inas.clear();
    EXPECT_EQ(seqs, (std::vector<uint32_t>{1, 3}));
    EXPECT_EQ(up().partial_resent, 2u);
    send(parent_result(3, local), kR1);
    send(parent_result(1, local), kR1);
    for (const uint16_t port : {kR0, kR1}) {
        const auto w = results(port);
        ASSERT_EQ(w.size(), kSegments);
        expect_message(w, 0, kSwitchPsn, 0, local);
    }
}

// A tensor's short last chunk (2560 bytes: FIRST, MIDDLE and a LAST of 512) goes up as three
// INA contributions, the third of 128 elements, and its result comes down as one 2560-byte
// WRITE (three packets) once the three results are in.
TEST_F(RoceAggregatorMultiPacket, ShortLastChunkGoesUpAsFewerSegments) {
    constexpr uint32_t kShort = 2560;
    const auto a = ints(8), b = ints(9);
    const auto local = sum(a, b);
    const auto short_message = [&](uint16_t rank, uint32_t psn, const std::vector<int32_t>& v) {
        const bool one = rank == 1;
        rc::Ipv4Path path;
        path.src_ip = one ? kWorker1 : kWorker2;
        path.dst_ip = one ? kSwitch1 : kSwitch2;
        path.dest_qp = one ? kQpn1 : kQpn2;
        std::vector<Bytes> out;
        for (uint32_t i = 0; i < 3; ++i) {
            rc::Transmit tx;
            tx.opcode = i == 0 ? rc::op::kWriteFirst
                        : i == 2 ? rc::op::kWriteLastImm
                                 : rc::op::kWriteMiddle;
            tx.psn = psn + i;
            tx.ack_req = i == 2;
            tx.has_reth = i == 0;
            tx.length = i == 2 ? kShort - 2 * kPmtu : kPmtu;
            tx.reth = {fr::kAreaAddr, fr::kAreaRkey, kShort};
            tx.has_imm = i == 2;
            tx.imm = 0 << 8 | 1;
            const auto* bytes = reinterpret_cast<const uint8_t*>(v.data()) + i * kPmtu;
            out.push_back(frame(one, path, [&](uint8_t* o, size_t cap) {
                return rc::encode_write(o, cap, path, 1, tx, bytes);
            }));
        }
        return out;
    };
    send_all(short_message(1, kPsn1, a), kR0);
    send_all(short_message(2, kPsn2, b), kR1);
    EXPECT_TRUE(results(kR0).empty() && results(kR1).empty());
    ASSERT_EQ(inas.size(), 3u) << "2560 bytes at PMTU 1024: three segments";
    for (uint32_t j = 0; j < 3; ++j) {
        const InaSeen x = ina_of(inas[j]);
        EXPECT_EQ(x.h.seq, j);
        EXPECT_EQ(x.h.elem_count, j == 2 ? 128u : 256u);
        const auto got = ints_of(x);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), local.begin() + j * (kPmtu / 4)));
    }
    inas.clear();
    EXPECT_EQ(qp1->counters.contributions, 1u);
    // The parent's last result must have the short segment's count: a full one is refused.
    send(parent_result(2, local), kR1);
    EXPECT_EQ(up().result_bad, 1u);
    for (uint32_t seq = 0; seq < 3; ++seq) {
        const size_t n = seq == 2 ? 128 : 256;
        send(ina_result_frame(seq, local.data() + seq * 256, n, 0, {1, 2, 3, 4, 5, 6},
                              port_mac(kR1)),
             kR1);
    }
    EXPECT_EQ(up().result_in, 3u);
    for (const uint16_t port : {kR0, kR1}) {
        const auto w = results(port);
        ASSERT_EQ(w.size(), 3u) << "one three-packet WRITE per rank";
        std::vector<uint8_t> bytes;
        for (uint32_t i = 0; i < 3; ++i) {
            EXPECT_EQ(w[i].p.bth.psn, kSwitchPsn + i);
            EXPECT_TRUE(w[i].icrc_ok);
            bytes.insert(bytes.end(), w[i].payload.begin(), w[i].payload.end());
        }
        EXPECT_EQ(w[0].p.reth.dma_len, kShort);
        EXPECT_EQ(w[2].p.bth.opcode, rc::op::kWriteLastImm);
        ASSERT_EQ(bytes.size(), kShort);
        EXPECT_EQ(std::memcmp(bytes.data(), local.data(), kShort), 0);
    }
}

TEST_F(RoceAggregatorMultiPacket, SegmentResultThatDisagreesWithTheChunkIsRefused) {
    const auto a = ints(5), b = ints(6);
    const auto local = sum(a, b);
    ASSERT_EQ(complete(0, a, b).size(), kSegments);
    // One element more than a segment holds.
    send(ina_result_frame(0, local.data(), kPmtu / 4 + 1, 0, {1, 2, 3, 4, 5, 6}, port_mac(kR1)),
         kR1);
    // A segment's result with one element too few.
    send(ina_result_frame(1, local.data(), kPmtu / 4 - 1, 0, {1, 2, 3, 4, 5, 6}, port_mac(kR1)),
         kR1);
    EXPECT_EQ(up().result_bad, 2u);
    EXPECT_EQ(up().result_in, 0u);
    EXPECT_EQ(total_tx(), 0u);
}

TEST(RoceAggregatorConfig, ErrorsNameTheirPlace) {
    register_once();
    const std::string base = std::string(kStageYaml) + "rdma:\n  jobs:\n";
    auto r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator}\n", "t.yaml");
    EXPECT_NE(r.error_text().find("missing key 'parent'"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, parent: 10.0.2.7}\n", "t.yaml");
    const auto line = std::count(base.begin(), base.end(), '\n') + 1;
    EXPECT_NE(r.error_text().find("t.yaml:" + std::to_string(line) + ":33: parent in rdma job 7"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("only with role: aggregator"), std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7, "
                                   "abm: \"1-3\"}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("expected one per rank"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7, "
                                   "bsl: 64, abm: \"64-65\"}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("in set 0 of BSL 64"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: boss}\n", "t.yaml");
    EXPECT_NE(r.error_text().find("root or aggregator"), std::string::npos) << r.error_text();
    r = config::load_string(std::string(kStageYaml) +
                                "ina:\n  jobs:\n    - {job_id: 7, role: root, abm: \"1-2\", "
                                "op: sum, elem_type: fp32, root: 10.0.1.1, "
                                "workers: [{bfr_id: 1, ip: 10.0.1.2}, {bfr_id: 2, ip: 10.0.2.2}]}\n"
                                "rdma:\n  jobs:\n"
                                "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("which ina.jobs configures on this switch too"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, role: aggregator, parent: 10.0.2.7}\n",
                            "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto& j = fr::rdma_of(*r.config)->jobs[0];
    EXPECT_EQ(j.abm, (std::vector<uint16_t>{1, 2})) << "rank r is BFR-id r by default";
    EXPECT_EQ(j.bsl_bits, 256u);
}

// The `rdma:` section through the loader: errors name file:line:col, nothing half-loaded.
TEST(RoceConfig, ErrorsNameTheirPlace) {
    register_once();
    const std::string base = std::string(kStageYaml) + "rdma:\n  jobs:\n";
    auto r = config::load_string(
        base + "    - {id: 7, world: 2, chunk_bytes: 1536, pmtu: 1024}\n", "t.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_text().find("chunk_bytes 1536 is above pmtu 1024 and no multiple of it"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("t.yaml:"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, chunk_bytes: 65536, pmtu: 1024}\n",
                            "t.yaml");
    EXPECT_TRUE(r.ok()) << "a multiple of the pmtu up to 64 KiB: " << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, chunk_bytes: 131072, pmtu: 4096}\n",
                            "t.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_text().find("chunk_bytes"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, chunk_bytes: 2048, pmtu: 1024, "
                                   "role: aggregator, parent: 10.0.2.7}\n",
                            "t.yaml");
    EXPECT_TRUE(r.ok()) << "an aggregator's multi-packet chunk goes up as one INA "
                           "contribution per pmtu segment: "
                        << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, windw: 8}\n", "t.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_text().find("unknown key 'windw'"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2, window: 12}\n", "t.yaml");
    EXPECT_NE(r.error_text().find("power of two"), std::string::npos) << r.error_text();
    r = config::load_string(
        base + "    - id: 7\n      world: 2\n      qps:\n"
               "        - {rank: 3, ip: 192.0.2.1, qpn: 5, psn: 0, switch_qpn: 0x100,\n"
               "           switch_psn: 0, result_addr: 0, result_rkey: 1, result_length: 4096}\n",
        "t.yaml");
    EXPECT_NE(r.error_text().find("above the world"), std::string::npos) << r.error_text();
    EXPECT_NE(r.error_text().find("on no port's subnet"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - {id: 7, world: 2}\n", "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto* rdma = fr::rdma_of(*r.config);
    ASSERT_NE(rdma, nullptr);
    EXPECT_EQ(rdma->jobs[0].window, 64u);
    EXPECT_EQ(rdma->jobs[0].chunk_bytes, 1024u);
    EXPECT_EQ(rdma->cm_port, fr::kDefaultCmPort);
    r = config::load_string(std::string(kStageYaml) + "rdma:\n  cm_port: 0x4791\n  jobs: []\n",
                            "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->cm_port, 0x4791);
    r = config::load_string(std::string(kStageYaml) + "rdma:\n  cm_port: 65536\n", "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:"), std::string::npos) << r.error_text();
    EXPECT_NE(r.error_text().find("cm_port"), std::string::npos) << r.error_text();
}

// A port with several IPv4 addresses (kStageYaml's r1: 10.0.2.1/24 and 10.0.3.1/24): an IPv4
// QP's `source` picks any of the addresses of the port whose subnet holds its worker; without
// it the address on the worker's subnet. Errors name file:line:col of the `source` value.
TEST(RoceConfig, SourceChoosesAmongAPortsIpv4Addresses) {
    register_once();
    const auto yaml = [](const std::string& ip, const std::string& source) {
        return std::string(kStageYaml) + "rdma:\n  jobs:\n    - id: 7\n      world: 2\n"
               "      qps:\n        - {rank: 1, ip: " + ip + ", source: \"" + source +
               "\", qpn: 17,\n           psn: 0, switch_qpn: 0x100, switch_psn: 0, "
               "result_addr: 0, result_rkey: 1,\n           result_length: 4096}\n";
    };
    // The line of the QP's first line in the document, and its `source` value's column.
    const std::string head = std::string(kStageYaml) + "rdma:\n  jobs:\n    - id: 7\n";
    const std::string at =
        "t.yaml:" + std::to_string(std::count(head.begin(), head.end(), '\n') + 3) + ":";
    auto r = config::load_string(yaml("10.0.2.2", "10.0.3.1"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const fr::JobConfig& job = fr::rdma_of(*r.config)->jobs.at(0);
    fr::QpParams p = fr::qp_params(*r.config, job, job.qps.at(0));
    EXPECT_EQ(net::Ipv4Addr{p.switch_ip}.str(), "10.0.3.1") << "the QP's source";
    EXPECT_NE(fr::section_hooks().to_json(fr::rdma_of(*r.config)).find("\"source\":\"10.0.3.1\""),
              std::string::npos)
        << "GET /api/v1/config shows it";
    fr::QpConfig no_source = job.qps.at(0);
    no_source.source4.reset();
    p = fr::qp_params(*r.config, job, no_source);
    EXPECT_EQ(net::Ipv4Addr{p.switch_ip}.str(), "10.0.2.1") << "the address on its subnet";
    EXPECT_FALSE(fr::same_qp(no_source, job.qps.at(0))) << "another source is another QP";

    r = config::load_string(yaml("10.0.2.2", "10.0.2.1"), "t.yaml");
    EXPECT_TRUE(r.ok()) << "the first address named: " << r.error_text();
    r = config::load_string(yaml("10.0.2.2", "::ffff:10.0.3.1"), "t.yaml");
    ASSERT_TRUE(r.ok()) << "IPv4-mapped, as for ip: " << r.error_text();
    EXPECT_EQ(fr::rdma_of(*r.config)->jobs.at(0).qps.at(0).source4, net::Ipv4Addr{kSecondary2});
    r = config::load_string(yaml("10.0.2.2", "10.0.1.1"), "t.yaml");
    EXPECT_NE(r.error_text().find(at + "43: source 10.0.1.1 is no IPv4 address of the port "
                                       "whose subnet holds the worker 10.0.2.2"),
              std::string::npos)
        << "another port's address: " << r.error_text();
    r = config::load_string(yaml("10.0.2.2", "10.0.2.9"), "t.yaml");
    EXPECT_NE(r.error_text().find(at + "43: source 10.0.2.9 is no IPv4 address"),
              std::string::npos)
        << "an address on the subnet the switch does not own: " << r.error_text();
    r = config::load_string(yaml("10.0.2.2", "2001:db8:1::1"), "t.yaml");
    EXPECT_NE(r.error_text().find(at + "43: source 2001:db8:1::1 is an IPv6 address for the IPv4 "
                                       "worker 10.0.2.2"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(yaml("10.0.2.2", "10.0.3"), "t.yaml");
    EXPECT_NE(r.error_text().find(at + "43: expected source: one of the switch's IPv4 addresses"),
              std::string::npos)
        << r.error_text();

    // The connect body takes it too, and the connect refuses one off the worker's port.
    const std::string body = R"({"rank": 1, "qpn": 17, "psn": 5, "ip": "10.0.2.2",
        "pmtu": 1024, "result_addr": 0, "result_rkey": 1, "result_length": 4096,
        "chunk_bytes": 1024, "window": 64, "dtype": "fp32", "op": "sum", "world": 2, )";
    fr::ConnectParse c = fr::parse_connect(body + R"("source": "10.0.3.1"})", "request");
    ASSERT_TRUE(c.request.has_value());
    ASSERT_TRUE(c.request->qp.source4.has_value());
    EXPECT_EQ(c.request->qp.source4->str(), "10.0.3.1");
    c = fr::parse_connect(body + R"("source": "2001:db8:1::1"})", "request");
    ASSERT_EQ(c.errors.size(), 1u);
    EXPECT_NE(c.errors[0].message.find("source 2001:db8:1::1 is an IPv6 address"),
              std::string::npos)
        << c.errors[0].message;

    // A connected QP whose source leaves the port ends at a reload, with the reason; one whose
    // source stays is carried.
    r = config::load_string(yaml("10.0.2.2", "10.0.3.1"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    {
        auto rdma = std::make_shared<fr::RdmaConfig>(*fr::rdma_of(*r.config));
        rdma->jobs.at(0).qps.at(0).from_api = true;
        r.config->sections[fr::kSectionKey] = rdma;
    }
    const std::string jobs = "rdma:\n  jobs:\n    - id: 7\n      world: 2\n";
    auto next = config::load_string(std::string(kStageYaml) + jobs, "file.yaml");
    ASSERT_TRUE(next.ok()) << next.error_text();
    std::vector<std::string> ended;
    fr::carry_connected_qps(*r.config, *next.config, ended);
    EXPECT_TRUE(ended.empty()) << ended.at(0);
    EXPECT_EQ(fr::rdma_of(*next.config)->jobs.at(0).qps.size(), 1u);
    std::string without = kStageYaml;
    const std::string both = "ipv4: [10.0.2.1/24, 10.0.3.1/24]";
    without.replace(without.find(both), both.size(), "ipv4: [10.0.2.1/24]");
    next = config::load_string(without + jobs, "file.yaml");
    ASSERT_TRUE(next.ok()) << next.error_text();
    fr::carry_connected_qps(*r.config, *next.config, ended);
    ASSERT_EQ(ended.size(), 1u);
    EXPECT_EQ(ended[0], "job 7 rank 1: its source address is not on its worker's port in the new "
                        "config");
    EXPECT_TRUE(fr::rdma_of(*next.config)->jobs.at(0).qps.empty());
}

}  // namespace
}  // namespace ina::test
