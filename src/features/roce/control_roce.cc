// SPDX-License-Identifier: Apache-2.0
#include "features/roce/control_roce.h"

#include <httplib.h>
#include <nlohmann/json.hpp>
#include <rte_errno.h>
#include <rte_log.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <algorithm>
#include <charconv>
#include <set>

#include "control/api.h"
#include "features/roce/metrics_roce.h"
#include "pipeline/packet_meta.h"
#include "roce/wire.h"

namespace ina::features::roce {

using json = nlohmann::json;

static_assert(kMaxChunkBytes == kMaxStagedBytes);

JobParams job_params(const JobConfig& j) {
    return JobParams{j.id,         j.world,  j.op,   j.dtype,
                     j.chunk_bytes, j.window, j.pmtu, j.deterministic,
                     j.fixed_fraction_bits()};
}

QpParams qp_params(const config::Config& c, const JobConfig& j, const QpConfig& q) {
    QpParams p;
    p.switch_qpn = q.switch_qpn;
    p.switch_psn = q.switch_psn;
    p.worker_qpn = q.qpn;
    p.worker_psn = q.psn;
    if (q.ip6) {
        // Validation put the worker on some port's IPv6 prefix.
        p.ipv6 = true;
        p.worker_ip6 = q.ip6->bytes;
        p.switch_ip6 = qp_source6(c, q).value_or(net::Ipv6Addr{}).bytes;
    } else {
        p.switch_ip = qp_source4(c, q).value_or(0);
        p.worker_ip = q.ip;
    }
    p.rank = q.rank;
    p.pmtu = j.pmtu;
    p.result_addr = q.result_addr;
    p.result_rkey = q.result_rkey;
    p.result_length = q.result_length;
    p.timeout = q.timeout;
    p.retry_cnt = q.retry_cnt;
    p.rnr_retry = q.rnr_retry;
    p.area_addr = kAreaAddr;
    p.area_rkey = kAreaRkey;
    return p;
}

namespace {

// Whether `next` goes on with the aggregation state of `running`: the same job, and a rank still
// connected. A job whose last QP goes starts its next session with fresh slots: the workers'
// session sequences start at 0 again (CONTRACT), and the old session's released marks would
// make those keys stale.
bool keeps_session(const JobConfig& next, const JobConfig& running) {
    return same_job(next, running) && !next.qps.empty();
}

std::string error_json(const std::string& message) {
    return json{{"error", message}}.dump();
}

// A failed session's {rank, reason}; null for rank 0 (none).
json failure_json(uint16_t rank, uint8_t reason) {
    if (rank == 0) {
        return nullptr;
    }
    return {{"rank", rank}, {"reason", std::string(session_failure_name(reason))}};
}

const char* state_name(uint8_t code) {
    constexpr const char* names[] = {"ready", "error_receive", "error_result", "error"};
    return names[code & 3];
}

}  // namespace

// The aggregator role's parameters (parent_ip 0 for a root job).
ParentParams parent_params(const JobConfig& j) {
    ParentParams p;
    if (j.role != Role::aggregator) {
        return p;
    }
    p.parent_ip = j.parent;
    p.source_ip = j.source;
    const auto code = wire::bsl_code_from_bits(j.bsl_bits);
    auto abm = wire::BitString::from_bfr_ids(
        j.bsl_bits, j.set_id, std::vector<wire::BfrId>(j.abm.begin(), j.abm.end()));
    if (!code || !abm) {
        throw std::invalid_argument("abm or bsl out of range");  // the loader refuses these
    }
    p.bsl_code = *code;
    p.set_id = static_cast<uint8_t>(j.set_id);
    p.abm = std::move(*abm);
    p.timeout_ns = uint64_t{j.partial_timeout_ms} * 1'000'000;
    return p;
}

// The CM's view of the control plane: connect and disconnect as the API does.
class RoceControl::CmQps : public CmQpControl {
public:
    CmQps(RoceControl& rc, control::ControlPlane& cp) : rc_(rc), cp_(cp) {}
    ConnectOutcome connect_qp(uint32_t job_id, const ConnectRequest& r,
                              std::optional<uint32_t> switch_psn) override {
        return rc_.connect_qp(cp_, job_id, r, switch_psn);
    }
    bool disconnect_qp(uint32_t job_id, uint16_t rank) override {
        std::string error;
        return rc_.disconnect_qp(cp_, job_id, rank, error) == Refusal::none;
    }

private:
    RoceControl& rc_;
    control::ControlPlane& cp_;
};

void carry_connected_qps(const config::Config& running, config::Config& next,
                         std::vector<std::string>& ended) {
    const RdmaConfig* was = rdma_of(running);
    if (was == nullptr) {
        return;
    }
    const RdmaConfig* will = rdma_of(next);
    auto changed = std::make_shared<RdmaConfig>(will != nullptr ? *will : RdmaConfig{});
    size_t held = 0;
    std::set<uint32_t> qpns;
    for (const auto& j : changed->jobs) {
        held += 1 + j.qps.size();
        for (const auto& q : j.qps) {
            qpns.insert(q.switch_qpn);
        }
    }
    bool touched = false;
    for (const auto& old : was->jobs) {
        JobConfig* job = nullptr;
        for (auto& j : changed->jobs) {
            if (j.id == old.id) {
                job = &j;
            }
        }
        for (const auto& q : old.qps) {
            if (!q.from_api) {
                continue;
            }
            const char* why = nullptr;
            QpConfig* named = nullptr;
            if (job != nullptr) {
                auto it = std::find_if(job->qps.begin(), job->qps.end(),
                                       [&](const QpConfig& n) { return n.rank == q.rank; });
                named = it != job->qps.end() ? &*it : nullptr;
            }
            if (job == nullptr) {
                why = "its job is not in the new config";
            } else if (!same_job(*job, old)) {
                why = "its job's parameters changed";
            } else if (named != nullptr) {
                if (same_qp(*named, q)) {
                    named->from_api = true;
                    touched = true;
                    continue;
                }
                why = "the new config names another QP for its rank";
            } else if (qpns.count(q.switch_qpn) != 0) {
                why = "the new config gives its switch QPN to another QP";
            } else if (q.ip6 ? !qp_source6(next, q).has_value()
                             : !qp_source4(next, q).has_value()) {
                why = q.source6   ? "its source address is not on its worker's prefix in the new "
                                    "config"
                      : q.source4 ? "its source address is not on its worker's port in the new "
                                    "config"
                                  : "its worker is on no subnet of the new config's ports";
            } else if (held + 1 > kMaxRoceStates) {
                why = "no QP resources left by the new config";
            }
            if (why != nullptr) {
                ended.push_back("job " + std::to_string(old.id) + " rank " +
                                std::to_string(q.rank) + ": " + why);
                continue;
            }
            job->qps.push_back(q);
            qpns.insert(q.switch_qpn);
            ++held;
            touched = true;
        }
    }
    if (touched) {
        next.sections[kSectionKey] = changed;
    }
}

RoceControl::RoceControl() = default;
RoceControl::~RoceControl() = default;

void RoceControl::create_cm_rings_locked(size_t workers) {
    if (!cm_rings_.empty() || workers == 0) {
        return;
    }
    std::vector<rte_ring*> rings;
    for (size_t w = 0; w < workers; ++w) {
        const std::string name = "roce_cm" + std::to_string(w);
        rte_ring* r = rte_ring_create(name.c_str(), 256, SOCKET_ID_ANY,
                                      RING_F_SP_ENQ | RING_F_SC_DEQ);
        if (r == nullptr) {
            RTE_LOG(ERR, USER1, "rdma: no ring for RDMA CM (%s): CM off\n",
                    rte_strerror(rte_errno));
            for (rte_ring* made : rings) {
                rte_ring_free(made);
            }
            return;
        }
        rings.push_back(r);
    }
    cm_rings_ = std::move(rings);
}

void RoceControl::tick(control::ControlPlane& cp) {
    std::vector<rte_ring*> rings;
    uint16_t port = 0;
    {
        std::lock_guard lock(mu_);
        rings = cm_rings_;
        port = cm_port_;
    }
    if (rings.empty()) {
        return;
    }
    if (!cm_) {
        cm_qps_ = std::make_unique<CmQps>(*this, cp);
        cm_ = std::make_unique<CmPassive>(*cm_qps_, port);
    }
    // A MAD still in a ring after the port went to 0 is answered as for another port (REJ 8).
    cm_->set_port(port);
    for (rte_ring* ring : rings) {
        rte_mbuf* mads[32];
        const unsigned n = rte_ring_sc_dequeue_burst(ring, reinterpret_cast<void**>(mads), 32,
                                                     nullptr);
        for (unsigned i = 0; i < n; ++i) {
            answer_cm(cp, mads[i]);
        }
    }
    std::lock_guard lock(mu_);
    cm_counters_ = cm_->counters();
}

// One CM MAD the datapath checked (UD SEND ONLY to QP1 of the switch, a whole MAD, good ICRC):
// its answer goes back out of the port it came in on, to the MAC it came from (the worker or
// its gateway), with the L2 header it came with (VLAN tags included) and the addresses swapped.
void RoceControl::answer_cm(control::ControlPlane& cp, rte_mbuf* m) {
    constexpr size_t kFrameMax = 512;  // a CM frame is 14 + 20 (IPv6: 40) + 8 + 12 + 8 + 256 + 4
    std::array<uint8_t, kFrameMax> copy;
    const pipeline::PacketMeta* pm = pipeline::classified(m);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    const auto* f = len <= kFrameMax && pm != nullptr
                        ? static_cast<const uint8_t*>(rte_pktmbuf_read(m, 0, len, copy.data()))
                        : nullptr;
    const size_t mad_at = pm != nullptr ? size_t{pm->l4_offset} + 8 + ina::roce::kBthBytes +
                                              ina::roce::kDethBytes
                                        : 0;
    if (f == nullptr || mad_at + ina::roce::cm::kMadBytes > len) {
        rte_pktmbuf_free(m);  // the datapath checked the shape: not reached
        return;
    }
    // The worker's and the switch's addresses: IPv4, or IPv6 (a worker whose GID is IPv6).
    const uint8_t* l3 = f + pm->l3_offset;
    const bool v6 = (pm->flags & pipeline::kMetaIpv6) != 0;
    ina::roce::cm::Gid worker{};
    ina::roce::cm::Gid own{};
    if (v6) {
        std::memcpy(worker.data(), l3 + 8, 16);
        std::memcpy(own.data(), l3 + 24, 16);
    } else {
        worker = ina::roce::cm::ipv4_gid(ina::roce::detail::be32(l3 + 12));
        own = ina::roce::cm::ipv4_gid(ina::roce::detail::be32(l3 + 16));
    }
    const auto answer = cm_->on_mad(f + mad_at, ina::roce::cm::kMadBytes, worker, &own);
    if (!answer) {
        rte_pktmbuf_free(m);
        return;
    }
    rte_mbuf* out = rte_pktmbuf_alloc(m->pool);
    const size_t l2 = pm->l3_offset;
    const size_t answer_l3 = (v6 ? ina::roce::kIpv6Bytes : ina::roce::kIpv4Bytes) + 8 +
                             ina::roce::kBthBytes + ina::roce::kDethBytes +
                             ina::roce::cm::kMadBytes + ina::roce::kIcrcBytes;
    auto* d = out != nullptr
                  ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(out, uint16_t(l2 + answer_l3)))
                  : nullptr;
    if (d == nullptr) {
        rte_pktmbuf_free(out);
        rte_pktmbuf_free(m);
        return;
    }
    std::memcpy(d, f + 6, 6);  // to where it came from
    std::memcpy(d + 6, f, 6);  // from the switch port's MAC it was sent to
    std::memcpy(d + 12, f + 12, l2 - 12);
    size_t n = 0;
    if (v6) {
        ina::roce::Ipv6Path path;
        path.src_ip = own;
        path.dst_ip = worker;
        path.src_port = ina::roce::source_port_for_qp(ina::roce::cm::kCmQpn);
        path.dest_qp = ina::roce::cm::kCmQpn;
        path.traffic_class = 0;
        n = ina::roce::cm::encode_packet(d + l2, answer_l3, path, cm_psn_, *answer);
    } else {
        ina::roce::Ipv4Path path;
        path.src_ip = ina::roce::cm::gid_ipv4(own);
        path.dst_ip = ina::roce::cm::gid_ipv4(worker);
        path.src_port = ina::roce::source_port_for_qp(ina::roce::cm::kCmQpn);
        path.dest_qp = ina::roce::cm::kCmQpn;
        path.tos = 0;
        n = ina::roce::cm::encode_packet(d + l2, answer_l3, path, cm_ip_id_++, cm_psn_, *answer);
    }
    cm_psn_ = (cm_psn_ + 1) & 0xFFFFFF;
    out->port = m->port;
    rte_pktmbuf_free(m);
    if (n != answer_l3 || !cp.transmit(out)) {
        rte_pktmbuf_free(out);
    }
}

size_t RoceControl::states() const {
    std::lock_guard lock(mu_);
    size_t n = 0;
    for (const auto& [id, j] : jobs_) {
        n += 1 + j.qps.size();
    }
    return n;
}

bool RoceControl::prepare(control::ControlPlane& cp, const config::Config& next,
                          std::string& error) {
    std::lock_guard lock(mu_);
    plan_ = Plan{};
    const RdmaConfig* rdma = rdma_of(next);
    const size_t workers = std::max<size_t>(cp.worker_count(), 1);
    create_cm_rings_locked(cp.worker_count());
    plan_.cm_port = rdma != nullptr ? rdma->cm_port : kDefaultCmPort;
    auto slot = [&](uint16_t& out) {
        out = cp.acquire_state_slot_locked();
        if (out == dp::kNoStateSlot) {
            error = "rdma: no QP resources (every per-lcore state slot is in use)";
            return false;
        }
        plan_.states.acquired.push_back(out);
        return true;
    };
    size_t held = 0;
    for (const auto& [id, old] : jobs_) {
        const JobConfig* nj = rdma != nullptr ? rdma->job(id) : nullptr;
        const bool keep_job = nj != nullptr && keeps_session(*nj, old.cfg);
        // QPs first (their detach unlinks them from the job on the lcore), then the job.
        for (const auto& [rank, q] : old.qps) {
            const QpConfig* nq = keep_job ? nj->qp_of_rank(rank) : nullptr;
            if (nq == nullptr || !same_qp(*nq, q.cfg)) {
                plan_.states.detach.push_back(
                    {old.home, q.slot, qp_state_id(q.cfg.switch_qpn), q.state});
            }
        }
        if (!keep_job) {
            plan_.states.detach.push_back({old.home, old.slot, job_state_id(id), old.state});
        }
    }
    if (rdma != nullptr) {
        for (const auto& j : rdma->jobs) {
            Job job;
            auto kept = jobs_.find(j.id);
            const bool keep_job = kept != jobs_.end() && keeps_session(j, kept->second.cfg);
            if (kept != jobs_.end() && same_job(j, kept->second.cfg)) {
                const Job& was = kept->second;
                job.last_failure = was.last_failure;
                job.failed_sessions = was.failed_sessions;
                // Plain reads of the home lcore's words: the session ended with its last QP,
                // so nothing but a late parent result still counts there.
                job.ended = keep_job ? was.ended : was.ended.plus(*was.state);
                // A plain read of the home lcore's word, written once per session.
                if (!keep_job && was.state->failed_rank != 0) {
                    job.last_failure = {was.state->failed_rank, was.state->failure};
                    ++job.failed_sessions;
                }
            }
            if (keep_job) {
                job.home = kept->second.home;
                job.slot = kept->second.slot;
                job.state = kept->second.state;
            } else {
                job.home = static_cast<uint16_t>(j.id % workers);
                try {
                    job.state = std::make_shared<JobState>(job_params(j), parent_params(j));
                } catch (const std::exception& e) {
                    error = "rdma job " + std::to_string(j.id) + ": " + e.what();
                    return false;
                }
                if (!slot(job.slot)) {
                    return false;
                }
                plan_.states.attach.push_back(
                    {job.home, job.slot, job_state_id(j.id), job.state.get()});
            }
            job.cfg = j;
            for (const auto& q : j.qps) {
                Qp qp;
                qp.cfg = q;
                const Qp* old = nullptr;
                if (keep_job) {
                    auto it = kept->second.qps.find(q.rank);
                    if (it != kept->second.qps.end() && same_qp(it->second.cfg, q)) {
                        old = &it->second;
                    }
                }
                if (old != nullptr) {
                    qp.slot = old->slot;
                    qp.state = old->state;
                } else {
                    qp.state = std::make_shared<QpState>(qp_params(next, j, q), job.state.get());
                    if (!slot(qp.slot)) {
                        return false;
                    }
                    plan_.states.attach.push_back(
                        {job.home, qp.slot, qp_state_id(q.switch_qpn), qp.state.get()});
                }
                job.qps.emplace(q.rank, std::move(qp));
            }
            held += 1 + job.qps.size();
            plan_.jobs.emplace(j.id, std::move(job));
        }
    }
    if (held > kMaxRoceStates) {
        error = "rdma: no QP resources (" + std::to_string(held) + " jobs and QPs, at most " +
                std::to_string(kMaxRoceStates) + ")";
        return false;
    }
    return true;
}

void RoceControl::abandon(control::ControlPlane& cp) {
    std::lock_guard lock(mu_);
    plan_.states.abandon(cp);
    plan_ = Plan{};
}

void RoceControl::commit(control::ControlPlane& cp) {
    std::lock_guard lock(mu_);
    plan_.states.commit(cp, kFeatureRoce);
    // A QP whose state does not go on into the new plan takes its counters into its job's
    // departed totals (plain reads, as stats(): a QP being DELETEd has seen its last packet).
    std::map<uint32_t, QpCounters> departed;
    for (const auto& [id, j] : plan_.jobs) {
        QpCounters& d = departed[id];
        if (auto it = departed_.find(id); it != departed_.end()) {
            d = it->second;
        }
        auto old = jobs_.find(id);
        if (old == jobs_.end()) {
            continue;
        }
        for (const auto& [rank, q] : old->second.qps) {
            auto kept = j.qps.find(rank);
            if (kept != j.qps.end() && kept->second.state == q.state) {
                continue;
            }
#define INA_ROCE_DEPART(name, help) d.name += q.state->counters.name;
            INA_ROCE_QP_COUNTERS(INA_ROCE_DEPART)
#undef INA_ROCE_DEPART
        }
    }
    departed_ = std::move(departed);
    jobs_ = std::move(plan_.jobs);
    cm_port_ = plan_.cm_port;
    plan_ = Plan{};
}

void RoceControl::decorate(dp::Snapshot& snap) {
    std::lock_guard lock(mu_);
    auto* view = static_cast<RoceView*>(snap.feature_views[kFeatureRoce].get());
    if (view == nullptr) {
        return;
    }
    if (cm_port_ != 0) {
        view->cm_rings = cm_rings_;
    }
    for (auto& jv : view->jobs) {
        if (auto it = jobs_.find(jv.job_id); it != jobs_.end()) {
            jv.home = it->second.home;
            jv.slot = it->second.slot;
        }
    }
    for (auto& qv : view->qps) {
        auto it = jobs_.find(qv.job_id);
        if (it == jobs_.end()) {
            continue;
        }
        qv.home = it->second.home;
        if (auto q = it->second.qps.find(qv.rank); q != it->second.qps.end()) {
            qv.slot = q->second.slot;
        }
    }
}

void RoceControl::stats(const control::ControlPlane& cp, metrics::Stats& out) {
    std::vector<JobSample> jobs;
    std::vector<QpSample> qps;
    {
        std::lock_guard lock(mu_);
        if (!cm_rings_.empty()) {
            out.feature_text += render_cm_metrics(cm_counters_);
        }
        if (jobs_.empty()) {
            return;
        }
        // Plain reads of the home lcore's words: each is written by that lcore only.
        for (const auto& [id, j] : jobs_) {
            jobs.push_back(JobSample{id, j.state->table.in_use(), j.ended.plus(*j.state),
                                     j.failed_sessions + (j.state->failed_rank != 0 ? 1 : 0),
                                     j.state->parent != nullptr, j.cfg.deterministic, {}});
            QpCounters& total = jobs.back().qp_totals;
            if (auto d = departed_.find(id); d != departed_.end()) {
                total = d->second;
            }
            for (const auto& [rank, q] : j.qps) {
                qps.push_back(QpSample{id, rank, q.cfg.switch_qpn, qp_state_code(*q.state),
                                       q.state->counters});
#define INA_ROCE_TOTAL(name, help) total.name += q.state->counters.name;
                INA_ROCE_QP_COUNTERS(INA_ROCE_TOTAL)
#undef INA_ROCE_TOTAL
            }
        }
    }
    LcoreTotals lcore{};
    for (size_t w = 0; w < cp.worker_count(); ++w) {
        const auto& c = cp.lcore_context(w).feature_counters[kFeatureRoce];
        for (size_t i = 0; i < lcore.size(); ++i) {
            lcore[i] += c[i];
        }
    }
    out.feature_text += render_metrics(jobs, qps, lcore);
}

control::FeatureControl RoceControl::hooks() {
    control::FeatureControl fc;
    fc.self = this;
    fc.prepare = [](void* s, control::ControlPlane& cp, const config::Config& next,
                    std::string& error) {
        return static_cast<RoceControl*>(s)->prepare(cp, next, error);
    };
    fc.commands_needed = [](void* s) {
        auto* self = static_cast<RoceControl*>(s);
        std::lock_guard lock(self->mu_);
        return self->plan_.states.commands();
    };
    fc.commit = [](void* s, control::ControlPlane& cp) { static_cast<RoceControl*>(s)->commit(cp); };
    fc.abandon = [](void* s, control::ControlPlane& cp) {
        static_cast<RoceControl*>(s)->abandon(cp);
    };
    fc.decorate = [](void* s, dp::Snapshot& snap) { static_cast<RoceControl*>(s)->decorate(snap); };
    fc.stats = [](void* s, const control::ControlPlane& cp, metrics::Stats& out) {
        static_cast<RoceControl*>(s)->stats(cp, out);
    };
    fc.tick = [](void* s, control::ControlPlane& cp) { static_cast<RoceControl*>(s)->tick(cp); };
    fc.carry = [](void*, const config::Config& running, config::Config& next) {
        std::vector<std::string> ended;
        carry_connected_qps(running, next, ended);
        for (const auto& e : ended) {
            RTE_LOG(NOTICE, USER1, "rdma: a QP connected through the API or the CM ends: %s\n",
                    e.c_str());
        }
    };
    return fc;
}

RoceControl::Reply RoceControl::connect(control::ControlPlane& cp, uint32_t job_id,
                                        const std::string& body) {
    const ConnectParse parsed = parse_connect(body, "request");
    if (!parsed.request) {
        std::string message;
        for (const auto& e : parsed.errors) {
            if (!message.empty()) {
                message += "; ";
            }
            message += e.str();
        }
        // An unknown job is a 404 even when the body is bad.
        if (!has_job(cp, job_id)) {
            return {404, error_json("no rdma job " + std::to_string(job_id))};
        }
        return {400, error_json(message)};
    }
    const ConnectOutcome out = connect_qp(cp, job_id, *parsed.request, std::nullopt);
    if (!out.ok()) {
        return {http_status(out.refusal), error_json(out.error)};
    }
    // The switch's GID: its IPv6 address itself, or the IPv4-mapped form of its IPv4 one.
    const std::string ip = out.switch_ip6 ? out.switch_ip6->str() : net::Ipv4Addr{out.switch_ip}.str();
    const json answer = {{"qpn", out.switch_qpn},
                         {"psn", out.switch_psn},
                         {"ip", ip},
                         {"gid", out.switch_ip6 ? ip : "::ffff:" + ip},
                         {"area_addr", kAreaAddr},
                         {"area_rkey", kAreaRkey},
                         {"area_length", out.area_length},
                         {"pmtu", out.pmtu}};
    return {200, answer.dump()};
}

bool RoceControl::has_job(control::ControlPlane& cp, uint32_t job_id) {
    const config::Config cfg = cp.running_config();
    const RdmaConfig* rdma = rdma_of(cfg);
    return rdma != nullptr && rdma->job(job_id) != nullptr;
}

ConnectOutcome RoceControl::connect_qp(control::ControlPlane& cp, uint32_t job_id,
                                       const ConnectRequest& r,
                                       std::optional<uint32_t> switch_psn) {
    std::lock_guard serial(connect_mu_);
    auto refuse = [](Refusal why, std::string text) {
        ConnectOutcome o;
        o.refusal = why;
        o.error = std::move(text);
        return o;
    };
    config::Config cfg = cp.running_config();
    const RdmaConfig* rdma = rdma_of(cfg);
    const JobConfig* job = rdma != nullptr ? rdma->job(job_id) : nullptr;
    if (job == nullptr) {
        return refuse(Refusal::no_job, "no rdma job " + std::to_string(job_id));
    }
    if (r.chunk_bytes != job->chunk_bytes || r.window != job->window || r.dtype != job->dtype ||
        r.op != job->op || r.world != job->world) {
        return refuse(Refusal::differs, "job parameters differ from rdma job " +
                                            std::to_string(job_id) +
                                            " (chunk_bytes, window, dtype, op and world must match)");
    }
    if (r.chunk_bytes > r.pmtu && r.pmtu < job->pmtu) {
        // The worker's NIC would cut its WRITEs at its own MTU: MIDDLE packets shorter than
        // the job's pmtu, which RC's rules refuse.
        return refuse(Refusal::differs,
                      "pmtu " + std::to_string(r.pmtu) + " is below the job's " +
                          std::to_string(job->pmtu) + " while chunk_bytes is above it");
    }
    if (r.qp.rank == 0 || r.qp.rank > job->world) {
        return refuse(Refusal::bad_rank, "rank is outside 1..the job's world");
    }
    if (job->qp_of_rank(r.qp.rank) != nullptr) {
        return refuse(Refusal::rank_taken,
                      "rank " + std::to_string(r.qp.rank) + " is already connected");
    }
    if (r.qp.result_length < job->chunk_bytes) {
        return refuse(Refusal::malformed, "result_length is below chunk_bytes");
    }
    const auto switch_ip4 = qp_source4(cfg, r.qp);
    const auto switch_ip6 = qp_source6(cfg, r.qp);
    if (r.qp.ip6 ? !switch_ip6 : !switch_ip4) {
        return refuse(Refusal::malformed,
                      r.qp.source6   ? "source " + r.qp.source6->str() +
                                           " is no IPv6 address of a port whose prefix holds ip " +
                                           worker_ip_text(r.qp)
                      : r.qp.source4 ? "source " + r.qp.source4->str() +
                                           " is no IPv4 address of the port whose subnet holds "
                                           "ip " + worker_ip_text(r.qp)
                                     : "ip " + worker_ip_text(r.qp) +
                                           " is on no subnet of the switch's ports");
    }
    if (states() + 1 > kMaxRoceStates) {
        return refuse(Refusal::no_resources, "no QP resources on the switch");
    }
    std::set<uint32_t> used;
    for (const auto& j : rdma->jobs) {
        for (const auto& q : j.qps) {
            used.insert(q.switch_qpn);
        }
    }
    uint32_t qpn = kFirstSwitchQpn;
    while (used.count(qpn) != 0) {
        ++qpn;
    }
    QpConfig q = r.qp;
    q.switch_qpn = qpn;
    // Any start is valid; one derived from the QPN differs between successive connections.
    q.switch_psn = switch_psn.value_or(qpn * 2654435761u) & 0xFFFFFF;
    ConnectOutcome out;
    out.switch_qpn = qpn;
    out.switch_psn = q.switch_psn;
    out.switch_ip = switch_ip4.value_or(0);
    out.switch_ip6 = switch_ip6;
    out.area_length = uint64_t{job->window} * job->chunk_bytes;
    out.pmtu = job->pmtu;
    // `rdma` and `job` point into the running config, which the apply below replaces.
    auto changed = std::make_shared<RdmaConfig>(*rdma);
    job = nullptr;
    rdma = nullptr;
    for (auto& j : changed->jobs) {
        if (j.id == job_id) {
            j.qps.push_back(q);
        }
    }
    cfg.sections[kSectionKey] = changed;
    const control::ApplyResult applied = cp.apply(std::move(cfg));
    if (!applied.ok) {
        std::string message;
        for (const auto& e : applied.errors) {
            if (!message.empty()) {
                message += "; ";
            }
            message += e;
        }
        const bool resources = message.find("no QP resources") != std::string::npos;
        return refuse(resources ? Refusal::no_resources : Refusal::malformed, message);
    }
    return out;
}

RoceControl::Reply RoceControl::disconnect(control::ControlPlane& cp, uint32_t job_id,
                                           uint16_t rank) {
    std::string error;
    switch (disconnect_qp(cp, job_id, rank, error)) {
    case Refusal::none: return {204, ""};
    case Refusal::no_job: return {404, error_json(error)};
    case Refusal::bad_rank: return {404, error_json(error)};
    default: return {500, error_json(error)};
    }
}

Refusal RoceControl::disconnect_qp(control::ControlPlane& cp, uint32_t job_id, uint16_t rank,
                                   std::string& error) {
    std::lock_guard serial(connect_mu_);
    config::Config cfg = cp.running_config();
    const RdmaConfig* rdma = rdma_of(cfg);
    const JobConfig* job = rdma != nullptr ? rdma->job(job_id) : nullptr;
    if (job == nullptr) {
        error = "no rdma job " + std::to_string(job_id);
        return Refusal::no_job;
    }
    if (job->qp_of_rank(rank) == nullptr) {
        error = "rank " + std::to_string(rank) + " is not connected";
        return Refusal::bad_rank;
    }
    auto changed = std::make_shared<RdmaConfig>(*rdma);
    job = nullptr;
    rdma = nullptr;
    for (auto& j : changed->jobs) {
        if (j.id == job_id) {
            std::erase_if(j.qps, [&](const QpConfig& x) { return x.rank == rank; });
        }
    }
    cfg.sections[kSectionKey] = changed;
    const control::ApplyResult applied = cp.apply(std::move(cfg));
    if (!applied.ok) {
        error = applied.errors.empty() ? "not applied" : applied.errors[0];
        return Refusal::malformed;
    }
    return Refusal::none;
}

RoceControl::Reply RoceControl::describe(uint32_t job_id) const {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
        return {404, error_json("no rdma job " + std::to_string(job_id))};
    }
    const Job& j = it->second;
    json qps = json::array();
    for (const auto& [rank, q] : j.qps) {
        json counters;
#define INA_ROCE_JSON(name, help) counters[#name] = q.state->counters.name;
        INA_ROCE_QP_COUNTERS(INA_ROCE_JSON)
#undef INA_ROCE_JSON
        qps.push_back({{"rank", rank},
                       {"qpn", q.cfg.switch_qpn},
                       {"worker_qpn", q.cfg.qpn},
                       {"ip", worker_ip_text(q.cfg)},
                       {"source", q.cfg.from_api ? "api" : "config"},
                       {"state", state_name(qp_state_code(*q.state))},
                       {"timeout", q.cfg.timeout},
                       {"retry_cnt", q.cfg.retry_cnt},
                       {"rnr_retry", q.cfg.rnr_retry},
                       {"counters", counters}});
    }
    json out = {{"id", j.cfg.id},
                {"mode", "server-to-switch"},
                {"world", j.cfg.world},
                {"op", std::string(reduce::to_string(j.cfg.op))},
                {"dtype", std::string(reduce::to_string(j.cfg.dtype))},
                {"chunk_bytes", j.cfg.chunk_bytes},
                {"window", j.cfg.window},
                {"pmtu", j.cfg.pmtu},
                {"home_worker", j.home},
                {"slots_in_use", j.state->table.in_use()},
                {"results_completed", j.state->results_completed},
                {"results_released", j.state->results_released},
                {"session_failed", failure_json(j.state->failed_rank, j.state->failure)},
                {"last_failed_session",
                 j.state->failed_rank != 0
                     ? failure_json(j.state->failed_rank, j.state->failure)
                     : failure_json(j.last_failure.rank, j.last_failure.reason)},
                {"role", j.cfg.role == Role::aggregator ? "aggregator" : "root"},
                {"qps", qps}};
    if (j.state->parent != nullptr) {
        // The aggregator role: where partials go, and the parent link's events.
        json events;
        const ParentCounters& c = j.state->parent->counters;
#define INA_ROCE_PARENT_JSON(name, help) events[#name] = c.name;
        INA_ROCE_PARENT_EVENTS(INA_ROCE_PARENT_JSON)
#undef INA_ROCE_PARENT_JSON
        out["parent"] = net::Ipv4Addr{j.cfg.parent}.str();
        out["parent_events"] = events;
    }
    if (j.cfg.deterministic) {
        // The session's quantizer events (the metric counts every session's).
        const reduce::FixedStats& f = j.state->table.core().fixed_stats();
        out["deterministic"] = {{"fraction_bits", j.cfg.fixed_fraction_bits()},
                                {"saturated", f.saturated},
                                {"underflow", f.underflow},
                                {"nan", f.nan}};
    }
    return {200, out.dump(2)};
}

RoceControl& roce_control() {
    static RoceControl instance;
    return instance;
}

void install_routes(httplib::Server& s, control::ControlPlane& cp) {
    auto send = [](httplib::Response& res, const RoceControl::Reply& r) {
        res.status = r.status;
        if (!r.body.empty()) {
            res.set_content(r.body + "\n", "application/json");
        }
    };
    auto number = [](const std::string& text, uint64_t max, uint64_t& out) {
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
        return ec == std::errc{} && ptr == text.data() + text.size() && out <= max;
    };
    s.Post(R"(/api/v1/rdma/jobs/(\d+)/connect)",
           [&cp, send, number](const httplib::Request& req, httplib::Response& res) {
               uint64_t id = 0;
               if (!number(req.matches[1], 0xFFFFFFFF, id)) {
                   send(res, {400, error_json("expected a job id")});
                   return;
               }
               send(res, roce_control().connect(cp, static_cast<uint32_t>(id), req.body));
           });
    s.Delete(R"(/api/v1/rdma/jobs/(\d+)/connect/(\d+))",
             [&cp, send, number](const httplib::Request& req, httplib::Response& res) {
                 uint64_t id = 0;
                 uint64_t rank = 0;
                 if (!number(req.matches[1], 0xFFFFFFFF, id) ||
                     !number(req.matches[2], kMaxWorld, rank)) {
                     send(res, {400, error_json("expected a job id and a rank")});
                     return;
                 }
                 send(res, roce_control().disconnect(cp, static_cast<uint32_t>(id),
                                                     static_cast<uint16_t>(rank)));
             });
    s.Get(R"(/api/v1/rdma/jobs/(\d+))",
          [send, number](const httplib::Request& req, httplib::Response& res) {
              uint64_t id = 0;
              if (!number(req.matches[1], 0xFFFFFFFF, id)) {
                  send(res, {400, error_json("expected a job id")});
                  return;
              }
              send(res, roce_control().describe(static_cast<uint32_t>(id)));
          });
}

}  // namespace ina::features::roce
