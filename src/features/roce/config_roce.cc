// SPDX-License-Identifier: Apache-2.0
#include "features/roce/config_roce.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <set>

#include "config/reader.h"
#include "config/reader_fields.h"
#include "roce/rc_responder.h"

namespace ina::features::roce {

namespace {

using config::Reader;

using config::kReduceOps;
using config::kReduceTypes;
using config::reduce_enum_field;
using config::uint_field;

// The IPv4 address an IPv4-mapped IPv6 address (::ffff:a.b.c.d) stands for, host order.
std::optional<uint32_t> mapped_ipv4(const net::Ipv6Addr& a6) {
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!std::equal(kMapped, kMapped + 12, a6.bytes.begin())) {
        return std::nullopt;
    }
    return uint32_t{a6.bytes[12]} << 24 | uint32_t{a6.bytes[13]} << 16 |
           uint32_t{a6.bytes[14]} << 8 | a6.bytes[15];
}

// The worker's address: IPv4, or IPv6 (a global or unique-local unicast address: the GID of a
// RoCEv2 port on an IPv6 underlay); an IPv4-mapped IPv6 address is its IPv4 address.
void read_ip(Reader& r, const YAML::Node& map, const std::string& where, QpConfig& q) {
    r.required(map, "ip", where, [&](const YAML::Node& v) {
        std::string text;
        if (!r.string_value(v, "ip: an IPv4 or IPv6 address", text)) {
            return;
        }
        if (const auto a4 = net::Ipv4Addr::parse(text)) {
            q.ip = a4->value;
            return;
        }
        const auto a6 = net::Ipv6Addr::parse(text);
        if (!a6) {
            r.error(v, "expected ip: an IPv4 address like 10.77.1.2 or an IPv6 address like "
                       "2001:db8:1::2, got '" + text + "'");
            return;
        }
        if (const auto mapped = mapped_ipv4(*a6)) {
            q.ip = *mapped;
            return;
        }
        static constexpr std::array<uint8_t, 16> kLoopback = {0, 0, 0, 0, 0, 0, 0, 0,
                                                              0, 0, 0, 0, 0, 0, 0, 1};
        if (a6->is_multicast() || a6->is_unspecified() || a6->is_link_local() ||
            a6->bytes == kLoopback) {
            r.error(v, "expected ip: a unicast IPv6 address the switch routes (not multicast, "
                       "unspecified, loopback or link-local), got '" + text + "'");
            return;
        }
        q.ip6 = *a6;
    });
}

// `source`: the switch's address for the QP, of the worker's family (validate_section checks it
// is a port's, where the worker is). read_ip ran first: the family is known.
void read_source(Reader& r, const YAML::Node& n, QpConfig& q) {
    r.optional(n, "source", [&](const YAML::Node& v) {
        q.source_mark = config::mark_of(v);
        std::string text;
        if (!r.string_value(v, "source: an address of the switch", text)) {
            return;
        }
        const char* family = q.ip6 ? "IPv6" : "IPv4";
        // An IPv4-mapped address is its IPv4 address, as for `ip`.
        auto a4 = net::Ipv4Addr::parse(text);
        auto a6 = a4 ? std::nullopt : net::Ipv6Addr::parse(text);
        if (const auto mapped = a6 ? mapped_ipv4(*a6) : std::nullopt) {
            a4 = net::Ipv4Addr{*mapped};
            a6.reset();
        }
        if (!a4 && !a6) {
            r.error(v, std::string("expected source: one of the switch's ") + family +
                           " addresses (the QP's address towards the worker), got '" + text +
                           "'");
            return;
        }
        if (!q.ip6 && q.ip == 0) {
            return;  // no worker address to match: read_ip said so
        }
        if (a6.has_value() != q.ip6.has_value()) {
            r.error(v, "source " + text + " is an " + (a6 ? "IPv6" : "IPv4") + " address for the " +
                           family + " worker " + worker_ip_text(q) + "; expected one of the "
                           "switch's " + family + " addresses (the QP runs in its worker's family)");
            return;
        }
        if (a6) {
            q.source6 = *a6;
        } else {
            q.source4 = *a4;
        }
    });
}

// The worker's side of a QP, as a static `qps` entry and a connect request both give it.
void read_worker_side(Reader& r, const YAML::Node& n, const std::string& where, QpConfig& q) {
    uint_field(r, n, "rank", where, q.rank, 1, kMaxWorld, true);
    read_ip(r, n, where, q);
    read_source(r, n, q);
    uint_field(r, n, "qpn", where, q.qpn, 2, 0xFFFFFF, true);
    uint_field(r, n, "psn", where, q.psn, 0, 0xFFFFFF, true);
    uint_field(r, n, "result_addr", where, q.result_addr, 0, UINT64_MAX, true);
    uint_field(r, n, "result_rkey", where, q.result_rkey, 0, UINT32_MAX, true);
    uint_field(r, n, "result_length", where, q.result_length, 1, UINT32_MAX, true);
    uint_field(r, n, "timeout", where, q.timeout, 0, 31, false);
    uint_field(r, n, "retry_cnt", where, q.retry_cnt, 0, 7, false);
    uint_field(r, n, "rnr_retry", where, q.rnr_retry, 0, 7, false);
}

void read_qp(Reader& r, const YAML::Node& n, QpConfig& q) {
    q.mark = config::mark_of(n);
    const std::string where = "an rdma QP";
    if (!r.expect_map(n, where)) {
        return;
    }
    r.check_keys(n,
                 {"rank", "ip", "source", "qpn", "psn", "switch_qpn", "switch_psn", "result_addr",
                  "result_rkey", "result_length", "timeout", "retry_cnt", "rnr_retry"},
                 where);
    read_worker_side(r, n, where, q);
    uint_field(r, n, "switch_qpn", where, q.switch_qpn, 2, 0xFFFFFF, true);
    uint_field(r, n, "switch_psn", where, q.switch_psn, 0, 0xFFFFFF, true);
}

// The job's own limits, once its fields are read (errors at the job's mark).
void check_job(Reader& r, const JobConfig& j, const YAML::Node& n) {
    if (!ina::roce::valid_pmtu(j.pmtu) || j.pmtu < 256) {
        r.error(n, "expected pmtu of rdma job " + std::to_string(j.id) +
                       ": 256, 512, 1024, 2048 or 4096");
    }
    if (j.chunk_bytes > j.pmtu && j.chunk_bytes % j.pmtu != 0) {
        r.error(n, "rdma job " + std::to_string(j.id) + ": chunk_bytes " +
                       std::to_string(j.chunk_bytes) + " is above pmtu " + std::to_string(j.pmtu) +
                       " and no multiple of it; expected chunk_bytes <= pmtu (one WRITE ONLY "
                       "packet) or a multiple of pmtu (FIRST, MIDDLE..., LAST)");
    }
    if (j.chunk_bytes % reduce::elem_size(j.dtype) != 0) {
        r.error(n, "rdma job " + std::to_string(j.id) + ": expected chunk_bytes a multiple of " +
                       std::to_string(reduce::elem_size(j.dtype)) + " (the dtype's size)");
    }
    if ((j.window & (j.window - 1)) != 0) {
        r.error(n, "rdma job " + std::to_string(j.id) + ": expected window a power of two");
    }
}

void read_address(Reader& r, const YAML::Node& v, const char* key, uint32_t& out) {
    net::Ipv4Addr a;
    if (r.parsed(v, std::string(key) + ": an IPv4 address like 10.0.0.1", a,
                 net::Ipv4Addr::parse)) {
        out = a.value;
    }
}

// `role` and the aggregator's INA fields (the names an INA job uses). A root job refuses them:
// they would silently mean nothing.
void read_aggregator(Reader& r, const YAML::Node& n, JobConfig& j) {
    r.optional(n, "role", [&](const YAML::Node& v) {
        std::string s;
        if (!r.string_value(v, "role", s)) {
            return;
        }
        if (s == "aggregator") {
            j.role = Role::aggregator;
        } else if (s != "root") {
            r.error(v, "expected role of an rdma job: root or aggregator, got '" + s + "'");
        }
    });
    const std::string job = "rdma job " + std::to_string(j.id);
    if (j.role != Role::aggregator) {
        for (const char* key : {"parent", "source", "bsl", "set_id", "abm", "partial_timeout_ms"}) {
            r.optional(n, key, [&](const YAML::Node& v) {
                r.error(v, std::string(key) + " in " + job +
                               ", which is its own root; expected it only with role: aggregator");
            });
        }
        return;
    }
    r.required(n, "parent", "an rdma job with role aggregator",
               [&](const YAML::Node& v) { read_address(r, v, "parent", j.parent); });
    r.optional(n, "source", [&](const YAML::Node& v) { read_address(r, v, "source", j.source); });
    r.optional(n, "bsl", [&](const YAML::Node& v) { config::read_bsl(r, v, j.bsl_bits); });
    r.optional(n, "set_id",
               [&](const YAML::Node& v) { r.uint_value(v, "set_id", j.set_id, 0, 255); });
    uint_field(r, n, "partial_timeout_ms", "an rdma job", j.partial_timeout_ms, 1, 60000, false);
    bool given = false;
    r.optional(n, "abm", [&](const YAML::Node& v) {
        given = true;
        if (!config::bfr_id_list(r, v, "abm", j.abm) ||
            !config::check_in_set(r, v, "abm", j.abm, j.bsl_bits, j.set_id)) {
            return;
        }
        if (j.abm.size() != j.world) {
            r.error(v, "abm of " + job + " names " + std::to_string(j.abm.size()) +
                           " BFR-ids; expected one per rank (world " + std::to_string(j.world) +
                           "): rank r stands for the r-th lowest");
        }
    });
    if (!given && j.world != 0) {
        // Rank r is BFR-id r of the job's set.
        for (uint16_t rank = 1; rank <= j.world; ++rank) {
            j.abm.push_back(static_cast<uint16_t>(j.set_id * j.bsl_bits + rank));
        }
        if (j.world > j.bsl_bits) {
            r.error(n, job + ": world " + std::to_string(j.world) + " above bsl " +
                           std::to_string(j.bsl_bits) + "; expected a bsl that holds every rank");
        }
    }
}

void read_job(Reader& r, const YAML::Node& n, JobConfig& j) {
    j.mark = config::mark_of(n);
    const std::string where = "an rdma job";
    if (!r.expect_map(n, where)) {
        return;
    }
    r.check_keys(n,
                 {"id", "mode", "world", "op", "dtype", "chunk_bytes", "window", "pmtu", "qps",
                  "role", "parent", "source", "bsl", "set_id", "abm", "partial_timeout_ms",
                  "deterministic"},
                 where);
    uint_field(r, n, "id", where, j.id, 1, 65535, true);
    r.optional(n, "mode", [&](const YAML::Node& v) {
        std::string s;
        if (r.string_value(v, "mode", s) && s != "server-to-switch") {
            r.error(v, "expected mode server-to-switch (the one RoCE mode the switch "
                       "terminates), got '" + s + "'");
        }
    });
    uint_field(r, n, "world", where, j.world, 1, kMaxWorld, true);
    reduce_enum_field(r, n, "op", where, kReduceOps, j.op);
    reduce_enum_field(r, n, "dtype", where, kReduceTypes, j.dtype);
    uint_field(r, n, "chunk_bytes", where, j.chunk_bytes, 4, kMaxChunkBytes, false);
    uint_field(r, n, "window", where, j.window, 1, kMaxWindow, false);
    uint_field(r, n, "pmtu", where, j.pmtu, 256, 4096, false);
    r.optional(n, "qps", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of QPs")) {
            return;
        }
        for (const auto& qn : v) {
            QpConfig q;
            read_qp(r, qn, q);
            j.qps.push_back(q);
        }
    });
    read_aggregator(r, n, j);
    r.optional(n, "deterministic", [&](const YAML::Node& v) {
        read_deterministic(r, v, j.dtype, j.op, j.deterministic, j.fraction_bits);
        // An aggregator's partials go up as int64 fixed point: a pmtu segment of the chunk
        // grows to 8 bytes an element, and must stay one INA packet of at most 4096 bytes.
        const uint32_t segment = std::min(j.chunk_bytes, j.pmtu);
        const uint64_t wire = uint64_t{segment} / reduce::elem_size(j.dtype) *
                              reduce::elem_size(reduce::kFixedWireType);
        if (j.deterministic && j.role == Role::aggregator && wire > kMaxFixedSegmentBytes) {
            r.error(v, "deterministic on rdma job " + std::to_string(j.id) +
                           ": its partials carry 8-byte fixed-point elements, so a segment of " +
                           std::to_string(segment) + " bytes goes up as " + std::to_string(wire) +
                           ", above " + std::to_string(kMaxFixedSegmentBytes) +
                           "; expected min(chunk_bytes, pmtu) at most " +
                           std::to_string(kMaxFixedSegmentBytes /
                                          reduce::elem_size(reduce::kFixedWireType) *
                                          reduce::elem_size(j.dtype)));
        }
    });
    check_job(r, j, n);
}

std::shared_ptr<const void> parse_section(Reader& r, const YAML::Node& v) {
    auto out = std::make_shared<RdmaConfig>();
    if (!r.expect_map(v, "rdma settings")) {
        return nullptr;
    }
    r.check_keys(v, {"jobs", "cm_port"}, "rdma");
    uint_field(r, v, "cm_port", "rdma", out->cm_port, 0, 65535, false);
    r.optional(v, "jobs", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of rdma jobs")) {
            return;
        }
        for (const auto& jn : x) {
            JobConfig j;
            read_job(r, jn, j);
            out->jobs.push_back(std::move(j));
        }
    });
    if (out->jobs.size() > kMaxRdmaJobs) {
        r.error(v, "expected at most " + std::to_string(kMaxRdmaJobs) + " rdma jobs");
    }
    return out;
}

// Cross-references: ids and QPNs unique, ranks within the world and once each, every worker on
// a subnet of some port (results leave from that port's address).
void validate_section(Reader& r, const config::Config& c, const void* section) {
    const auto& rdma = *static_cast<const RdmaConfig*>(section);
    std::set<uint32_t> ids;
    std::set<uint32_t> switch_qpns;
    for (const auto& j : rdma.jobs) {
        if (!ids.insert(j.id).second) {
            r.error(j.mark, "duplicate rdma job id " + std::to_string(j.id));
        }
        if (j.role == Role::aggregator) {
            for (const auto& ij : c.ina.jobs) {
                if (ij.job_id == j.id) {
                    r.error(j.mark, "rdma job " + std::to_string(j.id) +
                                        " is an aggregator of INA job " + std::to_string(j.id) +
                                        ", which ina.jobs configures on this switch too; expected "
                                        "one of them (the switch terminates the job's results)");
                }
            }
        }
        std::set<uint16_t> ranks;
        for (const auto& q : j.qps) {
            if (q.rank > j.world) {
                r.error(q.mark, "rank " + std::to_string(q.rank) + " is above the world (" +
                                    std::to_string(j.world) + ") of rdma job " +
                                    std::to_string(j.id));
            }
            if (!ranks.insert(q.rank).second) {
                r.error(q.mark, "rank " + std::to_string(q.rank) + " twice in rdma job " +
                                    std::to_string(j.id));
            }
            if (!switch_qpns.insert(q.switch_qpn).second) {
                r.error(q.mark, "switch_qpn " + std::to_string(q.switch_qpn) +
                                    " used twice; expected one per QP");
            }
            if (q.result_length < j.chunk_bytes) {
                r.error(q.mark, "result_length is below the job's chunk_bytes");
            }
            const bool reachable = std::any_of(c.ports.begin(), c.ports.end(), [&](const auto& p) {
                if (q.ip6) {
                    return std::any_of(p.ipv6.begin(), p.ipv6.end(),
                                       [&](const auto& a) { return a.contains(*q.ip6); });
                }
                return std::any_of(p.ipv4.begin(), p.ipv4.end(),
                                   [&](const auto& a) { return a.contains(net::Ipv4Addr{q.ip}); });
            });
            if (!reachable) {
                r.error(q.mark, "worker " + worker_ip_text(q) + " is on no port's " +
                                    (q.ip6 ? "ipv6 prefix" : "subnet") +
                                    "; expected an address the switch reaches directly (its "
                                    "port address is the QP's address)");
            } else if (q.source6 && !qp_source6(c, q)) {
                r.error(q.source_mark,
                        "source " + q.source6->str() + " is no IPv6 address of a port whose "
                            "prefix holds the worker " + worker_ip_text(q) +
                            "; expected one of the switch's addresses on that prefix");
            } else if (q.source4 && !qp_source4(c, q)) {
                r.error(q.source_mark,
                        "source " + q.source4->str() + " is no IPv4 address of the port whose "
                            "subnet holds the worker " + worker_ip_text(q) +
                            "; expected one of that port's addresses");
            }
        }
    }
}

std::string section_json(const void* section) {
    const auto& rdma = *static_cast<const RdmaConfig*>(section);
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : rdma.jobs) {
        nlohmann::json qps = nlohmann::json::array();
        for (const auto& q : j.qps) {
            qps.push_back({{"rank", q.rank}, {"ip", worker_ip_text(q)}, {"qpn", q.qpn},
                           {"psn", q.psn}, {"switch_qpn", q.switch_qpn},
                           {"switch_psn", q.switch_psn}, {"result_addr", q.result_addr},
                           {"result_rkey", q.result_rkey}, {"result_length", q.result_length},
                           {"timeout", q.timeout}, {"retry_cnt", q.retry_cnt},
                           {"rnr_retry", q.rnr_retry}});
            if (q.source6) {
                qps.back()["source"] = q.source6->str();
            } else if (q.source4) {
                qps.back()["source"] = q.source4->str();
            }
        }
        nlohmann::json job = {{"id", j.id}, {"mode", "server-to-switch"}, {"world", j.world},
                              {"op", std::string(reduce::to_string(j.op))},
                              {"dtype", std::string(reduce::to_string(j.dtype))},
                              {"chunk_bytes", j.chunk_bytes}, {"window", j.window},
                              {"pmtu", j.pmtu}, {"qps", qps}};
        if (j.deterministic) {
            job["deterministic"] = j.fraction_bits
                                       ? nlohmann::json{{"fraction_bits", *j.fraction_bits}}
                                       : nlohmann::json(true);
        }
        if (j.role == Role::aggregator) {
            std::string abm;
            for (uint16_t id : j.abm) {
                if (!abm.empty()) {
                    abm += ',';
                }
                abm += std::to_string(id);
            }
            job["role"] = "aggregator";
            job["parent"] = net::Ipv4Addr{j.parent}.str();
            if (j.source != 0) {
                job["source"] = net::Ipv4Addr{j.source}.str();
            }
            job["bsl"] = j.bsl_bits;
            job["set_id"] = j.set_id;
            job["abm"] = abm;
            job["partial_timeout_ms"] = j.partial_timeout_ms;
        }
        jobs.push_back(job);
    }
    return nlohmann::json{{"jobs", jobs}, {"cm_port", rdma.cm_port}}.dump();
}

}  // namespace

std::string worker_ip_text(const QpConfig& q) {
    return q.ip6 ? q.ip6->str() : net::Ipv4Addr{q.ip}.str();
}

std::optional<net::Ipv6Addr> qp_source6(const config::Config& c, const QpConfig& q) {
    if (!q.ip6) {
        return std::nullopt;
    }
    for (const auto& p : c.ports) {
        for (const auto& a : p.ipv6) {
            if (a.contains(*q.ip6) && (!q.source6 || a.addr == *q.source6)) {
                return a.addr;
            }
        }
    }
    return std::nullopt;
}

std::optional<uint32_t> qp_source4(const config::Config& c, const QpConfig& q) {
    if (q.ip6) {
        return std::nullopt;
    }
    for (const auto& p : c.ports) {
        const auto holder = std::find_if(p.ipv4.begin(), p.ipv4.end(), [&](const auto& a) {
            return a.contains(net::Ipv4Addr{q.ip});
        });
        if (holder == p.ipv4.end()) {
            continue;
        }
        if (!q.source4) {
            return holder->addr.value;
        }
        // Any of the port's addresses: a worker reaches a secondary address of another subnet
        // over the same link (through its gateway, which is the switch).
        for (const auto& a : p.ipv4) {
            if (a.addr == *q.source4) {
                return a.addr.value;
            }
        }
    }
    return std::nullopt;
}

config::SectionHooks section_hooks() {
    return config::SectionHooks{kSectionKey, parse_section, validate_section, section_json};
}

bool same_job(const JobConfig& a, const JobConfig& b) {
    return a.id == b.id && a.world == b.world && a.op == b.op && a.dtype == b.dtype &&
           a.chunk_bytes == b.chunk_bytes && a.window == b.window && a.pmtu == b.pmtu &&
           a.role == b.role && a.parent == b.parent && a.source == b.source &&
           a.bsl_bits == b.bsl_bits && a.set_id == b.set_id && a.abm == b.abm &&
           a.partial_timeout_ms == b.partial_timeout_ms &&
           a.fixed_fraction_bits() == b.fixed_fraction_bits() &&
           a.deterministic == b.deterministic;
}

bool same_qp(const QpConfig& a, const QpConfig& b) {
    return a.rank == b.rank && a.ip == b.ip && a.ip6 == b.ip6 && a.source6 == b.source6 &&
           a.source4 == b.source4 &&
           a.qpn == b.qpn && a.psn == b.psn &&
           a.switch_qpn == b.switch_qpn && a.switch_psn == b.switch_psn &&
           a.result_addr == b.result_addr && a.result_rkey == b.result_rkey &&
           a.result_length == b.result_length && a.timeout == b.timeout &&
           a.retry_cnt == b.retry_cnt && a.rnr_retry == b.rnr_retry;
}

ConnectParse parse_connect(const std::string& text, const std::string& source_name) {
    ConnectParse out;
    YAML::Node n;
    try {
        n = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        out.errors.push_back({source_name, {e.mark.line + 1, e.mark.column + 1},
                              "expected a JSON object: " + e.msg});
        return out;
    }
    Reader r(source_name, out.errors);
    const std::string where = "a connect request";
    if (!r.expect_map(n, where)) {
        return out;
    }
    r.check_keys(n,
                 {"rank", "qpn", "psn", "ip", "source", "pmtu", "result_addr", "result_rkey",
                  "result_length", "chunk_bytes", "window", "dtype", "op", "world", "timeout",
                  "retry_cnt", "rnr_retry"},
                 where);
    ConnectRequest c;
    QpConfig& q = c.qp;
    q.from_api = true;
    read_worker_side(r, n, where, q);
    uint_field(r, n, "pmtu", where, c.pmtu, 256, 4096, true);
    uint_field(r, n, "chunk_bytes", where, c.chunk_bytes, 4, kMaxChunkBytes, true);
    uint_field(r, n, "window", where, c.window, 1, kMaxWindow, true);
    uint_field(r, n, "world", where, c.world, 1, kMaxWorld, true);
    r.required(n, "dtype", where, [](const YAML::Node&) {});
    r.required(n, "op", where, [](const YAML::Node&) {});
    reduce_enum_field(r, n, "dtype", where, kReduceTypes, c.dtype);
    reduce_enum_field(r, n, "op", where, kReduceOps, c.op);
    if (out.errors.empty()) {
        out.request = c;
    }
    return out;
}

}  // namespace ina::features::roce
