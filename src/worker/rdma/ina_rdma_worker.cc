// SPDX-License-Identifier: Apache-2.0
// ina-rdma-worker: one worker of an RDMA AllReduce (docs/rdma.md, src/worker/README.md). Reduces
// a generated tensor (from --seed and its rank, as ina-worker does) or a file through a root and
// verifies a generated one against the locally computed reference of ranks 1..world. Prints
// one JSON line; exit 0 iff the AllReduce completed and verified, 1 otherwise, 2 on bad options.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "worker/rdma/client.h"
#include "worker/testdata.h"

int main(int argc, char** argv) {
    using namespace ina;
    CLI::App app{"ina-rdma-worker: one worker of an RDMA AllReduce with a self-checking tensor"};
    rdma::ClientOptions o;
    std::string mode = "server-to-server";
    std::string type_name = "fp32";
    std::string op_name = "sum";
    uint64_t elements = 1 << 18;
    uint64_t seed = 1;
    uint32_t timeout_ms = 60000;
    std::string input_path, output_path;
    app.add_option("--mode", mode, "server-to-server: WRITE to ina-rdma-root (directly or "
                                   "through a switch)")->default_val("server-to-server");
    app.add_option("--root", o.root, "the root's IP address")->required();
    app.add_option("--port", o.port, "the root's rdma_cm port")->default_val(rdma::kDefaultPort);
    app.add_option("--job", o.job_id, "job id")->required();
    app.add_option("--rank", o.rank, "this worker's BFR-id, 1..world")->required();
    app.add_option("--world", o.world, "workers in the job")->required();
    app.add_option("--type", type_name, "int32|fp32|fp16|bf16|int64|fp64")->default_val("fp32");
    app.add_option("--op", op_name, "sum|prod|min|max")->default_val("sum");
    app.add_option("--elements", elements, "tensor elements (generated data)")
        ->default_val(1 << 18);
    app.add_option("--chunk-bytes", o.chunk_bytes, "bytes per WRITE (a multiple of the element)")
        ->default_val(1024);
    app.add_option("--window", o.window, "WRITEs in flight")->default_val(32);
    app.add_option("--seed", seed, "data seed")->default_val(1);
    app.add_option("--timeout-ms", timeout_ms, "overall deadline")->default_val(60000);
    app.add_option("--input", input_path,
                   "reduce this file (raw little-endian elements of --type) instead of generated "
                   "data; nothing is verified then");
    app.add_option("--output", output_path, "write the reduced tensor here (raw, little-endian)");
    CLI11_PARSE(app, argc, argv);

    const auto elem_type = rdma::parse_elem_type(type_name);
    const auto op = rdma::parse_op(op_name);
    if (!elem_type || !op) {
        std::fprintf(stderr, "ina-rdma-worker: unknown --type or --op\n");
        return 2;
    }
    if (mode != "server-to-server") {
        // server-to-switch needs the switch's RDMA endpoint (docs/rdma.md): not built yet.
        std::fprintf(stderr, "ina-rdma-worker: --mode %s is not available; only "
                             "server-to-server\n", mode.c_str());
        return 2;
    }
    o.elem_type = *elem_type;
    o.op = *op;
    o.timeout = std::chrono::milliseconds(timeout_ms);

    try {
        rdma::Client client(o);
        const size_t esize = reduce::elem_size(o.elem_type);
        std::vector<std::byte> input;
        if (!input_path.empty()) {
            std::ifstream in(input_path, std::ios::binary);
            if (!in.is_open()) {
                throw rdma::Error("cannot read --input " + input_path);
            }
            const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                          std::istreambuf_iterator<char>()};
            input.resize(bytes.size());
            std::memcpy(input.data(), bytes.data(), bytes.size());
            if (input.empty() || input.size() % esize != 0) {
                throw rdma::Error("--input " + input_path + ": expected a non-empty whole number "
                                  "of " + std::to_string(esize) + "-byte elements");
            }
            elements = input.size() / esize;
        } else {
            input = worker::generate(o.elem_type, elements, seed, o.rank);
        }
        std::vector<std::byte> output(input.size());
        const rdma::ClientStats st = client.allreduce(input, output);
        worker::Verification v;
        if (input_path.empty()) {
            std::vector<wire::BfrId> ids(o.world);
            std::iota(ids.begin(), ids.end(), wire::BfrId{1});
            const auto ref = worker::reference(o.elem_type, o.op, elements, seed, ids);
            v = worker::verify(o.elem_type, o.op, elements, seed, ids, ref, output);
        }
        if (!output_path.empty()) {
            std::ofstream out(output_path, std::ios::binary);
            out.write(reinterpret_cast<const char*>(output.data()),
                      static_cast<std::streamsize>(output.size()));
            if (!out) {
                throw rdma::Error("cannot write --output " + output_path);
            }
        }
        std::printf(
            "{\"ok\": %s, \"verified\": %s, \"rank\": %u, \"world\": %u, \"type\": \"%s\", "
            "\"elements\": %llu, \"chunks\": %u, \"writes\": %llu, \"results\": %llu, "
            "\"mismatches\": %zu, \"max_abs_err\": %g, \"connect_seconds\": %.6f, "
            "\"seconds\": %.6f, \"gbit_per_s\": %.6f, \"disconnect_error\": \"%s\"}\n",
            v.ok ? "true" : "false", input_path.empty() ? "true" : "false", unsigned{o.rank},
            unsigned{o.world}, type_name.c_str(), static_cast<unsigned long long>(elements),
            st.chunks, static_cast<unsigned long long>(st.writes),
            static_cast<unsigned long long>(st.results), v.mismatches, v.max_abs_err,
            st.connect_seconds, st.seconds, st.goodput_gbit_per_s, st.disconnect_error.c_str());
        if (!v.ok) {
            std::fprintf(stderr, "ina-rdma-worker: verification failed (%zu mismatches): %s\n",
                         v.mismatches, v.detail.c_str());
        }
        std::fflush(stdout);
        return v.ok ? 0 : 1;
    } catch (const rdma::Error& e) {
        std::printf("{\"ok\": false, \"rank\": %u, \"error\": \"%s\"}\n", unsigned{o.rank},
                    e.what());
        std::fprintf(stderr, "ina-rdma-worker: %s\n", e.what());
        return 1;
    }
}
