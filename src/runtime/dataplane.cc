// SPDX-License-Identifier: Apache-2.0
#include "runtime/dataplane.h"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_malloc.h>

#include "pipeline/feature_stages.h"

namespace ina::runtime {

static_assert(std::atomic<const Published*>::is_always_lock_free);
static_assert(std::atomic<bool>::is_always_lock_free);
static_assert(alignof(pipeline::LcoreContext) % RTE_CACHE_LINE_SIZE == 0);

Dataplane::~Dataplane() {
    reclaim_all();
    owned_current_.reset();
    for (auto& w : workers) {
        if (w.ctx != nullptr) {
            rte_free(w.ctx->fdb_seen);
            w.ctx->~LcoreContext();
            rte_free(w.ctx);
        }
        rte_ring_free(w.events);
        rte_ring_free(w.commands);
        for (rte_ring* r : w.handoff_in) {
            rte_mbuf* m = nullptr;
            while (rte_ring_sc_dequeue(r, reinterpret_cast<void**>(&m)) == 0) {
                rte_pktmbuf_free(m);
            }
            rte_ring_free(r);
        }
        if (w.control_tx != nullptr) {
            rte_mbuf* m = nullptr;
            while (rte_ring_sc_dequeue(w.control_tx, reinterpret_cast<void**>(&m)) == 0) {
                rte_pktmbuf_free(m);
            }
            rte_ring_free(w.control_tx);
        }
    }
    rte_free(qsbr);
}

bool Dataplane::init(const std::vector<unsigned>& worker_lcores, uint32_t max_fdb_entries,
                     std::string& error) {
    const size_t qsbr_size = rte_rcu_qsbr_get_memsize(RTE_MAX_LCORE);
    qsbr = static_cast<rte_rcu_qsbr*>(rte_zmalloc("qsbr", qsbr_size, RTE_CACHE_LINE_SIZE));
    if (qsbr == nullptr || rte_rcu_qsbr_init(qsbr, RTE_MAX_LCORE) != 0) {
        error = "cannot allocate RCU QSBR state";
        return false;
    }
    if (worker_lcores.size() > pipeline::kMaxWorkers) {
        error = "at most " + std::to_string(pipeline::kMaxWorkers) + " worker lcores are supported";
        return false;
    }
    uint16_t tx_queue = 0;
    for (unsigned lcore : worker_lcores) {
        Worker w;
        w.lcore_id = lcore;
        w.sched = std::make_shared<SchedWatch>();
        void* mem = rte_zmalloc_socket("lcore_ctx", sizeof(pipeline::LcoreContext),
                                       RTE_CACHE_LINE_SIZE,
                                       static_cast<int>(rte_lcore_to_socket_id(lcore)));
        if (mem == nullptr) {
            error = "cannot allocate lcore context";
            return false;
        }
        w.ctx = new (mem) pipeline::LcoreContext();
        w.ctx->lcore_id = lcore;
        w.ctx->tx_queue = tx_queue++;
        w.ctx->tsc_hz = rte_get_tsc_hz();
        w.ctx->last_rx_tsc = rte_rdtsc();
        pipeline::init_timers(*w.ctx, w.ctx->last_rx_tsc);
        // Learn/neighbour events from one source are reported at most every 100 ms.
        w.ctx->event_interval_tsc = w.ctx->tsc_hz / 10;
        w.ctx->fdb_seen = static_cast<uint64_t*>(
            rte_zmalloc("fdb_seen", sizeof(uint64_t) * max_fdb_entries, RTE_CACHE_LINE_SIZE));
        w.ctx->fdb_seen_len = w.ctx->fdb_seen != nullptr ? max_fdb_entries : 0;
        const std::string suffix = std::to_string(lcore);
        w.events = rte_ring_create_elem(("ev" + suffix).c_str(), sizeof(dp::Event), 4096,
                                        SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
        w.control_tx = rte_ring_create(("ctx" + suffix).c_str(), 1024, SOCKET_ID_ANY,
                                       RING_F_SP_ENQ | RING_F_SC_DEQ);
        w.commands = rte_ring_create_elem(("cmd" + suffix).c_str(), sizeof(dp::Command), 256,
                                          SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
        w.ctx->events = w.events;
        w.ctx->pool = pool;
        workers.push_back(w);
        if (w.events == nullptr || w.control_tx == nullptr || w.commands == nullptr) {
            error = std::string("cannot create lcore rings: ") + rte_strerror(rte_errno);
            return false;
        }
        if (rte_rcu_qsbr_thread_register(qsbr, lcore) != 0) {
            error = "cannot register lcore " + suffix + " with RCU";
            return false;
        }
    }
    // INA chunk steering: one SPSC ring per ordered pair of workers.
    for (size_t from = 0; from < workers.size(); ++from) {
        auto& ctx = *workers[from].ctx;
        ctx.worker_index = static_cast<uint16_t>(from);
        ctx.n_workers = static_cast<uint16_t>(workers.size());
        for (size_t to = 0; to < workers.size(); ++to) {
            if (from == to) {
                continue;
            }
            const std::string name = "ho" + std::to_string(workers[from].lcore_id) + "_" +
                                     std::to_string(workers[to].lcore_id);
            rte_ring* r = rte_ring_create(name.c_str(), 1024, SOCKET_ID_ANY,
                                          RING_F_SP_ENQ | RING_F_SC_DEQ);
            if (r == nullptr) {
                error = std::string("cannot create hand-off ring: ") + rte_strerror(rte_errno);
                return false;
            }
            ctx.handoff[to] = r;
            workers[to].handoff_in.push_back(r);
        }
    }
    return true;
}

void Dataplane::publish(std::unique_ptr<Published> next) {
    const Published* raw = next.get();
    current_.store(raw, std::memory_order_release);
    generation_.store(raw->snapshot->generation, std::memory_order_release);
    if (owned_current_) {
        // Every worker that could still hold the old pointer will pass a quiescent state after
        // this token; only then is it freed.
        retired_.emplace_back(rte_rcu_qsbr_start(qsbr), std::move(owned_current_));
    }
    owned_current_ = std::move(next);
}

size_t Dataplane::reclaim() {
    while (!retired_.empty() && rte_rcu_qsbr_check(qsbr, retired_.front().first, false) == 1) {
        retired_.pop_front();
    }
    return retired_.size();
}

void Dataplane::reclaim_all() {
    while (!retired_.empty()) {
        rte_rcu_qsbr_check(qsbr, retired_.front().first, true);
        retired_.pop_front();
    }
}

}  // namespace ina::runtime
