// SPDX-License-Identifier: Apache-2.0
#include "features/roce/metrics_roce.h"

#include <sstream>

namespace ina::features::roce {

namespace {

void family(std::ostringstream& os, const std::string& name, const char* type, const char* help) {
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

}  // namespace

JobCounts JobCounts::plus(const JobState& s) const {
    JobCounts sum = *this;
    sum.results_completed += s.results_completed;
    sum.results_released += s.results_released;
    sum.post_failures += s.post_failures;
    const reduce::FixedStats& f = s.table.core().fixed_stats();
    sum.fixed.saturated += f.saturated;
    sum.fixed.underflow += f.underflow;
    sum.fixed.nan += f.nan;
    if (s.parent != nullptr) {
#define INA_ROCE_PARENT_ADD(name, help) sum.parent.name += s.parent->counters.name;
        INA_ROCE_PARENT_EVENTS(INA_ROCE_PARENT_ADD)
#undef INA_ROCE_PARENT_ADD
    }
    return sum;
}

std::string render_metrics(const std::vector<JobSample>& jobs, const std::vector<QpSample>& qps,
                           const LcoreTotals& lcore) {
    std::ostringstream os;
#define INA_ROCE_RENDER(field, help)                                                       \
    family(os, "inaswitch_rdma_qp_" #field "_total", "counter", help);                     \
    for (const auto& q : qps) {                                                            \
        os << "inaswitch_rdma_qp_" #field "_total{job=\"" << q.job_id << "\",rank=\"" << q.rank \
           << "\"} " << q.counters.field << '\n';                                          \
    }
    INA_ROCE_QP_COUNTERS(INA_ROCE_RENDER)
#undef INA_ROCE_RENDER
    // The same per job, QPs that left (DELETE, replaced, new session) included: totals that
    // do not fall when a rank disconnects.
#define INA_ROCE_RENDER_JOB(field, help)                                                   \
    family(os, "inaswitch_rdma_job_qp_" #field "_total", "counter", help);                 \
    for (const auto& j : jobs) {                                                           \
        os << "inaswitch_rdma_job_qp_" #field "_total{job=\"" << j.job_id << "\"} "          \
           << j.qp_totals.field << '\n';                                                    \
    }
    INA_ROCE_QP_COUNTERS(INA_ROCE_RENDER_JOB)
#undef INA_ROCE_RENDER_JOB
    family(os, "inaswitch_rdma_qp_state", "gauge",
           "QP state: 0 ready, 1 receive side in error, 2 result side in error, 3 both");
    for (const auto& q : qps) {
        os << "inaswitch_rdma_qp_state{job=\"" << q.job_id << "\",rank=\"" << q.rank
           << "\",qpn=\"" << q.switch_qpn << "\"} " << unsigned{q.state} << '\n';
    }
    family(os, "inaswitch_rdma_job_slots_in_use", "gauge",
           "Aggregation slots of the job holding a unit (aggregating, or a result not yet "
           "acknowledged by every rank)");
    for (const auto& j : jobs) {
        os << "inaswitch_rdma_job_slots_in_use{job=\"" << j.job_id << "\"} " << j.slots_in_use
           << '\n';
    }
    family(os, "inaswitch_rdma_job_results_total", "counter",
           "Results of the job by event: completed (every rank contributed), released (every "
           "rank acknowledged), post_failed (a rank's QP could not take it)");
    for (const auto& j : jobs) {
        os << "inaswitch_rdma_job_results_total{job=\"" << j.job_id << "\",event=\"completed\"} "
           << j.counts.results_completed << '\n'
           << "inaswitch_rdma_job_results_total{job=\"" << j.job_id << "\",event=\"released\"} "
           << j.counts.results_released << '\n'
           << "inaswitch_rdma_job_results_total{job=\"" << j.job_id
           << "\",event=\"post_failed\"} " << j.counts.post_failures << '\n';
    }
    family(os, "inaswitch_rdma_job_failed_sessions_total", "counter",
           "Sessions of the job that failed: a rank's QP went into error and the other ranks "
           "were sent failure notices (docs/rdma.md \"A rank that fails\"; which rank: the "
           "job's last_failed_session in the API)");
    for (const auto& j : jobs) {
        os << "inaswitch_rdma_job_failed_sessions_total{job=\"" << j.job_id << "\"} "
           << j.failed_sessions << '\n';
    }
    family(os, "inaswitch_rdma_job_parent_total", "counter",
           "An aggregator job's traffic with its INA parent, by event (docs/rdma.md "
           "\"Aggregator role\")");
    for (const auto& j : jobs) {
        if (!j.aggregator) {
            continue;
        }
#define INA_ROCE_PARENT_SERIES(name, help)                                                 \
    os << "inaswitch_rdma_job_parent_total{job=\"" << j.job_id << "\",event=\"" #name "\"} " \
       << j.counts.parent.name << '\n';
        INA_ROCE_PARENT_EVENTS(INA_ROCE_PARENT_SERIES)
#undef INA_ROCE_PARENT_SERIES
    }
    family(os, "inaswitch_rdma_job_fixed_point_total", "counter",
           "A deterministic job's elements its quantizer saturated (beyond the fixed-point "
           "range, or infinite), lost below the resolution (underflow) or met as NaN "
           "(src/reduce/README.md \"Deterministic mode\")");
    for (const auto& j : jobs) {
        if (!j.deterministic) {
            continue;
        }
        const std::string prefix = "inaswitch_rdma_job_fixed_point_total{job=\"" +
                                   std::to_string(j.job_id) + "\",event=\"";
        os << prefix << "saturated\"} " << j.counts.fixed.saturated << '\n'
           << prefix << "underflow\"} " << j.counts.fixed.underflow << '\n'
           << prefix << "nan\"} " << j.counts.fixed.nan << '\n';
    }
    family(os, "inaswitch_rdma_packets_total", "counter",
           "RoCEv2 packets on UDP 4791 that reached no QP, by reason (see docs/rdma.md)");
#define INA_ROCE_REASON(name, help)                                                        \
    os << "inaswitch_rdma_packets_total{reason=\"" #name "\"} "                            \
       << lcore[static_cast<size_t>(LcoreCounter::name)] << '\n';
    INA_ROCE_LCORE_COUNTERS(INA_ROCE_REASON)
#undef INA_ROCE_REASON
    return os.str();
}

std::string render_cm_metrics(const CmCounters& cm) {
    std::ostringstream os;
    family(os, "inaswitch_rdma_cm_messages_total", "counter",
           "RDMA CM messages on QP1 the switch's passive CM handled, by event (docs/rdma.md "
           "\"RDMA CM on the switch\")");
#define INA_ROCE_CM_SERIES(name, help)                                                    \
    os << "inaswitch_rdma_cm_messages_total{event=\"" #name "\"} " << cm.name << '\n';
    INA_ROCE_CM_EVENTS(INA_ROCE_CM_SERIES)
#undef INA_ROCE_CM_SERIES
    return os.str();
}

}  // namespace ina::features::roce
