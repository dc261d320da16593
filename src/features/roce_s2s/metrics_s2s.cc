// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/metrics_s2s.h"

#include <sstream>

namespace ina::features::roce_s2s {

namespace {

void family(std::ostringstream& os, const std::string& name, const char* type, const char* help) {
    os << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

// A job's labels: a removed job still translating is `leaving_job`, apart from a configured
// one with its id (`job`: a new job of the id starts from 0 beside the leaving one).
std::string labels(const JobSample& j) {
    return std::string(j.leaving ? "{leaving_job=\"" : "{job=\"") + std::to_string(j.job_id) +
           "\"}";
}

}  // namespace

std::string render_metrics(const std::vector<JobSample>& jobs, const LcoreTotals& lcore,
                           uint64_t jobs_leaving) {
    std::ostringstream os;
#define INA_S2S_RENDER(field, help)                                                        \
    family(os, "inaswitch_rdma_s2s_" #field "_total", "counter", help);                    \
    for (const auto& j : jobs) {                                                           \
        os << "inaswitch_rdma_s2s_" #field "_total" << labels(j) << ' ' << j.counters.field \
           << '\n';                                                                          \
    }
    INA_S2S_JOB_COUNTERS(INA_S2S_RENDER)
#undef INA_S2S_RENDER
    family(os, "inaswitch_rdma_s2s_slots_in_use", "gauge",
           "Aggregation slots of the job holding a chunk (aggregating, or an aggregate the root "
           "has not acknowledged yet)");
    for (const auto& j : jobs) {
        os << "inaswitch_rdma_s2s_slots_in_use" << labels(j) << ' ' << j.slots_in_use << '\n';
    }
    family(os, "inaswitch_rdma_s2s_jobs_leaving", "gauge",
           "Jobs removed or replaced by a config change, or states superseded by a worker that "
           "reconnected alone, whose connections the switch still translates (docs/rdma.md "
           "\"Leaving a job\")");
    os << "inaswitch_rdma_s2s_jobs_leaving " << jobs_leaving << '\n';
    family(os, "inaswitch_rdma_s2s_packets_total", "counter",
           "RoCEv2 packets the server-to-server stage did not take part in, by reason "
           "(docs/rdma.md)");
#define INA_S2S_REASON(name, help)                                                         \
    os << "inaswitch_rdma_s2s_packets_total{reason=\"" #name "\"} "                        \
       << lcore[static_cast<size_t>(LcoreCounter::name)] << '\n';
    INA_S2S_LCORE_COUNTERS(INA_S2S_REASON)
#undef INA_S2S_REASON
    return os.str();
}

}  // namespace ina::features::roce_s2s
