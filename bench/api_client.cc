// SPDX-License-Identifier: Apache-2.0
// Route changes through the control API from C++ clients, so the figure is the server's rate,
// not a Python client's (bench/scale.py): each of --clients threads holds one keep-alive
// connection and sends --changes single POST /api/v1/routes, then as many DELETEs, one at a
// time (each waits for its answer), on prefixes of its own.
//
//   api_client --port N [--clients 1] [--changes 5000] [--via 10.1.0.2] [--first-octet 99]
//
// Prints one JSON object: changes/s over all clients, per-request p50/p99 (ms), and the
// client's own CPU time per request (user + system, all threads), so the reader sees how much
// of a round trip the client costs.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    int port = 0;
    int clients = 1;
    int changes = 5000;
    std::string via = "10.1.0.2";
    int first_octet = 99;
};

struct ClientResult {
    std::vector<double> latency_s;
    std::string error;
};

class Connection {
public:
    explicit Connection(int port) : port_(port) { open(); }
    ~Connection() {
        if (fd_ >= 0) {
            ::close(fd_);
        }
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    bool ok() const { return fd_ >= 0; }

private:
    void open() {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port_));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        const int yes = 1;
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd_);
            fd_ = -1;
        }
    }

public:
    // Sends one request and reads its answer; "" on success, else what went wrong.
    std::string exchange(const std::string& request) {
        for (size_t sent = 0; sent < request.size();) {
            const ssize_t n = ::send(fd_, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
            if (n <= 0) {
                return "send failed";
            }
            sent += static_cast<size_t>(n);
        }
        // Head, then Content-Length bytes of body; bytes past it stay for the next answer.
        size_t head_end = std::string::npos;
        size_t length = 0;
        for (;;) {
            if (head_end == std::string::npos) {
                head_end = in_.find("\r\n\r\n");
                if (head_end != std::string::npos) {
                    head_end += 4;
                    const size_t at = lower(in_.substr(0, head_end)).find("content-length:");
                    if (at == std::string::npos) {
                        return "answer without Content-Length";
                    }
                    length = std::strtoul(in_.c_str() + at + 15, nullptr, 10);
                }
            }
            if (head_end != std::string::npos && in_.size() >= head_end + length) {
                break;
            }
            char buf[8192];
            const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
            if (n <= 0) {
                return "connection closed";
            }
            in_.append(buf, static_cast<size_t>(n));
        }
        const std::string answer = in_.substr(0, head_end + length);
        in_.erase(0, head_end + length);
        // The server closes a connection after control.max_requests_per_connection answers:
        // a new one, as an HTTP client library would open.
        if (lower(answer.substr(0, head_end)).find("connection: close") != std::string::npos) {
            ::close(fd_);
            in_.clear();
            open();
        }
        if (answer.compare(0, 12, "HTTP/1.1 200") != 0 ||
            (answer.find("\"ok\":true", head_end) == std::string::npos &&
             answer.find("\"ok\": true", head_end) == std::string::npos)) {
            return "refused: " + answer.substr(0, 300);
        }
        return "";
    }

private:
    static std::string lower(std::string s) {
        std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
        return s;
    }
    int port_;
    int fd_ = -1;
    std::string in_;
};

std::string prefix(const Options& o, int client, int i) {
    // 256 prefixes of /24 per second octet: client c uses second octets from c * 64.
    return std::to_string(o.first_octet) + "." + std::to_string(client * 64 + i / 256) + "." +
           std::to_string(i % 256) + ".0/24";
}

void run_client(const Options& o, int client, ClientResult& r) {
    Connection conn(o.port);
    if (!conn.ok()) {
        r.error = "cannot connect";
        return;
    }
    r.latency_s.reserve(2 * static_cast<size_t>(o.changes));
    for (int pass = 0; pass < 2; ++pass) {
        for (int i = 0; i < o.changes; ++i) {
            std::string req;
            if (pass == 0) {
                const std::string body = "{\"prefix\": \"" + prefix(o, client, i) + "\", \"via\": \"" +
                                         o.via + "\"}";
                req = "POST /api/v1/routes HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                      "application/json\r\nContent-Length: " +
                      std::to_string(body.size()) + "\r\n\r\n" + body;
            } else {
                req = "DELETE /api/v1/routes?prefix=" + prefix(o, client, i) +
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
            }
            const auto t0 = Clock::now();
            r.error = conn.exchange(req);
            r.latency_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            if (!r.error.empty()) {
                return;
            }
        }
    }
}

double percentile_ms(std::vector<double> v, double p) {
    if (v.empty()) {
        return 0;
    }
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())))] * 1e3;
}

double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        const char* v = argv[i + 1];
        if (k == "--port") {
            o.port = std::atoi(v);
        } else if (k == "--clients") {
            o.clients = std::atoi(v);
        } else if (k == "--changes") {
            o.changes = std::atoi(v);
        } else if (k == "--via") {
            o.via = v;
        } else if (k == "--first-octet") {
            o.first_octet = std::atoi(v);
        } else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (o.port <= 0 || o.clients < 1 || o.clients > 4 || o.changes < 1 || o.changes > 64 * 256) {
        std::fprintf(stderr, "usage: api_client --port N [--clients 1..4] [--changes 1..16384]\n");
        return 2;
    }
    std::vector<ClientResult> results(static_cast<size_t>(o.clients));
    std::vector<std::thread> threads;
    const double cpu0 = cpu_seconds();
    const auto t0 = Clock::now();
    for (int c = 0; c < o.clients; ++c) {
        threads.emplace_back(run_client, std::cref(o), c, std::ref(results[static_cast<size_t>(c)]));
    }
    for (auto& t : threads) {
        t.join();
    }
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;
    std::vector<double> all;
    for (const auto& r : results) {
        if (!r.error.empty()) {
            std::fprintf(stderr, "api_client: %s\n", r.error.c_str());
            return 1;
        }
        all.insert(all.end(), r.latency_s.begin(), r.latency_s.end());
    }
    std::printf("{\"clients\": %d, \"changes\": %zu, \"seconds\": %.4f, \"changes_per_s\": %.1f, "
                "\"ms_p50\": %.4f, \"ms_p99\": %.4f, \"client_cpu_us_per_change\": %.2f}\n",
                o.clients, all.size(), wall, static_cast<double>(all.size()) / wall,
                percentile_ms(all, 50), percentile_ms(all, 99),
                cpu / static_cast<double>(all.size()) * 1e6);
    return 0;
}
