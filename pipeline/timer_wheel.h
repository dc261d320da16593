// SPDX-License-Identifier: Apache-2.0
// A per-lcore hashed timing wheel on TSC time: feature state that needs work later (chunk-table
// expiry sweeps today; RoCE retransmission next) arms a Timer embedded in itself, and the worker
// services the wheel every few loops. Arming and cancelling are O(1) (an intrusive doubly linked
// list per slot); servicing walks only the slots whose ticks have passed. Pure code: no DPDK, no
// allocation, one owner (the lcore) — nothing here is shared.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace ina::pipeline {

class TimerWheel;

struct Timer {
    // Called once the deadline has passed, with the timer already disarmed: it may arm itself
    // again (a periodic timer) or leave it, and must not touch other timers of the wheel.
    using Fire = void (*)(TimerWheel& wheel, Timer& timer, uint64_t now);

    Fire fire = nullptr;
    void* arg = nullptr;  // the owner's, for `fire`
    uint64_t deadline = 0;
    bool armed = false;

private:
    friend class TimerWheel;
    Timer* prev = nullptr;
    Timer* next = nullptr;
    size_t slot = 0;
};

class TimerWheel {
public:
    static constexpr size_t kSlots = 256;

    // `tick` is the wheel's resolution in TSC cycles (a timer fires within one tick plus one
    // service interval after its deadline); `now` is where time starts.
    void init(uint64_t tick, uint64_t now) {
        tick_ = tick != 0 ? tick : 1;
        current_ = now / tick_;
    }

    // (Re)arms `t` for `deadline`. A deadline already past fires at the next service.
    void arm(Timer& t, uint64_t deadline) {
        cancel(t);
        t.deadline = deadline;
        // The first tick boundary at or after the deadline: once service() has passed it, the
        // deadline has passed too, so a timer is never skipped in its own turn.
        uint64_t tick = deadline / tick_ + (deadline % tick_ != 0 ? 1 : 0);
        if (tick <= current_) {
            tick = current_ + 1;
        }
        t.slot = static_cast<size_t>(tick & (kSlots - 1));
        Timer*& head = slots_[t.slot];
        t.prev = nullptr;
        t.next = head;
        if (head != nullptr) {
            head->prev = &t;
        }
        head = &t;
        t.armed = true;
        ++armed_;
    }

    void cancel(Timer& t) {
        if (!t.armed) {
            return;
        }
        if (t.prev != nullptr) {
            t.prev->next = t.next;
        } else {
            slots_[t.slot] = t.next;
        }
        if (t.next != nullptr) {
            t.next->prev = t.prev;
        }
        t.prev = t.next = nullptr;
        t.armed = false;
        --armed_;
    }

    // Fires every armed timer whose deadline is at or before `now`. Returns how many fired.
    // Timers further away than one turn of the wheel stay in their slot until their own turn.
    size_t service(uint64_t now) {
        const uint64_t target = now / tick_;
        if (target <= current_) {
            return 0;
        }
        // A long gap visits each slot once: every timer is then checked against `now`.
        const uint64_t steps = target - current_ < kSlots ? target - current_ : kSlots;
        size_t fired = 0;
        for (uint64_t s = 1; s <= steps; ++s) {
            Timer* t = slots_[(current_ + s) & (kSlots - 1)];
            while (t != nullptr) {
                Timer* next = t->next;  // `fire` may re-arm t, possibly into this very slot
                if (t->deadline <= now) {
                    cancel(*t);
                    ++fired;
                    t->fire(*this, *t, now);
                }
                t = next;
            }
        }
        current_ = target;
        return fired;
    }

    size_t armed() const { return armed_; }
    uint64_t tick() const { return tick_; }

private:
    uint64_t tick_ = 1;
    uint64_t current_ = 0;  // the last tick serviced
    size_t armed_ = 0;
    std::array<Timer*, kSlots> slots_{};
};

}  // namespace ina::pipeline
