// SPDX-License-Identifier: Apache-2.0
// The physical limit beside the aggregation rate (issue 15 item 3): one thread streams
// contributions of `payload` bytes into accumulators spread over a working set of `bytes`, in
// the order the chunk table visits its slots (slot = seq mod slots), with the same reduction
// kernels the switch uses (ina::reduce, best ISA), and reports what the memory system sustains:
//   copy  the first contribution of a chunk: the accumulator is loaded from the packet
//         (TypeKernels::load), i.e. written without being read;
//   add   every later contribution: acc = acc + packet (accumulate), i.e. read and written.
// The packets are a few hot templates (the switch's input sits in freshly received mbufs, in
// cache), so what varies with `bytes` is only where the accumulators live: L1/L2, LLC or DRAM.
// Output: one JSON line; `contributions_per_s` of a mix of 1 copy + (workers - 1) adds per
// chunk is the ceiling the aggregation's contributions/s is compared with.
// --cross-core-cpus A,B instead: the round trip of one cache line between two CPUs (a thread on
// each passes a counter back and forth), what every line a hand-off moves between lcores costs;
// on a VM it varies with where the hypervisor placed the two vCPUs.
#include <CLI/CLI.hpp>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "reduce/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace reduce = ina::reduce;

struct AlignedFree {
    void operator()(void* p) const { std::free(p); }
};

// Runs `pass` (one sweep over every slot) until `seconds` have passed; sweeps per second.
template <typename Pass>
double sweeps_per_second(double seconds, Pass&& pass) {
    pass();  // warm: page faults and first touch out of the timed part
    uint64_t sweeps = 0;
    const auto t0 = Clock::now();
    const auto until = t0 + std::chrono::duration<double>(seconds);
    auto now = t0;
    do {
        pass();
        ++sweeps;
        now = Clock::now();
    } while (now < until);
    return static_cast<double>(sweeps) / std::chrono::duration<double>(now - t0).count();
}

bool pin_to(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

// Median over `rounds` of the time per round trip of a line between CPUs a and b, in ns: the
// thread on a writes an odd count and waits for b's even answer.
double cross_core_round_trip_ns(int a, int b, int rounds) {
    struct alignas(64) Line {
        std::atomic<uint64_t> count{0};
    };
    Line line;
    constexpr uint64_t kTrips = 20000;
    std::vector<double> per_round;
    for (int r = 0; r < rounds; ++r) {
        line.count.store(0);
        std::atomic<bool> pinned{true};
        std::thread answer([&] {
            pinned = pin_to(b) && pinned;
            for (uint64_t i = 1; i < 2 * kTrips; i += 2) {
                while (line.count.load(std::memory_order_acquire) != i) {
                }
                line.count.store(i + 1, std::memory_order_release);
            }
        });
        if (!pin_to(a)) {
            pinned = false;
        }
        const auto t0 = Clock::now();
        for (uint64_t i = 1; i < 2 * kTrips; i += 2) {
            line.count.store(i, std::memory_order_release);
            while (line.count.load(std::memory_order_acquire) != i + 1) {
            }
        }
        const auto t1 = Clock::now();
        answer.join();
        if (!pinned) {
            return -1;
        }
        per_round.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kTrips);
    }
    std::sort(per_round.begin(), per_round.end());
    return per_round[per_round.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"membw_bench: accumulator copy/add rate over a working set (the aggregation's "
                 "memory ceiling)"};
    uint64_t bytes = 1 << 20;
    uint32_t payload = 1024;
    uint32_t workers = 8;
    std::string type = "fp32";
    double seconds = 1.0;
    app.add_option("--bytes", bytes, "working set: accumulator bytes (slots x payload)")
        ->check(CLI::Range(uint64_t{4096}, uint64_t{1} << 34));
    app.add_option("--payload", payload, "bytes per contribution")->check(CLI::Range(64, 65536));
    app.add_option("--workers", workers, "contributions per chunk (1 copy + workers-1 adds)")
        ->check(CLI::Range(2, 64));
    app.add_option("--type", type, "int32, fp32, fp16 or bf16");
    app.add_option("--seconds", seconds, "time per kernel");
    std::vector<int> cross_core;
    app.add_option("--cross-core-cpus", cross_core,
                   "two CPUs: measure a cache line's round trip between them instead")
        ->expected(2)
        ->delimiter(',');
    CLI11_PARSE(app, argc, argv);
    if (!cross_core.empty()) {
        const double ns = cross_core_round_trip_ns(cross_core[0], cross_core[1], 9);
        if (ns < 0) {
            std::fprintf(stderr, "membw_bench: cannot pin threads to CPUs %d and %d\n",
                         cross_core[0], cross_core[1]);
            return 1;
        }
        std::printf("{\"cpus\": [%d, %d], \"round_trip_ns\": %.1f}\n", cross_core[0],
                    cross_core[1], ns);
        return 0;
    }

    const auto et = type == "int32"  ? reduce::ElemType::int32
                    : type == "fp16" ? reduce::ElemType::fp16
                    : type == "bf16" ? reduce::ElemType::bf16
                                     : reduce::ElemType::fp32;
    const size_t elems = payload / reduce::elem_size(et);
    const size_t acc_slot = reduce::acc_bytes(et, elems);  // accumulators widen bf16/fp16
    const size_t slots = std::max<size_t>(1, bytes / payload);
    std::unique_ptr<uint8_t, AlignedFree> acc(
        static_cast<uint8_t*>(std::aligned_alloc(64, slots * acc_slot)));
    if (!acc) {
        std::fprintf(stderr, "membw_bench: cannot allocate %zu bytes\n", slots * acc_slot);
        return 1;
    }
    std::memset(acc.get(), 0, slots * acc_slot);
    constexpr size_t kTemplates = 8;
    std::vector<uint8_t> packets(kTemplates * payload);
    for (size_t i = 0; i < packets.size(); ++i) {
        packets[i] = static_cast<uint8_t>(i * 7 + 1);  // small, finite values of every type
    }
    const reduce::Kernels& k = reduce::kernels();
    const reduce::TypeKernels& tk = k[et];
    const reduce::AccumulateFn add = tk.accumulator(reduce::Op::sum);

    const double copy_sweeps = sweeps_per_second(seconds, [&] {
        for (size_t s = 0; s < slots; ++s) {
            tk.load(acc.get() + s * acc_slot, packets.data() + (s % kTemplates) * payload, elems);
        }
    });
    const double add_sweeps = sweeps_per_second(seconds, [&] {
        for (size_t s = 0; s < slots; ++s) {
            add(acc.get() + s * acc_slot, packets.data() + (s % kTemplates) * payload, elems);
        }
    });
    const double copy_per_s = copy_sweeps * static_cast<double>(slots);
    const double add_per_s = add_sweeps * static_cast<double>(slots);
    // A chunk: one copy and workers-1 adds; contributions/s of that mix.
    const double chunk_s = 1.0 / copy_per_s + (workers - 1) / add_per_s;
    const double mix_per_s = workers / chunk_s;
    std::printf("{\"bytes\": %llu, \"slots\": %zu, \"payload\": %u, \"type\": \"%s\", "
                "\"isa\": \"%s\", \"copy_per_s\": %.0f, \"add_per_s\": %.0f, "
                "\"copy_gbyte_s\": %.3f, \"add_gbyte_s\": %.3f, \"workers\": %u, "
                "\"contributions_per_s\": %.0f}\n",
                static_cast<unsigned long long>(slots * payload), slots, payload, type.c_str(),
                std::string(reduce::to_string(k.isa)).c_str(), copy_per_s, add_per_s,
                copy_per_s * static_cast<double>(acc_slot) / 1e9,
                add_per_s * 2.0 * static_cast<double>(acc_slot) / 1e9, workers, mix_per_s);
    return 0;
}
