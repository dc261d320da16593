// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/chunk_reducer.h"

#include <algorithm>
#include <new>

namespace ina::rdma {

void ChunkReducer::AlignedDelete::operator()(std::byte* p) const {
    ::operator delete(p, std::align_val_t{reduce::kAccAlign});
}

ChunkReducer::ChunkReducer(const Chunking& chunking, reduce::ElemType t, reduce::Op op,
                           uint32_t world)
    : chunking_(chunking),
      type_(t),
      op_(op),
      world_(world),
      kernels_(reduce::kernels()[t]),
      acc_stride_(reduce::acc_bytes(t, chunking.chunk_bytes / reduce::elem_size(t))),
      acc_(static_cast<std::byte*>(::operator new(acc_stride_ * chunking.window,
                                                  std::align_val_t{reduce::kAccAlign}))),
      slots_(chunking.window),
      done_(chunking.chunks(), false) {}

ChunkReducer::~ChunkReducer() = default;

ChunkReducer::Verdict ChunkReducer::add(uint32_t chunk, uint32_t contributions,
                                        std::span<const std::byte> data, std::string* why) {
    const auto refuse = [&](std::string text) {
        if (why) {
            *why = "chunk " + std::to_string(chunk) + ": " + std::move(text);
        }
        return Verdict::refused;
    };
    if (chunk >= chunking_.chunks()) {
        return refuse("beyond the tensor's " + std::to_string(chunking_.chunks()) + " chunks");
    }
    if (data.size() != chunking_.length(chunk)) {
        return refuse(std::to_string(data.size()) + " bytes written, the chunk has " +
                      std::to_string(chunking_.length(chunk)));
    }
    if (done_[chunk]) {
        return refuse("contribution after the chunk was complete");
    }
    Slot& s = slots_[chunking_.slot(chunk)];
    if (s.chunk >= 0 && s.chunk != chunk) {
        return refuse("its slot still holds chunk " + std::to_string(s.chunk) +
                      " (the sender broke the window)");
    }
    if (contributions == 0 || contributions > world_ - s.received) {
        return refuse(std::to_string(contributions) + " contributions on top of " +
                      std::to_string(s.received) + " of " + std::to_string(world_));
    }
    const size_t n = data.size() / reduce::elem_size(type_);
    std::byte* a = acc(chunking_.slot(chunk));
    if (s.chunk < 0) {
        kernels_.load(a, data.data(), n);
        s.chunk = chunk;
    } else {
        kernels_.accumulate(a, data.data(), n, op_);
    }
    s.received += contributions;
    if (s.received < world_) {
        return Verdict::added;
    }
    done_[chunk] = true;
    ++completed_;
    return Verdict::complete;
}

bool ChunkReducer::take(uint32_t chunk, std::span<std::byte> out) {
    if (chunk >= chunking_.chunks() || !done_[chunk]) {
        return false;
    }
    Slot& s = slots_[chunking_.slot(chunk)];
    if (s.chunk != chunk || out.size() < chunking_.length(chunk)) {
        return false;
    }
    const size_t n = chunking_.length(chunk) / reduce::elem_size(type_);
    kernels_.store(out.data(), acc(chunking_.slot(chunk)), n);
    s = Slot{};
    return true;
}

void ResumePoints::on_own_write(uint32_t index, uint32_t chunk) {
    direct_next_[index] = std::max(direct_next_[index], chunk + 1);
}

uint32_t ResumePoints::resume(uint32_t index, uint32_t said, const ChunkReducer& reducer,
                              uint32_t chunks) {
    uint32_t c = std::max({said, direct_next_[index], resumed_at_[index]});
    while (c < chunks && reducer.complete(c)) {
        ++c;
    }
    resumed_at_[index] = c;
    return c;
}

}  // namespace ina::rdma
