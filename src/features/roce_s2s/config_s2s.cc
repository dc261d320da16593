// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/config_s2s.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <set>
#include <tuple>

#include "config/reader.h"
#include "config/reader_fields.h"
#include "roce/rc_responder.h"
#include "wire/bitstring.h"

namespace ina::features::roce_s2s {

namespace {

using config::Reader;

using config::kReduceOps;
using config::kReduceTypes;
using config::reduce_enum_field;

template <typename T>
void field(Reader& r, const YAML::Node& map, const char* key, const std::string& where, T& out,
           uint64_t min, uint64_t max, bool required) {
    config::uint_field(r, map, key, where, out, min, max, required);
}

void ip_field(Reader& r, const YAML::Node& map, const char* key, const std::string& where,
              uint32_t& out) {
    r.required(map, key, where, [&](const YAML::Node& v) {
        net::Ipv4Addr a;
        if (r.parsed(v, "an IPv4 address like 10.77.1.2", a, net::Ipv4Addr::parse)) {
            out = a.value;
        }
    });
}

void read_connection(Reader& r, const YAML::Node& n, ConnectionConfig& c) {
    c.mark = config::mark_of(n);
    const std::string where = "an rdma_s2s connection";
    if (!r.expect_map(n, where)) {
        return;
    }
    r.check_keys(n, {"rank", "ip", "qpn", "root_qpn", "psn", "root_psn", "result_addr",
                     "result_rkey"},
                 where);
    field(r, n, "rank", where, c.rank, 1, kMaxConnections, true);
    ip_field(r, n, "ip", where, c.ip);
    field(r, n, "qpn", where, c.qpn, 2, 0xFFFFFF, true);
    field(r, n, "root_qpn", where, c.root_qpn, 2, 0xFFFFFF, true);
    r.optional(n, "psn", [&](const YAML::Node&) {
        uint32_t psn = 0;
        field(r, n, "psn", where, psn, 0, 0xFFFFFF, true);
        c.psn = psn;
    });
    r.optional(n, "root_psn", [&](const YAML::Node&) {
        uint32_t psn = 0;
        field(r, n, "root_psn", where, psn, 0, 0xFFFFFF, true);
        c.root_psn = psn;
    });
    r.optional(n, "result_addr", [&](const YAML::Node&) {
        uint64_t addr = 0;
        field(r, n, "result_addr", where, addr, 0, UINT64_MAX, true);
        c.result_addr = addr;
    });
    r.optional(n, "result_rkey", [&](const YAML::Node&) {
        uint32_t rkey = 0;
        field(r, n, "result_rkey", where, rkey, 0, UINT32_MAX, true);
        c.result_rkey = rkey;
    });
}

void check_job(Reader& r, const JobConfig& j, const YAML::Node& n) {
    const std::string name = "rdma_s2s job " + std::to_string(j.id);
    if (!ina::roce::valid_pmtu(j.pmtu)) {
        r.error(n, "expected pmtu of " + name + ": 256, 512, 1024, 2048 or 4096");
    }
    if (j.chunk_bytes > j.pmtu) {
        r.error(n, name + ": chunk_bytes " + std::to_string(j.chunk_bytes) + " is above pmtu " +
                       std::to_string(j.pmtu) +
                       "; expected one chunk per WRITE ONLY packet (chunk_bytes <= pmtu)");
    }
    if (j.chunk_bytes % reduce::elem_size(j.dtype) != 0) {
        r.error(n, name + ": expected chunk_bytes a multiple of " +
                       std::to_string(reduce::elem_size(j.dtype)) + " (the dtype's size)");
    }
    if ((j.window & (j.window - 1)) != 0) {
        r.error(n, name + ": expected window a power of two");
    }
    if (j.learn && !j.connections.empty()) {
        r.error(n, name + ": expected either connections or learn: true, not both");
    } else if (j.learn && j.ranks.empty() && j.world > 64) {
        r.error(n, name + ": learn: true expects every rank through this switch; expected a "
                       "world of at most 64 (or the ranks through it)");
    } else if (!j.learn && j.connections.empty()) {
        r.error(n, name + ": expected at least one connection (or learn: true)");
    }
    if (!j.ranks.empty() && !j.learn) {
        r.error(j.ranks_mark, name + ": ranks are read only with learn: true (static "
                                     "connections name their ranks)");
    } else if (!j.ranks.empty() && j.ranks.back() > j.world) {
        r.error(j.ranks_mark, name + ": rank " + std::to_string(j.ranks.back()) +
                                  " is above the world (" + std::to_string(j.world) + ")");
    } else if (j.ranks.size() > kMaxConnections) {
        r.error(j.ranks_mark, name + ": expected at most " + std::to_string(kMaxConnections) +
                                  " ranks through this switch");
    }
    for (const auto& c : j.connections) {
        const bool replication_fields = c.root_psn || c.result_addr || c.result_rkey;
        if (j.replicate && !(c.root_psn && c.result_addr && c.result_rkey)) {
            r.error(c.mark, name + " replicates results: expected root_psn, result_addr and "
                                   "result_rkey on every connection (rank " +
                                   std::to_string(c.rank) + ")");
        } else if (!j.replicate && replication_fields) {
            r.error(c.mark, name + ": root_psn, result_addr and result_rkey are read only with "
                                   "replicate: true (rank " + std::to_string(c.rank) + ")");
        }
    }
}

void read_job(Reader& r, const YAML::Node& n, JobConfig& j) {
    j.mark = config::mark_of(n);
    const std::string where = "an rdma_s2s job";
    if (!r.expect_map(n, where)) {
        return;
    }
    r.check_keys(n,
                 {"id", "root", "world", "op", "dtype", "chunk_bytes", "window", "pmtu",
                  "timeout", "retry_cnt", "learn", "ranks", "drain", "replicate",
                  "connections"},
                 where);
    field(r, n, "id", where, j.id, 1, 65535, true);
    ip_field(r, n, "root", where, j.root);
    // The immediate's count is 8 bits (docs/rdma.md "Worker side"): a job has <= 255 workers.
    field(r, n, "world", where, j.world, 1, 255, true);
    reduce_enum_field(r, n, "op", where, kReduceOps, j.op);
    reduce_enum_field(r, n, "dtype", where, kReduceTypes, j.dtype);
    field(r, n, "chunk_bytes", where, j.chunk_bytes, 4, 4096, false);
    field(r, n, "window", where, j.window, 1, kMaxWindow, false);
    field(r, n, "pmtu", where, j.pmtu, 256, 4096, false);
    field(r, n, "timeout", where, j.timeout, 0, 31, false);
    field(r, n, "retry_cnt", where, j.retry_cnt, 0, 7, false);
    r.optional(n, "learn", [&](const YAML::Node& v) { r.bool_value(v, "learn", j.learn); });
    r.optional(n, "ranks", [&](const YAML::Node& v) {
        j.ranks_mark = config::mark_of(v);
        config::bfr_id_list(r, v, "ranks", j.ranks);
    });
    r.optional(n, "drain", [&](const YAML::Node& v) { r.bool_value(v, "drain", j.drain); });
    r.optional(n, "replicate",
               [&](const YAML::Node& v) { r.bool_value(v, "replicate", j.replicate); });
    r.optional(n, "connections", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of connections")) {
            return;
        }
        for (const auto& cn : v) {
            ConnectionConfig c;
            read_connection(r, cn, c);
            j.connections.push_back(c);
        }
    });
    std::sort(j.connections.begin(), j.connections.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    check_job(r, j, n);
}

std::shared_ptr<const void> parse_section(Reader& r, const YAML::Node& v) {
    auto out = std::make_shared<S2sConfig>();
    if (!r.expect_map(v, "rdma_s2s settings")) {
        return nullptr;
    }
    r.check_keys(v, {"jobs", "leave_timeout_ms", "switches"}, "rdma_s2s");
    field(r, v, "leave_timeout_ms", "rdma_s2s", out->leave_timeout_ms, 1, 3600000, false);
    r.optional(v, "switches", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of neighbouring switches' IPv4 addresses")) {
            return;
        }
        for (const auto& sn : x) {
            net::Ipv4Addr a;
            if (r.parsed(sn, "an IPv4 address like 10.77.9.2", a, net::Ipv4Addr::parse)) {
                out->switches.push_back(a.value);
                out->switch_marks.push_back(config::mark_of(sn));
            }
        }
    });
    r.optional(v, "jobs", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of rdma_s2s jobs")) {
            return;
        }
        for (const auto& jn : x) {
            JobConfig j;
            read_job(r, jn, j);
            out->jobs.push_back(std::move(j));
        }
    });
    if (out->jobs.size() > kMaxJobs) {
        r.error(v, "expected at most " + std::to_string(kMaxJobs) + " rdma_s2s jobs");
    }
    return out;
}

// Cross-references: job ids unique; per job ranks within the world and once each, at most
// kMaxConnections; every connection's two directions belong to one job only.
void validate_section(Reader& r, const config::Config& cfg, const void* section) {
    const auto& s2s = *static_cast<const S2sConfig*>(section);
    // A neighbouring switch is a next hop: on a port's subnet, not one of its addresses.
    std::set<uint32_t> switches;
    for (size_t k = 0; k < s2s.switches.size(); ++k) {
        const uint32_t ip = s2s.switches[k];
        const std::string what = "rdma_s2s switch " + net::Ipv4Addr{ip}.str();
        bool on_subnet = false;
        bool own = false;
        for (const auto& p : cfg.ports) {
            for (const auto& a : p.ipv4) {
                on_subnet = on_subnet || a.contains(net::Ipv4Addr{ip});
                own = own || a.addr.value == ip;
            }
        }
        if (!switches.insert(ip).second) {
            r.error(s2s.switch_marks[k], what + " twice; expected each switch once");
        } else if (own) {
            r.error(s2s.switch_marks[k], what + " is this switch's own address; expected a "
                                                "neighbouring switch's");
        } else if (!on_subnet) {
            r.error(s2s.switch_marks[k], what + " is on no port's subnet; expected the "
                                                "address of a neighbouring switch on a link to it");
        }
    }
    std::set<uint32_t> ids;
    std::set<std::tuple<uint32_t, uint32_t, uint32_t>> keys;
    for (const auto& j : s2s.jobs) {
        if (!ids.insert(j.id).second) {
            r.error(j.mark, "duplicate rdma_s2s job id " + std::to_string(j.id));
        }
        std::set<uint16_t> ranks;
        for (const auto& c : j.connections) {
            const std::string job = " of rdma_s2s job " + std::to_string(j.id);
            if (c.rank > j.world) {
                r.error(c.mark, "rank " + std::to_string(c.rank) + " is above the world (" +
                                    std::to_string(j.world) + ")" + job);
            }
            if (!ranks.insert(c.rank).second) {
                r.error(c.mark, "rank " + std::to_string(c.rank) + " twice" + job);
            }
            if (c.ip == j.root) {
                r.error(c.mark, "worker " + net::Ipv4Addr{c.ip}.str() + " is the root" + job);
            }
            if (!keys.insert({c.ip, j.root, c.root_qpn}).second ||
                !keys.insert({j.root, c.ip, c.qpn}).second) {
                r.error(c.mark, "connection " + net::Ipv4Addr{c.ip}.str() + " QPN " +
                                    std::to_string(c.qpn) + " <-> root QPN " +
                                    std::to_string(c.root_qpn) +
                                    " appears twice; expected each connection in one job once");
            }
        }
    }
}

std::string section_json(const void* section) {
    const auto& s2s = *static_cast<const S2sConfig*>(section);
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& j : s2s.jobs) {
        nlohmann::json conns = nlohmann::json::array();
        for (const auto& c : j.connections) {
            nlohmann::json x = {{"rank", c.rank}, {"ip", net::Ipv4Addr{c.ip}.str()},
                                {"qpn", c.qpn}, {"root_qpn", c.root_qpn}};
            if (c.psn) {
                x["psn"] = *c.psn;
            }
            if (c.root_psn) {
                x["root_psn"] = *c.root_psn;
                x["result_addr"] = *c.result_addr;
                x["result_rkey"] = *c.result_rkey;
            }
            conns.push_back(x);
        }
        jobs.push_back({{"id", j.id}, {"root", net::Ipv4Addr{j.root}.str()}, {"world", j.world},
                        {"op", std::string(reduce::to_string(j.op))},
                        {"dtype", std::string(reduce::to_string(j.dtype))},
                        {"chunk_bytes", j.chunk_bytes}, {"window", j.window}, {"pmtu", j.pmtu},
                        {"timeout", j.timeout}, {"retry_cnt", j.retry_cnt}, {"learn", j.learn}, {"drain", j.drain},
                        {"replicate", j.replicate},
                        {"connections", conns}});
        if (!j.ranks.empty()) {
            // As written in YAML ("2-3"), so the running config reads back.
            jobs.back()["ranks"] = wire::format_bfr_id_list(j.ranks);
        }
    }
    nlohmann::json switches = nlohmann::json::array();
    for (const uint32_t ip : s2s.switches) {
        switches.push_back(net::Ipv4Addr{ip}.str());
    }
    return nlohmann::json{{"jobs", jobs}, {"leave_timeout_ms", s2s.leave_timeout_ms},
                          {"switches", switches}}
        .dump();
}

}  // namespace

config::SectionHooks section_hooks() {
    return config::SectionHooks{kSectionKey, parse_section, validate_section, section_json};
}

bool same_job(const JobConfig& a, const JobConfig& b) {
    if (!(a.id == b.id && a.root == b.root && a.world == b.world && a.op == b.op &&
          a.dtype == b.dtype && a.chunk_bytes == b.chunk_bytes && a.window == b.window &&
          a.pmtu == b.pmtu && a.timeout == b.timeout && a.retry_cnt == b.retry_cnt &&
          a.learn == b.learn && a.replicate == b.replicate && a.ranks == b.ranks &&
          a.connections.size() == b.connections.size())) {
        return false;
    }
    for (size_t i = 0; i < a.connections.size(); ++i) {
        const auto& x = a.connections[i];
        const auto& y = b.connections[i];
        if (x.rank != y.rank || x.ip != y.ip || x.qpn != y.qpn || x.root_qpn != y.root_qpn ||
            x.psn != y.psn || x.root_psn != y.root_psn || x.result_addr != y.result_addr ||
            x.result_rkey != y.result_rkey) {
            return false;
        }
    }
    return true;
}

}  // namespace ina::features::roce_s2s
