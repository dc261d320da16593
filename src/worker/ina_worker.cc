// SPDX-License-Identifier: Apache-2.0
// ina-worker: one INA worker performing one AllReduce of a generated tensor and verifying the
// result against a locally computed reference (every worker's data is generated from the seed
// and its BFR-id). Prints one JSON line; exit 0 iff the AllReduce completed and verified.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <string>

#include "worker/client.h"
#include "worker/testdata.h"

namespace {

template <typename E>
std::map<std::string, E> enum_map(std::initializer_list<std::pair<const std::string, E>> l) {
    return std::map<std::string, E>(l);
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ina;
    CLI::App app{"ina-worker: one INA AllReduce worker with a self-checking generated tensor"};
    worker::ClientOptions o;
    std::string abm_text;
    std::string workers_data;
    std::string type_name = "fp32";
    std::string op_name = "sum";
    uint64_t elements = 1 << 20;
    uint64_t seed = 1;
    uint32_t timeout_ms = 60000;
    double rto_ms = 20;
    app.add_option("--job", o.job_id, "job id")->required();
    app.add_option("--bfr-id", o.bfr_id, "this worker's BFR-id")->required();
    app.add_option("--abm", abm_text, "the job's A-BM as BFR-ids (e.g. 1-4): results must carry it")
        ->required();
    app.add_option("--bsl", o.bsl_bits, "BitString length")->default_val(64);
    app.add_option("--root", o.root, "IPv4 address data packets go to")->required();
    app.add_option("--port", o.port, "INA UDP port (sent to, and bound here)")->default_val(9470);
    app.add_option("--bind", o.bind, "local IPv4 address")->default_val("0.0.0.0");
    app.add_option("--elements", elements, "tensor elements")->default_val(1 << 20);
    app.add_option("--type", type_name, "int32|fp32|fp16|bf16|int64|fp64")->default_val("fp32");
    app.add_option("--op", op_name, "sum|prod|min|max")->default_val("sum");
    app.add_option("--chunk", o.chunk_elems, "elements per packet")->default_val(256);
    app.add_option("--window", o.window, "chunks in flight (<= the switches' job window)")
        ->default_val(64);
    app.add_option("--first-seq", o.first_seq, "sequence number of the first chunk")
        ->default_val(0);
    app.add_option("--timeout-ms", timeout_ms, "overall timeout")->default_val(60000);
    app.add_option("--rto-ms", rto_ms, "retransmission timeout")->default_val(20);
    app.add_option("--steer-ports", o.steer_ports,
                   "send chunk seq from UDP source port base | (seq & (N-1)), N a power of two "
                   "1..64, so a switch's NIC can put each chunk on its owner's queue "
                   "(docs/operations.md \"Chunk steering\"; 1: every datagram from --port)")
        ->default_val(1);
    app.add_option("--steer-base-port", o.steer_base_port,
                   "first source port of --steer-ports (a multiple of N)")
        ->default_val(proto::kDefaultSteerBasePort);
    bool no_gso = false;
    app.add_flag("--no-gso", no_gso,
                 "one datagram per packet (no UDP GSO runs of full-size packets)");
    app.add_option("--seed", seed, "data seed")->default_val(1);
    app.add_option("--workers-data", workers_data,
                   "BFR-ids whose generated data make up the reference (default: --abm)");
    std::string input_path, output_path;
    app.add_option("--input", input_path,
                   "reduce this file's tensor (raw little-endian elements of --type) instead of "
                   "generated data; --elements is then the file's length and nothing is verified");
    app.add_option("--output", output_path, "write the reduced tensor here (raw, little-endian)");
    bool start_on_stdin = false;
    app.add_flag("--start-on-stdin", start_on_stdin,
                 "once the tensor is ready, print {\"ready\": true, ...} and start only when a "
                 "line arrives on stdin (a start barrier across workers: the time then counts "
                 "the AllReduce, not the other workers' data generation)");
    bool no_lowest_missing = false;
    app.add_flag("--no-lowest-missing", no_lowest_missing,
                 "send data without the lowest missing result (as an INA v1 sender before it; "
                 "the switch then has only the window rules)");
    bool no_progress = false;
    app.add_flag("--no-progress", no_progress,
                 "no progress bar (drawn on stderr for tensors of 1 MiB or more, only when "
                 "stderr is a terminal)");
    app.add_option("--fault-tx-loss", o.fault_tx_loss,
                   "test: probability a data packet is not sent")->check(CLI::Range(0.0, 1.0));
    app.add_option("--fault-tx-dup", o.fault_tx_duplicate,
                   "test: probability a data packet is sent twice")->check(CLI::Range(0.0, 1.0));
    app.add_option("--fault-rx-loss", o.fault_rx_loss,
                   "test: probability a received result is dropped")->check(CLI::Range(0.0, 1.0));
    app.add_option("--fault-reorder", o.fault_reorder,
                   "test: probability two adjacent sends are swapped")->check(CLI::Range(0.0, 1.0));
    CLI11_PARSE(app, argc, argv);
    o.fault_seed = seed;
    o.lowest_missing = !no_lowest_missing;

    const auto types = enum_map<reduce::ElemType>({{"int32", reduce::ElemType::int32},
                                                   {"fp32", reduce::ElemType::fp32},
                                                   {"fp16", reduce::ElemType::fp16},
                                                   {"bf16", reduce::ElemType::bf16},
                                                   {"int64", reduce::ElemType::int64},
                                                   {"fp64", reduce::ElemType::fp64}});
    const auto ops = enum_map<reduce::Op>({{"sum", reduce::Op::sum},
                                           {"prod", reduce::Op::prod},
                                           {"min", reduce::Op::min},
                                           {"max", reduce::Op::max}});
    if (!types.contains(type_name) || !ops.contains(op_name)) {
        std::fprintf(stderr, "ina-worker: unknown --type or --op\n");
        return 2;
    }
    o.elem_type = types.at(type_name);
    o.op = ops.at(op_name);
    const auto pos = wire::bfr_id_to_si_bp(o.bfr_id, o.bsl_bits);
    const auto abm = pos ? wire::BitString::parse_bfr_ids(o.bsl_bits, pos->si, abm_text)
                         : std::nullopt;
    if (!abm || abm->is_zero()) {
        std::fprintf(stderr, "ina-worker: bad --bfr-id/--bsl/--abm (all BFR-ids in one set)\n");
        return 2;
    }
    o.abm = *abm;
    const auto ids = wire::parse_bfr_id_list(workers_data.empty() ? abm_text : workers_data);
    if (!ids || ids->empty()) {
        std::fprintf(stderr, "ina-worker: bad --workers-data\n");
        return 2;
    }
    o.overall_timeout = std::chrono::milliseconds(timeout_ms);
    o.retransmit_timeout = std::chrono::microseconds(static_cast<int64_t>(rto_ms * 1000));
    o.udp_gso = !no_gso;
    if (const std::string why = worker::Client::check_steering(o); !why.empty()) {
        std::fprintf(stderr, "ina-worker: %s\n", why.c_str());
        return 2;
    }

    try {
        worker::Client client(o);
        std::vector<std::byte> input;
        if (!input_path.empty()) {
            std::ifstream in(input_path, std::ios::binary);
            const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                          std::istreambuf_iterator<char>()};
            if (!in.is_open()) {
                throw worker::Error("cannot read --input " + input_path);
            }
            input.resize(bytes.size());
            std::memcpy(input.data(), bytes.data(), bytes.size());
            const size_t esize = reduce::elem_size(o.elem_type);
            if (input.empty() || input.size() % esize != 0) {
                throw worker::Error("--input " + input_path + ": expected a non-empty whole "
                                    "number of " + std::to_string(esize) + "-byte elements");
            }
            elements = input.size() / esize;
        } else {
            input = worker::generate(o.elem_type, elements, seed, o.bfr_id);
        }
        std::vector<std::byte> output(input.size());
        if (start_on_stdin) {
            std::printf("{\"ready\": true, \"bfr_id\": %u}\n", unsigned{o.bfr_id});
            std::fflush(stdout);
            std::string go;
            if (!std::getline(std::cin, go)) {
                throw worker::Error("--start-on-stdin: stdin closed before the start line");
            }
        }
        std::optional<worker::ProgressBar> bar;
        if (worker::ProgressBar::wanted(!no_progress, STDERR_FILENO, input.size())) {
            bar.emplace(STDERR_FILENO,
                        "ina-worker job " + std::to_string(o.job_id) + " bfr " +
                            std::to_string(o.bfr_id),
                        input.size());
        }
        const worker::Stats st = client.allreduce(input, output, bar ? &*bar : nullptr);
        bar.reset();
        worker::Verification v;
        v.ok = true;
        if (input_path.empty()) {
            const auto ref = worker::reference(o.elem_type, o.op, elements, seed, *ids);
            v = worker::verify(o.elem_type, o.op, elements, seed, *ids, ref, output);
        }
        if (!output_path.empty()) {
            std::ofstream out(output_path, std::ios::binary);
            out.write(reinterpret_cast<const char*>(output.data()),
                      static_cast<std::streamsize>(output.size()));
            if (!out) {
                throw worker::Error("cannot write --output " + output_path);
            }
        }
        const bool ok = v.ok && st.bad_results == 0;
        std::printf(
            "{\"ok\": %s, \"bfr_id\": %u, \"elements\": %llu, \"chunks\": %llu, "
            "\"packets_sent\": %llu, \"retransmits\": %llu, \"fast_retransmits\": %llu, "
            "\"gso_datagrams\": %llu, \"duplicate_results\": %llu, "
            "\"bad_results\": %llu, \"ignored\": %llu, \"injected_faults\": %llu, \"mismatches\": %zu, "
            "\"max_abs_err\": %g, \"seconds\": %.6f, \"gbit_per_s\": %.6f}\n",
            ok ? "true" : "false", unsigned{o.bfr_id}, static_cast<unsigned long long>(elements),
            static_cast<unsigned long long>(st.chunks),
            static_cast<unsigned long long>(st.packets_sent),
            static_cast<unsigned long long>(st.retransmits),
            static_cast<unsigned long long>(st.fast_retransmits),
            static_cast<unsigned long long>(st.gso_datagrams),
            static_cast<unsigned long long>(st.duplicate_results),
            static_cast<unsigned long long>(st.bad_results),
            static_cast<unsigned long long>(st.ignored),
            static_cast<unsigned long long>(st.injected_faults), v.mismatches, v.max_abs_err, st.seconds,
            st.goodput_gbit_per_s);
        if (!v.ok) {
            std::fprintf(stderr, "ina-worker: verification failed (%zu mismatches): %s\n",
                         v.mismatches, v.detail.c_str());
        }
        std::fflush(stdout);
        return ok ? 0 : 1;
    } catch (const worker::Error& e) {
        std::printf("{\"ok\": false, \"bfr_id\": %u, \"error\": \"%s\"}\n", unsigned{o.bfr_id},
                    e.what());
        std::fprintf(stderr, "ina-worker: %s\n", e.what());
        return 1;
    }
}
