// SPDX-License-Identifier: Apache-2.0
// ina-ps: a host VAT root (draft-song-ina-00 lets a server be the root). Binds the INA UDP port,
// aggregates workers' (and switches' partial or fallback-flagged) data packets of one job with
// ina::ChunkTable (role root) and answers with results, acting on the verdicts as the switch's
// ina_input stage does: completed -> the result to every worker; resend_result -> the result to
// the requester; duplicate / overlap / stale / no_slot -> drop (the worker retransmits).
// Runs until SIGINT/SIGTERM or --idle-exit-ms without packets; prints counters (JSON) on exit.
#include <CLI/CLI.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "reduce/fixed_point.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

bool parse_ipv4(const std::string& s, uint32_t& out) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1) {
        return false;
    }
    out = a.s_addr;
    return true;
}

uint64_t now_ms() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

}  // namespace

int main(int argc, char** argv) {
    using namespace ina;
    CLI::App app{"ina-ps: a host INA root (aggregates one job with ina::ChunkTable)"};
    uint32_t job = 0;
    std::string abm_text;
    uint16_t bsl = 64;
    std::string type_name = "fp32";
    std::string op_name = "sum";
    uint32_t chunk = 256;
    uint32_t window = 64;
    std::string workers_text;
    std::string bind = "0.0.0.0";
    uint16_t port = proto::kDefaultUdpPort;
    uint64_t idle_exit_ms = 0;
    uint64_t slot_timeout_ms = 5000;
    uint32_t result_cache = 2;
    bool deterministic = false;
    int fraction_bits = -1;
    app.add_option("--job", job, "job id")->required();
    app.add_option("--abm", abm_text, "A-BM as BFR-ids, e.g. 1-4")->required();
    app.add_option("--bsl", bsl, "BitString length")->default_val(64);
    app.add_option("--type", type_name, "int32|fp32|fp16|bf16|int64|fp64")->default_val("fp32");
    app.add_option("--op", op_name, "sum|prod|min|max")->default_val("sum");
    app.add_option("--chunk", chunk, "max elements per packet")->default_val(256);
    app.add_option("--window", window, "slot indices (power of two, >= the workers' window)")
        ->default_val(64);
    app.add_option("--workers", workers_text, "BFR-id=IPv4 list: 1=10.0.1.2,2=10.0.1.3")
        ->required();
    app.add_option("--bind", bind, "local IPv4 address")->default_val("0.0.0.0");
    app.add_option("--port", port, "INA UDP port")->default_val(proto::kDefaultUdpPort);
    app.add_option("--idle-exit-ms", idle_exit_ms, "exit after this long without packets (0: never)")
        ->default_val(0);
    app.add_option("--slot-timeout-ms", slot_timeout_ms, "free idle slots after this long")
        ->default_val(5000);
    app.add_option("--result-cache", result_cache,
                   "released results kept per slot index for workers beyond the window (0..2)")
        ->default_val(2);
    app.add_flag("--deterministic", deterministic,
                 "exact int64 fixed-point sums (a float sum job, src/reduce/README.md "
                 "\"Deterministic mode\"): takes the tree's int64 partials, sends RN(S x 2^-F)");
    app.add_option("--fraction-bits", fraction_bits,
                   "with --deterministic: F, as the switches' fraction_bits (default: the "
                   "type's, 24 for fp16, else 32)")
        ->check(CLI::Range(0, reduce::kMaxFractionBits));
    CLI11_PARSE(app, argc, argv);

    const std::map<std::string, reduce::ElemType> types{
        {"int32", reduce::ElemType::int32}, {"fp32", reduce::ElemType::fp32},
        {"fp16", reduce::ElemType::fp16},   {"bf16", reduce::ElemType::bf16},
        {"int64", reduce::ElemType::int64}, {"fp64", reduce::ElemType::fp64}};
    const std::map<std::string, reduce::Op> ops{{"sum", reduce::Op::sum},
                                                {"prod", reduce::Op::prod},
                                                {"min", reduce::Op::min},
                                                {"max", reduce::Op::max}};
    if (!types.contains(type_name) || !ops.contains(op_name)) {
        std::fprintf(stderr, "ina-ps: unknown --type or --op\n");
        return 2;
    }
    const auto ids = wire::parse_bfr_id_list(abm_text);
    if (!ids || ids->empty() || !wire::is_valid_bsl_bits(bsl)) {
        std::fprintf(stderr, "ina-ps: bad --abm or --bsl\n");
        return 2;
    }
    const uint16_t si = static_cast<uint16_t>((ids->front() - 1u) / bsl);
    const auto abm = wire::BitString::from_bfr_ids(bsl, si, *ids);
    if (!abm) {
        std::fprintf(stderr, "ina-ps: the A-BM's BFR-ids must share one set (SI)\n");
        return 2;
    }
    // Workers: BFR-id=address.
    std::vector<sockaddr_in> workers;
    {
        std::string rest = workers_text;
        std::vector<wire::BfrId> seen;
        while (!rest.empty()) {
            const size_t comma = rest.find(',');
            const std::string item = rest.substr(0, comma);
            rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
            const size_t eq = item.find('=');
            uint32_t addr = 0;
            if (eq == std::string::npos || !parse_ipv4(item.substr(eq + 1), addr)) {
                std::fprintf(stderr, "ina-ps: bad --workers item '%s'\n", item.c_str());
                return 2;
            }
            const auto id = wire::parse_bfr_id_list(item.substr(0, eq));
            if (!id || id->size() != 1) {
                std::fprintf(stderr, "ina-ps: bad BFR-id in '%s'\n", item.c_str());
                return 2;
            }
            seen.push_back(id->front());
            sockaddr_in sa{};
            sa.sin_family = AF_INET;
            sa.sin_port = htons(port);
            sa.sin_addr.s_addr = addr;
            workers.push_back(sa);
        }
        std::sort(seen.begin(), seen.end());
        if (seen != *ids) {
            std::fprintf(stderr, "ina-ps: --workers must name exactly the --abm BFR-ids\n");
            return 2;
        }
    }

    JobParams p;
    p.job_id = job;
    p.abm = *abm;
    p.set_id = si;
    p.op = ops.at(op_name);
    p.elem_type = types.at(type_name);
    p.max_elems = chunk;
    p.window = window;
    p.role = Role::root;
    p.idle_timeout = slot_timeout_ms;
    p.result_cache = result_cache;
    if (fraction_bits >= 0 && !deterministic) {
        std::fprintf(stderr, "ina-ps: --fraction-bits needs --deterministic\n");
        return 2;
    }
    if (deterministic && !reduce::fixed_point_applies(p.elem_type, p.op)) {
        std::fprintf(stderr, "ina-ps: --deterministic applies to float sums only (--type "
                             "fp32|fp16|bf16|fp64, --op sum)\n");
        return 2;
    }
    p.deterministic = deterministic;
    p.fraction_bits = static_cast<uint8_t>(
        fraction_bits >= 0 ? fraction_bits : reduce::default_fraction_bits(p.elem_type));
    if (const auto why = validate(p); !why.empty()) {
        std::fprintf(stderr, "ina-ps: bad job: %.*s\n", static_cast<int>(why.size()), why.data());
        return 2;
    }
    ChunkTable table(p);

    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        std::perror("ina-ps: socket");
        return 1;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    int buf = 8 << 20;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    int pmtu = IP_PMTUDISC_DO;
    ::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    if (!parse_ipv4(bind, sa.sin_addr.s_addr) ||
        ::bind(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
        std::fprintf(stderr, "ina-ps: cannot bind %s:%u: %s\n", bind.c_str(), unsigned{port},
                     std::strerror(errno));
        ::close(fd);
        return 1;
    }
    std::signal(SIGINT, on_signal);
    std::signal(SIGTERM, on_signal);
    std::fprintf(stderr, "ina-ps: job %u listening on %s:%u\n", job, bind.c_str(), unsigned{port});

    struct {
        uint64_t packets = 0, not_ina = 0, mismatched = 0, results_sent = 0, resent = 0,
                 send_errors = 0;
    } c;
    std::vector<uint8_t> rx(65536);
    std::vector<uint8_t> tx(65536);
    uint64_t last_rx = now_ms();
    uint64_t last_expire = last_rx;
    auto send_to = [&](const sockaddr_in& to, size_t len) {
        for (;;) {
            const ssize_t r = ::sendto(fd, tx.data(), len, 0, reinterpret_cast<const sockaddr*>(&to),
                                       sizeof to);
            if (r >= 0) {
                return true;
            }
            if (errno != EINTR) {
                ++c.send_errors;
                return false;
            }
        }
    };
    auto build_result = [&](const proto::Header& in) {
        proto::Header h = in;
        h.type = proto::PacketType::result;
        // The job's type, also when the last contribution was an int64 fixed-point partial.
        h.elem_type = static_cast<uint8_t>(p.elem_type);
        h.flags = table.result_flags(in.seq);
        const size_t at = proto::write_header(tx.data(), h, abm->data());
        table.store_result(in.seq, tx.data() + at);
        return h.total_bytes();
    };

    while (g_stop == 0) {
        pollfd pfd{fd, POLLIN, 0};
        const int pr = ::poll(&pfd, 1, 100);
        const uint64_t now = now_ms();
        if (now - last_expire >= 100) {
            table.expire(now);
            last_expire = now;
        }
        if (pr < 0 && errno != EINTR) {
            std::perror("ina-ps: poll");
            break;
        }
        if (pr <= 0) {
            if (idle_exit_ms != 0 && now - last_rx >= idle_exit_ms) {
                break;
            }
            continue;
        }
        for (int burst = 0; burst < 256; ++burst) {
            sockaddr_in from{};
            socklen_t from_len = sizeof from;
            const ssize_t n = ::recvfrom(fd, rx.data(), rx.size(), MSG_DONTWAIT,
                                         reinterpret_cast<sockaddr*>(&from), &from_len);
            if (n < 0) {
                break;
            }
            last_rx = now_ms();
            const auto parsed = proto::parse(rx.data(), static_cast<size_t>(n));
            if (!parsed.packet) {
                ++c.not_ina;
                continue;
            }
            ++c.packets;
            const proto::Header& h = parsed.packet->header;
            if (header_mismatch(h, table.params()) != 0) {
                ++c.mismatched;
                continue;
            }
            const Verdict v = table.on_data(parsed.packet->bitstring, h.seq, h.elem_count,
                                            parsed.packet->payload, h.flags, last_rx,
                                            table.encoding_of(h.elem_type), h.lowest_missing);
            if (v == Verdict::completed) {
                const size_t len = build_result(h);
                for (const auto& w : workers) {
                    c.results_sent += send_to(w, len) ? 1 : 0;
                }
            } else if (v == Verdict::resend_result || v == Verdict::cached_result) {
                const size_t len = build_result(h);
                // A single-bit P-BM is a worker asking again: answer it. A multi-bit P-BM is a
                // switch re-sending its partial for a worker that lost the result; the switch
                // cannot use the answer, so every worker gets the result again (workers ignore
                // results they already have).
                if (wire::bits_popcount(parsed.packet->bitstring, h.bitstring_bytes()) == 1) {
                    sockaddr_in to = from;
                    to.sin_port = htons(port);
                    c.resent += send_to(to, len) ? 1 : 0;
                } else {
                    for (const auto& w : workers) {
                        c.resent += send_to(w, len) ? 1 : 0;
                    }
                }
            }
        }
    }
    ::close(fd);
    const auto& k = table.counters();
    std::printf("{\"packets\": %llu, \"not_ina\": %llu, \"mismatched\": %llu, "
                "\"results_sent\": %llu, \"resent\": %llu, \"send_errors\": %llu, "
                "\"slot_timeouts\": %llu, \"rx_retransmit\": %llu, \"rx_fallback\": %llu, "
                "\"slots_in_use\": %zu",
                static_cast<unsigned long long>(c.packets),
                static_cast<unsigned long long>(c.not_ina),
                static_cast<unsigned long long>(c.mismatched),
                static_cast<unsigned long long>(c.results_sent),
                static_cast<unsigned long long>(c.resent),
                static_cast<unsigned long long>(c.send_errors),
                static_cast<unsigned long long>(k.slot_timeouts),
                static_cast<unsigned long long>(k.rx_retransmit),
                static_cast<unsigned long long>(k.rx_fallback_flag), table.slots_in_use());
    if (deterministic) {
        std::printf(", \"fixed_saturated\": %llu, \"fixed_underflow\": %llu, \"fixed_nan\": %llu",
                    static_cast<unsigned long long>(k.fixed_saturated),
                    static_cast<unsigned long long>(k.fixed_underflow),
                    static_cast<unsigned long long>(k.fixed_nan));
    }
    for (size_t i = 0; i < kNumVerdicts; ++i) {
        const auto name = to_string(static_cast<Verdict>(i));
        std::printf(", \"%.*s\": %llu", static_cast<int>(name.size()), name.data(),
                    static_cast<unsigned long long>(k.verdicts[i]));
    }
    std::printf("}\n");
    return 0;
}
