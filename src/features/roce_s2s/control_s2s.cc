// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/control_s2s.h"

#include <algorithm>

#include "features/roce_s2s/compile_s2s.h"
#include "features/roce_s2s/metrics_s2s.h"
#include "metrics/stats.h"
#include "roce/wire.h"

namespace ina::features::roce_s2s {

JobParams job_params(const JobConfig& j) {
    JobParams p;
    p.job_id = j.id;
    p.root_ip = j.root;
    p.op = j.op;
    p.dtype = j.dtype;
    p.chunk_bytes = j.chunk_bytes;
    p.window = j.window;
    p.pmtu = j.pmtu;
    p.timeout = j.timeout;
    p.retry_cnt = j.retry_cnt;
    p.learn = j.learn;
    p.replicate = j.replicate;
    if (j.learn) {
        // Every rank's connection through this switch is expected (all of them by default);
        // each becomes live when its REP is seen. A chunk completes by the counts.
        p.count_complete = true;
        if (!j.ranks.empty()) {
            p.n_conns = static_cast<uint16_t>(std::min<size_t>(j.ranks.size(), kMaxConns));
            for (uint16_t i = 0; i < p.n_conns; ++i) {
                p.conns[i].rank = j.ranks[i];
            }
            return p;
        }
        p.n_conns = static_cast<uint16_t>(std::min<size_t>(j.world, kMaxConns));
        for (uint16_t i = 0; i < p.n_conns; ++i) {
            p.conns[i].rank = static_cast<uint16_t>(i + 1);
        }
        return p;
    }
    p.n_conns = static_cast<uint16_t>(std::min<size_t>(j.connections.size(), kMaxConns));
    for (uint16_t i = 0; i < p.n_conns; ++i) {
        const ConnectionConfig& c = j.connections[i];
        p.conns[i] = ConnParams{c.rank,
                                c.ip,
                                c.qpn,
                                c.root_qpn,
                                c.psn.has_value(),
                                c.psn.value_or(0),
                                c.root_psn.value_or(0),
                                c.result_addr.value_or(0),
                                c.result_rkey.value_or(0)};
    }
    return p;
}

bool S2sControl::prepare(control::ControlPlane& cp, const config::Config& next,
                         std::string& error) {
    std::lock_guard lock(mu_);
    plan_ = Plan{};
    const S2sConfig* s2s = s2s_of(next);
    const size_t workers = std::max<size_t>(cp.worker_count(), 1);
    auto kept = [&](uint32_t id) -> const Job* {
        auto it = jobs_.find(id);
        if (it == jobs_.end() || s2s == nullptr) {
            return nullptr;
        }
        for (const auto& j : s2s->jobs) {
            // drain is one-way: a job that may be forwarding with translated PSNs cannot go
            // back to absorbing with its old state (the endpoints have moved on).
            if (j.id == id && same_job(j, it->second.cfg) && (j.drain || !it->second.cfg.drain)) {
                return &it->second;
            }
        }
        return nullptr;
    };
    // Leaving jobs that are over (every connection ended, or idle past the timeout: the home
    // lcore set `left`) and not yet released by `release` are released now; the others stay
    // attached.
    for (const auto& l : leaving_) {
        if (l.state->left.load(std::memory_order_relaxed)) {
            plan_.states.detach.push_back({l.home, l.slot, job_state_id(l.id), l.state});
        } else {
            plan_.leaving.push_back(l);
        }
    }
    // A removed or replaced job leaves: its state stays attached in its slot, translating the
    // connections it knew until they end (released by a later change once `left`).
    for (const auto& [id, old] : jobs_) {
        if (kept(id) == nullptr) {
            plan_.leaving.push_back(Leaving{id, old.cfg, old.home, old.slot, old.state});
        }
    }
    plan_.leave_timeout_ns =
        uint64_t{s2s != nullptr ? s2s->leave_timeout_ms : kDefaultLeaveTimeoutMs} * 1000000;
    // A learning job on the root of a leaving job gets its home lcore: that lcore asks the
    // leaving job first whether a packet is of a connection it still translates.
    auto home_of = [&](const JobConfig& j) {
        for (const auto& l : plan_.leaving) {
            if (j.learn && l.cfg.root == j.root) {
                return l.home;
            }
        }
        return static_cast<uint16_t>(j.id % workers);
    };
    if (s2s != nullptr) {
        for (const auto& j : s2s->jobs) {
            Job job;
            job.cfg = j;
            if (const Job* k = kept(j.id); k != nullptr) {
                job.home = k->home;
                job.slot = k->slot;
                job.state = k->state;
            } else {
                job.home = home_of(j);
                try {
                    job.state = std::make_shared<JobState>(job_params(j));
                } catch (const std::exception& e) {
                    error = "rdma_s2s job " + std::to_string(j.id) + ": " + e.what();
                    return false;
                }
                job.slot = cp.acquire_state_slot_locked();
                if (job.slot == dp::kNoStateSlot) {
                    error = "rdma_s2s: no per-lcore state slot free for job " +
                            std::to_string(j.id);
                    return false;
                }
                plan_.states.acquired.push_back(job.slot);
                plan_.states.attach.push_back(
                    {job.home, job.slot, job_state_id(j.id), job.state.get()});
            }
            plan_.jobs.emplace(j.id, std::move(job));
        }
    }
    return true;
}

void S2sControl::abandon(control::ControlPlane& cp) {
    std::lock_guard lock(mu_);
    plan_.states.abandon(cp);
    plan_ = Plan{};
}

void S2sControl::commit(control::ControlPlane& cp) {
    std::lock_guard lock(mu_);
    plan_.states.commit(cp, kFeatureS2s);
    jobs_ = std::move(plan_.jobs);
    leaving_ = std::move(plan_.leaving);
    for (const auto& l : leaving_) {
        // From now on the home lcore treats the state as leaving (its idle clock starts); the
        // snapshot published next sends it only its own connections' packets.
        l.state->leave_timeout_ns.store(plan_.leave_timeout_ns, std::memory_order_relaxed);
        if (l.state->wants_successor.exchange(false, std::memory_order_acq_rel)) {
            // A rejoin asked for a fresh state, but the job left first: nobody takes the next
            // session, whose packets then pass untouched (the switch ACKed none of them).
            l.state->successor_abandoned.store(true, std::memory_order_relaxed);
        }
    }
    leave_timeout_ns_ = plan_.leave_timeout_ns;
    plan_ = Plan{};
}

namespace {

void add_counters(JobCounters& into, const JobCounters& from) {
#define INA_S2S_ADD(field, help) into.field += from.field;
    INA_S2S_JOB_COUNTERS(INA_S2S_ADD)
#undef INA_S2S_ADD
}

}  // namespace

bool S2sControl::release(control::ControlPlane& cp, size_t command_room) {
    std::lock_guard lock(mu_);
    control::FeatureStateChanges changes;
    std::vector<Leaving> still;
    for (const auto& l : leaving_) {
        if (l.state->wants_successor.exchange(false, std::memory_order_acq_rel)) {
            // A rejoin seen by a state already leaving (the snapshot that still named it as
            // the job's, just before the one marking it leaving): as in commit, abandoned.
            l.state->successor_abandoned.store(true, std::memory_order_relaxed);
        }
        // `left` is final: the home lcore passes the state's packets untouched from then on,
        // so its detach and the snapshot without it change nothing on the wire.
        if (changes.commands() < command_room && l.state->left.load(std::memory_order_relaxed)) {
            add_counters(released_[l.id], l.state->counters);
            changes.detach.push_back({l.home, l.slot, job_state_id(l.id), l.state});
        } else {
            still.push_back(l);
        }
    }
    leaving_ = std::move(still);
    attach_successors(cp, command_room, changes);
    if (changes.commands() == 0) {
        return false;  // nothing changed
    }
    changes.commit(cp, kFeatureS2s);
    return true;
}

void S2sControl::attach_successors(control::ControlPlane& cp, size_t command_room,
                                   control::FeatureStateChanges& changes) {
    for (auto& [id, j] : jobs_) {
        if (changes.commands() >= command_room ||
            !j.state->wants_successor.load(std::memory_order_acquire)) {
            continue;
        }
        std::shared_ptr<JobState> fresh;
        try {
            fresh = std::make_shared<JobState>(job_params(j.cfg));
        } catch (const std::exception&) {
            continue;  // as the running job's own params: cannot fail; asked again next tick
        }
        const uint16_t slot = cp.acquire_state_slot_locked();
        if (slot == dp::kNoStateSlot) {
            // Every slot taken: the old state holds the next session back (RNR NAKs, drops:
            // nothing ACKed) until a slot frees; asked again every tick.
            continue;
        }
        // Before the attach: the home lcore reads it at the fresh state's first packet or
        // tick, and the old state is not released before (it stays `superseded` without a
        // successor until then).
        fresh->predecessor = j.state.get();
        j.state->wants_successor.store(false, std::memory_order_relaxed);
        j.state->leave_timeout_ns.store(leave_timeout_ns_, std::memory_order_relaxed);
        leaving_.push_back(Leaving{id, j.cfg, j.home, j.slot, j.state});
        changes.attach.push_back({j.home, slot, job_state_id(id), fresh.get()});
        j.state = std::move(fresh);
        j.slot = slot;
    }
}

void S2sControl::decorate(dp::Snapshot& snap) {
    std::lock_guard lock(mu_);
    auto* view = static_cast<S2sView*>(snap.feature_views[kFeatureS2s].get());
    if (view == nullptr && !leaving_.empty()) {
        // Every job removed: the leaving ones still need UDP 4791 (shared with server-to-switch
        // jobs, after them). Only a full feature table refuses it: then they get no packets and
        // end by timeout.
        if (!snap.features.bind({dp::kIpProtoUdp, kFeatureS2s,
                                 static_cast<uint8_t>(dp::kScopeRouted | dp::kScopeBridged),
                                 ina::roce::kUdpPort, true})) {
            return;
        }
        auto made = std::make_shared<S2sView>();
        view = made.get();
        snap.feature_views[kFeatureS2s] = std::move(made);
    }
    if (view == nullptr) {
        return;
    }
    for (auto& cv : view->conns) {
        if (auto it = jobs_.find(cv.job_id); it != jobs_.end()) {
            cv.home = it->second.home;
            cv.slot = it->second.slot;
        }
    }
    for (auto& lv : view->learning) {
        if (auto it = jobs_.find(lv.job_id); it != jobs_.end()) {
            lv.home = it->second.home;
            lv.slot = it->second.slot;
        }
    }
    if (leaving_.empty()) {
        return;
    }
    for (const auto& l : leaving_) {
        append_job(*view, l.cfg, true, l.home, l.slot);
    }
    sort_view(*view);
}

void S2sControl::stats(const control::ControlPlane& cp, metrics::Stats& out) {
    std::vector<JobSample> jobs;
    uint64_t leaving = 0;
    {
        std::lock_guard lock(mu_);
        if (jobs_.empty() && leaving_.empty() && released_.empty()) {
            return;
        }
        // Plain reads of the home lcore's words: each is written by that lcore only.
        for (const auto& [id, j] : jobs_) {
            jobs.push_back(JobSample{id, j.state->table.in_use(), j.state->counters, false});
        }
        for (const auto& l : leaving_) {
            jobs.push_back(JobSample{l.id, l.state->table.in_use(), l.state->counters, true});
            leaving += l.state->left.load(std::memory_order_relaxed) ? 0 : 1;
        }
        for (const auto& [id, counters] : released_) {
            auto it = std::find_if(jobs.begin(), jobs.end(), [id = id](const JobSample& j) {
                return j.leaving && j.job_id == id;
            });
            if (it == jobs.end()) {
                jobs.push_back(JobSample{id, 0, counters, true});
            } else {
                add_counters(it->counters, counters);
            }
        }
    }
    LcoreTotals lcore{};
    for (size_t w = 0; w < cp.worker_count(); ++w) {
        const auto& c = cp.lcore_context(w).feature_counters[kFeatureS2s];
        for (size_t i = 0; i < lcore.size(); ++i) {
            lcore[i] += c[i];
        }
    }
    out.feature_text += render_metrics(jobs, lcore, leaving);
}

control::FeatureControl S2sControl::hooks() {
    control::FeatureControl fc;
    fc.self = this;
    fc.prepare = [](void* s, control::ControlPlane& cp, const config::Config& next,
                    std::string& error) {
        return static_cast<S2sControl*>(s)->prepare(cp, next, error);
    };
    fc.commands_needed = [](void* s) {
        auto* self = static_cast<S2sControl*>(s);
        std::lock_guard lock(self->mu_);
        return self->plan_.states.commands();
    };
    fc.commit = [](void* s, control::ControlPlane& cp) { static_cast<S2sControl*>(s)->commit(cp); };
    fc.abandon = [](void* s, control::ControlPlane& cp) {
        static_cast<S2sControl*>(s)->abandon(cp);
    };
    fc.decorate = [](void* s, dp::Snapshot& snap) { static_cast<S2sControl*>(s)->decorate(snap); };
    fc.release = [](void* s, control::ControlPlane& cp, size_t command_room) {
        return static_cast<S2sControl*>(s)->release(cp, command_room);
    };
    fc.stats = [](void* s, const control::ControlPlane& cp, metrics::Stats& out) {
        static_cast<S2sControl*>(s)->stats(cp, out);
    };
    return fc;
}

S2sControl& s2s_control() {
    static S2sControl instance;
    return instance;
}

}  // namespace ina::features::roce_s2s
