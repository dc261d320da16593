// SPDX-License-Identifier: Apache-2.0
#include "metrics/metrics.h"

#include <prometheus/text_serializer.h>
#include <rte_ethdev.h>

#include "ina/protocol.h"
#include "wire/bier_header.h"

#include <deque>
#include <functional>
#include <iterator>
#include <optional>
#include <sstream>

namespace ina::metrics {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Builder {
public:
    MetricFamily& family(const std::string& name, const std::string& help, MetricType type) {
        out_.push_back(MetricFamily{"inaswitch_" + name, help, type, {}});
        return out_.back();
    }
    void counter(const std::string& name, const std::string& help, double v, Labels l = {}) {
        add(family(name, help, MetricType::Counter), v, std::move(l));
    }
    void gauge(const std::string& name, const std::string& help, double v, Labels l = {}) {
        add(family(name, help, MetricType::Gauge), v, std::move(l));
    }
    static void add(MetricFamily& f, double v, Labels l) {
        ClientMetric m;
        m.label = std::move(l);
        if (f.type == MetricType::Counter) {
            m.counter.value = v;
        } else {
            m.gauge.value = v;
        }
        f.metric.push_back(std::move(m));
    }
    std::vector<MetricFamily> take() {
        return {std::make_move_iterator(out_.begin()), std::make_move_iterator(out_.end())};
    }

private:
    // A deque: family() hands out references that must survive later family() calls.
    std::deque<MetricFamily> out_;
};

double d(uint64_t v) { return static_cast<double>(v); }

}  // namespace

std::vector<prometheus::MetricFamily> families(const control::Stats& s) {
    Builder b;
    b.gauge("build_info", "Build of the running switch", 1, {{"version", INASWITCH_VERSION}});
    b.gauge("uptime_seconds", "Seconds since the dataplane started", s.uptime_s);
    b.gauge("config_generation", "Generation of the published forwarding snapshot",
            d(s.generation));
    {
        auto& f = b.family("config_reloads_total", "Config reloads by result", MetricType::Counter);
        Builder::add(f, d(s.control.reloads_ok), {{"result", "ok"}});
        Builder::add(f, d(s.control.reloads_failed), {{"result", "failed"}});
    }
    b.counter("snapshots_published_total", "Forwarding snapshots published (config or learning)",
              d(s.control.snapshots_published));

    // Ports: what the dataplane counted, then what the device itself reports.
    struct PortMetric {
        const char* name;
        const char* help;
        uint64_t dp::PortCounters::*field;
    };
    const PortMetric port_metrics[] = {
        {"port_rx_packets_total", "Packets received by the dataplane", &dp::PortCounters::rx_packets},
        {"port_rx_bytes_total", "Bytes received by the dataplane", &dp::PortCounters::rx_bytes},
        {"port_tx_packets_total", "Packets accepted by the port's TX queues",
         &dp::PortCounters::tx_packets},
        {"port_tx_bytes_total", "Bytes accepted by the port's TX queues", &dp::PortCounters::tx_bytes},
        {"port_tx_dropped_total", "Packets the port's TX queues rejected (freed)",
         &dp::PortCounters::tx_dropped},
    };
    for (const auto& pm : port_metrics) {
        auto& f = b.family(pm.name, pm.help, MetricType::Counter);
        for (const auto& p : s.ports) {
            Builder::add(f, d(s.total.ports[p.port_id].*pm.field), {{"port", p.name}});
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
        auto& f = b.family("drops_total", "Packets dropped by the dataplane, by reason",
                           MetricType::Counter);
        for (size_t i = 0; i < dp::kDropReasonCount; ++i) {
            Builder::add(f, d(s.total.drops[i]), {{"reason", std::string(dp::kDropReasonNames[i])}});
        }
    }
    b.counter("routed_packets_total", "IPv4 packets routed", d(s.total.routed));
    b.counter("bridged_packets_total", "Frames bridged to a known port in an L2 group",
              d(s.total.bridged));
    b.counter("flooded_packets_total", "Frames flooded in an L2 group (once per frame)",
              d(s.total.flooded));
    b.counter("arp_replies_total", "ARP replies sent for the switch's own addresses",
              d(s.total.arp_replies));
    b.counter("arp_requests_sent_total", "ARP requests sent to resolve next hops",
              d(s.control.arp_requests_sent));
    b.counter("arp_requests_failed_total", "ARP requests not sent (no mbuf or ring full)",
              d(s.control.arp_requests_failed));
    b.counter("icmp_echo_replies_total", "ICMP echo replies sent for the switch's own addresses",
              d(s.total.icmp_echo_replies));
    b.counter("control_events_total", "Worker events processed by the control plane",
              d(s.control.events_processed));
    b.counter("control_events_lost_total", "Worker events lost to a full ring",
              d(s.total.events_lost + s.control.events_dropped_backlog));
    b.counter("neighbours_expired_total", "Learned neighbours removed by ageing",
              d(s.control.neighbours_expired));
    b.counter("fdb_expired_total", "FDB entries removed by ageing", d(s.control.fdb_expired));
    b.counter("table_full_total", "Learning refused because a table was full",
              d(s.control.neighbour_table_full + s.control.fdb_table_full));
    {
        auto& f = b.family("neighbours", "Neighbour table entries", MetricType::Gauge);
        Builder::add(f, d(s.static_neighbours), {{"kind", "static"}});
        Builder::add(f, d(s.learned_neighbours), {{"kind", "learned"}});
    }
    b.gauge("fdb_entries", "Learned MAC addresses in all L2 groups", d(s.fdb_entries));
    b.gauge("routes", "Configured static routes", d(s.routes));
    b.gauge("mempool_mbufs", "Mbufs in the packet pool", d(s.mempool_size));
    b.gauge("mempool_mbufs_in_use", "Mbufs currently in use", d(s.mempool_in_use));

    // In-network aggregation: dataplane totals, then per job (summed over lcores).
    b.counter("ina_packets_total", "UDP datagrams on the INA port that parsed as INA",
              d(s.total.ina_packets));
    b.counter("ina_not_ina_total", "UDP datagrams on the INA port that did not parse (routed as is)",
              d(s.total.ina_not_ina));
    b.counter("ina_unknown_job_total", "INA packets for a job this switch does not have (routed)",
              d(s.total.ina_unknown_job));
    b.counter("ina_rejected_total",
              "INA contributions failing ingress, header or A-BM checks (on_reject applies)",
              d(s.total.ina_rejected));
    b.counter("ina_absorbed_total", "Contributions absorbed into aggregation slots",
              d(s.total.ina_absorbed));
    b.counter("ina_partials_sent_total", "Partial results an aggregator sent to its parent",
              d(s.total.ina_partials_sent));
    b.counter("ina_results_sent_total", "Result packets a root sent to workers",
              d(s.total.ina_results_sent));
    b.counter("ina_resent_total", "Results or partials re-sent for a retransmitted contribution",
              d(s.total.ina_resent));
    b.counter("ina_fallbacks_total", "Contributions forwarded unaggregated (no slot)",
              d(s.total.ina_fallbacks));
    b.counter("ina_handed_off_total", "Contributions passed to the lcore that owns their chunk",
              d(s.total.ina_handed_off));
    {
        auto& f = b.family("ina_malformed_total",
                           "UDP datagrams on the INA port that are not INA v1, by parse error",
                           MetricType::Counter);
        for (size_t e = 0; e < s.total.ina_malformed.size(); ++e) {
            Builder::add(f, d(s.total.ina_malformed[e]),
                         {{"reason", std::string(ina::proto::to_string(
                                         static_cast<ina::proto::ParseError>(e)))}});
        }
    }
    if (!s.jobs.empty()) {  // a family without samples is not valid exposition
        static const char* const kVerdicts[] = {
            "not_mine", "outside_abm", "bad_length", "count_mismatch", "absorbed", "completed",
            "duplicate", "overlap",    "resend_result", "stale", "fallback", "no_slot"};
        static_assert(std::size(kVerdicts) == std::tuple_size_v<decltype(control::JobStats{}.verdicts)>);
        auto& f = b.family("ina_job_contributions_total",
                           "INA data packets of a job by what its chunk table did with them",
                           MetricType::Counter);
        for (const auto& j : s.jobs) {
            for (size_t v = 0; v < j.verdicts.size(); ++v) {
                Builder::add(f, d(j.verdicts[v]),
                             {{"job", std::to_string(j.job_id)}, {"verdict", kVerdicts[v]}});
            }
        }
        auto& in_use = b.family("ina_job_slots_in_use", "Aggregation slots holding a chunk",
                                MetricType::Gauge);
        auto& cap = b.family("ina_job_slots", "Aggregation slots of the job (all lcores)",
                             MetricType::Gauge);
        auto& fallbacks = b.family("ina_job_fallbacks_total",
                                   "Contributions sent on to the root unaggregated, by reason",
                                   MetricType::Counter);
        auto& rejected = b.family("ina_job_rejected_total",
                                  "Contributions of a job refused before its chunk table, by reason",
                                  MetricType::Counter);
        auto& timeouts = b.family("ina_job_slot_timeouts_total",
                                  "Slots freed because their chunk went idle",
                                  MetricType::Counter);
        auto& violations = b.family("ina_job_window_violations_total",
                                    "Contributions from a worker beyond the job's worker_window",
                                    MetricType::Counter);
        for (const auto& j : s.jobs) {
            const Labels l{{"job", std::to_string(j.job_id)}, {"role", j.is_root ? "root" : "aggregator"}};
            Builder::add(in_use, d(j.slots_in_use), l);
            Builder::add(cap, d(j.capacity), l);
            Builder::add(timeouts, d(j.slot_timeouts), l);
            Builder::add(violations, d(j.window_violations), l);
            Builder::add(fallbacks, d(j.fallback_no_slot),
                         {{"job", std::to_string(j.job_id)}, {"reason", "no_slot"}});
            Builder::add(fallbacks, d(j.fallback_sticky),
                         {{"job", std::to_string(j.job_id)}, {"reason", "chunk_fell_back"}});
            for (size_t r = 0; r < j.rejected.size(); ++r) {
                Builder::add(rejected, d(j.rejected[r]),
                             {{"job", std::to_string(j.job_id)},
                              {"reason", std::string(ina::reject_reason_name(r))}});
            }
        }
    }

    b.counter("bier_copies_total", "BIER copies sent to neighbour BFRs (all BIFTs)",
              d(s.total.bier_copies));
    b.counter("bier_delivered_total", "BIER payloads delivered to local hosts (all BIFTs)",
              d(s.total.bier_delivered));
    b.counter("bier_mcast_encapsulated_total",
              "IPv4 multicast packets this switch put on BIER as the BFIR",
              d(s.total.mcast_encapsulated));
    if (!s.bifts.empty()) {
        auto label = [&](const control::BiftStats& t) {
            return Labels{{"bift_id", std::to_string(t.bift_id)},
                          {"sd", std::to_string(s.bier_sub_domain)},
                          {"bsl", std::to_string(t.bsl_bits)},
                          {"set", std::to_string(t.set_id)}};
        };
        auto& packets = b.family("bier_packets_total",
                                 "BIER packets received for a BIFT or encapsulated into it",
                                 MetricType::Counter);
        auto& ttl = b.family("bier_ttl_expired_total",
                             "BIER packets whose TTL left nothing to forward to neighbours",
                             MetricType::Counter);
        auto& no_nbr = b.family("bier_bits_no_neighbour_total",
                                "BitString bits cleared because no neighbour or own bit has them",
                                MetricType::Counter);
        auto& delivered = b.family("bier_bift_delivered_total",
                                   "Decapsulated deliveries for own bits", MetricType::Counter);
        auto& malformed = b.family("bier_malformed_total", "Malformed BIER headers by reason",
                                   MetricType::Counter);
        std::optional<std::reference_wrapper<MetricFamily>> copies;
        for (const auto& t : s.bifts) {
            Builder::add(packets, d(t.counters.packets), label(t));
            Builder::add(ttl, d(t.counters.ttl_expired), label(t));
            Builder::add(no_nbr, d(t.counters.bits_no_neighbour), label(t));
            Builder::add(delivered, d(t.counters.delivered), label(t));
            for (size_t r = 0; r < dp::kBierMalformedReasons; ++r) {
                auto l = label(t);
                l.push_back({"reason", std::string(wire::to_string(
                                           static_cast<wire::BierParseError>(r)))});
                Builder::add(malformed, d(t.counters.malformed[r]), std::move(l));
            }
        }
        for (const auto& t : s.bifts) {
            for (size_t k = 0; k < t.neighbours.size(); ++k) {
                if (!copies) {
                    copies = b.family("bier_copies_by_neighbour_total",
                                      "BIER copies sent per BIFT and neighbour",
                                      MetricType::Counter);
                }
                auto l = label(t);
                l.push_back({"neighbour", t.neighbours[k].first});
                Builder::add(copies->get(), d(t.counters.copies[k]), std::move(l));
            }
        }
    }

    // Per-lcore loop health.
    struct LcoreMetric {
        const char* name;
        const char* help;
        uint64_t dp::LcoreCounters::*field;
    };
    const LcoreMetric lcore_metrics[] = {
        {"lcore_loops_total", "Poll loop iterations", &dp::LcoreCounters::loops},
        {"lcore_busy_loops_total", "Poll loop iterations that received packets",
         &dp::LcoreCounters::busy_loops},
        {"lcore_rx_bursts_total", "Non-empty RX bursts", &dp::LcoreCounters::rx_bursts},
        {"lcore_tx_bursts_total", "TX bursts handed to ports", &dp::LcoreCounters::tx_bursts},
        {"lcore_idle_sleeps_total", "Idle back-off sleeps", &dp::LcoreCounters::idle_sleeps},
    };
    for (const auto& lm : lcore_metrics) {
        auto& f = b.family(lm.name, lm.help, MetricType::Counter);
        for (const auto& [lcore, c] : s.per_lcore) {
            Builder::add(f, d(c.*lm.field), {{"lcore", std::to_string(lcore)}});
        }
    }
    {
        static const char* const kBucketNames[dp::kBurstBuckets] = {"1",     "2-3",   "4-7", "8-15",
                                                                    "16-31", "32-63", "64"};
        auto& f = b.family("lcore_rx_bursts_by_size_total", "Non-empty RX bursts by packet count",
                           MetricType::Counter);
        for (const auto& [lcore, c] : s.per_lcore) {
            for (size_t i = 0; i < dp::kBurstBuckets; ++i) {
                Builder::add(f, d(c.burst_size[i]),
                             {{"lcore", std::to_string(lcore)}, {"size", kBucketNames[i]}});
            }
        }
    }
    return b.take();
}

std::string render(const control::Stats& stats) {
    std::ostringstream os;
    prometheus::TextSerializer().Serialize(os, families(stats));
    return os.str();
}

}  // namespace ina::metrics
