// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/switch_exchange.h"

#include <arpa/inet.h>

#include <nlohmann/json.hpp>

#include "worker/rdma/protocol.h"

namespace ina::rdma {

namespace {

using nlohmann::json;

// Reads j[key] as an unsigned integer <= max into *out; false with *why set otherwise.
template <typename T>
bool get_uint(const json& j, const char* key, uint64_t max, T* out, std::string* why) {
    const auto it = j.find(key);
    if (it == j.end()) {
        *why = std::string("missing \"") + key + "\"";
        return false;
    }
    if (!it->is_number_unsigned() && !(it->is_number_integer() && it->get<int64_t>() >= 0)) {
        *why = std::string("\"") + key + "\" must be a non-negative integer";
        return false;
    }
    const uint64_t v = it->get<uint64_t>();
    if (v > max) {
        *why = std::string("\"") + key + "\" = " + std::to_string(v) + " exceeds " +
               std::to_string(max);
        return false;
    }
    *out = static_cast<T>(v);
    return true;
}

bool get_string(const json& j, const char* key, std::string* out, std::string* why) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_string()) {
        *why = std::string("missing string \"") + key + "\"";
        return false;
    }
    *out = it->get<std::string>();
    return true;
}

bool is_ipv4(const std::string& s) {
    in_addr a{};
    return inet_pton(AF_INET, s.c_str(), &a) == 1;
}

bool is_ipv6(const std::string& s) {
    in6_addr a{};
    return inet_pton(AF_INET6, s.c_str(), &a) == 1;
}

bool is_ip(const std::string& s) { return is_ipv4(s) || is_ipv6(s); }

std::optional<json> parse_object(std::string_view text, std::string* why) {
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
        *why = "not a JSON object";
        return std::nullopt;
    }
    return j;
}

}  // namespace

std::string SwitchConnectRequest::to_json() const {
    return json{{"rank", rank},
                {"qpn", qpn},
                {"psn", psn},
                {"ip", ip},
                {"pmtu", pmtu},
                {"result_addr", result_addr},
                {"result_rkey", result_rkey},
                {"result_length", result_length},
                {"chunk_bytes", chunk_bytes},
                {"window", window},
                {"dtype", std::string(reduce::to_string(elem_type))},
                {"op", std::string(reduce::to_string(op))},
                {"world", world},
                {"timeout", timeout},
                {"retry_cnt", retry_cnt},
                {"rnr_retry", rnr_retry}}
        .dump();
}

std::optional<SwitchConnectRequest> SwitchConnectRequest::from_json(std::string_view text,
                                                                    std::string* why) {
    const auto j = parse_object(text, why);
    if (!j) {
        return std::nullopt;
    }
    SwitchConnectRequest r;
    std::string dtype, op;
    if (!get_uint(*j, "rank", 0xFFFF, &r.rank, why) || !get_uint(*j, "qpn", kSeqMask, &r.qpn, why) ||
        !get_uint(*j, "psn", kSeqMask, &r.psn, why) || !get_string(*j, "ip", &r.ip, why) ||
        !get_uint(*j, "pmtu", 4096, &r.pmtu, why) ||
        !get_uint(*j, "result_addr", UINT64_MAX, &r.result_addr, why) ||
        !get_uint(*j, "result_rkey", UINT32_MAX, &r.result_rkey, why) ||
        !get_uint(*j, "result_length", UINT64_MAX, &r.result_length, why) ||
        !get_uint(*j, "chunk_bytes", UINT32_MAX, &r.chunk_bytes, why) ||
        !get_uint(*j, "window", UINT32_MAX, &r.window, why) ||
        !get_string(*j, "dtype", &dtype, why) || !get_string(*j, "op", &op, why) ||
        !get_uint(*j, "world", 0xFFFF, &r.world, why)) {
        return std::nullopt;
    }
    for (auto [key, field] : {std::pair{"timeout", &r.timeout}, std::pair{"retry_cnt", &r.retry_cnt},
                              std::pair{"rnr_retry", &r.rnr_retry}}) {
        if (j->contains(key) && !get_uint(*j, key, key[0] == 't' ? 31 : 7, field, why)) {
            return std::nullopt;
        }
    }
    const auto t = parse_elem_type(dtype);
    const auto o = parse_op(op);
    if (!t || !o) {
        *why = "unknown dtype \"" + dtype + "\" or op \"" + op + "\"";
        return std::nullopt;
    }
    if (!is_ip(r.ip)) {
        *why = "\"ip\" is not an IPv4 or IPv6 address: " + r.ip;
        return std::nullopt;
    }
    r.elem_type = *t;
    r.op = *o;
    return r;
}

std::string SwitchConnectReply::to_json() const {
    return json{{"qpn", qpn},
                {"psn", psn},
                {"ip", ip},
                {"gid", gid},
                {"area_addr", area_addr},
                {"area_rkey", area_rkey},
                {"area_length", area_length},
                {"pmtu", pmtu}}
        .dump();
}

std::optional<SwitchConnectReply> SwitchConnectReply::from_json(std::string_view text,
                                                                std::string* why) {
    const auto j = parse_object(text, why);
    if (!j) {
        return std::nullopt;
    }
    SwitchConnectReply r;
    if (!get_uint(*j, "qpn", kSeqMask, &r.qpn, why) || !get_uint(*j, "psn", kSeqMask, &r.psn, why) ||
        !get_string(*j, "ip", &r.ip, why) || !get_string(*j, "gid", &r.gid, why) ||
        !get_uint(*j, "area_addr", UINT64_MAX, &r.area_addr, why) ||
        !get_uint(*j, "area_rkey", UINT32_MAX, &r.area_rkey, why) ||
        !get_uint(*j, "area_length", UINT64_MAX, &r.area_length, why) ||
        !get_uint(*j, "pmtu", 4096, &r.pmtu, why)) {
        return std::nullopt;
    }
    if (!is_ip(r.ip)) {
        *why = "\"ip\" is not an IPv4 or IPv6 address: " + r.ip;
        return std::nullopt;
    }
    if (!is_ipv6(r.gid)) {
        *why = "\"gid\" is not an IPv6 address: " + r.gid;
        return std::nullopt;
    }
    return r;
}

std::string gid_text(const std::string& ip) {
    if (is_ipv4(ip)) {
        return "::ffff:" + ip;
    }
    return is_ipv6(ip) ? ip : std::string();
}

std::optional<CmTarget> parse_cm_target(std::string_view text, std::string* why) {
    CmTarget t;
    std::string_view port;
    bool has_port = false;
    if (!text.empty() && text.front() == '[') {
        const size_t close = text.find(']');
        if (close == std::string_view::npos) {
            *why = "no ']' after the IPv6 address";
            return std::nullopt;
        }
        t.ip = std::string(text.substr(1, close - 1));
        const std::string_view rest = text.substr(close + 1);
        if (!rest.empty()) {
            if (rest.front() != ':') {
                *why = "expected ':PORT' after ']'";
                return std::nullopt;
            }
            port = rest.substr(1);
            has_port = true;
        }
        if (!is_ipv6(t.ip)) {
            *why = "'" + t.ip + "' in brackets is not an IPv6 address";
            return std::nullopt;
        }
    } else if (text.find(':') != text.rfind(':')) {
        t.ip = std::string(text);  // two colons or more: an IPv6 address, no port
        if (!is_ipv6(t.ip)) {
            *why = "'" + t.ip + "' is not an IPv6 address (with a port: [IPv6]:PORT)";
            return std::nullopt;
        }
    } else {
        const size_t colon = text.find(':');
        t.ip = std::string(text.substr(0, colon));
        if (colon != std::string_view::npos) {
            port = text.substr(colon + 1);
            has_port = true;
        }
        if (!is_ipv4(t.ip)) {
            *why = "'" + t.ip + "' is not an IPv4 address";
            return std::nullopt;
        }
    }
    if (has_port) {
        uint32_t p = 0;
        bool ok = !port.empty() && port.size() <= 5;
        for (const char c : port) {
            ok = ok && c >= '0' && c <= '9';
            p = p * 10 + static_cast<uint32_t>(c - '0');
        }
        if (!ok || p == 0 || p > 65535) {
            *why = "bad port '" + std::string(port) + "'";
            return std::nullopt;
        }
        t.port = static_cast<uint16_t>(p);
    }
    return t;
}

std::string failure_notice_text(uint32_t imm) {
    const uint32_t rank = imm >> 8 & 0xFFFF;
    const uint8_t failure = static_cast<uint8_t>(imm >> 24);
    std::string why;
    switch (failure) {
    case 1: why = "what the switch sent it went unacknowledged until its retries ran out"; break;
    case 2: why = "it answered the switch's results with RNR NAKs until the retries ran out"; break;
    case 3: why = "it answered a result with NAK invalid request"; break;
    case 4: why = "it answered a result with NAK remote access error"; break;
    case 5: why = "it answered a result with NAK remote operational error"; break;
    case 6: why = "it answered a result with a fatal NAK"; break;
    case kFailureReceiveSide: why = "the switch refused its WRITEs with a fatal NAK"; break;
    case kFailureRankLeft:
        why = "it left the job while the others still needed its contributions";
        break;
    default: why = "reason " + std::to_string(failure); break;
    }
    return "rank " + std::to_string(rank) + "'s connection failed (" + why + ")";
}

std::string api_error_text(int status, std::string_view body) {
    std::string text;
    std::string why;
    if (const auto j = parse_object(body, &why)) {
        if (const auto it = j->find("error"); it != j->end() && it->is_string()) {
            text = it->get<std::string>();
        } else if (const auto all = j->find("errors"); all != j->end() && all->is_array()) {
            // The API's generic error shape: {"errors": ["...", ...], "ok": false}.
            for (const auto& e : *all) {
                if (e.is_string()) {
                    if (!text.empty()) {
                        text += "; ";
                    }
                    text += e.get<std::string>();
                }
            }
        }
    }
    if (text.empty()) {
        text = std::string(body.substr(0, 200));
    }
    return "HTTP " + std::to_string(status) + ": " + text;
}

}  // namespace ina::rdma
