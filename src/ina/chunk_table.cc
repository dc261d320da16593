// SPDX-License-Identifier: Apache-2.0
#include "ina/chunk_table.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>
#include <stdexcept>
#include <string>

#include "net/checksum.h"

namespace ina {

namespace {

using wire::bits_equal;
using wire::bits_intersect;
using wire::bits_or_into;
using wire::bits_subset;

// The core under a table: one slot per entry, two entries per slot index of this lane.
agg::CoreParams core_params(const JobParams& p) {
    agg::CoreParams c;
    c.contributors = p.abm;
    c.op = p.op;
    c.elem_type = p.elem_type;
    c.max_elems = p.max_elems;
    c.slots = 2 * lane_indices(p.window, p.lanes);
    c.deterministic = p.deterministic;
    c.fraction_bits = p.fraction_bits;
    return c;
}

// The core refused or took a contribution to an existing entry; the table's verdict for it.
// (outside / bad_count cannot reach the core: on_data checks them first.)
Verdict verdict_of(agg::AddResult r) {
    switch (r) {
    case agg::AddResult::added: return Verdict::absorbed;
    case agg::AddResult::completed: return Verdict::completed;
    case agg::AddResult::duplicate: return Verdict::duplicate;
    case agg::AddResult::overlap: return Verdict::overlap;
    case agg::AddResult::count_mismatch: return Verdict::count_mismatch;
    case agg::AddResult::complete: return Verdict::resend_result;  // the sender lacks the result
    case agg::AddResult::bad_count: return Verdict::bad_length;
    case agg::AddResult::outside: return Verdict::outside_abm;
    }
    return Verdict::outside_abm;
}

}  // namespace

std::string_view validate(const JobParams& p) {
    // A power of two divides 2^32, so seq and seq - W share an index even across the wrap of
    // seq at 2^32 (with W = 3, 0xFFFFFFFF and 0 would both map to index 0).
    if (p.window == 0 || p.window > kMaxWindow || !std::has_single_bit(p.window)) {
        return "window must be a power of two, 1..2^20";
    }
    if (p.worker_window != 0 &&
        (p.worker_window < p.window || p.worker_window > kMaxWindow ||
         !std::has_single_bit(p.worker_window))) {
        return "worker_window must be a power of two, at least window, at most 2^20";
    }
    if (p.role != Role::aggregator && p.role != Role::root) {
        return "unknown role";
    }
    // A root has no fallback: with a workers' window above W, its two entries of an index can
    // both hold chunks waiting for releases that need a third chunk, which finds no slot.
    if (p.role == Role::root && p.worker_window > p.window) {
        return "a root's worker_window must not exceed its window";
    }
    if (p.result_cache > kMaxResultCache) {
        return "result_cache must be 0..2";
    }
    // An aggregator's released partials would go to the parent, which may have released too:
    // only the root holds the job's results.
    if (p.role != Role::root && p.result_cache != 0) {
        return "result_cache is for roots only";
    }
    if (p.lanes == 0 || p.lane >= p.lanes) {
        return "lane must be below lanes (>= 1)";
    }
    // The A-BM, op, element type and chunk size are the core's to judge.
    return agg::validate(core_params(p));
}

uint8_t header_mismatch(const proto::Header& h, const JobParams& p) {
    uint8_t m = 0;
    if (h.type != proto::PacketType::data) m |= mismatch::type;
    if (h.job_id != p.job_id) m |= mismatch::job;
    if (h.op != static_cast<uint8_t>(p.op)) m |= mismatch::op;
    if (h.elem_type != static_cast<uint8_t>(p.elem_type) &&
        !(p.deterministic && h.elem_type == static_cast<uint8_t>(reduce::kFixedWireType))) {
        m |= mismatch::elem_type;
    }
    if (h.bitstring_bytes() != p.abm.size_bytes()) m |= mismatch::bsl;
    if (h.set_id != p.set_id) m |= mismatch::set_id;
    return m;
}

std::string_view reject_reason_name(size_t reason) {
    constexpr std::string_view names[kNumRejectReasons] = {
        "job", "op", "elem_type", "bsl", "set_id", "type", "ingress_port", "ingress_source"};
    return reason < kNumRejectReasons ? names[reason] : "unknown";
}

std::string_view mismatch_name(uint8_t bit) {
    switch (bit) {
    case mismatch::job: return "job";
    case mismatch::op: return "op";
    case mismatch::elem_type: return "elem_type";
    case mismatch::bsl: return "bsl";
    case mismatch::set_id: return "set_id";
    case mismatch::type: return "type";
    default: return "unknown";
    }
}

std::string_view to_string(Verdict v) {
    switch (v) {
    case Verdict::not_mine: return "not_mine";
    case Verdict::outside_abm: return "outside_abm";
    case Verdict::bad_length: return "bad_length";
    case Verdict::count_mismatch: return "count_mismatch";
    case Verdict::absorbed: return "absorbed";
    case Verdict::completed: return "completed";
    case Verdict::duplicate: return "duplicate";
    case Verdict::overlap: return "overlap";
    case Verdict::resend_result: return "resend_result";
    case Verdict::stale: return "stale";
    case Verdict::fallback: return "fallback";
    case Verdict::no_slot: return "no_slot";
    case Verdict::cached_result: return "cached_result";
    }
    return "unknown";
}

namespace {

const JobParams& checked(const JobParams& p) {
    if (const std::string_view why = validate(p); !why.empty()) {
        throw std::invalid_argument("ina chunk table: " + std::string(why));
    }
    return p;
}

}  // namespace

ChunkTable::ChunkTable(const JobParams& p) : ChunkTable(p, reduce::kernels()) {}


ChunkTable::ChunkTable(const JobParams& p, const reduce::Kernels& k)
    : params_(checked(p)), core_(core_params(p), k) {
    bs_bytes_ = p.abm.size_bytes();
    bsl_code_ = *wire::bsl_code_from_bits(p.abm.bsl_bits());  // valid: checked() above
    window_ = p.window;
    distance_ = p.worker_window != 0 ? p.worker_window : p.window;
    base_distance_ = distance_;

    window_shift_ = static_cast<uint32_t>(std::countr_zero(window_));
    // The ring spans at least floor_reach(): a root's 2D, an aggregator's up to max(D', 2D)
    // once a sender states its lowest missing result (D' <= max_distance_), even at kMaxWindow.
    max_distance_ = std::max(std::min(kMaxWindow, distance_ * kViolationHeadroom), 2 * distance_);
    span_ = max_distance_ / window_;
    ring_words_ = (span_ + 63) / 64;
    lanes_ = p.lanes;
    lane_div_ = LaneDivider(p.lanes);
    const uint32_t indices = lane_indices(window_, p.lanes);
    const size_t n = size_t{2} * indices;
    entries_.resize(n);
    index_.resize(indices);
    released_ring_.assign(indices * ring_words_, 0);
    proofs_.assign(n * bs_bytes_, 0);
    for (size_t i = 0; i < n; ++i) {
        entries_[i].released = proofs_.data() + i * bs_bytes_;
    }
    if (p.role == Role::aggregator) {
        lowest_of_.assign(bs_bytes_ * 8, 0);
        lowest_known_.assign(bs_bytes_ * 8, 0);
    }
    cache_depth_ = p.result_cache;
    if (cache_depth_ != 0) {
        constexpr size_t kLine = 64;
        const size_t bytes = size_t{p.max_elems} * reduce::elem_size(p.elem_type);
        cache_stride_ = (bytes + kLine - 1) / kLine * kLine;
        cached_.resize(size_t{indices} * cache_depth_);
        cache_bytes_ = std::make_unique<uint8_t[]>(cached_.size() * cache_stride_ + kLine);
        const auto at = reinterpret_cast<uintptr_t>(cache_bytes_.get());
        cache_base_ = cache_bytes_.get() + ((kLine - at % kLine) % kLine);
    }
}

ChunkTable::~ChunkTable() = default;

// Inlined into every caller in this file (the hot path calls it up to three times a packet).
[[gnu::always_inline]] inline ChunkTable::Entry* ChunkTable::find(uint32_t index,
                                                                 uint32_t seq) noexcept {
    // Invariant: at most one non-empty entry per (index, seq) — lookup precedes every allocation.
    for (uint32_t j = 0; j < 2; ++j) {
        Entry& e = entries_[size_t{2} * index + j];
        if (state(e) != State::empty && e.seq == seq) {
            return &e;
        }
    }
    return nullptr;
}

[[gnu::always_inline]] inline const ChunkTable::Entry* ChunkTable::find(
    uint32_t index, uint32_t seq) const noexcept {
    return const_cast<ChunkTable*>(this)->find(index, seq);
}

void ChunkTable::free_entry(Entry& e) noexcept { core_.release(slot(e)); }

void ChunkTable::cache_result(uint32_t index, const Entry& e) noexcept {
    if (cache_depth_ == 0) return;
    // The index keeps the result_cache HIGHEST released seqs: a worker lacks no result below
    // its own lowest missing chunk, and it must send later chunks of the index (it cannot while
    // it lacks that one, beyond its window) before they can be released. So a release older than
    // every cached chunk is not cached (releases come out of order: an obsolete eviction of
    // seq - W can follow a proof's release of seq), and a newer one replaces the oldest.
    Cached* const row = &cached_[size_t{index} * cache_depth_];
    Cached* victim = nullptr;
    for (uint32_t j = 0; j < cache_depth_; ++j) {
        Cached& c = row[j];
        if (c.count == 0) {
            victim = &c;
            break;
        }
        if (victim == nullptr || seq_diff(c.seq, victim->seq) < 0) victim = &c;
    }
    if (victim->count != 0 && seq_diff(e.seq, victim->seq) < 0) return;
    const auto slot_no = static_cast<size_t>(victim - cached_.data());
    victim->count = core_.store_result(slot(e), cache_base_ + slot_no * cache_stride_);
    victim->seq = e.seq;
    victim->flags = e.flags;
}

const ChunkTable::Cached* ChunkTable::cached(uint32_t index, uint32_t seq) const noexcept {
    const Cached* const row = cached_.data() + size_t{index} * cache_depth_;
    for (uint32_t j = 0; j < cache_depth_; ++j) {
        if (row[j].count != 0 && row[j].seq == seq) return &row[j];
    }
    return nullptr;
}

void ChunkTable::retire(uint32_t index, Entry& e) noexcept {
    mark_released(index, e.seq);
    cache_result(index, e);
    free_entry(e);
}

size_t ChunkTable::results_cached() const noexcept {
    return static_cast<size_t>(std::count_if(cached_.begin(), cached_.end(),
                                             [](const Cached& c) { return c.count != 0; }));
}

void ChunkTable::mark_released(uint32_t index, uint32_t seq) noexcept {
    IndexState& s = index_[index];
    uint64_t* ring = ring_of(index);
    // Every worker contributed to seq, so each held the results of all chunks <= seq - D: those
    // are released, whatever this table saw of them (the ring may hold bits up to seq - D).
    // A root lets workers run up to 2D (floor_reach()): it vouches only for seq - 2D, which holds
    // however seq left (proof, obsolete eviction or expiry) as long as one worker keeps within
    // 2D, since that worker sent seq. Lower is always safe: the ring records every release.
    const uint32_t proven = seq - floor_reach();
    if (!s.floor_valid) {
        s.released_floor = proven;
        s.floor_valid = true;
    } else if (seq_diff(proven, s.released_floor) > 0) {
        const uint32_t steps = static_cast<uint32_t>(seq_diff(proven, s.released_floor)) >>
                               window_shift_;
        for (uint32_t k = 1; k <= steps && k <= span_; ++k) {
            const uint32_t bit = ring_bit(s.released_floor + k * window_);
            ring[bit / 64] &= ~(uint64_t{1} << (bit % 64));
        }
        s.released_floor = proven;
    }
    if (seq_le(seq, s.released_floor)) {
        return;
    }
    // seq - floor <= D here, so seq's ring bit is not shared with another chunk above the floor.
    const uint32_t bit = ring_bit(seq);
    ring[bit / 64] |= uint64_t{1} << (bit % 64);
    // Walk the floor up over consecutive released chunks, freeing their bits.
    for (;;) {
        const uint32_t next = ring_bit(s.released_floor + window_);
        const uint64_t mask = uint64_t{1} << (next % 64);
        if ((ring[next / 64] & mask) == 0) break;
        ring[next / 64] &= ~mask;
        s.released_floor += window_;
    }
}

void ChunkTable::widen_distance() noexcept {
    ++counters_.window_violations;
    if (params_.role == Role::aggregator && distance_ < max_distance_) {
        distance_ *= 2;
    }
}

bool ChunkTable::is_released(uint32_t index, uint32_t seq) const noexcept {
    const IndexState& s = index_[index];
    if (!s.floor_valid) return false;
    const int32_t above = seq_diff(seq, s.released_floor);
    if (above <= 0) return true;
    // mark_released() sets bits only within floor_reach() <= max_distance_ of the floor, and
    // clears every bit the floor passes: the ring holds exactly the released chunks above it.
    if (static_cast<uint32_t>(above) > max_distance_) return false;  // beyond the ring: not yet
    const uint32_t bit = ring_bit(seq);
    return (ring_of(index)[bit / 64] >> (bit % 64) & 1u) != 0;
}

template <bool kOneWord>
[[gnu::always_inline]] inline void ChunkTable::release(uint32_t index, Entry* e,
                                                       const uint8_t* pbm,
                                                       uint64_t now) noexcept {
    // A contribution for seq from the workers in pbm proves they hold the result of seq - D
    // (D = the workers' window), which lives at the same index (D is a multiple of W): `e` is
    // that chunk's entry, if it has one. Only complete entries are released: an aggregating
    // entry for seq - W would contradict the window rule (a misbehaving worker) and must keep
    // its partial sum, or the chunk would be split.
    if (e == nullptr || state(*e) != State::complete) {
        return;
    }
    bits_or_into(e->released, pbm, bs_len<kOneWord>());
    e->last_activity = now;
    if (bits_equal(e->released, params_.abm.data(), bs_len<kOneWord>())) {
        // Every worker holds the result — or claims to: a sender beyond the window may not, and
        // a root then answers it from the result cache.
        retire(index, *e);
    }
}

template <bool kOneWord>
Verdict ChunkTable::on_data_words(const uint8_t* pbm, uint32_t seq, uint32_t elem_count,
                                  const void* payload, uint8_t flags, uint64_t now,
                                  agg::Encoding enc, uint32_t lowest_missing) noexcept {
    const uint8_t* abm = params_.abm.data();
    // 1-2. Is it ours, and well formed? Nothing below runs for a packet that fails here.
    // (These are the checks AggCore::add_checked relies on.)
    if (!bits_intersect(pbm, abm, bs_len<kOneWord>())) {
        return finish(Verdict::not_mine);
    }
    if (!bits_subset(pbm, abm, bs_len<kOneWord>())) {
        return finish(Verdict::outside_abm);
    }
    if (elem_count == 0 || elem_count > params_.max_elems) {
        return finish(Verdict::bad_length);
    }
    if ((flags & proto::kFlagRetransmit) != 0) ++counters_.rx_retransmit;
    if ((flags & proto::kFlagFallback) != 0) ++counters_.rx_fallback_flag;

    const uint32_t index = index_of(seq);
    Entry* const pair = &entries_[size_t{2} * index];
    if ((flags & proto::kFlagLowestMissing) != 0) [[unlikely]] {
        return on_data_exact<kOneWord>(index, pair, pbm, seq, elem_count, payload, flags, now,
                                       enc, lowest_missing);
    }
    // One look at the index's two entries finds both the chunk's own entry and the entry of
    // seq - D that this packet's release proof is about (invariant: at most one non-empty entry
    // per (index, seq), and seq != seq - D).
    const uint32_t proven = seq - distance_;
    Entry* own = nullptr;
    Entry* old = nullptr;
    for (uint32_t j = 0; j < 2; ++j) {
        Entry& c = pair[j];
        if (state(c) != State::empty) {
            if (c.seq == seq) {
                own = &c;
            } else if (c.seq == proven) {
                old = &c;
            }
        }
    }
    // A sender beyond the workers' window: the chunk it claims to hold is still aggregating,
    // or was never allocated here (not released, not fallen back). Its proofs can be false, so
    // an aggregator measures every later proof in a window twice as long (releases come later,
    // the excess falls back: the job slows, no result is released too early). A root only
    // counts it: with a wider release distance its two entries per index can both wait for
    // releases that need a chunk without a slot (a deadlock the simulator finds).
    // (A root's floor lags one window more, floor_reach(): below floor + D an unallocated chunk
    // may be one before the job's start, never sent, so only a claim above that is counted.)
    if (old != nullptr ? state(*old) == State::aggregating
                       : index_[index].floor_valid && !is_released(index, proven) &&
                             !(index_[index].fallback_valid &&
                               seq_le(proven, index_[index].fallback_until)) &&
                             seq_diff(proven, index_[index].released_floor) >
                                 static_cast<int32_t>(floor_reach() - distance_)) [[unlikely]] {
        widen_distance();
        old = nullptr;
    }
    // 5. Release first: it may free the very entry this seq needs (seq - W's, at the same index).
    release<kOneWord>(index, old, pbm, now);
    return place<kOneWord>(index, pair, own, pbm, seq, elem_count, payload, flags, now, enc,
                           false);
}

template <bool kOneWord>
Verdict ChunkTable::on_data_exact(uint32_t index, Entry* pair, const uint8_t* pbm, uint32_t seq,
                                  uint32_t elem_count, const void* payload, uint8_t flags,
                                  uint64_t now, agg::Encoding enc,
                                  uint32_t lowest_missing) noexcept {
    // The sender says which results it holds: every chunk before `low`. Sending seq shows it
    // lacks seq's result, so a claim beyond seq is cut to seq (never more proof than the packet
    // itself gives). A root and an aggregator apply the same two rules; an aggregator also keeps
    // its floor and obsolete evictions clear of what such a sender may still lack
    // (stated_lowest_, floor_reach(), obsolete_reach()) and its partial states the minimum `low`
    // of its contributions (partial_lowest_missing()).
    stated_lowest_ = true;
    const uint32_t low = seq_diff(lowest_missing, seq) > 0 ? seq : lowest_missing;
    if (params_.role == Role::aggregator) note_lowest(pbm, low);
    const auto lead = static_cast<uint32_t>(seq_diff(seq, low));  // >= 0
    if (lead >= base_distance_) [[unlikely]] {
        ++counters_.window_violations;  // exact: the sender runs beyond the workers' window
    }
    // The proof is exact, so it applies to every complete entry of the index below `low` (no
    // window arithmetic, no false proof from a sender beyond its window): a chunk leaves by proof
    // only once every worker holds its result. Release first, as for the window proof.
    Entry* own = nullptr;
    for (uint32_t j = 0; j < 2; ++j) {
        Entry& c = pair[j];
        if (state(c) == State::empty) continue;
        if (c.seq == seq) {
            own = &c;
        } else if (seq_diff(c.seq, low) < 0) {
            release<kOneWord>(index, &c, pbm, now);
        }
    }
    // Lead refusal: a contribution 2D or more beyond its sender's lowest missing result is never
    // taken (no_slot: it retransmits once it has caught up). So every chunk absorbed from any
    // sender lies within 2D of what that sender holds, whatever window it keeps: the bound under
    // which the result cache (2 entries) serves every worker through any expiry, and the floor's
    // s - 2D is true for every worker. The sender's lowest missing chunk itself (lead 0) is never
    // refused, so it can always ask for that result. A packet whose contribution was already
    // absorbed cannot be refused (it was absorbed with a lead < 2D, and `low` only rises), except
    // an older copy overtaking a newer one: a duplicate either way.
    // The bound is the configured workers' window, never one an aggregator widened for old
    // senders: so a partial's minimum (each absorbed low within 2D of seq) is never refused by
    // the root (same D), first sent or re-sent. An aggregator drops the refused packet too
    // (no_slot), never forwards it: forwarded with the fallback flag it would split a chunk
    // that has an entry here, and the root would refuse it anyway.
    if (lead >= 2 * base_distance_) [[unlikely]] {
        ++counters_.overrun_refusals;
        return finish(Verdict::no_slot);
    }
    return place<kOneWord>(index, pair, own, pbm, seq, elem_count, payload, flags, now, enc,
                           true);
}

// Inlined into both callers: the packet path's one function before the exact rules came.
template <bool kOneWord>
[[gnu::always_inline]] inline Verdict ChunkTable::place(
    uint32_t index, Entry* pair, Entry* own, const uint8_t* pbm, uint32_t seq,
    uint32_t elem_count, const void* payload, uint8_t flags, uint64_t now,
    agg::Encoding enc, bool stated) noexcept {
    // 3. The chunk's entry.
    if (Entry* e = own) {
        const agg::AddResult r =
            core_.add_checked<kOneWord>(slot(*e), pbm, elem_count, payload, enc);
        if (r != agg::AddResult::count_mismatch) {
            e->last_activity = now;
            e->flags |= flags & proto::kFlagEcnEcho;
        }
        if (r == agg::AddResult::added || r == agg::AddResult::completed) {
            // The partial states a lowest missing result only when every contribution did.
            e->lowest_stated = e->lowest_stated && stated;
        }
        last_placed_ = e;
        return finish(verdict_of(r));
    }

    // 4. No entry. A freed-complete chunk is never re-allocated (its late packets are stale) and
    // a chunk that fell back never gets an entry (sticky): allocation needs seq above both marks.
    IndexState& is = index_[index];
    if (is_released(index, seq)) {
        if (cache_depth_ != 0) {
            if (cached(index, seq) != nullptr) {
                ++counters_.result_cache_hits;
                return finish(Verdict::cached_result);
            }
            ++counters_.result_cache_misses;
        }
        return finish(Verdict::stale);
    }
    if (is.fallback_valid && seq_le(seq, is.fallback_until)) {
        ++counters_.fallback_sticky;  // the chunk already fell back here: all of it does
        return finish(Verdict::fallback);
    }
    // A root refuses a chunk 2D or more ahead of one still aggregating at its index: only a
    // sender beyond 2D can send it (one within 2D holds that chunk's result), and holding it
    // could leave the chunks between them no entry while they wait for the slow workers (the
    // deadlock in the header). no_slot: the sender retransmits later, its job slows.
    if (params_.role == Role::root) {
        for (uint32_t j = 0; j < 2; ++j) {
            const Entry& c = pair[j];
            if (state(c) == State::aggregating && overruns(seq, c.seq)) [[unlikely]] {
                ++counters_.overrun_refusals;
                return finish(Verdict::no_slot);
            }
        }
    }
    Entry* free = nullptr;
    for (uint32_t j = 0; j < 2 && free == nullptr; ++j) {
        Entry& c = entries_[size_t{2} * index + j];
        if (state(c) == State::empty) {
            free = &c;
        }
    }
    for (uint32_t j = 0; j < 2 && free == nullptr; ++j) {
        Entry& c = entries_[size_t{2} * index + j];
        // Obsolete: a packet for seq >= c.seq + 2D means its sender holds the result of
        // seq - D >= c.seq + D, so every worker sent c.seq + D, so every worker holds c.seq's
        // result. Only complete entries go (an aggregating one keeps its partial sum: never split).
        if (state(c) == State::complete &&
            seq_diff(seq, c.seq) >= static_cast<int32_t>(obsolete_reach())) {
            ++counters_.obsolete_evictions;
            retire(index, c);
            free = &c;
        }
    }
    if (free == nullptr && params_.role == Role::root) {
        // The other way round: an entry taken by an aggregating chunk 2D or more ahead of seq
        // (it arrived before seq was pending here) gives way. Its partial sum is discarded, as
        // on expiry: its senders retransmit, and while seq aggregates it is refused (above).
        for (uint32_t j = 0; j < 2 && free == nullptr; ++j) {
            Entry& c = pair[j];
            if (state(c) == State::aggregating && overruns(c.seq, seq)) [[unlikely]] {
                ++counters_.overrun_preemptions;
                free_entry(c);
                free = &c;
            }
        }
    }
    if (free == nullptr) {
        if (params_.role == Role::root) {
            return finish(Verdict::no_slot);  // nowhere further to go: the worker retransmits
        }
        // seq is above fallback_until here (checked above), so the mark only moves forward.
        is.fallback_until = seq;
        is.fallback_valid = true;
        ++counters_.fallback_no_slot;
        return finish(Verdict::fallback);
    }

    free->seq = seq;
    free->last_activity = now;
    free->flags = flags & proto::kFlagEcnEcho;
    free->lowest_stated = stated;
    std::memset(free->released, 0, bs_len<kOneWord>());
    last_placed_ = free;
    // An empty slot takes any well-formed contribution (checked above): absorbed, or completed
    // when one packet covers the whole A-BM (a single child whose A-BM equals ours).
    return finish(
        verdict_of(core_.add_checked<kOneWord>(slot(*free), pbm, elem_count, payload, enc)));
}

uint32_t ChunkTable::store_result(uint32_t seq, void* out, agg::Encoding enc,
                                  uint32_t* sum) const noexcept {
    if (const Entry* e = placed(seq)) {
        return core_.store_result(slot(*e), out, enc, sum);
    }
    const uint32_t index = index_of(seq);
    if (const Entry* e = find(index, seq)) {
        return core_.store_result(slot(*e), out, enc, sum);
    }
    const Cached* c = enc == agg::Encoding::native ? cached(index, seq) : nullptr;
    if (c == nullptr) return 0;
    const auto at = static_cast<size_t>(c - cached_.data());
    const size_t bytes = size_t{c->count} * reduce::elem_size(params_.elem_type);
    std::memcpy(out, cache_base_ + at * cache_stride_, bytes);
    if (sum != nullptr) {
        *sum = net::ones_complement_sum(out, bytes);
    }
    return c->count;
}

void ChunkTable::note_lowest(const uint8_t* pbm, uint32_t low) noexcept {
    // Per BFR-id position of the BitString (byte b, bit i): the highest low stated for it. A
    // child switch's partial states its least, which is true of every bit it carries.
    for (size_t b = 0; b < bs_bytes_; ++b) {
        for (unsigned x = pbm[b]; x != 0; x &= x - 1) {
            const size_t k = b * 8 + static_cast<size_t>(std::countr_zero(x));
            if (!lowest_known_[k] || seq_diff(low, lowest_of_[k]) > 0) {
                lowest_of_[k] = low;
                lowest_known_[k] = 1;
            }
        }
    }
}

bool ChunkTable::partial_lowest_missing(uint32_t seq, uint32_t* lowest) const noexcept {
    const Entry* e = placed(seq);
    if (e == nullptr) e = find(index_of(seq), seq);
    if (e == nullptr || !e->lowest_stated || lowest_of_.empty()) return false;
    // The least of the latest statements of every contributor (A-BM bit): each is true now (a
    // worker's low only rises) and at least what it stated with its contribution to seq, which
    // was absorbed with seq - low < 2D, so the partial's lead is below 2D too.
    bool any = false;
    uint32_t least = 0;
    const uint8_t* abm = params_.abm.data();
    for (size_t b = 0; b < bs_bytes_; ++b) {
        for (unsigned x = abm[b]; x != 0; x &= x - 1) {
            const size_t k = b * 8 + static_cast<size_t>(std::countr_zero(x));
            if (!lowest_known_[k]) return false;
            if (!any || seq_diff(lowest_of_[k], least) < 0) least = lowest_of_[k];
            any = true;
        }
    }
    // Cut to seq as a root cuts a claim beyond the packet (all hold seq's result by then).
    *lowest = seq_diff(least, seq) > 0 ? seq : least;
    return any;
}

uint8_t ChunkTable::result_flags(uint32_t seq) const noexcept {
    if (const Entry* e = placed(seq)) return e->flags;
    const uint32_t index = index_of(seq);
    if (const Entry* e = find(index, seq)) return e->flags;
    const Cached* c = cached(index, seq);
    return c == nullptr ? 0 : c->flags;
}

ChunkTable::State ChunkTable::state_of(uint32_t seq) const noexcept {
    const Entry* e = find(index_of(seq), seq);
    return e == nullptr ? State::empty : state(*e);
}

size_t ChunkTable::expire(uint64_t now, size_t budget) noexcept {
    size_t freed = 0;
    const size_t n = entries_.size();
    for (size_t k = 0; k < budget && k < n; ++k) {
        Entry& e = entries_[sweep_next_];
        sweep_next_ = sweep_next_ + 1 == n ? 0 : sweep_next_ + 1;
        // Unsigned difference: correct across a wrap of the caller's clock.
        if (state(e) != State::empty && now - e.last_activity > params_.idle_timeout) {
            if (state(e) == State::complete) {
                // Its result was emitted: never aggregate (and emit) this chunk again; a root
                // keeps it in the result cache for a worker that lost it.
                retire(index_of(e.seq), e);
            } else {
                free_entry(e);
            }
            ++freed;
        }
    }
    counters_.slot_timeouts += freed;
    return freed;
}

void ChunkTable::reset() noexcept {
    core_.reset();
    last_placed_ = nullptr;
    stated_lowest_ = false;
    std::fill(lowest_known_.begin(), lowest_known_.end(), 0);
    for (IndexState& s : index_) {
        s = IndexState{};
    }
    std::fill(released_ring_.begin(), released_ring_.end(), 0);
    // A new sequence space: a cached result of an old chunk must never answer a new one.
    std::fill(cached_.begin(), cached_.end(), Cached{});
}

// on_data() (chunk_table.h) calls these from other translation units.
template Verdict ChunkTable::on_data_words<true>(const uint8_t*, uint32_t, uint32_t, const void*,
                                                 uint8_t, uint64_t, agg::Encoding,
                                                 uint32_t) noexcept;
template Verdict ChunkTable::on_data_words<false>(const uint8_t*, uint32_t, uint32_t,
                                                  const void*, uint8_t, uint64_t, agg::Encoding,
                                                  uint32_t) noexcept;

}  // namespace ina
