// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 server-to-server stage (src/features/roce_s2s/datapath_s2s.*) on mbufs through the
// whole pipeline. Job 9: root 10.0.2.2 (r1), rank 1 = 10.0.1.2 (r0, the carrier), rank 2 =
// 10.0.2.7 (r1). Contributions are absorbed and ACKed as the root; a complete chunk is ONE
// WRITE toward the root on the carrier with the root-side PSN; the root's ACK is consumed and
// releases the slot; gap, duplicate, root NAK, timeout, CE and root CNP, chained input, the
// other direction and non-job RoCE untouched, the ACK-only-once-stored invariant, config errors.
#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "features/roce/config_roce.h"
#include "features/roce_s2s/compile_s2s.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/control_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"
#include "features/roce_s2s/metrics_s2s.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "roce/cm.h"
#include "roce/encode.h"
#include "roce/icrc.h"
#include "roce_s2s_support.h"
#include "stage_util.h"
#include "worker/rdma/protocol.h"

namespace ina::test {
namespace {

namespace fs = features::roce_s2s;
namespace rc = ina::roce;

constexpr uint32_t kRoot = 0x0A000202;     // 10.0.2.2 on r1 (static neighbour)
constexpr uint32_t kWorker1 = 0x0A000102;  // 10.0.1.2 on r0 (static neighbour)
constexpr uint32_t kWorker2 = 0x0A000207;  // 10.0.2.7 on r1 (learned)
constexpr uint32_t kChunk = 64;            // 16 int32
constexpr uint32_t kWindow = 4;
constexpr uint32_t kWorkerQpn[3] = {0, 17, 18};
constexpr uint32_t kRootQpn[3] = {0, 0x40, 0x41};
constexpr uint32_t kPsn[3] = {0, 1000, 2000};
constexpr uint64_t kAreaVa[3] = {0, 0x10000, 0x20000};  // each connection's area at the root
constexpr uint32_t kAreaRkey[3] = {0, 0x111, 0x222};
constexpr uint16_t kSlot = 10;
// Result replication: the PSN the root sends from on each connection, each worker's result
// buffer (in the static config, or the REQ of a learning job).
constexpr uint32_t kRootPsn[3] = {0, 5000, 9000};
constexpr uint64_t kResultAddr[3] = {0, 0x7f0000001000, 0x7f0000800000};
constexpr uint32_t kResultRkey[3] = {0, 0xA1, 0xB2};

// Job 9 with `job_keys` (indented lines) and `connections` (list lines).
std::string s2s_yaml(
    const std::string& job_keys = "      timeout: 10\n",
    const std::string& connections =
        "        - {rank: 2, ip: 10.0.2.7, qpn: 18, root_qpn: 0x41, psn: 2000}\n"
        "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 0x40, psn: 1000}\n") {
    return std::string(kStageYaml) + R"(rdma_s2s:
  jobs:
    - id: 9
      root: 10.0.2.2
      world: 2
      op: sum
      dtype: int32
      chunk_bytes: 64
      window: 4
)" + job_keys + "      connections:\n" +
           connections;
}

void register_once() { register_s2s_once(); }

// The job removed by a config change: control_s2s keeps its state attached, stores the idle
// timeout into it and publishes its entries marked leaving (compile_s2s append_job), so the
// snapshot is rebuilt here the way decorate() does it.
void leave(fs::S2sView& view, const fs::JobConfig& cfg, fs::JobState& state, uint16_t slot,
           uint64_t timeout_ms) {
    view.conns.clear();
    view.learning.clear();
    fs::append_job(view, cfg, true, 0, slot);
    fs::sort_view(view);
    state.leave_timeout_ns.store(timeout_ms * 1000000);
}

const fs::JobConfig& job_config(const std::string& yaml, config::LoadResult& keep) {
    keep = config::load_string(yaml, "s2s.yaml");
    EXPECT_TRUE(keep.ok()) << keep.error_text();
    return fs::s2s_of(*keep.config)->jobs.at(0);
}

class RoceS2s : public StageTest {
protected:
    void SetUp() override {
        register_once();
        StageTest::SetUp();
        ctx->pool = pool;
        build(yaml());
        auto loaded = config::load_string(yaml(), "s2s.yaml");
        ASSERT_TRUE(loaded.ok()) << loaded.error_text();
        const auto* s2s = fs::s2s_of(*loaded.config);
        ASSERT_NE(s2s, nullptr);
        job_id = s2s->jobs[0].id;
        job = std::make_unique<fs::JobState>(fs::job_params(s2s->jobs[0]));
        ASSERT_TRUE(pipeline::apply_command(
            *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, kSlot,
                              fs::job_state_id(job_id), job.get()}));
        auto* view = static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
        ASSERT_NE(view, nullptr);
        for (auto& c : view->conns) {
            c.slot = kSlot;
        }
        for (auto& l : view->learning) {
            l.slot = kSlot;
        }
    }
    void TearDown() override {
        pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s, kSlot,
                                                  fs::job_state_id(job_id), nullptr});
        StageTest::TearDown();
    }
    virtual std::string yaml() const { return s2s_yaml(); }

    static uint16_t port_of(uint32_t ip) { return ip == kWorker1 ? kR0 : kR1; }
    static rte_ether_addr mac_of(uint32_t ip) {
        return ip == kWorker1 ? kNbR0Gw : ip == kRoot ? kNbR1Gw : kNbR1Host;
    }
    static uint32_t worker_ip(int rank) { return rank == 1 ? kWorker1 : kWorker2; }

    template <typename Encode>
    Bytes frame(uint32_t from, Encode encode) {
        std::vector<uint8_t> buf(2048);
        const rte_ether_addr dst = port_mac(port_of(from));
        const rte_ether_addr src = mac_of(from);
        const size_t l2 = rc::write_ethernet(buf.data(), buf.size(), dst.addr_bytes,
                                             src.addr_bytes);
        const size_t l3 = encode(buf.data() + l2, buf.size() - l2);
        buf.resize(l2 + l3);
        return buf;
    }
    // Rank's WRITE_ONLY_WITH_IMM of chunk c toward the root (imm c << 8 | 1).
    Bytes contribution(int rank, uint32_t psn, uint32_t c, const std::vector<int32_t>& values,
                       uint8_t tos = 0x02, uint8_t opcode = rc::op::kWriteOnlyImm) {
        rc::Ipv4Path path;
        path.src_ip = worker_ip(rank);
        path.dst_ip = kRoot;
        path.dest_qp = kRootQpn[rank];
        path.tos = tos;
        path.src_port = static_cast<uint16_t>(0xC000 + rank);
        rc::Transmit tx;
        tx.opcode = opcode;
        tx.psn = psn;
        tx.ack_req = true;
        tx.has_reth = true;
        tx.length = static_cast<uint32_t>(values.size() * 4);
        tx.reth = {kAreaVa[rank] + (c % kWindow) * kChunk, kAreaRkey[rank], tx.length};
        tx.has_imm = opcode == rc::op::kWriteOnlyImm;
        tx.imm = c << 8 | 1;
        return frame(path.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx,
                                    reinterpret_cast<const uint8_t*>(values.data()));
        });
    }
    // Replication: the root's result WRITE packet `k` (from kRootPsn[1]) of chunk c on the
    // carrier, into rank 1's result buffer.
    // `worker_qpn` and `first_psn`: another connection of rank 1 (a resumed carrier's).
    Bytes result(uint32_t k, uint32_t c, uint8_t opcode = rc::op::kWriteOnlyImm,
                 uint32_t length = kChunk, uint32_t dma_len = kChunk,
                 uint32_t worker_qpn = kWorkerQpn[1], uint32_t first_psn = kRootPsn[1]) {
        rc::Ipv4Path path;
        path.src_ip = kRoot;
        path.dst_ip = kWorker1;
        path.dest_qp = worker_qpn;
        path.src_port = 0xC0DE;
        rc::Transmit tx;
        tx.opcode = opcode;
        tx.psn = first_psn + k;
        tx.ack_req = true;
        tx.has_reth = opcode == rc::op::kWriteFirst || opcode == rc::op::kWriteOnly ||
                      opcode == rc::op::kWriteOnlyImm;
        tx.length = length;
        tx.reth = {kResultAddr[1] + c * kChunk, kResultRkey[1], dma_len};
        tx.has_imm = opcode == rc::op::kWriteOnlyImm || opcode == rc::op::kWriteLastImm;
        tx.imm = c << 8 | 2;
        std::vector<int32_t> v = fill(static_cast<int32_t>(1000 * c + k));
        v.resize(length / 4);
        return frame(kRoot, [&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx,
                                    reinterpret_cast<const uint8_t*>(v.data()));
        });
    }
    // The root's ACK/NAK on rank's connection (root-side PSN space).
    Bytes root_ack(int rank, uint32_t psn, uint8_t syndrome = rc::aeth::kAckUnlimited) {
        rc::Ipv4Path path;
        path.src_ip = kRoot;
        path.dst_ip = worker_ip(rank);
        path.dest_qp = kWorkerQpn[rank];
        return frame(kRoot, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, path, 1, rc::Reply{syndrome, psn, 1});
        });
    }
    Bytes root_cnp(int rank) {
        rc::Ipv4Path path;
        path.src_ip = kRoot;
        path.dst_ip = worker_ip(rank);
        path.dest_qp = kWorkerQpn[rank];
        return frame(kRoot, [&](uint8_t* out, size_t cap) {
            return rc::encode_cnp(out, cap, path, 1);
        });
    }

    Bytes cm_frame(uint32_t from, uint32_t to, const rc::cm::Message& msg) {
        rc::Ipv4Path path;
        path.src_ip = from;
        path.dst_ip = to;
        path.dest_qp = rc::cm::kCmQpn;
        return frame(from, [&](uint8_t* out, size_t cap) {
            return rc::cm::encode_packet(out, cap, path, 1, 0, msg);
        });
    }
    // Rank's DREQ to the root (it names the root's QPN).
    Bytes dreq(int rank) {
        rc::cm::Message msg;
        msg.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::dreq);
        msg.dreq.local_comm_id = 0x1000 + static_cast<uint32_t>(rank);
        msg.dreq.remote_comm_id = 0x2000 + static_cast<uint32_t>(rank);
        msg.dreq.remote_qpn = kRootQpn[rank];
        return cm_frame(worker_ip(rank), kRoot, msg);
    }
    void run(const std::vector<rte_mbuf*>& ms) {
        std::vector<rte_mbuf*> v = ms;
        pipeline::process_burst(*ctx, *snap, v.data(), static_cast<uint16_t>(v.size()));
    }
    void send(const Bytes& f) {
        const uint32_t src = static_cast<uint32_t>(f[26]) << 24 | f[27] << 16 | f[28] << 8 | f[29];
        run({mbuf(f, port_of(src))});
    }

    std::vector<Seen> seen(uint16_t port) {
        std::vector<Seen> out;
        for (rte_mbuf* m : take_tx(port)) {
            const Bytes b = bytes_of(m);
            rte_pktmbuf_free(m);
            Seen s;
            const bool parsed = parse_seen(b, s);
            EXPECT_TRUE(parsed);
            if (parsed) {
                out.push_back(s);
            }
        }
        return out;
    }
    // Frames toward `ip` among those queued on its port (others stay queued? no: all taken).
    std::vector<Seen> to(uint32_t ip) {
        std::vector<Seen> out;
        for (auto& s : seen(port_of(ip))) {
            if (s.dst == ip) {
                out.push_back(s);
            } else {
                stray.push_back(s);
            }
        }
        return out;
    }
    void drain() {
        free_mbufs(take_tx(kR0));
        free_mbufs(take_tx(kR1));
        stray.clear();
    }
    static std::vector<int32_t> ints(const std::vector<uint8_t>& b) {
        std::vector<int32_t> v(b.size() / 4);
        std::memcpy(v.data(), b.data(), v.size() * 4);
        return v;
    }
    static std::vector<int32_t> fill(int32_t base) {
        std::vector<int32_t> v(kChunk / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = base + static_cast<int32_t>(i);
        }
        return v;
    }
    uint64_t lcore(fs::LcoreCounter c) const {
        return ctx->feature_counters[fs::kFeatureS2s][static_cast<size_t>(c)];
    }
    void advance_ms(uint64_t ms) {
        ctx->now_tsc += ms * ctx->tsc_hz / 1000;
        pipeline::service_timers(*ctx, *snap);
    }
    // Both ranks contribute chunk c (PSN offset c); returns the one aggregate toward the root.
    Seen complete_chunk(uint32_t c, int32_t a = 1, int32_t b = 100) {
        send(contribution(1, kPsn[1] + c, c, fill(a)));
        send(contribution(2, kPsn[2] + c, c, fill(b)));
        std::vector<Seen> agg;
        for (auto& s : to(kRoot)) {
            agg.push_back(s);
        }
        EXPECT_EQ(agg.size(), 1u) << "ONE aggregate per chunk";
        free_mbufs(take_tx(kR0));
        return agg.empty() ? Seen{} : agg[0];
    }

    // Draining or leaving, chunk 1 held half done (rank 1's): rank 1's new chunk 2 gets an RNR
    // NAK, rank 2's part of chunk 1 completes it and its aggregate goes to the root.
    void new_chunk_refused_held_one_finished() {
        send(contribution(1, kPsn[1] + 2, 2, fill(1)));  // a new chunk: not absorbed any more
        auto out = to(kWorker1);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(rc::aeth::kind(out[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
        EXPECT_EQ(job->counters.drain_refused, 1u);
        send(contribution(2, kPsn[2] + 1, 1, fill(2)));  // finishes the held chunk 1
        auto agg = to(kRoot);
        ASSERT_EQ(agg.size(), 1u) << "the held chunk reaches the root";
        EXPECT_EQ(agg[0].p.bth.psn, kPsn[1] + 1);
        EXPECT_EQ(ints(agg[0].payload)[0], 1 + 2);
    }
    // Chunk 0 completed and acknowledged by the root, then the job removed (nothing held).
    void removed_after_chunk_zero(uint64_t timeout_ms) {
        config::LoadResult keep;
        const fs::JobConfig& cfg = job_config(yaml(), keep);
        complete_chunk(0);
        drain();
        send(root_ack(1, kPsn[1]));
        drain();
        leave(*static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get()), cfg, *job,
              kSlot, timeout_ms);
    }

    std::unique_ptr<fs::JobState> job;
    uint32_t job_id = 0;
    std::vector<Seen> stray;
};

TEST_F(RoceS2s, ContributionIsAbsorbedAndAckedAsTheRoot) {
    send(contribution(1, kPsn[1], 0, fill(1)));
    auto acks = to(kWorker1);
    ASSERT_EQ(acks.size(), 1u);
    const Seen& a = acks[0];
    EXPECT_EQ(a.src, kRoot) << "the ACK comes from the root's address";
    EXPECT_EQ(a.p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(a.p.bth.dest_qp, kWorkerQpn[1]);
    EXPECT_EQ(a.p.bth.psn, kPsn[1]);
    EXPECT_EQ(a.p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(a.p.aeth.msn, 1u);
    EXPECT_TRUE(a.icrc_ok);
    EXPECT_EQ(tx_count(kR1), 0u) << "nothing toward the root before the chunk is complete";
    EXPECT_EQ(job->counters.absorbed, 1u);
    EXPECT_EQ(job->counters.acks_synthesized, 1u);
    EXPECT_EQ(job->table.in_use(), 1u);
}

TEST_F(RoceS2s, CompleteChunkIsOneWriteTowardTheRootOnTheCarrier) {
    for (uint32_t c = 0; c < 3; ++c) {
        const Seen w = complete_chunk(c, static_cast<int32_t>(c), 100);
        EXPECT_EQ(w.src, kWorker1) << "the carrier is the lowest rank's connection";
        EXPECT_EQ(w.p.bth.opcode, rc::op::kWriteOnlyImm);
        EXPECT_EQ(w.p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(w.p.bth.psn, kPsn[1] + c) << "the root-side PSN of the carrier";
        EXPECT_TRUE(w.p.bth.ack_req);
        EXPECT_EQ(w.p.reth.va, kAreaVa[1] + c * kChunk) << "the carrier's own RETH";
        EXPECT_EQ(w.p.reth.rkey, kAreaRkey[1]);
        EXPECT_EQ(w.p.reth.dma_len, kChunk);
        EXPECT_EQ(w.p.imm, c << 8 | 2) << "chunk << 8 | k";
        EXPECT_TRUE(w.icrc_ok);
        const auto sum = ints(w.payload);
        ASSERT_EQ(sum.size(), kChunk / 4);
        for (size_t i = 0; i < sum.size(); ++i) {
            EXPECT_EQ(sum[i], static_cast<int32_t>(c) + 100 + 2 * static_cast<int32_t>(i));
        }
    }
    EXPECT_EQ(job->counters.aggregates_sent, 3u);
    EXPECT_EQ(job->table.in_use(), 3u) << "kept until the root acknowledges";
    send(root_ack(1, kPsn[1] + 1));
    EXPECT_EQ(total_tx(), 0u) << "the root's ACK is consumed, never forwarded to a worker";
    EXPECT_EQ(job->table.in_use(), 1u) << "an ACK of PSN n covers every aggregate up to n";
    EXPECT_EQ(job->counters.root_acks_consumed, 1u);
    EXPECT_EQ(job->counters.aggregates_acked, 2u);
    send(root_ack(2, kPsn[2]));  // on a connection the root saw nothing of
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(job->counters.root_acks_consumed, 2u);
    EXPECT_EQ(job->table.in_use(), 1u);
}

TEST_F(RoceS2s, PsnGapGivesExactlyOneNak) {
    send(contribution(1, kPsn[1] + 1, 1, fill(1)));
    send(contribution(1, kPsn[1] + 2, 2, fill(1)));
    auto out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u) << "one NAK per gap";
    EXPECT_EQ(out[0].src, kRoot);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kNakPsnSequence);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1]) << "the PSN the root expects";
    EXPECT_EQ(out[0].p.aeth.msn, 0u);
    EXPECT_EQ(job->counters.naks_sent, 1u);
    EXPECT_EQ(job->table.in_use(), 0u) << "nothing out of order was added";
    send(contribution(1, kPsn[1], 0, fill(1)));  // the missing one: in order again
    out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1]);
}

TEST_F(RoceS2s, DuplicateIsReAckedAndNotAddedTwice) {
    const Bytes c = contribution(1, kPsn[1], 0, fill(1));
    send(c);
    send(c);
    auto out = to(kWorker1);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[1].p.bth.psn, kPsn[1]);
    EXPECT_EQ(out[1].p.aeth.msn, 1u);
    EXPECT_EQ(job->counters.duplicates, 1u);
    EXPECT_EQ(job->counters.absorbed, 1u);
    send(contribution(2, kPsn[2], 0, fill(0)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(ints(agg[0].payload)[3], 1 + 3 + 0 + 3) << "rank 1 counted once";
}

TEST_F(RoceS2s, RootNakSequenceRetransmitsTheAggregate) {
    const Seen first = complete_chunk(0);
    complete_chunk(1);
    send(root_ack(1, kPsn[1], rc::aeth::kNakPsnSequence));  // the root lost PSN kPsn[1]
    auto again = to(kRoot);
    ASSERT_EQ(again.size(), 2u) << "go-back-N from the NAKed PSN";
    EXPECT_EQ(again[0].p.bth.psn, kPsn[1]);
    EXPECT_EQ(again[0].payload, first.payload) << "the kept aggregate, same bytes";
    EXPECT_EQ(again[1].p.bth.psn, kPsn[1] + 1);
    EXPECT_EQ(job->counters.retransmits, 2u);
    EXPECT_EQ(job->counters.root_naks_consumed, 1u);
    EXPECT_EQ(tx_count(kR0), 0u) << "the NAK is not forwarded to the worker";
}

TEST_F(RoceS2s, LostAggregateIsRetransmittedAfterTheTimeout) {
    complete_chunk(0);
    advance_ms(1);
    EXPECT_EQ(tx_count(kR1), 0u) << "not before the ACK timeout (4.2 ms)";
    advance_ms(10);
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1]);
    EXPECT_EQ(ints(out[0].payload)[0], 101);
    EXPECT_EQ(job->counters.retransmits, 1u);
}

// The invariant: an ACK means the contribution is in a slot the switch will deliver to the
// root. A slot is held until the root's ACK covers its aggregate, so a contribution for a
// chunk whose slot is still held gets an RNR NAK (nothing advances), never an ACK.
TEST_F(RoceS2s, AckedOnlyOnceInASlotThatReachesTheRoot) {
    for (uint32_t c = 0; c < kWindow; ++c) {
        complete_chunk(c);
    }
    drain();
    send(contribution(1, kPsn[1] + kWindow, kWindow, fill(7)));
    auto out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(rc::aeth::kind(out[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak)
        << "chunk 0's aggregate is not acknowledged: its slot is not free";
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1] + kWindow);
    EXPECT_EQ(job->counters.absorbed, 2 * kWindow);
    // The root acknowledges chunk 0: the same PSN is now absorbed and ACKed.
    send(root_ack(1, kPsn[1]));
    send(contribution(1, kPsn[1] + kWindow, kWindow, fill(7)));
    out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1] + kWindow);
    EXPECT_EQ(job->counters.absorbed, 2 * kWindow + 1);
    // A bad ICRC is never ACKed (the root would drop it too).
    Bytes bad = contribution(2, kPsn[2] + kWindow, kWindow, fill(7));
    bad[bad.size() - 10] ^= 1;
    send(bad);
    EXPECT_EQ(tx_count(kR1), 0u);
    EXPECT_EQ(job->counters.icrc_errors, 1u);
}

TEST_F(RoceS2s, CeEarnsACnpAndARootCnpFansOut) {
    send(contribution(2, kPsn[2], 0, fill(1), 0x03));
    int cnps = 0;
    for (const auto& x : to(kWorker2)) {
        if (x.p.bth.opcode == rc::op::kCnp) {
            ++cnps;
            EXPECT_EQ(x.src, kRoot);
            EXPECT_EQ(x.p.bth.dest_qp, kWorkerQpn[2]);
            EXPECT_TRUE(x.icrc_ok);
        }
    }
    EXPECT_EQ(cnps, 1);
    EXPECT_EQ(job->counters.cnps_sent, 1u);
    send(root_cnp(1));  // the root slows the carrier, which carries both workers' data
    auto w1 = to(kWorker1);
    auto w2 = to(kWorker2);
    ASSERT_EQ(w1.size(), 1u);
    ASSERT_EQ(w2.size(), 1u);
    EXPECT_EQ(w1[0].p.bth.opcode, rc::op::kCnp);
    EXPECT_EQ(w2[0].p.bth.dest_qp, kWorkerQpn[2]);
    EXPECT_EQ(job->counters.cnps_fanned_out, 2u);
}

TEST_F(RoceS2s, ChainedContributionIsAbsorbed) {
    const Bytes c1 = contribution(1, kPsn[1], 0, fill(1));
    run({chained(c1, kR0, {20, 40, 13})});
    EXPECT_EQ(to(kWorker1).size(), 1u);
    send(contribution(2, kPsn[2], 0, fill(1)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(ints(agg[0].payload)[5], 12);
}

TEST_F(RoceS2s, OtherDirectionAndOtherRocePassUntouched) {
    // The root's result WRITE to a worker (its own PSN space) and the worker's ACK of it.
    rc::Ipv4Path path;
    path.src_ip = kRoot;
    path.dst_ip = kWorker1;
    path.dest_qp = kWorkerQpn[1];
    rc::Transmit tx;
    tx.opcode = rc::op::kWriteOnlyImm;
    tx.psn = 77;
    tx.has_reth = true;
    tx.length = kChunk;
    tx.reth = {0x5000, 9, kChunk};
    tx.has_imm = true;
    const auto v = fill(3);
    const Bytes result = frame(kRoot, [&](uint8_t* out, size_t cap) {
        return rc::encode_write(out, cap, path, 1, tx, reinterpret_cast<const uint8_t*>(v.data()));
    });
    send(result);
    auto out = seen(kR0);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, 77u);
    EXPECT_EQ(out[0].ttl, 63) << "routed like any packet";
    EXPECT_TRUE(out[0].icrc_ok) << "the ICRC masks the TTL: still valid, untouched";
    // RoCE of no job: a QPN no job has.
    Bytes other = contribution(1, kPsn[1], 0, fill(1));
    other[14 + 28 + 7] = 0x77;
    rc::write_icrc(other.data() + other.size(), rc::icrc(other.data() + 14, other.size() - 14));
    send(other);
    out = seen(kR1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.dest_qp, 0x77u);
    EXPECT_EQ(lcore(fs::LcoreCounter::passed), 2u);
    EXPECT_EQ(job->counters.absorbed, 0u);
}

TEST_F(RoceS2s, NoStateFallsBackToForwarding) {
    pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s, kSlot,
                                              fs::job_state_id(9), nullptr});
    send(contribution(1, kPsn[1], 0, fill(1)));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u) << "the worker's WRITE reaches the root as it is";
    EXPECT_EQ(out[0].src, kWorker1);
    EXPECT_EQ(lcore(fs::LcoreCounter::fallback), 1u);
    ASSERT_TRUE(pipeline::apply_command(
        *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, kSlot, fs::job_state_id(9),
                          job.get()}));
}

TEST_F(RoceS2s, NotAContributionIsNeitherExecutedNorAcked) {
    send(contribution(1, kPsn[1], 0, fill(1), 0x02, rc::op::kWriteOnly));
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(job->counters.not_contribution, 1u);
    EXPECT_EQ(job->conns[0].leg.epsn, kPsn[1]);
}

// Damaged input never crashes, leaks or breaks the state: flipped bytes, cut frames and random
// opcodes/PSNs of contributions, root ACKs, CNPs, in normal, draining and forwarding modes,
// plain and chained. Afterwards every mbuf is back and the invariants hold: no more slots
// than the window, and a worker-side sequence advanced only by what was absorbed or counted.
TEST_F(RoceS2s, DamagedInputIsSurvived) {
    std::mt19937 rng(12345);
    auto* view = static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    const unsigned base = in_use();
    for (int round = 0; round < 3000; ++round) {
        if (round == 2000) {
            for (auto& c : view->conns) {
                c.drain = true;  // the last third drains (and then forwards)
            }
        }
        const int rank = 1 + static_cast<int>(rng() % 2);
        const uint32_t c = rng() % 8;
        Bytes f;
        switch (rng() % 4) {
        case 0: f = contribution(rank, kPsn[rank] + rng() % 12, c, fill(1)); break;
        case 1: f = root_ack(rank, kPsn[rank] + rng() % 12,
                             static_cast<uint8_t>(rng() % 2 ? 0x1F : 0x60)); break;
        case 2: f = root_cnp(rank); break;
        default: f = contribution(rank, rng() & 0xFFFFFF, rng() & 0xFFFFFF, fill(2)); break;
        }
        const int damage = static_cast<int>(rng() % 4);
        if (damage == 1) {
            f[14 + 28 + rng() % (f.size() - 42)] ^= static_cast<uint8_t>(1 + rng() % 255);
        } else if (damage == 2) {
            f.resize(14 + 28 + rng() % (f.size() - 42));  // cut: IP/UDP lengths now lie
        } else if (damage == 3) {
            f[14 + 28] = static_cast<uint8_t>(rng());  // any opcode, ICRC then bad
        }
        if (f.size() > 100 && rng() % 3 == 0) {
            run({chained(f, port_of(rank == 1 ? kWorker1 : kWorker2), {60, 20})});
        } else {
            send(f);
        }
        if (round % 16 == 0) {
            drain();
            advance_ms(1);
            drain();
        }
    }
    drain();
    EXPECT_EQ(in_use(), base) << "every mbuf freed or sent";
    EXPECT_LE(job->table.in_use(), kWindow);
    const uint64_t advanced = job->conns[0].leg.msn + job->conns[1].leg.msn;
    EXPECT_EQ(advanced, job->counters.absorbed + job->counters.bad_contributions)
        << "each worker-side message is an absorbed or a counted contribution";
    EXPECT_GT(job->counters.absorbed, 0u);
    EXPECT_GT(job->counters.icrc_errors, 0u);
}

// drain: true: the held chunks are finished, nothing new is absorbed, then the connections
// are forwarded with their PSN/MSN translated so the endpoints carry on by themselves.
TEST_F(RoceS2s, DrainFinishesHeldChunksThenForwardsTranslated) {
    complete_chunk(0);
    send(contribution(1, kPsn[1] + 1, 1, fill(1)));  // chunk 1 held, half done
    drain();
    auto* view = static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    for (auto& c : view->conns) {
        c.drain = true;
    }
    new_chunk_refused_held_one_finished();
    drain();
    send(contribution(2, kPsn[2] + 2, 2, fill(2)));
    EXPECT_EQ(rc::aeth::kind(to(kWorker2)[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak)
        << "not before the root acknowledged every aggregate";
    drain();
    send(root_ack(1, kPsn[1] + 1));
    EXPECT_EQ(job->table.in_use(), 0u);
    // Forwarding: rank 2's root side never moved (2000), its worker side is at 2002. Chained,
    // with the ICRC across the last two segments.
    const Bytes fwd = contribution(2, kPsn[2] + 2, 2, fill(2));
    ASSERT_EQ(fwd.size(), 142u);
    run({chained(fwd, kR1, {20, 40, 79, 3})});
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].src, kWorker2) << "the worker's own packet";
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2]) << "moved into the root's PSN space";
    EXPECT_EQ(out[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_EQ(out[0].p.imm, 2u << 8 | 1);
    EXPECT_TRUE(out[0].icrc_ok);
    // The carrier's sides agree (one aggregate per chunk): PSN as it is.
    send(contribution(1, kPsn[1] + 2, 2, fill(1)));
    out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1] + 2);
    EXPECT_TRUE(out[0].icrc_ok);
    // The root's ACK of rank 2's packet: back into the worker's space, PSN and MSN.
    send(root_ack(2, kPsn[2]));
    out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].src, kRoot);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2] + 2);
    EXPECT_EQ(out[0].p.aeth.msn, 3u) << "the root's MSN 1 after the worker's 2 absorbed ones";
    EXPECT_TRUE(out[0].icrc_ok);
    // A retransmission of something the switch absorbed is still the switch's to ACK.
    send(contribution(2, kPsn[2] + 1, 1, fill(2)));
    out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2] + 1);
    EXPECT_EQ(out[0].p.aeth.msn, 2u);
    EXPECT_EQ(tx_count(kR1), 0u) << "not forwarded";
    EXPECT_EQ(job->counters.forwarded, 3u);
}

// Removed while chunk 1 is half held (docs/rdma.md "Leaving a job"): the switch finishes it as
// drain would (the held chunk absorbed and sent to the root, a new chunk RNR-NAKed), then it
// forwards each connection translated by itself, until the connection ends.
TEST_F(RoceS2s, RemovalWhileChunksAreHeldFinishesThemThenTranslates) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    complete_chunk(0);
    send(contribution(1, kPsn[1] + 1, 1, fill(1)));  // chunk 1 held, half done
    drain();
    leave(*static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get()), cfg, *job,
          kSlot, 10000);
    new_chunk_refused_held_one_finished();
    drain();
    send(root_ack(1, kPsn[1] + 1));
    EXPECT_EQ(job->table.in_use(), 0u);
    EXPECT_EQ(job->counters.leave_connections_translated, 0u);
    // Translated: rank 2's root side never moved (2000), its worker side is at 2002.
    send(contribution(2, kPsn[2] + 2, 2, fill(2)));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].src, kWorker2);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2]);
    EXPECT_TRUE(out[0].icrc_ok);
    send(contribution(1, kPsn[1] + 2, 2, fill(1)));
    out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[1] + 2);
    send(root_ack(2, kPsn[2]));
    out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2] + 2);
    EXPECT_EQ(out[0].p.aeth.msn, 3u);
    EXPECT_TRUE(out[0].icrc_ok);
    EXPECT_EQ(job->counters.forwarded, 3u);
    EXPECT_EQ(job->counters.leave_connections_translated, 2u) << "counted once per connection";
    EXPECT_FALSE(job->left.load());
}

// Removed once the root acknowledged everything: translated forwarding from the first packet.
TEST_F(RoceS2s, RemovalAfterEverythingAcknowledgedTranslatesAtOnce) {
    removed_after_chunk_zero(10000);
    send(contribution(2, kPsn[2] + 1, 1, fill(2)));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2]) << "the root never saw rank 2's absorbed packet";
    EXPECT_EQ(out[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_TRUE(out[0].icrc_ok);
    EXPECT_EQ(job->counters.drain_refused, 0u);
    EXPECT_EQ(job->counters.leave_connections_translated, 1u);
}

// Static connections see no DREQ here: the idle timeout ends the leaving job; from then on its
// packets pass untouched (counted) until the next config change releases the state.
TEST_F(RoceS2s, RemovedJobEndsAfterTheIdleTimeout) {
    removed_after_chunk_zero(50);
    advance_ms(1);  // the idle clock starts
    advance_ms(30);
    send(contribution(2, kPsn[2] + 1, 1, fill(2)));  // activity: the clock starts over
    EXPECT_EQ(to(kRoot).size(), 1u);
    advance_ms(30);
    EXPECT_FALSE(job->left.load()) << "30 ms after the last packet, not 50";
    advance_ms(30);
    EXPECT_TRUE(job->left.load());
    EXPECT_EQ(job->counters.leave_ended_timeout, 2u) << "both connections were still open";
    const Bytes late = contribution(2, kPsn[2] + 2, 2, fill(2));
    send(late);
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2] + 2) << "untouched: not translated any more";
    EXPECT_EQ(job->counters.leave_passed, 1u);
    EXPECT_EQ(job->counters.forwarded, 1u);
}

// A static job removed: the CM DREQs on its root end its connections (either way); once both
// ended it is over.
TEST_F(RoceS2s, RemovedStaticJobEndsByItsConnectionsDisconnects) {
    removed_after_chunk_zero(10000);
    send(dreq(1));
    drain();
    advance_ms(1);
    EXPECT_EQ(job->counters.leave_ended_dreq, 1u);
    EXPECT_FALSE(job->left.load()) << "rank 2 still connected";
    send(contribution(2, kPsn[2] + 1, 1, fill(2)));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kPsn[2]) << "still translated";
    send(dreq(2));
    drain();
    advance_ms(1);
    EXPECT_EQ(job->counters.leave_ended_dreq, 2u);
    EXPECT_TRUE(job->left.load());
    EXPECT_EQ(job->counters.leave_ended_timeout, 0u);
}

// A leaving job's entry wins over a configured job's with the same connection: the endpoints'
// PSNs there are translated, a new job starting from nothing would break them.
TEST_F(RoceS2s, ALeavingJobKeepsItsConnectionFromAConfiguredOne) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    fs::S2sView view;
    fs::append_job(view, cfg, false, 0, 3);
    fs::append_job(view, cfg, true, 0, kSlot);
    fs::sort_view(view);
    for (const auto& c : view.conns) {
        const fs::ConnView* found = view.find(c.key);
        ASSERT_NE(found, nullptr);
        EXPECT_TRUE(found->leaving);
        EXPECT_EQ(found->slot, kSlot);
        EXPECT_TRUE(found->drain) << "a leaving job drains";
    }
}

// learn: true: the connections come from the RDMA CM exchange the switch sees on QP1.
class RoceS2sLearn : public RoceS2s {
protected:
    std::string yaml() const override {
        return std::string(kStageYaml) + R"(rdma_s2s:
  jobs:
    - {id: 11, root: 10.0.2.2, world: 2, dtype: int32, chunk_bytes: 64, window: 4, timeout: 10,
       learn: true, replicate: )" + (replicate() ? "true" : "false") + "}\n";
    }
    virtual bool replicate() const { return false; }
    static constexpr uint32_t kRepPsn[3] = {0, 3000, 4000};  // the workers send from these
    static constexpr uint32_t kNextRootPsn = 700;  // a later connection's root PSN: + 700 each

    // Rank's REQ to the root: the worker's QPN and the INAR connect request of `job`. A later
    // connection of the same rank (`generation` > 0) has its own QPN and communication ID.
    // `resuming`: the INAR request resumes from chunk `resume_from`.
    Bytes req(int rank, uint32_t inar_job = 11, uint32_t generation = 0, bool resuming = false,
              uint32_t resume_from = 0) {
        rc::cm::Message msg;
        msg.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::req);
        msg.header.transaction_id = 0x100 + static_cast<uint64_t>(rank);
        msg.req.local_comm_id = 0x1000 + static_cast<uint32_t>(rank) + 0x10 * generation;
        msg.req.service_id = rc::cm::service_id_for_tcp_port(7471);
        msg.req.local_qpn = kWorkerQpn[rank] + 100 * generation;
        // The root's send PSN (not the worker's), its own per connection.
        msg.req.starting_psn = kRootPsn[rank] + kNextRootPsn * generation;
        rc::cm::CmaHeader h;
        h.src = rc::cm::ipv4_gid(worker_ip(rank));
        h.dst = rc::cm::ipv4_gid(kRoot);
        rc::cm::write_cma_header(msg.req.private_data, h);
        ina::rdma::ConnectRequest c;
        c.mode = ina::rdma::Mode::server_to_server;
        c.elem_type = reduce::ElemType::int32;
        c.job_id = inar_job;
        c.rank = static_cast<uint16_t>(rank);
        c.world = 2;
        c.chunk_bytes = kChunk;
        c.window = kWindow;
        c.result_addr = kResultAddr[rank];
        c.result_rkey = kResultRkey[rank];
        c.resuming = resuming;
        c.resume_from = resume_from;
        const auto enc = c.encode();
        std::memcpy(msg.req.private_data.data() + rc::cm::kCmaHeaderBytes, enc.data(), enc.size());
        return cm_frame(worker_ip(rank), kRoot, msg);
    }
    // The root's REP; `resumed`: its INAR reply (ConnectReply::encode) takes the rank back
    // into the running AllReduce from chunk `resume_chunk`.
    // `complete_from` >= 0: the reply says the root has every chunk below it complete and none
    // from it on (ConnectReply::complete_from, an empty bitmap).
    Bytes rep(int rank, uint32_t generation = 0, bool resumed = false, uint32_t resume_chunk = 0,
              uint32_t inar_job = 11, int64_t complete_from = -1) {
        rc::cm::Message msg;
        msg.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::rep);
        msg.header.transaction_id = 0x100 + static_cast<uint64_t>(rank);
        msg.rep.local_comm_id = 0x2000 + static_cast<uint32_t>(rank) + 0x10 * generation;
        msg.rep.remote_comm_id = 0x1000 + static_cast<uint32_t>(rank) + 0x10 * generation;
        msg.rep.local_qpn = kRootQpn[rank];
        msg.rep.starting_psn = kRepPsn[rank];
        ina::rdma::ConnectReply r;
        r.job_id = inar_job;
        r.contribution_addr = kAreaVa[rank];
        r.contribution_rkey = kAreaRkey[rank];
        r.resumed = resumed;
        r.resume_chunk = resume_chunk;
        r.has_complete = complete_from >= 0;
        r.complete_from = static_cast<uint32_t>(std::max<int64_t>(complete_from, 0));
        const auto enc = r.encode();
        std::memcpy(msg.rep.private_data.data(), enc.data(), enc.size());
        return cm_frame(kRoot, worker_ip(rank), msg);
    }
    // The root's DREQ of rank's connection `generation` (it names the worker's QPN).
    Bytes dreq_from_root(int rank, uint32_t generation = 0) {
        rc::cm::Message msg;
        msg.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::dreq);
        msg.dreq.local_comm_id = 0x2000 + static_cast<uint32_t>(rank) + 0x10 * generation;
        msg.dreq.remote_comm_id = 0x1000 + static_cast<uint32_t>(rank) + 0x10 * generation;
        msg.dreq.remote_qpn = kWorkerQpn[rank] + 100 * generation;
        return cm_frame(kRoot, worker_ip(rank), msg);
    }
    void TearDown() override {
        if (next_state != nullptr) {
            pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s,
                                                      kNextSlot, fs::job_state_id(job_id),
                                                      nullptr});
        }
        RoceS2s::TearDown();
    }
    // What control_s2s's release hook does when the home lcore asked for a fresh state (a
    // worker reconnected alone): the state made off the packet path with the old one as its
    // predecessor, attached in another slot (`attach`), and the snapshot naming it as the
    // job's state and the old one as leaving (`publish`). Either may come first.
    static constexpr uint16_t kNextSlot = kSlot + 1;
    void successor_made(const fs::JobConfig& cfg) {
        ASSERT_TRUE(job->wants_successor.load()) << "the home lcore asked for a fresh state";
        job->wants_successor.store(false);
        next_state = std::make_unique<fs::JobState>(fs::job_params(cfg));
        next_state->predecessor = job.get();
    }
    void successor_attached() {
        ASSERT_TRUE(pipeline::apply_command(
            *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, kNextSlot,
                              fs::job_state_id(job_id), next_state.get()}));
    }
    void successor_published(const fs::JobConfig& cfg) {
        auto& view = *static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
        leave(view, cfg, *job, kSlot, 10000);
        fs::append_job(view, cfg, false, 0, kNextSlot);
    }
    // An RNR NAK to rank 2's connection `generation` at its first PSN (the window before the
    // next session's state is attached); nothing toward the root.
    void held_back_with_rnr(uint32_t generation) {
        auto out = to(kWorker2);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].src, kRoot);
        EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[2] + 100 * generation);
        EXPECT_EQ(rc::aeth::kind(out[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
        EXPECT_EQ(out[0].p.bth.psn, kRepPsn[2]);
        EXPECT_EQ(out[0].p.aeth.msn, 0u);
        EXPECT_TRUE(out[0].icrc_ok);
        EXPECT_TRUE(stray.empty()) << "nothing reaches the root";
        stray.clear();
    }
    std::unique_ptr<fs::JobState> next_state;
    // A connection of `rank` (REQ, REP) that may make the switch send something: the REQ and
    // the REP pass untouched, the rest (e.g. a rejoin's partial aggregates) is returned.
    // `resumed`: the root's REP takes the rank back into the running AllReduce at chunk
    // `resume_chunk`.
    std::vector<Seen> reconnect(int rank, uint32_t generation, bool resumed = false,
                                uint32_t resume_chunk = 0) {
        send(req(rank, 11, generation));
        send(rep(rank, generation, resumed, resume_chunk));
        std::vector<Seen> rest;
        int cm = 0;
        for (const uint16_t port : {kR0, kR1}) {
            for (auto& x : seen(port)) {
                if (x.p.bth.dest_qp == rc::cm::kCmQpn) {
                    ++cm;
                    EXPECT_TRUE(x.icrc_ok);
                } else {
                    rest.push_back(x);
                }
            }
        }
        EXPECT_EQ(cm, 2) << "the REQ and the REP pass untouched";
        return rest;
    }
    // The aggregates toward the root among the frames queued on rank 2's (and the root's) port.
    std::vector<Seen> aggregates_on_rank2s_port() {
        std::vector<Seen> agg;
        for (auto& x : seen(kR1)) {
            if (x.dst == kRoot && x.p.bth.opcode == rc::op::kWriteOnlyImm) {
                agg.push_back(x);
            }
        }
        return agg;
    }
    // The carrier resumes (REQ, REP `resumed` with `complete_from`) while its chunk 0
    // aggregate is unacknowledged on its old connection and rank 2 holds chunk 1.
    void carrier_resumes_with_chunk0_unacked(int64_t complete_from) {
        connect(1);
        connect(2);
        complete_chunk_learned();  // chunk 0's aggregate sent on rank 1's connection, no ACK
        send(contribution(2, kRepPsn[2] + 1, 1, fill(50)));
        drain();
        send(dreq(1));
        send(req(1, 11, 1, true, 1));
        drain();
        send(rep(1, 1, true, 1, 11, complete_from));
    }
    // Both ranks connected, chunk 0 complete (its aggregate out), rank 1's chunks 1 and 2 held
    // for rank 2, whose worker then ends its connection (its DREQ) to reconnect.
    void rank2_leaves_with_rank1s_chunks_held() {
        connect(1);
        connect(2);
        complete_chunk_learned();
        send(contribution(1, kRepPsn[1] + 1, 1, fill(10)));
        send(contribution(1, kRepPsn[1] + 2, 2, fill(20)));
        drain();
        send(dreq(2));  // the worker ends its old connection first
        drain();
    }
    // After a rejoin: rank 1 leaves with the old state, its `aggregates` (chunks 0..n-1, one
    // per PSN from its REP's) acknowledged by the root, then its chunk n goes on translated
    // (at its own PSN: the root saw one aggregate per chunk on its connection).
    void rank1_drains_then_is_translated(uint32_t aggregates = 3) {
        send(root_ack(1, kRepPsn[1] + aggregates - 1));
        drain();
        EXPECT_EQ(job->counters.aggregates_acked, aggregates);
        send(contribution(1, kRepPsn[1] + aggregates, aggregates, fill(30)));
        const auto out = to(kRoot);
        ASSERT_EQ(out.size(), 1u);
        EXPECT_EQ(out[0].src, kWorker1);
        EXPECT_EQ(out[0].p.bth.psn, kRepPsn[1] + aggregates);
        EXPECT_EQ(job->counters.forwarded, 1u);
        EXPECT_EQ(lcore(fs::LcoreCounter::fallback), 0u);
    }
    // Chunk 0 from both ranks at their REPs' PSNs: its aggregate goes out (drained).
    void complete_chunk_learned() {
        send(contribution(1, kRepPsn[1], 0, fill(1)));
        send(contribution(2, kRepPsn[2], 0, fill(100)));
        ASSERT_EQ(job->counters.aggregates_sent, 1u);
        drain();
    }

    void connect(int rank, uint32_t generation = 0) {
        send(req(rank, 11, generation));
        send(rep(rank, generation));
        auto out = seen(kR0);
        for (auto& x : seen(kR1)) {
            out.push_back(x);
        }
        ASSERT_EQ(out.size(), 2u) << "the REQ and the REP pass untouched";
        const uint32_t rep_to = worker_ip(rank);
        EXPECT_TRUE((out[0].dst == kRoot && out[1].dst == rep_to) ||
                    (out[1].dst == kRoot && out[0].dst == rep_to));
        EXPECT_EQ(out[0].p.bth.dest_qp, rc::cm::kCmQpn);
        EXPECT_TRUE(out[0].icrc_ok && out[1].icrc_ok);
    }
};

TEST_F(RoceS2sLearn, ConnectionsComeFromTheCmExchange) {
    // Before its REQ/REP the connection is unknown: its WRITE goes to the root untouched.
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    ASSERT_EQ(to(kRoot).size(), 1u);
    EXPECT_EQ(job->counters.absorbed, 0u);
    connect(1);
    connect(2);
    EXPECT_EQ(job->counters.connections_learned, 2u);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    auto ack = to(kWorker1);
    ASSERT_EQ(ack.size(), 1u);
    EXPECT_EQ(ack[0].src, kRoot);
    EXPECT_EQ(ack[0].p.bth.dest_qp, kWorkerQpn[1]) << "the REQ's QPN";
    EXPECT_EQ(ack[0].p.bth.psn, kRepPsn[1]) << "the worker sends from the REP's starting PSN";
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(agg[0].src, kWorker1);
    EXPECT_EQ(agg[0].p.bth.dest_qp, kRootQpn[1]) << "the REP's QPN";
    EXPECT_EQ(agg[0].p.bth.psn, kRepPsn[1]);
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 2);
    EXPECT_EQ(ints(agg[0].payload)[1], 1 + 1 + 100 + 1);
    free_mbufs(take_tx(kR1));
}

// A REQ retransmitted after the switch saw its REP (the REP lost or slow past the switch) and
// the root's repeated REP change nothing: the worker's leg runs on from what it absorbed.
TEST_F(RoceS2sLearn, ARepeatedRequestOfALiveConnectionTeachesNothing) {
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    ASSERT_EQ(to(kWorker1).size(), 1u);
    connect(1);  // passes untouched, as every CM packet
    EXPECT_EQ(job->counters.connections_learned, 2u);
    send(contribution(1, kRepPsn[1] + 1, 1, fill(2)));
    auto ack = to(kWorker1);
    ASSERT_EQ(ack.size(), 1u);
    EXPECT_EQ(ack[0].p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(ack[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(ack[0].p.aeth.msn, 2u);
    EXPECT_EQ(ack[0].p.bth.psn, kRepPsn[1] + 1) << "an ACK of the next PSN, not a NAK";
    EXPECT_EQ(job->counters.naks_sent, 0u);
    EXPECT_EQ(job->counters.absorbed, 2u);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(ints(agg[0].payload)[1], 1 + 1 + 100 + 1);
    free_mbufs(take_tx(kR1));
}

TEST_F(RoceS2sLearn, AnotherJobsRequestTeachesNothing) {
    send(req(1, 12));
    send(rep(1));
    free_mbufs(take_tx(kR0));
    free_mbufs(take_tx(kR1));
    EXPECT_EQ(job->counters.connections_learned, 0u);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    EXPECT_EQ(to(kRoot).size(), 1u) << "still forwarded untouched";
}

TEST_F(RoceS2sLearn, DisconnectEndsAndTheNextSessionStartsWithEmptySlots) {
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));  // chunk 0 half done, never finished
    drain();
    EXPECT_EQ(job->table.in_use(), 1u);
    send(dreq(1));
    send(dreq(2));
    drain();
    EXPECT_EQ(job->counters.connections_ended, 2u);
    send(contribution(1, kRepPsn[1] + 1, 1, fill(1)));
    EXPECT_EQ(to(kRoot).size(), 1u) << "an ended connection is forwarded untouched";
    connect(1);  // a new session: the chunk indices start over
    EXPECT_EQ(job->counters.sessions, 1u);
    EXPECT_EQ(job->table.in_use(), 0u);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(5)));
    send(contribution(2, kRepPsn[2], 0, fill(5)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u) << "chunk 0 again, not refused as stale";
    EXPECT_EQ(ints(agg[0].payload)[0], 10);
    free_mbufs(take_tx(kR0));
}

// A DREQ lost on the way (the next AllReduce's workers connect before the CM retries it), and
// the rank whose DREQ was lost reconnects first: no other rank is live, so its REP starts the
// next session in place over emptied slots and replaces the connection that never ended.
TEST_F(RoceS2sLearn, ALostDisconnectStillStartsTheNextSession) {
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));  // chunk 0 half done, never finished
    drain();
    EXPECT_EQ(job->table.in_use(), 1u);
    send(dreq(2));  // rank 1's DREQ never arrives
    drain();
    connect(1, 1);
    EXPECT_EQ(job->counters.sessions, 1u);
    EXPECT_EQ(job->table.in_use(), 0u) << "the old session's slots emptied";
    EXPECT_EQ(job->counters.rejoins, 0u) << "no other rank was live";
    connect(2, 1);
    EXPECT_EQ(job->counters.sessions, 1u) << "one session, not two";
    EXPECT_EQ(job->counters.connections_replaced, 1u) << "rank 1's old one";
    send(contribution(1, kRepPsn[1], 0, fill(5)));
    auto ack = to(kWorker1);
    ASSERT_EQ(ack.size(), 1u);
    EXPECT_EQ(ack[0].p.bth.dest_qp, kWorkerQpn[1] + 100) << "the new connection's QPN";
    send(contribution(2, kRepPsn[2], 0, fill(5)));
    auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u) << "chunk 0 again, not refused as stale";
    EXPECT_EQ(ints(agg[0].payload)[0], 10);
    EXPECT_FALSE(job->wants_successor.load());
    free_mbufs(take_tx(kR0));
}

// The other order: the rank whose DREQ was seen reconnects first while the other's connection
// (its DREQ lost) is still live. The switch cannot tell this from a rank still running, so the
// old state leaves with that connection (translated until its DREQ) and the next session runs
// on a fresh state; the old session's half-done chunk goes to the root with what it holds.
TEST_F(RoceS2sLearn, ALostDisconnectOfAnotherRankLeavesWithTheOldState) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    drain();
    send(dreq(2));  // rank 1's DREQ never arrives
    drain();
    auto agg = reconnect(2, 1);
    EXPECT_EQ(job->counters.rejoins, 1u);
    EXPECT_EQ(job->counters.sessions, 0u) << "nothing emptied";
    ASSERT_EQ(agg.size(), 1u) << "chunk 0 with rank 1's contribution, k = 1";
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 1);
    EXPECT_EQ(ints(agg[0].payload)[0], 1);
    drain();
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    send(dreq_from_root(1));  // the CM's retry of rank 1's old DREQ: the old state's
    drain();
    EXPECT_EQ(job->counters.leave_ended_dreq, 1u);
    connect(1, 1);
    EXPECT_EQ(next_state->counters.connections_learned, 2u) << "rank 2's REP, then rank 1";
    send(contribution(1, kRepPsn[1], 0, fill(5)));
    send(contribution(2, kRepPsn[2], 0, fill(5)));
    free_mbufs(take_tx(kR0));
    agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u) << "chunk 0 of the new session";
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 2);
    EXPECT_EQ(ints(agg[0].payload)[0], 10);
    EXPECT_EQ(next_state->counters.absorbed, 2u);
}

// A REQ of a rank whose connection is live in the current session, which the root refuses
// (REJ: e.g. a second process claiming the rank while the first is connected): the session is
// decided at the REP, so nothing is emptied: rank 1's held contribution to chunk 0, already
// ACKed to it, still completes with rank 2's and reaches the root. (Deciding at the REQ, as
// before, emptied the slot: the aggregate never came.)
TEST_F(RoceS2sLearn, ARefusedRequestOfALiveRankEmptiesNothing) {
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    ASSERT_EQ(to(kWorker1).size(), 1u) << "rank 1's contribution ACKed as the root";
    send(req(2, 11, 1));
    rc::cm::Message rej;
    rej.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::rej);
    rej.header.transaction_id = 0x102;
    rej.rej.local_comm_id = 0x2000 + 2 + 0x10;
    rej.rej.remote_comm_id = 0x1000 + 2 + 0x10;
    rej.rej.reason = 28;  // consumer reject: the root's rdma_reject
    send(cm_frame(kRoot, kWorker2, rej));
    drain();
    EXPECT_EQ(job->counters.sessions, 0u);
    EXPECT_EQ(job->table.in_use(), 1u) << "rank 1's held chunk kept";
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    auto ack = to(kWorker2);  // the root shares rank 2's port: its frames land in `stray`
    ASSERT_EQ(ack.size(), 1u);
    EXPECT_EQ(ack[0].p.bth.dest_qp, kWorkerQpn[2]) << "rank 2's live connection, unchanged";
    const std::vector<Seen> agg = stray;
    ASSERT_EQ(agg.size(), 1u) << "the held chunk completes and reaches the root";
    EXPECT_EQ(agg[0].dst, kRoot);
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 2);
    EXPECT_EQ(ints(agg[0].payload)[0], 1 + 100);
    EXPECT_EQ(job->counters.connections_learned, 2u);
    EXPECT_EQ(job->counters.rejoins, 0u);
    free_mbufs(take_tx(kR0));
}

// A worker that reconnects alone (docs/rdma.md "A worker that reconnects alone"): rank 2's new
// connection is accepted by the root while rank 1 stays connected, holding chunks the switch
// ACKed to it. The old state leaves: rank 2's old connection is taken out of the held chunks,
// which go to the root at once as partial aggregates (k = 1 < world), nothing is emptied; rank
// 1's connection goes on translated after them. The next session runs on a fresh state that
// learns rank 2's new connection and absorbs on it, and completes nothing before rank 1 joins.
// (The old rule emptied the held chunks: no aggregate of chunks 1 and 2 ever came.)
TEST_F(RoceS2sLearn, AWorkerReconnectingAloneLeavesTheHeldChunksToTheRoot) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    complete_chunk_learned();  // chunk 0: its aggregate out, not acknowledged yet
    send(contribution(1, kRepPsn[1] + 1, 1, fill(10)));
    send(contribution(1, kRepPsn[1] + 2, 2, fill(20)));
    ASSERT_EQ(to(kWorker1).size(), 2u) << "rank 1's chunks 1 and 2 ACKed as the root";
    ASSERT_EQ(job->table.in_use(), 3u);
    auto agg = reconnect(2, 1);
    EXPECT_EQ(job->counters.rejoins, 1u);
    EXPECT_EQ(job->counters.rejoin_partial_chunks, 2u);
    EXPECT_EQ(job->counters.sessions, 0u);
    EXPECT_EQ(job->counters.connections_replaced, 1u) << "rank 2's old connection";
    ASSERT_EQ(agg.size(), 2u) << "chunks 1 and 2 sent now, with rank 1's contributions";
    for (uint32_t c = 1; c <= 2; ++c) {
        const Seen& a = agg[c - 1];
        EXPECT_EQ(a.src, kWorker1);
        EXPECT_EQ(a.p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(a.p.bth.psn, kRepPsn[1] + c) << "after chunk 0's on the carrier";
        EXPECT_EQ(a.p.imm, c << 8 | 1) << "k = 1: rank 2's part is not in it";
        EXPECT_EQ(a.p.reth.va, kAreaVa[1] + c * kChunk);
        EXPECT_EQ(ints(a.payload)[3], static_cast<int32_t>(10 * c + 3));
        EXPECT_TRUE(a.icrc_ok);
    }
    // Rank 1's next chunk waits (the old state drains) until the root acknowledged them all.
    send(contribution(1, kRepPsn[1] + 3, 3, fill(30)));
    auto out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(rc::aeth::kind(out[0].p.aeth.syndrome), rc::aeth::Kind::rnr_nak);
    send(root_ack(1, kRepPsn[1] + 2));
    drain();
    EXPECT_EQ(job->counters.aggregates_acked, 3u) << "nothing lost: 0, 1 and 2 reached the root";
    EXPECT_EQ(job->table.in_use(), 0u);
    send(contribution(1, kRepPsn[1] + 3, 3, fill(30)));
    out = to(kRoot);
    ASSERT_EQ(out.size(), 1u) << "then rank 1 is forwarded to the root";
    EXPECT_EQ(out[0].p.bth.psn, kRepPsn[1] + 3) << "3 aggregates = 3 PSNs on the carrier";
    EXPECT_TRUE(out[0].icrc_ok);
    EXPECT_EQ(job->counters.forwarded, 1u);
    // Meanwhile the control plane made the fresh state: it learns rank 2's new connection from
    // the REP the old state kept, and absorbs its chunk 0 (held: rank 1 is not in the session).
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[2] + 100) << "the new connection";
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[0].p.bth.psn, kRepPsn[2]);
    EXPECT_TRUE(stray.empty()) << "nothing of the new session reaches the root yet";
    EXPECT_EQ(next_state->counters.connections_learned, 1u);
    EXPECT_EQ(next_state->table.in_use(), 1u);
    EXPECT_EQ(job->counters.absorbed, 4u) << "the old state absorbed nothing new";
    // Rank 1's old connection still leaves with the old state (its WRITE is translated).
    send(contribution(1, kRepPsn[1] + 4, 4, fill(40)));
    EXPECT_EQ(to(kRoot).size(), 1u);
    EXPECT_EQ(job->counters.forwarded, 2u);
    EXPECT_EQ(next_state->counters.absorbed, 1u);
}

// Between the REP and the fresh state's attach, the next session's packets are held back: the
// reconnecting rank's request at its first PSN gets an RNR NAK (it retries), a later one is
// dropped, nothing reaches the root or is ACKed; a CM exchange in that window (rank 1
// reconnecting too) is kept and learned by the fresh state, whether the snapshot naming it or
// its attach comes first. Then both new connections are absorbed from their REPs' PSNs and
// chunk 0 of the new session completes on rank 1's new connection.
TEST_F(RoceS2sLearn, TheNextSessionIsHeldBackUntilItsStateIsAttached) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    drain();
    auto agg = reconnect(2, 1);
    ASSERT_EQ(agg.size(), 1u) << "rank 1's held chunk 0 as a partial aggregate";
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 1);
    drain();
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    held_back_with_rnr(1);
    send(contribution(2, kRepPsn[2] + 1, 1, fill(100)));
    EXPECT_TRUE(to(kWorker2).empty()) << "a later PSN: dropped, no NAK, no ACK";
    EXPECT_TRUE(stray.empty());
    // Rank 1 reconnects too, inside the window (its old connection ended first).
    send(dreq(1));
    drain();
    connect(1, 1);
    EXPECT_EQ(job->counters.connections_learned, 2u) << "the old state learns nothing";
    // The snapshot naming the fresh state comes before its attach: still held back.
    successor_made(cfg);
    successor_published(cfg);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    held_back_with_rnr(1);
    EXPECT_EQ(lcore(fs::LcoreCounter::fallback), 0u) << "never passed to the root";
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    EXPECT_TRUE(to(kWorker1).empty() && stray.empty()) << "rank 1's new one too: dropped";
    EXPECT_EQ(job->counters.rejoin_held, 4u);
    successor_attached();
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    auto out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[2] + 100);
    EXPECT_EQ(next_state->counters.connections_learned, 2u) << "both REPs, replayed";
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[1] + 100);
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(agg[0].src, kWorker1);
    EXPECT_EQ(agg[0].p.bth.psn, kRepPsn[1]) << "the new carrier connection, from its REP";
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 2);
    EXPECT_EQ(ints(agg[0].payload)[0], 101);
    // The old state is over once its connections ended and the successor took what it kept.
    advance_ms(1);
    EXPECT_TRUE(job->left.load());
}

// The job removed by a config change before the fresh state was made: control_s2s marks the
// rejoin abandoned (commit) and the old state leaves as any removed job. Nobody takes the next
// session: its packets pass untouched (the switch absorbed and ACKed none of them, so the
// endpoints' PSNs agree), and the old state is over once its own connections ended.
TEST_F(RoceS2sLearn, ARejoinAbandonedByARemovalPassesTheNextSession) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    drain();
    reconnect(2, 1);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    held_back_with_rnr(1);
    // What commit does for a leaving state that still wanted a successor.
    ASSERT_TRUE(job->wants_successor.exchange(false));
    job->successor_abandoned.store(true);
    leave(*static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get()), cfg, *job,
          kSlot, 10000);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    EXPECT_TRUE(to(kWorker2).empty()) << "no RNR NAK, no ACK from the switch";
    ASSERT_EQ(stray.size(), 1u);
    EXPECT_EQ(stray[0].dst, kRoot);
    EXPECT_EQ(stray[0].p.bth.psn, kRepPsn[2]) << "untouched: the worker's own first PSN";
    EXPECT_EQ(stray[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_TRUE(stray[0].icrc_ok);
    stray.clear();
    send(dreq(1));
    drain();
    advance_ms(1);
    EXPECT_TRUE(job->left.load()) << "its own connections ended: over";
}

// The carrier (rank 1) reconnects alone: its old connection carried the aggregates, and the
// root closed it. The old state's aggregate leg moves to rank 2's connection, from the PSN the
// root expects there (it saw nothing on it), with rank 2's RETH: the chunk rank 2 holds goes
// there. Chunk 0's aggregate, sent on the old connection and unacknowledged, is not sent a
// second time (the root may hold it). Then rank 2 is forwarded with the PSN moved past it.
TEST_F(RoceS2sLearn, ACarrierReconnectingAloneMovesTheAggregatesToTheNextRank) {
    connect(1);
    connect(2);
    complete_chunk_learned();
    send(contribution(2, kRepPsn[2] + 1, 1, fill(50)));
    drain();
    auto agg = reconnect(1, 1);
    EXPECT_EQ(job->counters.rejoin_carrier_moved, 1u);
    EXPECT_EQ(job->counters.rejoin_carrier_unacked, 1u);
    EXPECT_EQ(job->counters.rejoin_partial_chunks, 1u);
    ASSERT_EQ(agg.size(), 1u);
    EXPECT_EQ(agg[0].src, kWorker2);
    EXPECT_EQ(agg[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_EQ(agg[0].p.bth.psn, kRepPsn[2]) << "the root's first ePSN on rank 2's connection";
    EXPECT_EQ(agg[0].p.reth.va, kAreaVa[2] + 1 * kChunk);
    EXPECT_EQ(agg[0].p.reth.rkey, kAreaRkey[2]);
    EXPECT_EQ(agg[0].p.imm, 1u << 8 | 1);
    EXPECT_EQ(ints(agg[0].payload)[0], 50);
    EXPECT_TRUE(agg[0].icrc_ok);
    drain();
    send(root_ack(2, kRepPsn[2]));
    drain();
    EXPECT_EQ(job->table.in_use(), 0u);
    send(contribution(2, kRepPsn[2] + 2, 2, fill(60)));
    std::vector<Seen> out = to(kWorker2);
    EXPECT_TRUE(out.empty()) << "no ACK from the switch: the root answers now";
    ASSERT_EQ(stray.size(), 1u);
    EXPECT_EQ(stray[0].dst, kRoot);
    EXPECT_EQ(stray[0].p.bth.psn, kRepPsn[2] + 1) << "the root saw one packet there";
    EXPECT_TRUE(stray[0].icrc_ok);
}

// Rank 2 leaves mid-AllReduce and comes back RESUMING (ina-rdma-worker --reconnect-after):
// the root's REP says `resumed` (ConnectReply, docs/rdma.md "A worker that reconnects
// alone"). The old state leaves as for any rejoin (rank 1's held chunks 1 and 2 go to the root
// as k = 1 partial aggregates, rank 1 then drains and is translated), but nobody aggregates on
// the new connection: it is not held back (no RNR NAK, nothing dropped), not learned by the
// fresh state, and its WRITEs and the root's ACKs pass untouched, the root summing them with
// the partial aggregates. Without the rule the fresh state absorbed rank 2's chunks into a
// session rank 1 never joins: ACKed as the root, never sent (the AllReduce hung).
TEST_F(RoceS2sLearn, AResumedRankPassesStraightToTheRootWhileTheOldStateLeaves) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    rank2_leaves_with_rank1s_chunks_held();
    auto agg = reconnect(2, 1, true, 1);
    EXPECT_EQ(job->counters.rejoin_resumed, 1u);
    EXPECT_EQ(job->counters.rejoins, 1u);
    EXPECT_EQ(job->counters.rejoin_partial_chunks, 2u);
    EXPECT_EQ(job->counters.connections_replaced, 0u) << "its DREQ was seen";
    ASSERT_EQ(agg.size(), 2u) << "chunks 1 and 2 with rank 1's contributions only";
    for (uint32_t c = 1; c <= 2; ++c) {
        EXPECT_EQ(agg[c - 1].p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(agg[c - 1].p.imm, c << 8 | 1);
        EXPECT_TRUE(agg[c - 1].icrc_ok);
    }
    // Before the fresh state exists: rank 2's resumed WRITE of chunk 1 at the REP's PSN goes to
    // the root as it is (not RNR-NAKed, not dropped).
    const auto resumed_write = [&](uint32_t psn, uint32_t c) {
        send(contribution(2, psn, c, fill(static_cast<int32_t>(100 * c))));
        EXPECT_TRUE(to(kWorker2).empty()) << "the switch answers nothing on it";
        ASSERT_EQ(stray.size(), 1u);
        EXPECT_EQ(stray[0].dst, kRoot);
        EXPECT_EQ(stray[0].p.bth.psn, psn) << "untouched";
        EXPECT_EQ(stray[0].p.imm, c << 8 | 1);
        EXPECT_TRUE(stray[0].icrc_ok);
        stray.clear();
    };
    resumed_write(kRepPsn[2], 1);
    EXPECT_EQ(job->counters.rejoin_held, 0u);
    // The root's ACK of it, toward the new connection's QP: passes too.
    rc::Ipv4Path back;
    back.src_ip = kRoot;
    back.dst_ip = kWorker2;
    back.dest_qp = kWorkerQpn[2] + 100;
    send(frame(kRoot, [&](uint8_t* out, size_t cap) {
        return rc::encode_ack(out, cap, back, 1,
                              rc::Reply{rc::aeth::kAckUnlimited, kRepPsn[2], 1});
    }));
    auto out = to(kWorker2);
    ASSERT_EQ(out.size(), 1u) << "the root's own ACK reaches the worker";
    EXPECT_EQ(out[0].src, kRoot);
    EXPECT_EQ(out[0].p.aeth.msn, 1u);
    // The fresh state made and published: it learned nothing of the resumed connection.
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    resumed_write(kRepPsn[2] + 1, 2);
    EXPECT_EQ(next_state->counters.connections_learned, 0u);
    EXPECT_EQ(next_state->counters.absorbed, 0u);
    EXPECT_EQ(next_state->table.in_use(), 0u);
    // Rank 1 leaves with the old state: held chunks acknowledged, then translated.
    rank1_drains_then_is_translated();
}

// A resumed REP of a rank the state never had live in this session (e.g. the fresh state
// hearing a second resume) starts nothing: no session, no rejoin, and the connection passes.
TEST_F(RoceS2sLearn, AResumedRepOutsideTheSessionStartsNothing) {
    connect(1);
    send(req(2, 11, 1));
    send(rep(2, 1, true, 5));
    drain();
    EXPECT_EQ(job->counters.rejoin_resumed, 1u);
    EXPECT_EQ(job->counters.rejoins, 0u);
    EXPECT_EQ(job->counters.connections_learned, 1u) << "rank 1 only";
    EXPECT_FALSE(job->superseded);
    send(contribution(2, kRepPsn[2], 5, fill(5)));
    EXPECT_TRUE(to(kWorker2).empty());
    ASSERT_EQ(stray.size(), 1u);
    EXPECT_EQ(stray[0].p.bth.psn, kRepPsn[2]);
    stray.clear();
    // Another job's resumed reply is not this job's: the REP is learned as usual.
    send(req(2, 11, 2));
    send(rep(2, 2, true, 5, 12));
    drain();
    EXPECT_EQ(job->counters.connections_learned, 2u);
}

// The carrier resumes while its chunk 0 aggregate (both ranks' data) is unacknowledged on its
// old connection. The root's resumed REP says what it has complete (it ended the old connection
// and took its completions first): when it lacks chunk 0, the aggregate goes again on the moved
// leg (rank 2's connection, rank 2's RETH of chunk 0, k = 2), before the partial chunk 1; when it
// has it, it is released, not sent twice. (Without the answer it was always released: the root
// stalled on a chunk it lacked, rejoin_carrier_unacked.)
TEST_F(RoceS2sLearn, AResumingCarriersUnacknowledgedAggregateTheRootLacksIsSentAgain) {
    carrier_resumes_with_chunk0_unacked(0);
    const std::vector<Seen> agg = aggregates_on_rank2s_port();
    EXPECT_EQ(job->counters.rejoin_carrier_resent, 1u);
    EXPECT_EQ(job->counters.rejoin_carrier_unacked, 0u);
    ASSERT_EQ(agg.size(), 2u) << "chunk 0 again, then chunk 1's partial aggregate";
    EXPECT_EQ(agg[0].src, kWorker2);
    EXPECT_EQ(agg[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_EQ(agg[0].p.bth.psn, kRepPsn[2]) << "the root's first ePSN on rank 2's connection";
    EXPECT_EQ(agg[0].p.reth.va, kAreaVa[2] + 0 * kChunk) << "rank 2's slot of chunk 0";
    EXPECT_EQ(agg[0].p.imm, 0u << 8 | 2) << "both contributions";
    EXPECT_EQ(ints(agg[0].payload)[0], 1 + 100);
    EXPECT_TRUE(agg[0].icrc_ok);
    EXPECT_EQ(agg[1].p.bth.psn, kRepPsn[2] + 1);
    EXPECT_EQ(agg[1].p.imm, 1u << 8 | 1);
    // The root acknowledges both on rank 2's connection: every slot released.
    send(root_ack(2, kRepPsn[2] + 1));
    drain();
    EXPECT_EQ(job->table.in_use(), 0u);
    EXPECT_EQ(job->counters.aggregates_acked, 2u);
}

TEST_F(RoceS2sLearn, AResumingCarriersUnacknowledgedAggregateTheRootHasIsNotSentTwice) {
    carrier_resumes_with_chunk0_unacked(1);
    const std::vector<Seen> agg = aggregates_on_rank2s_port();
    EXPECT_EQ(job->counters.rejoin_carrier_resent, 0u);
    EXPECT_EQ(job->counters.rejoin_carrier_unacked, 1u);
    ASSERT_EQ(agg.size(), 1u) << "chunk 1's partial aggregate only";
    EXPECT_EQ(agg[0].p.imm, 1u << 8 | 1);
}

// A worker process that restarts (ina-rdma-worker --restart-at) knows nothing of what it sent:
// it resumes from chunk 0. The switch absorbed rank 2's chunks 0..2 and ACKed them as the root;
// they reach the root in aggregates it cannot attribute to rank 2, so the switch raises the
// REQ's resume-from to 3 on its way (ICRC recomputed) and the root has the process write from
// there: nothing is added twice. A request that says more than the switch knows passes as it
// is. (Fails without: the REQ reaches the root saying 0.)
TEST_F(RoceS2sLearn, ARestartedWorkersResumeIsRaisedPastWhatTheSwitchAbsorbed) {
    connect(1);
    connect(2);
    for (uint32_t c = 0; c < 3; ++c) {
        send(contribution(2, kRepPsn[2] + c, c, fill(static_cast<int32_t>(c))));
    }
    send(contribution(1, kRepPsn[1], 0, fill(7)));
    drain();
    const auto resume_from = [](const Seen& s) {
        const uint8_t* f = s.payload.data() + 164 + 36 + 48;  // REQ private data, INAR field
        return uint32_t{f[0]} << 24 | uint32_t{f[1]} << 16 | uint32_t{f[2]} << 8 | f[3];
    };
    send(req(2, 11, 1, true, 0));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].payload.size(), rc::cm::kMadBytes);
    EXPECT_EQ(resume_from(out[0]), 3u) << "past rank 2's chunks the switch absorbed";
    EXPECT_EQ(out[0].payload[164 + 36 + 44], 1) << "still resuming";
    EXPECT_TRUE(out[0].icrc_ok);
    EXPECT_EQ(job->counters.rejoin_resume_raised, 1u);
    send(req(2, 11, 2, true, 5));
    out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(resume_from(out[0]), 5u) << "a worker that knows more is not lowered";
    EXPECT_TRUE(out[0].icrc_ok);
    EXPECT_EQ(job->counters.rejoin_resume_raised, 1u);
}

// Rank 2 reconnects (resumed at 1: the old state leaves, chunks 1 and 2 go as rank 1's partial
// aggregates, a fresh state is attached for the next AllReduce) and then its process restarts
// in the same AllReduce, before writing anything on the resumed connection: its request says
// 0. Nothing the switch still holds is of rank 2 (its old connection's chunk 0 went to the root
// before the reconnect, and what it sends since passes), so no state raises the request (the
// root knows where it resumed it: ResumePoints), the REP starts no rejoin, and the restarted
// process's WRITEs pass untouched; rank 1 stays with the old state.
TEST_F(RoceS2sLearn, ARestartAfterARejoinPassesStraightToTheRoot) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    rank2_leaves_with_rank1s_chunks_held();
    EXPECT_EQ(reconnect(2, 1, true, 1).size(), 2u) << "chunks 1 and 2 as partial aggregates";
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    // The restart: the resumed connection goes (its DREQ), the new process asks from 0.
    send(dreq(2));
    send(req(2, 11, 2, true, 0));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 2u);
    const uint8_t* inar = out[1].payload.data() + 164 + 36;
    EXPECT_EQ(inar[44], 1) << "resuming";
    EXPECT_EQ(uint32_t{inar[48]} << 24 | uint32_t{inar[49]} << 16 | uint32_t{inar[50]} << 8 |
                  inar[51],
              0u)
        << "as the worker said it";
    EXPECT_TRUE(out[1].icrc_ok);
    send(rep(2, 2, true, 1));
    drain();
    EXPECT_EQ(job->counters.rejoin_resume_raised + next_state->counters.rejoin_resume_raised, 0u);
    EXPECT_EQ(job->counters.rejoins, 1u) << "no second rejoin";
    EXPECT_EQ(next_state->counters.rejoins, 0u);
    EXPECT_EQ(next_state->counters.rejoin_resumed, 1u);
    EXPECT_EQ(next_state->counters.connections_learned, 0u);
    // The restarted process writes chunk 1 at its REP's PSN: to the root as it is.
    send(contribution(2, kRepPsn[2], 1, fill(100)));
    EXPECT_TRUE(to(kWorker2).empty()) << "the switch answers nothing on it";
    ASSERT_EQ(stray.size(), 1u);
    EXPECT_EQ(stray[0].dst, kRoot);
    EXPECT_EQ(stray[0].p.bth.psn, kRepPsn[2]);
    EXPECT_EQ(stray[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_TRUE(stray[0].icrc_ok);
    stray.clear();
    EXPECT_EQ(next_state->counters.absorbed + job->counters.absorbed, 4u) << "none of it";
    EXPECT_EQ(job->counters.rejoin_held, 0u);
    // Rank 1 still leaves with the old state: held chunks acknowledged, then translated.
    rank1_drains_then_is_translated();
}

// Rank 2 starts first and resumes (its REP `resumed` at 2) before rank 1 ever connected: the
// old state holds chunks 0 and 1 with rank 2's contributions (ACKed to it), waiting for rank 1.
// Rank 1's first connection of this AllReduce (REQ, REP not `resumed`) joins that session, not
// the fresh state's: its chunks 0 and 1 complete the held ones (one aggregate each, k = 2, on
// its connection), and once the root acknowledged them its next chunk goes on translated.
// (Without: the fresh state learns rank 1 and holds its chunks for rank 2's resumed connection,
// which no state aggregates on, while the old one, with nothing live, leaves holding rank 2's:
// both hang.)
TEST_F(RoceS2sLearn, ARankConnectingAfterAnotherResumedJoinsItsHeldChunks) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(2);
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    send(contribution(2, kRepPsn[2] + 1, 1, fill(200)));
    drain();
    send(dreq(2));
    drain();
    EXPECT_TRUE(reconnect(2, 1, true, 2).empty()) << "nothing complete: rank 1 never came";
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    advance_ms(1);  // the timer wheel runs: the old state does not end with nothing live
    EXPECT_FALSE(job->left.load());
    connect(1);
    EXPECT_EQ(job->counters.rejoin_joined, 1u);
    EXPECT_EQ(next_state->counters.connections_learned, 0u) << "not the next session's";
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    send(contribution(1, kRepPsn[1] + 1, 1, fill(2)));
    const auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 2u);
    for (uint32_t c = 0; c < 2; ++c) {
        EXPECT_EQ(agg[c].src, kWorker1);
        EXPECT_EQ(agg[c].p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(agg[c].p.bth.psn, kRepPsn[1] + c);
        EXPECT_EQ(agg[c].p.imm, c << 8 | 2) << "both ranks";
        EXPECT_EQ(ints(agg[c].payload)[0], static_cast<int32_t>(101 + 101 * c));
        EXPECT_TRUE(agg[c].icrc_ok);
    }
    EXPECT_EQ(next_state->counters.absorbed, 0u);
    rank1_drains_then_is_translated(2);
}

// The carrier reconnects alone while rank 2 is a window ahead: chunk 3's aggregate on the old
// carrier connection is unacknowledged and rank 2 has already sent chunk 7 (slot 3: RNR-NAKed,
// but its key is the highest seen). The unacknowledged aggregate is still released (found by
// the old leg's outstanding messages, not by keys within a window of the highest), so the old
// state drains once rank 2's partial aggregates are acknowledged and rank 2's chunk 7 goes on
// translated. (Searching keys high_key - window + 1 .. high_key missed chunk 3: its slot stayed
// complete for good and rank 2 was RNR-NAKed for ever; roce-vm-s2s-rejoin's carrier round.)
TEST_F(RoceS2sLearn, ACarrierRejoiningBehindAWorkerAWindowAheadReleasesItsUnackedAggregate) {
    connect(1);
    connect(2);
    for (uint32_t c = 0; c < kWindow; ++c) {
        send(contribution(1, kRepPsn[1] + c, c, fill(static_cast<int32_t>(c))));
        send(contribution(2, kRepPsn[2] + c, c, fill(static_cast<int32_t>(100 + c))));
    }
    ASSERT_EQ(job->counters.aggregates_sent, kWindow);
    drain();
    send(root_ack(1, kRepPsn[1] + 2));  // chunks 0..2 acknowledged, 3 not
    drain();
    for (uint32_t c = kWindow; c < kWindow + 3; ++c) {
        send(contribution(2, kRepPsn[2] + c, c, fill(static_cast<int32_t>(100 + c))));
    }
    send(contribution(2, kRepPsn[2] + 7, 7, fill(107)));
    auto out = to(kWorker2);
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(rc::aeth::kind(out.back().p.aeth.syndrome), rc::aeth::Kind::rnr_nak)
        << "chunk 7: its slot still holds chunk 3";
    drain();
    auto agg = reconnect(1, 1, true, 4);
    EXPECT_EQ(job->counters.rejoin_carrier_moved, 1u);
    EXPECT_EQ(job->counters.rejoin_carrier_unacked, 1u) << "chunk 3, not sent again";
    ASSERT_EQ(agg.size(), 3u) << "chunks 4..6 with rank 2's contributions, on its connection";
    for (uint32_t n = 0; n < 3; ++n) {
        EXPECT_EQ(agg[n].src, kWorker2);
        EXPECT_EQ(agg[n].p.bth.psn, kRepPsn[2] + n);
        EXPECT_EQ(agg[n].p.imm, (kWindow + n) << 8 | 1);
    }
    send(root_ack(2, kRepPsn[2] + 2));
    drain();
    EXPECT_EQ(job->table.in_use(), 0u) << "nothing held: chunk 3 released";
    send(contribution(2, kRepPsn[2] + 7, 7, fill(107)));
    EXPECT_TRUE(to(kWorker2).empty()) << "no RNR NAK any more";
    ASSERT_EQ(stray.size(), 1u);
    EXPECT_EQ(stray[0].dst, kRoot);
    EXPECT_EQ(stray[0].p.bth.psn, kRepPsn[2] + 3) << "translated past the 3 partial aggregates";
    EXPECT_TRUE(stray[0].icrc_ok);
    EXPECT_EQ(job->counters.forwarded, 1u);
}

// The root's ACK of the last aggregate lost (roce-vm-s2s-allreduce, "root loss 2%"): the root
// completed chunk 0 and wrote its results, which pass the switch untouched, the workers got them
// and the root ended both connections (its DREQs) before the switch's ACK timeout resent the
// aggregate. The result WRITE shows the root holds the aggregate: the carrier's end releases it
// (`carrier_ended_unacked`) and nothing is sent to the root's QP that is gone. The next
// session's carrier has a leg of its own again. (Fails without: the slot stayed held and the
// aggregate went again to the closed QP until its retries ran out.)
TEST_F(RoceS2sLearn, TheCarriersEndReleasesAnAggregateWhoseResultTheRootWrote) {
    connect(1);
    connect(2);
    complete_chunk_learned();  // chunk 0's aggregate out, its ACK lost
    send(result(0, 0));
    const auto res = to(kWorker1);
    ASSERT_EQ(res.size(), 1u) << "the root's result passes";
    EXPECT_EQ(res[0].p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(res[0].p.imm, 0u << 8 | 2);
    EXPECT_TRUE(res[0].icrc_ok);
    EXPECT_EQ(job->table.in_use(), 1u) << "released only when the leg ends";
    send(dreq_from_root(1));
    send(dreq_from_root(2));
    drain();
    EXPECT_EQ(job->counters.carrier_ended_unacked, 1u);
    EXPECT_EQ(job->counters.aggregates_acked, 0u);
    EXPECT_EQ(job->table.in_use(), 0u) << "the slot is free";
    advance_ms(100);
    EXPECT_TRUE(to(kRoot).empty()) << "nothing resent to the root's closed QP";
    EXPECT_EQ(job->counters.retransmits, 0u);
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(3)));
    send(contribution(2, kRepPsn[2], 0, fill(4)));
    const auto agg = to(kRoot);
    ASSERT_EQ(agg.size(), 1u) << "the next session's chunk 0 on the carrier's new leg";
    EXPECT_EQ(agg[0].p.bth.psn, kRepPsn[1]);
    EXPECT_EQ(ints(agg[0].payload)[0], 3 + 4);
    EXPECT_EQ(job->counters.carrier_ended_unacked, 1u);
    free_mbufs(take_tx(kR0));
}

// The carrier's worker ends its connection while chunk 0's aggregate is unacknowledged and no
// result of it passed (the worker leaves mid-AllReduce; or the result's ICRC is bad, which
// proves nothing): the root may lack it, so it stays held for what says so (a resumed REP, the
// next session), but nothing goes to the closed connection. A result of it written later (the
// root had it) releases it at once.
TEST_F(RoceS2sLearn, TheCarriersEndKeepsAnAggregateTheRootMayLack) {
    connect(1);
    connect(2);
    complete_chunk_learned();
    Bytes damaged = result(0, 0);
    damaged[damaged.size() - 10] ^= 0x5A;  // payload: the ICRC no longer matches
    send(damaged);
    ASSERT_EQ(to(kWorker1).size(), 1u) << "passed untouched all the same";
    send(dreq(1));
    drain();
    EXPECT_EQ(job->table.in_use(), 1u);
    EXPECT_EQ(job->counters.carrier_ended_unacked, 0u);
    advance_ms(100);
    EXPECT_TRUE(to(kRoot).empty()) << "nothing resent on the ended connection";
    EXPECT_EQ(job->counters.retransmits, 0u);
    send(result(0, 0));
    ASSERT_EQ(to(kWorker1).size(), 1u);
    EXPECT_EQ(job->counters.carrier_ended_unacked, 1u);
    EXPECT_EQ(job->table.in_use(), 0u);
}

// The learning job removed: its connections end by their DREQs (either way); when none is left
// the job is over. A new job on the same root (here: the same id again, as a reload that
// changed it would make) learns only connections whose REQ comes after the removal; the old
// connections stay the leaving job's.
TEST_F(RoceS2sLearn, RemovedJobKeepsItsConnectionsANewOneLearnsTheNext) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    send(contribution(1, kRepPsn[1], 0, fill(1)));
    send(contribution(2, kRepPsn[2], 0, fill(100)));
    ASSERT_EQ(to(kRoot).size(), 1u);
    drain();
    send(root_ack(1, kRepPsn[1]));
    drain();
    // Removed, and the new job attached on the same root at another slot.
    constexpr uint16_t kNewSlot = kSlot + 1;
    auto fresh = std::make_unique<fs::JobState>(fs::job_params(cfg));
    ASSERT_TRUE(pipeline::apply_command(
        *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, kNewSlot,
                          fs::job_state_id(cfg.id), fresh.get()}));
    auto& view = *static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    leave(view, cfg, *job, kSlot, 10000);
    fs::append_job(view, cfg, false, 0, kNewSlot);
    // The old connections: translated by the leaving job (rank 2's root side is at 4000).
    send(contribution(2, kRepPsn[2] + 1, 1, fill(100)));
    auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kRepPsn[2]);
    EXPECT_EQ(job->counters.leave_connections_translated, 1u);
    EXPECT_EQ(fresh->counters.absorbed, 0u);
    // New connections of the new job's AllReduce (new QPNs): learned by the new job only.
    connect(1, 1);
    connect(2, 1);
    EXPECT_EQ(fresh->counters.connections_learned, 2u);
    EXPECT_EQ(job->counters.connections_learned, 2u) << "the leaving job learns nothing";
    // (The stage test's root keeps its QPNs across connections: toward the root, the old
    // connection, still live at the leaving job, matches first.)
    send(contribution(1, kRepPsn[1], 0, fill(7)));
    out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[1]);
    EXPECT_EQ(job->counters.duplicates, 1u) << "an old PSN: re-ACKed by the leaving job";
    // DREQs of the old connections (from the root: they name the old worker QPNs) end them:
    // the leaving job is over.
    send(dreq_from_root(1));
    send(dreq_from_root(2));
    drain();
    EXPECT_EQ(job->counters.leave_ended_dreq, 2u);
    EXPECT_EQ(fresh->counters.connections_ended, 0u) << "not the new job's connections";
    advance_ms(1);
    EXPECT_TRUE(job->left.load());
    EXPECT_EQ(job->counters.leave_ended_timeout, 0u);
    // Now rank 1's WRITE is the new connection's: absorbed by the new job from its REP's PSN.
    send(contribution(1, kRepPsn[1], 0, fill(7)));
    out = to(kWorker1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.dest_qp, kWorkerQpn[1] + 100) << "the new connection's worker QPN";
    EXPECT_EQ(out[0].p.aeth.syndrome, rc::aeth::kAckUnlimited);
    EXPECT_EQ(fresh->counters.absorbed, 1u);
    EXPECT_EQ(job->counters.leave_passed, 0u);
    pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s,
                                              kNewSlot, fs::job_state_id(cfg.id), nullptr});
}

// More states leaving on one root than the stage matches (kMaxLeavingPerRoot): the newest are
// matched, the oldest not. The root serves one AllReduce at a time, so the state that left last
// holds the running one's connections; the older ones are over there. (Fails with the oldest
// first: the root's ACK of the running AllReduce's aggregate passes to the worker untouched and
// the aggregate is resent until its retries run out; roce-vm-s2s-rejoin round 13, behind four
// replicating states of earlier AllReduces, hung.)
TEST_F(RoceS2sLearn, TheNewestStatesLeavingARootAreMatched) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    connect(1);
    connect(2);
    complete_chunk_learned();  // chunk 0's aggregate out on rank 1's connection, unacknowledged
    // Older states of the job still leaving on the root (attached, nothing live, not over),
    // then this one removed: it left last.
    std::vector<std::unique_ptr<fs::JobState>> older;
    auto& view = *static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    view.conns.clear();
    view.learning.clear();
    for (uint16_t k = 0; k < fs::kMaxLeavingPerRoot; ++k) {
        const auto slot = static_cast<uint16_t>(kSlot + 2 + k);
        older.push_back(std::make_unique<fs::JobState>(fs::job_params(cfg)));
        older.back()->leave_timeout_ns.store(uint64_t{10000} * 1000000);
        ASSERT_TRUE(pipeline::apply_command(
            *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, slot,
                              fs::job_state_id(cfg.id), older.back().get()}));
        fs::append_job(view, cfg, true, 0, slot);
    }
    fs::append_job(view, cfg, true, 0, kSlot);
    job->leave_timeout_ns.store(uint64_t{10000} * 1000000);
    send(root_ack(1, kRepPsn[1]));
    EXPECT_TRUE(to(kWorker1).empty()) << "the root's ACK is the switch's, consumed";
    EXPECT_EQ(job->counters.root_acks_consumed, 1u);
    EXPECT_EQ(job->counters.aggregates_acked, 1u);
    // Nothing held or unacknowledged any more: rank 2's next chunk goes on translated.
    send(contribution(2, kRepPsn[2] + 1, 1, fill(2)));
    const auto out = to(kRoot);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].p.bth.psn, kRepPsn[2]) << "the root saw nothing on rank 2's connection";
    EXPECT_EQ(job->counters.forwarded, 1u);
    for (uint16_t k = 0; k < fs::kMaxLeavingPerRoot; ++k) {
        pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s,
                                                  static_cast<uint16_t>(kSlot + 2 + k),
                                                  fs::job_state_id(cfg.id), nullptr});
    }
}

// Every listed counter reaches the exposition, per job and per reason.
TEST(RoceS2sMetrics, EveryCounterIsRendered) {
    fs::JobSample j;
    j.job_id = 9;
    j.slots_in_use = 3;
    uint64_t v = 100;
#define INA_S2S_SET(name, help) j.counters.name = v++;
    INA_S2S_JOB_COUNTERS(INA_S2S_SET)
#undef INA_S2S_SET
    fs::LcoreTotals lcore{};
    for (size_t i = 0; i < lcore.size(); ++i) {
        lcore[i] = 500 + i;
    }
    const std::string text = fs::render_metrics({j}, lcore);
    v = 100;
#define INA_S2S_CHECK(name, help)                                                            \
    EXPECT_NE(text.find("inaswitch_rdma_s2s_" #name "_total{job=\"9\"} " + std::to_string(v++) + \
                        "\n"),                                                               \
              std::string::npos)                                                             \
        << #name;
    INA_S2S_JOB_COUNTERS(INA_S2S_CHECK)
#undef INA_S2S_CHECK
    EXPECT_NE(text.find("inaswitch_rdma_s2s_slots_in_use{job=\"9\"} 3\n"), std::string::npos);
    EXPECT_NE(text.find("inaswitch_rdma_s2s_jobs_leaving 0\n"), std::string::npos);
    // A removed job still translating: its own series, told apart from a new job of its id.
    fs::JobSample gone = j;
    gone.leaving = true;
    gone.counters.leave_ended_dreq = 7;
    const std::string both = fs::render_metrics({j, gone}, lcore, 1);
    EXPECT_NE(both.find("inaswitch_rdma_s2s_leave_ended_dreq_total{leaving_job=\"9\"} 7\n"),
              std::string::npos);
    EXPECT_NE(both.find("inaswitch_rdma_s2s_jobs_leaving 1\n"), std::string::npos);
    size_t i = 0;
#define INA_S2S_REASON_CHECK(name, help)                                                     \
    EXPECT_NE(text.find("inaswitch_rdma_s2s_packets_total{reason=\"" #name "\"} " +             \
                        std::to_string(500 + i++) + "\n"),                                   \
              std::string::npos)                                                             \
        << #name;
    INA_S2S_LCORE_COUNTERS(INA_S2S_REASON_CHECK)
#undef INA_S2S_REASON_CHECK
}

// The `rdma_s2s:` section through the loader: errors name file:line:col.
TEST(RoceS2sConfig, ErrorsNameTheirPlace) {
    register_once();
    const std::string base = std::string(kStageYaml) + "rdma_s2s:\n  jobs:\n";
    const std::string conn = "      connections: [{rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64}]\n";
    auto r = config::load_string(
        base + "    - {id: 9, root: 10.0.2.2, world: 2, chunk_bytes: 2048, pmtu: 1024,\n"
               "       connections: [{rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64}]}\n",
        "t.yaml");
    ASSERT_FALSE(r.ok());
    // The job's map starts on the line after "jobs:", column 7.
    const size_t job_line = static_cast<size_t>(std::count(base.begin(), base.end(), '\n')) + 1;
    EXPECT_NE(r.error_text().find("t.yaml:" + std::to_string(job_line) + ":7:"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("chunk_bytes 2048 is above pmtu 1024"), std::string::npos);
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 2\n" + conn +
                                "      windw: 8\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("unknown key 'windw'"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 1\n"
                                   "      connections:\n"
                                   "        - {rank: 2, ip: 10.0.2.2, qpn: 17, root_qpn: 64}\n"
                                   "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("t.yaml:" + std::to_string(job_line + 4) + ":11:"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("above the world"), std::string::npos) << r.error_text();
    EXPECT_NE(r.error_text().find("is the root"), std::string::npos) << r.error_text();
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 1\n"
                                   "      connections:\n"
                                   "        - {rank: 1, ip: 10.0.1.2, qpn: 0x1000000, root_qpn: 64}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("expected qpn"), std::string::npos) << r.error_text();
    // Both RoCE modes on one switch: they share UDP 4791 (dp::FeatureBinding::shared).
    ASSERT_TRUE(config::register_section(features::roce::section_hooks()) ||
                config::load_string(std::string(kStageYaml) + "rdma: {jobs: []}\n", "t.yaml")
                    .ok());
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 2\n" + conn +
                                "rdma:\n  jobs: [{id: 7, world: 2}]\n",
                            "t.yaml");
    EXPECT_TRUE(r.ok()) << r.error_text();
    r = config::load_string(base + "    - {id: 9, root: 10.0.2.2, world: 2}\n", "t.yaml");
    EXPECT_NE(r.error_text().find("expected at least one connection (or learn: true)"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 2\n" + conn +
                                "      learn: true\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("either connections or learn"), std::string::npos)
        << r.error_text();
    r = config::load_string(base + "    - id: 9\n      root: 10.0.2.2\n      world: 2\n" + conn,
                            "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto* s2s = fs::s2s_of(*r.config);
    ASSERT_NE(s2s, nullptr);
    EXPECT_EQ(s2s->jobs[0].window, 64u);
    EXPECT_FALSE(s2s->jobs[0].connections[0].psn.has_value()) << "learned from the first packet";
    EXPECT_EQ(s2s->leave_timeout_ms, fs::kDefaultLeaveTimeoutMs);
    // The section's leave_timeout_ms: its place named when out of range.
    const std::string with_timeout =
        std::string(kStageYaml) + "rdma_s2s:\n  leave_timeout_ms: 0\n  jobs:\n";
    r = config::load_string(with_timeout + "    - id: 9\n      root: 10.0.2.2\n      world: 2\n" +
                                conn,
                            "t.yaml");
    const size_t timeout_line =
        static_cast<size_t>(std::count(with_timeout.begin(), with_timeout.end(), '\n')) - 1;
    EXPECT_NE(r.error_text().find("t.yaml:" + std::to_string(timeout_line) + ":21:"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("leave_timeout_ms"), std::string::npos) << r.error_text();
    r = config::load_string(std::string(kStageYaml) + "rdma_s2s:\n  leave_timeout_ms: 250\n"
                                "  jobs:\n    - id: 9\n      root: 10.0.2.2\n      world: 2\n" +
                                conn,
                            "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(fs::s2s_of(*r.config)->leave_timeout_ms, 250u);
}

// Result replication (replicate: true): the root WRITEs each result once, on the carrier (rank
// 1); the switch copies it onto rank 2's root -> worker leg and aggregates the two workers'
// ACKs into the carrier's.

class RoceS2sReplicate : public RoceS2s {
protected:
    std::string yaml() const override {
        return s2s_yaml(
            "      replicate: true\n",
            "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 0x40, psn: 1000,\n"
            "           root_psn: 5000, result_addr: 0x7f0000001000, result_rkey: 0xA1}\n"
            "        - {rank: 2, ip: 10.0.2.7, qpn: 18, root_qpn: 0x41, psn: 2000,\n"
            "           root_psn: 9000, result_addr: 0x7f0000800000, result_rkey: 0xB2}\n");
    }
    // Rank's ACK/NAK of the root's result WRITEs (the leg's own PSN space), MSN msn.
    Bytes worker_ack(int rank, uint32_t psn, uint32_t msn,
                     uint8_t syndrome = rc::aeth::kAckUnlimited) {
        rc::Ipv4Path path;
        path.src_ip = worker_ip(rank);
        path.dst_ip = kRoot;
        path.dest_qp = kRootQpn[rank];
        return frame(path.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, path, 1, rc::Reply{syndrome, psn, msn});
        });
    }
    Bytes worker_cnp(int rank) {
        rc::Ipv4Path path;
        path.src_ip = worker_ip(rank);
        path.dst_ip = kRoot;
        path.dest_qp = kRootQpn[rank];
        return frame(path.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_cnp(out, cap, path, 1);
        });
    }
    // Packets 0..n-1 of the carrier's results sent and their two copies taken.
    void results(uint32_t n) {
        for (uint32_t k = 0; k < n; ++k) {
            send(result(k, k));
        }
        EXPECT_EQ(to(kWorker1).size(), n);
        EXPECT_EQ(to(kWorker2).size(), n);
    }
    // The frames toward the root (on r1, with rank 2's copies: those are taken as strays).
    std::vector<Seen> at_root() { return to(kRoot); }
};

TEST_F(RoceS2sReplicate, ResultWriteIsCopiedOntoEveryWorkersLeg) {
    const Bytes w = result(0, 3);
    send(w);
    const auto carrier = to(kWorker1);
    ASSERT_EQ(carrier.size(), 1u);
    EXPECT_EQ(carrier[0].p.bth.dest_qp, kWorkerQpn[1]) << "the carrier's own WRITE, untouched";
    EXPECT_EQ(carrier[0].p.bth.psn, kRootPsn[1]);
    EXPECT_EQ(carrier[0].p.reth.va, kResultAddr[1] + 3 * kChunk);
    EXPECT_TRUE(carrier[0].icrc_ok);
    const auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    const Seen& s = copy[0];
    EXPECT_EQ(s.src, kRoot);
    EXPECT_EQ(s.p.bth.opcode, rc::op::kWriteOnlyImm);
    EXPECT_EQ(s.p.bth.dest_qp, kWorkerQpn[2]);
    EXPECT_EQ(s.p.bth.psn, kRootPsn[2]) << "carrier PSN + the leg's fixed delta";
    EXPECT_TRUE(s.p.bth.ack_req);
    EXPECT_EQ(s.p.reth.va, kResultAddr[2] + 3 * kChunk) << "same offset into rank 2's buffer";
    EXPECT_EQ(s.p.reth.rkey, kResultRkey[2]);
    EXPECT_EQ(s.p.reth.dma_len, kChunk);
    EXPECT_EQ(s.p.imm, 3u << 8 | 2);
    EXPECT_EQ(ints(s.payload), fill(3000));
    EXPECT_TRUE(s.icrc_ok) << "ICRC recomputed for the copy";
    EXPECT_EQ(job->counters.results_replicated, 1u);
    // The next packet keeps the delta.
    send(result(1, 4));
    ASSERT_EQ(to(kWorker1).size(), 1u);
    const auto next = to(kWorker2);
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].p.bth.psn, kRootPsn[2] + 1);
}

TEST_F(RoceS2sReplicate, MultiPacketResultFirstMiddleLastIsCopiedPacketByPacket) {
    // A 3-packet WRITE: FIRST (RETH, 64 of 160 bytes), MIDDLE, LAST with immediate.
    send(result(0, 1, rc::op::kWriteFirst, 64, 160));
    send(result(1, 1, rc::op::kWriteMiddle, 64));
    send(result(2, 1, rc::op::kWriteLastImm, 32));
    ASSERT_EQ(to(kWorker1).size(), 3u);
    const auto copies = to(kWorker2);
    ASSERT_EQ(copies.size(), 3u);
    EXPECT_EQ(copies[0].p.bth.opcode, rc::op::kWriteFirst);
    EXPECT_EQ(copies[0].p.reth.va, kResultAddr[2] + kChunk);
    EXPECT_EQ(copies[0].p.reth.rkey, kResultRkey[2]);
    EXPECT_EQ(copies[0].p.reth.dma_len, 160u);
    EXPECT_EQ(copies[1].p.bth.opcode, rc::op::kWriteMiddle);
    EXPECT_EQ(copies[2].p.bth.opcode, rc::op::kWriteLastImm);
    EXPECT_EQ(copies[2].p.imm, 1u << 8 | 2);
    EXPECT_EQ(copies[2].payload.size(), 32u);
    for (uint32_t k = 0; k < 3; ++k) {
        EXPECT_EQ(copies[k].p.bth.psn, kRootPsn[2] + k);
        EXPECT_EQ(copies[k].p.bth.dest_qp, kWorkerQpn[2]);
        EXPECT_TRUE(copies[k].icrc_ok) << k;
    }
}

TEST_F(RoceS2sReplicate, ChainedResultIsCopiedWithItsWholePayload) {
    // Segment splits inside the payload, and one with the ICRC across the last two segments.
    const std::vector<std::vector<uint16_t>> splits = {{80, 40}, {90, 30, 20}, {137, 3}};
    uint32_t k = 0;
    for (const auto& split : splits) {
        const Bytes w = result(k, k);
        run({chained(w, kR1, split)});
        const auto carrier = to(kWorker1);
        ASSERT_EQ(carrier.size(), 1u);
        EXPECT_TRUE(carrier[0].icrc_ok);
        const auto copy = to(kWorker2);
        ASSERT_EQ(copy.size(), 1u) << k;
        EXPECT_EQ(ints(copy[0].payload), fill(static_cast<int32_t>(1001 * k))) << k;
        EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + k);
        EXPECT_TRUE(copy[0].icrc_ok) << k;
        ++k;
    }
    EXPECT_EQ(job->counters.replicate_failed, 0u);
}

TEST_F(RoceS2sReplicate, RootHearsTheLeastPsnEveryWorkerAcknowledged) {
    results(4);
    send(worker_ack(1, kRootPsn[1] + 3, 4));
    EXPECT_TRUE(at_root().empty()) << "rank 2 acknowledged nothing yet";
    EXPECT_EQ(job->counters.result_acks_consumed, 1u);
    send(worker_ack(2, kRootPsn[2] + 1, 2));
    auto acks = at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].src, kWorker1) << "on the carrier, as its worker";
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(acks[0].p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 1) << "rank 2's PSN in the carrier's space";
    EXPECT_EQ(acks[0].p.aeth.msn, 2u);
    EXPECT_TRUE(acks[0].icrc_ok);
    send(worker_ack(2, kRootPsn[2] + 3, 4));
    acks = at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 3);
    EXPECT_EQ(acks[0].p.aeth.msn, 4u);
    EXPECT_EQ(job->counters.result_acks_forwarded, 2u);
}

TEST_F(RoceS2sReplicate, AWorkerThatNeverAcksHoldsTheRootBack) {
    results(4);
    for (uint32_t k = 0; k < 4; ++k) {
        send(worker_ack(2, kRootPsn[2] + k, k + 1));
    }
    EXPECT_TRUE(at_root().empty()) << "rank 1 never ACKed: the root hears nothing past it";
    EXPECT_EQ(job->counters.result_acks_forwarded, 0u);
    send(worker_ack(1, kRootPsn[1], 1));
    const auto acks = at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1]) << "only as far as the laggard";
    EXPECT_EQ(acks[0].p.aeth.msn, 1u);
}

TEST_F(RoceS2sReplicate, DuplicateReAckNeitherLowersNorIsLost) {
    results(4);
    send(worker_ack(1, kRootPsn[1] + 3, 4));
    send(worker_ack(2, kRootPsn[2] + 3, 4));
    ASSERT_EQ(at_root().size(), 1u);
    // The root retransmits packet 2 (its ACK was lost): the switch copies it again; both
    // workers re-ACK their latest PSN; an older ACK arriving late changes nothing.
    send(result(2, 2));
    EXPECT_EQ(to(kWorker2).size(), 1u);
    free_mbufs(take_tx(kR0));
    send(worker_ack(2, kRootPsn[2] + 1, 2));  // late, behind
    send(worker_ack(1, kRootPsn[1] + 3, 4));  // duplicate re-ACK
    const auto acks = at_root();
    ASSERT_FALSE(acks.empty()) << "the retransmitting root hears where the workers are";
    for (const auto& a : acks) {
        EXPECT_EQ(a.p.bth.psn, kRootPsn[1] + 3) << "never lowered by the late ACK";
        EXPECT_EQ(a.p.aeth.msn, 4u);
    }
}

TEST_F(RoceS2sReplicate, WorkerNakGoesToTheRootInTheCarriersSpace) {
    results(4);
    send(worker_ack(1, kRootPsn[1] + 3, 4));
    // Rank 2 lost its copy of packet 2: NAK-sequence at its PSN 9002.
    send(worker_ack(2, kRootPsn[2] + 2, 2, rc::aeth::kNakPsnSequence));
    auto naks = at_root();
    ASSERT_EQ(naks.size(), 1u);
    EXPECT_EQ(naks[0].p.aeth.syndrome, rc::aeth::kNakPsnSequence);
    EXPECT_EQ(naks[0].p.bth.psn, kRootPsn[1] + 2);
    EXPECT_EQ(naks[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(naks[0].p.aeth.msn, 2u);
    EXPECT_TRUE(naks[0].icrc_ok);
    EXPECT_EQ(job->counters.result_naks_forwarded, 1u);
    // Rank 1 reporting the same gap (packet 2 lost before the switch, say) adds nothing.
    send(worker_ack(1, kRootPsn[1] + 2, 2, rc::aeth::kNakPsnSequence));
    EXPECT_TRUE(at_root().empty());
    EXPECT_EQ(job->counters.result_naks_merged, 1u);
    // The retransmission is lost again for rank 2: its second NAK is a new loss, forwarded.
    send(worker_ack(2, kRootPsn[2] + 2, 2, rc::aeth::kNakPsnSequence));
    EXPECT_EQ(at_root().size(), 1u);
    // An RNR NAK keeps its syndrome (the timer) and is translated likewise.
    send(worker_ack(2, kRootPsn[2] + 3, 3, static_cast<uint8_t>(rc::aeth::kRnrNak | 5)));
    naks = at_root();
    ASSERT_EQ(naks.size(), 1u);
    EXPECT_EQ(naks[0].p.aeth.syndrome, rc::aeth::kRnrNak | 5);
    EXPECT_EQ(naks[0].p.bth.psn, kRootPsn[1] + 3) << "rank 2's 9003 in the carrier's space";
    EXPECT_EQ(naks[0].p.aeth.msn, 3u);
}

TEST_F(RoceS2sReplicate, WorkerCnpSlowsTheCarrier) {
    send(worker_cnp(2));
    auto cnps = at_root();
    ASSERT_EQ(cnps.size(), 1u);
    EXPECT_EQ(cnps[0].p.bth.opcode, rc::op::kCnp);
    EXPECT_EQ(cnps[0].p.bth.dest_qp, kRootQpn[1]) << "the root's QP of the carrier";
    EXPECT_EQ(job->counters.result_cnps_forwarded, 1u);
    send(worker_cnp(1));  // already the carrier's: passes as it is
    cnps = at_root();
    ASSERT_EQ(cnps.size(), 1u);
    EXPECT_EQ(cnps[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(job->counters.result_cnps_forwarded, 1u);
}

TEST(RoceS2sConfig, ReplicateNeedsEachConnectionsResultBuffer) {
    register_once();
    const std::string base = std::string(kStageYaml) +
                             "rdma_s2s:\n  jobs:\n    - id: 9\n      root: 10.0.2.2\n"
                             "      world: 2\n      replicate: true\n      connections:\n";
    const size_t conn_line = static_cast<size_t>(std::count(base.begin(), base.end(), '\n')) + 1;
    auto r = config::load_string(
        base + "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64, root_psn: 5,\n"
               "           result_addr: 0x1000, result_rkey: 7}\n"
               "        - {rank: 2, ip: 10.0.2.7, qpn: 18, root_qpn: 65}\n",
        "t.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error_text().find("t.yaml:" + std::to_string(conn_line + 2) + ":11:"),
              std::string::npos)
        << r.error_text();
    EXPECT_NE(r.error_text().find("expected root_psn, result_addr and result_rkey"),
              std::string::npos)
        << r.error_text();
    r = config::load_string(std::string(kStageYaml) +
                                "rdma_s2s:\n  jobs:\n    - id: 9\n      root: 10.0.2.2\n"
                                "      world: 1\n      connections:\n"
                                "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64, "
                                "root_psn: 5}\n",
                            "t.yaml");
    EXPECT_NE(r.error_text().find("read only with replicate: true"), std::string::npos)
        << r.error_text();
    r = config::load_string(
        base + "        - {rank: 1, ip: 10.0.1.2, qpn: 17, root_qpn: 64, root_psn: 5,\n"
               "           result_addr: 0x1000, result_rkey: 7}\n",
        "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto& c = fs::s2s_of(*r.config)->jobs[0].connections[0];
    EXPECT_EQ(*c.result_addr, 0x1000u);
    EXPECT_EQ(fs::job_params(fs::s2s_of(*r.config)->jobs[0]).replicate, true);
}

// Learning: each connection's root PSN is its REQ's Starting PSN and its result buffer the
// REQ's INAR request; replication runs on what the CM exchange taught.
// (Public: the tail scenario is a function run in two orders.)
class RoceS2sLearnReplicate : public RoceS2sLearn {
public:
    using RoceS2sLearn::connect;
    using RoceS2sLearn::job;
    bool replicate() const override { return true; }
    // Rank's ACK of the root's result packet k on its connection, as rxe sends it: one per
    // packet asking for one, its PSN, MSN = messages completed (one packet each here).
    Bytes result_ack(int rank, uint32_t k) {
        rc::Ipv4Path a;
        a.src_ip = worker_ip(rank);
        a.dst_ip = kRoot;
        a.dest_qp = kRootQpn[rank];
        return frame(a.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, a, 1,
                                  rc::Reply{rc::aeth::kAckUnlimited, kRootPsn[rank] + k, k + 1});
        });
    }
    // Rank's ACK or NAK (`syndrome`) of its result leg's PSN `psn` (absolute), MSN `msn`.
    Bytes result_reply(int rank, uint32_t psn, uint32_t msn,
                       uint8_t syndrome = rc::aeth::kAckUnlimited) {
        rc::Ipv4Path a;
        a.src_ip = worker_ip(rank);
        a.dst_ip = kRoot;
        a.dest_qp = kRootQpn[rank];
        return frame(a.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, a, 1, rc::Reply{syndrome, psn, msn});
        });
    }
    // The root's result packet k of chunk c on the carrier's resumed connection (generation 1:
    // its worker QPN + 100, from its REQ's root PSN).
    Bytes resumed_result(uint32_t k, uint32_t c) {
        return result(k, c, rc::op::kWriteOnlyImm, kChunk, kChunk, kWorkerQpn[1] + 100,
                      kRootPsn[1] + kNextRootPsn);
    }
    // The carrier's resume with the results of test ACarrierResuming...: 4 results copied,
    // rank 2 acknowledged 2 of them, the carrier all 4 before it left; the frames the resumed
    // REP made the switch send (its fill to rank 2).
    std::vector<Seen> carrier_resumed_with_two_unacked() {
        connected_with_results(4);
        acks_burst(2, 0, 2, false);
        acks_burst(1, 0, 4, true);
        drain();
        return reconnect(1, 1, true, 0);
    }
    // Both ranks connected, then the root's result packets 0..n-1 (results(n)).
    void connected_with_results(uint32_t n) {
        connect(1);
        connect(2);
        results(n);
    }
    // The root's result packets 0..n-1 on the carrier; the carrier's and rank 2's copies taken.
    void results(uint32_t n) {
        for (uint32_t k = 0; k < n; ++k) {
            send(result(k, k));
        }
        EXPECT_EQ(to(kWorker1).size(), n);
        EXPECT_EQ(to(kWorker2).size(), n);
    }
    // Rank's ACKs of packets from..to-1 and then, when `then_dreq`, its DREQ: ONE burst, as
    // they leave the worker (rxe ACKs the last results, ina-rdma-worker sees them and
    // disconnects at once).
    void acks_burst(int rank, uint32_t from, uint32_t to_k, bool then_dreq) {
        std::vector<rte_mbuf*> burst;
        const uint16_t port = port_of(worker_ip(rank));
        for (uint32_t k = from; k < to_k; ++k) {
            burst.push_back(mbuf(result_ack(rank, k), port));
        }
        if (then_dreq) {
            burst.push_back(mbuf(dreq(rank), port));
        }
        run(burst);
    }
    // The carrier's worker acknowledges the root's result packet k; the root hears nothing
    // until rank 2 acknowledges its copy of it (the first message of its leg, at `rank2_psn`),
    // then ONE ACK of packet k on the carrier (the MSN of k + 1 one-packet messages).
    void root_hears_k_once_rank2_acks(uint32_t k, uint32_t rank2_psn) {
        send(result_reply(1, kRootPsn[1] + k, k + 1));
        EXPECT_TRUE(acks_at_root().empty()) << "rank 2 has not acknowledged its copy";
        send(result_reply(2, rank2_psn, 1));
        const auto acks = acks_at_root();
        ASSERT_EQ(acks.size(), 1u);
        EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + k);
        EXPECT_EQ(acks[0].p.aeth.msn, k + 1) << "rank 2's first message is the carrier's k + 1st";
    }
    // Both ranks connected, `n` results copied and acknowledged by both, then rank 2 resumes
    // at chunk n (a copy target; the state leaves, its successor made, attached and published).
    void rank2_resumed_after(uint32_t n, const fs::JobConfig& cfg) {
        connected_with_results(n);
        acks_burst(1, 0, n, false);
        acks_burst(2, 0, n, true);
        acks_at_root();
        EXPECT_TRUE(reconnect(2, 1, true, n).empty());
        successor_made(cfg);
        successor_attached();
        successor_published(cfg);
    }
    // rank2_resumed_after(2), then that AllReduce ends: both connections' DREQs.
    void rank2_resumed_then_the_allreduce_ended(const fs::JobConfig& cfg) {
        rank2_resumed_after(2, cfg);
        send(dreq(1));
        send(dreq_from_root(2, 1));
        drain();
    }
    // The ACKs toward the root (the DREQs, passed untouched, left out).
    std::vector<Seen> acks_at_root() {
        std::vector<Seen> out;
        for (auto& s : to(kRoot)) {
            if (s.p.bth.opcode == rc::op::kAcknowledge) {
                out.push_back(s);
            }
        }
        return out;
    }
};

// Replicating: the root's one result WRITE of chunk 0 (on the carrier, copied to rank 2) shows
// it holds the aggregate whose ACK was lost; the carrier's DREQ releases it.
TEST_F(RoceS2sLearnReplicate, TheCarriersEndReleasesAnAggregateWhoseResultTheRootWrote) {
    connect(1);
    connect(2);
    complete_chunk_learned();
    results(1);
    EXPECT_EQ(job->table.in_use(), 1u);
    acks_burst(1, 0, 1, true);
    drain();
    EXPECT_EQ(job->counters.carrier_ended_unacked, 1u);
    EXPECT_EQ(job->table.in_use(), 0u);
    advance_ms(100);
    for (const auto& s : to(kRoot)) {
        EXPECT_NE(s.p.bth.opcode, rc::op::kWriteOnlyImm) << "no aggregate resent";
    }
}

TEST_F(RoceS2sLearnReplicate, TheRequestTeachesTheLegAndTheResultBuffer) {
    connect(1);
    connect(2);
    send(result(2, 2));
    ASSERT_EQ(to(kWorker1).size(), 1u);
    const auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2]) << "the REQ's QPN";
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 2) << "from the REQs' Starting PSNs";
    EXPECT_EQ(copy[0].p.reth.va, kResultAddr[2] + 2 * kChunk) << "the INAR result_addr";
    EXPECT_EQ(copy[0].p.reth.rkey, kResultRkey[2]);
    EXPECT_EQ(ints(copy[0].payload), fill(2002));
    EXPECT_TRUE(copy[0].icrc_ok);
    // Both workers' ACKs make one ACK toward the root on the learned carrier.
    for (int rank = 1; rank <= 2; ++rank) {
        rc::Ipv4Path a;
        a.src_ip = worker_ip(rank);
        a.dst_ip = kRoot;
        a.dest_qp = kRootQpn[rank];
        send(frame(a.src_ip, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, a, 1,
                                  rc::Reply{rc::aeth::kAckUnlimited, kRootPsn[rank] + 2, 1});
        }));
    }
    const auto acks = to(kRoot);
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].src, kWorker1);
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]) << "the REP's QPN";
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 2);
}

TEST_F(RoceS2sLearnReplicate, WithoutTheCarrierTheWorkersAcksAreTheirOwn) {
    connect(2);  // rank 1, the carrier, not connected: nothing to aggregate onto
    rc::Ipv4Path a;
    a.src_ip = kWorker2;
    a.dst_ip = kRoot;
    a.dest_qp = kRootQpn[2];
    send(frame(a.src_ip, [&](uint8_t* out, size_t cap) {
        return rc::encode_ack(out, cap, a, 1, rc::Reply{rc::aeth::kAckUnlimited, kRootPsn[2], 1});
    }));
    const auto passed = to(kRoot);
    ASSERT_EQ(passed.size(), 1u) << "forwarded untouched";
    EXPECT_EQ(passed[0].p.bth.dest_qp, kRootQpn[2]);
    EXPECT_EQ(passed[0].p.bth.psn, kRootPsn[2]);
    EXPECT_EQ(job->counters.result_acks_consumed, 0u);
}

// The tail of a replicated round against rxe (roce-vm-s2s-allreduce round 6, captured): one
// worker has ACKed every result and disconnected; the other's last ACKs and its DREQ come in
// one burst. The root must still hear, on the carrier, that every worker has the last results:
// it waits for them (its RC retries on the carrier for ever, and the carrier's worker may be
// gone). `first` is the rank that leaves first.
void tail_after_a_departure(RoceS2sLearnReplicate& t, int first) {
    const int last = 3 - first;
    t.connected_with_results(4);
    t.acks_burst(first, 0, 4, true);
    t.acks_burst(last, 0, 2, false);
    auto acks = t.acks_at_root();
    ASSERT_EQ(acks.size(), 1u) << "on the carrier, not passed to the root's QP of rank 2's";
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 1) << "only as far as the one still connected";
    t.acks_burst(last, 2, 4, true);
    acks = t.acks_at_root();
    ASSERT_EQ(acks.size(), 1u) << "the last results acknowledged by the worker that left last";
    EXPECT_EQ(acks[0].src, kWorker1);
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 3);
    EXPECT_EQ(acks[0].p.aeth.msn, 4u);
    EXPECT_TRUE(acks[0].icrc_ok);
    EXPECT_EQ(t.job->counters.result_acks_consumed, 8u);
    EXPECT_EQ(t.job->counters.connections_ended, 2u);
    EXPECT_EQ(t.job->counters.departure_acks, 0u)
        << "the worker that left had acknowledged everything: it held nothing back";
}

TEST_F(RoceS2sLearnReplicate, TheCarriersLastAcksWithItsDisconnectStillReachTheRoot) {
    tail_after_a_departure(*this, 2);
}

// The other order: the carrier left first; rank 2's last ACKs, after the carrier's DREQ.
TEST_F(RoceS2sLearnReplicate, ALaggardsAcksAfterTheCarrierLeftStillReachTheRoot) {
    tail_after_a_departure(*this, 1);
}

// Every worker ACKed and left, and the aggregated ACK of the tail was lost on the root's link:
// the root retransmits on the carrier, whose worker is gone. An RC responder acknowledges a
// duplicate; the switch does it for the workers: the root hears where they all were.
TEST_F(RoceS2sLearnReplicate, ARetransmissionAfterEveryWorkerLeftIsAcknowledged) {
    connected_with_results(4);
    acks_burst(2, 0, 4, true);
    acks_burst(1, 0, 4, true);
    ASSERT_FALSE(acks_at_root().empty());  // ... and lost
    send(result(2, 2));
    send(result(3, 3));
    free_mbufs(take_tx(kR0));
    stray.clear();
    const auto acks = acks_at_root();  // rank 2's port too: its frames become strays
    EXPECT_TRUE(std::none_of(stray.begin(), stray.end(),
                             [](const Seen& x) { return x.dst == kWorker2; }))
        << "no copy for a worker that left";
    ASSERT_FALSE(acks.empty()) << "the retransmitting root hears the workers' last ACK";
    for (const auto& a : acks) {
        EXPECT_EQ(a.p.bth.dest_qp, kRootQpn[1]);
        EXPECT_EQ(a.p.bth.psn, kRootPsn[1] + 3);
        EXPECT_EQ(a.p.aeth.msn, 4u);
    }
}

// A worker still connected that has not ACKed holds the root back, whoever left: the carrier's
// departure is no acknowledgement of anything rank 2 has not got.
TEST_F(RoceS2sLearnReplicate, TheCarrierLeavingAcknowledgesNothingForTheOthers) {
    connected_with_results(4);
    acks_burst(2, 0, 1, false);
    acks_burst(1, 0, 4, true);
    auto acks = acks_at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1]) << "only as far as rank 2 acknowledged";
    // The root retransmits packet 1 on the carrier: rank 2 gets its copy (its leg's PSN).
    send(result(1, 1));
    const auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 1);
    free_mbufs(take_tx(kR0));
    EXPECT_TRUE(acks_at_root().empty()) << "nothing new acknowledged";
}

// The departure rule, counted: a worker whose last ACK was lost leaves (DREQ) one result short;
// once the other has every result too, the root hears all it sent acknowledged, past what the
// departed worker acknowledged (it no longer holds the minimum back).
TEST_F(RoceS2sLearnReplicate, TheDepartureRuleIsCounted) {
    connected_with_results(4);
    acks_burst(2, 0, 3, true);  // its ACK of packet 3 lost, then its DREQ
    acks_burst(1, 0, 2, false);
    EXPECT_EQ(job->counters.departure_acks, 0u) << "rank 1 still holds the minimum";
    acks_at_root();
    acks_burst(1, 2, 4, true);
    const auto acks = acks_at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.bth.psn, kRootPsn[1] + 3) << "everything the root sent";
    EXPECT_EQ(job->counters.departure_acks, 1u);
}


// The carrier resumes (its REP `resumed`) with replicate: true: the root writes the results on
// its resumed connection now (ina-rdma-root --results once), and the switch moves the copies'
// source onto it. Rank 2's leg had copies 0..3 (PSN kRootPsn[2] + 0..3), its ACKs of 2 and 3
// not seen: the switch sends a fill (zero-length WRITEs at PSNs 2 and 3, duplicates or no-ops
// for the worker) so its ePSN is 4 exactly, then copies the resumed connection's WRITEs from
// there, and the root hears on the resumed connection only what both workers acknowledged, in
// its own PSN and MSN space. (Fails without the move: the resumed connection's results pass
// untouched and rank 2 gets no copy.)
TEST_F(RoceS2sLearnReplicate, ACarrierResumingMovesTheCopiesOntoItsResumedConnection) {
    const uint32_t first = kRootPsn[1] + kNextRootPsn;  // the root's PSN on the new connection
    const auto fill = carrier_resumed_with_two_unacked();
    EXPECT_EQ(job->counters.result_source_moved, 1u);
    ASSERT_EQ(fill.size(), 2u) << "rank 2's leg filled up to its last copy";
    for (uint32_t k = 0; k < 2; ++k) {
        const Seen& f = fill[k];
        EXPECT_EQ(f.src, kRoot);
        EXPECT_EQ(f.dst, kWorker2);
        EXPECT_EQ(f.p.bth.opcode, rc::op::kWriteOnly);
        EXPECT_EQ(f.p.bth.dest_qp, kWorkerQpn[2]);
        EXPECT_EQ(f.p.bth.psn, kRootPsn[2] + 2 + k);
        EXPECT_TRUE(f.p.bth.ack_req);
        EXPECT_EQ(f.p.reth.va, kResultAddr[2]);
        EXPECT_EQ(f.p.reth.rkey, kResultRkey[2]);
        EXPECT_EQ(f.p.reth.dma_len, 0u);
        EXPECT_TRUE(f.payload.empty());
        EXPECT_TRUE(f.icrc_ok);
    }
    EXPECT_EQ(job->counters.result_fill_sent, 2u);
    // The root's first result on the resumed connection: the carrier's worker gets it as it is,
    // rank 2 a copy at its leg's next PSN.
    send(resumed_result(0, 4));
    const auto own = to(kWorker1);
    ASSERT_EQ(own.size(), 1u);
    EXPECT_EQ(own[0].p.bth.dest_qp, kWorkerQpn[1] + 100);
    EXPECT_EQ(own[0].p.bth.psn, first) << "untouched";
    const auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u) << "copied from the resumed connection";
    EXPECT_EQ(copy[0].src, kRoot);
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2]);
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 4) << "right after the fill";
    EXPECT_EQ(copy[0].p.reth.va, kResultAddr[2] + 4 * kChunk);
    EXPECT_EQ(copy[0].p.reth.rkey, kResultRkey[2]);
    EXPECT_EQ(copy[0].p.imm, own[0].p.imm);
    EXPECT_EQ(copy[0].payload, own[0].payload);
    EXPECT_TRUE(copy[0].icrc_ok);
    // The carrier's worker acknowledges on its new connection: not enough for the root.
    send(result_reply(1, first, 1));
    EXPECT_TRUE(acks_at_root().empty()) << "rank 2 has not acknowledged the copy";
    // Rank 2 re-ACKs the fill (duplicates: it had packets 2 and 3, 4 messages), then the copy.
    // A re-ACK of the fill is no sign of the root retransmitting: it hears nothing of it.
    send(result_reply(2, kRootPsn[2] + 3, 4));
    send(result_reply(2, kRootPsn[2] + 3, 4));
    EXPECT_TRUE(acks_at_root().empty());
    send(result_reply(2, kRootPsn[2] + 4, 5));
    const auto acks = acks_at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].src, kWorker1);
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]) << "on the resumed connection (its REP's QPN)";
    EXPECT_EQ(acks[0].p.bth.psn, first) << "in its own PSN space";
    EXPECT_EQ(acks[0].p.aeth.msn, 1u) << "and MSN space";
    EXPECT_TRUE(acks[0].icrc_ok);
    EXPECT_EQ(job->counters.result_acks_forwarded, 2u) << "one before the resume, this one";
    EXPECT_EQ(lcore(fs::LcoreCounter::fallback), 0u);
}

// The carrier resumes a SECOND time in one AllReduce (its first resumed connection ends, a
// third one is taken back): the state that left at the first resume (its session runs on) moves
// the copies' source again, onto the newest connection; the fresh state for the next AllReduce,
// attached meanwhile, hears the REP too and takes no part. Rank 2 had acknowledged every copy:
// no fill, its next copy follows its last one; the root hears the aggregated ACK on the newest
// connection in its own PSN and MSN space. (Fails without: the root's results on the third
// connection pass to rank 1 alone, rank 2 gets no copy and the root no ACK.)
TEST_F(RoceS2sLearnReplicate, ASecondCarrierResumeMovesTheCopiesAgain) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    const uint32_t first1 = kRootPsn[1] + kNextRootPsn;
    const uint32_t first2 = kRootPsn[1] + 2 * kNextRootPsn;
    ASSERT_EQ(carrier_resumed_with_two_unacked().size(), 2u);  // rank 2's fill
    send(result_reply(2, kRootPsn[2] + 3, 4));                  // answered: its leg at + 4
    send(resumed_result(0, 4));
    EXPECT_EQ(to(kWorker1).size(), 1u);
    auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 4);
    send(result_reply(1, first1, 1));
    send(result_reply(2, kRootPsn[2] + 4, 5));
    auto acks = acks_at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].p.bth.psn, first1);
    // The fresh state for the next AllReduce, made, attached and published.
    successor_made(cfg);
    successor_attached();
    successor_published(cfg);
    // The carrier leaves again (its DREQ on the first resumed connection) and resumes.
    send(dreq(1));
    send(req(1, 11, 2, true, 5));
    send(rep(1, 2, true, 5));
    drain();
    EXPECT_EQ(job->counters.result_source_moved, 2u);
    EXPECT_EQ(job->counters.result_fill_sent, 2u) << "no fill: rank 2 had every copy";
    EXPECT_EQ(next_state->counters.rejoin_resumed, 1u) << "the fresh state heard the REP";
    EXPECT_EQ(next_state->counters.connections_learned, 0u);
    EXPECT_EQ(next_state->counters.result_source_moved, 0u);
    // The root's first result on the third connection: to rank 1 as it is, a copy to rank 2
    // right after its last one.
    send(result(0, 5, rc::op::kWriteOnlyImm, kChunk, kChunk, kWorkerQpn[1] + 200, first2));
    const auto own = to(kWorker1);
    ASSERT_EQ(own.size(), 1u);
    EXPECT_EQ(own[0].p.bth.dest_qp, kWorkerQpn[1] + 200);
    EXPECT_EQ(own[0].p.bth.psn, first2) << "untouched";
    copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u) << "copied from the newest connection";
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2]);
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 5);
    EXPECT_EQ(copy[0].p.reth.va, kResultAddr[2] + 5 * kChunk);
    EXPECT_EQ(copy[0].p.imm, own[0].p.imm);
    EXPECT_TRUE(copy[0].icrc_ok);
    send(result_reply(1, first2, 1));
    EXPECT_TRUE(acks_at_root().empty()) << "rank 2 has not acknowledged its copy";
    send(result_reply(2, kRootPsn[2] + 5, 6));
    acks = acks_at_root();
    ASSERT_EQ(acks.size(), 1u);
    EXPECT_EQ(acks[0].src, kWorker1);
    EXPECT_EQ(acks[0].p.bth.dest_qp, kRootQpn[1]);
    EXPECT_EQ(acks[0].p.bth.psn, first2) << "in the newest connection's PSN space";
    EXPECT_EQ(acks[0].p.aeth.msn, 1u) << "and MSN space";
    EXPECT_TRUE(acks[0].icrc_ok);
    EXPECT_EQ(lcore(fs::LcoreCounter::fallback), 0u);
}

// A state left at a resume of one AllReduce (still leaving: its tick has not run since the next
// AllReduce's first REP, or a connection of it has not ended) takes no part in the next
// AllReduce's resumes: the root accepted that AllReduce's
// connections (REPs not `resumed`) while the state listened, so the carrier's resume there is
// the new state's to follow. (Without: the old state moved its copies' source onto the new
// AllReduce's resumed connection and copied the root's results to rank 2's QP of the last
// AllReduce; roce-vm-s2s-rejoin's replicating carrier round after the replicating rank round.)
TEST_F(RoceS2sLearnReplicate, AStateOfAnEarlierAllReduceFollowsNoLaterResume) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    rank2_resumed_then_the_allreduce_ended(cfg);
    // The next one connects both ranks (generation 2) on the fresh state, then its carrier
    // resumes (generation 3).
    reconnect(1, 2);
    reconnect(2, 2);
    EXPECT_EQ(next_state->counters.connections_learned, 2u);
    send(dreq(1));
    send(req(1, 11, 3, true, 0));
    send(rep(1, 3, true, 0));
    drain();
    EXPECT_EQ(job->counters.result_source_moved, 0u) << "the old state stays out";
    EXPECT_EQ(next_state->counters.result_source_moved, 1u);
    // The root's first result on the resumed connection: copied onto rank 2's connection of
    // this AllReduce (generation 2), not the last one's.
    send(result(0, 0, rc::op::kWriteOnlyImm, kChunk, kChunk, kWorkerQpn[1] + 300,
                kRootPsn[1] + 3 * kNextRootPsn));
    EXPECT_EQ(to(kWorker1).size(), 1u);
    const auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2] + 200);
    EXPECT_EQ(copy[0].p.bth.psn, kRootPsn[2] + 2 * kNextRootPsn);
    EXPECT_EQ(job->counters.results_replicated, 2u) << "the last AllReduce's two, no more";
}

// A replicating state that left at a resume is over once its connections ended AND the root
// accepted a connection of its next AllReduce (which it serves one at a time: the last one's
// results are all acknowledged there), not at its idle timeout only: before that REP it may still
// owe the root aggregated ACKs (its workers' departures), after it nothing. (Fails without: the
// state stays leaving until 10 s pass without a CM packet on the root; in roce-vm-s2s-rejoin four
// such states outlived a reload and the running AllReduce's state, the fifth leaving one on the
// root, went unmatched.)
TEST_F(RoceS2sLearnReplicate, AStateOfAnEarlierAllReduceIsOverOnceTheRootAcceptedTheNext) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    rank2_resumed_then_the_allreduce_ended(cfg);
    advance_ms(1);
    EXPECT_FALSE(job->left.load()) << "every connection ended, but the root may wait for ACKs";
    reconnect(1, 2);  // the root accepts the next AllReduce's first connection
    advance_ms(1);
    EXPECT_TRUE(job->left.load()) << "that AllReduce is over at the root";
    EXPECT_EQ(job->counters.leave_ended_timeout, 0u);
    EXPECT_EQ(next_state->counters.connections_learned, 1u);
}

// A replicating job removed before its carrier ever connected owes the root nothing: it is over
// at once. (Fails without: it stays leaving until its idle timeout, refreshed by every CM
// packet on the root.)
TEST_F(RoceS2sLearnReplicate, ARemovedJobWhoseCarrierNeverConnectedIsOverAtOnce) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    auto& view = *static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    leave(view, cfg, *job, kSlot, 10000);
    advance_ms(1);
    EXPECT_TRUE(job->left.load());
    EXPECT_EQ(job->counters.leave_ended_timeout, 0u);
}

// A non-carrier rank resumes twice in one AllReduce with replicate: true: the state that left
// at its first resume makes its newest connection the copy target (at its REQ's root PSN, from
// the root's next carrier PSN on), and its ACKs there count in the root's ACK. (Fails without:
// the copies go on to the connection that ended.)
TEST_F(RoceS2sLearnReplicate, ARankResumingTwiceGetsTheCopiesOnItsNewestConnection) {
    config::LoadResult keep;
    const fs::JobConfig& cfg = job_config(yaml(), keep);
    const uint32_t first2 = kRootPsn[2] + 2 * kNextRootPsn;  // the root's PSN on the third
    rank2_resumed_after(4, cfg);
    send(result(4, 4));
    EXPECT_EQ(to(kWorker1).size(), 1u);
    auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2] + 100);
    send(result_reply(1, kRootPsn[1] + 4, 5));
    send(result_reply(2, kRootPsn[2] + kNextRootPsn, 1));
    EXPECT_EQ(acks_at_root().size(), 1u);
    // Rank 2 leaves its resumed connection (DREQ) and resumes again.
    send(dreq(2));
    send(req(2, 11, 2, true, 5));
    send(rep(2, 2, true, 5));
    drain();
    EXPECT_EQ(job->counters.result_legs_resumed, 2u);
    EXPECT_EQ(next_state->counters.result_legs_resumed, 0u);
    send(result(5, 5));
    EXPECT_EQ(to(kWorker1).size(), 1u);
    copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u) << "copied onto the newest connection";
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2] + 200);
    EXPECT_EQ(copy[0].p.bth.psn, first2);
    EXPECT_EQ(copy[0].p.reth.va, kResultAddr[2] + 5 * kChunk);
    EXPECT_TRUE(copy[0].icrc_ok);
    root_hears_k_once_rank2_acks(5, first2);
}

// A fill packet lost: rank 2 NAKs its gap; the switch sends the fill again from there and the
// root goes back to the first PSN of the resumed connection (rank 2 dropped its copies behind
// the gap). Unanswered, the fill goes again after the retry time, from what rank 2 acknowledged.
TEST_F(RoceS2sLearnReplicate, ALostFillIsSentAgainAndTheRootGoesBack) {
    const uint32_t first = kRootPsn[1] + kNextRootPsn;
    ASSERT_EQ(carrier_resumed_with_two_unacked().size(), 2u);
    send(resumed_result(0, 4));
    drain();
    send(result_reply(2, kRootPsn[2] + 2, 2, rc::aeth::kNakPsnSequence));
    auto again = to(kWorker2);  // (rank 2 and the root share a port: the NAK is a stray)
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].p.bth.psn, kRootPsn[2] + 2);
    EXPECT_EQ(again[1].p.bth.psn, kRootPsn[2] + 3);
    const auto naks = stray;
    stray.clear();
    ASSERT_EQ(naks.size(), 1u);
    EXPECT_EQ(naks[0].dst, kRoot);
    EXPECT_EQ(naks[0].p.aeth.syndrome, rc::aeth::kNakPsnSequence);
    EXPECT_EQ(naks[0].p.bth.psn, first) << "the root resends from the resumed connection's first";
    EXPECT_EQ(naks[0].p.bth.dest_qp, kRootQpn[1]);
    advance_ms(260);
    again = to(kWorker2);
    ASSERT_EQ(again.size(), 2u) << "sent again: nothing of it acknowledged";
    EXPECT_EQ(again[0].p.bth.psn, kRootPsn[2] + 2);
    send(result_reply(2, kRootPsn[2] + 3, 3));  // the fill's no-op at 3 executed: 3 messages
    advance_ms(260);
    EXPECT_TRUE(to(kWorker2).empty()) << "the fill is in";
    EXPECT_EQ(job->counters.result_fill_sent, 6u);
}


// A non-carrier rank resumes (its REP `resumed`) with replicate: true: its new connection is a
// copy target from the root's next carrier PSN on (at its REQ's root PSN: the new QP has
// received nothing, no fill), so the root writes it nothing itself; a retransmission of a
// result from before it existed is not copied to it, and its ACKs count in the root's ACK in
// the carrier's PSN and MSN space. (Fails without: the resumed connection gets no copy.)
TEST_F(RoceS2sLearnReplicate, AResumedRanksNewConnectionGetsTheCopies) {
    const uint32_t first = kRootPsn[2] + kNextRootPsn;  // the root's PSN on rank 2's new one
    connected_with_results(4);
    acks_burst(1, 0, 4, false);
    acks_burst(2, 0, 4, true);
    acks_at_root();
    EXPECT_TRUE(reconnect(2, 1, true, 4).empty()) << "no fill: the new QP expects `first`";
    EXPECT_EQ(job->counters.result_legs_resumed, 1u);
    send(result(4, 4));
    EXPECT_EQ(to(kWorker1).size(), 1u);
    auto copy = to(kWorker2);
    ASSERT_EQ(copy.size(), 1u);
    EXPECT_EQ(copy[0].p.bth.dest_qp, kWorkerQpn[2] + 100) << "the new connection's QP";
    EXPECT_EQ(copy[0].p.bth.psn, first);
    EXPECT_EQ(copy[0].p.reth.va, kResultAddr[2] + 4 * kChunk);
    EXPECT_TRUE(copy[0].icrc_ok);
    send(result(3, 3));  // a retransmission from before the new connection: rank 1's only
    EXPECT_EQ(to(kWorker1).size(), 1u);
    EXPECT_TRUE(to(kWorker2).empty());
    root_hears_k_once_rank2_acks(4, first);
}

}  // namespace
}  // namespace ina::test
