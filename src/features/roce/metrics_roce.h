// SPDX-License-Identifier: Apache-2.0
// The RoCE feature's Prometheus families, rendered from what control_roce samples at a scrape:
// per QP (labels job, rank) every INA_ROCE_QP_COUNTERS counter and the QP state, per job the
// aggregation's slots and results, and the per-lcore reasons summed (label reason).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "features/roce/datapath_roce.h"
#include "features/roce/view_roce.h"

namespace ina::features::roce {

struct QpSample {
    uint32_t job_id = 0;
    uint16_t rank = 0;
    uint32_t switch_qpn = 0;
    uint8_t state = 0;  // qp_state_code
    QpCounters counters;
};

// A job's result and parent-link counters: one session's (JobState), or summed over sessions.
struct JobCounts {
    uint64_t results_completed = 0;
    uint64_t results_released = 0;
    uint64_t post_failures = 0;
    ParentCounters parent;
    reduce::FixedStats fixed;  // a deterministic job's quantizer events

    // This plus session `s`'s counters (plain reads of its home lcore's words).
    JobCounts plus(const JobState& s) const;
};

struct JobSample {
    uint32_t job_id = 0;
    uint64_t slots_in_use = 0;
    JobCounts counts;  // every session's while the job is configured, the running one included
    uint64_t failed_sessions = 0;  // the current one included when it failed
    bool aggregator = false;  // the parent events below are rendered for aggregators only
    bool deterministic = false;  // the fixed-point events are rendered for these only
    QpCounters qp_totals;  // its QPs' counters, those of QPs that left included
};

using LcoreTotals = std::array<uint64_t, static_cast<size_t>(LcoreCounter::count)>;

std::string render_metrics(const std::vector<JobSample>& jobs, const std::vector<QpSample>& qps,
                           const LcoreTotals& lcore);
// The RDMA CM's events (inaswitch_rdma_cm_messages_total{event}).
std::string render_cm_metrics(const CmCounters& cm);

}  // namespace ina::features::roce
