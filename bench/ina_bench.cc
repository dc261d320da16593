// SPDX-License-Identifier: Apache-2.0
// INA aggregation rate of one or two lcores: an in-process generator builds N workers'
// contributions (chunk after chunk, so sequence numbers never repeat) into mbufs and runs them
// through the real pipeline (process_burst: eth_input, ina_input with its chunk table and SIMD
// kernels, ipv4_forward, port_tx). Completed chunks leave as partial results to the parent
// through port_tx to a net_null port (the sink, as testpmd's). Prints one JSON line: `mpps` per
// wall-clock second and (INA and --l3) `cpu_mpps` per second of the lanes' own CPU time, the
// figure to A/B two builds with on a machine others load (bench/notes.md, ina-rate).
//
// With --lcores 2 each lcore has its own context and chunk table, as in the switch:
//   --steer chunk    each lcore's generator produces whole chunks it owns (seq % 2 == lcore):
//                    the ideal, what RSS on a per-chunk UDP source port would deliver;
//   --steer handoff  each lcore's generator produces half of the workers' contributions for
//                    every chunk (what RSS on the workers' addresses delivers): contributions
//                    to chunks the other lcore owns cross an SPSC hand-off ring, as in
//                    ina_input's chunk steering (the owner takes them through process_handoff,
//                    as the worker loop does);
//   --one-thread     both lanes on the calling thread, a burst of each in turn: cpu_mpps is one
//                    CPU doing both lanes' work (the hand-off's cost in instructions and cycles,
//                    its cross-core cache transfers aside), which a loaded machine cannot spoil.
//
// --input picks what the switch's lcore finds in memory:
//   cpu   (default) the generator writes each frame whole on the lcore that receives it, so the
//         payload is in that core's L1/L2 (and crosses to the owner on a hand-off);
//   nic   as a NIC's DMA leaves frames: each lane allocates from its own ring of mbufs
//         (--input-mib, cycled FIFO: beyond L2, inside the LLC) whose payloads were written
//         before the run; per packet only the headers are written. No core holds a payload in
//         its private caches, the receiver included. With --roce (one packet per chunk) every
//         contribution carries the same payload, so the headers and the 4-byte ICRC (the ring
//         frame's: valid for that payload) are what is written per packet.
//
// With --roce the same generator skeleton drives the RoCEv2 server-to-switch stage instead
// (src/features/roce, registered as the switch registers it): 8 ranks with static QPs from an
// `rdma:` config, each contribution a WRITE_ONLY_WITH_IMM with a valid ICRC copied from a ring
// of frames built ahead (outside the measured time), and the workers' ACKs of the switch's
// result WRITEs (built outside the measured time, processed inside it) so slots release.
//
// --role picks the job's place in the aggregation tree, on either path:
//   aggregator  (default) 8 contributions in, ONE partial per chunk out to the parent. INA: the
//               result never comes back through this lcore in the bench (results pass an INA
//               aggregator as BIER copies, not measured here). RoCE (`role: aggregator`): the
//               partial goes to the parent 10.0.2.2 and the generator answers each with the
//               parent's INA result (built ahead, alloc + copy + processing measured), which
//               the switch writes to the 8 ranks (8 WRITEs with ICRC) and the ranks ACK: the
//               RoCE row includes the way down, the INA row does not; `up_mpps` times the
//               way up alone (contributions in, partials out), INA's row's work.
//   root        8 contributions in, the result out to every worker: INA `results: unicast` (8
//               copies), RoCE a root job (8 result WRITEs with ICRC, ACKed).
#include <rte_cycles.h>
#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_malloc.h>
#include <rte_mbuf.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>
#include <rte_udp.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "app/feature_registry.h"
#include "bench/roce_frames.h"
#include "compile/snapshot_build.h"
#include "config/config.h"
#include "dataplane/snapshot.h"
#include "features/roce/config_roce.h"
#include "features/roce/control_roce.h"
#include "features/roce/datapath_roce.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/control_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"
#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "bench/frames.h"
#include "net/checksum.h"
#include "pipeline/context.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "pipeline/port_tx.h"
#include "reduce/fixed_point.h"
#include "reduce/reduce.h"
#include "roce/icrc.h"

// Under `valgrind --tool=callgrind --collect-atstart=no`, --roce collects instructions inside the
// way-up bursts alone (the contributions' process_burst): the instructions per contribution of
// the figure the goal compares (docs/performance.md). Outside valgrind the requests are a few
// no-op instructions per burst; without valgrind's header they are nothing.
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define INA_BENCH_COLLECT_WAY_UP() CALLGRIND_TOGGLE_COLLECT
#else
#define INA_BENCH_COLLECT_WAY_UP() \
    do {                           \
    } while (0)
#endif

namespace {

using namespace ina;

constexpr uint16_t kBurst = 32;
constexpr uint16_t kSinkPort = 1;

// One lcore's share of the run.
struct Lane {
    unsigned index = 0;
    pipeline::LcoreContext* ctx = nullptr;
    std::unique_ptr<ChunkTable> table;
    rte_mempool* pool = nullptr;  // where its frames come from: g.pool, or its own (--input nic)
    rte_ring* in = nullptr;  // hand-off ring into this lane (handoff mode)
    // What this lane's generator produces: (worker, seq) pairs in order.
    std::vector<uint16_t> my_workers;  // indices into templates
    uint32_t seq_first = 0;
    uint32_t seq_step = 1;
    uint64_t packets = 0;
    uint64_t cpu_ns = 0;  // the lane thread's own CPU time over the measured loop
    bool failed = false;
};

// The calling thread's CPU time (ns): what the kernel gave it, not the wall clock. On this shared
// 2-vCPU machine a busy-polling lane is switched out for whole scheduler slices, which divide the
// wall-clock rate by the load; the rate per CPU second does not move with it (the VM's steal
// time aside), so A/B runs of two builds compare code, not the neighbours' builds.
uint64_t thread_cpu_ns() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<uint64_t>(t.tv_sec) * 1000000000u + static_cast<uint64_t>(t.tv_nsec);
}

struct Shared {
    const dp::Snapshot* snap = nullptr;
    rte_mempool* pool = nullptr;
    const std::vector<std::vector<uint8_t>>* templates = nullptr;
    size_t seq_off = 0;
    // The templates carry a UDP checksum: the sequence number's rewrite updates it (RFC 1624).
    bool udp_checksum = false;
    // The generator alone: each burst is freed where the switch would take it (the share of a
    // contribution's time that is the input's, not the switch's).
    bool generator_only = false;
    // --input nic: the bytes of a template the generator writes per packet (its headers, up to
    // the payload); 0 writes it whole (--input cpu).
    size_t header_bytes = 0;
    unsigned input_mib = 4;  // --input nic: each lane's pool (its "RX ring") in MiB
    uint64_t end_tsc = 0;
    std::atomic<unsigned> ready{0};
    std::atomic<bool> go{false};
    unsigned lanes = 1;
    std::vector<Lane>* all = nullptr;
    // Handoff mode: each lane's next seq. Real workers never run more than their window ahead
    // of the slowest contributor; the lanes keep the same bound, or the faster one would fill
    // its table with chunks whose other half has not arrived (and fall back). A line each, and
    // the other's read only near the bound: the switch shares no line between its lcores but
    // the hand-off rings', and neither may the bench's pacing (one shared line written by both
    // lanes every burst cost the hand-off up to a third of its rate when the VM's two vCPUs sat
    // far apart, bench/notes.md session 17).
    struct alignas(64) Progress {
        std::atomic<uint32_t> seq{0};
    };
    std::array<Progress, 2> progress{};
};

constexpr uint32_t kLockstep = 256;  // chunks one lane may run ahead of the other

Shared g;

// One burst of this lane's contributions, (worker, seq) pairs in order from (wi, seq); false when
// the mempool is exhausted.
[[gnu::always_inline]] inline bool generate(Lane& lane, rte_mbuf** burst, uint32_t& seq,
                                            size_t& wi) {
    const auto& templates = *g.templates;
    if (rte_pktmbuf_alloc_bulk(lane.pool, burst, kBurst) != 0) {
        std::fprintf(stderr, "mempool exhausted\n");
        lane.failed = true;
        return false;
    }
    for (uint16_t b = 0; b < kBurst; ++b) {
        rte_mbuf* m = burst[b];
        const auto& t = templates[lane.my_workers[wi]];
        auto* d = rte_pktmbuf_mtod(m, uint8_t*);
        std::memcpy(d, t.data(), g.header_bytes != 0 ? g.header_bytes : t.size());
        if (g.seq_off != 0) {
            const uint32_t be = rte_cpu_to_be_32(seq);
            std::memcpy(d + g.seq_off, &be, 4);
            if (g.udp_checksum) {
                // The template's sequence field is 0.
                auto* udp = reinterpret_cast<rte_udp_hdr*>(d + 14 + 20);
                udp->dgram_cksum = net::udp_checksum_field(static_cast<uint16_t>(
                    ~net::checksum_update32(udp->dgram_cksum, 0, be)));
            }
        }
        m->data_len = static_cast<uint16_t>(t.size());
        m->pkt_len = static_cast<uint32_t>(t.size());
        m->port = 0;
        if (++wi == lane.my_workers.size()) {
            wi = 0;
            seq += lane.seq_step;
        }
    }
    return true;
}

// --one-thread: both lanes' work on the calling thread, a burst of each in turn, then each
// lane's hand-offs. Its cpu_mpps is the rate of ONE CPU doing both lanes' work, free of the
// scheduler on a shared machine (where two busy lanes in lockstep mostly wait for each other):
// 2 x it / the one-lane cpu_mpps bounds the 2-lcore speedup, all but the cross-core cache
// transfers (the handed mbufs' lines) counted.
[[gnu::flatten]] void run_serial(std::vector<Lane>& all) {
    rte_mbuf* burst[kBurst];
    rte_mbuf* handed[pipeline::kMaxBurst];
    std::vector<uint32_t> seq;
    std::vector<size_t> wi(all.size(), 0);
    for (const Lane& lane : all) {
        seq.push_back(lane.seq_first);
    }
    const auto take_handoffs = [&](Lane& lane) {
        const uint16_t n = static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
            lane.in, reinterpret_cast<void**>(handed), pipeline::kMaxBurst, nullptr));
        if (n != 0) {
            pipeline::process_handoff(*lane.ctx, *g.snap, handed, n);
        }
    };
    uint64_t now = rte_rdtsc();
    const uint64_t cpu_start = thread_cpu_ns();
    while (now < g.end_tsc) {
        for (size_t k = 0; k < all.size(); ++k) {
            if (!generate(all[k], burst, seq[k], wi[k])) {
                return;
            }
            now = rte_rdtsc();
            all[k].ctx->now_tsc = now;
            pipeline::process_burst(*all[k].ctx, *g.snap, burst, kBurst);
            all[k].packets += kBurst;
        }
        for (Lane& lane : all) {
            if (lane.in != nullptr) {
                take_handoffs(lane);
            }
        }
    }
    for (Lane& lane : all) {
        if (lane.in != nullptr) {
            take_handoffs(lane);
        }
    }
    all[0].cpu_ns = thread_cpu_ns() - cpu_start;  // the busiest "lane": all of the work
    for (Lane& lane : all) {
        pipeline::tx_flush_all(*lane.ctx);
    }
}

// Flattened: the generator's mbuf allocation (rte_pktmbuf_alloc_bulk and its per-mbuf reset) is
// inlined here, as it was before the RoCE and checksum modes grew this file and GCC outlined it
// (+18 instructions per packet in the generator, which the rate includes).
[[gnu::flatten]] int run_lane(void* arg) {
    Lane& lane = *static_cast<Lane*>(arg);
    auto& ctx = *lane.ctx;
    rte_mbuf* burst[kBurst];
    rte_mbuf* handed[pipeline::kMaxBurst];
    uint32_t seq = lane.seq_first;
    uint32_t other = 0;  // the other lane's progress when last read
    size_t wi = 0;
    g.ready.fetch_add(1);
    while (!g.go.load(std::memory_order_acquire)) {
    }
    uint64_t now = rte_rdtsc();
    const uint64_t cpu_start = thread_cpu_ns();
    while (now < g.end_tsc) {
        if (lane.in != nullptr) {
            g.progress[lane.index].seq.store(seq, std::memory_order_relaxed);
            if (static_cast<int32_t>(seq - other) > static_cast<int32_t>(kLockstep)) {
                other = g.progress[1 - lane.index].seq.load(std::memory_order_relaxed);
            }
            if (static_cast<int32_t>(seq - other) > static_cast<int32_t>(kLockstep)) {
                const uint16_t n = static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
                    lane.in, reinterpret_cast<void**>(handed), kBurst, nullptr));
                if (n != 0) {
                    pipeline::process_handoff(ctx, *g.snap, handed, n);
                }
                now = rte_rdtsc();
                continue;
            }
        }
        if (!generate(lane, burst, seq, wi)) {
            break;
        }
        now = rte_rdtsc();
        ctx.now_tsc = now;
        if (g.generator_only) {
            rte_pktmbuf_free_bulk(burst, kBurst);
        } else {
            pipeline::process_burst(ctx, *g.snap, burst, kBurst);
        }
        lane.packets += kBurst;
        if (lane.in != nullptr) {
            const uint16_t n = static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
                lane.in, reinterpret_cast<void**>(handed), kBurst, nullptr));
            if (n != 0) {
                pipeline::process_handoff(ctx, *g.snap, handed, n);
            }
        }
    }
    // Drain what the other lane handed over before it stopped.
    if (lane.in != nullptr) {
        g.progress[lane.index].seq.store(UINT32_MAX / 2, std::memory_order_relaxed);
        for (int spins = 0; spins < 1000; ++spins) {
            const uint16_t n = static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
                lane.in, reinterpret_cast<void**>(handed), kBurst, nullptr));
            if (n != 0) {
                pipeline::process_handoff(ctx, *g.snap, handed, n);
            }
        }
    }
    lane.cpu_ns = thread_cpu_ns() - cpu_start;
    pipeline::tx_flush_all(ctx);
    return 0;
}

// --input nic: a lane's own pool, as a NIC queue's RX ring: its buffers are written by the device
// (into memory, or the LLC with DDIO), not by the core that polls it, and the ring cycles
// through all of them. So: no per-lcore cache (the pool's ring hands mbufs out in the order
// they came back: FIFO), ~10 MiB (beyond both cores' L2, inside the L3), every mbuf holding a
// whole contribution (the templates' in turn) before the run; per packet the generator writes
// the headers only (g.header_bytes). Multi-producer puts: the other lane frees the frames it
// was handed.
rte_mempool* nic_pool(unsigned lane, const std::vector<std::vector<uint8_t>>& templates,
                      unsigned room) {
    const unsigned frames = std::max(2048u, (g.input_mib << 20) / (room + 256));
    rte_mempool* pool = rte_pktmbuf_pool_create_by_ops(
        ("bench_nic" + std::to_string(lane)).c_str(), frames, 0, 0,
        static_cast<uint16_t>(room), SOCKET_ID_ANY, "ring_mp_sc");
    std::vector<rte_mbuf*> all(frames);
    if (pool == nullptr || rte_pktmbuf_alloc_bulk(pool, all.data(), frames) != 0) {
        std::fprintf(stderr, "cannot create or fill the lane's pool\n");
        return nullptr;
    }
    for (size_t i = 0; i < all.size(); ++i) {
        const auto& t = templates[i % templates.size()];
        if (t.size() > rte_pktmbuf_tailroom(all[i])) {
            std::fprintf(stderr, "a frame does not fit the pool's mbufs\n");
            return nullptr;
        }
        std::memcpy(rte_pktmbuf_mtod(all[i], uint8_t*), t.data(), t.size());
    }
    rte_pktmbuf_free_bulk(all.data(), frames);
    return pool;
}

bool start_sink_ports(unsigned lanes) {
    // Port 0: the ingress the generator stands in for (never polled); port 1: the sink.
    for (const char* name : {"net_null_perf_in", "net_null_perf_out"}) {
        if (rte_vdev_init(name, "no-rx=1") != 0) {
            std::fprintf(stderr, "cannot create %s\n", name);
            return false;
        }
    }
    for (uint16_t port = 0; port < 2; ++port) {
        rte_eth_conf conf{};
        if (rte_eth_dev_configure(port, 1, static_cast<uint16_t>(lanes), &conf) != 0 ||
            rte_eth_rx_queue_setup(port, 0, 512, SOCKET_ID_ANY, nullptr, g.pool) != 0) {
            return false;
        }
        for (uint16_t q = 0; q < lanes; ++q) {
            if (rte_eth_tx_queue_setup(port, q, 512, SOCKET_ID_ANY, nullptr) != 0) {
                return false;
            }
        }
        if (rte_eth_dev_start(port) != 0) {
            return false;
        }
    }
    return true;
}

// The bench's two ports (0: the ingress the generator stands in for, 1: the sink), up to the
// neighbours' list the modes fill in.
constexpr const char* kPortsYaml = R"(version: 1
ports:
  - {name: in, devargs: x, mac: "02:00:00:00:00:01", ipv4: [10.0.1.1/24]}
  - {name: up, devargs: y, mac: "02:00:00:00:00:02", ipv4: [10.0.2.1/24], mtu: 9000}
neighbours:
)";

// The bench's config from `yaml` and its snapshot on ports 0 and 1; an empty snapshot (the
// error printed) when either fails. `tx_udp_checksum`: the ports stand for devices that compute
// the UDP checksums of what they send (net_null discards it uncomputed: the CPU's part is what
// such a NIC leaves it).
struct BenchSnapshot {
    config::LoadResult cfg;
    compile::StandaloneSnapshot built;
};
BenchSnapshot build_bench_snapshot(const std::string& yaml, rte_rcu_qsbr* qsbr,
                                   bool tx_udp_checksum = false) {
    BenchSnapshot b{config::load_string(yaml, "bench"), {}};
    if (!b.cfg.ok()) {
        std::fprintf(stderr, "%s", b.cfg.error_text().c_str());
        return b;
    }
    std::string error;
    b.built = compile::build_standalone(*b.cfg.config,
                                        {{0, {}, tx_udp_checksum}, {1, {}, tx_udp_checksum}}, {},
                                        {}, qsbr, 1, error);
    if (!b.built.snapshot) {
        std::fprintf(stderr, "%s\n", error.c_str());
    }
    return b;
}

// One lcore's pipeline context as the benches' lanes use it: output to the sink port only.
std::unique_ptr<pipeline::LcoreContext> lane_context(uint16_t tx_queue) {
    auto ctx = std::make_unique<pipeline::LcoreContext>();
    ctx->burst_size = kBurst;
    ctx->tsc_hz = rte_get_tsc_hz();
    ctx->pool = g.pool;
    ctx->tx_queue = tx_queue;
    ctx->tx_enabled[kSinkPort] = true;
    return ctx;
}

// --roce: the RoCEv2 server-to-switch stage on one lcore.
namespace fr = features::roce;

constexpr unsigned kRanks = 8;
constexpr uint32_t kRoceWindow = 256;      // the most an rdma job has (config kMaxWindow)
// Chunks of frames built ahead per rank (a segment): few, so the frames copied from stay in
// cache as INA's 8 templates do (a ring of MiBs made every copy a memory read).
constexpr uint32_t kRing = 16;
constexpr uint32_t kChunksPerBurst = kBurst / kRanks;
static_assert(kBurst % kRanks == 0 && kRing % kChunksPerBurst == 0);

// The switch's port "up" (the sink) and the ranks' addresses behind it (10.0.2.11..18).
constexpr uint8_t kUpMac[6] = {0x02, 0, 0, 0, 0, 0x02};
constexpr uint32_t kParentIp = 0x0A000202;  // 10.0.2.2: the INA parent of --role aggregator
constexpr uint32_t kUpIp = 0x0A000201;      // 10.0.2.1: the switch's address on "up"
// pmtu 0: the smallest that carries a chunk in one packet.
std::string roce_yaml(unsigned payload, const std::string& type, bool aggregator,
                      unsigned pmtu, bool deterministic) {
    pmtu = pmtu != 0 ? pmtu : payload <= 1024 ? 1024 : 4096;
    std::string neighbours =
        aggregator ? "  - {ip: 10.0.2.2, mac: \"02:00:00:00:02:02\", port: up}\n" : "";
    std::string qps;
    for (unsigned r = 1; r <= kRanks; ++r) {
        const std::string ip = "10.0.2." + std::to_string(10 + r);
        neighbours += "  - {ip: " + ip + ", mac: \"02:00:00:00:02:" + std::to_string(10 + r) +
                      "\", port: up}\n";
        qps += "        - {rank: " + std::to_string(r) + ", ip: " + ip +
               ", qpn: " + std::to_string(0x1000 + r) + ", psn: " + std::to_string(r * 1000) +
               ", switch_qpn: " + std::to_string(fr::kFirstSwitchQpn + r) +
               ", switch_psn: 5000, result_addr: 0x7f0000000000, result_rkey: 0x1234, "
               "result_length: " + std::to_string(kRoceWindow * payload) + "}\n";
    }
    return std::string(kPortsYaml) + neighbours + R"(rdma:
  jobs:
    - id: 1
      world: )" + std::to_string(kRanks) + R"(
      op: sum
      dtype: )" + type + R"(
      chunk_bytes: )" + std::to_string(payload) + R"(
      window: )" + std::to_string(kRoceWindow) + R"(
      pmtu: )" + std::to_string(pmtu) + "\n" +
           (aggregator ? "      role: aggregator\n      parent: 10.0.2.2\n      bsl: 64\n" : "") +
           (deterministic ? "      deterministic: true\n" : "") + "      qps:\n" + qps;
}

// The per-lcore states of the config's one job, made and attached as the control piece does
// (job_params / qp_params, attach commands, slots written into the snapshot's view).
struct RoceStates {
    std::unique_ptr<fr::JobState> job;
    std::vector<std::unique_ptr<fr::QpState>> qps;  // by rank - 1
};

bool attach_roce(pipeline::LcoreContext& ctx, dp::Snapshot& snap, const config::Config& cfg,
                 RoceStates& out) {
    const fr::JobConfig& jc = fr::rdma_of(cfg)->jobs.at(0);
    auto* view = static_cast<fr::RoceView*>(snap.feature_views[fr::kFeatureRoce].get());
    if (view == nullptr || view->jobs.size() != 1) {
        return false;
    }
    out.job = std::make_unique<fr::JobState>(fr::job_params(jc), fr::parent_params(jc));
    uint16_t slot = 0;
    view->jobs[0].slot = slot;
    if (!pipeline::apply_command(ctx, dp::Command{dp::CommandType::attach, fr::kFeatureRoce,
                                                  slot, fr::job_state_id(jc.id),
                                                  static_cast<fr::StateTag*>(out.job.get())})) {
        return false;
    }
    for (const auto& qc : jc.qps) {
        out.qps.push_back(std::make_unique<fr::QpState>(fr::qp_params(cfg, jc, qc), out.job.get()));
        ++slot;
        for (auto& qv : view->qps) {
            if (qv.switch_qpn == qc.switch_qpn) {
                qv.slot = slot;
            }
        }
        if (!pipeline::apply_command(
                ctx, dp::Command{dp::CommandType::attach, fr::kFeatureRoce, slot,
                                 fr::qp_state_id(qc.switch_qpn),
                                 static_cast<fr::StateTag*>(out.qps.back().get())})) {
            return false;
        }
    }
    return out.qps.size() == kRanks;
}

// The workers' ACKs of every result WRITE the switch has sent them (one per rank with results
// outstanding, covering all of them) into `acks`; how many.
uint16_t build_acks(const RoceStates& st, const std::vector<bench::RoceWorker>& workers,
                    rte_mbuf** acks) {
    uint16_t n = 0;
    for (unsigned r = 0; r < kRanks; ++r) {
        const auto& rq = st.qps[r]->requester;
        const uint32_t inflight = rq.inflight_packets();
        if (inflight == 0) {
            continue;
        }
        rte_mbuf* m = rte_pktmbuf_alloc(g.pool);
        if (m == nullptr) {
            break;
        }
        const uint32_t psn = (rq.oldest_unacked_psn() + inflight - 1) & 0xFFFFFF;
        const size_t len = bench::roce_ack(rte_pktmbuf_mtod(m, uint8_t*), rte_pktmbuf_tailroom(m),
                                           workers[r], psn,
                                           static_cast<uint32_t>(rq.posted_messages()));
        m->data_len = static_cast<uint16_t>(len);
        m->pkt_len = static_cast<uint32_t>(len);
        m->port = kSinkPort;
        acks[n++] = m;
    }
    return n;
}

// The ranks' contribution frames of kRing chunks (a segment, rebuilt in place as the run moves
// on), `packets` frames per chunk and rank, and the element bytes they carry: any pattern,
// floats kept finite (as bench::ina_contribution's). A chunk's packet i has the same length
// for every chunk and rank (length[i]).
struct RoceFrameRing {
    RoceFrameRing(unsigned payload, size_t esize, unsigned packets_per_chunk = 1)
        : values(payload), packets(packets_per_chunk),
          stride(bench::roce_contribution_bytes(payload / packets_per_chunk)),
          length(packets_per_chunk, stride),
          ring(size_t{kRing} * kRanks * packets_per_chunk * stride) {
        for (size_t i = 0; i < values.size(); ++i) {
            values[i] = static_cast<uint8_t>(i % esize == esize - 1 ? 0x3F : i * 7);
        }
    }
    uint8_t* at(uint32_t s, unsigned r, unsigned i = 0) {
        return ring.data() + ((size_t{s % kRing} * kRanks + r) * packets + i) * stride;
    }
    std::vector<uint8_t> values;
    unsigned packets;
    size_t stride;
    std::vector<size_t> length;
    std::vector<uint8_t> ring;
};

// Where frames_in takes its mbufs and what it writes of each: the whole frame from g.pool, or
// (--input nic) from a pool whose buffers already hold a frame with the same payload, only the
// headers (`header_bytes`) and the ICRC (the last 4 bytes: a NIC's DMA leaves the rest).
struct FrameSource {
    rte_mempool* pool = nullptr;  // nullptr: g.pool
    size_t header_bytes = 0;      // 0: the whole frame
};

// n fresh mbufs in `ms`, each a copy of frame_of(k) (len_of(k) bytes) arriving on the sink
// port, as a NIC's RX would give them; false when the pool is empty.
template <typename FrameOf, typename LenOf>
bool frames_in(rte_mbuf** ms, unsigned n, FrameOf frame_of, LenOf len_of,
               const FrameSource& from = {}) {
    if (rte_pktmbuf_alloc_bulk(from.pool != nullptr ? from.pool : g.pool, ms, n) != 0) {
        std::fprintf(stderr, "mempool exhausted\n");
        return false;
    }
    for (unsigned k = 0; k < n; ++k) {
        const size_t len = len_of(k);
        const uint8_t* frame = frame_of(k);
        auto* d = rte_pktmbuf_mtod(ms[k], uint8_t*);
        if (from.header_bytes != 0 && from.header_bytes + 4 <= len) {
            std::memcpy(d, frame, from.header_bytes);
            std::memcpy(d + len - 4, frame + len - 4, 4);
        } else {
            std::memcpy(d, frame, len);
        }
        ms[k]->data_len = static_cast<uint16_t>(len);
        ms[k]->pkt_len = static_cast<uint32_t>(len);
        ms[k]->port = kSinkPort;
    }
    return true;
}

template <typename FrameOf>
bool frames_in(rte_mbuf** ms, unsigned n, size_t len, FrameOf frame_of) {
    return frames_in(ms, n, frame_of, [len](unsigned) { return len; });
}

int run_roce(unsigned payload, const std::string& type, double seconds, rte_rcu_qsbr* qsbr,
             bool aggregator, unsigned pmtu, bool nic_input, bool deterministic) {
    // A chunk above the PMTU goes as `packets` WRITE packets (FIRST, MIDDLE.., LAST_WITH_IMM).
    const unsigned packets = pmtu != 0 && payload > pmtu ? payload / pmtu : 1;
    if (packets > 1 && (aggregator || payload % pmtu != 0 || kBurst % (kRanks * packets) != 0)) {
        std::fprintf(stderr, "--pmtu below the payload: --role root, payload = 1, 2 or 4 x pmtu\n");
        return 2;
    }
    const uint32_t chunks_per_burst = kBurst / (kRanks * packets);
    auto bench = build_bench_snapshot(roce_yaml(payload, type, aggregator, pmtu, deterministic),
                                      qsbr);
    auto& cfg = bench.cfg;
    auto& snap = bench.built.snapshot;
    if (!snap) {
        return 1;
    }
    auto ctx_owner = lane_context(0);
    auto& ctx = *ctx_owner;
    RoceStates st;
    if (!attach_roce(ctx, *snap, *cfg.config, st)) {
        std::fprintf(stderr, "cannot attach the rdma job's states\n");
        return 1;
    }
    const fr::JobParams& jp = st.job->params;
    const size_t esize = reduce::elem_size(jp.dtype);
    std::vector<bench::RoceWorker> workers;
    for (unsigned r = 0; r < kRanks; ++r) {
        const uint8_t worker_mac[6] = {0x02, 0, 0, 0, 0x02, static_cast<uint8_t>(11 + r)};
        workers.push_back(bench::roce_worker(st.qps[r]->params, kUpMac, worker_mac));
    }
    RoceFrameRing frames(payload, esize, packets);
    const std::vector<uint8_t>& values = frames.values;
    const size_t stride = frames.stride;
    // --role aggregator: the parent's answer to each chunk's partial (P-BM: the ranks' BFR-ids).
    const auto pbm = *wire::BitString::from_bfr_ids(64, 0, std::vector<uint16_t>{1, 2, 3, 4, 5, 6, 7, 8});
    const size_t result_stride = bench::parent_result_bytes(payload, 64);
    std::vector<uint8_t> result_ring(aggregator ? size_t{kRing} * result_stride : 0);
    auto result_at = [&](uint32_t s) { return result_ring.data() + size_t{s % kRing} * result_stride; };
    auto build_segment = [&](uint32_t first) {
        for (uint32_t s = first; s < first + kRing; ++s) {
            if (aggregator &&
                bench::parent_result(result_at(s), result_stride, jp.job_id, s,
                                     static_cast<uint8_t>(jp.dtype), pbm, kParentIp, kUpIp,
                                     kUpMac, values.data(), payload) != result_stride) {
                return false;
            }
            for (unsigned r = 0; r < kRanks; ++r) {
                for (unsigned i = 0; i < packets; ++i) {
                    const size_t len = bench::roce_contribution_packet(
                        frames.at(s, r, i), stride, workers[r], s, i, packets, jp, fr::kAreaAddr,
                        fr::kAreaRkey, values.data());
                    if (len == 0 || (s != 0 && len != frames.length[i])) {
                        return false;
                    }
                    frames.length[i] = len;
                }
            }
        }
        return true;
    };

    // --input nic: every contribution carries the same payload (`values`), so a pool filled
    // with one whole frame needs per packet only the headers and the ICRC written.
    FrameSource contributions;
    uint32_t built_first = 0;
    if (nic_input) {
        if (!build_segment(0)) {
            std::fprintf(stderr, "cannot build a contribution frame\n");
            return 1;
        }
        built_first = kRing;
        const uint8_t* t = frames.at(0, 0, 0);
        contributions.pool =
            nic_pool(0, {std::vector<uint8_t>(t, t + frames.length[0])},
                     RTE_PKTMBUF_HEADROOM + payload + 256);
        contributions.header_bytes = frames.length[0] - payload - 4;
        if (contributions.pool == nullptr) {
            return 1;
        }
    }

    const uint64_t hz = rte_get_tsc_hz();
    const auto budget = static_cast<uint64_t>(seconds * static_cast<double>(hz));
    const uint64_t started = rte_rdtsc();
    const uint64_t cpu_started = thread_cpu_ns();
    uint64_t switch_tsc = 0;  // inside the generator's alloc + copy and process_burst only
    // Aggregator: the part of switch_tsc spent on the way down (the parent's results, the WRITEs
    // they become, the ranks' ACKs, the tick): switch_tsc - down_tsc is the way up alone, the
    // work an INA aggregator's row measures.
    uint64_t down_tsc = 0;
    uint64_t stalled_since = 0;
    uint32_t next_s = 0;
    uint32_t built_to = built_first;
    uint64_t generated = 0;
    uint64_t acks_in = 0;
    bool failed = false;
    rte_mbuf* burst[kBurst];
    rte_mbuf* acks[kRanks];
    rte_mbuf* results[kChunksPerBurst];
    // Burst frame k: chunk next_s + k / (ranks x packets), rank (k / packets) % ranks, packet
    // k % packets (each rank's packets of a chunk in order, as its QP sends them).
    auto burst_frame = [&](unsigned k) {
        return frames.at(next_s + k / (kRanks * packets), (k / packets) % kRanks, k % packets);
    };
    auto burst_length = [&](unsigned k) { return frames.length[k % packets]; };
    while (switch_tsc < budget && !failed) {
        if (next_s == built_to) {
            if (!build_segment(built_to)) {
                std::fprintf(stderr, "cannot build a contribution frame\n");
                failed = true;
                break;
            }
            built_to += kRing;
        }
        // A chunk's slot is free once every rank acknowledged its result: never ask for more
        // than the window holds (the switch would answer RNR NAK).
        if (next_s + chunks_per_burst <= st.job->results_released + kRoceWindow) {
            stalled_since = 0;
            const uint64_t t0 = rte_rdtsc();
            if (!frames_in(burst, kBurst, burst_frame, burst_length, contributions)) {
                failed = true;
                break;
            }
            ctx.now_tsc = t0;
            INA_BENCH_COLLECT_WAY_UP();
            pipeline::process_burst(ctx, *snap, burst, kBurst);
            INA_BENCH_COLLECT_WAY_UP();
            // The parent answers the burst's partials (its result frames copied as the
            // contributions are; the stage turns each into the ranks' result WRITEs).
            if (aggregator) {
                const uint64_t t1 = rte_rdtsc();
                if (!frames_in(results, kChunksPerBurst, result_stride,
                               [&](unsigned k) { return result_at(next_s + k); })) {
                    failed = true;
                    break;
                }
                pipeline::process_burst(ctx, *snap, results, kChunksPerBurst);
                down_tsc += rte_rdtsc() - t1;
            }
            switch_tsc += rte_rdtsc() - t0;
            next_s += chunks_per_burst;
            generated += kBurst;
        } else if (stalled_since == 0) {
            stalled_since = rte_rdtsc();
        } else if (rte_rdtsc() - stalled_since > hz) {
            std::fprintf(stderr, "no slot released for a second\n");
            failed = true;
            break;
        }
        // The workers acknowledge what the switch sent (built outside the measured time).
        const uint16_t n = build_acks(st, workers, acks);
        if (n != 0) {
            const uint64_t t0 = rte_rdtsc();
            ctx.now_tsc = t0;
            pipeline::process_burst(ctx, *snap, acks, n);
            switch_tsc += rte_rdtsc() - t0;
            down_tsc += aggregator ? rte_rdtsc() - t0 : 0;
            acks_in += n;
        } else if (stalled_since != 0) {
            // Nothing in flight and no slot: results are waiting for the stage's tick.
            const uint64_t t0 = rte_rdtsc();
            ctx.now_tsc = t0;
            pipeline::service_timers(ctx, *snap);
            switch_tsc += rte_rdtsc() - t0;
            down_tsc += aggregator ? rte_rdtsc() - t0 : 0;
        }
    }
    pipeline::tx_flush_all(ctx);
    const double elapsed = static_cast<double>(switch_tsc) / static_cast<double>(hz);
    const double up_elapsed = static_cast<double>(switch_tsc - down_tsc) / static_cast<double>(hz);
    const double wall = static_cast<double>(rte_rdtsc() - started) / static_cast<double>(hz);
    // The share of the run the kernel gave this thread: its CPU time over the wall time. The
    // measured regions are TSC time, which keeps running while the thread is switched out;
    // switching out falls on the regions in proportion to their time, so the regions' CPU time
    // is their TSC time times that share. No clock read per burst (CLOCK_THREAD_CPUTIME_ID is a
    // syscall, a tenth of a 1 KiB burst): the cpu_* rates are INA's cpu_mpps for RoCE, what a
    // shared machine's neighbours move far less than the TSC rates.
    const double ran = std::min(
        1.0, static_cast<double>(thread_cpu_ns() - cpu_started) / 1e9 / std::max(wall, 1e-9));

    fr::QpCounters sum;
#define INA_ROCE_SUM(name, help) sum.name += q->counters.name;
    for (const auto& q : st.qps) {
        INA_ROCE_QP_COUNTERS(INA_ROCE_SUM)
    }
#undef INA_ROCE_SUM
    const uint64_t sent = ctx.counters.ports[kSinkPort].tx_packets;
    const uint64_t elems = payload / esize;
    const fr::ParentCounters up = st.job->parent ? st.job->parent->counters : fr::ParentCounters{};
    std::printf("{\"traffic\": \"roce\", \"role\": \"%s\", \"workers\": %u, \"payload_bytes\": %u, "
                "\"packets_per_chunk\": %u, \"segments\": %lu, \"type\": \"%s\", "
                "\"isa\": \"%s\", \"lcores\": 1, \"steer\": \"none\", \"deterministic\": %s, "
                "\"mpps\": %.3f, \"up_mpps\": %.3f, \"cpu_mpps\": %.3f, \"cpu_up_mpps\": %.3f, "
                "\"cpu_share\": %.3f, \"payload_gbit_s\": %.2f, \"gelem_s\": %.3f, "
                "\"absorbed\": %lu, \"completed\": %lu, \"released\": %lu, \"results_sent\": %lu, "
                "\"acks_sent\": %lu, \"acks_in\": %lu, \"partials_sent\": %lu, "
                "\"parent_results_in\": %lu, \"frames_out\": %lu, \"packets\": %lu, "
                "\"seconds\": %.3f, \"excluded_seconds\": %.3f}\n",
                aggregator ? "aggregator" : "root", kRanks, payload, packets,
                static_cast<unsigned long>(sum.segments), type.c_str(),
                std::string(reduce::to_string(reduce::kernels().isa)).c_str(),
                st.job->params.deterministic ? "true" : "false",
                static_cast<double>(generated) / elapsed / 1e6,
                static_cast<double>(generated) / up_elapsed / 1e6,
                static_cast<double>(generated) / (elapsed * ran) / 1e6,
                static_cast<double>(generated) / (up_elapsed * ran) / 1e6, ran,
                static_cast<double>(generated) * static_cast<double>(payload / packets) * 8 / elapsed / 1e9,
                static_cast<double>(sum.contributions) * static_cast<double>(elems) / elapsed / 1e9,
                static_cast<unsigned long>(sum.contributions),
                static_cast<unsigned long>(st.job->results_completed),
                static_cast<unsigned long>(st.job->results_released),
                static_cast<unsigned long>(sum.results_sent),
                static_cast<unsigned long>(sum.acks_sent), static_cast<unsigned long>(acks_in),
                static_cast<unsigned long>(up.partial_sent), static_cast<unsigned long>(up.result_in),
                static_cast<unsigned long>(sent), static_cast<unsigned long>(generated), elapsed,
                wall - elapsed);
    std::fflush(stdout);
    // Every contribution was added, every chunk completed, nothing refused, NAKed, resent or
    // bad, every slot but the window's last released, and every frame the stage made left;
    // an aggregator sent every chunk up once and took every answer.
    // (generated counts packets: `packets` per contribution; multi-packet ones staged each.)
    const bool ok = !failed && generated > 0 && sum.contributions * packets == generated &&
                    sum.segments == (packets > 1 ? generated : 0) &&
                    st.job->results_completed == next_s &&
                    st.job->results_released + kRoceWindow >= next_s &&
                    sum.naks_sent + sum.rnr_naks_sent + sum.refused + sum.bad_contributions +
                            sum.icrc_errors + sum.duplicates + sum.retransmissions ==
                        0 &&
                    sum.acks_received == acks_in && sent == sum.packets_out + up.partial_sent &&
                    st.job->post_failures == 0 &&
                    (!aggregator ||
                     (up.partial_sent == next_s && up.result_in == next_s &&
                      up.partial_resent + up.result_duplicate + up.result_not_held +
                              up.result_bad + up.no_mbuf ==
                          0));
    for (uint16_t slot = static_cast<uint16_t>(st.qps.size() + 1); slot-- > 0;) {
        pipeline::apply_command(ctx, dp::Command{dp::CommandType::detach, fr::kFeatureRoce, slot,
                                                 ctx.feature_slots[slot].id, nullptr});
    }
    for (uint16_t port = 0; port < 2; ++port) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    snap.reset();
    return ok ? 0 : 1;
}

// --s2s: the RoCEv2 server-to-server stage on one lcore. 8 workers' WRITE_ONLY_WITH_IMM
// contributions travel toward the root (10.0.2.2) on their own RC connections (static, from
// the config); the switch absorbs them, ACKs each worker as the root would (coalesced per
// burst) and sends one aggregated WRITE per chunk to the root on the carrier connection. The
// root's ACKs of the aggregates (built outside the measured time, processed inside it) release
// the slots. The figure beside --roce --role root: what the absorb + ACK path costs per
// contribution against the path that terminates the connections.
namespace fs = features::roce_s2s;

constexpr uint8_t kRootMac[6] = {0x02, 0, 0, 0, 0x02, 0x02};  // 10.0.2.2, behind "up"

std::string s2s_yaml(unsigned payload, const std::string& type) {
    const unsigned pmtu = payload <= 1024 ? 1024 : 4096;
    std::string neighbours = "  - {ip: 10.0.2.2, mac: \"02:00:00:00:02:02\", port: up}\n";
    std::string conns;
    for (unsigned r = 1; r <= kRanks; ++r) {
        const std::string ip = "10.0.2." + std::to_string(10 + r);
        neighbours += "  - {ip: " + ip + ", mac: \"02:00:00:00:02:" + std::to_string(10 + r) +
                      "\", port: up}\n";
        conns += "        - {rank: " + std::to_string(r) + ", ip: " + ip +
                 ", qpn: " + std::to_string(0x1000 + r) + ", root_qpn: " +
                 std::to_string(0x2000 + r) + ", psn: " + std::to_string(r * 1000) + "}\n";
    }
    return std::string(kPortsYaml) + neighbours + R"(rdma_s2s:
  jobs:
    - id: 1
      root: 10.0.2.2
      world: )" + std::to_string(kRanks) + R"(
      op: sum
      dtype: )" + type + R"(
      chunk_bytes: )" + std::to_string(payload) + R"(
      window: )" + std::to_string(fs::kMaxWindow) + R"(
      pmtu: )" + std::to_string(pmtu) + "\n      connections:\n" + conns;
}

int run_s2s(unsigned payload, const std::string& type, double seconds, rte_rcu_qsbr* qsbr) {
    auto bench = build_bench_snapshot(s2s_yaml(payload, type), qsbr);
    auto& snap = bench.built.snapshot;
    if (!snap) {
        return 1;
    }
    auto ctx_owner = lane_context(0);
    auto& ctx = *ctx_owner;
    const fs::JobConfig& jc = fs::s2s_of(*bench.cfg.config)->jobs.at(0);
    auto job = std::make_unique<fs::JobState>(fs::job_params(jc));
    constexpr uint16_t kSlot = 0;
    auto* view = static_cast<fs::S2sView*>(snap->feature_views[fs::kFeatureS2s].get());
    if (view == nullptr || view->conns.empty() ||
        !pipeline::apply_command(ctx, dp::Command{dp::CommandType::attach, fs::kFeatureS2s,
                                                  kSlot, fs::job_state_id(jc.id), job.get()})) {
        std::fprintf(stderr, "cannot attach the rdma_s2s job's state\n");
        return 1;
    }
    for (auto& c : view->conns) {
        c.slot = kSlot;  // home lcore 0: the bench's one lane
    }
    const fs::JobParams& jp = job->params;
    std::vector<bench::RoceWorker> workers;
    for (unsigned r = 0; r < kRanks; ++r) {
        const fs::ConnParams& cp = jp.conns[r];
        bench::RoceWorker w;
        w.path.src_ip = cp.worker_ip;
        w.path.dst_ip = jp.root_ip;
        w.path.src_port = roce::source_port_for_qp(cp.worker_qpn);
        w.path.dest_qp = cp.root_qpn;
        w.first_psn = cp.psn;
        std::memcpy(w.switch_mac, kUpMac, 6);
        const uint8_t worker_mac[6] = {0x02, 0, 0, 0, 0x02, static_cast<uint8_t>(11 + r)};
        std::memcpy(w.worker_mac, worker_mac, 6);
        workers.push_back(w);
    }
    // The root's side of the carrier connection (rank 1): its ACKs of the aggregates.
    bench::RoceWorker root;
    root.path.src_ip = jp.root_ip;
    root.path.dst_ip = jp.conns[0].worker_ip;
    root.path.src_port = roce::source_port_for_qp(jp.conns[0].root_qpn);
    root.path.dest_qp = jp.conns[0].worker_qpn;
    std::memcpy(root.switch_mac, kUpMac, 6);
    std::memcpy(root.worker_mac, kRootMac, 6);

    const size_t esize = reduce::elem_size(jp.dtype);
    RoceFrameRing frames(payload, esize);
    const std::vector<uint8_t>& values = frames.values;
    const size_t stride = frames.stride;
    auto frame_at = [&](uint32_t s, unsigned r) { return frames.at(s, r); };
    auto build_segment = [&](uint32_t first) {
        for (uint32_t s = first; s < first + kRing; ++s) {
            for (unsigned r = 0; r < kRanks; ++r) {
                // Each connection's area at the root: its own VA and rkey.
                if (bench::roce_contribution(frame_at(s, r), stride, workers[r], s, payload,
                                             fs::kMaxWindow, 0x10000000ull * (r + 1),
                                             0x100 + r, values.data()) != stride) {
                    return false;
                }
            }
        }
        return true;
    };

    const uint64_t hz = rte_get_tsc_hz();
    const auto budget = static_cast<uint64_t>(seconds * static_cast<double>(hz));
    const uint64_t started = rte_rdtsc();
    uint64_t switch_tsc = 0;  // inside the generator's alloc + copy and process_burst only
    uint64_t stalled_since = 0;
    uint32_t next_s = 0;
    uint32_t built_to = 0;
    uint64_t generated = 0;
    uint64_t root_acks_in = 0;
    bool failed = false;
    rte_mbuf* burst[kBurst];
    auto measured = [&](auto&& work) {
        const uint64_t t0 = rte_rdtsc();
        ctx.now_tsc = t0;
        work();
        switch_tsc += rte_rdtsc() - t0;
    };
    while (switch_tsc < budget && !failed) {
        if (next_s == built_to) {
            if (!build_segment(built_to)) {
                std::fprintf(stderr, "cannot build a contribution frame\n");
                failed = true;
                break;
            }
            built_to += kRing;
        }
        // A chunk's slot is free once the root acknowledged its aggregate: never ask for more
        // than the window holds (the switch would answer RNR NAK).
        if (next_s + kChunksPerBurst <= job->counters.aggregates_acked + fs::kMaxWindow) {
            stalled_since = 0;
            measured([&] {
                if (!frames_in(burst, kBurst, stride, [&](unsigned k) {
                        return frame_at(next_s + k / kRanks, k % kRanks);
                    })) {
                    failed = true;
                    return;
                }
                pipeline::process_burst(ctx, *snap, burst, kBurst);
            });
            next_s += kChunksPerBurst;
            generated += kBurst;
        } else if (stalled_since == 0) {
            stalled_since = rte_rdtsc();
        } else if (rte_rdtsc() - stalled_since > hz) {
            std::fprintf(stderr, "no slot released for a second\n");
            failed = true;
            break;
        }
        // The root acknowledges every aggregate packet sent (one-packet messages: the MSN
        // counts them).
        const roce::Requester& leg = job->root_leg;
        if (const uint32_t inflight = leg.inflight_packets(); inflight != 0) {
            rte_mbuf* m = rte_pktmbuf_alloc(g.pool);
            if (m == nullptr) {
                failed = true;
                break;
            }
            const uint32_t psn = (leg.oldest_unacked_psn() + inflight - 1) & 0xFFFFFF;
            const auto msn = static_cast<uint32_t>(leg.completed_messages() + inflight);
            const size_t len = bench::roce_ack(rte_pktmbuf_mtod(m, uint8_t*),
                                               rte_pktmbuf_tailroom(m), root, psn, msn);
            m->data_len = static_cast<uint16_t>(len);
            m->pkt_len = static_cast<uint32_t>(len);
            m->port = kSinkPort;
            measured([&] { pipeline::process_burst(ctx, *snap, &m, 1); });
            ++root_acks_in;
        } else if (stalled_since != 0) {
            // Nothing in flight and no slot: aggregates are waiting for the stage's tick.
            measured([&] { pipeline::service_timers(ctx, *snap); });
        }
    }
    pipeline::tx_flush_all(ctx);
    const double elapsed = static_cast<double>(switch_tsc) / static_cast<double>(hz);
    const double wall = static_cast<double>(rte_rdtsc() - started) / static_cast<double>(hz);
    const fs::JobCounters& c = job->counters;
    const uint64_t sent = ctx.counters.ports[kSinkPort].tx_packets;
    std::printf("{\"traffic\": \"s2s\", \"role\": \"root-path\", \"workers\": %u, "
                "\"payload_bytes\": %u, \"type\": \"%s\", \"isa\": \"%s\", \"lcores\": 1, "
                "\"mpps\": %.3f, \"payload_gbit_s\": %.2f, \"absorbed\": %lu, "
                "\"acks_synthesized\": %lu, \"aggregates_sent\": %lu, \"aggregates_acked\": %lu, "
                "\"root_acks_in\": %lu, \"frames_out\": %lu, \"packets\": %lu, "
                "\"seconds\": %.3f, \"excluded_seconds\": %.3f}\n",
                kRanks, payload, type.c_str(),
                std::string(reduce::to_string(reduce::kernels().isa)).c_str(),
                static_cast<double>(generated) / elapsed / 1e6,
                static_cast<double>(generated) * static_cast<double>(payload) * 8 / elapsed / 1e9,
                static_cast<unsigned long>(c.absorbed),
                static_cast<unsigned long>(c.acks_synthesized),
                static_cast<unsigned long>(c.aggregates_sent),
                static_cast<unsigned long>(c.aggregates_acked),
                static_cast<unsigned long>(root_acks_in), static_cast<unsigned long>(sent),
                static_cast<unsigned long>(generated), elapsed, wall - elapsed);
    std::fflush(stdout);
    // Every contribution absorbed, one aggregate per chunk, none resent, NAKed, refused or bad;
    // every slot but the window's last released; every frame the stage made left.
    const bool ok = !failed && generated > 0 && c.absorbed == generated &&
                    c.aggregates_sent == next_s && c.aggregates_acked + fs::kMaxWindow >= next_s &&
                    c.naks_sent + c.rnr_naks_sent + c.duplicates + c.retransmits +
                            c.icrc_errors + c.bad_contributions + c.not_contribution ==
                        0 &&
                    c.root_acks_consumed == root_acks_in &&
                    sent == c.acks_synthesized + c.aggregates_sent;
    pipeline::apply_command(ctx, dp::Command{dp::CommandType::detach, fs::kFeatureS2s, kSlot,
                                             fs::job_state_id(jc.id), nullptr});
    for (uint16_t port = 0; port < 2; ++port) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    snap.reset();
    return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"INA aggregation rate of one or two lcores (in-process generator)"};
    unsigned workers = 8;
    unsigned payload = 1024;
    std::string type = "fp32";
    double seconds = 2.0;
    std::string prefix = "perf-ina-bench";
    unsigned lanes = 1;
    std::string steer = "chunk";
    app.add_option("--workers", workers, "contributors per chunk (BFR-ids 1..N)")->check(CLI::Range(2, 64));
    app.add_option("--payload", payload, "payload bytes per packet")->check(CLI::Range(64, 8192));
    app.add_option("--type", type, "int32, fp32, fp16 or bf16");
    app.add_option("--seconds", seconds, "measurement time");
    app.add_option("--file-prefix", prefix, "EAL file prefix");
    bool deterministic = false;
    app.add_flag("--deterministic", deterministic,
                 "the job is deterministic: exact int64 fixed-point sums (float types)");
    uint32_t window = 1024;
    app.add_option("--window", window,
                   "the INA job's window (slots, a power of two): its working set is window x "
                   "payload")
        ->check(CLI::Range(16u, 1u << 20));
    app.add_option("--lcores", lanes, "aggregating lcores")->check(CLI::Range(1, 2));
    app.add_option("--steer", steer, "with 2 lcores: chunk (ideal) or handoff (by worker)")
        ->check(CLI::IsMember({"chunk", "handoff"}));
    bool one_thread = false;
    app.add_flag("--one-thread", one_thread,
                 "with --lcores 2: both lanes' work on one thread, a burst each in turn "
                 "(cpu_mpps: one CPU doing both lanes' work, free of the scheduler)");
    bool udp_checksum = false;
    app.add_flag("--udp-checksum", udp_checksum,
                 "INA contributions carry a UDP checksum, which the switch verifies in software "
                 "(as from ina-worker over af_packet/af_xdp, no RX offload); default 0 (none)");
    bool tx_checksum_offload = false;
    app.add_flag("--tx-checksum-offload", tx_checksum_offload,
                 "the ports compute the UDP checksums of the datagrams the switch emits, as a NIC "
                 "with TX checksum offload does (ports: tx_udp_checksum); default: software");
    std::string input = "cpu";
    app.add_option("--input", input,
                   "cpu: the generator writes every frame whole on the lcore that receives it "
                   "(payload in that core's caches); nic: as a NIC's DMA leaves them, payloads "
                   "not in the receiving core's caches (a ~10 MiB ring of mbufs cycled FIFO, "
                   "only the headers written per packet; --roce: and the ICRC)")
        ->check(CLI::IsMember({"cpu", "nic"}));
    app.add_option("--input-mib", g.input_mib,
                   "--input nic: each lane's ring of frames, MiB (beyond L2, inside the LLC)")
        ->check(CLI::Range(1u, 256u));
    app.add_flag("--generator-only", g.generator_only,
                 "the input alone: every generated burst is freed instead of switched (alloc, "
                 "copy and free per packet: the part of the rate that is the generator's)");
    bool l3 = false;
    app.add_flag("--l3", l3, "instead: 64 B IPv4/UDP frames to 200 destinations, routed (no "
                             "INA job): the L3 path alone, for A/B and profiles");
    bool roce = false;
    app.add_flag("--roce", roce, "instead: 8 ranks' RoCEv2 WRITE_ONLY_WITH_IMM contributions to "
                                 "an rdma job (server-to-switch), ACKing its results; 1 lcore")
        ->excludes("--l3");
    bool s2s = false;
    app.add_flag("--s2s", s2s, "instead: 8 workers' RoCEv2 WRITE_ONLY_WITH_IMM contributions on "
                               "their own RC connections to a root, absorbed and ACKed by an "
                               "rdma_s2s job (server-to-server); 1 lcore")
        ->excludes("--l3")
        ->excludes("--roce");
    std::string role = "aggregator";
    app.add_option("--role", role, "the job's place in the tree: aggregator (one partial per "
                                   "chunk to the parent) or root (the result to every worker)")
        ->check(CLI::IsMember({"aggregator", "root"}));
    unsigned pmtu = 0;
    app.add_option("--pmtu", pmtu, "with --roce --role root: the rdma job's path MTU; a payload "
                                   "above it goes as multi-packet WRITEs (FIRST, MIDDLE.., "
                                   "LAST_WITH_IMM; payload 2 or 4 x pmtu)")
        ->check(CLI::IsMember({256u, 512u, 1024u, 2048u, 4096u}))
        ->needs("--roce");
    CLI11_PARSE(app, argc, argv);
    const bool root = role == "root";
    const bool nic_input = input == "nic";
    if (nic_input && (s2s || l3 || (roce && pmtu != 0))) {
        std::fprintf(stderr, "--input nic: INA, or --roce without --pmtu\n");
        return 2;
    }
    if (root && (lanes != 1 || l3)) {
        std::fprintf(stderr, "--role root: 1 lcore, not with --l3\n");
        return 2;
    }
    if ((roce || s2s) && (lanes != 1 || payload % 4 != 0 || payload > 4096)) {
        std::fprintf(stderr, "--roce, --s2s: 1 lcore, payload a multiple of 4 up to 4096\n");
        return 2;
    }
    // A deterministic rdma job is a root's (config refuses the aggregator role).
    if (deterministic && (s2s || (roce && !root))) {
        std::fprintf(stderr, "--deterministic: INA, or --roce --role root\n");
        return 2;
    }

    const std::vector<std::string> types = {"int32", "fp32", "fp16", "bf16"};
    uint8_t et = 0;
    while (et < types.size() && types[et] != type) {
        ++et;
    }
    if (et == types.size()) {
        std::fprintf(stderr, "unknown --type %s\n", type.c_str());
        return 2;
    }
    const size_t esize = proto::elem_bytes(et);
    const auto elems = static_cast<uint16_t>(payload / esize);

    std::string fp = "--file-prefix=" + prefix;
    std::string cores = lanes == 1 ? "0" : "0-1";
    std::vector<const char*> eal = {"ina_bench", "--no-huge", "-m", "512", "--no-pci",
                                    "--log-level=*:error", fp.c_str(), "-l", cores.c_str()};
    if (rte_eal_init(static_cast<int>(eal.size()), const_cast<char**>(eal.data())) < 0) {
        std::fprintf(stderr, "EAL init failed\n");
        return 1;
    }
    if (!ina::pipeline::register_mbuf_flags()) {
        std::fprintf(stderr, "cannot register mbuf flags\n");
        return 1;
    }
    // The features as the switch registers them (the RoCE stage; idle without an rdma job).
    if (!app::register_features()) {
        std::fprintf(stderr, "cannot register the features\n");
        return 1;
    }
    // No worker reads the tables concurrently here: a QSBR variable with no readers.
    auto* qsbr = static_cast<rte_rcu_qsbr*>(
        rte_zmalloc("bench_qsbr", rte_rcu_qsbr_get_memsize(1), RTE_CACHE_LINE_SIZE));
    if (qsbr == nullptr || rte_rcu_qsbr_init(qsbr, 1) != 0) {
        std::fprintf(stderr, "cannot allocate the QSBR variable\n");
        return 1;
    }
    g.pool = rte_pktmbuf_pool_create("bench", 16383, 256, 0,
                                     static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + 9000),
                                     SOCKET_ID_ANY);
    if (g.pool == nullptr || !start_sink_ports(lanes)) {
        std::fprintf(stderr, "cannot create the pool or the net_null ports\n");
        return 1;
    }
    if (roce) {
        return run_roce(payload, type, seconds, qsbr, !root, pmtu, nic_input, deterministic);
    }
    if (s2s) {
        return run_s2s(payload, type, seconds, qsbr);
    }
    std::string neighbours;
    // A root's results go to the workers by unicast: 10.0.2.11.. behind "up" (the sink).
    std::string result_workers;
    if (root) {
        result_workers = ", results: unicast, workers: [";
        for (unsigned w = 1; w <= workers; ++w) {
            const std::string ip = "10.0.2." + std::to_string(10 + w);
            neighbours += "  - {ip: " + ip + ", mac: \"02:00:00:00:02:" + std::to_string(10 + w) +
                          "\", port: up}\n";
            result_workers += (w == 1 ? "" : ", ") + std::string("{bfr_id: ") +
                              std::to_string(w) + ", ip: " + ip + "}";
        }
        result_workers += "]";
    }
    for (unsigned i = 2; i < (l3 ? 202u : 3u); ++i) {
        neighbours += "  - {ip: 10.0.2." + std::to_string(i) + ", mac: \"02:00:00:00:02:" +
                      std::to_string(10 + i % 90) + "\", port: up}\n";
    }
    const std::string yaml = std::string(kPortsYaml) + neighbours + (l3 ? std::string() : R"(ina:
  jobs:
    - {job_id: 1, role: )" + role + R"(, bsl: 64, abm: "1-)" + std::to_string(workers) +
                             R"(", op: sum, elem_type: )" + type +
                             ", max_elements: " + std::to_string(elems) +
                             (deterministic ? ", deterministic: true" : "") +
                             ", window: " + std::to_string(window) +
                             ", root: 10.0.2.2" + result_workers + "}\n");
    auto bench = build_bench_snapshot(yaml, qsbr, tx_checksum_offload);
    auto& snap = bench.built.snapshot;
    if (!snap) {
        return 1;
    }
    ina::JobParams jp;
    jp.job_id = 1;
    jp.abm = l3 ? *wire::BitString::from_bfr_ids(64, 0, std::vector<uint16_t>{1})
                : snap->ina_jobs[0].abm;
    jp.op = reduce::Op::sum;
    jp.elem_type = static_cast<reduce::ElemType>(et);
    jp.max_elems = elems;
    jp.window = window;
    jp.role = root ? ina::Role::root : ina::Role::aggregator;
    jp.result_cache = l3 ? 0 : config::ina_result_cache(bench.cfg.config->ina.jobs.at(0));
    jp.idle_timeout = ~uint64_t{0} / 4;
    jp.deterministic = deterministic;
    jp.fraction_bits = deterministic ? static_cast<uint8_t>(reduce::default_fraction_bits(jp.elem_type))
                                     : 0;

    std::vector<std::vector<uint8_t>> templates;
    for (unsigned w = 1; w <= (l3 ? 200u : workers); ++w) {
        templates.push_back(l3 ? bench::l3_frame(w)
                               : bench::ina_contribution(static_cast<uint16_t>(w), elems, et,
                                                         udp_checksum));
    }
    if (l3) {
        workers = 200;  // the generator cycles through the 200 destinations
        g.seq_off = 0;  // no sequence number: the generator rewrites the first byte as it is
    }
    g.snap = snap.get();
    g.templates = &templates;
    g.udp_checksum = udp_checksum && !l3;
    if (!l3) {
        g.seq_off = 14 + 20 + 8 + 12;
    }
    g.lanes = lanes;
    if (nic_input) {
        g.header_bytes = templates[0].size() - size_t{elems} * esize;  // up to the payload
    }

    std::vector<Lane> all(lanes);
    g.all = &all;
    std::vector<std::unique_ptr<pipeline::LcoreContext>> ctxs;
    const bool handoff = lanes > 1 && steer == "handoff";
    for (unsigned k = 0; k < lanes; ++k) {
        Lane& lane = all[k];
        lane.index = k;
        ctxs.push_back(lane_context(static_cast<uint16_t>(k)));
        auto* ctx = ctxs.back().get();
        lane.pool = g.pool;
        if (nic_input) {
            // Room for a deterministic partial (int64 elements: up to 4 x a 16-bit payload).
            const unsigned room = RTE_PKTMBUF_HEADROOM + (deterministic ? 4 : 1) * payload + 256;
            lane.pool = nic_pool(k, templates, room);
            if (lane.pool == nullptr) {
                return 1;
            }
            ctx->pool = lane.pool;  // its partials, as a switch's lcore allocates them
        }
        ina::JobParams lane_jp = jp;
        if (handoff) {
            lane_jp.lanes = static_cast<uint16_t>(lanes);
            lane_jp.lane = static_cast<uint16_t>(k);
        }
        lane.table = std::make_unique<ChunkTable>(lane_jp);
        // --l3 runs without a job: nothing to attach, no packet reaches the INA stage.
        if (!l3 && !pipeline::attach_ina_table(*ctx, *snap, 1, 0, lane.table.get())) {
            std::fprintf(stderr, "cannot attach the chunk table\n");
            return 1;
        }
        lane.ctx = ctx;
        if (handoff) {
            for (unsigned w = 0; w < workers; ++w) {
                if (w % lanes == k) {
                    lane.my_workers.push_back(static_cast<uint16_t>(w));
                }
            }
            lane.seq_first = 0;
            lane.seq_step = 1;
            ctx->n_workers = static_cast<uint16_t>(lanes);
            ctx->worker_index = static_cast<uint16_t>(k);
            lane.in = rte_ring_create(("perfho" + std::to_string(k)).c_str(), 4096, SOCKET_ID_ANY,
                                      RING_F_SP_ENQ | RING_F_SC_DEQ);
            if (lane.in == nullptr) {
                std::fprintf(stderr, "cannot create the hand-off ring\n");
                return 1;
            }
        } else {
            for (unsigned w = 0; w < workers; ++w) {
                lane.my_workers.push_back(static_cast<uint16_t>(w));
            }
            lane.seq_first = k;
            lane.seq_step = lanes;
        }
    }
    if (handoff) {
        for (unsigned k = 0; k < lanes; ++k) {
            for (unsigned o = 0; o < lanes; ++o) {
                all[k].ctx->handoff[o] = o == k ? nullptr : all[o].in;
            }
        }
    }

    const uint64_t hz = rte_get_tsc_hz();
    const uint64_t start = rte_rdtsc();
    g.end_tsc = start + static_cast<uint64_t>(seconds * static_cast<double>(hz));
    unsigned k = 1;
    unsigned lcore = 0;
    RTE_LCORE_FOREACH_WORKER(lcore) {
        if (k < lanes && !one_thread) {
            rte_eal_remote_launch(run_lane, &all[k++], lcore);
        }
    }
    if (one_thread) {
        run_serial(all);
    } else {
        while (g.ready.load() + 1 < lanes) {
        }
        g.go.store(true, std::memory_order_release);
        run_lane(&all[0]);
        rte_eal_mp_wait_lcore();
    }
    const double elapsed = static_cast<double>(rte_rdtsc() - start) / static_cast<double>(hz);

    uint64_t packets = 0;
    uint64_t absorbed = 0;
    uint64_t completed = 0;
    uint64_t sent = 0;
    bool failed = false;
    uint64_t cpu_ns = 1;  // the busiest lane's CPU time
    for (const Lane& lane : all) {
        packets += lane.packets;
        cpu_ns = std::max(cpu_ns, lane.cpu_ns);
        const auto& c = lane.table->counters();
        absorbed += c[ina::Verdict::absorbed] + c[ina::Verdict::completed];
        completed += c[ina::Verdict::completed];
        sent += lane.ctx->counters.ports[kSinkPort].tx_packets;
        failed = failed || lane.failed;
    }
    std::printf("{\"traffic\": \"%s\", \"role\": \"%s\", \"workers\": %u, \"payload_bytes\": %u, \"type\": \"%s\", \"isa\": \"%s\", "
                "\"lcores\": %u, \"steer\": \"%s\", \"one_thread\": %s, \"deterministic\": %s, "
                "\"udp_checksum\": %s, \"tx_checksum_offload\": %s, \"generator_only\": %s, \"input\": \"%s\", "
                "\"mpps\": %.3f, \"payload_gbit_s\": %.2f, \"gelem_s\": %.3f, "
                "\"absorbed\": %lu, \"completed\": %lu, \"frames_out\": %lu, "
                "\"packets\": %lu, \"seconds\": %.3f, \"cpu_mpps\": %.3f}\n",
                l3 ? "l3" : "ina", l3 ? "none" : role.c_str(), workers, elems * static_cast<unsigned>(esize), type.c_str(),
                std::string(reduce::to_string(reduce::kernels().isa)).c_str(), lanes,
                lanes > 1 ? steer.c_str() : "none", one_thread && lanes > 1 ? "true" : "false",
                deterministic ? "true" : "false", g.udp_checksum ? "true" : "false",
                snap->udp_checksum_offload ? "true" : "false", g.generator_only ? "true" : "false",
                input.c_str(), static_cast<double>(packets) / elapsed / 1e6,
                static_cast<double>(packets) * elems * static_cast<double>(esize) * 8 / elapsed / 1e9,
                static_cast<double>(absorbed) * elems / elapsed / 1e9,
                static_cast<unsigned long>(absorbed), static_cast<unsigned long>(completed),
                static_cast<unsigned long>(sent), static_cast<unsigned long>(packets), elapsed,
                static_cast<double>(packets) / static_cast<double>(cpu_ns) * 1e3);
    std::fflush(stdout);
    // Every generated contribution is absorbed (those still in a hand-off ring at the end aside),
    // and every completed chunk left through the sink port (a root's as one copy per worker).
    const bool ok = g.generator_only ? !failed && packets > 0
                    : l3 ? !failed && sent == packets
                         : !failed && absorbed + 8192 >= packets && completed > 0 &&
                               sent == completed * (root ? workers : 1);
    for (uint16_t port = 0; port < 2; ++port) {
        rte_eth_dev_stop(port);
        rte_eth_dev_close(port);
    }
    snap.reset();  // DPDK objects go before the EAL does
    return ok ? 0 : 1;
}
