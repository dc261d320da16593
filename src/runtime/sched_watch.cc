// SPDX-License-Identifier: Apache-2.0
#include "runtime/sched_watch.h"

#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace ina::runtime {

namespace {

// The first `key` line's number of a /proc status file ("voluntary_ctxt_switches:\t12").
bool status_value(const std::string& text, const char* key, uint64_t& out) {
    const size_t at = text.find(key);
    if (at == std::string::npos) {
        return false;
    }
    return std::sscanf(text.c_str() + at + std::strlen(key), " %lu", &out) == 1;
}

std::string read_small_file(const std::string& path) {
    std::string text;
    if (std::FILE* f = std::fopen(path.c_str(), "re")) {
        char buf[4096];
        size_t n = 0;
        while ((n = std::fread(buf, 1, sizeof buf, f)) != 0) {
            text.append(buf, n);
        }
        std::fclose(f);
    }
    return text;
}

}  // namespace

SchedWatch::~SchedWatch() {
    if (page_ != nullptr) {
        ::munmap(page_, static_cast<size_t>(::sysconf(_SC_PAGESIZE)));
    }
    if (fd_ >= 0) {
        ::close(fd_);
    }
}

void SchedWatch::attach_calling_thread() {
    tid_.store(static_cast<int>(::syscall(SYS_gettid)), std::memory_order_release);
    if (fd_ >= 0) {
        return;  // attached before (a relaunched loop on the same thread): the event stays
    }
    perf_event_attr attr{};
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_DUMMY;
    attr.exclude_kernel = 1;  // self-monitoring of user space: allowed at perf_event_paranoid 2
    attr.exclude_hv = 1;
    const long fd = ::syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1, -1,
                              PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        return;
    }
    void* page = ::mmap(nullptr, static_cast<size_t>(::sysconf(_SC_PAGESIZE)), PROT_READ,
                        MAP_SHARED, static_cast<int>(fd), 0);
    if (page == MAP_FAILED) {
        ::close(static_cast<int>(fd));
        return;
    }
    fd_ = static_cast<int>(fd);
    page_ = page;
    sequence_ = &static_cast<const perf_event_mmap_page*>(page)->lock;
    detecting_.store(true, std::memory_order_release);
}

ThreadSched read_thread_sched(const SchedWatch& watch) {
    ThreadSched s;
    const int tid = watch.thread_id();
    if (tid == 0) {
        return s;
    }
    s.detecting = watch.detecting();
    const std::string dir = "/proc/self/task/" + std::to_string(tid) + "/";
    const std::string status = read_small_file(dir + "status");
    const std::string schedstat = read_small_file(dir + "schedstat");
    // schedstat: "<ns on cpu> <ns waiting on a runqueue> <timeslices>"
    s.found = status_value(status, "\nvoluntary_ctxt_switches:", s.voluntary) &&
              status_value(status, "\nnonvoluntary_ctxt_switches:", s.involuntary) &&
              std::sscanf(schedstat.c_str(), "%lu %lu", &s.run_ns, &s.run_delay_ns) == 2;
    return s;
}

}  // namespace ina::runtime
