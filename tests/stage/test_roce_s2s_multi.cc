// SPDX-License-Identifier: Apache-2.0
// The RoCEv2 server-to-server mode across several switches (docs/rdma.md "Several switches"):
// switch pipelines chained in-process, each frame one switch sends fed to the next one's RX, as
// the links between them would. One lcore context and one snapshot (routing) serve every
// switch; each switch is its own job state (its own feature slot) and its own S2sView, put in
// the snapshot while that switch handles a frame. The root is 10.0.2.2 behind S0; S0 reaches
// the workers behind S1 through 10.0.1.2 (r0) and those behind S2 through 10.0.3.9 (r1), both
// listed in S0's rdma_s2s.switches. Asserted: S0 completes a chunk when the counts sum to the
// world (not when every learned connection contributed), one aggregate per chunk reaches the
// root with k = world and the exact sum, every worker gets exactly one copy of each result
// (each switch copies onto its local workers and one connection per downstream switch), and
// the root hears the least PSN every worker acknowledged.
#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "features/roce_s2s/compile_s2s.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/control_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"
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

constexpr uint32_t kRoot = 0x0A000202;  // 10.0.2.2 on r1, S0's own
constexpr uint32_t kViaS1 = 0x0A000102;  // 10.0.1.2 (r0): 192.168.5.0/24 behind it
constexpr uint32_t kViaS2 = 0x0A000309;  // 10.0.3.9 (r1): 172.20.0.0/16 behind it
constexpr uint32_t kJob = 12;
constexpr uint32_t kChunk = 64;  // 16 int32
constexpr uint32_t kWindow = 4;
constexpr uint16_t kFirstSlot = 10;

// The stage topology plus the route to S2's workers and S2's address as a learned neighbour.
std::string topology() {
    std::string y = kStageYaml;
    const std::string routes = "routes:\n";
    y.replace(y.find(routes), routes.size(),
              routes + "  - prefix: 172.20.0.0/16\n    via: 10.0.3.9\n");
    return y;
}

void register_once() { register_s2s_once(); }

Seen parse_frame(const Bytes& b) {
    Seen s;
    EXPECT_TRUE(parse_seen(b, s));
    return s;
}

// A tree: which switch (0 = S0, next to the root) each rank's worker sits behind, and each
// switch's rdma_s2s section.
struct Tree {
    std::vector<int> switch_of;  // by rank - 1
    bool replicate = false;
    bool static_s1 = false;  // S1's connections configured statically (no ranks: key)
    uint16_t world() const { return static_cast<uint16_t>(switch_of.size()); }
    int switches() const { return *std::max_element(switch_of.begin(), switch_of.end()) + 1; }
};

class RoceS2sMulti : public StageTest {
protected:
    // Per rank: addresses, QPNs and PSNs (rank r's connection, whichever switch it crosses).
    static uint32_t worker_ip(int rank, int sw) {
        const auto r = static_cast<uint32_t>(rank);
        return sw == 0 ? 0x0A000206 + r : sw == 1 ? 0xC0A80500 + r : 0xAC140000 + r;
    }
    uint32_t ip_of(int rank) const { return worker_ip(rank, tree.switch_of[rank - 1]); }
    static uint32_t worker_qpn(int rank) { return 16 + static_cast<uint32_t>(rank); }
    static uint32_t root_qpn(int rank) { return 0x40 + static_cast<uint32_t>(rank); }
    static uint32_t rep_psn(int rank) { return 1000 * static_cast<uint32_t>(rank); }   // worker's
    static uint32_t root_psn(int rank) { return 50000 + 7000 * static_cast<uint32_t>(rank); }
    static uint64_t area_va(int rank) { return 0x10000ull * static_cast<uint64_t>(rank); }
    static uint32_t area_rkey(int rank) { return 0x100 + static_cast<uint32_t>(rank); }
    static uint64_t result_addr(int rank) {
        return 0x7f0000000000ull + (static_cast<uint64_t>(rank) << 20);
    }
    static uint32_t result_rkey(int rank) { return 0xA0 + static_cast<uint32_t>(rank); }

    std::string ranks_of(int sw) const {
        std::string out;
        for (int r = 1; r <= tree.world(); ++r) {
            if (tree.switch_of[r - 1] == sw) {
                if (!out.empty()) {
                    out += ',';
                }
                out += std::to_string(r);
            }
        }
        return out;
    }
    std::string job_line(const std::string& extra) const {
        return "    - {id: 12, root: 10.0.2.2, world: " + std::to_string(tree.world()) +
               ", dtype: int32, chunk_bytes: 64, window: 4, timeout: 10, replicate: " +
               (tree.replicate ? "true" : "false") + extra + "}\n";
    }
    std::string yaml_of(int sw) const {
        std::string y = topology() + "rdma_s2s:\n";
        if (sw == 0) {
            y += "  switches: [10.0.1.2, 10.0.3.9]\n  jobs:\n" + job_line(", learn: true");
        } else if (sw == 1 && tree.static_s1) {
            std::string conns;
            for (int r = 1; r <= tree.world(); ++r) {
                if (tree.switch_of[r - 1] == 1) {
                    conns += std::string(conns.empty() ? "" : ", ") + "{rank: " +
                             std::to_string(r) + ", ip: " + net::Ipv4Addr{ip_of(r)}.str() +
                             ", qpn: " + std::to_string(worker_qpn(r)) +
                             ", root_qpn: " + std::to_string(root_qpn(r)) +
                             ", psn: " + std::to_string(rep_psn(r)) + "}";
                }
            }
            y += "  jobs:\n" + job_line(",\n       connections: [" + conns + "]");
        } else {
            y += "  jobs:\n" + job_line(", learn: true, ranks: \"" + ranks_of(sw) + "\"");
        }
        return y;
    }

    void start(const Tree& t) {
        register_once();
        tree = t;
        ctx->pool = pool;
        auto learned = stage_learned();
        learned.push_back(dp::DynamicNeighbour{kViaS2, kNbR1Host, kR1});
        for (int r = 1; r <= tree.world(); ++r) {
            if (tree.switch_of[r - 1] == 0 && ip_of(r) != 0x0A000207) {  // (that one is there)
                learned.push_back(dp::DynamicNeighbour{ip_of(r), kNbR1Host, kR1});
            }
        }
        build(yaml_of(0), learned);
        for (int sw = 0; sw < tree.switches(); ++sw) {
            std::string file = "s";
            file += std::to_string(sw);
            file += ".yaml";
            auto loaded = config::load_string(yaml_of(sw), file);
            ASSERT_TRUE(loaded.ok()) << loaded.error_text();
            const fs::S2sConfig* s2s = fs::s2s_of(*loaded.config);
            const auto slot = static_cast<uint16_t>(kFirstSlot + sw);
            states.push_back(std::make_unique<fs::JobState>(fs::job_params(s2s->jobs[0])));
            ASSERT_TRUE(pipeline::apply_command(
                *ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s, slot,
                                  fs::job_state_id(kJob), states.back().get()}));
            // What compile_s2s and control_s2s's decorate give the switch's snapshot.
            auto view = std::make_shared<fs::S2sView>();
            fs::append_job(*view, s2s->jobs[0], false, 0, slot);
            fs::sort_view(*view);
            view->switches = s2s->switches;
            views.push_back(view);
        }
    }
    void TearDown() override {
        for (size_t sw = 0; sw < states.size(); ++sw) {
            pipeline::apply_command(*ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s,
                                                      static_cast<uint16_t>(kFirstSlot + sw),
                                                      fs::job_state_id(kJob), nullptr});
        }
        snap->feature_views[fs::kFeatureS2s].reset();
        StageTest::TearDown();
    }
    fs::JobState& at(int sw) { return *states[static_cast<size_t>(sw)]; }

    // The links: a frame switch `sw` sent to `dst` goes on to the next switch toward it, or
    // reaches its endpoint (the root, or a worker behind `sw`).
    struct Hop {
        int sw;
        uint16_t port;
        Bytes frame;
    };
    int switch_for(uint32_t dst) const {
        for (int r = 1; r <= tree.world(); ++r) {
            if (ip_of(r) == dst) {
                return tree.switch_of[r - 1];
            }
        }
        return -1;
    }
    // Delivers `frame` into switch `sw` on `port`, then every frame the switches send in turn,
    // until nothing is in flight (one frame per burst).
    void inject(int sw, uint16_t port, const Bytes& frame) {
        std::deque<Hop> q{Hop{sw, port, frame}};
        while (!q.empty()) {
            Hop h = q.front();
            q.pop_front();
            snap->feature_views[fs::kFeatureS2s] = views[static_cast<size_t>(h.sw)];
            // The link delivers it to the next switch's port (its MAC, whoever it was for).
            std::memcpy(h.frame.data(), port_mac(h.port).addr_bytes, RTE_ETHER_ADDR_LEN);
            rte_mbuf* m = mbuf(h.frame, h.port);
            ASSERT_NE(m, nullptr);
            pipeline::process_burst(*ctx, *snap, &m, 1);
            for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
                for (rte_mbuf* out : take_tx(p)) {
                    Bytes b = bytes_of(out);
                    rte_pktmbuf_free(out);
                    const uint32_t dst = get32(b.data() + 14 + 16);
                    const int next = switch_for(dst);
                    if (dst == kRoot && h.sw == 0) {
                        at_root.push_back(parse_frame(b));
                    } else if (dst == kRoot) {
                        q.push_back(Hop{0, h.sw == 1 ? kR0 : kR1, b});  // up to S0
                    } else if (next == h.sw) {
                        at_worker[dst].push_back(parse_frame(b));
                    } else if (h.sw == 0 && next > 0) {
                        q.push_back(Hop{next, kR1, b});  // down to its switch
                    } else {
                        ADD_FAILURE() << "a frame to " << net::Ipv4Addr{dst}.str() << " from S"
                                      << h.sw << " that no link carries";
                    }
                }
            }
        }
    }
    template <typename Encode>
    Bytes frame(uint16_t port, Encode encode) {
        std::vector<uint8_t> buf(2048);
        const rte_ether_addr dst = port_mac(port);
        const size_t l2 = rc::write_ethernet(buf.data(), buf.size(), dst.addr_bytes,
                                             kNbR1Host.addr_bytes);
        buf.resize(l2 + encode(buf.data() + l2, buf.size() - l2));
        return buf;
    }
    // From rank's worker into its switch (on r0), or from the root into S0 (on r1).
    void from_worker(int rank, const std::function<size_t(uint8_t*, size_t)>& encode) {
        inject(tree.switch_of[rank - 1], kR0, frame(kR0, encode));
    }
    void from_root(const std::function<size_t(uint8_t*, size_t)>& encode) {
        inject(0, kR1, frame(kR1, encode));
    }
    void cm(uint32_t from, uint32_t to, const rc::cm::Message& msg, int rank) {
        rc::Ipv4Path path;
        path.src_ip = from;
        path.dst_ip = to;
        path.dest_qp = rc::cm::kCmQpn;
        auto enc = [&](uint8_t* out, size_t cap) {
            return rc::cm::encode_packet(out, cap, path, 1, 0, msg);
        };
        from == kRoot ? from_root(enc) : from_worker(rank, enc);
    }
    // Rank's REQ to the root and the root's REP, through every switch on the way.
    void connect(int rank) {
        rc::cm::Message req;
        req.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::req);
        req.header.transaction_id = 0x100 + static_cast<uint64_t>(rank);
        req.req.local_comm_id = 0x1000 + static_cast<uint32_t>(rank);
        req.req.service_id = rc::cm::service_id_for_tcp_port(7471);
        req.req.local_qpn = worker_qpn(rank);
        req.req.starting_psn = root_psn(rank);
        rc::cm::CmaHeader h;
        h.src = rc::cm::ipv4_gid(ip_of(rank));
        h.dst = rc::cm::ipv4_gid(kRoot);
        rc::cm::write_cma_header(req.req.private_data, h);
        ina::rdma::ConnectRequest c;
        c.mode = ina::rdma::Mode::server_to_server;
        c.elem_type = reduce::ElemType::int32;
        c.job_id = kJob;
        c.rank = static_cast<uint16_t>(rank);
        c.world = tree.world();
        c.chunk_bytes = kChunk;
        c.window = kWindow;
        c.result_addr = result_addr(rank);
        c.result_rkey = result_rkey(rank);
        const auto enc = c.encode();
        std::memcpy(req.req.private_data.data() + rc::cm::kCmaHeaderBytes, enc.data(), enc.size());
        cm(ip_of(rank), kRoot, req, rank);
        rc::cm::Message rep;
        rep.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::rep);
        rep.header.transaction_id = 0x100 + static_cast<uint64_t>(rank);
        rep.rep.local_comm_id = 0x2000 + static_cast<uint32_t>(rank);
        rep.rep.remote_comm_id = 0x1000 + static_cast<uint32_t>(rank);
        rep.rep.local_qpn = root_qpn(rank);
        rep.rep.starting_psn = rep_psn(rank);
        ina::rdma::ConnectReply r;
        r.job_id = kJob;
        r.contribution_addr = area_va(rank);
        r.contribution_rkey = area_rkey(rank);
        const auto renc = r.encode();
        std::memcpy(rep.rep.private_data.data(), renc.data(), renc.size());
        cm(kRoot, ip_of(rank), rep, rank);
    }
    // Rank's DREQ to the root (it names the root's QPN): the worker leaves.
    void disconnect(int rank) {
        rc::cm::Message msg;
        msg.header.attr_id = static_cast<uint16_t>(rc::cm::Attr::dreq);
        msg.dreq.local_comm_id = 0x1000 + static_cast<uint32_t>(rank);
        msg.dreq.remote_comm_id = 0x2000 + static_cast<uint32_t>(rank);
        msg.dreq.remote_qpn = root_qpn(rank);
        cm(ip_of(rank), kRoot, msg, rank);
    }
    void connect_all() {
        for (int r = 1; r <= tree.world(); ++r) {
            connect(r);
        }
        at_root.clear();  // the CM packets, passed untouched
        at_worker.clear();
    }
    static std::vector<int32_t> values(int rank, uint32_t c) {
        std::vector<int32_t> v(kChunk / 4);
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = 1000 * rank + 10 * static_cast<int32_t>(c) + static_cast<int32_t>(i);
        }
        return v;
    }
    // Rank's WRITE_ONLY_WITH_IMM of chunk c (its PSN offset c) toward the root, counting k.
    void contribute(int rank, uint32_t c, uint32_t k = 1) {
        rc::Ipv4Path path;
        path.src_ip = ip_of(rank);
        path.dst_ip = kRoot;
        path.dest_qp = root_qpn(rank);
        path.src_port = static_cast<uint16_t>(0xC000 + rank);
        const std::vector<int32_t> v = values(rank, c);
        rc::Transmit tx;
        tx.opcode = rc::op::kWriteOnlyImm;
        tx.psn = rep_psn(rank) + c;
        tx.ack_req = true;
        tx.has_reth = true;
        tx.length = kChunk;
        tx.reth = {area_va(rank) + (c % kWindow) * kChunk, area_rkey(rank), kChunk};
        tx.has_imm = true;
        tx.imm = c << 8 | k;
        from_worker(rank, [&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx,
                                    reinterpret_cast<const uint8_t*>(v.data()));
        });
    }
    // The root's result WRITE packet k (chunk c) on rank 1's connection, the carrier.
    std::vector<int32_t> result(uint32_t k, uint32_t c) {
        rc::Ipv4Path path;
        path.src_ip = kRoot;
        path.dst_ip = ip_of(1);
        path.dest_qp = worker_qpn(1);
        path.src_port = 0xC0DE;
        std::vector<int32_t> v(kChunk / 4, static_cast<int32_t>(7000 + 100 * k + c));
        rc::Transmit tx;
        tx.opcode = rc::op::kWriteOnlyImm;
        tx.psn = root_psn(1) + k;
        tx.ack_req = true;
        tx.has_reth = true;
        tx.length = kChunk;
        tx.reth = {result_addr(1) + c * kChunk, result_rkey(1), kChunk};
        tx.has_imm = true;
        tx.imm = c << 8 | tree.world();
        from_root([&](uint8_t* out, size_t cap) {
            return rc::encode_write(out, cap, path, 1, tx,
                                    reinterpret_cast<const uint8_t*>(v.data()));
        });
        return v;
    }
    // Rank's worker acknowledges its result leg up to packet k (its own PSN space).
    void result_ack(int rank, uint32_t k) {
        rc::Ipv4Path path;
        path.src_ip = ip_of(rank);
        path.dst_ip = kRoot;
        path.dest_qp = root_qpn(rank);
        from_worker(rank, [&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, path, 1,
                                  rc::Reply{rc::aeth::kAckUnlimited, root_psn(rank) + k, k + 1});
        });
    }
    // The root acknowledges the aggregates on rank 1's connection up to PSN offset c.
    void root_ack(uint32_t c) {
        rc::Ipv4Path path;
        path.src_ip = kRoot;
        path.dst_ip = ip_of(1);
        path.dest_qp = worker_qpn(1);
        from_root([&](uint8_t* out, size_t cap) {
            return rc::encode_ack(out, cap, path, 1,
                                  rc::Reply{rc::aeth::kAckUnlimited, rep_psn(1) + c, c + 1});
        });
    }
    // Every rank contributes chunk c; the one frame the root got.
    Seen all_contribute(uint32_t c) {
        at_root.clear();
        for (int r = 1; r <= tree.world(); ++r) {
            contribute(r, c);
        }
        EXPECT_EQ(at_root.size(), 1u) << "ONE aggregate per chunk reaches the root";
        return at_root.empty() ? Seen{} : at_root.front();
    }
    void expect_aggregate(const Seen& w, uint32_t c) {
        EXPECT_EQ(w.src, ip_of(1)) << "on the carrier, rank 1's connection";
        EXPECT_EQ(w.p.bth.opcode, rc::op::kWriteOnlyImm);
        EXPECT_EQ(w.p.bth.dest_qp, root_qpn(1));
        EXPECT_EQ(w.p.bth.psn, rep_psn(1) + c) << "the carrier's root-side PSN";
        EXPECT_EQ(w.p.reth.va, area_va(1) + (c % kWindow) * kChunk);
        EXPECT_EQ(w.p.imm, c << 8 | tree.world()) << "k = every rank, counted through the tree";
        EXPECT_TRUE(w.icrc_ok);
        ASSERT_EQ(w.payload.size(), kChunk);
        std::vector<int32_t> sum(kChunk / 4, 0);
        for (int r = 1; r <= tree.world(); ++r) {
            const auto v = values(r, c);
            for (size_t i = 0; i < sum.size(); ++i) {
                sum[i] += v[i];
            }
        }
        std::vector<int32_t> got(kChunk / 4);
        std::memcpy(got.data(), w.payload.data(), kChunk);
        EXPECT_EQ(got, sum);
    }

    Tree tree;
    std::vector<std::unique_ptr<fs::JobState>> states;
    std::vector<std::shared_ptr<void>> views;
    std::vector<Seen> at_root;
    std::map<uint32_t, std::vector<Seen>> at_worker;
};

// S1 (static connections of ranks 2 and 3, as a switch with one job would be configured)
// absorbs its ranks' WRITEs and sends one aggregate of k = 2 on rank 2's connection. S0 learned
// all three connections from the CM exchange but sees nothing on rank 3's: it completes the
// chunk when the counts sum to the world. Without count completion S0 waits for rank 3 forever
// (no aggregate reaches the root).
TEST_F(RoceS2sMulti, UpstreamSwitchCompletesByCountNotByEveryLearnedConnection) {
    start(Tree{{0, 1, 1}, false, true});
    connect_all();
    EXPECT_EQ(at(0).counters.connections_learned, 3u) << "S0 sees every CM exchange";
    for (uint32_t c = 0; c < 3; ++c) {
        const Seen w = all_contribute(c);
        expect_aggregate(w, c);
    }
    EXPECT_EQ(at(0).counters.completed_by_count, 3u);
    EXPECT_EQ(at(0).counters.absorbed, 6u) << "rank 1's WRITEs and S1's aggregates";
    EXPECT_EQ(at(1).counters.aggregates_sent, 3u);
    EXPECT_EQ(at(1).counters.aggregates_acked, 3u) << "S0 ACKed S1's aggregates as the root";
    for (int r = 1; r <= 3; ++r) {
        const auto& acks = at_worker[ip_of(r)];
        ASSERT_EQ(acks.size(), 3u) << "rank " << r << ": one ACK per WRITE, as the root";
        EXPECT_EQ(acks.back().src, kRoot);
        EXPECT_EQ(acks.back().p.bth.psn, rep_psn(r) + 2);
        EXPECT_EQ(acks.back().p.bth.dest_qp, worker_qpn(r));
    }
    root_ack(2);
    EXPECT_EQ(at(0).table.in_use(), 0u) << "the root's ACK released S0's slots";
    EXPECT_EQ(at(0).counters.aggregates_acked, 3u);
}

// Both switches learn (S1 with ranks: "2,3"): the same, and a contribution counted twice (a
// downstream switch claiming a rank the upstream one also gets directly) is refused, not sent.
TEST_F(RoceS2sMulti, LearnedDownstreamSwitchAggregatesItsRanks) {
    start(Tree{{0, 1, 1}, false, false});
    connect_all();
    EXPECT_EQ(at(0).counters.connections_learned, 3u);
    EXPECT_EQ(at(1).counters.connections_learned, 2u) << "S1 sees its ranks' exchanges only";
    EXPECT_EQ(at(1).params.n_conns, 2u);
    EXPECT_EQ(at(0).conns[1].branch, kViaS1);
    EXPECT_FALSE(at(0).conns[1].behind_switch) << "rank 2: the branch carrier";
    EXPECT_TRUE(at(0).conns[2].behind_switch) << "rank 3: S1 answers for it";
    EXPECT_EQ(at(0).conns[0].branch, 0u) << "rank 1 is S0's own";
    for (uint32_t c = 0; c < 5; ++c) {  // past the window: slots released and reused
        expect_aggregate(all_contribute(c), c);
        root_ack(c);
    }
    EXPECT_EQ(at(0).counters.completed_by_count, 5u);
    EXPECT_EQ(at(1).counters.completed_by_count, 0u) << "S1 completes by its ranks' bits";
    EXPECT_EQ(at(0).table.in_use(), 0u);
    EXPECT_EQ(at(1).table.in_use(), 0u);
    // Rank 1 contributes chunk 5 with a count of 4: more than the world.
    at_root.clear();
    contribute(1, 5, 4);
    EXPECT_EQ(at(0).counters.count_beyond, 1u);
    EXPECT_EQ(at(0).table.in_use(), 0u) << "not added";
    EXPECT_TRUE(at_root.empty());
}

// replicate: true on both: the root writes each result once on rank 1's connection; S0 passes
// it to rank 1 and copies it onto rank 2's connection only (S1's branch carrier), S1 copies it
// onto rank 3. Every worker gets exactly one copy of each result in its own PSN space and
// buffer; the root hears the least every worker acknowledged, S1's ranks through S1's one ACK.
TEST_F(RoceS2sMulti, OneCopyPerBranchAndTheRootHearsTheLeastAck) {
    start(Tree{{0, 1, 1}, true, false});
    connect_all();
    std::vector<std::vector<int32_t>> sent;
    for (uint32_t k = 0; k < 3; ++k) {
        sent.push_back(result(k, k));
    }
    EXPECT_TRUE(at_root.empty());
    for (int r = 1; r <= 3; ++r) {
        const auto& got = at_worker[ip_of(r)];
        ASSERT_EQ(got.size(), 3u) << "rank " << r << ": exactly one copy of each result";
        for (uint32_t k = 0; k < 3; ++k) {
            const Seen& s = got[k];
            EXPECT_EQ(s.src, kRoot);
            EXPECT_EQ(s.p.bth.opcode, rc::op::kWriteOnlyImm);
            EXPECT_EQ(s.p.bth.dest_qp, worker_qpn(r));
            EXPECT_EQ(s.p.bth.psn, root_psn(r) + k) << "rank " << r << "'s own result leg";
            EXPECT_EQ(s.p.reth.va, result_addr(r) + k * kChunk);
            EXPECT_EQ(s.p.reth.rkey, result_rkey(r));
            EXPECT_EQ(s.p.imm, k << 8 | 3);
            EXPECT_TRUE(s.icrc_ok);
            std::vector<int32_t> v(kChunk / 4);
            ASSERT_EQ(s.payload.size(), kChunk);
            std::memcpy(v.data(), s.payload.data(), kChunk);
            EXPECT_EQ(v, sent[k]);
        }
    }
    EXPECT_EQ(at(0).counters.results_replicated, 3u) << "one copy per result: rank 2's";
    EXPECT_EQ(at(1).counters.results_replicated, 3u) << "S1: rank 3's";
    at_worker.clear();
    // Ranks 1 and 2 have everything, rank 3 only the first result.
    result_ack(1, 2);
    result_ack(2, 2);
    EXPECT_TRUE(at_root.empty()) << "S0 waits for S1's branch";
    result_ack(3, 0);
    ASSERT_EQ(at_root.size(), 1u);
    EXPECT_EQ(at_root[0].src, ip_of(1)) << "on the carrier, as its worker";
    EXPECT_EQ(at_root[0].p.bth.opcode, rc::op::kAcknowledge);
    EXPECT_EQ(at_root[0].p.bth.dest_qp, root_qpn(1));
    EXPECT_EQ(at_root[0].p.bth.psn, root_psn(1) + 0) << "the least: rank 3's";
    EXPECT_TRUE(at_root[0].icrc_ok);
    result_ack(3, 2);
    ASSERT_EQ(at_root.size(), 2u);
    EXPECT_EQ(at_root[1].p.bth.psn, root_psn(1) + 2);
    EXPECT_EQ(at(1).counters.result_acks_consumed, 3u) << "ranks 2 and 3's, at S1";
    EXPECT_EQ(at(0).counters.result_acks_consumed, 1u + 2u) << "rank 1's and S1's two";
    EXPECT_TRUE(at_worker.empty()) << "no ACK reaches a worker";
}

// The departure rule per branch: S1's branch carrier (rank 2) leaves holding every result, rank
// 3 behind it has acknowledged only the first: S0 tells the root no more than rank 3 has (S1's
// ACKs on rank 2's ended connection), and everything once rank 3 left too. Without the branch
// rule S0 took rank 2's DREQ for its whole branch's and acknowledged every result at once.
TEST_F(RoceS2sMulti, ABranchCarrierLeavingAcknowledgesNothingForItsBranch) {
    start(Tree{{0, 1, 1}, true, false});
    connect_all();
    for (uint32_t k = 0; k < 3; ++k) {
        result(k, k);
    }
    result_ack(1, 2);
    result_ack(2, 2);
    disconnect(2);
    result_ack(3, 0);
    ASSERT_FALSE(at_root.empty());
    EXPECT_EQ(at_root.back().p.bth.psn, root_psn(1) + 0) << "no further than rank 3";
    for (const Seen& a : at_root) {
        if (a.p.bth.opcode == rc::op::kAcknowledge) {
            EXPECT_EQ(a.p.bth.psn, root_psn(1) + 0) << "never past rank 3";
        }
    }
    at_root.clear();
    result_ack(3, 2);
    ASSERT_EQ(at_root.size(), 1u);
    EXPECT_EQ(at_root[0].p.bth.psn, root_psn(1) + 2);
    at_root.clear();
    disconnect(1);
    disconnect(3);
    EXPECT_EQ(at(0).counters.departure_acks, 0u) << "every worker acknowledged before leaving";
}

// Three switches: S0 next to the root with no worker of its own, S1 with ranks 1-2 (so the
// root's carrier is behind a switch), S2 with ranks 3-4. Aggregation by count (2 + 2), one
// copy per branch (S0 copies onto rank 3 only), the least ACK of all four.
TEST_F(RoceS2sMulti, TwoDownstreamSwitches) {
    start(Tree{{1, 1, 2, 2}, true, false});
    connect_all();
    EXPECT_EQ(at(0).conns[0].branch, kViaS1);
    EXPECT_EQ(at(0).conns[2].branch, kViaS2);
    EXPECT_TRUE(at(0).conns[1].behind_switch);
    EXPECT_FALSE(at(0).conns[2].behind_switch);
    EXPECT_TRUE(at(0).conns[3].behind_switch);
    for (uint32_t c = 0; c < 2; ++c) {
        expect_aggregate(all_contribute(c), c);
    }
    EXPECT_EQ(at(0).counters.completed_by_count, 2u);
    EXPECT_EQ(at(0).counters.absorbed, 4u) << "two aggregates per chunk, one per branch";
    at_worker.clear();
    result(0, 0);
    result(1, 1);
    for (int r = 1; r <= 4; ++r) {
        const auto& got = at_worker[ip_of(r)];
        ASSERT_EQ(got.size(), 2u) << "rank " << r << ": one copy of each result";
        EXPECT_EQ(got[1].p.bth.psn, root_psn(r) + 1);
        EXPECT_EQ(got[1].p.reth.va, result_addr(r) + kChunk);
        EXPECT_TRUE(got[1].icrc_ok);
    }
    EXPECT_EQ(at(0).counters.results_replicated, 2u) << "rank 3's (S2's carrier) only";
    at_worker.clear();
    at_root.clear();
    result_ack(1, 1);
    result_ack(2, 1);
    result_ack(3, 1);
    EXPECT_TRUE(at_root.empty()) << "rank 4 has acknowledged nothing";
    result_ack(4, 0);
    ASSERT_EQ(at_root.size(), 1u);
    EXPECT_EQ(at_root[0].p.bth.psn, root_psn(1) + 0);
    result_ack(4, 1);
    ASSERT_EQ(at_root.size(), 2u);
    EXPECT_EQ(at_root[1].p.bth.psn, root_psn(1) + 1);
}

TEST(RoceS2sMultiConfig, ErrorsNameTheirPlace) {
    register_once();
    const std::string base = topology() + "rdma_s2s:\n";
    // "t.yaml:line:col:" of the first `text` in `y`.
    const auto where = [](const std::string& y, const std::string& text) {
        const size_t at = y.find(text);
        const std::string head = y.substr(0, at);
        const size_t line_start = head.rfind('\n') + 1;
        return "t.yaml:" + std::to_string(std::count(head.begin(), head.end(), '\n') + 1) + ":" +
               std::to_string(at - line_start + 1) + ":";
    };
    const auto refused = [&](const std::string& y, const std::string& at, const std::string& why) {
        const auto r = config::load_string(y, "t.yaml");
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.error_text().find(where(y, at)), std::string::npos) << r.error_text();
        EXPECT_NE(r.error_text().find(why), std::string::npos) << r.error_text();
    };
    refused(base + "  switches: [10.0.1.2, 10.0.9.9]\n  jobs: []\n", "10.0.9.9",
            "10.0.9.9 is on no port's subnet");
    refused(base + "  switches: [10.0.1.1]\n", "10.0.1.1]", "this switch's own address");
    refused(base + "  switches: [10.0.1.2, 10.0.1.2]\n", "10.0.1.2]", "10.0.1.2 twice");
    refused(base + "  switches: [not-an-ip]\n", "not-an-ip", "IPv4 address");
    refused(base + "  jobs:\n    - {id: 3, root: 10.0.2.2, world: 2, ranks: \"1-3\", learn: true}\n",
            "\"1-3\"", "rank 3 is above the world (2)");
    refused(base + "  jobs:\n    - {id: 3, root: 10.0.2.2, world: 2, ranks: \"2\",\n"
                   "       connections: [{rank: 2, ip: 10.0.1.2, qpn: 17, root_qpn: 64}]}\n",
            "\"2\"", "ranks are read only with learn: true");
    refused(base + "  jobs:\n    - {id: 3, root: 10.0.2.2, world: 2, ranks: \"0-1\", learn: true}\n",
            "\"0-1\"", "ranks");
    // A good one: S1's section, and what the switch makes of it.
    const std::string y = base + "  switches: [10.0.2.50]\n  jobs:\n"
                                 "    - {id: 3, root: 10.0.2.2, world: 4, ranks: \"2-3\", learn: true}\n";
    const auto r = config::load_string(y, "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const fs::S2sConfig* s2s = fs::s2s_of(*r.config);
    ASSERT_NE(s2s, nullptr);
    EXPECT_EQ(s2s->jobs[0].ranks, (std::vector<uint16_t>{2, 3}));
    ASSERT_EQ(s2s->switches.size(), 1u);
    const fs::JobParams p = fs::job_params(s2s->jobs[0]);
    EXPECT_EQ(p.n_conns, 2u);
    EXPECT_EQ(p.conns[0].rank, 2u) << "the lowest rank through the switch is its carrier";
    EXPECT_TRUE(p.count_complete);
    // The section as GET /api/v1/config shows it reads back to the same (a PUT of the running
    // config): the ranks as written, the switches as addresses.
    const auto json = config::sections_json(*r.config);
    ASSERT_EQ(json.size(), 1u);
    const auto back = config::load_string(topology() + "rdma_s2s: " + json[0].second + "\n",
                                          "back.yaml");
    ASSERT_TRUE(back.ok()) << back.error_text() << json[0].second;
    EXPECT_EQ(fs::s2s_of(*back.config)->jobs[0].ranks, s2s->jobs[0].ranks);
    EXPECT_EQ(fs::s2s_of(*back.config)->switches, s2s->switches);
}

}  // namespace
}  // namespace ina::test
