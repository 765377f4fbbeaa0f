#include "status.hpp"

#include <libpq-fe.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <sstream>

#include "table.hpp"

namespace pgrac::ctl {

const std::vector<StatusView>& status_views() {
    static const std::vector<StatusView> views = {
        {"rdma_status",
         "Interconnect",
         "pg_cluster_rdma_status",
         true,
         {{"node_id", true},        {"cluster_name", true},  {"tier", true},
          {"tier_requested", true}, {"tier_reason", true},   {"strict", true},
          {"listener_ready", true}, {"incarnation", true},   {"epoch", true},
          {"hca_name", true},       {"hca_vendor", true},    {"link_layer", true},
          {"port_state", true},     {"mtu", true},           {"xrc", true},
          {"dcqcn", true},          {"hugepage_size", true}, {"numa_node", true},
          {"numa_binding", true},   {"cq_depth", true},      {"verify_issues", true},
          {"lms_workers", true},    {"started_at", true}}},
        {"peers",
         "Peers",
         "pg_cluster_ic_peers",
         false,
         {{"node_id", true},
          {"address", true},
          {"is_self", true},
          {"state", true},
          {"state_since", false},
          {"tier", true},
          {"paths_up", true},
          {"paths", true},
          {"incarnation", true},
          {"epoch", false},
          {"rtt_us", true},
          {"queued_msgs", true},
          {"queued_bytes", false},
          {"unacked_msgs", true},
          {"last_heard", false},
          {"notes_recv", true},
          {"last_error", true}}},
        {"counters",
         "Counters",
         "pg_cluster_rdma_counters",
         false,
         {{"peer_node_id", true},       {"msgs_sent", true},           {"msgs_recv", true},
          {"bytes_sent", true},         {"bytes_recv", true},          {"rpcs_sent", true},
          {"rpcs_served", true},        {"retransmits", true},         {"reconnects", true},
          {"duplicates_dropped", true}, {"backpressure_stalls", true}, {"queued_msgs", false},
          {"queued_bytes", false},      {"mr_cache_hit_rate", false},  {"cq_overflow_count", true},
          {"p50_latency_us", true},     {"p99_latency_us", true},      {"p999_latency_us", true},
          {"latency_samples", false},   {"verbs_sends", true},         {"verbs_recvs", true}}},
    };
    return views;
}

std::string status_query(const StatusView& v, const std::vector<std::string>& present) {
    std::string sql = "SELECT ";
    bool first = true;
    for (const StatusColumn& col : v.columns) {
        const std::string c = col.name;
        if (std::find(present.begin(), present.end(), c) == present.end()) continue;
        if (!first) sql += ", ";
        first = false;
        // Arrays come back as JSON (an array in --json, one line per element in the table).
        sql += c == "verify_issues" ? "to_json(" + c + ") AS " + c : c;
    }
    return sql + " FROM " + v.name;
}

std::string status_query(const StatusView& v) {
    std::vector<std::string> all;
    for (const StatusColumn& c : v.columns) all.emplace_back(c.name);
    return status_query(v, all);
}

namespace {

using Conn = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// Built-in type OIDs (pg_type.dat) whose text form is JSON: numbers, bools, json.
nlohmann::ordered_json typed(const char* text, Oid type) {
    try {
        switch (type) {
            case 20:  // int8
            case 21:  // int2
            case 23:  // int4
            case 26:  // oid
                return nlohmann::ordered_json(std::stoll(text));
            case 700:   // float4
            case 701:   // float8
            case 1700:  // numeric
                return nlohmann::ordered_json(std::stod(text));
            case 16:  // bool
                return nlohmann::ordered_json(text[0] == 't');
            case 114:   // json
            case 3802:  // jsonb
                return nlohmann::ordered_json::parse(text);
            default:
                break;
        }
    } catch (const std::exception&) {
        // "NaN", "Infinity", out of range: keep the text
    }
    return nlohmann::ordered_json(text);
}

// A value as the table shows it: NULL as "", arrays joined.
std::string cell(const nlohmann::ordered_json& v, const std::string& text) {
    if (v.is_null()) return "";
    if (!v.is_array()) return text;
    std::string s;
    for (const auto& e : v)
        s += (s.empty() ? "" : "; ") + (e.is_string() ? e.get<std::string>() : e.dump());
    return s;
}

struct Rows {
    std::vector<std::string> columns;
    std::vector<std::vector<std::string>> text;  // NULL as ""
    nlohmann::ordered_json json = nlohmann::ordered_json::array();
};

Rows read_rows(PGresult* res) {
    Rows r;
    const int nf = PQnfields(res), nt = PQntuples(res);
    for (int f = 0; f < nf; ++f) r.columns.emplace_back(PQfname(res, f));
    for (int t = 0; t < nt; ++t) {
        std::vector<std::string> row;
        nlohmann::ordered_json obj = nlohmann::ordered_json::object();
        for (int f = 0; f < nf; ++f) {
            const bool null = PQgetisnull(res, t, f);
            const char* v = PQgetvalue(res, t, f);
            obj[r.columns[f]] = null ? nlohmann::ordered_json() : typed(v, PQftype(res, f));
            row.emplace_back(cell(obj[r.columns[f]], v));
        }
        r.text.push_back(std::move(row));
        r.json.push_back(std::move(obj));
    }
    return r;
}

bool shown(const StatusView& v, const std::string& column) {
    for (const StatusColumn& c : v.columns)
        if (column == c.name) return c.in_table;
    return true;
}

void print_rows(std::ostream& out, const StatusView& v, const Rows& rows) {
    out << v.title << " (" << v.name << ")\n";
    if (rows.text.empty()) {
        out << "  (no rows)\n\n";
        return;
    }
    if (v.vertical) {
        for (size_t r = 0; r < rows.text.size(); ++r) {
            Table t({"", ""});
            for (size_t f = 0; f < rows.columns.size(); ++f) {
                if (!shown(v, rows.columns[f])) continue;
                const nlohmann::ordered_json& val = rows.json[r][rows.columns[f]];
                if (val.is_array()) {  // one line per element
                    if (val.empty()) t.add_row({"  " + rows.columns[f], "(none)"});
                    for (size_t i = 0; i < val.size(); ++i)
                        t.add_row({i ? "" : "  " + rows.columns[f],
                                   val[i].is_string() ? val[i].get<std::string>() : val[i].dump()});
                    continue;
                }
                t.add_row({"  " + rows.columns[f], rows.text[r][f]});
            }
            std::ostringstream body;
            t.print(body);
            const std::string s = body.str();
            out << s.substr(s.find('\n') + 1);  // no header line for name: value pairs
        }
    } else {
        std::vector<size_t> keep;
        std::vector<std::string> headers;
        for (size_t f = 0; f < rows.columns.size(); ++f)
            if (shown(v, rows.columns[f])) keep.push_back(f), headers.push_back(rows.columns[f]);
        Table t(headers);
        for (const auto& row : rows.text) {
            std::vector<std::string> cells;
            for (size_t f : keep)
                // The counters' row without a peer is the total over all peers.
                cells.push_back(rows.columns[f] == "peer_node_id" && row[f].empty() ? "total"
                                                                                    : row[f]);
            t.add_row(cells);
        }
        t.print(out, 250);
    }
    out << '\n';
}

}  // namespace

int cmd_status(const StatusCmd& cmd, std::ostream& out, std::ostream& err) {
    std::vector<const char*> keys, values;
    auto add = [&](const char* k, const std::string& v) {
        if (!v.empty()) keys.push_back(k), values.push_back(v.c_str());
    };
    add("host", cmd.host);
    add("port", cmd.port);
    add("dbname", cmd.dbname);
    add("user", cmd.user);
    add("application_name", "pgrac_ctl");
    keys.push_back(nullptr);
    values.push_back(nullptr);
    Conn conn(PQconnectdbParams(keys.data(), values.data(), 0), &PQfinish);
    if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
        err << "pgrac_ctl status: cannot connect: "
            << (conn ? PQerrorMessage(conn.get()) : "out of memory\n");
        return 1;
    }
    nlohmann::ordered_json doc = {{"command", "status"},
                                  {"host", PQhost(conn.get())},
                                  {"port", PQport(conn.get())},
                                  {"dbname", PQdb(conn.get())}};
    int rc = 0, hinted = 0;
    if (!cmd.json)
        out << "pgrac_ic on " << PQhost(conn.get()) << ":" << PQport(conn.get()) << " (database "
            << PQdb(conn.get()) << ")\n\n";
    nlohmann::ordered_json missing_columns = nlohmann::ordered_json::object();
    for (const StatusView& v : status_views()) {
        // The view's columns as this instance defines them: status reads the ones it
        // knows, by name, and leaves out those an older extension lacks.
        const char* params[1] = {v.name};
        Result cols(PQexecParams(conn.get(),
                                 "SELECT attname FROM pg_attribute WHERE attrelid = "
                                 "to_regclass($1) AND attnum > 0 AND NOT attisdropped",
                                 1, nullptr, params, nullptr, nullptr, 0),
                    &PQclear);
        std::string msg;
        if (!cols || PQresultStatus(cols.get()) != PGRES_TUPLES_OK)
            msg = cols ? PQresultErrorMessage(cols.get()) : PQerrorMessage(conn.get());
        else if (PQntuples(cols.get()) == 0)
            msg = std::string("relation \"") + v.name + "\" does not exist\n";
        Result res(nullptr, &PQclear);
        if (msg.empty()) {
            std::vector<std::string> present;
            for (int i = 0; i < PQntuples(cols.get()); ++i)
                present.emplace_back(PQgetvalue(cols.get(), i, 0));
            nlohmann::ordered_json missing = nlohmann::ordered_json::array();
            for (const StatusColumn& c : v.columns)
                if (std::find(present.begin(), present.end(), c.name) == present.end())
                    missing.push_back(c.name);
            if (!missing.empty()) missing_columns[v.key] = missing;
            res.reset(PQexec(conn.get(), status_query(v, present).c_str()));
            if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK)
                msg = res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn.get());
        }
        if (!msg.empty()) {
            err << "pgrac_ctl status: " << v.name << ": " << msg;
            if (msg.find("does not exist") != std::string::npos && !hinted++)
                err << "  (is the pgrac_ic extension installed in this database? CREATE EXTENSION "
                       "pgrac_ic)\n";
            doc[v.key] = nullptr;
            rc = 1;
            continue;
        }
        Rows rows = read_rows(res.get());
        if (cmd.json)
            doc[v.key] = v.vertical && rows.json.size() == 1 ? rows.json[0] : rows.json;
        else
            print_rows(out, v, rows);
    }
    // Columns this pgrac_ctl knows that the instance's views lack (an older extension).
    if (cmd.json && !missing_columns.empty()) doc["missing_columns"] = missing_columns;
    if (cmd.json) out << doc.dump(2) << '\n';
    return rc;
}

}  // namespace pgrac::ctl
