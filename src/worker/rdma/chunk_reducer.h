// SPDX-License-Identifier: Apache-2.0
// The root's per-chunk accumulation (docs/rdma.md, "Worker side (libibverbs)"). Pure code: the
// verbs loop hands it each WRITE-with-immediate's chunk index, contribution count and bytes.
//
// Invariants
//   - A chunk occupies accumulator slot chunk mod window from its first contribution until
//     take(); a contribution for another chunk in an occupied slot means a peer broke the window
//     rule and is refused (never added to the wrong chunk).
//   - Contributions are counted, not attributed to senders: the immediate's count says how many
//     workers' data a WRITE carries (1 from a worker, k from a switch that absorbed k), so the
//     chunk is complete when the counts sum to world, whichever connection delivered them. A
//     count that would exceed world, or any contribution for a chunk already complete, is
//     refused: RC delivers each WRITE once, so either one is a peer's error, not a retransmit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "worker/rdma/protocol.h"

namespace ina::rdma {

class ChunkReducer {
public:
    enum class Verdict { added, complete, refused };

    ChunkReducer(const Chunking& chunking, reduce::ElemType t, reduce::Op op, uint32_t world);
    ~ChunkReducer();
    ChunkReducer(const ChunkReducer&) = delete;
    ChunkReducer& operator=(const ChunkReducer&) = delete;

    // One WRITE's data for `chunk` carrying `contributions` workers' tensors. `data` must be
    // exactly length(chunk) bytes. refused leaves every accumulator as it was; *why says why.
    Verdict add(uint32_t chunk, uint32_t contributions, std::span<const std::byte> data,
                std::string* why);
    // The reduced chunk (length(chunk) bytes, wire format) into `out` and frees its slot; false
    // (nothing written) unless add() reported the chunk complete and it was not taken yet.
    bool take(uint32_t chunk, std::span<std::byte> out);

    uint32_t chunks_completed() const { return completed_; }
    bool complete(uint32_t chunk) const { return chunk < done_.size() && done_[chunk]; }
    bool all_complete() const { return completed_ == chunking_.chunks(); }

private:
    struct Slot {
        int64_t chunk = -1;  // occupying chunk, -1 when free
        uint32_t received = 0;
    };
    std::byte* acc(uint32_t slot) { return acc_.get() + size_t{slot} * acc_stride_; }

    Chunking chunking_;
    reduce::ElemType type_;
    reduce::Op op_;
    uint32_t world_;
    const reduce::TypeKernels& kernels_;
    size_t acc_stride_;
    struct AlignedDelete {
        void operator()(std::byte* p) const;
    };
    std::unique_ptr<std::byte, AlignedDelete> acc_;
    std::vector<Slot> slots_;
    std::vector<bool> done_;  // per chunk: complete (taken or waiting to be)
    uint32_t completed_ = 0;
};

// Where a resuming rank WRITEs again from (docs/rdma.md "A worker that reconnects (resume)",
// "A worker process that restarts"). Per rank the root knows two prefixes of chunks that hold
// the rank's contribution or are complete: one past its own WRITEs received (a worker writes in
// order on RC), and the chunk it last told the rank to resume at (everything below was in then:
// the worker's acknowledged prefix, raised by a switch for a restarted process). The second
// matters when the rank resumes again later in the round with less to say (a process that
// restarts after a reconnect says 0, and a switch's old state that absorbed its first chunks
// has left: nobody else remembers them) before any of its own WRITEs came.
class ResumePoints {
public:
    explicit ResumePoints(uint32_t world) : direct_next_(world, 0), resumed_at_(world, 0) {}

    // Rank `index`'s own WRITE (count 1) of `chunk` was received.
    void on_own_write(uint32_t index, uint32_t chunk);
    // The chunk rank `index` resumes at when it says `said`: the first chunk at or past every
    // prefix (`said`, its own WRITEs, its earlier resumes) that is not complete; remembered.
    uint32_t resume(uint32_t index, uint32_t said, const ChunkReducer& reducer,
                    uint32_t chunks);

private:
    std::vector<uint32_t> direct_next_;
    std::vector<uint32_t> resumed_at_;
};

}  // namespace ina::rdma
