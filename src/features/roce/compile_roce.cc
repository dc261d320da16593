// SPDX-License-Identifier: Apache-2.0
#include "features/roce/compile_roce.h"

#include <algorithm>
#include <memory>

#include "features/roce/config_roce.h"
#include "features/roce/view_roce.h"
#include "roce/wire.h"

namespace ina::features::roce {

bool compile_roce(const config::Config& cfg, dp::Snapshot& snap, std::string& error) {
    const RdmaConfig* rdma = rdma_of(cfg);
    if (rdma == nullptr || rdma->jobs.empty()) {
        return true;
    }
    auto view = std::make_shared<RoceView>();
    for (const auto& j : rdma->jobs) {
        view->jobs.push_back(JobView{j.id, 0, dp::kNoStateSlot});
        for (const auto& q : j.qps) {
            view->qps.push_back(QpView{q.switch_qpn, j.id, q.rank, 0, dp::kNoStateSlot});
        }
    }
    std::sort(view->qps.begin(), view->qps.end(),
              [](const QpView& a, const QpView& b) { return a.switch_qpn < b.switch_qpn; });
    // RoCE to the switch's own addresses arrives routed. Bridged RoCE (between two servers of
    // one L2 group) is never for the switch: frames to its MAC are routed, so only the routed
    // path is bound and bridged RDMA never meets the stage. Shared with the server-to-server
    // mode: each passes what is not its own (not to the switch; not a job connection) to the
    // other. IPv6 too when the switch has an IPv6 address (a worker's GID may be IPv6): the
    // server-to-server mode takes no IPv6, so what the endpoint passes of it is routed.
    const bool ipv6 = std::any_of(cfg.ports.begin(), cfg.ports.end(),
                                  [](const auto& p) { return !p.ipv6.empty(); });
    const auto scopes = static_cast<uint8_t>(dp::kScopeRouted | (ipv6 ? dp::kScopeRouted6 : 0));
    if (!snap.features.bind({dp::kIpProtoUdp, kFeatureRoce, scopes, ina::roce::kUdpPort, true})) {
        error = "rdma: cannot bind UDP 4791 (the port is taken, or the feature table is full)";
        return false;
    }
    // An aggregator job's parent answers with INA results to this switch: the INA stage hands
    // them to this feature (FeatureStage::ina_result), so the INA port must reach that stage
    // even on a switch without INA jobs of its own (the loader refuses a job id in both).
    for (const auto& j : rdma->jobs) {
        if (j.role != Role::aggregator) {
            continue;
        }
        if (snap.ina_job(j.id) != nullptr) {
            error = "rdma job " + std::to_string(j.id) + ": an INA job of this switch has its id";
            return false;
        }
        snap.ina_job_handlers.push_back(dp::InaJobHandler{j.id, kFeatureRoce});
    }
    if (!snap.ina_job_handlers.empty() &&
        snap.features.lookup(dp::kIpProtoUdp, snap.ina_udp_port, dp::kScopeRouted) ==
            dp::kFeatureNone &&
        !snap.features.bind({dp::kIpProtoUdp, dp::kFeatureIna, dp::kScopeRouted,
                             snap.ina_udp_port})) {
        error = "rdma: cannot bind the INA port for the aggregator jobs' results";
        return false;
    }
    snap.feature_views[kFeatureRoce] = std::move(view);
    return true;
}

}  // namespace ina::features::roce
