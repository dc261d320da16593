// SPDX-License-Identifier: Apache-2.0
// The protocol-free aggregation core: a fixed pool of slots, each accumulating one unit of
// reduction (an INA chunk, a RoCE message) from a set of contributors until every contributor
// of the full set has been added exactly once, then keeping the result until its owner releases
// the slot. It knows nothing of sequence numbers, windows, packets or acknowledgements: those
// are a lifecycle policy's (ina::ChunkTable: window release proofs, sticky fallback, expiry;
// agg::AckTable: release on every receiver's acknowledgement). A policy decides which slot a
// unit lives in and when it leaves; the core guarantees, whatever the policy does:
//   - exactly once: a contribution whose contributors were all added already is a duplicate, one
//     with some added and some not is an overlap (a sum cannot be taken back), neither touches
//     the accumulator;
//   - no early result: a slot is complete exactly when its added contributors equal the full
//     set, and only a complete slot yields a result;
//   - a contribution naming a contributor outside the full set, or no contributor, is refused.
// Contributor sets are the wire BitString format (wire/bitstring.h: BSL bytes in wire order),
// the full set a wire::BitString; the per-slot sets live in one block allocated up front.
//
// Hot path: every member but the constructor is noexcept and allocation free; per-lcore (not
// thread safe, no locks): each lcore owns its cores. Accumulators are 64-byte aligned (the
// reduce kernels' contract), one cache line apart at least, so slots never share a line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "reduce/fixed_point.h"
#include "reduce/reduce.h"
#include "wire/bitstring.h"

namespace ina::agg {

struct CoreParams {
    wire::BitString contributors;  // the full set: a slot completes when all of it was added
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    uint32_t max_elems = 0;  // per unit: 1 .. 65535
    uint32_t slots = 0;      // 1 .. kMaxSlots
    // Reproducible float sum (reduce/fixed_point.h): every slot accumulates int64 fixed point
    // with `fraction_bits` fractional bits, so its result does not depend on the order or
    // grouping of the contributions. Needs a float elem_type and op sum.
    bool deterministic = false;
    uint8_t fraction_bits = 0;  // 0 .. reduce::kMaxFractionBits
};

// How a contribution's (or a result's) elements are encoded: the core's element type, or (a
// deterministic core only) int64 fixed point with the core's fraction_bits — a partial sum
// from, or for, another switch.
enum class Encoding : uint8_t { native, fixed_point };

inline constexpr uint32_t kMaxSlots = 1u << 22;

// Why CoreParams are unusable, or "" when they are valid.
std::string_view validate(const CoreParams& p);

enum class SlotState : uint8_t { empty, aggregating, complete };

// What add() did. Only `added` and `completed` touched the slot.
enum class AddResult : uint8_t {
    added,           // accumulated; the slot still waits for other contributors
    completed,       // accumulated; every contributor is in: the result is ready
    duplicate,       // every contributor named was added already
    overlap,         // some were, some were not: nothing added (the sender must retry alone)
    count_mismatch,  // element count differs from the slot's first contribution
    bad_count,       // element count 0 or above max_elems
    outside,         // names a contributor outside the full set, or none
    complete,        // the slot is complete already: nothing added (a late copy)
};

class AggCore {
public:
    // Allocates every slot. Throws std::invalid_argument if validate(p) is not "" (control
    // plane only). `k` chooses the kernel table (tests force an ISA); results are bit-identical.
    explicit AggCore(const CoreParams& p);
    AggCore(const CoreParams& p, const reduce::Kernels& k);
    ~AggCore();
    AggCore(const AggCore&) = delete;
    AggCore& operator=(const AggCore&) = delete;

    // Adds one contribution to slot `s` (< slots()): `from` the contributors it carries
    // (set_bytes() long, wire order), `payload` `count` elements in wire format. An empty slot
    // starts aggregating with it (its count fixes the slot's count). `enc` fixed_point is
    // honoured by a deterministic core only (elsewhere the payload is read as native).
    AddResult add(uint32_t s, const uint8_t* from, uint32_t count, const void* payload,
                  Encoding enc = Encoding::native) noexcept;
    // add() for a caller that has checked what add() checks first: `from` names at least one
    // contributor and none outside the full set, and 1 <= count <= max_elems (a policy that
    // tests them before its own bookkeeping, ina::ChunkTable). So it never returns outside or
    // bad_count. kOneWord: the set is one 64-bit word (set_bytes() == 8, BSL 64). Inline: the
    // policy's per-contribution path makes one call, the kernel's.
    template <bool kOneWord>
    AddResult add_checked(uint32_t s, const uint8_t* from, uint32_t count, const void* payload,
                          Encoding enc = Encoding::native) noexcept;

    // Writes slot s's result (narrowed to the wire type, or, with `enc` fixed_point on a
    // deterministic core, the exact int64 sum) to `out` and returns its element count; 0
    // (nothing written) unless the slot is complete. `out` holds count() elements.
    // With `sum`, *sum gets the one's-complement sum (RFC 1071, folded, not inverted) of the
    // bytes written, for a datagram's checksum: native results sum in the store kernel's own
    // pass (reduce store_sum), fixed-point ones in a pass after it.
    uint32_t store_result(uint32_t s, void* out, Encoding enc = Encoding::native,
                          uint32_t* sum = nullptr) const noexcept;

    // Counts `who` (set_bytes() long) as added to the aggregating slot s without adding data:
    // contributors that left the unit for good (a policy's decision: agg::AckTable::exclude).
    // True when the slot is complete afterwards (then its result is the sum of the others').
    // Nothing changes unless the slot is aggregating.
    bool mark_added(uint32_t s, const uint8_t* who) noexcept;
    // store_result() of elements [first, first + n) of slot s only (a deterministic core
    // dequantizes just those, or with `enc` fixed_point writes their exact int64 sums): one
    // packet of a result sent in several. Returns n, or 0 (nothing written) unless the slot is
    // complete and the range inside its count. reduce.h's kernels want the accumulator 64-byte
    // aligned: `first` times the accumulator element is then a multiple of 64 (a PMTU
    // segment's start always is).
    uint32_t store_range(uint32_t s, uint32_t first, uint32_t n, void* out,
                         Encoding enc = Encoding::native) const noexcept;

    // Empties slot s (its result and contributors are forgotten). The policy's decision.
    void release(uint32_t s) noexcept;
    // Empties every slot (control plane).
    void reset() noexcept;

    SlotState state(uint32_t s) const noexcept { return state_[s]; }
    uint32_t count(uint32_t s) const noexcept { return count_[s]; }
    // The contributors added to slot s so far (set_bytes() long).
    const uint8_t* added(uint32_t s) const noexcept { return sets_.data() + s * set_bytes_; }
    const uint8_t* full_set() const noexcept { return params_.contributors.data(); }
    size_t set_bytes() const noexcept { return set_bytes_; }
    uint32_t slots() const noexcept { return params_.slots; }
    size_t in_use() const noexcept { return in_use_; }
    const CoreParams& params() const noexcept { return params_; }
    // Deterministic cores: elements saturated / underflowed / NaN when quantized (never silent).
    const reduce::FixedStats& fixed_stats() const noexcept { return fixed_stats_; }

private:
    // add() over a set of one 64-bit word (kOneWord) or of set_bytes_ / 8 words.
    template <bool kOneWord>
    AddResult add_words(uint32_t s, const uint8_t* from, uint32_t count, const void* payload,
                        Encoding enc) noexcept;
    // The accumulate step of add() for a contribution (first: load, else add).
    void absorb(uint32_t s, const void* payload, uint32_t count, Encoding enc,
                bool first) noexcept {
        if (!params_.deterministic) [[likely]] {
            (first ? load_ : accumulate_)(acc(s), payload, count);
            return;
        }
        absorb_fixed(s, payload, count, enc, first);
    }
    void absorb_fixed(uint32_t s, const void* payload, uint32_t count, Encoding enc,
                      bool first) noexcept;
    void* acc(uint32_t s) const noexcept { return acc_base_ + size_t{s} * acc_bytes_; }

    CoreParams params_;
    size_t set_bytes_ = 0;
    size_t acc_bytes_ = 0;
    size_t acc_elem_ = 0;  // bytes of one accumulator element (store_range's offset)
    reduce::LoadFn load_ = nullptr;
    reduce::AccumulateFn accumulate_ = nullptr;
    reduce::StoreFn store_ = nullptr;
    reduce::StoreSumFn store_sum_ = nullptr;
    reduce::FixedKernels fixed_{};  // deterministic cores: quantize / dequantize
    reduce::FixedStats fixed_stats_;
    std::vector<SlotState> state_;
    std::vector<uint32_t> count_;
    std::vector<uint8_t> sets_;             // per slot: the contributors added
    std::unique_ptr<std::byte[]> acc_raw_;  // accumulators, plus slack for 64-byte alignment
    std::byte* acc_base_ = nullptr;
    size_t in_use_ = 0;
};

// The set tests of add() done a 64-bit word at a time, each a fold over the words in one pass
// (the order of the bytes inside a word does not matter for AND/OR/compare, see
// wire/bitstring.h). kOneWord: the set is one word, so every loop runs once and unrolls away.
template <bool kOneWord>
[[gnu::always_inline]] inline AddResult AggCore::add_checked(uint32_t s, const uint8_t* from, uint32_t count,
                                      const void* payload, Encoding enc) noexcept {
    using wire::detail::load64;
    using wire::detail::store64;
    const size_t words = kOneWord ? 1 : set_bytes_ / 8;
    const uint8_t* full = full_set();
    uint8_t* set = sets_.data() + size_t{s} * (kOneWord ? 8 : set_bytes_);
    uint64_t missing = 0;  // after the add: contributors of the full set not in the slot yet
    switch (state_[s]) {
    case SlotState::empty:
        absorb(s, payload, count, enc, true);
        for (size_t w = 0; w < words; ++w) {
            const uint64_t f = load64(from + 8 * w);
            store64(set + 8 * w, f);
            missing |= f ^ load64(full + 8 * w);
        }
        count_[s] = count;
        ++in_use_;
        break;
    case SlotState::complete:
        return count != count_[s] ? AddResult::count_mismatch : AddResult::complete;
    case SlotState::aggregating: {
        if (count != count_[s]) {
            return AddResult::count_mismatch;
        }
        uint64_t fresh = 0;   // named and not added yet
        uint64_t common = 0;  // named and added already
        for (size_t w = 0; w < words; ++w) {
            const uint64_t f = load64(from + 8 * w);
            const uint64_t in = load64(set + 8 * w);
            fresh |= f & ~in;
            common |= f & in;
        }
        if (fresh == 0) {
            return AddResult::duplicate;
        }
        if (common != 0) {
            return AddResult::overlap;
        }
        absorb(s, payload, count, enc, false);
        for (size_t w = 0; w < words; ++w) {
            const uint64_t merged = load64(set + 8 * w) | load64(from + 8 * w);
            store64(set + 8 * w, merged);
            missing |= merged ^ load64(full + 8 * w);
        }
        break;
    }
    }
    if (missing == 0) {
        state_[s] = SlotState::complete;
        return AddResult::completed;
    }
    state_[s] = SlotState::aggregating;
    return AddResult::added;
}

}  // namespace ina::agg
