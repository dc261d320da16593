// SPDX-License-Identifier: Apache-2.0
// What the control plane and the worker lcores share: the published snapshot pointer, the stop
// flag, the RCU (QSBR) variable and each worker's context and rings. Workers only read the
// shared fields; each worker writes only its own LcoreContext.
#pragma once

#include <rte_mempool.h>
#include <rte_rcu_qsbr.h>
#include <rte_ring.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dataplane/snapshot.h"
#include "pipeline/context.h"
#include "runtime/sched_watch.h"

namespace ina::runtime {

// Settings a worker re-reads from every snapshot, so a reload changes them live.
struct LoopSettings {
    uint16_t burst_size = 32;
    uint64_t drain_tsc = 0;
    uint32_t idle_sleep_us = 0;
    uint32_t idle_loops_before_sleep = 256;
};

// A snapshot plus the loop settings that came with it; immutable once published.
struct Published {
    std::unique_ptr<dp::Snapshot> snapshot;
    LoopSettings loop;
};

struct Worker {
    unsigned lcore_id = 0;
    pipeline::LcoreContext* ctx = nullptr;  // rte_zmalloc'd, cache aligned
    rte_ring* events = nullptr;             // worker -> control, SPSC, dp::Event elements
    rte_ring* control_tx = nullptr;         // control -> worker, SPSC, mbufs to transmit
    rte_ring* commands = nullptr;           // control -> worker, SPSC, dp::Command elements
    std::vector<rte_ring*> handoff_in;      // from each other worker, SPSC, mbufs (INA chunks)
    std::shared_ptr<SchedWatch> sched;      // the worker thread's; attached by the worker
};

class Dataplane {
public:
    Dataplane() = default;
    ~Dataplane();
    Dataplane(const Dataplane&) = delete;
    Dataplane& operator=(const Dataplane&) = delete;

    // Allocates QSBR state and one context with rings per worker lcore.
    bool init(const std::vector<unsigned>& worker_lcores, uint32_t max_fdb_entries,
              std::string& error);

    // Swaps in `next` and retires the previous one until every worker has passed a quiescent
    // state. Control-plane thread only.
    void publish(std::unique_ptr<Published> next);
    // Frees retired snapshots whose grace period has ended. Returns how many remain retired.
    size_t reclaim();
    // Blocks until every retired snapshot is freed (shutdown, or a test that needs it).
    void reclaim_all();

    // For worker lcores (QSBR readers) and the control-plane thread that publishes; any other
    // thread must not dereference it (it may be freed under it).
    const Published* current() const { return current_.load(std::memory_order_acquire); }
    // The published snapshot's generation, safe from any thread (API, telemetry): kept apart
    // from the snapshot, so reading it never touches memory a reload may free.
    uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
    // A change applied in place on the published snapshot (a route): the generation moves
    // without a new snapshot. Control-plane thread only; `g` above every earlier one.
    void advance_generation(uint64_t g) { generation_.store(g, std::memory_order_release); }

    std::vector<Worker> workers;
    rte_rcu_qsbr* qsbr = nullptr;
    std::atomic<bool> stop{false};
    rte_mempool* pool = nullptr;

private:
    std::atomic<const Published*> current_{nullptr};
    std::atomic<uint64_t> generation_{0};
    std::unique_ptr<Published> owned_current_;
    std::deque<std::pair<uint64_t, std::unique_ptr<Published>>> retired_;
};

// The worker lcore's run-to-completion loop. `arg` is the Dataplane; the lcore finds its own
// Worker entry by rte_lcore_id().
int worker_main(void* arg);

}  // namespace ina::runtime
