// SPDX-License-Identifier: Apache-2.0
// One HTTP(S) listener of the control API. cpp-httplib parses and routes requests; the
// connections are ours, because httplib 0.11's own loop cannot bound a slow client (its
// timeouts are per recv(), its queue is unbounded, it has no per-client limit):
//   - one poller thread accepts, enforces max_connections / max_connections_per_client,
//     completes the TLS handshake and reads each request head without blocking, with a
//     deadline (header_timeout_ms) and a size limit;
//   - only a connection whose head has fully arrived goes to one of `threads` workers, which
//     read the body and answer within request_timeout_ms with one write, then wait up to
//     keepalive_linger_us for the client's next head (a route agent sends its next request
//     right after the answer): a head that arrives is served on the same thread, with no hand-off
//     to the poller and back; otherwise, or as soon as another connection is ready (dispatch()
//     wakes lingering workers), the kept-alive connection goes back to the poller
//     (idle_timeout_ms);
// so slow or idle clients hold a file descriptor and a few KB each, and a worker only while no
// other connection needs it, for at most keepalive_linger_us after an answer.
#pragma once

#include <httplib.h>
#include <openssl/ssl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "control/api_policy.h"

namespace ina::control {

// What a handler may know about the connection its request came on.
struct ConnectionInfo {
    std::string peer_ip;
    int peer_port = 0;
    bool tls = false;
    std::string cert_cn;  // subject CN of a verified client certificate, else ""
    // Set by a handler that answered without reading the body: the connection is closed
    // after the response instead of parsing the unread body as the next request.
    bool close_after_response = false;
    std::string principal;  // who the request authenticated as, for the audit log
};

// httplib's parser and router, driven on our connections. Base is httplib::Server, or
// httplib::SSLServer when the API speaks TLS (its SSL_CTX then serves every listener).
template <class Base>
class Routes : public Base {
public:
    using Base::Base;
    bool serve_one(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
        return this->process_request(stream, close_connection, connection_closed, nullptr);
    }
};

// Parses one request from the stream, routes it and writes the answer; false if the
// connection failed. `connection_closed` tells that the answer closed it.
using ServeFn =
    std::function<bool(httplib::Stream&, bool close_connection, bool& connection_closed)>;

// The connection of the request the calling worker thread is serving; nullptr elsewhere.
ConnectionInfo* current_connection();

struct ListenerOptions {
    std::string name;    // "api" or "metrics", in messages
    std::string listen;  // HOST:PORT
    SSL_CTX* tls = nullptr;  // not owned; nullptr = plain HTTP
    uint32_t threads = 4;
    uint32_t max_connections = 128;
    uint32_t max_connections_per_client = 16;
    uint32_t header_timeout_ms = 5000;
    uint32_t request_timeout_ms = 30000;
    uint32_t idle_timeout_ms = 5000;
    size_t max_head_bytes = 16 * 1024;
    uint64_t max_body_bytes = 1 << 20;  // with max_head_bytes: what one request may read
    uint32_t max_requests_per_connection = 1000;
    uint32_t keepalive_linger_us = 2000;  // 0: every kept-alive connection goes back at once
};

class HttpListener {
public:
    HttpListener(ListenerOptions options, ServeFn serve);
    ~HttpListener();
    HttpListener(const HttpListener&) = delete;
    HttpListener& operator=(const HttpListener&) = delete;

    bool start(std::string& error);
    // Stops accepting, closes every connection; in-flight requests end within ~100 ms.
    void stop();

    struct Connection;

private:
    void poll_loop();
    void worker_loop();
    void accept_ready();
    void advance(Connection& c);  // handshake / read head without blocking
    void dispatch(std::unique_ptr<Connection> c);
    void serve(Connection& c);
    bool await_next_head(Connection& c);  // within keepalive_linger_us, without blocking others
    void close_connection(std::unique_ptr<Connection> c);
    void refuse(int fd, int status, const std::string& message);
    bool evict_oldest_waiting(const std::string& peer_ip);  // "" = any client

    ListenerOptions options_;
    ServeFn serve_;
    policy::ConnectionLimiter limiter_;
    int listen_fd_ = -1;
    int wake_fd_[2] = {-1, -1};
    int handoff_fd_ = -1;                 // eventfd: a connection is ready, lingering workers
    std::atomic<uint32_t> lingering_{0};  // workers in await_next_head
    std::atomic<bool> stopping_{false};
    std::thread poller_;
    std::vector<std::thread> workers_;

    std::vector<std::unique_ptr<Connection>> waiting_;  // poller-owned
    std::chrono::steady_clock::time_point accept_paused_until_;  // out of descriptors

    std::mutex mutex_;  // guards ready_ and returned_
    std::condition_variable ready_cv_;
    std::deque<std::unique_ptr<Connection>> ready_;     // head complete: for a worker
    std::vector<std::unique_ptr<Connection>> returned_;  // kept alive: back to the poller
};

}  // namespace ina::control
