// SPDX-License-Identifier: Apache-2.0
#include "agg/agg_core.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <string>

#include "net/checksum.h"

namespace ina::agg {

std::string_view validate(const CoreParams& p) {
    if (!wire::is_valid_bsl_bits(p.contributors.bsl_bits())) {
        return "the contributor set has an invalid BSL";
    }
    if (p.contributors.is_zero()) {
        return "the contributor set is empty";
    }
    if (!reduce::op_from_wire(static_cast<uint8_t>(p.op))) {
        return "unknown op";
    }
    if (!reduce::elem_type_from_wire(static_cast<uint8_t>(p.elem_type))) {
        return "unknown element type";
    }
    if (p.max_elems == 0 || p.max_elems > 0xFFFF) {
        return "max_elems must be 1..65535";
    }
    if (p.slots == 0 || p.slots > kMaxSlots) {
        return "slots must be 1..2^22";
    }
    if (p.deterministic) {
        if (!reduce::fixed_point_applies(p.elem_type, p.op)) {
            return "deterministic needs a float element type and op sum";
        }
        if (p.fraction_bits > reduce::kMaxFractionBits) {
            return "fraction_bits must be 0..126";
        }
    }
    return "";
}

AggCore::AggCore(const CoreParams& p) : AggCore(p, reduce::kernels()) {}

AggCore::AggCore(const CoreParams& p, const reduce::Kernels& k) : params_(p) {
    if (const std::string_view why = validate(p); !why.empty()) {
        throw std::invalid_argument("aggregation core: " + std::string(why));
    }
    set_bytes_ = p.contributors.size_bytes();
    // A deterministic core's accumulators are int64 fixed point, whatever the float type.
    acc_bytes_ = reduce::acc_bytes(p.deterministic ? reduce::kFixedWireType : p.elem_type,
                                   p.max_elems);
    acc_elem_ =
        reduce::acc_elem_size(p.deterministic ? reduce::kFixedWireType : p.elem_type);
    const reduce::TypeKernels& tk = k[p.elem_type];
    load_ = tk.load;
    accumulate_ = tk.accumulator(p.op);
    store_ = tk.store;
    store_sum_ = tk.store_sum;
    if (p.deterministic) {
        fixed_ = reduce::fixed_kernels(p.elem_type);
    }
    state_.assign(p.slots, SlotState::empty);
    count_.assign(p.slots, 0);
    sets_.assign(size_t{p.slots} * set_bytes_, 0);
    // One block for all accumulators, aligned by hand (acc_bytes_ is a multiple of kAccAlign, so
    // every accumulator starts on its own cache line and the kernels' alignment contract holds).
    acc_raw_ = std::make_unique<std::byte[]>(size_t{p.slots} * acc_bytes_ + reduce::kAccAlign);
    const auto base = reinterpret_cast<uintptr_t>(acc_raw_.get());
    const uintptr_t aligned =
        (base + reduce::kAccAlign - 1) / reduce::kAccAlign * reduce::kAccAlign;
    acc_base_ = acc_raw_.get() + (aligned - base);
    assert(reinterpret_cast<uintptr_t>(acc_base_) % reduce::kAccAlign == 0);
}

AggCore::~AggCore() = default;

void AggCore::absorb_fixed(uint32_t s, const void* payload, uint32_t count, Encoding enc,
                           bool first) noexcept {
    auto* a = static_cast<int64_t*>(acc(s));
    if (enc == Encoding::fixed_point) {
        (first ? reduce::fixed_load : reduce::fixed_add)(a, payload, count);
    } else {
        (first ? fixed_.quantize_load : fixed_.quantize_add)(a, payload, count,
                                                             params_.fraction_bits, fixed_stats_);
    }
}

AddResult AggCore::add(uint32_t s, const uint8_t* from, uint32_t count, const void* payload,
                       Encoding enc) noexcept {
    // BSL 64 (one word) is the common contributor set: its instantiation has no loops left.
    return set_bytes_ == 8 ? add_words<true>(s, from, count, payload, enc)
                           : add_words<false>(s, from, count, payload, enc);
}

// add()'s own checks, then add_checked (agg_core.h).
template <bool kOneWord>
AddResult AggCore::add_words(uint32_t s, const uint8_t* from, uint32_t count,
                             const void* payload, Encoding enc) noexcept {
    using wire::detail::load64;
    const size_t words = kOneWord ? 1 : set_bytes_ / 8;
    const uint8_t* full = full_set();
    uint64_t named = 0;    // any contributor named
    uint64_t outside = 0;  // named but not in the full set
    for (size_t w = 0; w < words; ++w) {
        const uint64_t f = load64(from + 8 * w);
        named |= f;
        outside |= f & ~load64(full + 8 * w);
    }
    if (named == 0 || outside != 0) {
        return AddResult::outside;
    }
    if (count == 0 || count > params_.max_elems) {
        return AddResult::bad_count;
    }
    return add_checked<kOneWord>(s, from, count, payload, enc);
}

uint32_t AggCore::store_result(uint32_t s, void* out, Encoding enc,
                               uint32_t* sum) const noexcept {
    if (state_[s] != SlotState::complete) {
        return 0;
    }
    if (!params_.deterministic) {
        if (sum != nullptr) {
            *sum = store_sum_(out, acc(s), count_[s]);
        } else {
            store_(out, acc(s), count_[s]);
        }
        return count_[s];
    }
    size_t bytes = size_t{count_[s]} * reduce::elem_size(params_.elem_type);
    if (enc == Encoding::fixed_point) {
        reduce::fixed_store(out, static_cast<const int64_t*>(acc(s)), count_[s]);
        bytes = size_t{count_[s]} * reduce::elem_size(reduce::kFixedWireType);
    } else {
        fixed_.dequantize(out, static_cast<const int64_t*>(acc(s)), count_[s],
                          params_.fraction_bits);
    }
    if (sum != nullptr) {
        *sum = net::ones_complement_sum(out, bytes);
    }
    return count_[s];
}

bool AggCore::mark_added(uint32_t s, const uint8_t* who) noexcept {
    if (state_[s] != SlotState::aggregating) {
        return false;
    }
    uint8_t* set = sets_.data() + size_t{s} * set_bytes_;
    const uint8_t* full = full_set();
    bool covered = true;
    for (size_t i = 0; i < set_bytes_; ++i) {
        // Only members of the full set: the slot's set stays a subset of it (add's invariant).
        set[i] = static_cast<uint8_t>(set[i] | (who[i] & full[i]));
        covered = covered && set[i] == full[i];
    }
    if (covered) {
        state_[s] = SlotState::complete;
    }
    return covered;
}

uint32_t AggCore::store_range(uint32_t s, uint32_t first, uint32_t n, void* out,
                              Encoding enc) const noexcept {
    if (state_[s] != SlotState::complete || n == 0 || first > count_[s] ||
        n > count_[s] - first) {
        return 0;
    }
    const void* from = static_cast<const std::byte*>(acc(s)) + size_t{first} * acc_elem_;
    if (!params_.deterministic) {
        store_(out, from, n);
    } else if (enc == Encoding::fixed_point) {
        reduce::fixed_store(out, static_cast<const int64_t*>(from), n);
    } else {
        fixed_.dequantize(out, static_cast<const int64_t*>(from), n, params_.fraction_bits);
    }
    return n;
}

void AggCore::release(uint32_t s) noexcept {
    if (state_[s] != SlotState::empty) {
        state_[s] = SlotState::empty;
        --in_use_;
    }
}

void AggCore::reset() noexcept {
    std::fill(state_.begin(), state_.end(), SlotState::empty);
    in_use_ = 0;
}

}  // namespace ina::agg
