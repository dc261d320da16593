// SPDX-License-Identifier: Apache-2.0
// Whether the kernel switched a worker thread out, told apart from the worker's own work.
//
// A worker opens a perf "dummy" event on itself (counts nothing) and maps its user page: the
// kernel bumps the page's sequence word each time it schedules the thread in or out. The loop
// reads that word once per iteration, a plain load and no syscall, and compares it with the
// previous iteration's: a change means the kernel descheduled the thread during that iteration
// (preemption by another task, or a page fault that slept), so its time is the host's, not the
// switch's. (Checked against nonvoluntary_ctxt_switches: one move per preemption.)
// Not seen: interrupts that return to the thread, and a hypervisor descheduling the whole vCPU
// (steal time): those stay in the switch's figure.
//
// The control side reads the thread's scheduler counters from /proc when scraping
// (read_thread_sched), never on the packet path.
#pragma once

#include <atomic>
#include <cstdint>

namespace ina::runtime {

class SchedWatch {
public:
    SchedWatch() = default;
    ~SchedWatch();
    SchedWatch(const SchedWatch&) = delete;
    SchedWatch& operator=(const SchedWatch&) = delete;

    // On the worker thread, before its loop: records its thread id and opens the event. Without
    // perf_event_open (seccomp, perf_event_paranoid 3) the sequence never moves: every iteration
    // counts as the switch's, and detecting() says so.
    void attach_calling_thread();

    // The sequence word; compare two reads. Worker thread only.
    uint32_t sequence() const { return __atomic_load_n(sequence_, __ATOMIC_RELAXED); }

    // Any thread.
    int thread_id() const { return tid_.load(std::memory_order_acquire); }
    bool detecting() const { return detecting_.load(std::memory_order_acquire); }

private:
    static constexpr uint32_t kNeverMoves = 0;
    const uint32_t* sequence_ = &kNeverMoves;
    int fd_ = -1;
    void* page_ = nullptr;
    std::atomic<int> tid_{0};
    std::atomic<bool> detecting_{false};
};

// A thread's scheduler counters (/proc/self/task/<tid>/status and schedstat).
struct ThreadSched {
    bool found = false;           // the thread exists and its files were read
    bool detecting = false;       // SchedWatch::detecting() of its worker
    uint64_t voluntary = 0;       // context switches it asked for (sleeps, blocking calls)
    uint64_t involuntary = 0;     // preemptions
    uint64_t run_ns = 0;          // time on a CPU
    uint64_t run_delay_ns = 0;    // time runnable but waiting for a CPU
};

// Reads them for `watch`'s thread. Control side, at scrape time.
ThreadSched read_thread_sched(const SchedWatch& watch);

}  // namespace ina::runtime
