// SPDX-License-Identifier: Apache-2.0
// Added latency of one switch hop, in one process on two lcores:
//
//   lcore 0: paced generator ──ring──► net_ring port "in" ─┐
//                                                         │  lcore 1: the switch's own worker
//   lcore 0: collector ◄──ring── net_ring port "out" ◄─────┘  loop (worker_main: rx_burst,
//                                                            process_burst, port_tx, drain timer)
//
// The generator stamps the TSC into each frame as it puts it on the "in" port's RX ring (the
// moment a NIC would have received it); the collector reads the TSC when it takes the frame off
// the "out" port's TX ring (the moment a NIC would have sent it). The difference is the time
// the frame spent in the switch: waiting in the RX ring for the worker's next poll, the
// pipeline, and the TX buffer (full burst, drained RX queues, or drain timer).
//
// Traffic:
//   l3   64 B IPv4/UDP frames routed from "in" to "out" (the stamp rides in the UDP payload);
//   ina  N workers' contributions (1 KiB fp32 by default) to a job the switch aggregates; the
//        latency of a chunk is from its last contribution in to its partial result out (the
//        generator remembers when it sent each chunk's last contribution).
// Phases: the peak (generator unpaced, the rate the collector sees), then each --load fraction
// of that peak, paced. A floor run (generator straight into the collector's ring, no switch)
// measures the harness itself. Prints one JSON line.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_udp.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "dataplane/snapshot.h"
#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "bench/frames.h"
#include "net/checksum.h"
#include "pipeline/feature_stages.h"
#include "pipeline/mbuf_chain.h"
#include "runtime/dataplane.h"

namespace {

using namespace ina;

using bench::kL2L3L4;
constexpr size_t kSeqOff = kL2L3L4 + 12;  // INA header: seq at octet 12
constexpr uint32_t kSeqSlots = 1u << 16;

// Latency histogram: 10 ns buckets up to 2 ms, the rest counted as overflow (and in max).
struct Histogram {
    static constexpr size_t kBuckets = 200000;
    static constexpr double kBucketNs = 10.0;
    std::vector<uint64_t> b = std::vector<uint64_t>(kBuckets + 1, 0);
    uint64_t n = 0;
    double max_ns = 0;
    double sum_ns = 0;

    void add(double ns) {
        const auto i = static_cast<size_t>(std::max(0.0, ns) / kBucketNs);
        ++b[std::min(i, kBuckets)];
        ++n;
        sum_ns += ns;
        max_ns = std::max(max_ns, ns);
    }
    double quantile(double q) const {
        if (n == 0) {
            return 0;
        }
        const auto target = static_cast<uint64_t>(std::ceil(q * static_cast<double>(n)));
        uint64_t acc = 0;
        for (size_t i = 0; i <= kBuckets; ++i) {
            acc += b[i];
            if (acc >= target) {
                return i == kBuckets ? max_ns : (static_cast<double>(i) + 0.5) * kBucketNs;
            }
        }
        return max_ns;
    }
};


struct Phase {
    double fraction = 0;  // of the peak; 0 = unpaced (the peak run)
    double offered_mpps = 0;
    double delivered_mpps = 0;
    uint64_t sent = 0;
    uint64_t refused = 0;    // generator iterations the switch's full RX ring held back
    uint64_t fallbacks = 0;  // ina: contributions forwarded unaggregated (should be 0)
    Histogram h;
};

struct Harness {
    bool ina = false;
    unsigned workers = 8;
    std::vector<std::vector<uint8_t>> templates;
    rte_mempool* pool = nullptr;
    rte_ring* gen_to = nullptr;    // where the generator puts frames
    rte_ring* collect = nullptr;   // where the collector takes them from
    std::vector<uint64_t> last_sent = std::vector<uint64_t>(kSeqSlots, 0);  // ina: per seq
    uint32_t seq = 0;
    unsigned w = 0;
    uint64_t hz = rte_get_tsc_hz();

    void fill(rte_mbuf* m, uint64_t stamp) {
        const auto& t = templates[ina ? w : 0];
        auto* d = rte_pktmbuf_mtod(m, uint8_t*);
        std::memcpy(d, t.data(), t.size());
        m->data_len = static_cast<uint16_t>(t.size());
        m->pkt_len = static_cast<uint32_t>(t.size());
        m->port = 0;  // net_ring does not stamp the input port, as a NIC's RX would
        if (ina) {
            const uint32_t be = rte_cpu_to_be_32(seq);
            std::memcpy(d + kSeqOff, &be, 4);
            if (++w == workers) {
                last_sent[seq % kSeqSlots] = stamp;
                w = 0;
                ++seq;
            }
        } else {
            std::memcpy(d + kL2L3L4, &stamp, 8);
        }
    }

    // Takes what reached the collector; records latencies once `record` is true.
    unsigned drain(Phase& p, bool record) {
        rte_mbuf* got[64];
        const unsigned n = rte_ring_sc_dequeue_burst(collect, reinterpret_cast<void**>(got), 64,
                                                     nullptr);
        if (n == 0) {
            return 0;
        }
        const uint64_t now = rte_rdtsc();
        if (record) {
            for (unsigned i = 0; i < n; ++i) {
                const auto* d = rte_pktmbuf_mtod(got[i], const uint8_t*);
                uint64_t stamp = 0;
                if (ina) {
                    if ((d[kL2L3L4 + 3] & proto::kFlagFallback) != 0) {
                        ++p.fallbacks;  // not a partial result: no chunk latency
                        continue;
                    }
                    uint32_t be = 0;
                    std::memcpy(&be, d + kSeqOff, 4);
                    stamp = last_sent[rte_be_to_cpu_32(be) % kSeqSlots];
                } else {
                    std::memcpy(&stamp, d + kL2L3L4, 8);
                }
                p.h.add(static_cast<double>(now - stamp) * 1e9 / static_cast<double>(hz));
            }
        }
        rte_pktmbuf_free_bulk(got, n);
        return n;
    }

    // rate_pps 0: unpaced. Returns the phase with latencies of what was sent after warm-up.
    Phase run(double rate_pps, double seconds, double warmup) {
        Phase p;
        const uint64_t start = rte_rdtsc();
        const uint64_t warm_end = start + static_cast<uint64_t>(warmup * static_cast<double>(hz));
        const uint64_t end = warm_end + static_cast<uint64_t>(seconds * static_cast<double>(hz));
        uint64_t sent_total = 0;
        uint64_t delivered = 0;
        uint64_t sent_measured = 0;
        rte_mbuf* burst[32];
        uint64_t now = start;
        while (now < end) {
            unsigned want = 32;
            if (rate_pps > 0) {
                const double due = static_cast<double>(now - start) / static_cast<double>(hz) *
                                   rate_pps;
                const double owed = due - static_cast<double>(sent_total);
                want = owed <= 0 ? 0 : static_cast<unsigned>(std::min(owed, 32.0));
            }
            // A lossless source: it sends only what the RX ring can take (a NIC with flow
            // control), so no chunk is left incomplete by a refused contribution; when the ring
            // is full the generator falls behind its schedule and catches up in bursts.
            if (want != 0 && rte_ring_free_count(gen_to) < want) {
                if (now >= warm_end) {
                    ++p.refused;  // times the switch pushed back
                }
                want = 0;
            }
            if (want != 0 && rte_pktmbuf_alloc_bulk(pool, burst, want) == 0) {
                now = rte_rdtsc();
                for (unsigned i = 0; i < want; ++i) {
                    fill(burst[i], now);
                }
                rte_ring_sp_enqueue_bulk(gen_to, reinterpret_cast<void**>(burst), want, nullptr);
                sent_total += want;
                if (now >= warm_end) {
                    sent_measured += want;
                }
            }
            const unsigned n = drain(p, now >= warm_end);
            if (now >= warm_end) {
                delivered += n;
            }
            now = rte_rdtsc();
        }
        // Let the last frames out (the drain timer sends a partial burst within tx_drain_us).
        const uint64_t tail_end = rte_rdtsc() + hz / 100;
        while (rte_rdtsc() < tail_end) {
            delivered += drain(p, true);
        }
        p.sent = sent_measured;
        p.offered_mpps = static_cast<double>(sent_measured) / seconds / 1e6;
        p.delivered_mpps = static_cast<double>(delivered) / seconds / 1e6;
        return p;
    }
};

void print_phase(const char* name, const Phase& p, bool comma) {
    std::printf("\"%s\": {\"fraction\": %.2f, \"offered_mpps\": %.3f, \"delivered_mpps\": %.3f, "
                "\"refused\": %lu, \"fallbacks\": %lu, \"samples\": %lu, \"p50_us\": %.3f, \"p99_us\": %.3f, "
                "\"p999_us\": %.3f, \"max_us\": %.3f, \"mean_us\": %.3f}%s",
                name, p.fraction, p.offered_mpps, p.delivered_mpps,
                static_cast<unsigned long>(p.refused), static_cast<unsigned long>(p.fallbacks),
                static_cast<unsigned long>(p.h.n),
                p.h.quantile(0.5) / 1e3, p.h.quantile(0.99) / 1e3, p.h.quantile(0.999) / 1e3,
                p.h.max_ns / 1e3, p.h.n ? p.h.sum_ns / static_cast<double>(p.h.n) / 1e3 : 0.0,
                comma ? ", " : "");
}

// The vCPU's own interruptions: a spin on the switch's lcore reading the TSC, every gap longer
// than 2 us recorded (timer ticks, host exits, other tasks). What a busy-polling lcore loses
// whatever it runs: the floor under the switch's tail latency on this machine.
struct Jitter {
    double seconds = 0.5;
    uint64_t gaps = 0;
    double lost_us = 0;
    Histogram h;
};

int jitter_probe(void* arg) {
    auto& j = *static_cast<Jitter*>(arg);
    const uint64_t hz = rte_get_tsc_hz();
    const auto threshold = hz * 2 / 1000000;
    const uint64_t start = rte_rdtsc();
    const uint64_t end = start + static_cast<uint64_t>(j.seconds * static_cast<double>(hz));
    uint64_t last = start;
    while (last < end) {
        const uint64_t now = rte_rdtsc();
        if (now - last > threshold) {
            const double us = static_cast<double>(now - last) * 1e6 / static_cast<double>(hz);
            ++j.gaps;
            j.lost_us += us;
            j.h.add(us * 1e3);
        }
        last = now;
    }
    return 0;
}

uint16_t ring_port(const char* name, rte_ring* rx, rte_ring* tx, rte_mempool* pool) {
    const int port = rte_eth_from_rings(name, &rx, 1, &tx, 1, static_cast<unsigned>(rte_socket_id()));
    if (port < 0) {
        return UINT16_MAX;
    }
    const auto p = static_cast<uint16_t>(port);
    rte_eth_conf conf{};
    if (rte_eth_dev_configure(p, 1, 1, &conf) != 0 ||
        rte_eth_rx_queue_setup(p, 0, 1024, SOCKET_ID_ANY, nullptr, pool) != 0 ||
        rte_eth_tx_queue_setup(p, 0, 1024, SOCKET_ID_ANY, nullptr) != 0 ||
        rte_eth_dev_start(p) != 0) {
        return UINT16_MAX;
    }
    return p;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Added latency of one switch hop (in-process, net_ring ports, TSC stamps)"};
    std::string traffic = "l3";
    unsigned workers = 8;
    unsigned payload = 1024;
    double seconds = 2.0;
    double warmup = 0.3;
    std::vector<double> loads = {0.5, 0.9};
    unsigned drain_us = 100;
    std::string prefix = "perf-latency";
    app.add_option("--traffic", traffic, "l3 or ina")->check(CLI::IsMember({"l3", "ina"}));
    app.add_option("--workers", workers, "ina: contributors per chunk")->check(CLI::Range(2, 64));
    app.add_option("--payload", payload, "ina: fp32 payload bytes")->check(CLI::Range(64, 4096));
    app.add_option("--seconds", seconds, "measurement per phase");
    app.add_option("--warmup", warmup, "seconds before measuring, per phase");
    app.add_option("--load", loads, "fractions of the measured peak")->delimiter(',');
    app.add_option("--tx-drain-us", drain_us, "the switch's dataplane.tx_drain_us");
    app.add_option("--file-prefix", prefix, "EAL file prefix");
    CLI11_PARSE(app, argc, argv);

    std::string fp = "--file-prefix=" + prefix;
    std::vector<const char*> eal = {"latency_bench", "--no-huge", "-m", "512", "--no-pci",
                                    "--log-level=*:error", fp.c_str(), "-l", "0-1"};
    if (rte_eal_init(static_cast<int>(eal.size()), const_cast<char**>(eal.data())) < 0) {
        std::fprintf(stderr, "EAL init failed (needs two lcores)\n");
        return 1;
    }
    if (!ina::pipeline::register_mbuf_flags()) {
        std::fprintf(stderr, "cannot register mbuf flags\n");
        return 1;
    }
    const bool ina = traffic == "ina";
    const auto elems = static_cast<uint16_t>(payload / 4);
    std::string yaml = R"(version: 1
ports:
  - {name: in, devargs: x, mac: "02:00:00:00:00:01", ipv4: [10.0.1.1/24]}
  - {name: out, devargs: y, mac: "02:00:00:00:00:02", ipv4: [10.0.2.1/24]}
neighbours:
  - {ip: 10.0.2.2, mac: "02:00:00:00:02:02", port: out}
)";
    if (ina) {
        yaml += "ina:\n  jobs:\n    - {job_id: 1, role: aggregator, bsl: 64, abm: \"1-" +
                std::to_string(workers) + "\", op: sum, elem_type: fp32, max_elements: " +
                std::to_string(elems) + ", window: 1024, root: 10.0.2.2}\n";
    }
    auto cfg = config::load_string(yaml, "latency");
    if (!cfg.ok()) {
        std::fprintf(stderr, "%s", cfg.error_text().c_str());
        return 1;
    }

    int rc = 0;
    {
        runtime::Dataplane dataplane;
        dataplane.pool = rte_pktmbuf_pool_create("perflat", 16383, 256, 0,
                                                 static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + 2048),
                                                 SOCKET_ID_ANY);
        std::string error;
        if (dataplane.pool == nullptr || !dataplane.init({1}, 1024, error)) {
            std::fprintf(stderr, "dataplane: %s\n", error.c_str());
            return 1;
        }
        auto mk = [](const char* name) {
            return rte_ring_create(name, 1024, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
        };
        rte_ring* in_rx = mk("perf_in_rx");
        rte_ring* in_tx = mk("perf_in_tx");
        rte_ring* out_rx = mk("perf_out_rx");
        rte_ring* out_tx = mk("perf_out_tx");
        rte_ring* floor_ring = mk("perf_floor");
        const uint16_t p_in = ring_port("net_ring_perf_in", in_rx, in_tx, dataplane.pool);
        const uint16_t p_out = ring_port("net_ring_perf_out", out_rx, out_tx, dataplane.pool);
        if (p_in != 0 || p_out != 1 || floor_ring == nullptr) {
            std::fprintf(stderr, "cannot create the net_ring ports (got %u, %u)\n", p_in, p_out);
            return 1;
        }
        auto built = compile::build_standalone(*cfg.config, {{p_in, {}}, {p_out, {}}}, {}, {},
                                               dataplane.qsbr, 1, error);
        auto snap = std::move(built.snapshot);  // the tables it points at stay in `built`
        if (!snap) {
            std::fprintf(stderr, "%s\n", error.c_str());
            return 1;
        }
        ina::JobParams jp;
        std::unique_ptr<ChunkTable> table;
        auto& ctx = *dataplane.workers[0].ctx;
        if (ina) {
            jp.job_id = 1;
            jp.abm = snap->ina_jobs[0].abm;
            jp.op = reduce::Op::sum;
            jp.elem_type = reduce::ElemType::fp32;
            jp.max_elems = elems;
            jp.window = 1024;
            jp.role = ina::Role::aggregator;
            jp.idle_timeout = ~uint64_t{0} / 4;
            table = std::make_unique<ChunkTable>(jp);
            if (!pipeline::attach_ina_table(ctx, *snap, 1, 0, table.get())) {
                std::fprintf(stderr, "cannot attach the chunk table\n");
                return 1;
            }
        }
        ctx.rx[0] = {p_in, 0};
        ctx.n_rx = 1;
        ctx.tx_enabled[p_in] = true;
        ctx.tx_enabled[p_out] = true;
        auto pub = std::make_unique<runtime::Published>();
        pub->snapshot = std::move(snap);
        pub->loop.burst_size = 32;
        pub->loop.drain_tsc = rte_get_tsc_hz() * drain_us / 1000000;
        dataplane.publish(std::move(pub));
        Jitter jitter;
        rte_eal_remote_launch(jitter_probe, &jitter, 1);
        rte_eal_wait_lcore(1);
        rte_eal_remote_launch(runtime::worker_main, &dataplane, 1);

        Harness hs;
        hs.ina = ina;
        hs.workers = workers;
        hs.pool = dataplane.pool;
        if (ina) {
            for (unsigned w = 1; w <= workers; ++w) {
                hs.templates.push_back(bench::ina_contribution(static_cast<uint16_t>(w), elems, 1));
            }
        } else {
            hs.templates.push_back(bench::l3_frame(1));
        }
        // The harness alone: generator straight into the collector's ring.
        hs.gen_to = floor_ring;
        hs.collect = floor_ring;
        const bool ina_saved = hs.ina;
        hs.ina = false;  // the floor measures frames, not chunks
        Phase floor = hs.run(1e6, std::min(seconds, 1.0), warmup);
        hs.ina = ina_saved;

        hs.gen_to = in_rx;
        hs.collect = out_tx;
        Phase peak = hs.run(0, seconds, warmup);
        // Peak in offered (input) packets per second: for ina, contributions; the collector
        // sees one partial per `workers` contributions.
        const double peak_in = ina ? peak.delivered_mpps * workers : peak.delivered_mpps;
        std::vector<Phase> phases;
        for (double f : loads) {
            Phase p = hs.run(f * peak_in * 1e6, seconds, warmup);
            p.fraction = f;
            phases.push_back(std::move(p));
        }
        dataplane.stop.store(true);
        rte_eal_mp_wait_lcore();
        std::printf("{\"traffic\": \"%s\", \"workers\": %u, \"payload_bytes\": %u, "
                    "\"tx_drain_us\": %u, \"burst\": 32, \"peak_in_mpps\": %.3f, ",
                    traffic.c_str(), ina ? workers : 0, ina ? payload : 64, drain_us, peak_in);
        std::printf("\"jitter\": {\"seconds\": %.2f, \"gaps_per_s\": %.1f, \"lost_pct\": %.3f, "
                    "\"gap_p50_us\": %.2f, \"gap_p99_us\": %.2f, \"gap_max_us\": %.2f}, ",
                    jitter.seconds, static_cast<double>(jitter.gaps) / jitter.seconds,
                    jitter.lost_us / (jitter.seconds * 1e6) * 100, jitter.h.quantile(0.5) / 1e3,
                    jitter.h.quantile(0.99) / 1e3, jitter.h.max_ns / 1e3);
        print_phase("floor", floor, true);
        print_phase("peak", peak, true);
        std::printf("\"loads\": [");
        for (size_t i = 0; i < phases.size(); ++i) {
            std::printf("{");
            print_phase("at", phases[i], false);
            std::printf("}%s", i + 1 < phases.size() ? ", " : "");
        }
        std::printf("]}\n");
        std::fflush(stdout);
        if (peak.h.n == 0) {
            rc = 1;
        }
        for (uint16_t p : {p_in, p_out}) {
            rte_eth_dev_stop(p);
        }
        // Frames still in rings when the worker stopped.
        for (rte_ring* r : {in_rx, in_tx, out_rx, out_tx, floor_ring}) {
            rte_mbuf* m = nullptr;
            while (rte_ring_sc_dequeue(r, reinterpret_cast<void**>(&m)) == 0) {
                rte_pktmbuf_free(m);
            }
        }
    }
    rte_eal_cleanup();
    return rc;
}
