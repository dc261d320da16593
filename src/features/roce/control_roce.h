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
#include <optional>
#include <string>
#include <vector>

#include "control/api.h"
#include "control/control_plane.h"
#include "features/roce/config_roce.h"
#include "features/roce/control_roce_cm.h"
#include "features/roce/datapath_roce.h"
#include "features/roce/metrics_roce.h"

struct rte_mbuf;
struct rte_ring;

namespace ina::features::roce {

// Feature-state slots the feature may hold at once (the rest stay for INA's job limit).
inline constexpr size_t kMaxRoceStates = dp::kMaxFeatureStates - dp::kMaxInaJobs;

// QPs connected through the API or the RDMA CM belong to their connections, not to a file: a
// loaded config (a reload of the file, PUT /api/v1/config) keeps each one whose job it keeps
// unchanged (same_job), whose rank and switch QPN it leaves free and whose worker it still
// reaches, within kMaxRoceStates; it is the same QP, so its state goes on untouched. A QP the
// loaded config names itself, identically, stays marked as connected. What cannot be kept ends
// with the change, as one line each in `ended` ("job 7 rank 2: <why>").
void carry_connected_qps(const config::Config& running, config::Config& next,
                         std::vector<std::string>& ended);

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

    // The one connect and disconnect of a rank's QP, shared by the API and the RDMA CM
    // (control_roce_cm.h): a config change adding (removing) one QP to (from) the running job.
    // `switch_psn` when given is where the switch's requester starts (else derived).
    ConnectOutcome connect_qp(control::ControlPlane& cp, uint32_t job_id, const ConnectRequest& r,
                              std::optional<uint32_t> switch_psn);
    Refusal disconnect_qp(control::ControlPlane& cp, uint32_t job_id, uint16_t rank,
                          std::string& error);

    // Per-lcore states held now (jobs and QPs).
    size_t states() const;

    RoceControl();
    ~RoceControl();

private:
    struct Qp {
        QpConfig cfg;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<QpState> state;
    };
    // The rank that failed a session, and why (JobState::failed_rank, failure; rank 0: none).
    struct SessionFailure {
        uint16_t rank = 0;
        uint8_t reason = 0;
    };
    struct Job {
        JobConfig cfg;
        uint16_t home = 0;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<JobState> state;
        std::map<uint16_t, Qp> qps;  // by rank
        // The last session of this job that failed and ended (its state replaced by a fresh
        // one): kept while the job is configured, so an operator still sees which rank ended
        // a training run after every worker left.
        SessionFailure last_failure;
        uint64_t failed_sessions = 0;  // sessions that failed and ended, while configured
        // The counters of this job's sessions that ended (their state replaced by a fresh
        // one), while configured: the metrics add the running session's, so a job's counters
        // never fall when its last rank leaves.
        JobCounts ended;
    };
    struct Plan {
        std::map<uint32_t, Job> jobs;
        control::FeatureStateChanges states;  // slots taken, detaches, attaches
        uint16_t cm_port = kDefaultCmPort;
    };

    bool prepare(control::ControlPlane& cp, const config::Config& next, std::string& error);
    void commit(control::ControlPlane& cp);
    void abandon(control::ControlPlane& cp);
    void decorate(dp::Snapshot& snap);
    void stats(const control::ControlPlane& cp, metrics::Stats& out);
    static bool has_job(control::ControlPlane& cp, uint32_t job_id);

    // RDMA CM: the control thread's share (FeatureControl::tick, without the control plane's
    // lock): drains the workers' CM rings, answers through ControlPlane::transmit.
    class CmQps;
    void tick(control::ControlPlane& cp);
    void answer_cm(control::ControlPlane& cp, rte_mbuf* m);
    void create_cm_rings_locked(size_t workers);
    std::vector<rte_ring*> cm_rings_;    // per worker index; written once under mu_
    uint16_t cm_port_ = kDefaultCmPort;  // the running config's (under mu_; 0: CM off)
    std::unique_ptr<CmQps> cm_qps_;      // the tick thread's only
    std::unique_ptr<CmPassive> cm_;      // the tick thread's only
    CmCounters cm_counters_;             // the CM's counters as of its last tick (under mu_)
    uint32_t cm_psn_ = 0;                // QP1's send PSN
    uint16_t cm_ip_id_ = 0;

    // Per configured job: the counters of its QPs that left (a DELETE, a replaced QP or a new
    // session), read when their detach is committed, so the job's totals do not fall when a
    // rank disconnects (under mu_).
    std::map<uint32_t, QpCounters> departed_;
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
