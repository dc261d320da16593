// SPDX-License-Identifier: Apache-2.0
// A per-lcore memo of FDB lookups for the bridge (l2_bridge's destination, l2_learn's source):
// a direct-mapped array of ((MAC, group), answer) that answers a pair seen before in ~10
// instructions where the lock-free rte_hash lookup costs ~300 (a miss, as for a flooded unknown
// unicast destination, scans both buckets). Absent pairs are memoised too. Only this lcore
// reads and writes it.
//
// Invariant (why it is never staler than the table): the FDB's one writer bumps its version
// after every change (release), and lookup() loads the version before it reads a slot, and
// forgets every slot when the version (or the table) differs from the one they were filled
// under. A slot is filled from a hash lookup made after that version was loaded, so it holds the
// answer of that version or a later one, and any later change empties the memo at the next
// lookup: the reader sees a change no later than its next lookup after the bump.
#pragma once

#include <rte_ether.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>

#include "dataplane/forwarding_tables.h"

namespace ina::dp {

class FdbCache {
public:
    static constexpr uint32_t kSlots = 256;  // 4 KiB

    // The FDB entry of (mac, group) in `tables`, as tables.fdb() would answer it.
    std::optional<FdbEntry> lookup(const ForwardingTables& tables, const rte_ether_addr& mac,
                                   uint16_t group) {
        const uint32_t v = tables.fdb_version();
        if (v != version_ || &tables != tables_) [[unlikely]] {
            slots_.fill(Slot{});
            version_ = v;
            tables_ = &tables;
        }
        uint64_t key = 0;
        std::memcpy(&key, mac.addr_bytes, RTE_ETHER_ADDR_LEN);
        key |= uint64_t{group} << 48;
        Slot& s = slots_[index(key)];
        if (s.key == key && (s.answer & kFilled) != 0) [[likely]] {
            if ((s.answer & kPresent) == 0) {
                return std::nullopt;
            }
            return FdbEntry{static_cast<uint16_t>(s.answer >> 32),
                            static_cast<uint32_t>(s.answer)};
        }
        const std::optional<FdbEntry> e = tables.fdb(mac, group);
        s.key = key;
        s.answer = kFilled | (e ? kPresent | uint64_t{e->port} << 32 | e->index : 0);
        return e;
    }

private:
    static constexpr uint64_t kFilled = uint64_t{1} << 63;
    static constexpr uint64_t kPresent = uint64_t{1} << 62;
    struct Slot {
        uint64_t key = 0;     // MAC in bits 0..47, group in 48..63
        uint64_t answer = 0;  // kFilled, kPresent, port in bits 32..47, index in 0..31; 0: empty
    };
    static uint32_t index(uint64_t key) {
        // Hosts differ in the MAC's last two bytes (bits 32..47 here); the group's low byte
        // (bits 48..55) spreads groups.
        return static_cast<uint32_t>((key >> 40) ^ (key >> 32) ^ (key >> 48)) & (kSlots - 1);
    }
    std::array<Slot, kSlots> slots_{};
    const ForwardingTables* tables_ = nullptr;
    uint32_t version_ = 0;
};

}  // namespace ina::dp
