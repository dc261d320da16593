// SPDX-License-Identifier: Apache-2.0
// libFuzzer, stateful: the input is a schedule for workers of an INA job around a chunk table
// (plus a second job's table beside it). Bytes pick the job's shape (role, window, workers'
// windows, lanes) and then, one by one, what happens next: a worker sends its next chunk (within
// its window), a worker retransmits, the network delivers, duplicates or loses a data packet or
// a result, the clock jumps and the table expires idle entries. Checked after every step:
//   safety  - a result (completed, resend_result, store_result) is always the exact sum of
//             every worker's contribution: nothing added twice, nothing missing, no result
//             before all contributors; a chunk completes at most once; a chunk
//             is never split between the table and the fallback path; the other job's table is
//             never touched.
//   liveness - after the schedule, loss stops: workers retransmit whatever lacks a result and
//             the network delivers everything, and within a bounded number of rounds every chunk
//             any worker sent has its result at every worker. The one documented exception: a
//             complete chunk freed by expire() (idle past slot_timeout: a dead worker) before a
//             worker got its result, at a table without a result cache; such a run only checks
//             safety.
//             A root may get a result cache (issue 9, defect 5): then workers run beyond the
//             window (result_cache 2: every worker up to 2 W; 1: worker 1 up to 2 W, the others
//             within W; or, "far", worker 1 up to 8 W and the others within W), expiries
//             included, and a released chunk is never stale for a worker that lacks its result
//             (it is answered from the cache, cached_result, with the exact sum). The cache's
//             bound (docs/protocol.md, window rules) is the one exception: worker 1, alone
//             beyond W, keeping more than (result_cache + 1) W in flight, or more than
//             result_cache x W once a complete chunk expired; if it lost a result such a run
//             only checks safety.
//             At a root a chunk that never completed is never stale (whatever the windows).
//             "Lowest missing" (issue 9, item 5): every data packet carries its sender's lowest
//             missing result (proto::kFlagLowestMissing), result_cache 2, and the windows are
//             unbounded by the cache: worker 1 up to 8 W (far) or every worker up to 8 W. Then
//             there is no exception: a released chunk is never stale for a sender that lacks its
//             result, expiries included, and every chunk completes.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "ina/chunk_table.h"

namespace {

namespace reduce = ina::reduce;
namespace wire = ina::wire;
using ina::ChunkTable;
using ina::Role;
using ina::Verdict;

constexpr unsigned kMaxWorkers = 6;
constexpr uint32_t kMaxChunks = 48;
constexpr unsigned kDrainRounds = 64;

[[noreturn]] void fail(const char* what, uint32_t k) {
    std::fprintf(stderr, "chunk table invariant broken: %s (chunk %u)\n", what, k);
    std::abort();
}

class Reader {
public:
    Reader(const uint8_t* d, size_t n) : d_(d), n_(n) {}
    bool empty() const { return at_ >= n_; }
    uint8_t byte() { return at_ < n_ ? d_[at_++] : 0; }

private:
    const uint8_t* d_;
    size_t n_;
    size_t at_ = 0;
};

int32_t element(unsigned worker, uint32_t seq, uint32_t i) {
    uint32_t x = (worker + 1) * 0x9E3779B1u ^ seq * 0x85EBCA77u ^ (i + 1) * 0xC2B2AE3Du;
    x ^= x >> 15;
    return static_cast<int32_t>(x * 0x2C1B3C6Du);
}

struct Packet {
    bool result = false;
    unsigned worker = 0;  // data: sender; result: receiver
    uint32_t k = 0;
    uint8_t flags = 0;
    uint32_t low = 0;  // data with kFlagLowestMissing: the sender's lowest missing chunk (seq)
};

class Harness {
public:
    explicit Harness(Reader& in) {
        const uint8_t shape = in.byte();
        role_ = (shape & 1) ? Role::root : Role::aggregator;
        window_ = 1u << ((shape >> 1) & 3);                    // 1 .. 8
        const uint32_t ratio = role_ == Role::root ? 1 : 1u << ((shape >> 3) & 1);
        // At a root, shape bit 3 turns the result cache on and lets workers beyond the window.
        const uint8_t cache_byte = role_ == Role::root && (shape & 8) ? in.byte() : 0;
        lowest_ = role_ == Role::root && (shape & 8) && (cache_byte & 8) != 0;
        const uint32_t cache =
            lowest_ ? 2 : role_ == Role::root && (shape & 8) ? 1 + cache_byte % 2 : 0;
        far_ = cache != 0 && (cache_byte & 4) != 0;  // worker 1 up to 8 W, the others within W
        workers_ = 2 + (shape >> 4) % (kMaxWorkers - 1);       // 2 .. 6
        lanes_ = static_cast<uint16_t>(1 + (in.byte() % 3));
        lane_ = static_cast<uint16_t>(in.byte() % lanes_);
        chunks_ = 4 + in.byte() % (kMaxChunks - 3);
        seq0_ = (in.byte() & 1) ? 0xFFFFFFFFu - 7 : 0;         // sometimes across the wrap
        ina::JobParams p;
        p.job_id = 1;
        std::vector<wire::BfrId> ids;
        for (unsigned w = 0; w < workers_; ++w) ids.push_back(static_cast<wire::BfrId>(w + 1));
        p.abm = *wire::BitString::from_bfr_ids(64, 0, ids);
        p.op = reduce::Op::sum;
        p.elem_type = reduce::ElemType::int32;
        p.max_elems = 8;
        p.window = window_;
        p.worker_window = window_ * ratio;
        p.role = role_;
        p.result_cache = cache;
        p.idle_timeout = 1000;
        p.lanes = lanes_;
        p.lane = lane_;
        table_ = std::make_unique<ChunkTable>(p);
        ina::JobParams q = p;
        q.job_id = 2;
        q.lanes = 1;
        q.lane = 0;
        other_ = std::make_unique<ChunkTable>(q);
        const uint32_t proof = window_ * ratio;
        for (unsigned w = 0; w < workers_; ++w) {
            // Honest (never beyond worker_window), unless the root caches results: then within
            // the cache's bound (docs/protocol.md, window rules).
            const bool beyond = far_ ? w == 0 : cache == 2 || (cache == 1 && w == 0);
            const uint32_t reach =
                (far_ || lowest_) && beyond ? 8 * proof : beyond ? 2 * proof : proof;
            worker_[w].window = 1 + in.byte() % reach;
        }
        cache_ = cache;
        proof_ = proof;
        one_violator_ = far_ || cache == 1;
        // Only this lane's chunks exist here (the pipeline hands the others to their lanes).
        for (uint32_t k = 0; k < chunks_; ++k) {
            if (table_->lane_of(seq(k)) == lane_) owned_.push_back(k);
        }
        chunk_.resize(owned_.size());
        // The other job's table holds one chunk throughout: nothing done to job 1 may move it.
        const std::vector<int32_t> one = {1};
        other_->on_data(other_->params().abm.data(), 0, 1, one.data(), 0, 0);
    }

    bool trivial() const { return owned_.empty(); }

    void step(uint8_t op, uint8_t arg) {
        switch (op % 8) {
        case 0:
        case 1: send_next(arg % workers_); break;
        case 2: retransmit(arg % workers_); break;
        case 3:
        case 4: deliver(arg, false, false); break;
        case 5: deliver(arg, true, false); break;   // duplicated: stays in the network
        case 6: deliver(arg, false, true); break;   // lost
        case 7: expire(arg); break;
        }
        check_other();
    }

    void expire(uint8_t arg) {
        now_ += (arg & 0x80) ? 1001 : 1;
        std::vector<ChunkTable::State> was(owned_.size());
        for (size_t i = 0; i < owned_.size(); ++i) was[i] = table_->state_of(seq(owned_[i]));
        table_->expire(now_, 1 + arg % 8);
        for (size_t i = 0; i < owned_.size(); ++i) {
            if (table_->state_of(seq(owned_[i])) != ChunkTable::State::empty) continue;
            if (was[i] != ChunkTable::State::complete) continue;
            complete_expired_ = true;
            // A root's result cache keeps an expired chunk's result (within its bound, below);
            // elsewhere one expired before every worker got it is lost for good.
            if (chunk_[i].results != all() && cache_ == 0) {
                chunk_[i].expired_unheld = true;
                lost_to_expiry_ = true;
            }
        }
    }

    void drain() {
        if (lost_to_expiry_ || (violator_lost_result_ && beyond_cache_bound(0))) return;
        for (unsigned round = 0; round < kDrainRounds && !done(); ++round) {
            for (unsigned w = 0; w < workers_; ++w) {
                while (can_send(w)) send_next(w);
                retransmit(w);
            }
            while (!net_.empty()) deliver(0, false, false);
        }
        if (!done()) {
            uint32_t k = 0;
            while (k < owned_.size() && chunk_[k].results == all()) ++k;
            fail("liveness: a chunk never completes after loss stopped", owned_[k]);
        }
        check_other();
    }

private:
    struct Worker {
        uint32_t window = 1;
        uint32_t next = 0;  // index into owned_ of the next first send
        uint32_t low = 0;   // lowest owned chunk without a result
        std::array<bool, kMaxChunks> has{};
    };
    struct Chunk {
        unsigned results = 0;         // workers holding the result (bit per worker)
        unsigned completions = 0;     // at the table
        bool table = false, fallback = false;
        unsigned fallback_bits = 0;   // model root: contributions reduced from fallback
        bool fallback_done = false;
        bool expired_unheld = false;  // freed by expire() complete, some worker without it
    };

    uint32_t seq(uint32_t k) const { return seq0_ + k; }
    // docs/protocol.md, root result cache: a worker lacking chunk x with k W in flight (the others
    // within W) sees at most k - 1 chunks of x's index at or above x released, one more once
    // complete chunks expire; each index caches its result_cache highest. Only worker 1 (the one
    // beyond W, with result_cache 1 or far) may run beyond that: its late packets may then be
    // stale while it lacks a result (still on its way, or lost), and a lost one wedges it.
    // (Every worker within 2 W with result_cache 2 stays within the bound, expiries included.)
    // With the lowest missing result there is no such bound (the root refuses what lies 2 W or
    // more beyond a sender's lowest missing result, whatever window it keeps).
    bool beyond_cache_bound(unsigned worker) const {
        if (lowest_ || !one_violator_ || worker != 0) return false;
        const uint32_t k = (worker_[0].window + proof_ - 1) / proof_;
        return k > cache_ + 1 - (complete_expired_ ? 1 : 0);
    }
    unsigned all() const { return (1u << workers_) - 1; }
    bool done() const {
        for (unsigned w = 0; w < workers_; ++w) {
            if (worker_[w].low < owned_.size()) return false;
        }
        return true;
    }
    // Windows are counted in chunks of the job (all lanes): a worker holds results of every
    // chunk below low, so it may send chunk c only while c < low's chunk + window.
    bool can_send(unsigned w) const {
        const Worker& x = worker_[w];
        if (x.next >= owned_.size()) return false;
        const uint32_t low_chunk = x.low < owned_.size() ? owned_[x.low] : chunks_;
        return owned_[x.next] < low_chunk + x.window;
    }
    void send_next(unsigned w) {
        if (!can_send(w)) return;
        net_.push_back(data_packet(w, worker_[w].next++, 0));
    }
    void retransmit(unsigned w) {
        Worker& x = worker_[w];
        for (uint32_t i = x.low; i < x.next; ++i) {
            if (!x.has[i]) net_.push_back(data_packet(w, i, ina::proto::kFlagRetransmit));
        }
    }
    // A data packet of worker w for owned chunk i, stating (lowest_) what w holds as it leaves.
    Packet data_packet(unsigned w, uint32_t i, uint8_t flags) const {
        Packet p{false, w, i, flags, 0};
        if (lowest_) {
            const Worker& x = worker_[w];
            p.flags |= ina::proto::kFlagLowestMissing;
            p.low = seq(x.low < owned_.size() ? owned_[x.low] : chunks_);
        }
        return p;
    }
    void send_results(unsigned mask, uint32_t i) {
        for (unsigned w = 0; w < workers_; ++w) {
            if ((mask >> w) & 1u) net_.push_back({true, w, i, 0});
        }
    }
    void deliver(uint8_t pick, bool keep, bool lose) {
        if (net_.empty()) return;
        const size_t at = pick % net_.size();
        const Packet p = net_[at];
        if (!keep) {
            net_[at] = net_.back();
            net_.pop_back();
        }
        if (lose) {
            if (p.result && p.worker == 0) violator_lost_result_ = true;
            return;
        }
        ++now_;
        if (p.result) {
            Worker& x = worker_[p.worker];
            x.has[p.k] = true;
            chunk_[p.k].results |= 1u << p.worker;
            while (x.low < owned_.size() && x.has[x.low]) ++x.low;
            return;
        }
        at_table(p);
    }

    std::vector<int32_t> payload(unsigned w, uint32_t k) const {
        std::vector<int32_t> v(count(k));
        for (uint32_t i = 0; i < v.size(); ++i) v[i] = element(w, seq(k), i);
        return v;
    }
    uint32_t count(uint32_t k) const { return 1 + k % 8; }
    void check_sum(uint32_t i) const {
        const uint32_t k = owned_[i];
        std::vector<int32_t> got(count(k));
        if (table_->store_result(seq(k), got.data()) != got.size()) fail("no result to read", k);
        for (uint32_t e = 0; e < got.size(); ++e) {
            uint32_t sum = 0;
            for (unsigned w = 0; w < workers_; ++w) {
                sum += static_cast<uint32_t>(element(w, seq(k), e));
            }
            if (static_cast<uint32_t>(got[e]) != sum) {
                fail("result is not the sum of every worker once", k);
            }
        }
    }

    void at_table(const Packet& p) {
        const uint32_t k = owned_[p.k];
        const std::vector<int32_t> data = payload(p.worker, k);
        const std::vector<wire::BfrId> sender = {static_cast<wire::BfrId>(p.worker + 1)};
        const wire::BitString bits = *wire::BitString::from_bfr_ids(64, 0, sender);
        const Verdict v =
            table_->on_data(bits.data(), seq(k), count(k), data.data(), p.flags, now_,
                            ina::agg::Encoding::native, p.low);
        Chunk& c = chunk_[p.k];
        switch (v) {
        case Verdict::absorbed:
        case Verdict::duplicate:
            c.table = true;
            break;
        case Verdict::completed:
            c.table = true;
            if (++c.completions > 1) fail("completed twice", k);
            check_sum(p.k);
            send_results(all(), p.k);
            break;
        case Verdict::resend_result:
        case Verdict::cached_result:  // a released chunk, answered from the root's cache
            c.table = true;
            if (c.completions == 0) fail("a result of a chunk that never completed", k);
            check_sum(p.k);
            send_results(1u << p.worker, p.k);
            break;
        case Verdict::stale:
            if (role_ == Role::root && c.completions == 0) {
                // Released without ever completing: nobody can get its result (the floor rose
                // past a pending chunk).
                fail("stale for a chunk that never completed", k);
            }
            if ((c.results & (1u << p.worker)) == 0 && !c.expired_unheld &&
                !beyond_cache_bound(p.worker)) {
                // A released chunk whose sender lacks the result would wedge that worker.
                fail("stale for a sender without the result", k);
            }
            break;
        case Verdict::no_slot:
            break;  // the sender's retransmission comes back
        case Verdict::fallback: {
            c.fallback = true;
            if (!c.fallback_done) {
                if (c.fallback_bits & (1u << p.worker)) break;  // model root: a duplicate
                c.fallback_bits |= 1u << p.worker;
                if (c.fallback_bits == all()) {
                    c.fallback_done = true;
                    send_results(all(), p.k);
                }
            } else {
                send_results(1u << p.worker, p.k);
            }
            break;
        }
        default:
            fail("unexpected verdict for a well-formed contribution", k);
        }
        if (c.completions == 0) {
            int32_t probe[8];
            if (table_->store_result(seq(k), probe) != 0) {
                fail("a result before every contributor", k);
            }
        }
        if (c.table && c.fallback && c.completions > 0) {
            fail("a chunk split between table and fallback", k);
        }
    }

    void check_other() const {
        if (other_->slots_in_use() != 1 || other_->state_of(0) != ChunkTable::State::complete) {
            fail("job 1 touched job 2's table", 0);
        }
    }

    Role role_ = Role::root;
    uint32_t window_ = 1;
    unsigned workers_ = 2;
    uint16_t lanes_ = 1, lane_ = 0;
    uint32_t chunks_ = 0, seq0_ = 0;
    uint64_t now_ = 0;
    bool lost_to_expiry_ = false;
    uint32_t cache_ = 0, proof_ = 1;  // the root's result_cache; the workers' window (D)
    bool far_ = false;               // worker 1 may run up to 8 D (the others within D)
    bool lowest_ = false;            // data carries the lowest missing result (cache 2, any lead)
    bool one_violator_ = false;      // only worker 1 runs beyond D (result_cache 1, or far)
    bool violator_lost_result_ = false;   // a result to worker 1 was lost
    bool complete_expired_ = false;  // expire() freed a complete chunk
    std::unique_ptr<ChunkTable> table_, other_;
    std::array<Worker, kMaxWorkers> worker_{};
    std::vector<uint32_t> owned_;  // this lane's chunks, in order
    std::vector<Chunk> chunk_;     // indexed like owned_
    std::vector<Packet> net_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in(data, size);
    Harness h(in);
    if (h.trivial()) return 0;
    for (unsigned steps = 0; !in.empty() && steps < 4096; ++steps) {
        const uint8_t op = in.byte();
        h.step(op, in.byte());
    }
    h.drain();
    return 0;
}
