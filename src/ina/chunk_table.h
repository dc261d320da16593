// SPDX-License-Identifier: Apache-2.0
// Per-lcore aggregation state for one INA job on one VAT node (aggregator or root): a fixed pool
// of chunk slots that absorbs workers' (or child switches') contributions exactly once under loss,
// duplication and reordering, with bounded memory. Pure code (no DPDK): a pipeline stage drives it
// with the fields of a parsed INA data packet (ina/protocol.h) and acts on the Verdict.
//
// Model (docs/protocol.md, draft-song-ina-00; slot reuse as in SwitchML)
//   - A chunk `seq` lives at index seq mod W (W a power of two). Each index has TWO entries (current + shadow).
//     With several worker lcores the W indices are dealt over them (chunk_place()): every
//     statement below is about one index, whose chunks all meet in one lane's table.
//     Workers keep at most W chunks outstanding: a worker sends seq only once it holds the result
//     of every chunk <= seq - W. So when a contribution for seq + 2W arrives, every worker holds
//     the result of seq + W, hence every worker has sent seq + W through this node, and those
//     contributions released seq (rule below): one of the two entries is free again. Two entries
//     per index therefore suffice; with windows larger than W the table still never double-counts
//     or splits a chunk, it just falls back (or, at the root, drops: no_slot) more often.
//   - Release proof: a data packet for seq' carrying P-BM P shows that every worker in P holds the
//     result of seq' - D (D the workers' window; they only advance their windows on results).
//     R |= P on the entry of seq' - D; when R == A-BM nobody can need that result again and the
//     entry is freed: the chunk is *released*. A later packet for a released chunk that has no
//     entry is a late duplicate: stale.
//     The proof comes from the sender's window, not from what the table does with the packet, so
//     it is applied to EVERY packet that passes the A-BM and length checks, before the lookup:
//     also when the packet itself then gets fallback, no_slot, stale or overlap. This matters: at
//     the root, chunk c's packets (answered no_slot because c - W still holds the entry) are
//     exactly what frees c - W's entry; releasing only on absorbed packets deadlocks.
//     Which chunks are released is kept per index as a floor plus a ring of bits above it (one
//     per chunk of the index within kViolationHeadroom x D), and the floor only rises in order:
//       - released chunk s: every worker sent s, so each held the results of every chunk <= s - D
//         then; the floor may rise to s - D, never past a chunk that may still be pending. A root
//         lets workers run up to 2D (its result cache's bound, below), so it raises the floor only
//         to s - 2D, whichever way s left (proof, obsolete eviction, expiry): a worker within 2D
//         sent s, so every chunk <= s - 2D had completed. (With s - D an expiry of s, which proves
//         nothing about s - D, made s - D stale for ever while it was still pending.);
//       - the floor then walks up over consecutive released chunks (s - floor <= D, so the ring
//         holds every released chunk above the floor).
//     Releases happen out of order (an aggregator with D > W, expiry, a worker beyond its
//     window): raising the floor to a released seq itself could make an earlier chunk that is
//     still pending "stale" and wedge the job for ever (issue 9, defect 5). Liveness is the
//     chunk simulator's check (tests/ina/test_chunk_sim.cc): every chunk completes under any loss.
//   - Root, D > W: workers may keep any window up to D, so two entries of an index can hold a
//     complete chunk awaiting a slow worker's proof and a fast worker's later chunk, while the
//     chunk between them (which the slow worker needs first) finds no slot: a deadlock.
//     validate() refuses it (an aggregator falls back instead).
//   - Root, a worker beyond 2D: the same deadlock (c + D complete awaiting proofs from c + 2D,
//     which the others cannot send before c; c + 2D aggregating with the fast worker alone; c no
//     slot). A root refuses what it cannot hold safely: a chunk 2D or more ahead of a chunk still
//     aggregating at its index gets no entry (no_slot, overrun_refusals: only a sender beyond 2D
//     can have sent it, a worker within 2D holds that chunk's result), and a chunk that finds its
//     entries taken, one by an aggregating chunk 2D or more ahead of it, takes that entry (the
//     partial sum is discarded as on expiry, overrun_preemptions; its senders retransmit). With
//     one worker within 2D, every chunk c that is the lowest pending one gets an entry: an entry
//     holds a complete chunk below c (obsolete for c, or released by c's proofs), the complete
//     c + D (the other then aggregating at c + 2D or beyond: preempted), or an aggregating chunk
//     (c + D; c + 2D or beyond is preempted). The fast worker slows; the job completes.
//   - A sender beyond the workers' window makes false proofs (it claims a result it lacks, which
//     then becomes stale for it). Where the table can see it (the claimed chunk is aggregating or
//     was never allocated) it counts window_violations and an aggregator doubles D (up to
//     kViolationHeadroom x): the job slows, the chunk simulator shows it completes.
//   - Root result cache: a root cannot widen D (the deadlock above), so a sender beyond the
//     window can make the root release a chunk whose result that sender then loses; its
//     retransmissions would be stale for ever. A root keeps the results of its last released
//     chunks per index (JobParams::result_cache of them): a stale packet whose chunk is still
//     cached is answered with that result (cached_result, to its sender only). It cannot return
//     a wrong result: an entry is keyed by the full seq, written once when its complete chunk
//     is released (the chunk is never aggregated again), and cleared by reset() (a new
//     sequence space). Each index keeps its c = result_cache highest released seqs (a release
//     below all of them is not cached). Bound: a worker lacking chunk s (its lowest missing one)
//     with window k x D sends nothing at or beyond s + kD, so no chunk at or beyond s + kD
//     completes and at most k chunks of s's index at or above s are ever released (by proof, or
//     by obsolete eviction); they are among the c highest when k <= c. With the other workers
//     within D, a proof release of s + jD needs the violator's packet for s + (j + 1)D and an
//     obsolete one an honest worker holding s + (j + 1)D: j < k - 1, so c = k - 1 suffices. So
//     c = 2 covers every worker at up to 2D, and one worker at up to (c + 1)D with the others
//     within D (a worker further ahead still completes, refused as above, but a result it
//     loses may have left the cache: stale for ever to it). Expiry releases
//     complete chunks too (its result is cached), so it adds one: at most k chunks at or above s
//     are then released (only chunks below s + kD complete). c = 2 still covers every worker at
//     up to 2D; one worker alone beyond D needs c >= k.
//   - Lowest missing result (proto::kFlagLowestMissing, docs/protocol.md): a root given a data
//     packet that states its senders' lowest missing result L uses it instead of the window
//     (on_data_exact): the packet proves every complete entry of its index below L (exact, so a
//     sender beyond its window makes no false proof), and a contribution with seq - L >= 2D gets
//     no entry (no_slot, overrun_refusals). So every chunk absorbed from any sender lies within
//     2D of what it held: the case above where two entries and result_cache 2 keep every worker
//     live through expiries, whatever window it keeps. L itself (lead 0) is never refused, nor
//     is an already absorbed contribution (L only rises). An aggregator applies the same two
//     rules (its refusal drops the packet: no_slot, the sender retransmits once it caught up),
//     so every contribution it absorbs also lies within 2D of its sender's L; its partial states
//     the least L of its contributions when all stated one (partial_lowest_missing()): a true
//     statement for every sender in its P-BM, within 2D of seq, so the root (same D) never
//     refuses it, first sent or re-sent. Having no result cache, such an aggregator keeps its
//     floor (floor_reach()) and obsolete evictions (obsolete_reach()) at distances where every
//     worker provably holds the chunk, so it never answers stale to a sender that lacks it.
//   - Exactly once towards the parent: a chunk that completed here is never aggregated here again
//     (every way a complete entry leaves — release, obsolete eviction, expiry — records it as
//     released, so its later packets are stale). Only complete entries are
//     released or evicted; an aggregating entry leaves only by expire() or, at a root, by an
//     overrun preemption (its partial sum is then discarded and retransmissions start it afresh).
//   - Fallback stickiness (aggregator): when a chunk's first packet finds no free entry it goes to
//     the fallback path (towards the root, which reduces it) and fallback_until = seq; every later
//     packet of a seq <= fallback_until without an entry also goes there. An entry, once
//     allocated, is only ever removed when complete (release / obsolete) or by expire(), and a seq
//     is allocated only when it is not released and above fallback_until, so a chunk is
//     either aggregated here entirely or forwarded entirely: never split.
//   - Sequence numbers compare with RFC 1982 serial arithmetic (int32 difference), so a job may
//     run through 2^32 and wrap. Requires every seq in flight at an index to lie within 2^31 of
//     that index's floors (trivially true for a job that advances; see reset()).
//
// Hot path: on_data(), expire() and store_result() never allocate, lock or throw. All memory is
// allocated in the constructor: per entry the two bitmaps (B, R) and a 64-byte-aligned
// accumulator of reduce::acc_bytes(elem_type, max_elems) bytes (in the aggregation core), and per
// index kViolationHeadroom x D / W released bits. Not thread safe: one lcore owns a table (the
// chunks of its lane are steered to its lcore).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "agg/agg_core.h"
#include "ina/protocol.h"
#include "reduce/reduce.h"
#include "wire/bitstring.h"

namespace ina {

// RFC 1982 serial-number comparison on 32-bit sequence numbers: the sign of (a - b) taken as an
// int32 (modular conversion, well defined in C++20). a is "after" b when the result is > 0.
constexpr int32_t seq_diff(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b); }
constexpr bool seq_le(uint32_t a, uint32_t b) { return seq_diff(a, b) <= 0; }

enum class Role : uint8_t {
    aggregator,  // completes send one data packet (P-BM = A-BM) to the parent; no slot: fallback
    root,        // completes send the result to the workers; no slot: drop (no_slot)
};

struct JobParams {
    uint32_t job_id = 0;
    wire::BitString abm;             // A-BM: the BSL is abm.bsl_bits(); must not be all zero
    uint16_t set_id = 0;             // SI of the A-BM (and so of every accepted P-BM)
    reduce::Op op = reduce::Op::sum;
    reduce::ElemType elem_type = reduce::ElemType::fp32;
    uint32_t max_elems = 0;          // per chunk: 1 .. 65535 (the header's element count field)
    uint32_t window = 0;             // W: slot indices, >= the workers' window; a power of two,
                                     // 1 .. kMaxWindow (so seq mod W survives the 2^32 wrap)
    Role role = Role::aggregator;
    // The workers' window (chunks a worker keeps outstanding): 0 means `window`. Release proofs
    // and obsolete evictions are measured in it, so a switch may hold fewer slots than the
    // workers keep in flight (the excess falls back) without ever releasing a result early.
    // A power of two >= window, so seq - worker_window maps to seq's own index.
    uint32_t worker_window = 0;
    uint64_t idle_timeout = 0;       // in the caller's time unit (the `now` of on_data / expire)
    // Steering: the job's chunks are spread over `lanes` tables (one per worker lcore) by
    // chunk_place(); this table is lane `lane` and holds only that lane's slot indices.
    uint16_t lanes = 1;
    uint16_t lane = 0;
    // Root only: results of released chunks kept per slot index (0 .. kMaxResultCache), answered
    // to a sender beyond the window that lost its result (see "Root result cache" above). Memory:
    // lane_indices() x result_cache x (max_elems x elem_size(elem_type), rounded up to 64 bytes).
    uint32_t result_cache = 0;
    // Reproducible float sum (src/reduce/README.md "Deterministic mode"): slots accumulate int64
    // fixed point with fraction_bits fractional bits; partials travel as int64 elements
    // (reduce::kFixedWireType), the root emits the float type. Float elem_type and op sum only.
    bool deterministic = false;
    uint8_t fraction_bits = 0;
};

// Where chunk `seq` of a job with slot window `window` lives when `lanes` lcores share the job:
// the owning lane and the slot index inside that lane's table. Steering and slot indexing are
// this one function, so that seq and seq - k * window (a release proof's target, an obsolete
// entry) always meet in the same lane and index, for any lane count, and every index of every
// lane is used. Lanes beyond `window` get no chunks.
struct ChunkPlace {
    uint16_t lane = 0;
    uint32_t index = 0;
};
constexpr ChunkPlace chunk_place(uint32_t seq, uint32_t window, uint16_t lanes) {
    const uint32_t global = seq & (window - 1);
    return {static_cast<uint16_t>(global % lanes), global / lanes};
}
// global / lanes for every global < kMaxWindow (2^20) and lanes >= 1, as one multiply and shift:
// a 32-bit division is ~10-14 cycles on the packet path's critical chain (the slot index every
// later load of the chunk's entry waits for). Exact: m = ceil(2^36 / lanes) exceeds 2^36 / lanes
// by less than 1, so global x m / 2^36 exceeds global / lanes by less than global / 2^36 < 1 / lanes
// (the Granlund-Montgomery bound, N = 20 numerator bits, lanes <= 2^16); global x m < 2^56.
class LaneDivider {
public:
    constexpr explicit LaneDivider(uint16_t lanes = 1)
        : mul_(((uint64_t{1} << kShift) + lanes - 1) / lanes) {}
    constexpr uint32_t operator()(uint32_t global) const {
        return static_cast<uint32_t>((uint64_t{global} * mul_) >> kShift);
    }

private:
    static constexpr unsigned kShift = 36;
    uint64_t mul_;
};
// Slot indices of one lane's table (the same for every lane: the first lanes may own one more).
constexpr uint32_t lane_indices(uint32_t window, uint16_t lanes) {
    return (window + lanes - 1) / lanes;
}

// A sender that exceeds the workers' window doubles the release distance, up to this factor.
inline constexpr uint32_t kViolationHeadroom = 4;

// Result cache entries per slot index at a root: 2 covers every worker at up to 2 x the workers'
// window, beyond which a root deadlocks on its slots whatever it caches.
inline constexpr uint32_t kMaxResultCache = 2;

// W is bounded so that seq - 2W comparisons stay far inside the serial-arithmetic range and the
// table stays a sane size (2 entries per index).
inline constexpr uint32_t kMaxWindow = 1u << 20;
static_assert(kMaxWindow <= 1u << 20, "LaneDivider is exact for slot indices below 2^20 only");

// Why JobParams are unusable, or "" when they are valid.
std::string_view validate(const JobParams& p);

// Header fields a data packet must share with its job; the caller checks them (after parse()) before
// on_data(). Bit flags, 0 = the header matches. A deterministic job takes two element types: its
// float type (a worker's contribution) and int64 (a partial sum in the job's fixed point).
namespace mismatch {
inline constexpr uint8_t job = 0x01;
inline constexpr uint8_t op = 0x02;
inline constexpr uint8_t elem_type = 0x04;
inline constexpr uint8_t bsl = 0x08;     // BitString length differs from the A-BM's
inline constexpr uint8_t set_id = 0x10;
inline constexpr uint8_t type = 0x20;    // not a data packet (results never enter a chunk table)
}  // namespace mismatch
uint8_t header_mismatch(const proto::Header& h, const JobParams& p);
// Name of one mismatch bit ("job", "op", ...), "unknown" for anything else.
std::string_view mismatch_name(uint8_t bit);

// Why a contribution of a job was rejected before its chunk table saw it (the table's own
// rejections are verdicts): a header field (mismatch bit index 0..5) or the job's ingress rules.
inline constexpr size_t kRejectIngressPort = 6;
inline constexpr size_t kRejectIngressSource = 7;
inline constexpr size_t kNumRejectReasons = 8;
// "job", "op", "elem_type", "bsl", "set_id", "type", "ingress_port", "ingress_source".
std::string_view reject_reason_name(size_t reason);

// What on_data() did with a contribution. Each is a counter reason. The caller's action:
enum class Verdict : uint8_t {
    not_mine,       // P-BM & A-BM == 0: route on untouched
    outside_abm,    // P-BM has bits outside A-BM: drop (count)
    bad_length,     // element count 0 or > max_elems: drop
    count_mismatch, // element count differs from the chunk's first contribution: drop
    absorbed,       // added to the chunk; not complete yet: consume the packet
    completed,      // added and the chunk is now complete: emit (aggregator: data to the parent
                    // with P-BM = A-BM; root: the result), payload from store_result()
    duplicate,      // every bit of P-BM already absorbed: not added again; drop
    overlap,        // some bits of P-BM absorbed, some not: cannot subtract, drop (sender retries)
    resend_result,  // chunk already complete, so the sender lacks the result: re-emit it (root:
                    // result to that sender; aggregator: data to the parent, retransmit flag)
    stale,          // late duplicate of a chunk that was complete and released here: drop
    fallback,       // aggregator, no slot (or the chunk already fell back): forward the packet
                    // unaggregated towards the root with the fallback flag
    no_slot,        // root, no slot: drop; the worker retransmits
    cached_result,  // root: the chunk was released, its result is still in the result cache:
                    // re-emit it to that sender only (store_result() reads the cache)
};
inline constexpr size_t kNumVerdicts = 13;
std::string_view to_string(Verdict v);

// Plain counters, owned by the table's lcore (read them from elsewhere only as a racy snapshot).
struct ChunkCounters {
    std::array<uint64_t, kNumVerdicts> verdicts{};  // indexed by Verdict
    uint64_t slot_timeouts = 0;       // entries freed by expire()
    uint64_t obsolete_evictions = 0;  // complete entries reclaimed for seq >= theirs + 2W
    uint64_t window_violations = 0;   // proofs from a sender beyond the workers' window
    uint64_t rx_retransmit = 0;       // contributions carrying kFlagRetransmit
    uint64_t rx_fallback_flag = 0;    // contributions carrying kFlagFallback
    // Fallback verdicts by reason: the chunk's first packet found no free slot, or the chunk
    // had already fallen back (so its other contributions follow it).
    uint64_t fallback_no_slot = 0;
    uint64_t fallback_sticky = 0;
    // Root with a result cache: contributions for released chunks answered from it (hits), or
    // whose chunk it no longer holds (misses: answered stale: the sender held the result unless it
    // ran beyond the bound in "Root result cache" above).
    uint64_t result_cache_hits = 0;
    uint64_t result_cache_misses = 0;
    // Root: contributions of a chunk 2W or more ahead of one still aggregating at its index,
    // refused (no_slot), and aggregating chunks that far ahead whose entry a pending chunk took
    // (partial discarded). Only a worker beyond 2 x the window causes either.
    uint64_t overrun_refusals = 0;
    uint64_t overrun_preemptions = 0;
    std::array<uint64_t, kNumRejectReasons> rejected{};  // by reject reason, before the table
    // Deterministic jobs: elements quantized here that saturated (|x| beyond the fixed-point
    // range, or Inf), underflowed (non-zero, below 2^-(fraction_bits+1)) or were NaN.
    uint64_t fixed_saturated = 0;
    uint64_t fixed_underflow = 0;
    uint64_t fixed_nan = 0;
    uint64_t operator[](Verdict v) const { return verdicts[static_cast<size_t>(v)]; }
};

// INA's lifecycle policy over the aggregation core (agg/agg_core.h): the core holds each
// entry's contributors, element count, accumulator and result and guarantees exactly-once and
// no early result; this class decides which entry a chunk gets and when it leaves (the rules
// above).
class ChunkTable {
public:
    using State = agg::SlotState;  // empty, aggregating, complete

    // Allocates everything. Throws std::invalid_argument if validate(p) is not "" (control plane
    // only). `k` chooses the kernel table (tests force an ISA); results are bit-identical on all.
    explicit ChunkTable(const JobParams& p);
    ChunkTable(const JobParams& p, const reduce::Kernels& k);
    ~ChunkTable();
    ChunkTable(const ChunkTable&) = delete;
    ChunkTable& operator=(const ChunkTable&) = delete;

    // One data packet of this job (header already checked with header_mismatch()): `pbm` is the
    // P-BM (abm.size_bytes() long, wire order), `payload` elem_count elements in wire format,
    // `flags` the header flags (only counted: a fallback-flagged packet from a child switch is
    // absorbed here like any other, which is safe because stickiness is decided per node),
    // `now` the caller's clock (for expire()).
    // `enc`: how the payload is encoded (encoding_of() the header's element type).
    // `lowest_missing`: the header's lowest missing result, read only when `flags` carries
    // proto::kFlagLowestMissing (then a root uses the exact rules of "Lowest missing result").
    Verdict on_data(const uint8_t* pbm, uint32_t seq, uint32_t elem_count, const void* payload,
                    uint8_t flags, uint64_t now,
                    agg::Encoding enc = agg::Encoding::native,
                    uint32_t lowest_missing = 0) noexcept {
        return bs_bytes_ == 8 ? on_data_words<true>(pbm, seq, elem_count, payload, flags, now,
                                                    enc, lowest_missing)
                              : on_data_words<false>(pbm, seq, elem_count, payload, flags, now,
                                                     enc, lowest_missing);
    }

    // header_mismatch(h, params()) == 0, from fields kept ready at construction: the packet
    // path's test per contribution (the out-of-line header_mismatch names the reason).
    bool header_matches(const proto::Header& h) const noexcept {
        return h.type == proto::PacketType::data && h.job_id == params_.job_id &&
               h.op == static_cast<uint8_t>(params_.op) && h.bsl_code == bsl_code_ &&
               h.set_id == params_.set_id &&
               (h.elem_type == static_cast<uint8_t>(params_.elem_type) ||
                (params_.deterministic &&
                 h.elem_type == static_cast<uint8_t>(reduce::kFixedWireType)));
    }

    // The encoding of a (header-checked) packet of this job with wire element type `elem_type`:
    // fixed_point for int64 in a deterministic job, else native.
    agg::Encoding encoding_of(uint8_t elem_type) const noexcept {
        return params_.deterministic && elem_type == static_cast<uint8_t>(reduce::kFixedWireType)
                   ? agg::Encoding::fixed_point
                   : agg::Encoding::native;
    }
    // The element type of this node's partial results towards its parent: the job's, or int64
    // fixed point in a deterministic job (a float is rounded only once, at the root).
    uint8_t partial_elem_type() const noexcept {
        return static_cast<uint8_t>(params_.deterministic ? reduce::kFixedWireType
                                                          : params_.elem_type);
    }

    // Writes the result of complete chunk `seq` (narrowed to the wire type with the kernel's
    // store), or of a released chunk still in the result cache, to `out` and returns its element
    // count; 0 (nothing written) if seq has neither here. `out` must hold
    // count * elem_size(elem_type) bytes (any alignment).
    // With `enc` fixed_point (deterministic jobs) the exact int64 sum of a complete chunk is
    // written instead, 8 bytes per element: an aggregator's partial (the cache, a root's, holds
    // only results in the job's element type).
    // With `sum`, *sum gets the one's-complement sum (RFC 1071, folded, not inverted) of the
    // bytes written (agg::AggCore::store_result): a datagram's checksum without a second pass.
    uint32_t store_result(uint32_t seq, void* out, agg::Encoding enc = agg::Encoding::native,
                          uint32_t* sum = nullptr) const noexcept;
    // An aggregator's partial of complete chunk `seq`: true, with *lowest the least of the latest
    // lowest missing results its contributors (A-BM bits) stated to this lane, when every
    // contribution absorbed into seq stated one (proto::kFlagLowestMissing) and every contributor
    // has; then the partial carries the flag and that word. Computed at each (re-)send: a
    // minimum stored at completion would go stale, and the root could never see a contributor
    // that caught up prove an older chunk (a deadlock the chunk simulator found). True for every
    // contributor, and within 2D of seq (each stated at least its absorbed low, seq - low < 2D),
    // so the root (same D) never refuses it. False (flag clear) otherwise, or if seq has no entry.
    bool partial_lowest_missing(uint32_t seq, uint32_t* lowest) const noexcept;
    // Flags the emitted result (or aggregate) must carry: proto::kFlagEcnEcho when any
    // contribution that reached seq's entry carried it (the caller sets kFlagEcnEcho in the flags
    // it passes to on_data for a CE-marked packet). 0 if seq has no entry (nor cached result).
    uint8_t result_flags(uint32_t seq) const noexcept;
    // The state of `seq`'s entry (empty if it has none).
    State state_of(uint32_t seq) const noexcept;

    // Frees every non-empty entry idle for more than idle_timeout (a dead job or worker: its
    // releases never come). Returns how many (also counted as slot_timeouts). An expired complete
    // chunk is recorded as released (its later packets are stale: it is never emitted twice); an
    // expired aggregating chunk loses its partial sum and retransmissions start it afresh. O(2W).
    size_t expire(uint64_t now) noexcept { return expire(now, entries_.size()); }
    // The same over at most `budget` entries, continuing where the previous call stopped, so the
    // packet path sweeps a large table a little at a time (a full pass every 2W / budget calls).
    size_t expire(uint64_t now, size_t budget) noexcept;

    // Counts a contribution of this job rejected before on_data (reject reason index).
    void count_reject(size_t reason) noexcept { ++counters_.rejected[reason % kNumRejectReasons]; }

    // Forgets every entry and floor (job restarted with a new sequence space). Control plane.
    void reset() noexcept;

    size_t slots_in_use() const noexcept { return core_.in_use(); }
    size_t capacity() const noexcept { return entries_.size(); }  // 2 x lane_indices()
    // Result cache entries of this lane (lane_indices() x result_cache) and those holding one.
    size_t result_cache_capacity() const noexcept { return cached_.size(); }
    size_t results_cached() const noexcept;
    // The lane (worker lcore) that owns chunk seq: chunk_place(seq, window, lanes).lane.
    uint16_t lane_of(uint32_t seq) const noexcept {
        const uint32_t global = seq & (window_ - 1);
        return static_cast<uint16_t>(global - lane_div_(global) * lanes_);
    }
    // A copy: the quantizers' counts live in the aggregation core and are merged in here.
    ChunkCounters counters() const noexcept {
        ChunkCounters c = counters_;
        c.fixed_saturated = core_.fixed_stats().saturated;
        c.fixed_underflow = core_.fixed_stats().underflow;
        c.fixed_nan = core_.fixed_stats().nan;
        return c;
    }
    const JobParams& params() const noexcept { return params_; }

private:
    // The policy's side of an entry; entries_[i] is core slot i (state, contributors B, count
    // and accumulator live there).
    struct Entry {
        uint32_t seq = 0;
        uint8_t flags = 0;           // kFlagEcnEcho if a contribution carried it
        uint64_t last_activity = 0;
        uint8_t* released = nullptr;  // R: bits proven to hold the result (bs_bytes_)
        // Every absorbed contribution stated its sender's lowest missing result.
        bool lowest_stated = false;
    };
    // A released chunk's result (root result cache); bytes at cache_bytes_ + i x cache_stride_.
    struct Cached {
        uint32_t seq = 0;
        uint32_t count = 0;  // elements; 0 = the entry holds nothing
        uint8_t flags = 0;
    };
    // Per index: the released set (floor + ring) and fallback's high-water mark. *_valid false =
    // none yet.
    struct IndexState {
        uint32_t released_floor = 0;  // every chunk here <= this is released
        uint32_t fallback_until = 0;  // highest seq here sent to fallback
        bool floor_valid = false;
        bool fallback_valid = false;
    };

    uint32_t slot(const Entry& e) const noexcept {
        return static_cast<uint32_t>(&e - entries_.data());
    }
    State state(const Entry& e) const noexcept { return core_.state(slot(e)); }
    Verdict finish(Verdict v) noexcept {
        ++counters_.verdicts[static_cast<size_t>(v)];
        return v;
    }
    // on_data() after the window proof, or at a root for a packet carrying its sender's lowest
    // missing result (on_data_exact: exact proofs and the lead refusal); place() finds or
    // allocates the chunk's entry.
    // Each of the packet path's members is a template on kOneWord: the A-BM is one 64-bit word
    // (BSL 64, the common case), so every BitString operation is one word, without a loop.
    template <bool kOneWord>
    Verdict on_data_words(const uint8_t* pbm, uint32_t seq, uint32_t elem_count,
                          const void* payload, uint8_t flags, uint64_t now, agg::Encoding enc,
                          uint32_t lowest_missing) noexcept;
    template <bool kOneWord>
    Verdict on_data_exact(uint32_t index, Entry* pair, const uint8_t* pbm, uint32_t seq,
                          uint32_t elem_count, const void* payload, uint8_t flags, uint64_t now,
                          agg::Encoding enc, uint32_t lowest_missing) noexcept;
    // `stated`: the packet states its sender's lowest missing result.
    template <bool kOneWord>
    Verdict place(uint32_t index, Entry* pair, Entry* own, const uint8_t* pbm, uint32_t seq,
                  uint32_t elem_count, const void* payload, uint8_t flags, uint64_t now,
                  agg::Encoding enc, bool stated) noexcept;
    // The BitString length in bytes, a constant in the one-word instantiations.
    template <bool kOneWord>
    size_t bs_len() const noexcept { return kOneWord ? 8 : bs_bytes_; }
    Entry* find(uint32_t index, uint32_t seq) noexcept;
    const Entry* find(uint32_t index, uint32_t seq) const noexcept;
    // The entry the last on_data() added to, if it still holds seq: what the emitter asks about
    // right after a contribution completed a chunk (its flags, lowest missing and result),
    // without a look at the index. nullptr: ask find().
    const Entry* placed(uint32_t seq) const noexcept {
        return last_placed_ != nullptr && last_placed_->seq == seq &&
                       state(*last_placed_) != State::empty
                   ? last_placed_
                   : nullptr;
    }
    template <bool kOneWord>
    void release(uint32_t index, Entry* proven, const uint8_t* pbm, uint64_t now) noexcept;
    void free_entry(Entry& e) noexcept;
    // The released set of an index: record a released chunk / ask whether seq is released.
    void mark_released(uint32_t index, uint32_t seq) noexcept;
    void widen_distance() noexcept;
    // Aggregator: records that the senders in pbm hold every result below `low`.
    void note_lowest(const uint8_t* pbm, uint32_t low) noexcept;
    // Root result cache: keep complete entry e's result (it is being released) / find seq's.
    void cache_result(uint32_t index, const Entry& e) noexcept;
    const Cached* cached(uint32_t index, uint32_t seq) const noexcept;
    // Releases complete entry e: recorded as released, its result cached (root), its slot freed.
    void retire(uint32_t index, Entry& e) noexcept;
    bool is_released(uint32_t index, uint32_t seq) const noexcept;
    // How far below a released chunk the floor may rise: D, or 2D at a root (its workers may
    // keep up to 2D in flight: the result cache's bound). An aggregator that has seen a sender
    // state its lowest missing result: max(D', 2D) (D' the widened distance, D the configured
    // one): such a sender's contribution to the released s had a lead below 2D, so it held
    // every chunk up to s - 2D, and an old sender within D' every chunk up to s - D'.
    uint32_t floor_reach() const noexcept {
        if (params_.role == Role::root) return 2 * distance_;
        return stated_lowest_ ? std::max(distance_, 2 * base_distance_) : distance_;
    }
    // How far ahead of a complete entry a packet must be to evict it as obsolete: 2D', or at an
    // aggregator that has seen a stated lowest missing result max(D' + 2D, 4D): the packet's
    // sender then holds a chunk at or beyond c + 2D (an old sender within D' holds seq - D', a
    // stating one everything below its low > seq - 2D), which every worker contributed to with
    // a lead below 2D, so every worker holds c. With 2D' a stating worker at a lead in [D, 2D)
    // might still lack c, and an aggregator has no result cache: it would be stale to it for
    // ever. (A root keeps 2D: its result cache covers that worker.)
    uint32_t obsolete_reach() const noexcept {
        if (params_.role == Role::root || !stated_lowest_) return 2 * distance_;
        return std::max(distance_ + 2 * base_distance_, 4 * base_distance_);
    }
    // A root: chunk `ahead` is 2D or more beyond `behind` (same index), so only a worker
    // beyond 2D can have sent it while `behind` is pending.
    bool overruns(uint32_t ahead, uint32_t behind) const noexcept {
        return seq_diff(ahead, behind) >= static_cast<int32_t>(2 * distance_);
    }
    uint64_t* ring_of(uint32_t index) noexcept {
        return released_ring_.data() + index * ring_words_;
    }
    const uint64_t* ring_of(uint32_t index) const noexcept {
        return released_ring_.data() + index * ring_words_;
    }
    uint32_t ring_bit(uint32_t seq) const noexcept { return (seq >> window_shift_) & (span_ - 1); }
    uint32_t index_of(uint32_t seq) const noexcept { return lane_div_(seq & (window_ - 1)); }

    JobParams params_;
    agg::AggCore core_;
    size_t bs_bytes_ = 0;
    uint8_t bsl_code_ = 0;  // the A-BM's BSL code point (RFC 8296), as a header carries it
    uint32_t window_ = 1;
    uint32_t distance_ = 1;  // release distance: the workers' window (>= window_)
    uint32_t base_distance_ = 1;  // the configured workers' window (distance_ before widening)
    bool stated_lowest_ = false;  // a packet stating its sender's lowest missing result came
    uint32_t window_shift_ = 0;  // log2(window_)
    uint32_t max_distance_ = 1;  // how far window violations may widen distance_
    uint32_t span_ = 1;          // max_distance_ / window_: released chunks tracked above the floor
    size_t ring_words_ = 1;      // 64-bit words of one index's ring
    uint32_t lanes_ = 1;
    LaneDivider lane_div_;  // x / lanes_

    std::vector<Entry> entries_;      // entries_[2i], entries_[2i + 1] belong to (local) index i
    Entry* last_placed_ = nullptr;    // into entries_ (never reallocated after construction)
    std::vector<IndexState> index_;   // this lane's indices
    std::vector<uint64_t> released_ring_;  // per index ring_words_: bit ring_bit(s) = s released
    std::vector<uint8_t> proofs_;     // R of every entry
    std::vector<Cached> cached_;       // per index result_cache entries (root), else empty
    // Aggregator: per BitString bit position (byte x 8 + bit), the highest lowest missing result
    // its sender stated here, and whether it stated one (note_lowest()).
    std::vector<uint32_t> lowest_of_;
    std::vector<uint8_t> lowest_known_;
    std::unique_ptr<uint8_t[]> cache_bytes_;  // their results in the wire type, 64-byte strides
    uint8_t* cache_base_ = nullptr;           // cache_bytes_ aligned to 64
    size_t cache_stride_ = 0;
    uint32_t cache_depth_ = 0;
    size_t sweep_next_ = 0;  // where the next incremental expire() starts
    ChunkCounters counters_;
};

}  // namespace ina
