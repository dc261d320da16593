// SPDX-License-Identifier: Apache-2.0
// The server-to-server feature's Prometheus families, rendered from what control_s2s samples
// at a scrape: per job (label job) every INA_S2S_JOB_COUNTERS counter and the slots in use,
// and the per-lcore reasons summed (label reason).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "features/roce_s2s/view_s2s.h"

namespace ina::features::roce_s2s {

struct JobSample {
    uint32_t job_id = 0;
    uint64_t slots_in_use = 0;
    JobCounters counters;
    bool leaving = false;  // removed, still translating: its series are labelled leaving_job
};

using LcoreTotals = std::array<uint64_t, static_cast<size_t>(LcoreCounter::count)>;

// `jobs_leaving`: removed jobs still taking part (the gauge inaswitch_rdma_s2s_jobs_leaving).
std::string render_metrics(const std::vector<JobSample>& jobs, const LcoreTotals& lcore,
                           uint64_t jobs_leaving = 0);

}  // namespace ina::features::roce_s2s
