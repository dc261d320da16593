// SPDX-License-Identifier: Apache-2.0
// Messages from a worker lcore to the control plane over that lcore's SPSC ring. Fixed size so
// the ring carries them by value (rte_ring_elem); nothing here allocates.
#pragma once

#include <cstdint>

namespace ina::dp {

enum class EventType : uint8_t {
    neighbour_seen = 1,     // ARP from `ip` with `mac` arrived on `port`
    neighbour_refresh = 2,  // like neighbour_seen, but only update an entry that already exists
    resolve_request = 3,    // a packet needed `ip`'s MAC and none was known
    fdb_learn = 4,          // `mac` was seen as a source in L2 group `group` on `port`
    neighbour6_seen = 5,    // an NS or NA to the switch from `ip6` with `mac` arrived on `port`
};

// Commands from the control plane to one worker lcore (its SPSC command ring): attach or detach
// one piece of per-lcore feature state (an INA job's chunk table; later a RoCE queue pair). The
// lcore owns the state's contents; the control plane owns its memory and frees it only after the
// lcore has counted the detach in LcoreContext::detaches_done (detaches complete in ring order,
// so the count says which states are free). Nothing here can block the worker.
enum class CommandType : uint8_t {
    attach = 1,  // put `state` for (feature, id) in slot `slot`
    detach = 2,  // empty slot `slot` if it holds (feature, id), then count it in detaches_done
};

// Slots of per-lcore feature state. The control plane gives each attached (feature, id) one slot,
// the same on every lcore, and writes it into the snapshot's view (e.g. InaJobView::state_slot):
// the packet path finds its state by index, not by a search.
inline constexpr uint16_t kMaxFeatureStates = 128;
inline constexpr uint16_t kNoStateSlot = 0xffff;

struct Command {
    CommandType type;
    uint8_t feature = 0;  // dp::kFeature*
    uint16_t slot = 0;
    uint32_t id = 0;      // the feature's own key (an INA job id)
    void* state = nullptr;
};
static_assert(sizeof(Command) == 16, "ring elements are 16 bytes");

struct Event {
    EventType type;
    uint8_t reserved = 0;
    uint16_t port = 0;
    uint32_t ip = 0;  // host byte order
    uint8_t mac[6] = {};
    uint16_t group = 0;
    uint8_t ip6[16] = {};  // neighbour6_seen: the IPv6 address, network order
};
static_assert(sizeof(Event) == 32, "ring elements are 32 bytes");

}  // namespace ina::dp
