// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <cstdint>

namespace ina::control {

// Cycles from `last` to `now`. `last` may be a worker's TSC read taken after the control
// thread read `now` (a worker stamps an FDB entry's last-seen word while the control thread
// ages the table), or a TSC of another core a few cycles ahead: a stamp in the future means
// "seen just now", never an age of nearly 2^64 cycles. Unsigned `now - last` there expired
// every MAC a worker was forwarding (150,000 spurious expiries a second under a replayed
// rack's traffic, the learning phase of bench/scale.py stuck below its target).
constexpr uint64_t cycles_since(uint64_t now, uint64_t last) {
    return now > last ? now - last : 0;
}

}  // namespace ina::control
