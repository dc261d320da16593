// SPDX-License-Identifier: Apache-2.0
// The RoCE feature's control piece: per-lcore states of the running `rdma:` section (a JobState
// and one QpState per connected rank, all on the job's home lcore: job id mod workers),
// attached and detached through the control plane's command rings as configs change, their
// slots written into each snapshot's RoceView, the metrics sampled at a scrape, and the API
// (docs/api.md): POST/DELETE /api/v1/rdma/jobs/{id}/connect[/{rank}], GET /api/v1/rdma/jobs/{id}.
// A connect is a config change adding one QP to its job: other jobs and the job's other QPs
// keep their states untouched.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/api.h"
#include "control/control_plane.h"
#include "features/roce/config_roce.h"
#include "features/roce/datapath_roce.h"

namespace ina::features::roce {

// Feature-state slots the feature may hold at once (the rest stay for INA's job limit).
inline constexpr size_t kMaxRoceStates = dp::kMaxFeatureStates - dp::kMaxInaJobs;

class RoceControl {
public:
    // The hooks to register with control::register_feature_control (self = this).
    control::FeatureControl hooks();

    // API (each takes the locks it needs).
    struct Reply {
        int status = 200;
        std::string body;  // JSON
    };
    Reply connect(control::ControlPlane& cp, uint32_t job_id, const std::string& body);
    Reply disconnect(control::ControlPlane& cp, uint32_t job_id, uint16_t rank);
    Reply describe(uint32_t job_id) const;

    // Per-lcore states held now (jobs and QPs).
    size_t states() const;

private:
    struct Qp {
        QpConfig cfg;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<QpState> state;
    };
    struct Job {
        JobConfig cfg;
        uint16_t home = 0;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<JobState> state;
        std::map<uint16_t, Qp> qps;  // by rank
    };
    struct Detach {
        size_t worker;
        uint16_t slot;
        uint32_t id;
        std::shared_ptr<void> state;
    };
    struct Attach {
        size_t worker;
        uint16_t slot;
        uint32_t id;
        StateTag* state;
    };
    struct Plan {
        std::map<uint32_t, Job> jobs;
        std::vector<Detach> detach;
        std::vector<Attach> attach;
        std::vector<uint16_t> acquired;  // slots taken by prepare (released if abandoned)
    };

    bool prepare(control::ControlPlane& cp, const config::Config& next, std::string& error);
    void commit(control::ControlPlane& cp);
    void abandon(control::ControlPlane& cp);
    void decorate(dp::Snapshot& snap);
    void stats(const control::ControlPlane& cp, metrics::Stats& out);

    mutable std::mutex mu_;      // jobs_ and plan_ (taken inside the control plane's lock)
    std::mutex connect_mu_;      // one API change at a time (taken before the control plane's)
    std::map<uint32_t, Job> jobs_;
    Plan plan_;
};

// The per-lcore states' parameters of a configured job and of one of its QPs (`cfg` gives the
// switch's address on the worker's subnet), as the control piece makes them; bench/ina_bench
// builds its states with these too.
JobParams job_params(const JobConfig& j);
QpParams qp_params(const config::Config& cfg, const JobConfig& j, const QpConfig& q);
// The aggregator role's parent link parameters (parent_ip 0: a root job).
ParentParams parent_params(const JobConfig& j);

// Installs the feature's API routes (control::register_routes) for `control` .
void install_routes(httplib::Server& server, control::ControlPlane& cp);
RoceControl& roce_control();  // the one instance src/app registers

}  // namespace ina::features::roce
