// SPDX-License-Identifier: Apache-2.0
// The control API's request policy as pure functions: who is asking (bearer token or client
// certificate), what the method needs (read or write role), and which headers and query
// parameters a request may carry. No sockets here, so every rule has a unit test
// (tests/unit/test_api_policy.cc); docs/api.md states the same rules for operators.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/config.h"

namespace ina::control::policy {

using Sha256 = std::array<uint8_t, 32>;
Sha256 sha256(std::string_view data);
std::string to_hex(const Sha256& digest);

// GET and HEAD read; every other method changes something.
config::ApiRole required_role(std::string_view method);
const char* role_name(config::ApiRole role);

struct Principal {
    std::string name;
    config::ApiRole role = config::ApiRole::read;
    std::optional<Sha256> token_digest;  // a bearer token's SHA-256, or
    std::string cert_cn;                  // a verified client certificate's subject CN
};

// The configured clients with their token files read and hashed; tokens are never kept.
class AuthTable {
public:
    AuthTable() = default;
    explicit AuthTable(std::vector<Principal> principals) : principals_(std::move(principals)) {}
    // Reads each token_file; false with `error` naming the client if one cannot be read.
    static bool build(const std::vector<config::ApiClientConfig>& clients, AuthTable& out,
                      std::string& error);
    bool enabled() const { return !principals_.empty(); }
    // The principal whose token hashes to `digest`; every entry is compared in constant time.
    const Principal* by_token(const Sha256& digest) const;
    const Principal* by_cert_cn(std::string_view cn) const;

private:
    std::vector<Principal> principals_;
};

struct AuthDecision {
    int status = 200;           // 200, 401 (who are you?) or 403 (not allowed to)
    std::string principal;      // for the audit log: a client name, or "anonymous"
    std::string error;          // why, when refused
};

// With no clients configured every request is allowed (the listener is loopback, enforced by
// the config). Otherwise a bearer token decides when present, else a verified client
// certificate's CN; then the principal's role must cover `needed`.
AuthDecision authorize(const AuthTable& table, std::string_view authorization,
                       std::string_view verified_cert_cn, config::ApiRole needed);

struct Refusal {
    int status = 400;
    std::string message;
};

// Writes with a body must say it is JSON or YAML: a browser can send text/plain,
// application/x-www-form-urlencoded and multipart/form-data cross-site without asking first.
std::optional<Refusal> check_content_type(std::string_view method, std::string_view content_type,
                                          bool has_body);

// A browser names the page that sent a request in Origin (and Sec-Fetch-Site): a write from
// any origin not listed is refused.
std::optional<Refusal> check_origin(std::string_view method, std::string_view origin,
                                    std::string_view sec_fetch_site,
                                    const std::vector<std::string>& allowed_origins);

// DNS rebinding: a page on a name that resolves to the switch sends that name as Host. Without
// authentication Host must be an IP literal, localhost or a listed name; with it only a listed
// name is enforced (the page does not have the token).
std::optional<Refusal> check_host(std::string_view host, bool auth_enabled,
                                  const std::vector<std::string>& allowed_hosts);

// The headers these checks read must each come once: a second Content-Length or Host is how
// requests are smuggled past a proxy, a second Authorization how one token is checked and
// another one meant. `count(name)` counts a header case-insensitively.
std::optional<Refusal> check_repeated_headers(
    const std::function<size_t(const std::string&)>& count);

// Each query parameter at most once and only those the route reads.
std::optional<Refusal> check_query(const std::multimap<std::string, std::string>& params,
                                   const std::vector<std::string_view>& allowed);

// A declared body longer than the limit is refused before it is read.
std::optional<Refusal> check_body_length(std::string_view content_length, uint64_t max_bytes);

// A body must declare its length and come uncompressed: cpp-httplib 0.11 applies no size
// limit to chunked bodies or while inflating gzip/brotli ones.
std::optional<Refusal> check_body_framing(std::string_view transfer_encoding,
                                          std::string_view content_encoding);

// {"ok": false, "errors": [message]} with invalid UTF-8 replaced (never a throw).
std::string error_body(std::string_view message);

// Open connections per client address and in total. Thread-safe.
class ConnectionLimiter {
public:
    enum class Verdict { ok, total_full, client_full };
    ConnectionLimiter(uint32_t max_total, uint32_t max_per_client)
        : max_total_(max_total), max_per_client_(max_per_client) {}
    Verdict acquire(const std::string& client);
    void release(const std::string& client);
    uint32_t open() const;

private:
    mutable std::mutex mutex_;
    uint32_t max_total_;
    uint32_t max_per_client_;
    uint32_t total_ = 0;
    std::unordered_map<std::string, uint32_t> per_client_;
};

}  // namespace ina::control::policy
