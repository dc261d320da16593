// SPDX-License-Identifier: Apache-2.0
#include "control/http_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "config/config.h"

namespace ina::control {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

thread_local ConnectionInfo* t_current = nullptr;

// How long a worker blocks in one poll() before it looks at `stopping` again.
constexpr int kStopCheckMs = 100;
// A closed connection is read and discarded this long after the answer so the client sees
// the answer, not a reset caused by its unread request body.
constexpr auto kLingerTime = milliseconds(1000);
// An answer is gathered up to this size before it is sent (a bigger one, /metrics with many
// lcores, leaves in pieces of this size).
constexpr size_t kFlushBytes = 256 * 1024;

int ms_until(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

std::string address_string(const sockaddr_storage& ss, int& port) {
    char text[INET6_ADDRSTRLEN] = "";
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
        inet_ntop(AF_INET, &a.sin_addr, text, sizeof text);
        port = ntohs(a.sin_port);
    } else if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
        inet_ntop(AF_INET6, &a.sin6_addr, text, sizeof text);
        port = ntohs(a.sin6_port);
    }
    return text;
}

std::string canned_response(int status, const char* reason, const std::string& message) {
    const std::string body = policy::error_body(message);
    return "HTTP/1.1 " + std::to_string(status) + " " + reason +
           "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The subject CN of the client's certificate, if OpenSSL verified one.
std::string verified_cn(SSL* ssl) {
    X509* cert = SSL_get1_peer_certificate(ssl);
    if (cert == nullptr) {
        return "";
    }
    std::string cn;
    if (SSL_get_verify_result(ssl) == X509_V_OK) {
        char buf[256] = "";
        if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, buf,
                                      sizeof buf) > 0) {
            cn = buf;
        }
    }
    X509_free(cert);
    return cn;
}

bool head_complete(const std::string& buffer, size_t from) {
    return buffer.find("\r\n\r\n", from) != std::string::npos ||
           buffer.find("\n\n", from) != std::string::npos;
}

}  // namespace

ConnectionInfo* current_connection() { return t_current; }

struct HttpListener::Connection {
    enum class State { handshake, idle, head, draining };

    int fd = -1;
    SSL* ssl = nullptr;
    ConnectionInfo info;
    std::string local_ip;
    int local_port = 0;
    State state = State::head;
    Clock::time_point deadline;
    short events = POLLIN;
    std::string buffer;   // received, not yet given to the parser
    std::string out;      // the answer being written: sent in one piece (its capacity is reused)
    size_t consumed = 0;  // buffer[0, consumed) was given
    uint32_t requests = 0;
    Clock::time_point accepted = Clock::now();
    bool counted = false;  // holds a ConnectionLimiter slot

    ~Connection() {
        if (ssl != nullptr) {
            SSL_free(ssl);
        }
        if (fd >= 0) {
            ::close(fd);
        }
    }

    size_t unread() const { return buffer.size() - consumed; }

    void compact() {
        if (consumed != 0) {
            buffer.erase(0, consumed);
            consumed = 0;
        }
    }

    // One non-blocking read into `buffer`: >0 bytes, 0 EOF, -1 error, -2 would block (with
    // `events` set to what it waits for).
    ssize_t read_some(size_t max) {
        char chunk[4096];
        const size_t want = std::min(max, sizeof chunk);
        if (ssl == nullptr) {
            const ssize_t n = ::recv(fd, chunk, want, MSG_DONTWAIT);
            if (n > 0) {
                buffer.append(chunk, static_cast<size_t>(n));
                return n;
            }
            if (n == 0) {
                return 0;
            }
            events = POLLIN;
            return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -2 : -1;
        }
        const int n = SSL_read(ssl, chunk, static_cast<int>(want));
        if (n > 0) {
            buffer.append(chunk, static_cast<size_t>(n));
            return n;
        }
        switch (SSL_get_error(ssl, n)) {
        case SSL_ERROR_WANT_READ:
            events = POLLIN;
            return -2;
        case SSL_ERROR_WANT_WRITE:
            events = POLLOUT;
            return -2;
        case SSL_ERROR_ZERO_RETURN:
            return 0;
        default:
            ERR_clear_error();
            return -1;
        }
    }

    // Best effort, without blocking: used for answers the poller gives itself.
    void send_now(const std::string& data) {
        if (ssl != nullptr) {
            SSL_write(ssl, data.data(), static_cast<int>(data.size()));
            ERR_clear_error();
        } else {
            [[maybe_unused]] const ssize_t n =
                ::send(fd, data.data(), data.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        }
    }

    // Our answer is complete: stop writing, keep reading until the client closes.
    void start_draining() {
        if (ssl != nullptr) {
            SSL_shutdown(ssl);
            ERR_clear_error();
        }
        ::shutdown(fd, SHUT_WR);
        state = State::draining;
        events = POLLIN;
        deadline = Clock::now() + kLingerTime;
    }
};

namespace {

// httplib reads and writes through this. Reads serve the bytes the poller already received
// first. Every wait ends at the request's deadline or when the listener stops.
class ConnectionStream : public httplib::Stream {
public:
    ConnectionStream(HttpListener::Connection& c, Clock::time_point deadline, uint64_t budget,
                     const std::atomic<bool>& stopping)
        : c_(c), deadline_(deadline), budget_(budget), stopping_(stopping) {}

    bool failed() const { return failed_; }

    // Sends what write() gathered. httplib writes an answer's head and body apart; gathered,
    // they leave in one send (one TCP segment for a small answer, as the client expects them).
    bool flush() const {
        size_t sent = 0;
        while (sent < c_.out.size() && !failed_) {
            const ssize_t n = send_some(c_.out.data() + sent, c_.out.size() - sent);
            if (n < 0) {
                failed_ = true;
            } else {
                sent += static_cast<size_t>(n);
            }
        }
        c_.out.clear();
        return !failed_;
    }

    // Whatever waits for the client first sends what it waits for (an interim "100 Continue").
    bool is_readable() const override {
        return c_.unread() != 0 || ((c_.out.empty() || flush()) && wait(POLLIN));
    }
    bool is_writable() const override { return wait(POLLOUT); }

    // Whatever framing the parser accepts, one request never reads more than its budget.
    ssize_t read(char* ptr, size_t size) override {
        if (budget_ == 0) {
            failed_ = true;
            return -1;
        }
        size = static_cast<size_t>(std::min<uint64_t>(size, budget_));
        // A read after a write waits for the client, which first needs what was written
        // (an interim "100 Continue").
        if (!c_.out.empty() && !flush()) {
            return -1;
        }
        if (c_.unread() != 0) {
            const size_t n = std::min(size, c_.unread());
            budget_ -= n;
            std::memcpy(ptr, c_.buffer.data() + c_.consumed, n);
            c_.consumed += n;
            return static_cast<ssize_t>(n);
        }
        c_.compact();
        for (;;) {
            const ssize_t n = c_.read_some(size);
            if (n > 0) {
                return read(ptr, size);
            }
            if (n == 0) {
                return 0;
            }
            if (n == -1 || !wait(c_.events)) {
                failed_ = true;
                return -1;
            }
        }
    }

    ssize_t write(const char* ptr, size_t size) override {
        if (failed_) {
            return -1;
        }
        c_.out.append(ptr, size);
        if (c_.out.size() >= kFlushBytes && !flush()) {
            return -1;
        }
        return static_cast<ssize_t>(size);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.info.peer_ip;
        port = c_.info.peer_port;
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        ip = c_.local_ip;
        port = c_.local_port;
    }
    socket_t socket() const override { return c_.fd; }

private:
    // One send of up to `size` bytes, waiting (to the deadline) while the socket is full.
    ssize_t send_some(const char* ptr, size_t size) const {
        for (;;) {
            if (c_.ssl != nullptr) {
                const int n = SSL_write(c_.ssl, ptr, static_cast<int>(std::min<size_t>(size, 1 << 20)));
                if (n > 0) {
                    return n;
                }
                const int e = SSL_get_error(c_.ssl, n);
                ERR_clear_error();
                if ((e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) ||
                    !wait(e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT)) {
                    return -1;
                }
            } else {
                const ssize_t n = ::send(c_.fd, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n >= 0) {
                    return n;
                }
                if ((errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || !wait(POLLOUT)) {
                    return -1;
                }
            }
        }
    }

    // Waits for `events` on the socket; false at the deadline or when stopping.
    bool wait(short events) const {
        if (events == POLLIN && c_.ssl != nullptr && SSL_pending(c_.ssl) > 0) {
            return true;
        }
        while (!stopping_.load(std::memory_order_relaxed)) {
            const int left = ms_until(deadline_);
            if (left == 0) {
                return false;
            }
            pollfd p{c_.fd, events, 0};
            const int r = ::poll(&p, 1, std::min(left, kStopCheckMs));
            if (r > 0) {
                return true;
            }
            if (r < 0 && errno != EINTR) {
                return false;
            }
        }
        return false;
    }

    HttpListener::Connection& c_;
    Clock::time_point deadline_;
    uint64_t budget_;
    const std::atomic<bool>& stopping_;
    mutable bool failed_ = false;
};

}  // namespace

HttpListener::HttpListener(ListenerOptions options, ServeFn serve)
    : options_(std::move(options)),
      serve_(std::move(serve)),
      limiter_(options_.max_connections, options_.max_connections_per_client) {}

HttpListener::~HttpListener() { stop(); }

bool HttpListener::start(std::string& error) {
    const auto addr = config::parse_listen_address(options_.listen);
    if (!addr) {
        error = "control " + options_.name + " listener: bad address " + options_.listen;
        return false;
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(addr->port);
    if (::getaddrinfo(addr->host.c_str(), port.c_str(), &hints, &found) != 0 || found == nullptr) {
        error = "control " + options_.name + " listener: cannot resolve " + options_.listen;
        return false;
    }
    for (addrinfo* ai = found; ai != nullptr && listen_fd_ < 0; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        const int yes = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
            listen_fd_ = fd;
        } else {
            ::close(fd);
        }
    }
    ::freeaddrinfo(found);
    if (listen_fd_ < 0) {
        error = "control API cannot listen on " + options_.listen + " (" + options_.name + ")";
        return false;
    }
    if (::pipe2(wake_fd_, O_NONBLOCK | O_CLOEXEC) != 0) {
        error = "control " + options_.name + " listener: pipe failed";
        return false;
    }
    handoff_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (handoff_fd_ < 0) {
        error = "control " + options_.name + " listener: eventfd failed";
        return false;
    }
    poller_ = std::thread([this] { poll_loop(); });
    for (uint32_t i = 0; i < options_.threads; ++i) {
        workers_.emplace_back([this] { worker_loop(); });
    }
    return true;
}

void HttpListener::stop() {
    if (!poller_.joinable()) {
        return;
    }
    {
        // Under the mutex: a worker between its predicate check and its wait still wakes.
        std::lock_guard lock(mutex_);
        stopping_.store(true);
    }
    [[maybe_unused]] const ssize_t n = ::write(wake_fd_[1], "x", 1);
    ready_cv_.notify_all();
    poller_.join();
    for (auto& w : workers_) {
        w.join();
    }
    workers_.clear();
    std::lock_guard lock(mutex_);
    ready_.clear();
    returned_.clear();
    waiting_.clear();
    for (int& fd : {std::ref(listen_fd_), std::ref(wake_fd_[0]), std::ref(wake_fd_[1]),
                    std::ref(handoff_fd_)}) {
        if (fd >= 0) {
            ::close(fd);
            fd = -1;
        }
    }
}

void HttpListener::refuse(int fd, int status, const std::string& message) {
    // Before a TLS handshake there is no one to speak HTTP to: just close.
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    if (options_.tls == nullptr) {
        c->send_now(canned_response(status, status == 429 ? "Too Many Requests"
                                                         : "Service Unavailable",
                                    message));
        c->start_draining();
        // Draining refused connections hold only a descriptor, for at most kLingerTime; cap
        // them so a flood of refused connects cannot pile them up.
        if (waiting_.size() < 2 * static_cast<size_t>(options_.max_connections)) {
            waiting_.push_back(std::move(c));
        }
    }
}

// At a limit, a new connection takes the place of the oldest one that has not delivered a
// whole request (idle keep-alive first, then a slow head): a slow or idle client cannot keep
// others out, and a client that behaves never loses a request in progress.
bool HttpListener::evict_oldest_waiting(const std::string& peer_ip) {
    using State = Connection::State;
    Connection* victim = nullptr;
    for (const auto& c : waiting_) {
        if (!c->counted || c->state == State::draining ||
            (!peer_ip.empty() && c->info.peer_ip != peer_ip)) {
            continue;
        }
        const auto rank = [](const Connection& x) { return x.state == State::idle ? 0 : 1; };
        if (victim == nullptr || rank(*c) < rank(*victim) ||
            (rank(*c) == rank(*victim) && c->accepted < victim->accepted)) {
            victim = c.get();
        }
    }
    if (victim == nullptr) {
        return false;
    }
    limiter_.release(victim->info.peer_ip);
    victim->counted = false;
    victim->state = State::draining;  // closed by poll_loop at once
    victim->deadline = Clock::now();
    ::shutdown(victim->fd, SHUT_RDWR);
    return true;
}

void HttpListener::accept_ready() {
    for (;;) {
        sockaddr_storage peer{};
        socklen_t len = sizeof peer;
        const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                // The backlog stays readable: without a pause poll() would spin on it.
                accept_paused_until_ = Clock::now() + milliseconds(100);
            }
            return;
        }
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->info.peer_ip = address_string(peer, c->info.peer_port);
        c->info.tls = options_.tls != nullptr;
        auto verdict = limiter_.acquire(c->info.peer_ip);
        if (verdict != policy::ConnectionLimiter::Verdict::ok &&
            evict_oldest_waiting(verdict == policy::ConnectionLimiter::Verdict::client_full
                                     ? c->info.peer_ip
                                     : std::string())) {
            verdict = limiter_.acquire(c->info.peer_ip);
        }
        switch (verdict) {
        case policy::ConnectionLimiter::Verdict::total_full:
            c->fd = -1;
            refuse(fd, 503, "the control " + options_.name + " listener has " +
                                std::to_string(options_.max_connections) +
                                " connections open (control.max_connections)");
            continue;
        case policy::ConnectionLimiter::Verdict::client_full:
            c->fd = -1;
            refuse(fd, 429, c->info.peer_ip + " has " +
                                std::to_string(options_.max_connections_per_client) +
                                " connections open (control.max_connections_per_client)");
            continue;
        case policy::ConnectionLimiter::Verdict::ok:
            break;
        }
        c->counted = true;
        sockaddr_storage local{};
        len = sizeof local;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
            c->local_ip = address_string(local, c->local_port);
        }
        const int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
        c->deadline = Clock::now() + milliseconds(options_.header_timeout_ms);
        if (options_.tls != nullptr) {
            c->ssl = SSL_new(options_.tls);
            if (c->ssl == nullptr || SSL_set_fd(c->ssl, fd) != 1) {
                close_connection(std::move(c));
                continue;
            }
            SSL_set_accept_state(c->ssl);
            c->state = Connection::State::handshake;
        }
        waiting_.push_back(std::move(c));
        advance(*waiting_.back());
    }
}

// Moves a waiting connection on as far as it goes without blocking. Leaves it in waiting_;
// poll_loop() then dispatches (head complete) or closes (fd < 0 marks "close").
void HttpListener::advance(Connection& c) {
    using State = Connection::State;
    if (c.state == State::handshake) {
        const int r = SSL_do_handshake(c.ssl);
        if (r != 1) {
            const int e = SSL_get_error(c.ssl, r);
            ERR_clear_error();
            if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
                c.events = e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
            } else {
                c.state = State::draining;
                c.deadline = Clock::now();  // failed handshake (no or bad client certificate)
            }
            return;
        }
        c.info.cert_cn = verified_cn(c.ssl);
        c.state = State::head;
    }
    if (c.state == State::draining) {
        char discard[4096];
        for (;;) {
            const ssize_t n = ::recv(c.fd, discard, sizeof discard, MSG_DONTWAIT);
            if (n <= 0) {
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                    c.deadline = Clock::now();
                }
                return;
            }
        }
    }
    for (;;) {
        if (head_complete(c.buffer, c.consumed)) {
            return;
        }
        if (c.unread() >= options_.max_head_bytes) {
            c.send_now(canned_response(431, "Request Header Fields Too Large",
                                       "request head over " +
                                           std::to_string(options_.max_head_bytes) + " bytes"));
            c.start_draining();
            return;
        }
        const ssize_t n = c.read_some(options_.max_head_bytes - c.unread());
        if (n == -2) {
            return;
        }
        if (n <= 0) {
            c.state = State::draining;
            c.deadline = Clock::now();
            return;
        }
        if (c.state == State::idle) {
            c.state = State::head;
            c.deadline = Clock::now() + milliseconds(options_.header_timeout_ms);
        }
    }
}

void HttpListener::poll_loop() {
    using State = Connection::State;
    std::vector<pollfd> fds;
    while (!stopping_.load()) {
        {
            std::lock_guard lock(mutex_);
            for (auto& c : returned_) {
                waiting_.push_back(std::move(c));
            }
            returned_.clear();
        }
        const auto now = Clock::now();
        // Dispatch complete heads, close what expired, keep the rest.
        std::vector<std::unique_ptr<Connection>> keep;
        for (auto& c : waiting_) {
            if (c->state == State::head && head_complete(c->buffer, c->consumed)) {
                dispatch(std::move(c));
            } else if (now >= c->deadline) {
                if (c->state == State::head && c->unread() != 0) {
                    c->send_now(canned_response(408, "Request Timeout",
                                                "request head not complete within " +
                                                    std::to_string(options_.header_timeout_ms) +
                                                    " ms (control.header_timeout_ms)"));
                }
                close_connection(std::move(c));
            } else {
                keep.push_back(std::move(c));
            }
        }
        waiting_ = std::move(keep);

        fds.clear();
        fds.push_back({wake_fd_[0], POLLIN, 0});
        const bool accepting = Clock::now() >= accept_paused_until_;
        fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
        int timeout = accepting ? 1000 : 100;
        for (const auto& c : waiting_) {
            fds.push_back({c->fd, c->events, 0});
            timeout = std::min(timeout, ms_until(c->deadline) + 1);
        }
        const int r = ::poll(fds.data(), fds.size(), timeout);
        if (r < 0 && errno != EINTR) {
            break;
        }
        if (fds[0].revents != 0) {
            char drain[64];
            while (::read(wake_fd_[0], drain, sizeof drain) > 0) {
            }
        }
        // Connections accepted below are appended after the polled ones: index by count.
        const size_t polled = waiting_.size();
        for (size_t i = 0; i < polled; ++i) {
            if (fds[i + 2].revents != 0) {
                advance(*waiting_[i]);
            }
        }
        if (fds[1].revents != 0) {
            accept_ready();
        }
    }
    for (auto& c : waiting_) {
        close_connection(std::move(c));
    }
    waiting_.clear();
}

void HttpListener::dispatch(std::unique_ptr<Connection> c) {
    {
        std::lock_guard lock(mutex_);
        ready_.push_back(std::move(c));
    }
    ready_cv_.notify_one();
    // A worker lingering on its kept-alive connection gives it back and takes this one if no
    // other worker is free.
    if (lingering_.load() != 0) {
        const uint64_t one = 1;
        [[maybe_unused]] const ssize_t n = ::write(handoff_fd_, &one, sizeof one);
    }
}

void HttpListener::worker_loop() {
    for (;;) {
        std::unique_ptr<Connection> c;
        {
            std::unique_lock lock(mutex_);
            ready_cv_.wait(lock, [&] { return stopping_.load() || !ready_.empty(); });
            if (stopping_.load()) {
                return;
            }
            c = std::move(ready_.front());
            ready_.pop_front();
        }
        serve(*c);
        while (await_next_head(*c)) {
            serve(*c);
        }
        if (c->state == Connection::State::draining && c->deadline <= Clock::now()) {
            close_connection(std::move(c));
            continue;
        }
        {
            std::lock_guard lock(mutex_);
            returned_.push_back(std::move(c));
        }
        [[maybe_unused]] const ssize_t n = ::write(wake_fd_[1], "x", 1);
    }
}

void HttpListener::serve(Connection& c) {
    c.info.close_after_response = false;
    c.info.principal.clear();
    t_current = &c.info;
    ConnectionStream stream(c, Clock::now() + milliseconds(options_.request_timeout_ms),
                            options_.max_head_bytes + options_.max_body_bytes, stopping_);
    ++c.requests;
    const bool last = stopping_.load() || c.requests >= options_.max_requests_per_connection;
    bool closed = false;
    const bool answered = serve_(stream, last, closed) && stream.flush();
    t_current = nullptr;
    if (!answered || stream.failed()) {
        c.state = Connection::State::draining;
        c.deadline = Clock::now();
        return;
    }
    if (closed || last || c.info.close_after_response) {
        c.start_draining();
        return;
    }
    c.compact();
    c.state = c.unread() != 0 ? Connection::State::head : Connection::State::idle;
    c.events = POLLIN;
    c.deadline = Clock::now() + milliseconds(c.state == Connection::State::head
                                                 ? options_.header_timeout_ms
                                                 : options_.idle_timeout_ms);
}

// After an answer on a kept-alive connection: true when the next request's head is complete
// in c.buffer, so this worker serves it too. False at once when the connection is not kept
// alive, when another connection waits for a worker, or when the listener stops; else after
// keepalive_linger_us without a complete head (whatever arrived stays in c.buffer for the
// poller, with the header deadline running).
bool HttpListener::await_next_head(Connection& c) {
    using State = Connection::State;
    const auto until = Clock::now() + std::chrono::microseconds(options_.keepalive_linger_us);
    ++lingering_;
    struct Leave {
        std::atomic<uint32_t>& n;
        ~Leave() { --n; }
    } leave{lingering_};
    for (;;) {
        if (c.state != State::idle && c.state != State::head) {
            return false;
        }
        if (head_complete(c.buffer, c.consumed)) {
            return true;
        }
        if (c.unread() >= options_.max_head_bytes || stopping_.load(std::memory_order_relaxed)) {
            return false;
        }
        {
            std::lock_guard lock(mutex_);
            if (!ready_.empty()) {
                return false;
            }
        }
        const ssize_t n = c.read_some(options_.max_head_bytes - c.unread());
        if (n > 0) {
            if (c.state == State::idle) {
                c.state = State::head;
                c.deadline = Clock::now() + milliseconds(options_.header_timeout_ms);
            }
            continue;
        }
        if (n != -2) {
            return false;  // closed or failed: the poller sees it again and closes it
        }
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
        if (left.count() <= 0) {
            return false;
        }
        // Slices of at most kStopCheckMs: a stop is seen. dispatch() wakes us through
        // handoff_fd_ when a connection becomes ready (checked at the top of the loop).
        const auto slice = std::min<std::chrono::microseconds>(left, milliseconds(kStopCheckMs));
        timespec ts{static_cast<time_t>(slice.count() / 1000000),
                    static_cast<long>(slice.count() % 1000000 * 1000)};
        pollfd p[2] = {{c.fd, c.events, 0}, {handoff_fd_, POLLIN, 0}};
        if (::ppoll(p, 2, &ts, nullptr) < 0 && errno != EINTR) {
            return false;
        }
        if (p[1].revents != 0) {
            uint64_t count = 0;
            [[maybe_unused]] const ssize_t got = ::read(handoff_fd_, &count, sizeof count);
        }
    }
}

void HttpListener::close_connection(std::unique_ptr<Connection> c) {
    if (c->counted) {
        limiter_.release(c->info.peer_ip);
        c->counted = false;
    }
    c.reset();
}

}  // namespace ina::control
