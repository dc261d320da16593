// SPDX-License-Identifier: Apache-2.0
// INA aggregation rate of one lcore: an in-process generator builds N workers' contributions
// (chunk after chunk, so sequence numbers never repeat) into mbufs and runs them through the
// real pipeline (process_burst: eth_input, ina_input with its chunk table and SIMD kernels,
// ipv4_forward, port_tx). Completed chunks leave as partial results to the parent; the TX
// buffers are the sink. Prints one JSON line.
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_udp.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/snapshot.h"
#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "net/checksum.h"
#include "pipeline/context.h"
#include "pipeline/pipeline.h"
#include "reduce/reduce.h"

namespace {

using namespace ina;

std::vector<uint8_t> frame_for(uint16_t bfr_id, uint16_t elems, uint8_t elem_type, size_t esize) {
    proto::Header h;
    h.type = proto::PacketType::data;
    h.op = 0;
    h.elem_type = elem_type;
    h.bsl_code = 1;
    h.job_id = 1;
    h.elem_count = elems;
    const uint16_t ids[] = {bfr_id};
    const auto bs = *wire::BitString::from_bfr_ids(64, 0, ids);
    const size_t ina_len = h.total_bytes();
    std::vector<uint8_t> f(14 + 20 + 8 + ina_len, 0);
    const uint8_t dst_mac[6] = {0x02, 0, 0, 0, 0, 0x01};
    std::memcpy(f.data(), dst_mac, 6);
    f[6] = 0x02;
    f[11] = static_cast<uint8_t>(bfr_id);
    f[12] = 0x08;
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(f.data() + 14);
    ip->version_ihl = 0x45;
    ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(20 + 8 + ina_len));
    ip->time_to_live = 64;
    ip->next_proto_id = IPPROTO_UDP;
    ip->src_addr = rte_cpu_to_be_32(0x0A000100u + bfr_id);
    ip->dst_addr = rte_cpu_to_be_32(0x0A000202u);
    ip->hdr_checksum = net::internet_checksum(ip, 20);
    auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + 1);
    udp->src_port = rte_cpu_to_be_16(40000);
    udp->dst_port = rte_cpu_to_be_16(proto::kDefaultUdpPort);
    udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(8 + ina_len));
    uint8_t* hdr = reinterpret_cast<uint8_t*>(udp + 1);
    const size_t at = proto::write_header(hdr, h, bs.data());
    for (size_t i = 0; i < elems * esize; ++i) {
        hdr[at + i] = static_cast<uint8_t>(i * 7 + bfr_id);  // any bit pattern; fp NaN-free
    }
    if (elem_type == 1 || elem_type == 3) {  // keep floats finite: clear the exponent's top bit
        for (size_t i = esize - 1; i < elems * esize; i += esize) {
            hdr[at + i] &= 0x3F;
        }
    }
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"INA aggregation rate of one lcore (in-process generator)"};
    unsigned workers = 8;
    unsigned payload = 1024;
    std::string type = "fp32";
    double seconds = 2.0;
    std::string prefix = "ina-bench";
    app.add_option("--workers", workers, "contributors per chunk (BFR-ids 1..N)")->check(CLI::Range(2, 64));
    app.add_option("--payload", payload, "payload bytes per packet")->check(CLI::Range(64, 8192));
    app.add_option("--type", type, "int32, fp32, fp16 or bf16");
    app.add_option("--seconds", seconds, "measurement time");
    app.add_option("--file-prefix", prefix, "EAL file prefix");
    CLI11_PARSE(app, argc, argv);

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
    std::vector<const char*> eal = {"ina_bench", "--no-huge", "-m", "512", "--no-pci",
                                    "--log-level=*:error", fp.c_str(), "-l", "0"};
    if (rte_eal_init(static_cast<int>(eal.size()), const_cast<char**>(eal.data())) < 0) {
        std::fprintf(stderr, "EAL init failed\n");
        return 1;
    }
    const std::string yaml = R"(version: 1
ports:
  - {name: in, devargs: x, mac: "02:00:00:00:00:01", ipv4: [10.0.1.1/24]}
  - {name: up, devargs: y, mac: "02:00:00:00:00:02", ipv4: [10.0.2.1/24]}
neighbours:
  - {ip: 10.0.2.2, mac: "02:00:00:00:02:02", port: up}
ina:
  jobs:
    - {job_id: 1, role: aggregator, bsl: 64, abm: "1-)" + std::to_string(workers) +
                             R"(", op: sum, elem_type: )" + type +
                             ", max_elements: " + std::to_string(elems) +
                             ", window: 1024, root: 10.0.2.2}\n";
    auto cfg = config::load_string(yaml, "bench");
    if (!cfg.ok()) {
        std::fprintf(stderr, "%s", cfg.error_text().c_str());
        return 1;
    }
    std::string error;
    auto snap = dp::Snapshot::build(*cfg.config, {{0, {}}, {1, {}}}, {}, {}, 1, error);
    if (!snap) {
        std::fprintf(stderr, "%s\n", error.c_str());
        return 1;
    }
    ina::JobParams jp;
    jp.job_id = 1;
    jp.abm = snap->ina_jobs[0].abm;
    jp.op = reduce::Op::sum;
    jp.elem_type = static_cast<reduce::ElemType>(et);
    jp.max_elems = elems;
    jp.window = 1024;
    jp.role = ina::Role::aggregator;
    jp.idle_timeout = ~uint64_t{0} / 4;
    ina::ChunkTable table(jp);

    rte_mempool* pool = rte_pktmbuf_pool_create("bench", 8191, 256, 0,
                                                static_cast<uint16_t>(RTE_PKTMBUF_HEADROOM + 9000),
                                                SOCKET_ID_ANY);
    auto ctx = std::make_unique<pipeline::LcoreContext>();
    ctx->burst_size = 32;
    ctx->tsc_hz = rte_get_tsc_hz();
    ctx->pool = pool;
    ctx->ina[0] = {1, &table};
    ctx->n_ina = 1;

    std::vector<std::vector<uint8_t>> templates;
    for (unsigned w = 1; w <= workers; ++w) {
        templates.push_back(frame_for(static_cast<uint16_t>(w), elems, et, esize));
    }
    const size_t seq_off = 14 + 20 + 8 + 12;
    const uint64_t hz = rte_get_tsc_hz();
    const uint64_t end = rte_rdtsc() + static_cast<uint64_t>(seconds * static_cast<double>(hz));
    uint64_t packets = 0;
    uint32_t seq = 0;
    unsigned w = 0;
    rte_mbuf* burst[32];
    const uint64_t start = rte_rdtsc();
    uint64_t now = start;
    while (now < end) {
        if (rte_pktmbuf_alloc_bulk(pool, burst, 32) != 0) {
            std::fprintf(stderr, "mempool exhausted\n");
            return 1;
        }
        for (auto* m : burst) {
            const auto& t = templates[w];
            auto* d = rte_pktmbuf_mtod(m, uint8_t*);
            std::memcpy(d, t.data(), t.size());
            const uint32_t be = rte_cpu_to_be_32(seq);
            std::memcpy(d + seq_off, &be, 4);
            m->data_len = static_cast<uint16_t>(t.size());
            m->pkt_len = static_cast<uint32_t>(t.size());
            m->port = 0;
            if (++w == workers) {
                w = 0;
                ++seq;
            }
        }
        now = rte_rdtsc();
        ctx->now_tsc = now;
        pipeline::process_burst(*ctx, *snap, burst, 32);
        // The uplink's TX buffer is the sink: free what the pipeline queued.
        for (auto& buf : ctx->tx) {
            if (buf.count != 0) {
                rte_pktmbuf_free_bulk(buf.pkts.data(), buf.count);
                buf.count = 0;
            }
        }
        packets += 32;
    }
    const double elapsed = static_cast<double>(rte_rdtsc() - start) / static_cast<double>(hz);
    const auto& c = table.counters();
    const uint64_t absorbed = c[ina::Verdict::absorbed] + c[ina::Verdict::completed];
    std::printf("{\"workers\": %u, \"payload_bytes\": %u, \"type\": \"%s\", \"isa\": \"%s\", "
                "\"mpps\": %.3f, \"payload_gbit_s\": %.2f, \"gelem_s\": %.3f, "
                "\"absorbed\": %lu, \"completed\": %lu, \"packets\": %lu}\n",
                workers, elems * static_cast<unsigned>(esize), type.c_str(),
                std::string(reduce::to_string(reduce::kernels().isa)).c_str(),
                static_cast<double>(packets) / elapsed / 1e6,
                static_cast<double>(packets) * elems * static_cast<double>(esize) * 8 / elapsed / 1e9,
                static_cast<double>(absorbed) * elems / elapsed / 1e9,
                static_cast<unsigned long>(absorbed),
                static_cast<unsigned long>(c[ina::Verdict::completed]),
                static_cast<unsigned long>(packets));
    std::fflush(stdout);
    const bool ok = absorbed + workers >= packets && c[ina::Verdict::completed] > 0;
    snap.reset();  // DPDK objects go before the EAL does
    return ok ? 0 : 1;
}
