// SPDX-License-Identifier: Apache-2.0
// A one-line progress bar for long AllReduces, drawn on a terminal only (ina-worker and the
// Python client). Not on any packet path: the worker's loop calls it between polls, at most
// every Client's progress interval.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ina::worker {

class ProgressBar {
public:
    // Tensors below this size finish too quickly for a bar to help: they get none.
    static constexpr uint64_t kMinBytes = 1 << 20;

    // Whether a bar for a tensor of `bytes` should be drawn on `fd`: enabled, fd a terminal
    // (never on a pipe or file, where it would be noise), and the tensor long enough.
    static bool wanted(bool enabled, int fd, uint64_t bytes);

    // Draws nothing until the first update(). `label` starts the line (e.g. "job 1 bfr 2").
    ProgressBar(int fd, std::string label, uint64_t total_bytes);
    // A bar left unfinished (the AllReduce failed) is ended with a newline, so an error
    // message starts on a line of its own.
    ~ProgressBar();
    ProgressBar(const ProgressBar&) = delete;
    ProgressBar& operator=(const ProgressBar&) = delete;

    // Redraws the line for `done` of `total` chunks; done == total draws 100% and ends it.
    void update(uint64_t done, uint64_t total);

private:
    void write_all(const char* s, size_t n) const;

    int fd_;
    std::string label_;
    uint64_t total_bytes_;
    std::chrono::steady_clock::time_point start_;
    bool drawn_ = false;
    bool finished_ = false;
};

}  // namespace ina::worker
