#include "status.hpp"

#include <libpq-fe.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <sstream>
#include <vector>

#include "table.hpp"

namespace pgrac::ctl {
namespace {

struct View {
    const char* key;    // JSON key
    const char* title;  // heading
    const char* name;   // the view
    bool vertical;      // one row shown as name: value
};

constexpr View kViews[] = {
    {"rdma_status", "Interconnect", "pg_cluster_rdma_status", true},
    {"peers", "Peers", "pg_cluster_ic_peers", false},
    {"counters", "Counters", "pg_cluster_rdma_counters", false},
};

using Conn = std::unique_ptr<PGconn, decltype(&PQfinish)>;
using Result = std::unique_ptr<PGresult, decltype(&PQclear)>;

// Built-in type OIDs (pg_type.dat) whose text form is a JSON number or bool.
nlohmann::ordered_json typed(const char* text, Oid type) {
    try {
        switch (type) {
            case 20:
            case 21:
            case 23:
            case 26:
                return nlohmann::ordered_json(std::stoll(text));
            case 700:
            case 701:
            case 1700:
                return nlohmann::ordered_json(std::stod(text));
            case 16:
                return nlohmann::ordered_json(text[0] == 't');
            default:
                break;
        }
    } catch (const std::exception&) {
        // "NaN", "Infinity", out of range: keep the text
    }
    return nlohmann::ordered_json(text);
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
            row.emplace_back(null ? "" : v);
            obj[r.columns[f]] = null ? nlohmann::ordered_json() : typed(v, PQftype(res, f));
        }
        r.text.push_back(std::move(row));
        r.json.push_back(std::move(obj));
    }
    return r;
}

void print_rows(std::ostream& out, const View& v, const Rows& rows) {
    out << v.title << " (" << v.name << ")\n";
    if (rows.text.empty()) {
        out << "  (no rows)\n\n";
        return;
    }
    if (v.vertical) {
        for (const auto& row : rows.text) {
            Table t({"", ""});
            for (size_t f = 0; f < rows.columns.size(); ++f)
                t.add_row({"  " + rows.columns[f], row[f]});
            std::ostringstream body;
            t.print(body);
            const std::string s = body.str();
            out << s.substr(s.find('\n') + 1);  // no header line for name: value pairs
        }
    } else {
        Table t(rows.columns);
        for (const auto& row : rows.text) t.add_row(row);
        t.print(out, 200);
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
    for (const View& v : kViews) {
        const std::string sql = std::string("SELECT * FROM ") + v.name;
        Result res(PQexec(conn.get(), sql.c_str()), &PQclear);
        if (!res || PQresultStatus(res.get()) != PGRES_TUPLES_OK) {
            const std::string msg =
                res ? PQresultErrorMessage(res.get()) : PQerrorMessage(conn.get());
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
    if (cmd.json) out << doc.dump(2) << '\n';
    return rc;
}

}  // namespace pgrac::ctl
