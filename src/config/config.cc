// SPDX-License-Identifier: Apache-2.0
#include "config/config.h"
#include "config/reader.h"
#include "config/reader_fields.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <sstream>

#include "reduce/fixed_point.h"
#include "reduce/reduce.h"
#include "wire/bier_header.h"
#include "wire/bitstring.h"

namespace ina::config {

const PortConfig* Config::find_port(std::string_view name) const {
    for (const auto& p : ports) {
        if (p.name == name) {
            return &p;
        }
    }
    return nullptr;
}

int Config::port_index(std::string_view name) const {
    for (size_t i = 0; i < ports.size(); ++i) {
        if (ports[i].name == name) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

std::string Error::str() const {
    std::ostringstream os;
    os << file;
    if (mark.line > 0) {
        os << ':' << mark.line << ':' << mark.column;
    }
    os << ": " << message;
    return os.str();
}

std::string LoadResult::error_text() const {
    std::string out;
    for (const auto& e : errors) {
        out += e.str();
        out += '\n';
    }
    return out;
}

namespace {

std::vector<SectionHooks>& section_registry() {
    static std::vector<SectionHooks> hooks;
    return hooks;
}

constexpr std::string_view kTopLevelKeys[] = {"version", "eal",   "mempool", "ports",
                                              "lcores",  "dataplane", "routes", "ipv6_routes", "neighbours",
                                              "l2",      "arp",   "ina",     "bier",
                                              "control"};

bool valid_name(const std::string& s) {
    if (s.empty() || s.size() > 32) {
        return false;
    }
    return std::all_of(s.begin(), s.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-' || c == '.';
    });
}

// Reads one of `names` into `out` (its index, as the enum's value); the error lists them all.
template <typename E, size_t N>
void enum_value(Reader& r, const YAML::Node& v, const std::string& what,
                const std::array<std::string_view, N>& names, E& out) {
    std::string s;
    if (!r.string_value(v, what, s)) {
        return;
    }
    for (size_t i = 0; i < N; ++i) {
        if (names[i] == s) {
            out = static_cast<E>(i);
            return;
        }
    }
    std::string expected;
    for (size_t i = 0; i < N; ++i) {
        expected += i == 0 ? "" : (i + 1 == N ? " or " : ", ");
        expected += names[i];
    }
    r.error(v, "expected " + what + ": " + expected + ", got '" + s + "'");
}

constexpr std::array<std::string_view, 2> kChunkSteeringNames = {"auto", "off"};  // ChunkSteering

}  // namespace

std::string_view chunk_steering_name(ChunkSteering c) {
    return kChunkSteeringNames[static_cast<size_t>(c)];
}

namespace {

void read_port(Reader& r, const YAML::Node& n, PortConfig& p) {
    p.mark = mark_of(n);
    if (!r.expect_map(n, "a port")) {
        return;
    }
    r.check_keys(n,
                 {"name", "devargs", "rx_queues", "rx_descriptors", "tx_descriptors", "mac", "mtu",
                  "promiscuous", "ipv4", "ipv6", "l2_group", "chunk_steering"},
                 "a port");
    r.required(n, "name", "a port", [&](const YAML::Node& v) {
        if (r.string_value(v, "a port name", p.name) && !valid_name(p.name)) {
            r.error(v, "expected a port name of 1-32 letters, digits, '_', '-' or '.', got '" +
                           p.name + "'");
        }
    });
    r.required(n, "devargs", "a port", [&](const YAML::Node& v) {
        r.string_value(v, "devargs: a PCI address or a vdev string", p.devargs);
    });
    r.optional(n, "rx_queues", [&](const YAML::Node& v) {
        r.uint_value(v, "rx_queues", p.rx_queues, 1, 64);
    });
    r.optional(n, "rx_descriptors", [&](const YAML::Node& v) {
        r.uint_value(v, "rx_descriptors", p.rx_descriptors, 32, 32768);
    });
    r.optional(n, "tx_descriptors", [&](const YAML::Node& v) {
        r.uint_value(v, "tx_descriptors", p.tx_descriptors, 32, 32768);
    });
    r.optional(n, "mac", [&](const YAML::Node& v) {
        net::MacAddr mac;
        if (r.parsed(v, "a MAC address like 02:00:00:00:00:01", mac, net::MacAddr::parse)) {
            if (mac.is_multicast() || mac.is_zero()) {
                r.error(v, "expected a unicast, non-zero MAC address, got '" + mac.str() + "'");
            }
            p.mac = mac;
        }
    });
    r.optional(n, "mtu", [&](const YAML::Node& v) { r.uint_value(v, "mtu", p.mtu, 68, 9600); });
    r.optional(n, "promiscuous",
               [&](const YAML::Node& v) { r.bool_value(v, "promiscuous", p.promiscuous); });
    r.optional(n, "chunk_steering", [&](const YAML::Node& v) {
        enum_value(r, v, "chunk_steering", kChunkSteeringNames, p.chunk_steering);
    });
    r.optional(n, "ipv4", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of interface addresses like 10.0.1.1/24")) {
            return;
        }
        for (const auto& a : v) {
            net::Ipv4Prefix prefix;
            if (r.parsed(a, "an interface address like 10.0.1.1/24", prefix,
                         net::Ipv4Prefix::parse)) {
                if (prefix.length == 0) {
                    r.error(a, "expected a prefix length from 1 to 32");
                } else if (prefix.length < 31 && (prefix.addr.value == prefix.network() ||
                                                  prefix.addr.value == prefix.broadcast())) {
                    r.error(a, "expected a host address, got the network or broadcast address '" +
                                   prefix.str() + "'");
                } else {
                    p.ipv4.push_back(prefix);
                }
                if (p.ipv4.size() == 9) {
                    r.error(a, "expected at most 8 interface addresses per port");
                }
            }
        }
    });
    r.optional(n, "ipv6", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of interface addresses like 2001:db8:1::1/64")) {
            return;
        }
        for (const auto& a : v) {
            net::Ipv6Prefix prefix;
            if (!r.parsed(a, "an IPv6 interface address like 2001:db8:1::1/64", prefix,
                          net::Ipv6Prefix::parse)) {
                continue;
            }
            if (prefix.length == 0) {
                r.error(a, "expected a prefix length from 1 to 128");
            } else if (prefix.addr.is_multicast() || prefix.addr.is_unspecified() ||
                       prefix.addr.is_link_local()) {
                r.error(a, "expected a global or unique-local unicast address, got '" +
                               prefix.str() + "'");
            } else if (prefix.length < 127 && prefix.addr == prefix.network()) {
                r.error(a, "expected a host address, got the subnet-router anycast address '" +
                               prefix.str() + "'");
            } else {
                p.ipv6.push_back(prefix);
            }
            if (p.ipv6.size() == 9) {
                r.error(a, "expected at most 8 IPv6 interface addresses per port");
            }
        }
    });
    r.optional(n, "l2_group", [&](const YAML::Node& v) {
        if (r.string_value(v, "an L2 group name", p.l2_group) && !valid_name(p.l2_group)) {
            r.error(v, "expected an L2 group name of 1-32 letters, digits, '_', '-' or '.'");
        }
    });
}

void read_lcore(Reader& r, const YAML::Node& n, LcoreConfig& l) {
    l.mark = mark_of(n);
    if (!r.expect_map(n, "an lcore")) {
        return;
    }
    r.check_keys(n, {"lcore", "rx"}, "an lcore");
    r.required(n, "lcore", "an lcore",
               [&](const YAML::Node& v) { r.uint_value(v, "an lcore id", l.lcore, 0, 1023); });
    r.required(n, "rx", "an lcore", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of {port, queue}")) {
            return;
        }
        for (const auto& q : v) {
            RxQueueRef ref;
            ref.mark = mark_of(q);
            if (!r.expect_map(q, "an RX queue {port: NAME, queue: N}")) {
                continue;
            }
            r.check_keys(q, {"port", "queue"}, "an RX queue");
            r.required(q, "port", "an RX queue",
                       [&](const YAML::Node& x) { r.string_value(x, "a port name", ref.port); });
            r.optional(q, "queue",
                       [&](const YAML::Node& x) { r.uint_value(x, "a queue id", ref.queue, 0, 63); });
            l.rx.push_back(ref);
        }
    });
}

void read_route(Reader& r, const YAML::Node& n, RouteConfig& rt) {
    rt.mark = mark_of(n);
    if (!r.expect_map(n, "a route")) {
        return;
    }
    r.check_keys(n, {"prefix", "via", "backup_via", "port"}, "a route");
    r.required(n, "prefix", "a route", [&](const YAML::Node& v) {
        if (r.parsed(v, "a prefix like 10.0.3.0/24", rt.prefix, net::Ipv4Prefix::parse) &&
            rt.prefix.addr.value != rt.prefix.network()) {
            net::Ipv4Prefix fixed{net::Ipv4Addr{rt.prefix.network()}, rt.prefix.length};
            r.error(v, "expected a network address with no host bits set; did you mean '" +
                           fixed.str() + "'?");
        }
    });
    r.optional(n, "via", [&](const YAML::Node& v) {
        net::Ipv4Addr a;
        if (r.parsed(v, "a gateway address like 10.0.2.2", a, net::Ipv4Addr::parse)) {
            rt.via = a;
        }
    });
    r.optional(n, "backup_via", [&](const YAML::Node& v) {
        auto one = [&](const YAML::Node& e) {
            net::Ipv4Addr a;
            if (r.parsed(e, "a backup gateway address like 10.0.3.2", a, net::Ipv4Addr::parse)) {
                rt.backup_via.push_back(a);
            }
        };
        if (v.IsSequence()) {
            for (const auto& e : v) {
                one(e);
            }
        } else {
            one(v);
        }
    });
    r.optional(n, "port",
               [&](const YAML::Node& v) { r.string_value(v, "an egress port name", rt.port); });
    if (!rt.backup_via.empty() && (!rt.via || !rt.port.empty())) {
        r.error(n, "expected 'backup_via' only beside a gateway 'via' and no 'port'");
    }
    if (!rt.via && rt.port.empty()) {
        r.error(n, "expected 'via' (a gateway) or 'port' (a device route) in a route");
    }
}

void read_route6(Reader& r, const YAML::Node& n, Route6Config& rt) {
    rt.mark = mark_of(n);
    if (!r.expect_map(n, "an IPv6 route")) {
        return;
    }
    r.check_keys(n, {"prefix", "via", "port"}, "an IPv6 route");
    r.required(n, "prefix", "an IPv6 route", [&](const YAML::Node& v) {
        if (r.parsed(v, "a prefix like 2001:db8:3::/64", rt.prefix, net::Ipv6Prefix::parse) &&
            rt.prefix.addr != rt.prefix.network()) {
            net::Ipv6Prefix fixed{rt.prefix.network(), rt.prefix.length};
            r.error(v, "expected a network address with no host bits set; did you mean '" +
                           fixed.str() + "'?");
        }
    });
    r.optional(n, "via", [&](const YAML::Node& v) {
        net::Ipv6Addr a;
        if (r.parsed(v, "a gateway address like 2001:db8:2::2", a, net::Ipv6Addr::parse)) {
            if (a.is_multicast() || a.is_unspecified()) {
                r.error(v, "expected a unicast gateway address, got '" + a.str() + "'");
            }
            rt.via = a;
        }
    });
    r.optional(n, "port",
               [&](const YAML::Node& v) { r.string_value(v, "an egress port name", rt.port); });
    if (!rt.via && rt.port.empty()) {
        r.error(n, "expected 'via' (a gateway) or 'port' (a device route) in an IPv6 route");
    }
}

// A `neighbours` entry; `ip6` is set instead of nb.ip when its address is IPv6.
void read_neighbour(Reader& r, const YAML::Node& n, NeighbourConfig& nb,
                    std::optional<net::Ipv6Addr>& ip6) {
    nb.mark = mark_of(n);
    if (!r.expect_map(n, "a neighbour")) {
        return;
    }
    r.check_keys(n, {"ip", "mac", "port"}, "a neighbour");
    r.required(n, "ip", "a neighbour", [&](const YAML::Node& v) {
        std::string text;
        if (!r.string_value(v, "an IPv4 or IPv6 address", text)) {
            return;
        }
        if (text.find(':') == std::string::npos) {
            r.parsed(v, "an IPv4 address", nb.ip, net::Ipv4Addr::parse);
            return;
        }
        net::Ipv6Addr a;
        if (r.parsed(v, "an IPv6 address like 2001:db8:1::2", a, net::Ipv6Addr::parse)) {
            if (a.is_multicast() || a.is_unspecified()) {
                r.error(v, "expected a unicast IPv6 neighbour address, got '" + a.str() + "'");
            }
            ip6 = a;
        }
    });
    r.required(n, "mac", "a neighbour", [&](const YAML::Node& v) {
        if (r.parsed(v, "a MAC address like 02:00:00:00:00:01", nb.mac, net::MacAddr::parse) &&
            (nb.mac.is_multicast() || nb.mac.is_zero())) {
            r.error(v, "expected a unicast, non-zero MAC address");
        }
    });
    r.required(n, "port", "a neighbour",
               [&](const YAML::Node& v) { r.string_value(v, "a port name", nb.port); });
}

constexpr std::array<std::string_view, 2> kRoleNames = {"aggregator", "root"};  // InaRole
constexpr std::array<std::string_view, 2> kRejectNames = {"forward", "drop"};   // RejectAction
constexpr std::array<std::string_view, 2> kResultNames = {"unicast", "bier"};   // ResultDelivery
constexpr std::array<std::string_view, 4> kOpNames = {"sum", "prod", "min", "max"};
constexpr std::array<std::string_view, 6> kElemTypeNames = {"int32", "fp32",  "fp16",
                                                            "bf16",  "int64", "fp64"};

void read_ina_job(Reader& r, const YAML::Node& n, InaJobConfig& j) {
    j.mark = mark_of(n);
    if (!r.expect_map(n, "an INA job")) {
        return;
    }
    r.check_keys(n,
                 {"job_id", "role", "bsl", "set_id", "abm", "op", "elem_type", "max_elements",
                  "window", "worker_window", "slot_timeout_ms", "result_cache", "root", "parent",
                  "source", "workers", "results", "ingress", "on_reject", "deterministic"},
                 "an INA job");
    r.required(n, "job_id", "an INA job",
               [&](const YAML::Node& v) { r.uint_value(v, "job_id", j.job_id, 0, 0xFFFFFFFFu); });
    r.required(n, "role", "an INA job",
               [&](const YAML::Node& v) { enum_value(r, v, "role", kRoleNames, j.role); });
    r.optional(n, "bsl", [&](const YAML::Node& v) { read_bsl(r, v, j.bsl_bits); });
    r.optional(n, "set_id", [&](const YAML::Node& v) {
        r.uint_value(v, "set_id", j.set_id, 0, 255);
    });
    r.required(n, "abm", "an INA job", [&](const YAML::Node& v) {
        if (bfr_id_list(r, v, "abm", j.abm)) {
            check_in_set(r, v, "abm", j.abm, j.bsl_bits, j.set_id);
        }
    });
    r.required(n, "op", "an INA job",
               [&](const YAML::Node& v) { enum_value(r, v, "op", kOpNames, j.op); });
    r.required(n, "elem_type", "an INA job", [&](const YAML::Node& v) {
        enum_value(r, v, "elem_type", kElemTypeNames, j.elem_type);
    });
    r.optional(n, "max_elements", [&](const YAML::Node& v) {
        r.uint_value(v, "max_elements", j.max_elements, 1, 65535);
    });
    r.optional(n, "window", [&](const YAML::Node& v) {
        if (r.uint_value(v, "window", j.window, 1, 1u << 20) && (j.window & (j.window - 1)) != 0) {
            r.error(v, "expected window: a power of two (chunk seq maps to seq mod window), got " +
                           std::to_string(j.window));
        }
    });
    r.optional(n, "worker_window", [&](const YAML::Node& v) {
        if (r.uint_value(v, "worker_window", j.worker_window, 1, 1u << 20) &&
            ((j.worker_window & (j.worker_window - 1)) != 0 || j.worker_window < j.window)) {
            r.error(v, "expected worker_window: a power of two at least 'window' (" +
                           std::to_string(j.window) + "), got " + std::to_string(j.worker_window));
        } else if (j.role == InaRole::root && j.worker_window > j.window) {
            // A root has no fallback: its two entries per slot index could both hold chunks
            // waiting for releases that need a third chunk with no slot (docs/protocol.md).
            r.error(v, "worker_window " + std::to_string(j.worker_window) +
                           " above 'window' (" + std::to_string(j.window) +
                           ") at a root, which has no fallback for the chunks beyond its slots "
                           "and can deadlock; raise window to " +
                           std::to_string(j.worker_window) + " or drop worker_window");
        }
    });
    r.optional(n, "slot_timeout_ms", [&](const YAML::Node& v) {
        r.uint_value(v, "slot_timeout_ms", j.slot_timeout_ms, 1, 3600000);
    });
    r.optional(n, "result_cache", [&](const YAML::Node& v) {
        uint32_t depth = 0;
        if (!r.uint_value(v, "result_cache (released results kept per slot index)", depth, 0,
                          2)) {
            return;
        }
        if (j.role != InaRole::root && depth != 0) {
            // An aggregator holds partial sums, not results: its parent answers retransmissions.
            r.error(v, "result_cache " + std::to_string(depth) +
                           " at an aggregator: only a root keeps results (use 0 or drop it)");
            return;
        }
        j.result_cache = depth;
    });
    r.required(n, "root", "an INA job", [&](const YAML::Node& v) {
        r.parsed(v, "root: the VAT root's IPv4 address", j.root, net::Ipv4Addr::parse);
    });
    r.optional(n, "parent", [&](const YAML::Node& v) {
        net::Ipv4Addr a;
        if (r.parsed(v, "parent: an IPv4 address", a, net::Ipv4Addr::parse)) {
            j.parent = a;
        }
    });
    r.optional(n, "source", [&](const YAML::Node& v) {
        net::Ipv4Addr a;
        if (r.parsed(v, "source: an IPv4 address of this switch", a, net::Ipv4Addr::parse)) {
            j.source = a;
        }
    });
    r.optional(n, "workers", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of workers {bfr_id, ip}")) {
            return;
        }
        for (const auto& w : v) {
            InaWorkerConfig wc;
            wc.mark = mark_of(w);
            if (!r.expect_map(w, "a worker {bfr_id: N, ip: A.B.C.D}")) {
                continue;
            }
            r.check_keys(w, {"bfr_id", "ip"}, "a worker");
            r.required(w, "bfr_id", "a worker", [&](const YAML::Node& x) {
                r.uint_value(x, "bfr_id", wc.bfr_id, 1, 65535);
            });
            r.required(w, "ip", "a worker", [&](const YAML::Node& x) {
                r.parsed(x, "an IPv4 address", wc.ip, net::Ipv4Addr::parse);
            });
            j.workers.push_back(wc);
        }
    });
    r.optional(n, "ingress", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "ingress rules {ports, sources}")) {
            return;
        }
        r.check_keys(v, {"ports", "sources"}, "ingress");
        r.optional(v, "ports", [&](const YAML::Node& x) {
            if (!r.expect_seq(x, "a list of port names")) {
                return;
            }
            for (const auto& p : x) {
                std::string name;
                if (r.string_value(p, "a port name", name)) {
                    j.ingress_ports.push_back(name);
                }
            }
        });
        r.optional(v, "sources", [&](const YAML::Node& x) {
            if (!r.expect_seq(x, "a list of source prefixes like 10.0.1.0/24")) {
                return;
            }
            for (const auto& p : x) {
                net::Ipv4Prefix pfx;
                if (r.parsed(p, "a source prefix like 10.0.1.0/24", pfx,
                             net::Ipv4Prefix::parse)) {
                    j.ingress_sources.push_back(pfx);
                }
            }
        });
    });
    r.optional(n, "on_reject", [&](const YAML::Node& v) {
        enum_value(r, v, "on_reject", kRejectNames, j.on_reject);
    });
    r.optional(n, "deterministic", [&](const YAML::Node& v) {
        read_deterministic(r, v, static_cast<reduce::ElemType>(j.elem_type),
                           static_cast<reduce::Op>(j.op), j.deterministic, j.fraction_bits);
    });
    r.optional(n, "results", [&](const YAML::Node& v) {
        enum_value(r, v, "results", kResultNames, j.results);
    });
}

void read_bier_neighbour(Reader& r, const YAML::Node& n, const BiftConfig& t,
                         BierNeighbourConfig& nb) {
    nb.mark = mark_of(n);
    if (!r.expect_map(n, "a BIER neighbour {via, bfr_ids}")) {
        return;
    }
    r.check_keys(n, {"via", "bfr_ids"}, "a BIER neighbour");
    r.required(n, "via", "a BIER neighbour", [&](const YAML::Node& v) {
        r.parsed(v, "via: the neighbour BFR's IPv4 address", nb.via, net::Ipv4Addr::parse);
    });
    r.required(n, "bfr_ids", "a BIER neighbour", [&](const YAML::Node& v) {
        if (bfr_id_list(r, v, "bfr_ids", nb.bfr_ids)) {
            check_in_set(r, v, "bfr_ids", nb.bfr_ids, t.bsl_bits, t.set_id);
        }
    });
}

void read_bier_local(Reader& r, const YAML::Node& n, const BiftConfig& t, BierLocalConfig& l) {
    l.mark = mark_of(n);
    if (!r.expect_map(n, "a local BFER bit {bfr_id, host}")) {
        return;
    }
    r.check_keys(n, {"bfr_id", "host"}, "a local BFER bit");
    r.required(n, "bfr_id", "a local BFER bit", [&](const YAML::Node& v) {
        if (r.uint_value(v, "bfr_id", l.bfr_id, 1, 65535)) {
            check_in_set(r, v, "bfr_id", {l.bfr_id}, t.bsl_bits, t.set_id);
        }
    });
    r.required(n, "host", "a local BFER bit", [&](const YAML::Node& v) {
        r.parsed(v, "host: the IPv4 address packets for this bit are delivered to", l.host,
                 net::Ipv4Addr::parse);
    });
}

void read_bift(Reader& r, const YAML::Node& n, uint8_t sub_domain, BiftConfig& t) {
    t.mark = mark_of(n);
    if (!r.expect_map(n, "a BIFT")) {
        return;
    }
    r.check_keys(n, {"bift_id", "bsl", "set_id", "neighbours", "local"}, "a BIFT");
    r.optional(n, "bsl", [&](const YAML::Node& v) { read_bsl(r, v, t.bsl_bits); });
    bool explicit_id = false;
    r.optional(n, "bift_id", [&](const YAML::Node& v) {
        explicit_id = r.uint_value(v, "bift_id (20 bits)", t.bift_id, 1, wire::kMaxBiftId);
    });
    r.optional(n, "set_id", [&](const YAML::Node& v) {
        // An explicit BIFT-id may name any set a BFR-id reaches (BSL 64: SI up to 1023); the
        // default BIFT-id encoding has 8 bits for it.
        const uint32_t max_si = 65535u / t.bsl_bits;
        if (r.uint_value(v, "set_id", t.set_id, 0, max_si) && !explicit_id && t.set_id > 255) {
            r.error(v, "expected set_id at most 255 without an explicit bift_id (the default "
                       "BIFT-id holds it in 8 bits)");
        }
    });
    if (!explicit_id) {
        const auto code = wire::bsl_code_from_bits(t.bsl_bits);
        t.bift_id = wire::encode_bift_id({code.value_or(3), sub_domain,
                                          static_cast<uint8_t>(t.set_id)})
                        .value_or(0);
    }
    r.optional(n, "neighbours", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of BIER neighbours")) {
            return;
        }
        for (const auto& x : v) {
            read_bier_neighbour(r, x, t, t.neighbours.emplace_back());
        }
    });
    r.optional(n, "local", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of local BFER bits")) {
            return;
        }
        for (const auto& x : v) {
            read_bier_local(r, x, t, t.local.emplace_back());
        }
    });
}

void read_bier_group(Reader& r, const YAML::Node& n, BierGroupConfig& g) {
    g.mark = mark_of(n);
    if (!r.expect_map(n, "a BIER multicast group {group, bfr_ids}")) {
        return;
    }
    r.check_keys(n, {"group", "bfr_ids", "bsl"}, "a BIER multicast group");
    r.required(n, "group", "a BIER multicast group", [&](const YAML::Node& v) {
        if (r.parsed(v, "group: an IPv4 multicast address", g.group, net::Ipv4Addr::parse) &&
            (g.group.value >> 28) != 0xE) {
            r.error(v, "expected group: an IPv4 multicast address (224.0.0.0/4), got " +
                           g.group.str());
        }
    });
    r.required(n, "bfr_ids", "a BIER multicast group",
               [&](const YAML::Node& v) { bfr_id_list(r, v, "bfr_ids", g.bfr_ids); });
    r.optional(n, "bsl", [&](const YAML::Node& v) { read_bsl(r, v, g.bsl_bits); });
}

void read_bier(Reader& r, const YAML::Node& v, BierConfig& b) {
    b.mark = mark_of(v);
    if (!r.expect_map(v, "bier settings")) {
        return;
    }
    r.check_keys(v, {"sub_domain", "bfr_id", "ttl", "bifts", "groups"}, "bier");
    r.optional(v, "sub_domain", [&](const YAML::Node& x) {
        r.uint_value(x, "sub_domain", b.sub_domain, 0, 255);
    });
    r.optional(v, "bfr_id",
               [&](const YAML::Node& x) { r.uint_value(x, "bfr_id", b.bfr_id, 1, 65535); });
    r.optional(v, "ttl", [&](const YAML::Node& x) { r.uint_value(x, "ttl", b.ttl, 1, 255); });
    r.optional(v, "bifts", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of BIFTs")) {
            return;
        }
        for (const auto& t : x) {
            read_bift(r, t, b.sub_domain, b.bifts.emplace_back());
        }
    });
    r.optional(v, "groups", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of BIER multicast groups")) {
            return;
        }
        for (const auto& g : x) {
            read_bier_group(r, g, b.groups.emplace_back());
        }
    });
}

bool parse_listen(const std::string& s) { return s.empty() || parse_listen_address(s); }

bool readable_file(const std::string& path) { return static_cast<bool>(std::ifstream(path)); }

constexpr size_t kMinTokenLength = 16;

void read_api_client(Reader& r, const YAML::Node& n, const ControlConfig& control,
                     ApiClientConfig& client) {
    client.mark = mark_of(n);
    if (!r.expect_map(n, "an API client {name, role, token_file | token_sha256 | cert_cn}")) {
        return;
    }
    r.check_keys(n, {"name", "role", "token_file", "token_sha256", "cert_cn"},
                 "a control.clients entry");
    r.required(n, "name", "a control.clients entry", [&](const YAML::Node& v) {
        if (r.string_value(v, "a client name", client.name) && !valid_name(client.name)) {
            r.error(v, "expected a client name of 1-32 letters, digits, '_', '-' or '.'");
        }
    });
    r.required(n, "role", "a control.clients entry", [&](const YAML::Node& v) {
        std::string role;
        if (!r.scalar(v, "a role", role)) {
            return;
        }
        if (role == "read") {
            client.role = ApiRole::read;
        } else if (role == "write") {
            client.role = ApiRole::write;
        } else {
            r.error(v, "expected role read (GET only) or write (every request), got '" + role +
                           "'");
        }
    });
    int credentials = 0;
    r.optional(n, "token_file", [&](const YAML::Node& v) {
        ++credentials;
        if (!r.string_value(v, "a token file path", client.token_file)) {
            return;
        }
        const auto token = read_token_file(client.token_file);
        if (!token) {
            r.error(v, "cannot read token file '" + client.token_file + "'");
        } else if (token->size() < kMinTokenLength) {
            r.error(v, "expected a token of at least " + std::to_string(kMinTokenLength) +
                           " characters on the first line of '" + client.token_file + "'");
        }
    });
    r.optional(n, "token_sha256", [&](const YAML::Node& v) {
        ++credentials;
        if (!r.string_value(v, "a SHA-256 in hex", client.token_sha256)) {
            return;
        }
        const bool hex = client.token_sha256.size() == 64 &&
                         std::all_of(client.token_sha256.begin(), client.token_sha256.end(),
                                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
        if (!hex) {
            r.error(v, "expected token_sha256: 64 hex digits (sha256sum of the token), got '" +
                           client.token_sha256 + "'");
        }
        std::transform(client.token_sha256.begin(), client.token_sha256.end(),
                       client.token_sha256.begin(),
                       [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    });
    r.optional(n, "cert_cn", [&](const YAML::Node& v) {
        ++credentials;
        if (r.string_value(v, "a client certificate subject CN", client.cert_cn) &&
            control.tls.client_ca.empty()) {
            r.error(v, "cert_cn needs control.tls.client_ca (client certificates are verified "
                       "against it)");
        }
    });
    if (credentials != 1 && n.IsMap()) {
        r.error(n, "expected exactly one of token_file, token_sha256 or cert_cn in client '" +
                       client.name + "'");
    }
}

void read_control(Reader& r, const YAML::Node& v, ControlConfig& c) {
    c.mark = mark_of(v);
    if (!r.expect_map(v, "control settings")) {
        return;
    }
    r.check_keys(v,
                 {"listen", "metrics_listen", "tls", "clients", "allow_unauthenticated",
                  "allowed_origins", "allowed_hosts", "max_body_bytes", "max_connections",
                  "max_connections_per_client", "threads", "header_timeout_ms",
                  "request_timeout_ms", "idle_timeout_ms", "audit_log"},
                 "control");
    const auto listen_value = [&](const YAML::Node& x, std::string& out) {
        if (r.string_value(x, "a listen address", out, true) && !parse_listen(out)) {
            r.error(x, "expected a listen address HOST:PORT like 127.0.0.1:9464, or \"\" to "
                       "disable");
        }
    };
    r.optional(v, "listen", [&](const YAML::Node& x) { listen_value(x, c.listen); });
    r.optional(v, "metrics_listen", [&](const YAML::Node& x) {
        listen_value(x, c.metrics_listen);
        if (!c.metrics_listen.empty() && c.metrics_listen == c.listen) {
            r.error(x, "expected metrics_listen to differ from listen (its own port)");
        }
    });
    r.optional(v, "tls", [&](const YAML::Node& t) {
        if (!r.expect_map(t, "TLS settings {cert, key, client_ca}")) {
            return;
        }
        r.check_keys(t, {"cert", "key", "client_ca"}, "control.tls");
        const auto path = [&](const char* key, std::string& out) {
            r.optional(t, key, [&](const YAML::Node& x) {
                if (r.string_value(x, std::string("a PEM file path for ") + key, out) &&
                    !readable_file(out)) {
                    r.error(x, "cannot read " + std::string(key) + " file '" + out + "'");
                }
            });
        };
        path("cert", c.tls.cert);
        path("key", c.tls.key);
        path("client_ca", c.tls.client_ca);
        if (c.tls.cert.empty() != c.tls.key.empty() || (c.tls.cert.empty() && !c.tls.client_ca.empty())) {
            r.error(t, "expected both control.tls.cert and control.tls.key (client_ca needs them)");
        }
    });
    r.optional(v, "clients", [&](const YAML::Node& x) {
        if (!r.expect_seq(x, "a list of API clients")) {
            return;
        }
        std::set<std::string> names;
        for (const auto& n : x) {
            ApiClientConfig client;
            read_api_client(r, n, c, client);
            if (!client.name.empty() && !names.insert(client.name).second) {
                r.error(n, "duplicate client name '" + client.name + "'; expected each once");
            }
            c.clients.push_back(std::move(client));
        }
    });
    r.optional(v, "allow_unauthenticated", [&](const YAML::Node& x) {
        r.bool_value(x, "allow_unauthenticated", c.allow_unauthenticated);
    });
    const auto string_list = [&](const char* key, const char* what, std::vector<std::string>& out) {
        r.optional(v, key, [&](const YAML::Node& x) {
            if (!r.expect_seq(x, what)) {
                return;
            }
            for (const auto& e : x) {
                std::string s;
                if (r.string_value(e, what, s)) {
                    out.push_back(s);
                }
            }
        });
    };
    string_list("allowed_origins", "an Origin like https://ops.example", c.allowed_origins);
    string_list("allowed_hosts", "a Host name like switch1.example", c.allowed_hosts);
    r.optional(v, "max_body_bytes", [&](const YAML::Node& x) {
        r.uint_value(x, "max_body_bytes", c.max_body_bytes, 1024, 1u << 30);
    });
    r.optional(v, "max_connections", [&](const YAML::Node& x) {
        r.uint_value(x, "max_connections", c.max_connections, 1, 4096);
    });
    r.optional(v, "max_connections_per_client", [&](const YAML::Node& x) {
        r.uint_value(x, "max_connections_per_client", c.max_connections_per_client, 1, 4096);
    });
    r.optional(v, "threads",
               [&](const YAML::Node& x) { r.uint_value(x, "threads", c.threads, 1, 64); });
    r.optional(v, "header_timeout_ms", [&](const YAML::Node& x) {
        r.uint_value(x, "header_timeout_ms", c.header_timeout_ms, 100, 600000);
    });
    r.optional(v, "request_timeout_ms", [&](const YAML::Node& x) {
        r.uint_value(x, "request_timeout_ms", c.request_timeout_ms, 100, 600000);
    });
    r.optional(v, "idle_timeout_ms", [&](const YAML::Node& x) {
        r.uint_value(x, "idle_timeout_ms", c.idle_timeout_ms, 100, 600000);
    });
    r.optional(v, "audit_log", [&](const YAML::Node& x) {
        r.string_value(x, "an audit log file path", c.audit_log, true);
    });
    if (c.max_connections_per_client > c.max_connections) {
        r.error(v, "expected max_connections_per_client <= max_connections");
    }
    // Without clients anyone who can reach the port can change forwarding: only loopback.
    const auto check_exposure = [&](const std::string& listen, const char* key) {
        const auto addr = listen.empty() ? std::nullopt : parse_listen_address(listen);
        if (addr && !is_loopback_host(addr->host) && c.clients.empty() &&
            !c.allow_unauthenticated) {
            r.error(v[key], std::string("control.") + key + " " + listen +
                                " is not loopback and control.clients is empty: expected "
                                "clients (tokens or client certificates), or "
                                "allow_unauthenticated: true behind your own access control");
        }
    };
    check_exposure(c.listen, "listen");
    check_exposure(c.metrics_listen, "metrics_listen");
}

void read_document(Reader& r, const YAML::Node& root, Config& c) {
    if (!r.expect_map(root, "a configuration document")) {
        return;
    }
    std::vector<std::string_view> top(std::begin(kTopLevelKeys), std::end(kTopLevelKeys));
    for (const auto& h : section_registry()) {
        top.emplace_back(h.key);
    }
    r.check_keys(root, top, "the top level");
    for (const auto& h : section_registry()) {
        r.optional(root, h.key, [&](const YAML::Node& v) {
            if (auto parsed = h.parse(r, v)) {
                c.sections[h.key] = std::move(parsed);
            }
        });
    }
    r.required(root, "version", "the top level", [&](const YAML::Node& v) {
        r.uint_value(v, "version (this build reads version 1)", c.version, 1, 1);
    });
    r.optional(root, "eal", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "eal settings")) {
            return;
        }
        r.check_keys(v, {"args"}, "eal");
        r.optional(v, "args", [&](const YAML::Node& a) {
            if (!r.expect_seq(a, "a list of EAL arguments")) {
                return;
            }
            for (const auto& x : a) {
                std::string s;
                if (r.string_value(x, "an EAL argument", s)) {
                    c.eal_args.push_back(s);
                }
            }
        });
    });
    r.optional(root, "mempool", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "mempool settings")) {
            return;
        }
        r.check_keys(v, {"mbufs", "cache_size", "data_room"}, "mempool");
        c.mempool.mark = mark_of(v);
        r.optional(v, "mbufs", [&](const YAML::Node& x) {
            r.uint_value(x, "mbufs", c.mempool.mbufs, 1023, 16u << 20);
        });
        r.optional(v, "cache_size", [&](const YAML::Node& x) {
            r.uint_value(x, "cache_size", c.mempool.cache_size, 0, 512);
        });
        r.optional(v, "data_room", [&](const YAML::Node& x) {
            r.uint_value(x, "data_room", c.mempool.data_room, 256, 65535);
        });
    });
    r.required(root, "ports", "the top level", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of ports")) {
            return;
        }
        for (const auto& p : v) {
            PortConfig port;
            read_port(r, p, port);
            c.ports.push_back(std::move(port));
        }
    });
    r.optional(root, "lcores", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of lcores")) {
            return;
        }
        for (const auto& l : v) {
            LcoreConfig lc;
            read_lcore(r, l, lc);
            c.lcores.push_back(std::move(lc));
        }
    });
    r.optional(root, "dataplane", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "dataplane settings")) {
            return;
        }
        r.check_keys(v, {"burst_size", "tx_drain_us", "idle_sleep_us", "idle_loops_before_sleep"},
                     "dataplane");
        auto& d = c.dataplane;
        r.optional(v, "burst_size",
                   [&](const YAML::Node& x) { r.uint_value(x, "burst_size", d.burst_size, 1, 64); });
        r.optional(v, "tx_drain_us", [&](const YAML::Node& x) {
            r.uint_value(x, "tx_drain_us", d.tx_drain_us, 1, 1000000);
        });
        r.optional(v, "idle_sleep_us", [&](const YAML::Node& x) {
            r.uint_value(x, "idle_sleep_us", d.idle_sleep_us, 0, 100000);
        });
        r.optional(v, "idle_loops_before_sleep", [&](const YAML::Node& x) {
            r.uint_value(x, "idle_loops_before_sleep", d.idle_loops_before_sleep, 1, 1u << 30);
        });
    });
    r.optional(root, "routes", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of routes")) {
            return;
        }
        for (const auto& x : v) {
            RouteConfig rt;
            read_route(r, x, rt);
            c.routes.push_back(std::move(rt));
        }
    });
    r.optional(root, "ipv6_routes", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of IPv6 routes")) {
            return;
        }
        for (const auto& x : v) {
            Route6Config rt;
            read_route6(r, x, rt);
            c.ipv6_routes.push_back(std::move(rt));
        }
    });
    r.optional(root, "neighbours", [&](const YAML::Node& v) {
        if (!r.expect_seq(v, "a list of neighbours")) {
            return;
        }
        for (const auto& x : v) {
            NeighbourConfig nb;
            std::optional<net::Ipv6Addr> ip6;
            read_neighbour(r, x, nb, ip6);
            if (ip6) {
                c.neighbours6.push_back({*ip6, nb.mac, std::move(nb.port), nb.mark});
            } else {
                c.neighbours.push_back(std::move(nb));
            }
        }
    });
    r.optional(root, "l2", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "l2 settings")) {
            return;
        }
        r.check_keys(v, {"mac_ageing_s", "max_fdb_entries"}, "l2");
        r.optional(v, "mac_ageing_s", [&](const YAML::Node& x) {
            r.uint_value(x, "mac_ageing_s", c.l2.mac_ageing_s, 1, 1000000);
        });
        r.optional(v, "max_fdb_entries", [&](const YAML::Node& x) {
            r.uint_value(x, "max_fdb_entries", c.l2.max_fdb_entries, 16, 1u << 20);
        });
    });
    r.optional(root, "arp", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "arp settings")) {
            return;
        }
        r.check_keys(v, {"neighbour_timeout_s", "request_interval_ms", "max_neighbours"}, "arp");
        r.optional(v, "neighbour_timeout_s", [&](const YAML::Node& x) {
            r.uint_value(x, "neighbour_timeout_s", c.arp.neighbour_timeout_s, 10, 1000000);
        });
        r.optional(v, "request_interval_ms", [&](const YAML::Node& x) {
            r.uint_value(x, "request_interval_ms", c.arp.request_interval_ms, 10, 600000);
        });
        r.optional(v, "max_neighbours", [&](const YAML::Node& x) {
            r.uint_value(x, "max_neighbours", c.arp.max_neighbours, 16, 1u << 20);
        });
    });
    r.optional(root, "ina", [&](const YAML::Node& v) {
        if (!r.expect_map(v, "ina settings")) {
            return;
        }
        c.ina.mark = mark_of(v);
        r.check_keys(v, {"udp_port", "table_memory_mb", "jobs"}, "ina");
        r.optional(v, "udp_port", [&](const YAML::Node& x) {
            r.uint_value(x, "udp_port", c.ina.udp_port, 1, 65535);
        });
        r.optional(v, "table_memory_mb", [&](const YAML::Node& x) {
            r.uint_value(x, "table_memory_mb", c.ina.table_memory_mb, 1, 1u << 20);
        });
        r.optional(v, "jobs", [&](const YAML::Node& x) {
            if (!r.expect_seq(x, "a list of INA jobs")) {
                return;
            }
            for (const auto& jn : x) {
                InaJobConfig job;
                read_ina_job(r, jn, job);
                c.ina.jobs.push_back(std::move(job));
            }
        });
    });
    r.optional(root, "bier", [&](const YAML::Node& v) { read_bier(r, v, c.bier); });
    r.optional(root, "control", [&](const YAML::Node& v) { read_control(r, v, c.control); });
}

// A BFIR sending to `ids` needs its own BFR-id and a BIFT for every set the ids fall in.
void check_bier_targets(Reader& r, const BierConfig& bier, Mark mark, const std::string& who,
                        const std::vector<uint16_t>& ids, uint16_t bsl) {
    if (bier.bfr_id == 0) {
        r.error(mark, who + " is sent over BIER from this switch: expected bier.bfr_id (the "
                            "BFIR-id of the packets)");
    }
    if (bsl == 0) {
        r.error(mark, who + ": expected a BIFT to send it with (and, when the BIFTs have "
                            "different BSLs, a 'bsl' saying which)");
        return;
    }
    std::set<uint16_t> missing;
    for (auto id : ids) {
        const auto si = static_cast<uint16_t>((id - 1u) / bsl);
        if (find_bift(bier, bsl, si) == nullptr) {
            missing.insert(si);
        }
    }
    for (auto si : missing) {
        r.error(mark, who + " has BFR-ids in set " + std::to_string(si) + " of BSL " +
                          std::to_string(bsl) + ": expected a BIFT with bsl: " +
                          std::to_string(bsl) + " and set_id: " + std::to_string(si));
    }
}

template <typename ConnectedPort>
void validate_bier(Reader& r, const Config& c, ConnectedPort&& connected_port) {
    const BierConfig& b = c.bier;
    if (b.bifts.size() > 64) {
        r.error(b.mark, "expected at most 64 BIFTs, got " + std::to_string(b.bifts.size()));
    }
    auto own = [&](net::Ipv4Addr a) {
        for (const auto& p : c.ports) {
            for (const auto& pfx : p.ipv4) {
                if (pfx.addr == a) {
                    return true;
                }
            }
        }
        return false;
    };
    std::set<uint32_t> ids;
    std::set<std::pair<uint16_t, uint16_t>> tables;
    for (const auto& t : b.bifts) {
        const std::string name = "BIFT " + std::to_string(t.bift_id);
        // A BIER frame's first segment holds Ethernet, the BIER header and the inner headers a
        // BFER rewrites (pipeline/mbuf_chain.h kHeadBytes), and a neighbour copy's header mbuf
        // holds Ethernet and the BIER header: both must fit one mbuf after its 128-byte headroom.
        const uint32_t need = 14 + 12 + t.bsl_bits / 8u + 128;
        if (c.mempool.data_room < 128 + need) {
            r.error(t.mark, name + ": BSL " + std::to_string(t.bsl_bits) + " needs mbufs of " +
                                std::to_string(128 + need) + " bytes; mempool.data_room is " +
                                std::to_string(c.mempool.data_room));
        }
        if (!ids.insert(t.bift_id).second) {
            r.error(t.mark, "duplicate bift_id " + std::to_string(t.bift_id));
        }
        if (!tables.insert({t.bsl_bits, t.set_id}).second) {
            r.error(t.mark, "a second BIFT for bsl " + std::to_string(t.bsl_bits) + " set " +
                                std::to_string(t.set_id) + "; expected one per (BSL, set)");
        }
        if (t.neighbours.size() > 16) {
            r.error(t.mark, name + ": expected at most 16 neighbours");
        }
        if (t.local.size() > 64) {
            r.error(t.mark, name + ": expected at most 64 local bits");
        }
        std::map<uint16_t, unsigned> paths;  // BFR-id -> neighbours reaching it (ECMP width)
        std::set<net::Ipv4Addr> vias;
        for (const auto& nb : t.neighbours) {
            if (!vias.insert(nb.via).second) {
                r.error(nb.mark, name + ": neighbour " + nb.via.str() + " listed twice");
            }
            if (own(nb.via) || connected_port(nb.via) == nullptr) {
                r.error(nb.mark, "BIER neighbour " + nb.via.str() +
                                     " is not on a connected subnet; expected the address of "
                                     "an adjacent BFR");
            }
            for (auto id : nb.bfr_ids) {
                ++paths[id];
            }
        }
        unsigned planes = 1;
        for (const auto& [id, width] : paths) {
            planes = std::lcm(planes, width);
        }
        if (planes > 16) {
            r.error(t.mark, name + ": the ECMP path counts need " + std::to_string(planes) +
                                " entropy planes (their least common multiple); expected at "
                                "most 16");
        }
        std::set<uint16_t> local_ids;
        for (const auto& l : t.local) {
            if (!local_ids.insert(l.bfr_id).second) {
                r.error(l.mark, name + ": local bfr_id " + std::to_string(l.bfr_id) +
                                    " listed twice");
            }
            if (paths.count(l.bfr_id) != 0) {
                r.error(l.mark, name + ": bfr_id " + std::to_string(l.bfr_id) +
                                    " is local and also reached through a neighbour");
            }
            if (own(l.host) || connected_port(l.host) == nullptr) {
                r.error(l.mark, "local host " + l.host.str() +
                                    " is not on a connected subnet; expected a station "
                                    "attached to this switch");
            }
        }
    }
    std::set<net::Ipv4Addr> groups;
    for (const auto& g : b.groups) {
        if (!groups.insert(g.group).second) {
            r.error(g.mark, "duplicate BIER group " + g.group.str());
        }
        if (!g.bfr_ids.empty()) {
            check_bier_targets(r, b, g.mark, "group " + g.group.str(), g.bfr_ids,
                               bier_bsl_for(b, g.bsl_bits));
        }
    }
}

// The port with a connected subnet holding `a`, or nullptr.
const PortConfig* connected_port_of(const Config& c, net::Ipv4Addr a) {
    for (const auto& p : c.ports) {
        for (const auto& pfx : p.ipv4) {
            if (pfx.contains(a)) {
                return &p;
            }
        }
    }
    return nullptr;
}

}  // namespace

const PortConfig* connected_port6_of(const Config& c, const net::Ipv6Addr& a) {
    for (const auto& p : c.ports) {
        for (const auto& pfx : p.ipv6) {
            if (pfx.contains(a)) {
                return &p;
            }
        }
    }
    return nullptr;
}

namespace {

// The checks of one route that need nothing but the rest of `c` (the duplicate check is the
// caller's): shared by validate() and the API's in-place route change.
void validate_route(Reader& r, const Config& c, const RouteConfig& rt) {
    auto connected_port = [&](net::Ipv4Addr a) { return connected_port_of(c, a); };
    if (!rt.port.empty() && c.find_port(rt.port) == nullptr) {
        r.error(rt.mark, "unknown port '" + rt.port + "' in route " + rt.prefix.str());
    }
    if (rt.via && rt.port.empty() && connected_port(*rt.via) == nullptr) {
        r.error(rt.mark, "gateway " + rt.via->str() + " of route " + rt.prefix.str() +
                             " is in no connected subnet; expected it inside a port's ipv4 "
                             "prefix, or an explicit 'port'");
    }
    std::set<uint32_t> gateways;
    if (rt.via) {
        gateways.insert(rt.via->value);
    }
    for (const auto& b : rt.backup_via) {
        if (!gateways.insert(b.value).second) {
            r.error(rt.mark, "backup gateway " + b.str() + " of route " + rt.prefix.str() +
                                 " repeats a gateway of the route");
        } else if (connected_port(b) == nullptr) {
            r.error(rt.mark, "backup gateway " + b.str() + " of route " + rt.prefix.str() +
                                 " is in no connected subnet; expected it inside a port's "
                                 "ipv4 prefix");
        }
    }
}

// IPv6: interface prefixes distinct across ports (routed ports only: IPv6 is not bridged into
// L2 groups yet), routes' ports known and gateways on a connected prefix, no prefix twice.
void validate_ipv6(Reader& r, const Config& c) {
    for (size_t i = 0; i < c.ports.size(); ++i) {
        const auto& b = c.ports[i];
        if (!b.ipv6.empty() && !b.l2_group.empty()) {
            r.error(b.mark, "port '" + b.name + "' is in L2 group '" + b.l2_group +
                                "'; expected IPv6 addresses only on routed ports");
        }
        for (size_t j = 0; j <= i; ++j) {
            const auto& a = c.ports[j];
            for (size_t x = 0; x < a.ipv6.size(); ++x) {
                for (size_t y = (i == j ? x + 1 : 0); y < b.ipv6.size(); ++y) {
                    const auto& pa = a.ipv6[x];
                    const auto& pb = b.ipv6[y];
                    if (pa.addr == pb.addr) {
                        r.error(b.mark, "address " + pb.addr.str() + " on port '" + b.name +
                                            "' is already used on port '" + a.name + "'");
                    } else if (i != j && (pa.contains(pb.addr) || pb.contains(pa.addr))) {
                        r.error(b.mark, "prefix " + pb.str() + " on port '" + b.name +
                                            "' overlaps " + pa.str() + " on port '" + a.name +
                                            "'; expected distinct subnets on routed ports");
                    }
                }
            }
        }
    }
    std::set<net::Ipv6Prefix> prefixes;
    for (const auto& rt : c.ipv6_routes) {
        if (!rt.port.empty() && c.find_port(rt.port) == nullptr) {
            r.error(rt.mark, "unknown port '" + rt.port + "' in IPv6 route " + rt.prefix.str());
        }
        if (rt.via && rt.port.empty() && connected_port6_of(c, *rt.via) == nullptr) {
            r.error(rt.mark, "gateway " + rt.via->str() + " of IPv6 route " + rt.prefix.str() +
                                 " is in no connected subnet; expected it inside a port's ipv6 "
                                 "prefix, or an explicit 'port'");
        }
        if (!prefixes.insert(rt.prefix).second) {
            r.error(rt.mark, "duplicate IPv6 route " + rt.prefix.str());
        }
    }
}

// Cross-references: names resolve, queues are polled once, addresses do not collide.
void validate(Reader& r, const Config& c) {
    std::set<std::string> names;
    std::map<std::string, std::set<std::string>> groups;
    for (const auto& p : c.ports) {
        if (!p.name.empty() && !names.insert(p.name).second) {
            r.error(p.mark, "duplicate port name '" + p.name + "'");
        }
        if (!p.l2_group.empty()) {
            groups[p.l2_group].insert(p.name);
        }
    }
    for (const auto& p : c.ports) {
        if (!p.l2_group.empty() && !p.promiscuous) {
            r.error(p.mark, "port '" + p.name + "' is in L2 group '" + p.l2_group +
                                "' and must be promiscuous to bridge; expected promiscuous: true");
        }
    }
    for (const auto& [g, members] : groups) {
        if (members.size() < 2) {
            r.error(c.find_port(*members.begin())->mark,
                    "L2 group '" + g + "' has one port; expected at least two ports per group");
        }
    }
    // Connected prefixes may overlap only inside one L2 group (a bridged segment).
    for (size_t i = 0; i < c.ports.size(); ++i) {
        for (size_t j = i; j < c.ports.size(); ++j) {
            const auto& a = c.ports[i];
            const auto& b = c.ports[j];
            for (size_t x = 0; x < a.ipv4.size(); ++x) {
                for (size_t y = (i == j ? x + 1 : 0); y < b.ipv4.size(); ++y) {
                    const auto& pa = a.ipv4[x];
                    const auto& pb = b.ipv4[y];
                    if (pa.addr == pb.addr) {
                        r.error(b.mark, "address " + pb.addr.str() + " on port '" + b.name +
                                            "' is already used on port '" + a.name + "'");
                        continue;
                    }
                    bool overlap = pa.contains(pb.addr) || pb.contains(pa.addr);
                    bool same_segment = i == j || (!a.l2_group.empty() && a.l2_group == b.l2_group);
                    if (overlap && !same_segment) {
                        r.error(b.mark, "prefix " + pb.str() + " on port '" + b.name +
                                            "' overlaps " + pa.str() + " on port '" + a.name +
                                            "'; expected distinct subnets on routed ports");
                    }
                }
            }
        }
    }

    std::set<unsigned> lcore_ids;
    std::set<std::pair<std::string, uint16_t>> polled;
    for (const auto& l : c.lcores) {
        if (!lcore_ids.insert(l.lcore).second) {
            r.error(l.mark, "lcore " + std::to_string(l.lcore) + " is listed twice");
        }
        if (l.rx.size() > 32) {
            r.error(l.mark, "lcore " + std::to_string(l.lcore) + " polls " +
                                std::to_string(l.rx.size()) + " RX queues; expected at most 32");
        }
        for (const auto& q : l.rx) {
            const auto* p = c.find_port(q.port);
            if (p == nullptr) {
                r.error(q.mark, "unknown port '" + q.port + "'; expected a name from 'ports'");
                continue;
            }
            if (q.queue >= p->rx_queues) {
                r.error(q.mark, "port '" + q.port + "' has " + std::to_string(p->rx_queues) +
                                    " RX queue(s); expected a queue from 0 to " +
                                    std::to_string(p->rx_queues - 1));
                continue;
            }
            if (!polled.insert({q.port, q.queue}).second) {
                r.error(q.mark, "port '" + q.port + "' queue " + std::to_string(q.queue) +
                                    " is polled by more than one lcore");
            }
        }
    }
    if (!c.lcores.empty()) {
        for (const auto& p : c.ports) {
            for (uint16_t q = 0; q < p.rx_queues; ++q) {
                if (!polled.count({p.name, q})) {
                    r.error(p.mark, "port '" + p.name + "' queue " + std::to_string(q) +
                                        " is polled by no lcore; expected it in some lcore's rx list");
                }
            }
        }
    }

    validate_ipv6(r, c);

    auto connected_port = [&](net::Ipv4Addr a) { return connected_port_of(c, a); };
    std::set<net::Ipv4Prefix> prefixes;
    for (const auto& rt : c.routes) {
        validate_route(r, c, rt);
        if (!prefixes.insert(rt.prefix).second) {
            r.error(rt.mark, "duplicate route " + rt.prefix.str());
        }
    }
    std::set<uint32_t> job_ids;
    uint64_t table_bytes = 0;
    for (const auto& j : c.ina.jobs) {
        if (!job_ids.insert(j.job_id).second) {
            r.error(j.mark, "duplicate INA job_id " + std::to_string(j.job_id));
        }
        if (job_ids.size() == kMaxInaJobs + 1) {
            r.error(j.mark, "job " + std::to_string(j.job_id) + ": at most " +
                                std::to_string(kMaxInaJobs) + " INA jobs per switch");
        }
        if (j.workers.size() > kMaxUnicastWorkers) {
            r.error(j.mark, "job " + std::to_string(j.job_id) + ": at most " +
                                std::to_string(kMaxUnicastWorkers) +
                                " workers get unicast results; use 'results: bier' for more");
        }
        table_bytes += ina_table_bytes(j);
        if (table_bytes > (uint64_t{c.ina.table_memory_mb} << 20)) {
            r.error(j.mark, "job " + std::to_string(j.job_id) + ": the jobs' chunk tables need " +
                                std::to_string((table_bytes + (1 << 20) - 1) >> 20) +
                                " MiB per worker lcore, over ina.table_memory_mb (" +
                                std::to_string(c.ina.table_memory_mb) +
                                "); lower window or max_elements, or raise the budget");
            table_bytes = 0;  // one error per excess, not one per later job
        }
        for (const auto& p : j.ingress_ports) {
            if (c.find_port(p) == nullptr) {
                r.error(j.mark, "unknown port '" + p + "' in the ingress of job " +
                                    std::to_string(j.job_id));
            }
        }
        if (j.results == ResultDelivery::bier) {
            if (j.role != InaRole::root) {
                r.error(j.mark, "job " + std::to_string(j.job_id) +
                                    ": 'results: bier' is for the root; an aggregator sends its "
                                    "partial result to 'parent'");
            } else {
                check_bier_targets(r, c.bier, j.mark, "job " + std::to_string(j.job_id), j.abm,
                                   bier_job_bsl(c.bier, j.bsl_bits));
            }
            if (!j.workers.empty()) {
                r.error(j.mark, "job " + std::to_string(j.job_id) +
                                    ": 'workers' lists unicast result destinations; with "
                                    "'results: bier' the BFERs' local bits deliver them");
            }
        } else if (j.role == InaRole::root) {
            std::set<uint16_t> seen;
            for (const auto& w : j.workers) {
                if (!std::binary_search(j.abm.begin(), j.abm.end(), w.bfr_id)) {
                    r.error(w.mark, "worker bfr_id " + std::to_string(w.bfr_id) +
                                        " is not in the job's abm");
                }
                if (!seen.insert(w.bfr_id).second) {
                    r.error(w.mark, "duplicate worker bfr_id " + std::to_string(w.bfr_id));
                }
            }
            if (seen.size() != j.abm.size()) {
                r.error(j.mark, "job " + std::to_string(j.job_id) +
                                    " is a root: expected a worker address for every BFR-id of "
                                    "its abm (results go to them)");
            }
        } else if (!j.workers.empty()) {
            r.error(j.mark, "job " + std::to_string(j.job_id) +
                                ": 'workers' is for the root; an aggregator sends its partial "
                                "result to 'parent' (default 'root')");
        }
    }
    validate_bier(r, c, connected_port);
    for (const auto& h : section_registry()) {
        auto it = c.sections.find(std::string_view(h.key));
        if (h.validate != nullptr && it != c.sections.end()) {
            h.validate(r, c, it->second.get());
        }
    }
    std::set<net::Ipv4Addr> neighbour_ips;
    for (const auto& nb : c.neighbours) {
        if (c.find_port(nb.port) == nullptr) {
            r.error(nb.mark, "unknown port '" + nb.port + "' for neighbour " + nb.ip.str());
        }
        if (!neighbour_ips.insert(nb.ip).second) {
            r.error(nb.mark, "duplicate neighbour " + nb.ip.str());
        }
        // The neighbour table holds exactly arp.max_neighbours (static and learned together).
        if (neighbour_ips.size() == size_t{c.arp.max_neighbours} + 1) {
            r.error(nb.mark, "more static neighbours than arp.max_neighbours (" +
                                 std::to_string(c.arp.max_neighbours) + ")");
        }
    }
    // IPv6 entries: on a prefix of their port (where ND would have learned them).
    std::set<net::Ipv6Addr> neighbour6_ips;
    for (const auto& nb : c.neighbours6) {
        const PortConfig* p = c.find_port(nb.port);
        if (p == nullptr) {
            r.error(nb.mark, "unknown port '" + nb.port + "' for neighbour " + nb.ip.str());
        } else if (std::none_of(p->ipv6.begin(), p->ipv6.end(),
                                [&](const auto& a) { return a.contains(nb.ip); })) {
            r.error(nb.mark, "neighbour " + nb.ip.str() + " is on no ipv6 prefix of port '" +
                                 nb.port + "'; expected an address on the port's link");
        }
        if (!neighbour6_ips.insert(nb.ip).second) {
            r.error(nb.mark, "duplicate neighbour " + nb.ip.str());
        }
        if (neighbour6_ips.size() == size_t{c.arp.max_neighbours} + 1) {
            r.error(nb.mark, "more static IPv6 neighbours than arp.max_neighbours (" +
                                 std::to_string(c.arp.max_neighbours) + ")");
        }
    }
}

LoadResult finish(Config c, std::vector<Error> errors, const std::string& source) {
    LoadResult result;
    if (errors.empty()) {
        Reader r(source, errors);
        validate(r, c);
    }
    if (errors.empty()) {
        c.source = source;
        result.config = std::move(c);
    }
    result.errors = std::move(errors);
    return result;
}

LoadResult load_node(const YAML::Node& root, const std::string& source) {
    std::vector<Error> errors;
    Config c;
    Reader r(source, errors);
    read_document(r, root, c);
    return finish(std::move(c), std::move(errors), source);
}

// Records where a document starts and ignores the rest.
class DocumentStart : public YAML::EventHandler {
public:
    std::optional<YAML::Mark> start;
    void OnDocumentStart(const YAML::Mark& mark) override { start = mark; }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
};

// Where a second document starts, if the text has one. Asks the parser for exactly two
// documents: yaml-cpp 0.7's LoadAll never returns on some malformed input (found by
// tests/fuzz), so the loop is never left to it.
std::optional<YAML::Mark> second_document(const std::string& yaml) {
    std::istringstream in(yaml);
    YAML::Parser parser(in);
    DocumentStart handler;
    if (!parser.HandleNextDocument(handler)) {
        return std::nullopt;
    }
    handler.start.reset();
    if (!parser.HandleNextDocument(handler)) {
        return std::nullopt;
    }
    return handler.start.value_or(YAML::Mark::null_mark());
}

LoadResult parse_failure(const YAML::Exception& e, const std::string& source) {
    LoadResult result;
    Mark m = e.mark.line >= 0 ? Mark{e.mark.line + 1, e.mark.column + 1} : Mark{};
    result.errors.push_back({source, m, "YAML syntax error: " + e.msg});
    return result;
}

}  // namespace

LoadResult load_string(const std::string& yaml, const std::string& source_name) {
    try {
        // A second document would be ignored by YAML::Load: refuse it where it starts.
        if (const auto m = second_document(yaml)) {
            LoadResult result;
            result.errors.push_back(
                {source_name, m->line >= 0 ? Mark{m->line + 1, m->column + 1} : Mark{},
                 "a second YAML document; expected one configuration per file"});
            return result;
        }
        return load_node(YAML::Load(yaml), source_name);
    } catch (const YAML::Exception& e) {
        return parse_failure(e, source_name);
    }
}

LoadResult load_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) {
        LoadResult result;
        result.errors.push_back({path, {}, "cannot open file"});
        return result;
    }
    std::stringstream buf;
    buf << in.rdbuf();
    return load_string(buf.str(), path);
}

namespace {

// Parses one YAML/JSON fragment with `read(reader, node, value)`; errors name `source_name`.
template <typename T, typename Read>
std::pair<std::optional<T>, std::vector<Error>> parse_fragment(const std::string& text,
                                                               const std::string& source_name,
                                                               Read&& read) {
    std::vector<Error> errors;
    try {
        const YAML::Node node = YAML::Load(text);
        T value;
        Reader r(source_name, errors);
        read(r, node, value);
        if (errors.empty()) {
            return {std::move(value), {}};
        }
    } catch (const YAML::Exception& e) {
        errors = parse_failure(e, source_name).errors;
    }
    return {std::nullopt, std::move(errors)};
}

}  // namespace

JobParseResult parse_ina_job(const std::string& text, const std::string& source_name) {
    auto [job, errors] = parse_fragment<InaJobConfig>(text, source_name, read_ina_job);
    return {std::move(job), std::move(errors)};
}

BierParseResult parse_bier(const std::string& text, const std::string& source_name) {
    auto [bier, errors] = parse_fragment<BierConfig>(text, source_name, read_bier);
    return {std::move(bier), std::move(errors)};
}

BierGroupParseResult parse_bier_group(const std::string& text, const std::string& source_name) {
    auto [group, errors] = parse_fragment<BierGroupConfig>(text, source_name, read_bier_group);
    return {std::move(group), std::move(errors)};
}

uint8_t ina_fraction_bits(const InaJobConfig& job) {
    if (!job.deterministic) {
        return 0;
    }
    return job.fraction_bits.value_or(static_cast<uint8_t>(
        reduce::default_fraction_bits(static_cast<reduce::ElemType>(job.elem_type))));
}

uint64_t ina_table_bytes(const InaJobConfig& job) {
    const uint64_t entries = 2 * uint64_t{job.window};
    const uint64_t bitmaps = 2 * uint64_t{job.bsl_bits / 8u};
    // A deterministic job accumulates int64 fixed point (8 bytes an element, whatever its type).
    const uint64_t acc = reduce::acc_bytes(
        job.deterministic ? reduce::kFixedWireType : static_cast<reduce::ElemType>(job.elem_type),
        job.max_elements);
    constexpr uint64_t kEntryAndIndex = 64;  // Entry struct + its share of the index state
    // Released-chunk bitmaps: per index, 64-bit words for 4 x worker_window / window bits
    // (ina::kViolationHeadroom, ina/chunk_table.h).
    const uint64_t window = std::max<uint64_t>(job.window, 1);  // 0 only in a refused config
    const uint64_t span = 4 * std::max<uint64_t>(job.worker_window, window) / window;
    const uint64_t released = window * ((span + 63) / 64) * 8;
    // Root result cache: per index ina_result_cache() results in the wire type, 64-byte strides,
    // plus their bookkeeping (ina::ChunkTable::Cached).
    const uint64_t result_bytes =
        (uint64_t{job.max_elements} *
             reduce::elem_size(static_cast<reduce::ElemType>(job.elem_type)) + 63) / 64 * 64;
    const uint64_t depth = ina_result_cache(job);
    const uint64_t cache = depth == 0 ? 0 : window * depth * (result_bytes + 16) + 64;
    // An aggregator's latest lowest-missing result per contributor bit (4-byte word + 1-byte
    // known flag, ina::ChunkTable's lowest_of_ / lowest_known_).
    const uint64_t lowest = job.role == InaRole::root ? 0 : uint64_t{job.bsl_bits} * 5;
    return entries * (bitmaps + acc + kEntryAndIndex) + reduce::kAccAlign + released + cache +
           lowest;
}

uint32_t ina_result_cache(const InaJobConfig& job) {
    return job.result_cache.value_or(job.role == InaRole::root ? 2 : 0);
}

bool register_section(const SectionHooks& hooks) {
    if (hooks.key == nullptr || hooks.parse == nullptr) {
        return false;
    }
    const std::string_view key = hooks.key;
    if (std::find(std::begin(kTopLevelKeys), std::end(kTopLevelKeys), key) !=
            std::end(kTopLevelKeys) ||
        std::any_of(section_registry().begin(), section_registry().end(),
                    [&](const SectionHooks& h) { return key == h.key; })) {
        return false;
    }
    section_registry().push_back(hooks);
    return true;
}

std::vector<std::pair<std::string, std::string>> sections_json(const Config& c) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& h : section_registry()) {
        auto it = c.sections.find(std::string_view(h.key));
        if (h.to_json != nullptr && it != c.sections.end()) {
            out.emplace_back(h.key, h.to_json(it->second.get()));
        }
    }
    return out;
}

std::vector<Error> validate(const Config& cfg) {
    std::vector<Error> errors;
    Reader r(cfg.source.empty() ? "api" : cfg.source, errors);
    validate(r, cfg);
    return errors;
}

std::vector<Error> validate_route(const Config& cfg, const RouteConfig& route) {
    std::vector<Error> errors;
    Reader r(cfg.source.empty() ? "api" : cfg.source, errors);
    validate_route(r, cfg, route);
    return errors;
}

uint16_t bier_bsl_for(const BierConfig& bier, uint16_t wanted) {
    if (wanted != 0) {
        return wanted;
    }
    uint16_t bsl = 0;
    for (const auto& t : bier.bifts) {
        if (bsl != 0 && t.bsl_bits != bsl) {
            return 0;
        }
        bsl = t.bsl_bits;
    }
    return bsl;
}

// The BSL a root job's results use over BIER: the job's own BSL where a BIFT has it (the A-BM
// then goes out unchanged), else the one BSL of the BIFTs.
uint16_t bier_job_bsl(const BierConfig& bier, uint16_t job_bsl) {
    for (const auto& t : bier.bifts) {
        if (t.bsl_bits == job_bsl) {
            return job_bsl;
        }
    }
    return bier_bsl_for(bier, 0);
}

const BiftConfig* find_bift(const BierConfig& bier, uint16_t bsl_bits, uint16_t set_id) {
    for (const auto& t : bier.bifts) {
        if (t.bsl_bits == bsl_bits && t.set_id == set_id) {
            return &t;
        }
    }
    return nullptr;
}

std::vector<std::string> restart_required(const Config& running, const Config& next) {
    std::vector<std::string> reasons;
    if (running.eal_args != next.eal_args) {
        reasons.push_back("eal.args changed");
    }
    if (running.mempool.mbufs != next.mempool.mbufs ||
        running.mempool.cache_size != next.mempool.cache_size ||
        running.mempool.data_room != next.mempool.data_room) {
        reasons.push_back("mempool changed");
    }
    if (running.ports.size() != next.ports.size()) {
        reasons.push_back("the set of ports changed");
    } else {
        for (size_t i = 0; i < running.ports.size(); ++i) {
            const auto& a = running.ports[i];
            const auto& b = next.ports[i];
            if (a.name != b.name || a.devargs != b.devargs || a.rx_queues != b.rx_queues ||
                a.rx_descriptors != b.rx_descriptors || a.tx_descriptors != b.tx_descriptors ||
                a.mac != b.mac || a.mtu != b.mtu || a.promiscuous != b.promiscuous ||
                a.chunk_steering != b.chunk_steering) {
                reasons.push_back("port '" + a.name + "' hardware settings changed");
            }
        }
    }
    auto lcore_key = [](const Config& c) {
        std::vector<std::tuple<unsigned, std::string, uint16_t>> v;
        for (const auto& l : c.lcores) {
            for (const auto& q : l.rx) {
                v.emplace_back(l.lcore, q.port, q.queue);
            }
        }
        return v;
    };
    if (lcore_key(running) != lcore_key(next)) {
        reasons.push_back("lcores changed");
    }
    if (running.control.listen != next.control.listen) {
        reasons.push_back("control.listen changed");
    } else if (!(running.control == next.control)) {
        reasons.push_back("control settings changed (the API listeners read them at start)");
    }
    if (running.ina.udp_port != next.ina.udp_port) {
        reasons.push_back("ina.udp_port changed");
    }
    if (running.l2.max_fdb_entries != next.l2.max_fdb_entries ||
        running.arp.max_neighbours != next.arp.max_neighbours) {
        reasons.push_back("table sizes changed");
    }
    return reasons;
}

std::optional<ListenAddress> parse_listen_address(const std::string& s) {
    const auto colon = s.rfind(':');
    if (colon == std::string::npos || colon == 0) {
        return std::nullopt;
    }
    unsigned port = 0;
    const auto ps = s.substr(colon + 1);
    auto [ptr, ec] = std::from_chars(ps.data(), ps.data() + ps.size(), port);
    if (ec != std::errc{} || ptr != ps.data() + ps.size() || port == 0 || port > 65535) {
        return std::nullopt;
    }
    std::string host = s.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
        host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) {
        return std::nullopt;
    }
    return ListenAddress{host, static_cast<uint16_t>(port)};
}

bool is_loopback_host(const std::string& host) {
    if (host == "localhost" || host == "::1") {
        return true;
    }
    const auto a = net::Ipv4Addr::parse(host);
    return a && (a->value >> 24) == 127;
}

std::optional<std::string> read_token_file(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    if (!in || !std::getline(in, line)) {
        return std::nullopt;
    }
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) {
        line.pop_back();
    }
    return line;
}

}  // namespace ina::config
