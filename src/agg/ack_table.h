// SPDX-License-Identifier: Apache-2.0
// The ACK-driven lifecycle policy over the aggregation core (agg/agg_core.h), for transports
// whose receivers acknowledge what they get (the RoCEv2 server-to-switch mode): a result is
// kept until every receiver has acknowledged it, re-sent to the receivers that have not after a
// retransmission timeout, and only then released. Units are identified by a 32-bit key (a
// message or PSN-derived number, compared in RFC 1982 serial arithmetic).
//
// Model
//   - Slot of key k: k mod slots (slots a power of two). The table is bounded: a key whose slot
//     is held by another key gets `no_slot` and nothing is touched — the caller's back-pressure
//     signal (NAK / RNR, or hold the packet), never an eviction: a held slot either aggregates
//     or keeps a result some receiver still needs.
//   - Exactly once: contributions go through the core (duplicate / overlap refused). Once a
//     key's result was released, later contributions for any key <= it at that slot are
//     `stale` (the slot's released mark), so a late retransmission cannot start the unit again.
//   - Release: ack(k, receivers) ORs the receivers into the slot's acknowledged set; when it
//     covers every receiver the slot is freed. An ack for an unknown key, or for a unit not
//     complete yet, changes nothing (a receiver cannot hold a result that does not exist).
//   - Retransmission: collect_due() hands back, at most `max` at a time, complete units whose
//     result was last sent at least `retransmit_timeout` ago, with the receivers still missing
//     (missing()); the caller re-sends to those and the clock restarts. Incremental: a call
//     looks at a bounded number of slots, continuing where the previous one stopped.
//
// Hot path: no allocation, no locks, no exceptions; one table per lcore.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "agg/agg_core.h"

namespace ina::agg {

struct AckParams {
    CoreParams core;               // contributors, op, element type, max_elems, slots (power of 2)
    wire::BitString receivers;     // who must acknowledge a result before its slot is freed
    uint64_t retransmit_timeout = 0;  // in the caller's time unit (`now`), > 0
};

std::string_view validate(const AckParams& p);

enum class AckVerdict : uint8_t {
    absorbed,        // added; the unit waits for other contributors
    completed,       // added and complete: send the result to every receiver (then mark_sent)
    duplicate,       // already added (or the unit is complete and awaiting acks): drop
    overlap,         // partly added: drop, the sender retries alone
    count_mismatch,  // element count differs from the unit's: drop
    bad_count,       // element count 0 or above max_elems
    outside,         // contributors outside the set (or none): drop
    no_slot,         // the key's slot holds another unit: back-pressure, nothing touched
    stale,           // the key's result was released already: drop
};
inline constexpr size_t kNumAckVerdicts = 9;
std::string_view to_string(AckVerdict v);

enum class AckResult : uint8_t {
    unknown,   // no complete unit with this key: nothing changed
    partial,   // recorded; other receivers have not acknowledged yet
    released,  // every receiver acknowledged: the slot is free
};

struct AckCounters {
    std::array<uint64_t, kNumAckVerdicts> verdicts{};  // indexed by AckVerdict
    uint64_t acks = 0;          // ack() calls that recorded something
    uint64_t acks_unknown = 0;  // ack() calls for no complete unit
    uint64_t released = 0;      // units freed by their last acknowledgement
    uint64_t retransmits = 0;   // units handed out by collect_due()
    uint64_t operator[](AckVerdict v) const { return verdicts[static_cast<size_t>(v)]; }
};

class AckTable {
public:
    // Throws std::invalid_argument if validate(p) is not "" (control plane only).
    explicit AckTable(const AckParams& p);
    AckTable(const AckParams& p, const reduce::Kernels& k);

    AckVerdict contribute(uint32_t key, const uint8_t* from, uint32_t count, const void* payload,
                          uint64_t now) noexcept;
    // The caller sent (or re-sent) key's result at `now`: the retransmission clock restarts.
    void mark_sent(uint32_t key, uint64_t now) noexcept;
    AckResult ack(uint32_t key, const uint8_t* receivers) noexcept;

    // Writes key's result to `out`, returns its element count; 0 unless key is complete here.
    uint32_t store_result(uint32_t key, void* out) const noexcept;
    // store_result() of elements [first, first + n) only (one packet of a multi-packet result);
    // n, or 0 unless key is complete here and the range inside its count.
    uint32_t store_range(uint32_t key, uint32_t first, uint32_t n, void* out,
                         Encoding enc = Encoding::native) const noexcept;
    // The receivers that have not acknowledged key (receivers' bytes, written to `out`);
    // false (nothing written) unless key is complete here.
    bool missing(uint32_t key, uint8_t* out) const noexcept;

    // Up to `max` keys whose result is due for retransmission at `now`, looking at no more than
    // `budget` slots. Each one's clock restarts at `now` (counted as a retransmit).
    size_t collect_due(uint64_t now, uint32_t* keys, size_t max, size_t budget) noexcept;

    // Partial-aggregate flush: `who` (contributor bytes, the core's set size)
    // left the units held now for good (e.g. a worker whose connection was replaced, its
    // contributions so far kept): each aggregating unit counts them as added, so a unit every
    // other contributor is in completes now, and one still waiting completes with the others'
    // contributions. The keys that completed here go to `completed` (up to `max`; the caller
    // sends each one's result, as for `completed` from contribute: its clock restarts at
    // `now`); how many. Units started later still need the full set (the caller starts none:
    // this is for a table being left). No allocation.
    size_t exclude(const uint8_t* who, uint32_t* completed, size_t max, uint64_t now) noexcept;
    // Completion decided by the caller: the aggregating unit `key` is complete with what it
    // holds, its contributors not added yet counted as added without data (a caller that
    // completes by the contributions' own counts, e.g. a RoCE server-to-server switch whose
    // downstream switch contributes k workers' data on one connection). Only this unit changes.
    // True when it is complete now (the caller sends its result: its clock restarts at `now`);
    // false, nothing changed, unless key's unit is aggregating here. No allocation.
    bool complete_now(uint32_t key, uint64_t now) noexcept;
    // Empties every slot and forgets the released marks: a new session whose keys start over
    // (a job whose connections all ended). No allocation.
    void reset() noexcept;

    bool holds(uint32_t key) const noexcept;  // a unit with this key occupies its slot
    // Slot `slot` (< slots()) holds a complete unit, kept until its receivers acknowledge: a
    // contributor to that unit has contributed, so what it sends for this slot now is a later
    // key, which would get no_slot (a caller that knows the slot before the key: back-pressure
    // early).
    bool slot_complete(uint32_t slot) const noexcept {
        return core_.state(slot & (core_.slots() - 1)) == SlotState::complete;
    }
    size_t in_use() const noexcept { return core_.in_use(); }
    uint32_t slots() const noexcept { return core_.slots(); }
    const AckCounters& counters() const noexcept { return counters_; }
    const AggCore& core() const noexcept { return core_; }

private:
    struct SlotMeta {
        uint32_t key = 0;
        uint32_t released_key = 0;  // highest key whose result left this slot (if released_valid)
        bool released_valid = false;
        uint64_t last_sent = 0;
    };
    uint32_t slot_of(uint32_t key) const noexcept { return key & (core_.slots() - 1); }
    bool held_by(uint32_t s, uint32_t key) const noexcept {
        return core_.state(s) != SlotState::empty && meta_[s].key == key;
    }
    uint8_t* acked(uint32_t s) noexcept { return acked_.data() + size_t{s} * recv_bytes_; }
    AckVerdict finish(AckVerdict v) noexcept {
        ++counters_.verdicts[static_cast<size_t>(v)];
        return v;
    }

    AggCore core_;
    wire::BitString receivers_;
    size_t recv_bytes_ = 0;
    uint64_t rto_ = 0;
    std::vector<SlotMeta> meta_;
    std::vector<uint8_t> acked_;  // per slot: receivers that acknowledged
    uint32_t sweep_next_ = 0;
    AckCounters counters_;
};

}  // namespace ina::agg
