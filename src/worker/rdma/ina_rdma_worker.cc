// SPDX-License-Identifier: Apache-2.0
// ina-rdma-worker: one worker of an RDMA AllReduce (docs/rdma.md, src/worker/README.md). Reduces
// a generated tensor (from --seed and its rank, as ina-worker does) or a file, through a root
// (server-to-server, rdma_cm) or through the switch itself (server-to-switch, control API +
// plain verbs), and verifies a generated one against the locally computed reference of ranks
// 1..world. Prints one JSON line per AllReduce; exit 0 iff every AllReduce completed and
// verified, 1 otherwise, 2 on bad options.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "worker/rdma/client.h"
#include "worker/rdma/switch_client.h"
#include "worker/testdata.h"

namespace {

std::string json_escape(const std::string& s) {
    std::string out;
    for (const char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (static_cast<unsigned char>(ch) < 0x20) {
            out += ' ';
        } else {
            out += ch;
        }
    }
    return out;
}

std::string read_token_file(const std::string& path) {
    std::ifstream in(path);
    std::string token;
    if (!in.is_open() || !std::getline(in, token) || token.empty()) {
        throw ina::rdma::Error("cannot read a token from --token-file " + path);
    }
    return token;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ina;
    CLI::App app{"ina-rdma-worker: one worker of an RDMA AllReduce with a self-checking tensor"};
    rdma::ClientOptions o;
    rdma::SwitchClientOptions so;
    std::string mode = "server-to-server";
    std::string type_name = "fp32";
    std::string op_name = "sum";
    uint64_t elements = 1 << 18;
    uint64_t seed = 1;
    uint32_t timeout_ms = 60000;
    uint8_t ack_timeout = rdma::SwitchClientOptions{}.ack_timeout;
    uint32_t linger_ms = 10000;
    uint32_t iterations = 1;
    uint32_t gid_index = 0;
    uint32_t psn = 0;
    uint32_t ib_port = 1;
    std::string token_file;
    std::string input_path, output_path;
    app.add_option("--mode", mode,
                   "server-to-server: WRITE to ina-rdma-root (directly or through a switch); "
                   "server-to-switch: WRITE to the switch, which reduces")
        ->check(CLI::IsMember({"server-to-server", "server-to-switch"}))
        ->default_val("server-to-server");
    app.add_option("--root", o.root, "server-to-server: the root's IP address");
    app.add_option("--port", o.port, "server-to-server: the root's rdma_cm port")
        ->default_val(rdma::kDefaultPort);
    app.add_option("--switch-api", so.switch_api,
                   "server-to-switch: the switch's control API, http://HOST:PORT");
    std::string switch_cm;
    app.add_option("--switch-cm", switch_cm,
                   "server-to-switch: connect by RDMA CM to the switch's address (IPv4[:PORT], "
                   "IPv6 or [IPv6]:PORT; port default 7471) instead of --switch-api");
    app.add_option("--token", so.token, "server-to-switch: bearer token of the API's write role");
    app.add_option("--token-file", token_file, "server-to-switch: read the token from this file");
    app.add_option("--device", so.device, "server-to-switch: RDMA device (default: the first)");
    app.add_option("--ib-port", ib_port, "server-to-switch: device port")->default_val(1);
    auto* gid_opt = app.add_option("--gid-index", gid_index,
                                   "server-to-switch: source GID index (default: the RoCE v2 "
                                   "GID of --ip, IPv4 or IPv6, or the first IPv4 one)");
    app.add_option("--ip", so.ip, "server-to-switch: this worker's IPv4 or IPv6 address (its "
                                  "GID's family is the connection's; default: the GID's)");
    app.add_option("--pmtu", so.pmtu, "server-to-switch: path MTU, 256..4096")->default_val(1024);
    auto* psn_opt = app.add_option("--psn", psn, "server-to-switch: initial PSN (default random)");
    app.add_option("--iterations", iterations,
                   "AllReduces in a row (server-to-switch: on one connection, the session "
                   "sequence running on)")
        ->default_val(1);
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
    app.add_option("--timeout-ms", timeout_ms, "deadline of each AllReduce")->default_val(60000);
    app.add_option("--ack-timeout", ack_timeout,
                   "server-to-switch through the API: local ACK timeout of this worker's QP "
                   "and of the switch's for the results, 4.096 us x 2^N (rdma_cm's RoCE "
                   "choice: 17, 537 ms; a QP that goes 8 timeouts without an ACK fails); with "
                   "--switch-cm rdma_cm sets both")
        ->default_str(std::to_string(ack_timeout))
        ->check(CLI::Range(1, 31));
    app.add_option("--linger-ms", linger_ms,
                   "server-to-server: every result in, how long to wait for the root to "
                   "disconnect before disconnecting (0: at once)")
        ->default_val(10000);
    app.add_option("--reconnect-after", o.reconnect_after,
                   "server-to-server: once this many chunks are written and acknowledged, drop "
                   "the connection and connect again as a resuming worker (0: never)")
        ->default_val(0);
    app.add_option("--reconnect-again-after", o.reconnect_again_after,
                   "server-to-server: after --reconnect-after, once this many chunks are written "
                   "and acknowledged, reconnect the same way once more (0: never)")
        ->default_val(0);
    app.add_option("--reconnect-min-results", o.reconnect_min_results,
                   "server-to-server, a test hook: a reconnect also waits until this many "
                   "results are in (0: it does not wait)")
        ->default_val(0);
    app.add_option("--restart-at", o.restart_at,
                   "server-to-server, a test hook: once this many chunks are written, drop the "
                   "connection, registrations and results as a restarted process would and "
                   "connect again knowing nothing; the root says where to write from; at the "
                   "chunk of --reconnect-after: right after that reconnect (0: never)")
        ->default_val(0);
    app.add_flag("--poll-after-root-ends", o.poll_after_root_ends,
                 "server-to-server, a test hook: post every WRITE, then take no completion "
                 "until the root ends the connection, as a process far behind its NIC (the "
                 "tensor must fit in --window chunks)");
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
    const bool to_switch = mode == "server-to-switch";
    if (to_switch ? so.switch_api.empty() == switch_cm.empty() : o.root.empty()) {
        std::fprintf(stderr, "ina-rdma-worker: --mode %s needs %s\n", mode.c_str(),
                     to_switch ? "one of --switch-api and --switch-cm" : "--root");
        return 2;
    }
    if (!switch_cm.empty()) {
        std::string why;
        const auto target = rdma::parse_cm_target(switch_cm, &why);
        if (!target) {
            std::fprintf(stderr, "ina-rdma-worker: --switch-cm %s: %s\n", switch_cm.c_str(),
                         why.c_str());
            return 2;
        }
        so.switch_cm = target->ip;
        so.cm_port = target->port.value_or(so.cm_port);
    }
    if (o.reconnect_again_after != 0 &&
        (o.reconnect_after == 0 || o.reconnect_again_after <= o.reconnect_after)) {
        std::fprintf(stderr, "ina-rdma-worker: --reconnect-again-after needs --reconnect-after "
                             "below it\n");
        return 2;
    }
    if (to_switch && (o.reconnect_after != 0 || o.restart_at != 0 || o.poll_after_root_ends)) {
        std::fprintf(stderr, "ina-rdma-worker: --reconnect-after, --restart-at and "
                             "--poll-after-root-ends are for server-to-server\n");
        return 2;
    }
    if (iterations == 0 || (!to_switch && iterations != 1)) {
        std::fprintf(stderr, "ina-rdma-worker: --iterations must be 1 (server-to-server) or "
                             ">= 1 (server-to-switch)\n");
        return 2;
    }
    o.elem_type = *elem_type;
    o.op = *op;
    o.timeout = std::chrono::milliseconds(timeout_ms);
    o.linger = std::chrono::milliseconds(linger_ms);

    try {
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

        // One AllReduce by the mode's client; the switch client outlives the iterations.
        std::unique_ptr<rdma::SwitchClient> switch_client;
        std::function<rdma::ClientStats(std::vector<std::byte>&)> run;
        if (to_switch) {
            if (!token_file.empty()) {
                so.token = read_token_file(token_file);
            }
            so.job_id = o.job_id;
            so.rank = o.rank;
            so.world = o.world;
            so.elem_type = o.elem_type;
            so.op = o.op;
            so.chunk_bytes = o.chunk_bytes;
            so.window = o.window;
            so.ib_port = static_cast<uint8_t>(ib_port);
            if (gid_opt->count() > 0) {
                so.gid_index = gid_index;
            }
            if (psn_opt->count() > 0) {
                so.psn = psn;
            }
            so.timeout = o.timeout;
            so.ack_timeout = ack_timeout;
            switch_client = std::make_unique<rdma::SwitchClient>(so);
            const auto& peer = switch_client->peer();
            std::printf("{\"connected\": true, \"rank\": %u, \"ip\": \"%s\", \"qpn\": %u, "
                        "\"psn\": %u, \"switch_ip\": \"%s\", \"switch_qpn\": %u, "
                        "\"switch_psn\": %u, \"connect_seconds\": %.6f}\n",
                        unsigned{o.rank}, switch_client->ip().c_str(), switch_client->qpn(),
                        switch_client->psn(), peer.ip.c_str(), peer.qpn, peer.psn,
                        switch_client->connect_seconds());
            std::fflush(stdout);
            run = [&](std::vector<std::byte>& out) { return switch_client->allreduce(input, out); };
        } else {
            auto client = std::make_shared<rdma::Client>(o);  // validates the options
            run = [client, &input](std::vector<std::byte>& out) {
                return client->allreduce(input, out);
            };
        }

        bool all_ok = true;
        for (uint32_t it = 0; it < iterations; ++it) {
            std::vector<std::byte> output(input.size());
            const uint32_t first_seq = switch_client ? switch_client->next_seq() : 0;
            rdma::ClientStats st = run(output);
            if (switch_client && it + 1 == iterations) {
                st.disconnect_error = switch_client->close();
            }
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
                "{\"ok\": %s, \"verified\": %s, \"mode\": \"%s\", \"iteration\": %u, "
                "\"first_seq\": %u, \"rank\": %u, \"world\": %u, \"type\": \"%s\", "
                "\"elements\": %llu, \"chunks\": %u, \"writes\": %llu, \"results\": %llu, "
                "\"mismatches\": %zu, \"max_abs_err\": %g, \"connect_seconds\": %.6f, "
                "\"seconds\": %.6f, \"gbit_per_s\": %.6f, \"reconnected\": %s, "
                "\"restarted\": %s, \"reconnects\": %u, "
                "\"resume_chunk\": %u, \"duplicate_results\": %llu, \"leave_seconds\": %.6f, "
                "\"rejoin_seconds\": %.6f, "
                "\"disconnect_error\": \"%s\"}\n",
                v.ok ? "true" : "false", input_path.empty() ? "true" : "false", mode.c_str(), it,
                first_seq, unsigned{o.rank}, unsigned{o.world}, type_name.c_str(),
                static_cast<unsigned long long>(elements), st.chunks,
                static_cast<unsigned long long>(st.writes),
                static_cast<unsigned long long>(st.results), v.mismatches, v.max_abs_err,
                st.connect_seconds, st.seconds, st.goodput_gbit_per_s,
                st.reconnected ? "true" : "false", st.restarted ? "true" : "false",
                st.reconnects,
                st.resume_chunk,
                static_cast<unsigned long long>(st.duplicate_results), st.leave_seconds,
                st.rejoin_seconds,
                json_escape(st.disconnect_error).c_str());
            if (!v.ok) {
                std::fprintf(stderr, "ina-rdma-worker: verification failed (%zu mismatches): %s\n",
                             v.mismatches, v.detail.c_str());
                all_ok = false;
            }
            std::fflush(stdout);
        }
        return all_ok ? 0 : 1;
    } catch (const rdma::Error& e) {
        std::printf("{\"ok\": false, \"rank\": %u, \"error\": \"%s\"}\n", unsigned{o.rank},
                    json_escape(e.what()).c_str());
        std::fprintf(stderr, "ina-rdma-worker: %s\n", e.what());
        return 1;
    }
}
