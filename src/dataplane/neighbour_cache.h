// SPDX-License-Identifier: Apache-2.0
// A per-lcore memo of neighbour-table lookups for the routing stage: a direct-mapped array of
// (IPv4, station word) that answers a connected destination seen before in ~10 instructions
// where the lock-free rte_hash lookup costs ~200 (hash, bucket scan, key compare through a
// function pointer). Only this lcore reads and writes it.
//
// Invariant (why it is never staler than the table): the writer bumps the table's neighbour
// version after every change it makes (release), and a reader calls sync() once per burst
// before any get(); sync forgets every entry when the version (or the table) differs from the
// one the entries were filled under. An entry is filled from a lookup made after that version
// was loaded, so it holds the value of that version or a later one, and any later change
// empties the cache at the next burst: a reader sees a change at most one burst after the
// hash itself would have shown it. Unresolved neighbours are never memoised (they take the
// slow path, which asks the control plane to resolve them).
#pragma once

#include <array>
#include <cstdint>

#include "dataplane/forwarding_tables.h"

namespace ina::dp {

class NeighbourCache {
public:
    static constexpr uint32_t kSlots = 512;  // 8 KiB: a /23 of hosts without a conflict

    // Once per burst, before get(): empties the cache when the table changed since the
    // entries were filled (or is another table).
    void sync(const ForwardingTables& tables) {
        const uint32_t v = tables.neighbour_version();
        if (v != version_ || &tables != tables_) [[unlikely]] {
            slots_.fill(Entry{});
            version_ = v;
            tables_ = &tables;
        }
    }
    // The station word of `ip` (pack_station) if memoised, else 0 (look it up in the table).
    uint64_t get(uint32_t ip) const {
        const Entry& e = slots_[index(ip)];
        return e.ip == ip ? e.word : 0;
    }
    // Memoises a resolved station found in the table since the last sync.
    void put(uint32_t ip, uint64_t word) {
        if (word != 0) {
            slots_[index(ip)] = Entry{ip, word};
        }
    }

private:
    struct Entry {
        uint32_t ip = 0;
        uint64_t word = 0;  // 0: empty
    };
    // Hosts of one subnet differ in the low bits; the shifted bits spread several subnets.
    static uint32_t index(uint32_t ip) { return (ip ^ (ip >> 9)) & (kSlots - 1); }
    std::array<Entry, kSlots> slots_{};
    const ForwardingTables* tables_ = nullptr;
    uint32_t version_ = 0;
};

}  // namespace ina::dp
