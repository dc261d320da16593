// SPDX-License-Identifier: Apache-2.0
// Every counter of every list (dataplane/counters.h, metrics/stats.h) reaches the Prometheus
// exposition under its own metric and no other, and every metric name the switch exposed before
// the lists existed is still there. Stats are built by hand (one port, one lcore, one job, one
// BIFT with one neighbour): no EAL, no control plane.
#include <gtest/gtest.h>
#include <rte_log.h>

#include <array>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "metrics/stats.h"

namespace {

using ina::metrics::Stats;

constexpr double kMark = 7;

// A stats object with every family present and every counter zero.
Stats present_stats() {
    rte_log_set_global_level(RTE_LOG_EMERG);  // no EAL: every port lookup would log "invalid"
    Stats s;
    ina::runtime::PortRuntime p;
    p.name = "p0";
    p.driver = "net_test";
    p.port_id = 3;
    s.ports.push_back(p);
    s.per_lcore.emplace_back(1u, ina::dp::LcoreCounters{});
    ina::metrics::JobStats job;
    job.job_id = 42;
    job.is_root = true;
    s.jobs.push_back(job);
    ina::metrics::BiftStats bift;
    bift.bift_id = 9;
    bift.bsl_bits = 256;
    bift.neighbours.emplace_back("10.0.0.2", true);
    s.bifts.push_back(bift);
    return s;
}

template <typename T, size_t N>
void mark(std::array<T, N>& a) {
    if constexpr (std::is_same_v<T, uint64_t>) {
        a.fill(static_cast<uint64_t>(kMark));
    }
}
void mark(uint64_t& v) { v = static_cast<uint64_t>(kMark); }

struct Entry {
    std::string list;
    std::string member;
    std::string metric;  // as listed: name, optionally {key="value"}
    std::string help;
    std::function<void(Stats&)> set;  // puts kMark into this counter wherever a scrape reads it
};

// The lists, expanded here independently of metrics.cc.
std::vector<Entry> entries() {
    std::vector<Entry> out;
#define LCORE(member, expo, metric, help) LCORE_ANY(member, metric, help)
#define LCORE_A(member, type, count, metric, help) LCORE_ANY(member, metric, help)
#define LCORE_ANY(member, metric, help)                                                        \
    out.push_back({"lcore", #member, metric, help, [](Stats& s) {                                 \
                       mark(s.total.member);                                                      \
                       for (auto& [lcore, c] : s.per_lcore) mark(c.member);                       \
                   }});
    INA_LCORE_COUNTERS(LCORE, LCORE_A)
#define PORT(member, expo, metric, help)                                                          \
    out.push_back({"port", #member, metric, help, [](Stats& s) { mark(s.total.ports[3].member); }});
    INA_PORT_COUNTERS(PORT, PORT)
#define BIER(member, expo, metric, help)                                                          \
    out.push_back({"bier", #member, metric, help, [](Stats& s) { mark(s.bifts[0].counters.member); }});
#define BIER_A(member, type, count, metric, help) BIER(member, _, metric, help)
    INA_BIER_COUNTERS(BIER, BIER_A)
#define CONTROL(member, expo, metric, help)                                                       \
    out.push_back({"control", #member, metric, help, [](Stats& s) { mark(s.control.member); }});
    INA_CONTROL_COUNTERS(CONTROL, CONTROL)
#define JOB(member, expo, metric, help)                                                           \
    out.push_back({"job", #member, metric, help, [](Stats& s) { mark(s.jobs[0].member); }});
#define JOB_A(member, type, count, metric, help) JOB(member, _, metric, help)
    INA_JOB_COUNTERS(JOB, JOB_A)
    // ports and bier of LcoreCounters are arrays of listed structs: their element lists count.
    std::erase_if(out, [](const Entry& e) { return e.metric.empty(); });
    return out;
}

std::string family_name(const std::string& metric) {
    return "inaswitch_" + metric.substr(0, metric.find('{'));
}

// {key, value} of a metric listed as name{key="value"}, or empty.
std::pair<std::string, std::string> own_label(const std::string& metric) {
    const size_t brace = metric.find('{');
    if (brace == std::string::npos) {
        return {};
    }
    const size_t eq = metric.find('=', brace);
    return {metric.substr(brace + 1, eq - brace - 1),
            metric.substr(eq + 2, metric.size() - eq - 4)};
}

double value_of(const prometheus::MetricFamily& f, const prometheus::ClientMetric& m) {
    return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
}

TEST(Metrics, ListsAreNotEmptyAndNamesAreUniqueWithinALabel) {
    const auto list = entries();
    EXPECT_GE(list.size(), 50u);
    std::set<std::string> seen;
    std::map<std::string, std::set<std::string>> members_of;
    for (const auto& e : list) {
        members_of[e.metric].insert(e.list + "." + e.member);
    }
    // Only the documented merge shares a metric and label: events lost in a ring (workers)
    // and to a full backlog (control plane).
    for (const auto& [metric, members] : members_of) {
        if (members.size() > 1) {
            EXPECT_TRUE(metric == "control_events_lost_total") << metric;
        }
    }
}

TEST(Metrics, CountersSharingAFamilyShareItsHelp) {
    std::map<std::string, std::string> help;
    for (const auto& e : entries()) {
        const auto [it, fresh] = help.emplace(family_name(e.metric), e.help);
        EXPECT_EQ(it->second, e.help) << e.list << "." << e.member;
    }
}

TEST(Metrics, EveryListedCounterIsInTheExpositionOfZeroedStats) {
    const std::string text = ina::metrics::render(present_stats());
    for (const auto& e : entries()) {
        EXPECT_NE(text.find("# TYPE " + family_name(e.metric) + " counter\n"), std::string::npos)
            << e.list << "." << e.member << " (" << e.metric << ") missing from:\n" << text;
    }
}

// Set one counter, scrape: its family (with its own label, if listed) carries the value, and
// nothing else does.
TEST(Metrics, EachCounterFeedsItsOwnMetricOnly) {
    for (const auto& e : entries()) {
        SCOPED_TRACE(e.list + "." + e.member + " -> " + e.metric);
        Stats s = present_stats();
        e.set(s);
        const auto families = ina::metrics::families(s);
        const std::string name = family_name(e.metric);
        const auto [key, value] = own_label(e.metric);
        bool found = false;
        for (const auto& f : families) {
            for (const auto& m : f.metric) {
                const double v = value_of(f, m);
                bool has_own_label = key.empty();
                for (const auto& l : m.label) {
                    has_own_label |= l.name == key && l.value == value;
                }
                if (f.name == name && has_own_label && v == kMark) {
                    found = true;
                } else if (f.name != "inaswitch_build_info") {
                    EXPECT_EQ(v, 0) << f.name;
                }
            }
        }
        EXPECT_TRUE(found) << name << " has no sample of value " << kMark;
    }
}

TEST(Metrics, MergedCountersAreSummedIntoOneSample) {
    Stats s = present_stats();
    s.total.events_lost = 2;
    s.control.events_dropped_backlog = 3;
    s.control.neighbour_table_full = 4;
    s.control.fdb_table_full = 5;
    const std::string text = ina::metrics::render(s);
    EXPECT_NE(text.find("\ninaswitch_control_events_lost_total 5\n"), std::string::npos) << text;
    EXPECT_NE(text.find("\ninaswitch_table_full_total{table=\"neighbours\"} 4\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("\ninaswitch_table_full_total{table=\"fdb\"} 5\n"), std::string::npos)
        << text;
}

// Every family the switch exposed before its counters came from lists (dashboards, golden
// cases and e2e tests read these names).
TEST(Metrics, EveryEarlierFamilyIsStillExposed) {
    const char* const earlier[] = {
        "build_info", "uptime_seconds", "config_generation", "config_reloads_total",
        "snapshots_published_total", "port_rx_packets_total", "port_rx_bytes_total",
        "port_tx_packets_total", "port_tx_bytes_total", "port_tx_dropped_total",
        "port_hw_rx_missed_total", "port_hw_rx_errors_total", "port_hw_tx_errors_total",
        "port_hw_rx_nombuf_total", "port_hw_rx_packets_total", "port_hw_tx_packets_total",
        "port_link_up", "drops_total", "routed_packets_total", "bridged_packets_total",
        "flooded_packets_total", "arp_replies_total", "arp_requests_sent_total",
        "arp_requests_failed_total", "icmp_echo_replies_total", "control_events_total",
        "control_events_lost_total", "neighbours_expired_total", "fdb_expired_total",
        "table_full_total", "neighbours", "fdb_entries", "routes", "mempool_mbufs",
        "mempool_mbufs_in_use", "ina_packets_total", "ina_not_ina_total",
        "ina_unknown_job_total", "ina_rejected_total", "ina_absorbed_total",
        "ina_partials_sent_total", "ina_results_sent_total", "ina_resent_total",
        "ina_fallbacks_total", "ina_handed_off_total", "ina_malformed_total",
        "ina_job_contributions_total", "ina_job_slots_in_use", "ina_job_slots",
        "ina_job_fallbacks_total", "ina_job_rejected_total", "ina_job_slot_timeouts_total",
        "bier_copies_total", "bier_delivered_total", "bier_mcast_encapsulated_total",
        "bier_packets_total", "bier_ttl_expired_total", "bier_bits_no_neighbour_total",
        "bier_bift_delivered_total", "bier_malformed_total", "bier_copies_by_neighbour_total",
        "lcore_loops_total", "lcore_busy_loops_total", "lcore_rx_bursts_total",
        "lcore_tx_bursts_total", "lcore_idle_sleeps_total", "lcore_rx_bursts_by_size_total",
    };
    const std::string text = ina::metrics::render(present_stats());
    for (const char* name : earlier) {
        EXPECT_NE(text.find(std::string("# TYPE inaswitch_") + name + " "), std::string::npos)
            << name;
    }
}

}  // namespace

// A gap counted by the worker's bucket function lands under the bound an operator reads: the
// 100 us stall budget is a bound of its own (a 99 us gap is under "100", a 100 us one is not),
// and the octaves keep their power-of-two bounds around it.
TEST(Metrics, PollGapBucketsExposeTheStallBudgetAsABound) {
    Stats s = present_stats();
    auto& c = s.per_lcore.front().second;
    const struct {
        uint64_t gap_us;
        const char* le;
    } cases[] = {{0, "1"},       {63, "64"},     {64, "100"},       {99, "100"},
                 {100, "128"},   {127, "128"},   {128, "256"},      {40000, "65536"},
                 {70000, "+Inf"}};
    uint64_t n = 1;
    for (const auto& k : cases) {
        c = ina::dp::LcoreCounters{};
        c.poll_gap[ina::dp::poll_gap_bucket(k.gap_us)] = n;
        const std::string text = ina::metrics::render(s);
        const std::string sample = "inaswitch_lcore_poll_gaps_total{lcore=\"1\",le_us=\"" +
                                   std::string(k.le) + "\"} " + std::to_string(n) + "\n";
        EXPECT_NE(text.find(sample), std::string::npos) << k.gap_us << " us: no " << sample;
        ++n;
    }
}
