// SPDX-License-Identifier: Apache-2.0
#include "control/api.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <malloc.h>
#include <openssl/err.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

#include "control/api_policy.h"
#include "control/http_listener.h"
#include "metrics/metrics.h"
#include "wire/bier_header.h"
#include "wire/bitstring.h"

namespace ina::control {

namespace {

using nlohmann::json;

json ina_jobs_json(const config::Config& c) {
    static const char* const kOps[] = {"sum", "prod", "min", "max"};
    static const char* const kTypes[] = {"int32", "fp32", "fp16", "bf16", "int64", "fp64"};
    json jobs = json::array();
    for (const auto& j : c.ina.jobs) {
        const std::string abm = wire::format_bfr_id_list(j.abm);
        json workers = json::array();
        for (const auto& w : j.workers) {
            workers.push_back({{"bfr_id", w.bfr_id}, {"ip", w.ip.str()}});
        }
        json sources = json::array();
        for (const auto& p : j.ingress_sources) {
            sources.push_back(p.str());
        }
        json job = {{"job_id", j.job_id},
                    {"role", j.role == config::InaRole::root ? "root" : "aggregator"},
                    {"bsl", j.bsl_bits},
                    {"set_id", j.set_id},
                    {"abm", abm},
                    {"op", kOps[j.op & 3]},
                    {"elem_type", kTypes[j.elem_type % 6]},
                    {"max_elements", j.max_elements},
                    {"window", j.window},
                    {"worker_window", j.worker_window != 0 ? j.worker_window : j.window},
                    {"slot_timeout_ms", j.slot_timeout_ms},
                    {"result_cache", config::ina_result_cache(j)},
                    {"root", j.root.str()},
                    {"workers", workers},
                    {"ingress", {{"ports", j.ingress_ports}, {"sources", sources}}},
                    {"on_reject", j.on_reject == config::RejectAction::drop ? "drop" : "forward"},
                    {"results", j.results == config::ResultDelivery::bier ? "bier" : "unicast"}};
        if (j.parent) {
            job["parent"] = j.parent->str();
        }
        if (j.source) {
            job["source"] = j.source->str();
        }
        jobs.push_back(job);
    }
    return jobs;
}

json bier_json(const config::BierConfig& b) {
    json bifts = json::array();
    for (const auto& t : b.bifts) {
        json neighbours = json::array();
        for (const auto& nb : t.neighbours) {
            neighbours.push_back(
                {{"via", nb.via.str()}, {"bfr_ids", wire::format_bfr_id_list(nb.bfr_ids)}});
        }
        json local = json::array();
        for (const auto& l : t.local) {
            local.push_back({{"bfr_id", l.bfr_id}, {"host", l.host.str()}});
        }
        bifts.push_back({{"bift_id", t.bift_id},
                         {"bsl", t.bsl_bits},
                         {"set_id", t.set_id},
                         {"neighbours", neighbours},
                         {"local", local}});
    }
    json groups = json::array();
    for (const auto& g : b.groups) {
        json entry = {{"group", g.group.str()}, {"bfr_ids", wire::format_bfr_id_list(g.bfr_ids)}};
        if (g.bsl_bits != 0) {
            entry["bsl"] = g.bsl_bits;
        }
        groups.push_back(entry);
    }
    json out = {{"sub_domain", b.sub_domain}, {"ttl", b.ttl}, {"bifts", bifts}, {"groups", groups}};
    if (b.bfr_id != 0) {
        out["bfr_id"] = b.bfr_id;
    }
    return out;
}

// Token files and hashes are named, never a token: what PUT /api/v1/config takes back.
json control_json(const config::ControlConfig& c) {
    json clients = json::array();
    for (const auto& cl : c.clients) {
        json e = {{"name", cl.name}, {"role", policy::role_name(cl.role)}};
        if (!cl.token_file.empty()) {
            e["token_file"] = cl.token_file;
        }
        if (!cl.token_sha256.empty()) {
            e["token_sha256"] = cl.token_sha256;
        }
        if (!cl.cert_cn.empty()) {
            e["cert_cn"] = cl.cert_cn;
        }
        clients.push_back(e);
    }
    json out = {{"listen", c.listen},
                {"metrics_listen", c.metrics_listen},
                {"clients", clients},
                {"allow_unauthenticated", c.allow_unauthenticated},
                {"allowed_origins", c.allowed_origins},
                {"allowed_hosts", c.allowed_hosts},
                {"max_body_bytes", c.max_body_bytes},
                {"max_connections", c.max_connections},
                {"max_connections_per_client", c.max_connections_per_client},
                {"threads", c.threads},
                {"header_timeout_ms", c.header_timeout_ms},
                {"request_timeout_ms", c.request_timeout_ms},
                {"idle_timeout_ms", c.idle_timeout_ms},
                {"audit_log", c.audit_log}};
    if (!c.tls.cert.empty()) {
        out["tls"] = {{"cert", c.tls.cert}, {"key", c.tls.key}};
        if (!c.tls.client_ca.empty()) {
            out["tls"]["client_ca"] = c.tls.client_ca;
        }
    }
    return out;
}

json to_json(const config::Config& c) {
    json ports = json::array();
    for (const auto& p : c.ports) {
        json addrs = json::array();
        for (const auto& a : p.ipv4) {
            addrs.push_back(a.str());
        }
        json j = {{"name", p.name},           {"devargs", p.devargs},
                  {"rx_queues", p.rx_queues}, {"rx_descriptors", p.rx_descriptors},
                  {"tx_descriptors", p.tx_descriptors}, {"mtu", p.mtu},
                  {"promiscuous", p.promiscuous}, {"ipv4", addrs},
                  {"chunk_steering", config::chunk_steering_name(p.chunk_steering)}};
        if (p.mac) {
            j["mac"] = p.mac->str();
        }
        if (!p.l2_group.empty()) {
            j["l2_group"] = p.l2_group;
        }
        ports.push_back(j);
    }
    json routes = json::array();
    for (const auto& r : c.routes) {
        json j = {{"prefix", r.prefix.str()}};
        if (r.via) {
            j["via"] = r.via->str();
        }
        if (!r.backup_via.empty()) {
            json backups = json::array();
            for (const auto& b : r.backup_via) {
                backups.push_back(b.str());
            }
            j["backup_via"] = backups;
        }
        if (!r.port.empty()) {
            j["port"] = r.port;
        }
        routes.push_back(j);
    }
    json neighbours = json::array();
    for (const auto& n : c.neighbours) {
        neighbours.push_back({{"ip", n.ip.str()}, {"mac", n.mac.str()}, {"port", n.port}});
    }
    for (const auto& n : c.neighbours6) {
        neighbours.push_back({{"ip", n.ip.str()}, {"mac", n.mac.str()}, {"port", n.port}});
    }
    json lcores = json::array();
    for (const auto& l : c.lcores) {
        json rx = json::array();
        for (const auto& q : l.rx) {
            rx.push_back({{"port", q.port}, {"queue", q.queue}});
        }
        lcores.push_back({{"lcore", l.lcore}, {"rx", rx}});
    }
    return {{"version", c.version},
            {"eal", {{"args", c.eal_args}}},
            {"mempool",
             {{"mbufs", c.mempool.mbufs},
              {"cache_size", c.mempool.cache_size},
              {"data_room", c.mempool.data_room}}},
            {"ports", ports},
            {"lcores", lcores},
            {"dataplane",
             {{"burst_size", c.dataplane.burst_size},
              {"tx_drain_us", c.dataplane.tx_drain_us},
              {"idle_sleep_us", c.dataplane.idle_sleep_us},
              {"idle_loops_before_sleep", c.dataplane.idle_loops_before_sleep}}},
            {"routes", routes},
            {"neighbours", neighbours},
            {"l2", {{"mac_ageing_s", c.l2.mac_ageing_s}, {"max_fdb_entries", c.l2.max_fdb_entries}}},
            {"arp",
             {{"neighbour_timeout_s", c.arp.neighbour_timeout_s},
              {"request_interval_ms", c.arp.request_interval_ms},
              {"max_neighbours", c.arp.max_neighbours}}},
            {"ina", {{"udp_port", c.ina.udp_port}, {"jobs", ina_jobs_json(c)}}},
            {"bier", bier_json(c.bier)},
            {"control", control_json(c.control)}};
}

// The whole running config: the built-in sections, then every feature section that can render
// itself (SectionHooks::to_json), so a GET put back by PUT keeps them.
json config_json(const config::Config& c) {
    json out = to_json(c);
    for (const auto& [key, text] : config::sections_json(c)) {
        out[key] = json::parse(text);
    }
    return out;
}

std::vector<RouteInstaller>& route_installers() {
    static std::vector<RouteInstaller> fns;
    return fns;
}

void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    // Errors quote what the client sent: invalid UTF-8 becomes U+FFFD instead of a throw.
    res.set_content(body.dump(2, ' ', false, json::error_handler_t::replace) + "\n",
                    "application/json");
}

void reply_parse_errors(httplib::Response& res, const std::vector<config::Error>& parse_errors) {
    std::vector<std::string> errors;
    for (const auto& e : parse_errors) {
        errors.push_back(e.str());
    }
    reply(res, 422, {{"ok", false}, {"errors", errors}});
}

void reply_result(httplib::Response& res, const ApplyResult& r) {
    if (r.ok) {
        reply(res, 200, {{"ok", true}, {"generation", r.generation}});
    } else {
        reply(res, 422, {{"ok", false}, {"errors", r.errors}});
    }
}

void bad_request(httplib::Response& res, const std::string& message) {
    reply(res, 400, {{"ok", false}, {"errors", {message}}});
}

// Reads a string member of a JSON object, or nullopt.
std::optional<std::string> member(const json& j, const char* key) {
    if (!j.is_object() || !j.contains(key) || !j[key].is_string()) {
        return std::nullopt;
    }
    return j[key].get<std::string>();
}

// A static route from the body of POST /api/v1/routes (or one entry of a batch): false with
// `why` (what was expected) when it is malformed.
bool parse_route(const json& body, config::RouteConfig& r, std::string& why) {
    auto prefix = member(body, "prefix");
    auto parsed = prefix ? net::Ipv4Prefix::parse(*prefix) : std::nullopt;
    if (!parsed || parsed->addr.value != parsed->network()) {
        why = "expected {\"prefix\": \"A.B.C.D/LEN\" (no host bits), \"via\": \"A.B.C.D\" "
              "and/or \"port\": NAME}";
        return false;
    }
    r.prefix = *parsed;
    if (auto via = member(body, "via")) {
        r.via = net::Ipv4Addr::parse(*via);
        if (!r.via) {
            why = "expected \"via\" to be an IPv4 address";
            return false;
        }
    }
    r.port = member(body, "port").value_or("");
    if (!r.via && r.port.empty()) {
        why = "expected \"via\" or \"port\"";
        return false;
    }
    return true;
}

// The query parameters each route reads; any other, or one given twice, is a 400.
const std::vector<std::string_view>* route_params(std::string_view method, std::string_view path) {
    static const std::vector<std::string_view> kNone;
    static const std::vector<std::string_view> kPrefix = {"prefix"};
    static const std::vector<std::string_view> kIp = {"ip"};
    static const std::vector<std::string_view> kJobId = {"job_id"};
    static const std::vector<std::string_view> kGroup = {"group"};
    if (method == "DELETE") {
        if (path == "/api/v1/routes") {
            return &kPrefix;
        }
        if (path == "/api/v1/neighbours") {
            return &kIp;
        }
        if (path == "/api/v1/jobs") {
            return &kJobId;
        }
        if (path == "/api/v1/bier/groups") {
            return &kGroup;
        }
    }
    return &kNone;
}

bool has_body(const httplib::Request& req) {
    const auto length = req.get_header_value("Content-Length");
    return (!length.empty() && length != "0") || req.has_header("Transfer-Encoding");
}

std::string utc_now() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        now.time_since_epoch()).count() % 1000;
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[96];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(ms));
    return buf;
}

std::string openssl_errors() {
    std::string out;
    while (const unsigned long e = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        out += out.empty() ? "" : "; ";
        out += buf;
    }
    return out.empty() ? "unknown error" : out;
}

// One JSON line per change request, whatever its outcome; appended and flushed at once.
class AuditLog {
public:
    ~AuditLog() {
        if (file_ != nullptr && file_ != stderr) {
            std::fclose(file_);
        }
    }
    bool open(const std::string& path, std::string& error) {
        if (path.empty()) {
            file_ = stderr;
            prefix_ = "inaswitch: audit: ";
            return true;
        }
        file_ = std::fopen(path.c_str(), "ae");
        if (file_ == nullptr) {
            error = "cannot open control.audit_log '" + path + "' for appending";
            return false;
        }
        return true;
    }
    void write(const json& entry) {
        const std::string line =
            prefix_ + entry.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        std::lock_guard lock(mutex_);
        std::fputs(line.c_str(), file_);
        std::fflush(file_);
    }

private:
    std::mutex mutex_;
    std::FILE* file_ = nullptr;
    std::string prefix_;
};

constexpr size_t kTrimAfterBodyBytes = 64 * 1024;

using ApiRoutes = Routes<httplib::Server>;

template <class R>
ServeFn serve_with(R* routes) {
    return [routes](httplib::Stream& strm, bool close, bool& closed) {
        return routes->serve_one(strm, close, closed);
    };
}
using ApiTlsRoutes = Routes<httplib::SSLServer>;

}  // namespace

struct ApiServer::Impl {
    explicit Impl(ControlPlane& control) : control_(control) {}

    ControlPlane& control_;
    config::ControlConfig settings_;
    policy::AuthTable auth_;
    AuditLog audit_;
    SSL_CTX* tls_ = nullptr;  // owned by api_routes_ when it is an SSLServer
    std::unique_ptr<httplib::Server> api_routes_;
    std::unique_ptr<httplib::Server> metrics_routes_;
    std::unique_ptr<HttpListener> api_listener_;
    std::unique_ptr<HttpListener> metrics_listener_;

    bool start(const config::ControlConfig& settings, std::string& error);
    void install_metrics(httplib::Server& s);
    void install_routes(httplib::Server& s);
    void install_policy(httplib::Server& s, bool metrics_only);
    std::optional<policy::Refusal> precheck(const httplib::Request& req, bool metrics_only);
    void refuse(httplib::Response& res, const policy::Refusal& r, const httplib::Request& req);
    void audit(const httplib::Request& req, const httplib::Response& res);
    ListenerOptions listener_options(const std::string& name, const std::string& listen) const;
};

void ApiServer::Impl::install_metrics(httplib::Server& s) {
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics::render(control_.stats()), "text/plain; version=0.0.4");
    });
}

// Runs before the body is read (and before "100 Continue" is sent): a refused request never
// costs its body.
std::optional<policy::Refusal> ApiServer::Impl::precheck(const httplib::Request& req,
                                                         bool metrics_only) {
    ConnectionInfo* conn = current_connection();
    if (auto r = policy::check_repeated_headers(
            [&](const std::string& name) { return req.get_header_value_count(name.c_str()); })) {
        return r;
    }
    if (auto r = policy::check_host(req.get_header_value("Host"), auth_.enabled(),
                                    settings_.allowed_hosts)) {
        return r;
    }
    const auto needed = policy::required_role(req.method);
    const auto decision = policy::authorize(auth_, req.get_header_value("Authorization"),
                                            conn != nullptr ? conn->cert_cn : "", needed);
    if (conn != nullptr) {
        conn->principal = decision.status == 401 ? "" : decision.principal;
    }
    if (decision.status != 200) {
        return policy::Refusal{decision.status, decision.error};
    }
    if (metrics_only && needed != config::ApiRole::read) {
        return policy::Refusal{405, "the metrics listener serves GET /metrics only"};
    }
    if (auto r = policy::check_origin(req.method, req.get_header_value("Origin"),
                                      req.get_header_value("Sec-Fetch-Site"),
                                      settings_.allowed_origins)) {
        return r;
    }
    if (auto r = policy::check_body_framing(req.get_header_value("Transfer-Encoding"),
                                            req.get_header_value("Content-Encoding"))) {
        return r;
    }
    if (auto r = policy::check_body_length(req.get_header_value("Content-Length"),
                                           settings_.max_body_bytes)) {
        return r;
    }
    if (auto r = policy::check_content_type(req.method, req.get_header_value("Content-Type"),
                                            has_body(req))) {
        return r;
    }
    return policy::check_query(req.params, *route_params(req.method, req.path));
}

void ApiServer::Impl::refuse(httplib::Response& res, const policy::Refusal& r,
                             const httplib::Request& req) {
    res.status = r.status;
    res.set_content(policy::error_body(r.message), "application/json");
    if (r.status == 401) {
        res.set_header("WWW-Authenticate", "Bearer realm=\"inaswitch\"");
    }
    if (has_body(req)) {
        // The body stays unread: it must not be parsed as the next request.
        if (ConnectionInfo* conn = current_connection()) {
            conn->close_after_response = true;
        }
        res.set_header("Connection", "close");
    }
}

void ApiServer::Impl::audit(const httplib::Request& req, const httplib::Response& res) {
    if (policy::required_role(req.method) != config::ApiRole::write) {
        return;
    }
    const ConnectionInfo* conn = current_connection();
    json entry = {{"time", utc_now()},
                  {"client", req.remote_addr + ":" + std::to_string(req.remote_port)},
                  {"principal", conn != nullptr && !conn->principal.empty() ? conn->principal
                                                                             : "unauthenticated"},
                  {"method", req.method},
                  {"path", req.path},
                  {"status", res.status}};
    if (conn != nullptr && !conn->cert_cn.empty()) {
        entry["cert_cn"] = conn->cert_cn;
    }
    std::string query;
    for (const auto& [k, v] : req.params) {
        if (!query.empty()) {
            query += "&";
        }
        query += k;
        query += "=";
        query += v;
    }
    if (!query.empty()) {
        entry["query"] = query;
    }
    entry["body_bytes"] = req.body.size();
    const json body = json::parse(res.body, nullptr, false);
    // A 2xx answer applied the change (routes that answer 200/204 without an "ok" field, e.g.
    // a feature's, included); anything else, or an explicit "ok": false, was refused.
    const bool applied = res.status >= 200 && res.status < 300 &&
                         !(body.is_object() && !body.value("ok", true));
    if (applied) {
        entry["result"] = "applied";
        if (body.contains("generation")) {
            entry["generation"] = body["generation"];
        }
    } else {
        entry["result"] = "refused";
        if (body.is_object() && body.contains("errors")) {
            entry["errors"] = body["errors"];
        }
    }
    audit_.write(entry);
}

void ApiServer::Impl::install_policy(httplib::Server& s, bool metrics_only) {
    s.set_payload_max_length(settings_.max_body_bytes);
    s.set_keep_alive_max_count(1000);
    s.set_keep_alive_timeout(std::max<time_t>(1, settings_.idle_timeout_ms / 1000));
    s.set_pre_routing_handler([this, metrics_only](const httplib::Request& req,
                                                   httplib::Response& res) {
        if (auto r = precheck(req, metrics_only)) {
            refuse(res, *r, req);
            return httplib::Server::HandlerResponse::Handled;
        }
        return httplib::Server::HandlerResponse::Unhandled;
    });
    s.set_expect_100_continue_handler([this, metrics_only](const httplib::Request& req,
                                                           httplib::Response& res) {
        if (auto r = precheck(req, metrics_only)) {
            refuse(res, *r, req);
            return r->status;
        }
        return 100;
    });
    s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                    httplib::Response& res) {
        if (!res.body.empty()) {
            return httplib::Server::HandlerResponse::Unhandled;
        }
        std::string message = "HTTP " + std::to_string(res.status);
        if (res.status == 413) {
            message = "request body over the limit of " + std::to_string(settings_.max_body_bytes) +
                      " bytes (control.max_body_bytes)";
        } else if (res.status == 400) {
            message = "malformed request line or headers, or a POST/PUT without Content-Length "
                      "(curl: -d '')";
        } else if (res.status == 404) {
            message = "no such resource: " + req.method + " " + req.path;
        }
        refuse(res, {res.status, message}, req);
        if (ConnectionInfo* conn = current_connection(); conn != nullptr && res.status == 400) {
            conn->close_after_response = true;  // the request could not be parsed
        }
        return httplib::Server::HandlerResponse::Handled;
    }));
    s.set_exception_handler([](const httplib::Request&, httplib::Response& res,
                               std::exception_ptr ep) {
        std::string what = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            what += std::string(": ") + e.what();
        } catch (...) {
        }
        res.status = 500;
        res.set_content(policy::error_body(what), "application/json");
    });
    s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        audit(req, res);
        // Parsing a large YAML body leaves hundreds of MB of freed heap behind (about 250
        // bytes per byte of a pathological document): hand it back to the system.
        if (req.body.size() >= kTrimAfterBodyBytes) {
            malloc_trim(0);
        }
    });
}

ListenerOptions ApiServer::Impl::listener_options(const std::string& name,
                                                  const std::string& listen) const {
    ListenerOptions o;
    o.name = name;
    o.listen = listen;
    o.tls = tls_;
    o.threads = settings_.threads;
    o.max_connections = settings_.max_connections;
    o.max_connections_per_client = settings_.max_connections_per_client;
    o.header_timeout_ms = settings_.header_timeout_ms;
    o.request_timeout_ms = settings_.request_timeout_ms;
    o.idle_timeout_ms = settings_.idle_timeout_ms;
    o.max_body_bytes = settings_.max_body_bytes;
    return o;
}

bool ApiServer::Impl::start(const config::ControlConfig& settings, std::string& error) {
    settings_ = settings;
    if (!policy::AuthTable::build(settings_.clients, auth_, error) ||
        !audit_.open(settings_.audit_log, error)) {
        return false;
    }
    ServeFn api_serve;
    if (!settings_.tls.cert.empty()) {
        const char* ca = settings_.tls.client_ca.empty() ? nullptr : settings_.tls.client_ca.c_str();
        auto routes = std::make_unique<ApiTlsRoutes>(settings_.tls.cert.c_str(),
                                                     settings_.tls.key.c_str(), ca);
        if (!routes->is_valid()) {
            error = "control.tls: cannot use certificate '" + settings_.tls.cert + "' and key '" +
                    settings_.tls.key + "'" + (ca != nullptr ? " with client CA '" + settings_.tls.client_ca + "'" : "") +
                    ": " + openssl_errors();
            return false;
        }
        tls_ = routes->ssl_context();
        SSL_CTX_set_min_proto_version(tls_, TLS1_2_VERSION);
        SSL_CTX_set_mode(tls_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        if (ca != nullptr) {
            SSL_CTX_set_client_CA_list(tls_, SSL_load_client_CA_file(ca));
        }
        api_serve = serve_with(routes.get());
        api_routes_ = std::move(routes);
    } else {
        auto routes = std::make_unique<ApiRoutes>();
        api_serve = serve_with(routes.get());
        api_routes_ = std::move(routes);
    }
    install_routes(*api_routes_);
    install_policy(*api_routes_, false);
    auto metrics_routes = std::make_unique<ApiRoutes>();
    const ServeFn metrics_serve = serve_with(metrics_routes.get());
    install_metrics(*metrics_routes);
    install_policy(*metrics_routes, true);
    metrics_routes_ = std::move(metrics_routes);

    if (!settings_.listen.empty()) {
        api_listener_ = std::make_unique<HttpListener>(listener_options("api", settings_.listen),
                                                       api_serve);
        if (!api_listener_->start(error)) {
            return false;
        }
    }
    if (!settings_.metrics_listen.empty()) {
        metrics_listener_ = std::make_unique<HttpListener>(
            listener_options("metrics", settings_.metrics_listen), metrics_serve);
        if (!metrics_listener_->start(error)) {
            return false;
        }
    }
    const auto exposed = [](const std::string& listen) {
        const auto a = config::parse_listen_address(listen);
        return a && !config::is_loopback_host(a->host);
    };
    if (!auth_.enabled() && (exposed(settings_.listen) || exposed(settings_.metrics_listen))) {
        std::fprintf(stderr, "inaswitch: WARNING: the control API listens beyond loopback "
                             "WITHOUT authentication (control.allow_unauthenticated): anyone "
                             "who reaches it can change forwarding\n");
    }
    if (auth_.enabled() && tls_ == nullptr && exposed(settings_.listen)) {
        std::fprintf(stderr, "inaswitch: WARNING: bearer tokens cross the network in clear "
                             "text: set control.tls\n");
    }
    return true;
}

void ApiServer::Impl::install_routes(httplib::Server& s) {
    install_metrics(s);
    s.Get("/api/v1/status", [this](const httplib::Request&, httplib::Response& res) {
        const metrics::Stats st = control_.stats();
        json ports = json::array();
        for (const auto& p : st.ports) {
            char mac[RTE_ETHER_ADDR_FMT_SIZE];
            rte_ether_format_addr(mac, sizeof mac, &p.mac);
            const auto& c = st.total.ports[p.port_id];
            ports.push_back({{"name", p.name},
                             {"port_id", p.port_id},
                             {"driver", p.driver},
                             {"mac", mac},
                             {"rx_queues", p.rx_queues},
                             {"tx_queues", p.tx_queues},
                             {"rss", p.rss},
                             {"tx_udp_checksum", p.tx_udp_checksum},
                             {"chunk_steering", runtime::steering_mode_name(p.chunk_steering)},
                             {"chunk_steering_reason", p.chunk_steering_reason},
                             {"chunk_steering_rules", p.chunk_steering_rules},
                             {"rx_packets", c.rx_packets},
                             {"tx_packets", c.tx_packets},
                             {"tx_dropped", c.tx_dropped}});
        }
        json lcores = json::array();
        for (const auto& [id, c] : st.per_lcore) {
            lcores.push_back({{"lcore", id}, {"loops", c.loops}, {"busy_loops", c.busy_loops}});
        }
        json drops = json::object();
        for (size_t i = 0; i < dp::kDropReasonCount; ++i) {
            drops[std::string(dp::kDropReasonNames[i])] = st.total.drops[i];
        }
        reply(res, 200,
              {{"version", INASWITCH_VERSION},
               {"config_file", control_.running_config().source},
               {"generation", st.generation},
               {"uptime_s", st.uptime_s},
               {"ports", ports},
               {"lcores", lcores},
               {"drops", drops},
               {"routed", st.total.routed},
               {"bridged", st.total.bridged},
               {"reloads", {{"ok", st.control.reloads_ok}, {"failed", st.control.reloads_failed}}}});
    });
    s.Get("/api/v1/config", [this](const httplib::Request&, httplib::Response& res) {
        reply(res, 200, config_json(control_.running_config()));
    });
    s.Put("/api/v1/config", [this](const httplib::Request& req, httplib::Response& res) {
        reply_result(res, control_.apply_yaml(req.body, "api"));
    });
    s.Post("/api/v1/reload", [this](const httplib::Request&, httplib::Response& res) {
        reply_result(res, control_.reload_file());
    });
    s.Get("/api/v1/routes", [this](const httplib::Request&, httplib::Response& res) {
        reply(res, 200, to_json(control_.running_config())["routes"]);
    });
    s.Post("/api/v1/routes", [this](const httplib::Request& req, httplib::Response& res) {
        config::RouteConfig r;
        std::string why;
        if (!parse_route(json::parse(req.body, nullptr, false), r, why)) {
            bad_request(res, why);
            return;
        }
        reply_result(res, control_.add_route(r));
    });
    // Many route changes in one request: deletes, then adds, each as the single endpoints
    // would apply it, in order, under one lock; it stops at the first refused one.
    s.Post("/api/v1/routes/batch", [this](const httplib::Request& req, httplib::Response& res) {
        const json body = json::parse(req.body, nullptr, false);
        const auto list = [&](const char* key) {
            return body.is_object() && body.contains(key) ? body[key] : json::array();
        };
        const json adds = list("add");
        const json deletes = list("delete");
        if (!body.is_object() || !adds.is_array() || !deletes.is_array()) {
            bad_request(res, "expected {\"delete\": [\"A.B.C.D/LEN\", ...], \"add\": [route, ...]} "
                             "(either may be absent)");
            return;
        }
        std::vector<net::Ipv4Prefix> del;
        for (size_t i = 0; i < deletes.size(); ++i) {
            auto parsed = deletes[i].is_string()
                              ? net::Ipv4Prefix::parse(deletes[i].get<std::string>())
                              : std::nullopt;
            if (!parsed) {
                bad_request(res, "delete[" + std::to_string(i) + "]: expected \"A.B.C.D/LEN\"");
                return;
            }
            del.push_back(*parsed);
        }
        std::vector<config::RouteConfig> add(adds.size());
        for (size_t i = 0; i < adds.size(); ++i) {
            std::string why;
            if (!parse_route(adds[i], add[i], why)) {
                bad_request(res, "add[" + std::to_string(i) + "]: " + why);
                return;
            }
        }
        size_t applied = 0;
        const ApplyResult r = control_.change_routes(del, add, applied);
        json out = r.ok ? json{{"ok", true}, {"generation", r.generation}}
                        : json{{"ok", false}, {"errors", r.errors}};
        out["applied"] = applied;
        reply(res, r.ok ? 200 : 422, out);
    });
    s.Delete("/api/v1/routes", [this](const httplib::Request& req, httplib::Response& res) {
        auto parsed = net::Ipv4Prefix::parse(req.get_param_value("prefix"));
        if (!parsed) {
            bad_request(res, "expected ?prefix=A.B.C.D/LEN");
            return;
        }
        auto r = control_.remove_route(*parsed);
        if (!r.ok && !r.errors.empty() && r.errors[0].rfind("no route", 0) == 0) {
            reply(res, 404, {{"ok", false}, {"errors", r.errors}});
            return;
        }
        reply_result(res, r);
    });
    s.Get("/api/v1/neighbours", [this](const httplib::Request&, httplib::Response& res) {
        json out = json::array();
        for (const auto& n : control_.neighbours()) {
            out.push_back({{"ip", n.ip.str()},
                           {"mac", n.mac.str()},
                           {"port", n.port},
                           {"kind", n.is_static ? "static" : "learned"},
                           {"age_s", n.age_s}});
        }
        reply(res, 200, out);
    });
    s.Post("/api/v1/neighbours", [this](const httplib::Request& req, httplib::Response& res) {
        const json body = json::parse(req.body, nullptr, false);
        auto ip = member(body, "ip");
        auto mac = member(body, "mac");
        auto port = member(body, "port");
        config::NeighbourConfig n;
        auto pip = ip ? net::Ipv4Addr::parse(*ip) : std::nullopt;
        auto pmac = mac ? net::MacAddr::parse(*mac) : std::nullopt;
        if (!pip || !pmac || !port || pmac->is_multicast() || pmac->is_zero()) {
            bad_request(res, "expected {\"ip\": \"A.B.C.D\", \"mac\": \"xx:xx:xx:xx:xx:xx\" "
                             "(unicast), \"port\": NAME}");
            return;
        }
        n.ip = *pip;
        n.mac = *pmac;
        n.port = *port;
        reply_result(res, control_.add_neighbour(n));
    });
    s.Delete("/api/v1/neighbours", [this](const httplib::Request& req, httplib::Response& res) {
        auto ip = net::Ipv4Addr::parse(req.get_param_value("ip"));
        if (!ip) {
            bad_request(res, "expected ?ip=A.B.C.D");
            return;
        }
        auto r = control_.remove_neighbour(*ip);
        if (!r.ok && !r.errors.empty() && r.errors[0].rfind("no static", 0) == 0) {
            reply(res, 404, {{"ok", false}, {"errors", r.errors}});
            return;
        }
        reply_result(res, r);
    });
    s.Get("/api/v1/jobs", [this](const httplib::Request&, httplib::Response& res) {
        const json cfg = to_json(control_.running_config());
        const metrics::Stats st = control_.stats();
        json out = json::array();
        for (const auto& j : cfg["ina"]["jobs"]) {
            json entry = j;
            for (const auto& js : st.jobs) {
                if (js.job_id == j["job_id"].get<uint32_t>()) {
                    json verdicts = json::object();
                    for (size_t v = 0; v < js.verdicts.size(); ++v) {
                        // The verdict's own name (ina::to_string): no list here to go stale.
                        verdicts[std::string(ina::to_string(static_cast<ina::Verdict>(v)))] =
                            js.verdicts[v];
                    }
                    entry["stats"] = {{"contributions", verdicts},
                                      {"slots_in_use", js.slots_in_use},
                                      {"slots", js.capacity},
                                      {"slot_timeouts", js.slot_timeouts}};
                }
            }
            out.push_back(entry);
        }
        reply(res, 200, out);
    });
    s.Post("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
        auto parsed = config::parse_ina_job(req.body, "api");
        if (parsed.job) {
            reply_result(res, control_.add_job(*parsed.job));
        } else {
            reply_parse_errors(res, parsed.errors);
        }
    });
    s.Delete("/api/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.get_param_value("job_id");
        uint32_t job_id = 0;
        auto [ptr, ec] = std::from_chars(id.data(), id.data() + id.size(), job_id);
        if (id.empty() || ec != std::errc{} || ptr != id.data() + id.size()) {
            bad_request(res, "expected ?job_id=N");
            return;
        }
        auto r = control_.remove_job(job_id);
        if (!r.ok && !r.errors.empty() && r.errors[0].rfind("no job", 0) == 0) {
            reply(res, 404, {{"ok", false}, {"errors", r.errors}});
            return;
        }
        reply_result(res, r);
    });
    s.Get("/api/v1/bier", [this](const httplib::Request&, httplib::Response& res) {
        json out = bier_json(control_.running_config().bier);
        const metrics::Stats st = control_.stats();
        for (auto& t : out["bifts"]) {
            for (const auto& bs : st.bifts) {
                if (bs.bift_id != t["bift_id"].get<uint32_t>()) {
                    continue;
                }
                json malformed = json::object();
                for (size_t r = 0; r < dp::kBierMalformedReasons; ++r) {
                    malformed[std::string(wire::to_string(static_cast<wire::BierParseError>(r)))] =
                        bs.counters.malformed[r];
                }
                for (size_t k = 0; k < bs.neighbours.size() && k < t["neighbours"].size(); ++k) {
                    t["neighbours"][k]["resolved"] = bs.neighbours[k].second;
                    t["neighbours"][k]["copies"] = bs.counters.copies[k];
                }
                t["stats"] = {{"packets", bs.counters.packets},
                              {"ttl_expired", bs.counters.ttl_expired},
                              {"bits_no_neighbour", bs.counters.bits_no_neighbour},
                              {"delivered", bs.counters.delivered},
                              {"malformed", malformed}};
            }
        }
        reply(res, 200, out);
    });
    s.Put("/api/v1/bier", [this](const httplib::Request& req, httplib::Response& res) {
        auto parsed = config::parse_bier(req.body, "api");
        if (parsed.bier) {
            reply_result(res, control_.set_bier(*parsed.bier));
        } else {
            reply_parse_errors(res, parsed.errors);
        }
    });
    s.Post("/api/v1/bier/groups", [this](const httplib::Request& req, httplib::Response& res) {
        auto parsed = config::parse_bier_group(req.body, "api");
        if (parsed.group) {
            reply_result(res, control_.add_bier_group(*parsed.group));
        } else {
            reply_parse_errors(res, parsed.errors);
        }
    });
    s.Delete("/api/v1/bier/groups", [this](const httplib::Request& req, httplib::Response& res) {
        const auto group = net::Ipv4Addr::parse(req.get_param_value("group"));
        if (!group) {
            bad_request(res, "expected ?group=A.B.C.D");
            return;
        }
        auto r = control_.remove_bier_group(*group);
        if (!r.ok && !r.errors.empty() && r.errors[0].rfind("no group", 0) == 0) {
            reply(res, 404, {{"ok", false}, {"errors", r.errors}});
            return;
        }
        reply_result(res, r);
    });
    s.Get("/api/v1/fdb", [this](const httplib::Request&, httplib::Response& res) {
        json out = json::array();
        for (const auto& e : control_.fdb()) {
            out.push_back({{"mac", e.mac.str()},
                           {"group", e.group},
                           {"port", e.port},
                           {"idle_s", e.idle_s}});
        }
        reply(res, 200, out);
    });

    for (RouteInstaller fn : route_installers()) {
        fn(s, control_);
    }
}

ApiServer::ApiServer(ControlPlane& control) : impl_(std::make_unique<Impl>(control)) {}

ApiServer::~ApiServer() { stop(); }

bool ApiServer::start(const config::ControlConfig& settings, std::string& error) {
    return impl_->start(settings, error);
}

bool register_routes(RouteInstaller fn) {
    if (fn == nullptr) {
        return false;
    }
    route_installers().push_back(fn);
    return true;
}

void ApiServer::stop() {
    if (impl_->api_listener_) {
        impl_->api_listener_->stop();
    }
    if (impl_->metrics_listener_) {
        impl_->metrics_listener_->stop();
    }
}

}  // namespace ina::control
