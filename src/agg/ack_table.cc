// SPDX-License-Identifier: Apache-2.0
#include "agg/ack_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ina::agg {

namespace {

constexpr bool serial_le(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) <= 0; }

}  // namespace

std::string_view validate(const AckParams& p) {
    if (const std::string_view why = validate(p.core); !why.empty()) {
        return why;
    }
    if (!std::has_single_bit(p.core.slots)) {
        return "slots must be a power of two (a key's slot is key mod slots across the wrap)";
    }
    if (!wire::is_valid_bsl_bits(p.receivers.bsl_bits()) || p.receivers.is_zero()) {
        return "the receiver set must be a valid, non-empty bit string";
    }
    if (p.retransmit_timeout == 0) {
        return "retransmit_timeout must be positive";
    }
    return "";
}

std::string_view to_string(AckVerdict v) {
    switch (v) {
    case AckVerdict::absorbed: return "absorbed";
    case AckVerdict::completed: return "completed";
    case AckVerdict::duplicate: return "duplicate";
    case AckVerdict::overlap: return "overlap";
    case AckVerdict::count_mismatch: return "count_mismatch";
    case AckVerdict::bad_count: return "bad_count";
    case AckVerdict::outside: return "outside";
    case AckVerdict::no_slot: return "no_slot";
    case AckVerdict::stale: return "stale";
    }
    return "unknown";
}

namespace {

const AckParams& checked(const AckParams& p) {
    if (const std::string_view why = validate(p); !why.empty()) {
        throw std::invalid_argument("ack table: " + std::string(why));
    }
    return p;
}

}  // namespace

AckTable::AckTable(const AckParams& p) : AckTable(p, reduce::kernels()) {}

AckTable::AckTable(const AckParams& p, const reduce::Kernels& k)
    : core_(checked(p).core, k), receivers_(p.receivers),
      recv_bytes_(p.receivers.size_bytes()), rto_(p.retransmit_timeout),
      meta_(p.core.slots), acked_(size_t{p.core.slots} * recv_bytes_, 0) {}

AckVerdict AckTable::contribute(uint32_t key, const uint8_t* from, uint32_t count,
                                const void* payload, uint64_t now) noexcept {
    const uint32_t s = slot_of(key);
    SlotMeta& m = meta_[s];
    if (core_.state(s) == SlotState::empty) {
        if (m.released_valid && serial_le(key, m.released_key)) {
            return finish(AckVerdict::stale);
        }
    } else if (m.key != key) {
        return finish(AckVerdict::no_slot);
    }
    const bool fresh = core_.state(s) == SlotState::empty;
    switch (core_.add(s, from, count, payload)) {
    case AddResult::added:
        if (fresh) {
            m.key = key;
            std::memset(acked(s), 0, recv_bytes_);
        }
        return finish(AckVerdict::absorbed);
    case AddResult::completed:
        if (fresh) {
            m.key = key;
            std::memset(acked(s), 0, recv_bytes_);
        }
        m.last_sent = now;  // the caller sends it now
        return finish(AckVerdict::completed);
    case AddResult::duplicate:
    case AddResult::complete: return finish(AckVerdict::duplicate);
    case AddResult::overlap: return finish(AckVerdict::overlap);
    case AddResult::count_mismatch: return finish(AckVerdict::count_mismatch);
    case AddResult::bad_count: return finish(AckVerdict::bad_count);
    case AddResult::outside: return finish(AckVerdict::outside);
    }
    return finish(AckVerdict::outside);
}

void AckTable::mark_sent(uint32_t key, uint64_t now) noexcept {
    const uint32_t s = slot_of(key);
    if (held_by(s, key) && core_.state(s) == SlotState::complete) {
        meta_[s].last_sent = now;
    }
}

AckResult AckTable::ack(uint32_t key, const uint8_t* receivers) noexcept {
    const uint32_t s = slot_of(key);
    if (!held_by(s, key) || core_.state(s) != SlotState::complete) {
        ++counters_.acks_unknown;
        return AckResult::unknown;
    }
    ++counters_.acks;
    uint8_t* a = acked(s);
    for (size_t i = 0; i < recv_bytes_; ++i) {
        a[i] |= static_cast<uint8_t>(receivers[i] & receivers_.data()[i]);
    }
    if (!wire::bits_equal(a, receivers_.data(), recv_bytes_)) {
        return AckResult::partial;
    }
    SlotMeta& m = meta_[s];
    if (!m.released_valid || !serial_le(key, m.released_key)) {
        m.released_key = key;
        m.released_valid = true;
    }
    core_.release(s);
    ++counters_.released;
    return AckResult::released;
}

uint32_t AckTable::store_result(uint32_t key, void* out) const noexcept {
    const uint32_t s = slot_of(key);
    return held_by(s, key) ? core_.store_result(s, out) : 0;
}

uint32_t AckTable::store_range(uint32_t key, uint32_t first, uint32_t n, void* out,
                               Encoding enc) const noexcept {
    const uint32_t s = slot_of(key);
    return held_by(s, key) ? core_.store_range(s, first, n, out, enc) : 0;
}

bool AckTable::missing(uint32_t key, uint8_t* out) const noexcept {
    const uint32_t s = slot_of(key);
    if (!held_by(s, key) || core_.state(s) != SlotState::complete) {
        return false;
    }
    const uint8_t* a = acked_.data() + size_t{s} * recv_bytes_;
    for (size_t i = 0; i < recv_bytes_; ++i) {
        out[i] = static_cast<uint8_t>(receivers_.data()[i] & ~a[i]);
    }
    return true;
}

size_t AckTable::collect_due(uint64_t now, uint32_t* keys, size_t max, size_t budget) noexcept {
    size_t n = 0;
    const uint32_t slots = core_.slots();
    for (size_t k = 0; k < budget && k < slots && n < max; ++k) {
        const uint32_t s = sweep_next_;
        sweep_next_ = sweep_next_ + 1 == slots ? 0 : sweep_next_ + 1;
        SlotMeta& m = meta_[s];
        // Unsigned difference: correct across a wrap of the caller's clock.
        if (core_.state(s) == SlotState::complete && now - m.last_sent >= rto_) {
            m.last_sent = now;
            keys[n++] = m.key;
        }
    }
    counters_.retransmits += n;
    return n;
}

size_t AckTable::exclude(const uint8_t* who, uint32_t* completed, size_t max,
                         uint64_t now) noexcept {
    size_t n = 0;
    for (uint32_t s = 0; s < core_.slots(); ++s) {
        if (core_.state(s) != SlotState::aggregating) {
            continue;
        }
        if (core_.mark_added(s, who)) {
            meta_[s].last_sent = now;  // the caller sends it now
            if (n < max) {
                completed[n++] = meta_[s].key;
            }
        }
    }
    return n;
}

bool AckTable::complete_now(uint32_t key, uint64_t now) noexcept {
    const uint32_t s = slot_of(key);
    if (!held_by(s, key) || !core_.mark_added(s, core_.full_set())) {
        return false;
    }
    meta_[s].last_sent = now;  // the caller sends it now
    return true;
}

bool AckTable::holds(uint32_t key) const noexcept { return held_by(slot_of(key), key); }

void AckTable::reset() noexcept {
    core_.reset();
    std::fill(meta_.begin(), meta_.end(), SlotMeta{});
    std::fill(acked_.begin(), acked_.end(), uint8_t{0});
    sweep_next_ = 0;
}

}  // namespace ina::agg
