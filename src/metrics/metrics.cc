// SPDX-License-Identifier: Apache-2.0
#include "metrics/metrics.h"

#include <prometheus/text_serializer.h>
#include <rte_ethdev.h>

#include "ina/protocol.h"
#include "wire/bier_header.h"

#include <deque>
#include <sstream>

namespace ina::metrics {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Builder {
public:
    // The family named `name`, made on first use: counters of several lists that share a name
    // (control_events_lost_total) land in one family.
    MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
        const std::string full = "inaswitch_" + name;
        for (auto& f : out_) {
            if (f.name == full) {
                return f;
            }
        }
        out_.push_back(MetricFamily{full, help, type, {}});
        return out_.back();
    }
    void counter(const std::string& name, const std::string& help, double v, Labels l = {}) {
        add(family(name, help, MetricType::Counter), v, std::move(l));
    }
    void gauge(const std::string& name, const std::string& help, double v, Labels l = {}) {
        add(family(name, help, MetricType::Gauge), v, std::move(l));
    }
    // A sample whose labels the family already has is summed into it.
    static void add(MetricFamily& f, double v, Labels l) {
        for (auto& m : f.metric) {
            if (m.label == l) {
                (f.type == MetricType::Counter ? m.counter.value : m.gauge.value) += v;
                return;
            }
        }
        ClientMetric m;
        m.label = std::move(l);
        if (f.type == MetricType::Counter) {
            m.counter.value = v;
        } else {
            m.gauge.value = v;
        }
        f.metric.push_back(std::move(m));
    }
    // A family without samples is not valid exposition: those are left out.
    std::vector<MetricFamily> take() {
        std::vector<MetricFamily> out;
        for (auto& f : out_) {
            if (!f.metric.empty()) {
                out.push_back(std::move(f));
            }
        }
        return out;
    }

private:
    // A deque: family() hands out references that must survive later family() calls.
    std::deque<MetricFamily> out_;
};

double d(uint64_t v) { return static_cast<double>(v); }

// Where a scalar counter's samples come from and which labels they carry (dataplane/counters.h).
enum class Exposition : uint8_t { total, per_lcore, per_port, per_bift, per_job, per_job_role };

template <typename Struct>
struct ScalarCounter {
    uint64_t Struct::*member;
    Exposition exposition;
    std::string_view metric;  // family name, optionally followed by one {label="value"}
    std::string_view help;
};

struct ArrayCounter {
    std::string_view member;
    std::string_view metric;
    std::string_view help;
};

#define INA_SKIP(...)
#define INA_ARRAY_INFO(member, type, count, metric, help) ArrayCounter{#member, metric, help},

#define INA_LCORE_SCALAR(member, expo, metric, help)                                              \
    ScalarCounter<dp::LcoreCounters>{&dp::LcoreCounters::member, Exposition::expo, metric, help},
#define INA_PORT_SCALAR(member, expo, metric, help)                                               \
    ScalarCounter<dp::PortCounters>{&dp::PortCounters::member, Exposition::expo, metric, help},
#define INA_BIER_SCALAR(member, expo, metric, help)                                               \
    ScalarCounter<dp::BierCounters>{&dp::BierCounters::member, Exposition::expo, metric, help},
#define INA_CONTROL_SCALAR(member, expo, metric, help)                                            \
    ScalarCounter<ControlCounters>{&ControlCounters::member, Exposition::expo, metric, help},
#define INA_JOB_SCALAR(member, expo, metric, help)                                                \
    ScalarCounter<JobStats>{&JobStats::member, Exposition::expo, metric, help},

constexpr ScalarCounter<dp::LcoreCounters> kLcoreScalars[] = {
    INA_LCORE_COUNTERS(INA_LCORE_SCALAR, INA_SKIP)};
constexpr ScalarCounter<dp::PortCounters> kPortScalars[] = {
    INA_PORT_COUNTERS(INA_PORT_SCALAR, INA_SKIP)};
constexpr ScalarCounter<dp::BierCounters> kBierScalars[] = {
    INA_BIER_COUNTERS(INA_BIER_SCALAR, INA_SKIP)};
constexpr ScalarCounter<ControlCounters> kControlScalars[] = {
    INA_CONTROL_COUNTERS(INA_CONTROL_SCALAR, INA_SKIP)};
constexpr ScalarCounter<JobStats> kJobScalars[] = {INA_JOB_COUNTERS(INA_JOB_SCALAR, INA_SKIP)};

constexpr ArrayCounter kLcoreArrays[] = {INA_LCORE_COUNTERS(INA_SKIP, INA_ARRAY_INFO)};
constexpr ArrayCounter kBierArrays[] = {INA_BIER_COUNTERS(INA_SKIP, INA_ARRAY_INFO)};
constexpr ArrayCounter kJobArrays[] = {INA_JOB_COUNTERS(INA_SKIP, INA_ARRAY_INFO)};

// The list entry of an array member; a name no list has does not compile.
template <size_t N>
consteval ArrayCounter array_counter(const ArrayCounter (&list)[N], std::string_view member) {
    for (const auto& a : list) {
        if (a.member == member) {
            return a;
        }
    }
    throw "no such array counter";
}

// "name{key=\"value\"}" -> name, and the label appended to `labels`.
std::string split_metric(std::string_view metric, Labels& labels) {
    const size_t brace = metric.find('{');
    if (brace == std::string_view::npos) {
        return std::string(metric);
    }
    const std::string_view label = metric.substr(brace + 1, metric.size() - brace - 2);
    const size_t eq = label.find('=');
    labels.push_back({std::string(label.substr(0, eq)),
                      std::string(label.substr(eq + 2, label.size() - eq - 3))});
    return std::string(metric.substr(0, brace));
}

template <typename Struct>
void add_scalar(Builder& b, const ScalarCounter<Struct>& c, const Struct& values, Labels labels) {
    const std::string name = split_metric(c.metric, labels);
    Builder::add(b.family(name, std::string(c.help), MetricType::Counter), d(values.*c.member),
                 std::move(labels));
}

MetricFamily& array_family(Builder& b, const ArrayCounter& a) {
    return b.family(std::string(a.metric), std::string(a.help), MetricType::Counter);
}

Labels bift_labels(const Stats& s, const BiftStats& t) {
    return Labels{{"bift_id", std::to_string(t.bift_id)},
                  {"sd", std::to_string(s.bier_sub_domain)},
                  {"bsl", std::to_string(t.bsl_bits)},
                  {"set", std::to_string(t.set_id)}};
}

}  // namespace

std::vector<prometheus::MetricFamily> families(const Stats& s) {
    Builder b;
    b.gauge("build_info", "Build of the running switch", 1, {{"version", INASWITCH_VERSION}});
    b.gauge("uptime_seconds", "Seconds since the dataplane started", s.uptime_s);
    b.gauge("config_generation", "Generation of the published forwarding snapshot",
            d(s.generation));
    for (const auto& c : kControlScalars) {
        add_scalar(b, c, s.control, {});
    }

    // Ports: what the dataplane counted, then what the device itself reports.
    for (const auto& c : kPortScalars) {
        for (const auto& p : s.ports) {
            add_scalar(b, c, s.total.ports[p.port_id], {{"port", p.name}});
        }
    }
    struct HwMetric {
        const char* name;
        const char* help;
        uint64_t rte_eth_stats::*field;
    };
    const HwMetric hw_metrics[] = {
        {"port_hw_rx_missed_total", "Packets the NIC dropped for lack of RX descriptors",
         &rte_eth_stats::imissed},
        {"port_hw_rx_errors_total", "Erroneous packets received by the NIC", &rte_eth_stats::ierrors},
        {"port_hw_tx_errors_total", "Packets the NIC failed to transmit", &rte_eth_stats::oerrors},
        {"port_hw_rx_nombuf_total", "RX mbuf allocation failures", &rte_eth_stats::rx_nombuf},
        {"port_hw_rx_packets_total", "Packets received as the device counts them",
         &rte_eth_stats::ipackets},
        {"port_hw_tx_packets_total", "Packets transmitted as the device counts them",
         &rte_eth_stats::opackets},
    };
    std::vector<rte_eth_stats> hw(s.ports.size());
    for (size_t i = 0; i < s.ports.size(); ++i) {
        if (rte_eth_stats_get(s.ports[i].port_id, &hw[i]) != 0) {
            hw[i] = rte_eth_stats{};
        }
    }
    for (const auto& hm : hw_metrics) {
        auto& f = b.family(hm.name, hm.help, MetricType::Counter);
        for (size_t i = 0; i < s.ports.size(); ++i) {
            Builder::add(f, d(hw[i].*hm.field), {{"port", s.ports[i].name}});
        }
    }
    {
        auto& f = b.family("port_link_up", "1 if the port's link is up", MetricType::Gauge);
        for (const auto& p : s.ports) {
            rte_eth_link link{};
            const bool up = rte_eth_link_get_nowait(p.port_id, &link) == 0 &&
                            link.link_status == RTE_ETH_LINK_UP;
            Builder::add(f, up ? 1 : 0, {{"port", p.name}, {"driver", p.driver}});
        }
    }
    {
        auto& f = b.family("port_chunk_steering_rules",
                           "rte_flow rules steering INA chunks to their owner's RX queue; mode: "
                           "rte_flow, hand-off (no rules: another lcore's chunk is handed over) "
                           "or off",
                           MetricType::Gauge);
        for (const auto& p : s.ports) {
            Builder::add(f, p.chunk_steering_rules,
                         {{"port", p.name},
                          {"mode", std::string(runtime::steering_mode_name(p.chunk_steering))}});
        }
    }

    // Every lcore scalar: totals summed over lcores, loop health per lcore.
    for (const auto& c : kLcoreScalars) {
        if (c.exposition == Exposition::per_lcore) {
            for (const auto& [lcore, counters] : s.per_lcore) {
                add_scalar(b, c, counters, {{"lcore", std::to_string(lcore)}});
            }
        } else {
            add_scalar(b, c, s.total, {});
        }
    }
    {
        auto& f = array_family(b, array_counter(kLcoreArrays, "drops"));
        for (size_t i = 0; i < dp::kDropReasonCount; ++i) {
            Builder::add(f, d(s.total.drops[i]), {{"reason", std::string(dp::kDropReasonNames[i])}});
        }
    }
    {
        auto& f = array_family(b, array_counter(kLcoreArrays, "udp_malformed"));
        for (size_t r = 0; r < dp::kUdpMalformedReasons; ++r) {
            Builder::add(f, d(s.total.udp_malformed[r]),
                         {{"reason", std::string(dp::kUdpMalformedNames[r])}});
        }
    }
    {
        auto& f = array_family(b, array_counter(kLcoreArrays, "ina_malformed"));
        for (size_t e = 0; e < s.total.ina_malformed.size(); ++e) {
            Builder::add(f, d(s.total.ina_malformed[e]),
                         {{"reason", std::string(ina::proto::to_string(
                                         static_cast<ina::proto::ParseError>(e)))}});
        }
    }
    {
        static const char* const kBucketNames[dp::kBurstBuckets] = {"1",     "2-3",   "4-7", "8-15",
                                                                    "16-31", "32-63", "64"};
        auto& f = array_family(b, array_counter(kLcoreArrays, "burst_size"));
        for (const auto& [lcore, c] : s.per_lcore) {
            for (size_t i = 0; i < dp::kBurstBuckets; ++i) {
                Builder::add(f, d(c.burst_size[i]),
                             {{"lcore", std::to_string(lcore)}, {"size", kBucketNames[i]}});
            }
        }
    }

    {
        // The three loop-time histograms share their buckets (dp::kPollGapBuckets).
        const auto loop_histogram = [&](const ArrayCounter& a, auto member) {
            auto& f = array_family(b, a);
            for (const auto& [lcore, c] : s.per_lcore) {
                for (size_t i = 0; i < dp::kPollGapBuckets; ++i) {
                    const uint64_t bound = dp::poll_gap_bucket_bound(i);
                    const std::string le = bound != 0 ? std::to_string(bound) : "+Inf";
                    Builder::add(f, d((c.*member)[i]),
                                 {{"lcore", std::to_string(lcore)}, {"le_us", le}});
                }
            }
        };
        loop_histogram(array_counter(kLcoreArrays, "poll_gap"), &dp::LcoreCounters::poll_gap);
        loop_histogram(array_counter(kLcoreArrays, "loop_work"), &dp::LcoreCounters::loop_work);
        loop_histogram(array_counter(kLcoreArrays, "loop_descheduled"),
                       &dp::LcoreCounters::loop_descheduled);
    }
    for (const auto& [lcore, t] : s.lcore_threads) {
        const std::string id = std::to_string(lcore);
        b.gauge("lcore_deschedule_detection",
                "1 if the worker tells iterations the kernel descheduled it in apart "
                "(lcore_loop_descheduled_total), 0 if perf_event_open was refused",
                t.detecting ? 1 : 0, {{"lcore", id}});
        if (!t.found) {
            continue;
        }
        b.counter("lcore_context_switches_total",
                  "Context switches of the worker thread by kind (involuntary: preempted), "
                  "from /proc at the scrape",
                  d(t.voluntary), {{"lcore", id}, {"kind", "voluntary"}});
        b.counter("lcore_context_switches_total", "", d(t.involuntary),
                  {{"lcore", id}, {"kind", "involuntary"}});
        b.counter("lcore_run_delay_seconds_total",
                  "Time the worker thread was runnable but waiting for a CPU (schedstat)",
                  static_cast<double>(t.run_delay_ns) / 1e9, {{"lcore", id}});
    }

    {
        auto& f = b.family("neighbours", "Neighbour table entries", MetricType::Gauge);
        Builder::add(f, d(s.static_neighbours), {{"kind", "static"}});
        Builder::add(f, d(s.learned_neighbours), {{"kind", "learned"}});
    }
    b.gauge("fdb_entries", "Learned MAC addresses in all L2 groups", d(s.fdb_entries));
    b.gauge("routes", "Configured static routes", d(s.routes));
    {
        auto& used = b.family("table_entries", "Entries in use in a forwarding table",
                              MetricType::Gauge);
        auto& cap = b.family("table_capacity", "Entries a forwarding table can hold",
                             MetricType::Gauge);
        const std::pair<const char*, const Stats::Occupancy*> tables[] = {
            {"neighbours", &s.neighbour_table},
            {"fdb", &s.fdb_table},
            {"routes", &s.route_table},
            {"nexthops", &s.nexthop_table},
            {"neighbours6", &s.neighbour6_table},
            {"routes6", &s.route6_table}};
        for (const auto& [name, o] : tables) {
            Builder::add(used, d(o->used), {{"table", name}});
            Builder::add(cap, d(o->capacity), {{"table", name}});
        }
    }
    b.gauge("route_gateways_down",
            "Route gateways found down (ARP expired or unanswered) that routes with backup_via "
            "avoid",
            d(s.gateways_down));
    b.gauge("mempool_mbufs", "Mbufs in the packet pool", d(s.mempool_size));
    b.gauge("mempool_mbufs_in_use", "Mbufs currently in use", d(s.mempool_in_use));

    // In-network aggregation per job (summed over lcores).
    {
        static const char* const kVerdicts[] = {
            "not_mine", "outside_abm", "bad_length", "count_mismatch", "absorbed", "completed",
            "duplicate", "overlap",    "resend_result", "stale", "fallback", "no_slot",
            "cached_result"};
        static_assert(std::size(kVerdicts) == ina::kNumVerdicts);
        auto& contributions = array_family(b, array_counter(kJobArrays, "verdicts"));
        auto& rejected = array_family(b, array_counter(kJobArrays, "rejected"));
        auto& in_use = b.family("ina_job_slots_in_use", "Aggregation slots holding a chunk",
                                MetricType::Gauge);
        auto& cap = b.family("ina_job_slots", "Aggregation slots of the job (all lcores)",
                             MetricType::Gauge);
        for (const auto& j : s.jobs) {
            const std::string job = std::to_string(j.job_id);
            const Labels with_role{{"job", job}, {"role", j.is_root ? "root" : "aggregator"}};
            for (size_t v = 0; v < j.verdicts.size(); ++v) {
                Builder::add(contributions, d(j.verdicts[v]),
                             {{"job", job}, {"verdict", kVerdicts[v]}});
            }
            Builder::add(in_use, d(j.slots_in_use), with_role);
            Builder::add(cap, d(j.capacity), with_role);
            for (const auto& c : kJobScalars) {
                const bool role = c.exposition == Exposition::per_job_role;
                add_scalar(b, c, j, role ? with_role : Labels{{"job", job}});
            }
            for (size_t r = 0; r < j.rejected.size(); ++r) {
                Builder::add(rejected, d(j.rejected[r]),
                             {{"job", job}, {"reason", std::string(ina::reject_reason_name(r))}});
            }
        }
    }

    if (!s.bifts.empty()) {
        for (const auto& c : kBierScalars) {
            for (const auto& t : s.bifts) {
                add_scalar(b, c, t.counters, bift_labels(s, t));
            }
        }
        auto& malformed = array_family(b, array_counter(kBierArrays, "malformed"));
        auto& copies = array_family(b, array_counter(kBierArrays, "copies"));
        for (const auto& t : s.bifts) {
            for (size_t r = 0; r < dp::kBierMalformedReasons; ++r) {
                auto l = bift_labels(s, t);
                l.push_back({"reason", std::string(wire::to_string(
                                           static_cast<wire::BierParseError>(r)))});
                Builder::add(malformed, d(t.counters.malformed[r]), std::move(l));
            }
        }
        for (const auto& t : s.bifts) {
            for (size_t k = 0; k < t.neighbours.size(); ++k) {
                auto l = bift_labels(s, t);
                l.push_back({"neighbour", t.neighbours[k].first});
                Builder::add(copies, d(t.counters.copies[k]), std::move(l));
            }
        }
    }
    return b.take();
}

std::string render(const Stats& stats) {
    std::ostringstream os;
    prometheus::TextSerializer().Serialize(os, families(stats));
    os << stats.feature_text;
    return os.str();
}

}  // namespace ina::metrics
