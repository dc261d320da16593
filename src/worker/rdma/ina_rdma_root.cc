// SPDX-License-Identifier: Apache-2.0
// ina-rdma-root: the host root of server-to-server RDMA AllReduce (docs/rdma.md). Listens with
// rdma_cm on --bind:--port, serves --rounds AllReduces one after the other (each: `world`
// workers connect, WRITE their chunks, get the results, disconnect) and prints one JSON line
// per round. Exit 0 iff every round completed; 1 on an error or the timeout; 2 on bad options.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>

#include "worker/rdma/client.h"
#include "worker/rdma/root.h"

int main(int argc, char** argv) {
    using namespace ina;
    CLI::App app{"ina-rdma-root: host root of server-to-server RDMA AllReduce"};
    std::string bind;
    uint16_t port = rdma::kDefaultPort;
    uint32_t rounds = 1;
    uint32_t timeout_ms = 120000;
    rdma::RootOptions o;
    app.add_option("--bind", bind, "address of the local RDMA device to listen on")->required();
    app.add_option("--port", port, "rdma_cm port")->default_val(rdma::kDefaultPort);
    app.add_option("--world", o.expected_world, "workers per AllReduce (0: the first worker's)")
        ->default_val(0)->check(CLI::Range(0u, unsigned{rdma::kMaxWorld}));
    app.add_option("--rounds", rounds, "AllReduces to serve, one after the other")
        ->default_val(1)->check(CLI::Range(1u, 1000000u));
    app.add_option("--timeout-ms", timeout_ms, "deadline of each round, from its start")
        ->default_val(120000);
    app.add_option("--max-memory-mb", o.max_memory_mb, "cap on registered memory per round")
        ->default_val(1024);
    app.add_option("--disconnect-grace-ms", o.disconnect_grace_ms,
                   "results written: how long to wait for the workers to disconnect before "
                   "disconnecting them")
        ->default_val(5000);
    std::string results = "per-worker";
    app.add_option("--results", results,
                   "per-worker: each result WRITE to every worker; once: on the carrier "
                   "(rank 1) only, for a switch with replicate: true")
        ->default_val("per-worker")->check(CLI::IsMember({"per-worker", "once"}));
    CLI11_PARSE(app, argc, argv);
    o.results = results == "once" ? rdma::ResultMode::once : rdma::ResultMode::per_worker;

    try {
        rdma::EventChannel channel;
        rdma::CmId listener = rdma::listen(channel, bind, port, 64);
        std::printf("{\"listening\": \"%s\", \"port\": %u}\n", bind.c_str(), unsigned{port});
        std::fflush(stdout);
        std::optional<rdma::CmEvent> carried;  // the next round's first connect request
        for (uint32_t r = 1; r <= rounds; ++r) {
            const auto deadline =
                rdma::Clock::now() + std::chrono::milliseconds(timeout_ms);
            const rdma::RoundStats st = rdma::serve_round(channel, o, deadline, carried);
            std::printf(
                "{\"ok\": true, \"round\": %u, \"job\": %u, \"type\": \"%s\", \"op\": \"%s\", "
                "\"world\": %u, \"elements\": %llu, \"chunk_bytes\": %u, \"window\": %u, "
                "\"chunks\": %u, \"contributions\": %llu, \"contribution_count\": %llu, "
                "\"results\": \"%s\", \"results_written\": %llu, \"rejected\": %llu, "
                "\"resumes\": %llu, \"resent_discarded\": %llu, \"seconds\": %.6f}\n",
                r, st.job.job_id, std::string(reduce::to_string(st.job.elem_type)).c_str(),
                std::string(reduce::to_string(st.job.op)).c_str(), unsigned{st.job.world},
                static_cast<unsigned long long>(st.job.elements), st.job.chunk_bytes,
                st.job.window, st.chunks, static_cast<unsigned long long>(st.contributions),
                static_cast<unsigned long long>(st.contribution_count), results.c_str(),
                static_cast<unsigned long long>(st.results_written),
                static_cast<unsigned long long>(st.rejected),
                static_cast<unsigned long long>(st.resumes),
                static_cast<unsigned long long>(st.resent_discarded), st.seconds);
            std::fflush(stdout);
        }
        return 0;
    } catch (const rdma::Error& e) {
        std::printf("{\"ok\": false, \"error\": \"%s\"}\n", e.what());
        std::fprintf(stderr, "ina-rdma-root: %s\n", e.what());
        return 1;
    }
}
