// SPDX-License-Identifier: Apache-2.0
#include "control/api_policy.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

#include "net/addr.h"

namespace ina::control::policy {

namespace {

std::string lower(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    return out;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
        s.remove_prefix(1);
    }
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
        s.remove_suffix(1);
    }
    return s;
}

bool is_write(std::string_view method) { return required_role(method) == config::ApiRole::write; }

}  // namespace

Sha256 sha256(std::string_view data) {
    Sha256 out{};
    unsigned int len = 0;
    EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
    return out;
}

std::string to_hex(const Sha256& digest) {
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    for (uint8_t b : digest) {
        out += kHex[b >> 4];
        out += kHex[b & 15];
    }
    return out;
}

config::ApiRole required_role(std::string_view method) {
    return method == "GET" || method == "HEAD" ? config::ApiRole::read : config::ApiRole::write;
}

const char* role_name(config::ApiRole role) {
    return role == config::ApiRole::write ? "write" : "read";
}

bool AuthTable::build(const std::vector<config::ApiClientConfig>& clients, AuthTable& out,
                      std::string& error) {
    std::vector<Principal> principals;
    for (const auto& c : clients) {
        Principal p{c.name, c.role, std::nullopt, c.cert_cn};
        if (!c.token_file.empty()) {
            const auto token = config::read_token_file(c.token_file);
            if (!token || token->empty()) {
                error = "control API client '" + c.name + "': cannot read token file '" +
                        c.token_file + "'";
                return false;
            }
            p.token_digest = sha256(*token);
        } else if (!c.token_sha256.empty()) {
            Sha256 d{};
            for (size_t i = 0; i < d.size() && 2 * i + 1 < c.token_sha256.size(); ++i) {
                std::from_chars(c.token_sha256.data() + 2 * i, c.token_sha256.data() + 2 * i + 2,
                                d[i], 16);
            }
            p.token_digest = d;
        }
        principals.push_back(std::move(p));
    }
    out = AuthTable(std::move(principals));
    return true;
}

const Principal* AuthTable::by_token(const Sha256& digest) const {
    const Principal* found = nullptr;
    for (const auto& p : principals_) {
        if (p.token_digest && CRYPTO_memcmp(p.token_digest->data(), digest.data(), digest.size()) == 0) {
            found = &p;
        }
    }
    return found;
}

const Principal* AuthTable::by_cert_cn(std::string_view cn) const {
    for (const auto& p : principals_) {
        if (!p.cert_cn.empty() && p.cert_cn == cn) {
            return &p;
        }
    }
    return nullptr;
}

AuthDecision authorize(const AuthTable& table, std::string_view authorization,
                       std::string_view verified_cert_cn, config::ApiRole needed) {
    if (!table.enabled()) {
        return {200, "anonymous", ""};
    }
    const Principal* who = nullptr;
    authorization = trim(authorization);
    if (!authorization.empty()) {
        constexpr std::string_view kScheme = "bearer ";
        if (authorization.size() <= kScheme.size() ||
            lower(authorization.substr(0, kScheme.size())) != kScheme) {
            return {401, "", "expected Authorization: Bearer TOKEN"};
        }
        who = table.by_token(sha256(trim(authorization.substr(kScheme.size()))));
        if (who == nullptr) {
            return {401, "", "unknown bearer token"};
        }
    } else if (!verified_cert_cn.empty()) {
        who = table.by_cert_cn(verified_cert_cn);
        if (who == nullptr) {
            return {401, "", "client certificate CN '" + std::string(verified_cert_cn) +
                                 "' is not a configured client"};
        }
    } else {
        return {401, "", "authentication required: Authorization: Bearer TOKEN or a client "
                         "certificate"};
    }
    if (needed == config::ApiRole::write && who->role != config::ApiRole::write) {
        return {403, who->name, "client '" + who->name + "' has role read; this needs write"};
    }
    return {200, who->name, ""};
}

std::optional<Refusal> check_content_type(std::string_view method, std::string_view content_type,
                                          bool has_body) {
    if (!is_write(method) || !has_body) {
        return std::nullopt;
    }
    const auto semicolon = content_type.find(';');
    const std::string type = lower(trim(content_type.substr(0, semicolon)));
    static const char* const kAccepted[] = {"application/json", "application/yaml",
                                            "application/x-yaml", "text/yaml", "text/x-yaml"};
    for (const char* a : kAccepted) {
        if (type == a) {
            return std::nullopt;
        }
    }
    return Refusal{415, "unsupported Content-Type '" + std::string(content_type) +
                            "': expected application/json or application/yaml"};
}

std::optional<Refusal> check_origin(std::string_view method, std::string_view origin,
                                    std::string_view sec_fetch_site,
                                    const std::vector<std::string>& allowed_origins) {
    if (!is_write(method)) {
        return std::nullopt;
    }
    const std::string o = lower(trim(origin));
    const bool listed = std::any_of(allowed_origins.begin(), allowed_origins.end(),
                                    [&](const std::string& a) { return lower(a) == o; });
    if (!o.empty() && !listed) {
        return Refusal{403, "a write from Origin '" + std::string(origin) +
                                "' is refused: add it to control.allowed_origins"};
    }
    const std::string site = lower(trim(sec_fetch_site));
    if (o.empty() && (site == "cross-site" || site == "same-site")) {
        return Refusal{403, "a cross-site write from a browser is refused"};
    }
    return std::nullopt;
}

std::optional<Refusal> check_host(std::string_view host, bool auth_enabled,
                                  const std::vector<std::string>& allowed_hosts) {
    host = trim(host);
    if (host.empty()) {
        return std::nullopt;  // HTTP/1.0 without Host: not a browser
    }
    std::string name;
    if (host.front() == '[') {
        const auto close = host.find(']');
        if (close == std::string_view::npos) {
            return Refusal{400, "malformed Host header"};
        }
        name = host.substr(1, close - 1);
    } else {
        name = lower(host.substr(0, host.rfind(':')));
        if (host.find(':') == std::string_view::npos) {
            name = lower(host);
        }
    }
    const bool listed = std::any_of(allowed_hosts.begin(), allowed_hosts.end(),
                                    [&](const std::string& a) { return lower(a) == name; });
    if (listed || (auth_enabled && allowed_hosts.empty())) {
        return std::nullopt;
    }
    const bool literal = host.front() == '[' || net::Ipv4Addr::parse(name).has_value();
    if (literal || name == "localhost") {
        return std::nullopt;
    }
    return Refusal{403, "Host '" + std::string(host) +
                            "' is not an address of this switch: add it to control.allowed_hosts"};
}

std::optional<Refusal> check_repeated_headers(
    const std::function<size_t(const std::string&)>& count) {
    static const char* const kOnce[] = {"Host", "Authorization", "Content-Length",
                                        "Content-Type", "Content-Encoding", "Transfer-Encoding",
                                        "Origin", "Sec-Fetch-Site"};
    for (const char* name : kOnce) {
        if (const size_t n = count(name); n > 1) {
            return Refusal{400, std::string("header ") + name + " given " + std::to_string(n) +
                                    " times; expected once"};
        }
    }
    return std::nullopt;
}

std::optional<Refusal> check_query(const std::multimap<std::string, std::string>& params,
                                   const std::vector<std::string_view>& allowed) {
    for (auto it = params.begin(); it != params.end(); it = params.upper_bound(it->first)) {
        if (std::find(allowed.begin(), allowed.end(), it->first) == allowed.end()) {
            std::string expected;
            for (auto a : allowed) {
                expected += expected.empty() ? "" : ", ";
                expected += a;
            }
            return Refusal{400, "unknown query parameter '" + it->first + "'; expected " +
                                    (expected.empty() ? "none" : expected)};
        }
        if (const auto n = params.count(it->first); n > 1) {
            return Refusal{400, "query parameter '" + it->first + "' given " + std::to_string(n) +
                                    " times; expected once"};
        }
    }
    return std::nullopt;
}

std::optional<Refusal> check_body_length(std::string_view content_length, uint64_t max_bytes) {
    content_length = trim(content_length);
    if (content_length.empty()) {
        return std::nullopt;  // chunked or no body: the reader enforces the limit
    }
    uint64_t n = 0;
    auto [ptr, ec] = std::from_chars(content_length.data(),
                                     content_length.data() + content_length.size(), n);
    if (ec == std::errc::result_out_of_range || (ec == std::errc{} && n > max_bytes)) {
        return Refusal{413, "request body of " + std::string(content_length) +
                                " bytes is over the limit of " + std::to_string(max_bytes) +
                                " bytes (control.max_body_bytes)"};
    }
    if (ec != std::errc{} || ptr != content_length.data() + content_length.size()) {
        return Refusal{400, "malformed Content-Length"};
    }
    return std::nullopt;
}

std::optional<Refusal> check_body_framing(std::string_view transfer_encoding,
                                          std::string_view content_encoding) {
    if (!trim(transfer_encoding).empty()) {
        return Refusal{411, "Transfer-Encoding '" + std::string(transfer_encoding) +
                                "' is not accepted: send the body with a Content-Length"};
    }
    const std::string encoding = lower(trim(content_encoding));
    if (!encoding.empty() && encoding != "identity") {
        return Refusal{415, "Content-Encoding '" + std::string(content_encoding) +
                                "' is not accepted: send the body uncompressed"};
    }
    return std::nullopt;
}

std::string error_body(std::string_view message) {
    const nlohmann::json body = {{"ok", false}, {"errors", {std::string(message)}}};
    return body.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

ConnectionLimiter::Verdict ConnectionLimiter::acquire(const std::string& client) {
    std::lock_guard lock(mutex_);
    if (total_ >= max_total_) {
        return Verdict::total_full;
    }
    auto& n = per_client_[client];
    if (n >= max_per_client_) {
        return Verdict::client_full;
    }
    ++n;
    ++total_;
    return Verdict::ok;
}

void ConnectionLimiter::release(const std::string& client) {
    std::lock_guard lock(mutex_);
    auto it = per_client_.find(client);
    if (it == per_client_.end() || it->second == 0) {
        return;
    }
    --total_;
    if (--it->second == 0) {
        per_client_.erase(it);
    }
}

uint32_t ConnectionLimiter::open() const {
    std::lock_guard lock(mutex_);
    return total_;
}

}  // namespace ina::control::policy
