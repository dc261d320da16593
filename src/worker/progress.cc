// SPDX-License-Identifier: Apache-2.0
#include "worker/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

namespace ina::worker {

bool ProgressBar::wanted(bool enabled, int fd, uint64_t bytes) {
    return enabled && bytes >= kMinBytes && ::isatty(fd) == 1;
}

ProgressBar::ProgressBar(int fd, std::string label, uint64_t total_bytes)
    : fd_(fd), label_(std::move(label)), total_bytes_(total_bytes),
      start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
    if (drawn_ && !finished_) {
        write_all("\n", 1);
    }
}

void ProgressBar::update(uint64_t done, uint64_t total) {
    if (finished_ || total == 0) {
        return;
    }
    constexpr int kWidth = 30;
    const double fraction = static_cast<double>(done) / static_cast<double>(total);
    const int filled = static_cast<int>(fraction * kWidth);
    char bar[kWidth + 1];
    for (int i = 0; i < kWidth; ++i) {
        bar[i] = i < filled ? '#' : '-';
    }
    bar[kWidth] = '\0';
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double done_bytes = fraction * static_cast<double>(total_bytes_);
    const double gbit = seconds > 0 ? done_bytes * 8 / seconds / 1e9 : 0;
    const bool last = done >= total;
    // \r returns to the start of the line; \033[K clears what a longer earlier line left.
    char line[256];
    const int n = std::snprintf(line, sizeof line, "\r%s [%s] %3d%% %.1f/%.1f MiB %.2f Gbit/s%s%s",
                                label_.c_str(), bar, static_cast<int>(fraction * 100),
                                done_bytes / (1 << 20),
                                static_cast<double>(total_bytes_) / (1 << 20), gbit, "\033[K",
                                last ? "\n" : "");
    if (n > 0) {
        write_all(line, std::min(static_cast<size_t>(n), sizeof line - 1));
    }
    drawn_ = true;
    finished_ = last;
}

void ProgressBar::write_all(const char* s, size_t n) const {
    while (n > 0) {
        const ssize_t w = ::write(fd_, s, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return;  // a terminal that went away: the bar is cosmetic, the AllReduce goes on
        }
        s += w;
        n -= static_cast<size_t>(w);
    }
}

}  // namespace ina::worker
