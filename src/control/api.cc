// SPDX-License-Identifier: Apache-2.0
#include "control/api.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <charconv>

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
                  {"promiscuous", p.promiscuous}, {"ipv4", addrs}};
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
        if (!r.port.empty()) {
            j["port"] = r.port;
        }
        routes.push_back(j);
    }
    json neighbours = json::array();
    for (const auto& n : c.neighbours) {
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
            {"control", {{"listen", c.control.listen}}}};
}

void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(2) + "\n", "application/json");
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

}  // namespace

ApiServer::ApiServer(ControlPlane& control)
    : control_(control), server_(std::make_unique<httplib::Server>()) {}

ApiServer::~ApiServer() { stop(); }

bool ApiServer::start(const std::string& listen, std::string& error) {
    auto& s = *server_;
    s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(metrics::render(control_.stats()), "text/plain; version=0.0.4");
    });
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
        reply(res, 200, to_json(control_.running_config()));
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
        const json body = json::parse(req.body, nullptr, false);
        config::RouteConfig r;
        auto prefix = member(body, "prefix");
        auto parsed = prefix ? net::Ipv4Prefix::parse(*prefix) : std::nullopt;
        if (!parsed || parsed->addr.value != parsed->network()) {
            bad_request(res, "expected {\"prefix\": \"A.B.C.D/LEN\" (no host bits), \"via\": "
                             "\"A.B.C.D\" and/or \"port\": NAME}");
            return;
        }
        r.prefix = *parsed;
        if (auto via = member(body, "via")) {
            r.via = net::Ipv4Addr::parse(*via);
            if (!r.via) {
                bad_request(res, "expected \"via\" to be an IPv4 address");
                return;
            }
        }
        r.port = member(body, "port").value_or("");
        if (!r.via && r.port.empty()) {
            bad_request(res, "expected \"via\" or \"port\"");
            return;
        }
        reply_result(res, control_.add_route(r));
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
        static const char* const kVerdicts[] = {
            "not_mine", "outside_abm", "bad_length", "count_mismatch", "absorbed", "completed",
            "duplicate", "overlap", "resend_result", "stale", "fallback", "no_slot"};
        const json cfg = to_json(control_.running_config());
        const metrics::Stats st = control_.stats();
        json out = json::array();
        for (const auto& j : cfg["ina"]["jobs"]) {
            json entry = j;
            for (const auto& js : st.jobs) {
                if (js.job_id == j["job_id"].get<uint32_t>()) {
                    json verdicts = json::object();
                    for (size_t v = 0; v < js.verdicts.size(); ++v) {
                        verdicts[kVerdicts[v]] = js.verdicts[v];
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

    const auto colon = listen.rfind(':');
    const std::string host = listen.substr(0, colon);
    const int port = std::stoi(listen.substr(colon + 1));
    if (!s.bind_to_port(host, port)) {
        error = "control API cannot listen on " + listen;
        return false;
    }
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    return true;
}

void ApiServer::stop() {
    if (thread_.joinable()) {
        server_->stop();
        thread_.join();
    }
}

}  // namespace ina::control
