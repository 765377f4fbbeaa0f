// `pgrac_ctl status`: the tier, peers and counters of a running instance,
// read through libpq from the pg_cluster_* views.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace pgrac::ctl {

struct StatusCmd {
    std::string host, port, dbname, user;  // empty: libpq defaults (PGHOST, ...)
    bool json = false;
};

// The columns status reads, by name (never SELECT *: other columns may be
// added to the views), as defined in sql/pgrac_ic--0.1.0.sql. Columns an
// older extension lacks are left out (JSON: missing_columns).
struct StatusColumn {
    const char* name;
    bool in_table;  // shown in the text output (JSON has every column)
};
struct StatusView {
    const char* key;    // JSON key
    const char* title;  // heading
    const char* name;   // the view
    bool vertical;      // one row, shown as name: value
    std::vector<StatusColumn> columns;
};
const std::vector<StatusView>& status_views();
// The SELECT status runs for a view, given the columns the view has (the
// instance's catalog): the known columns that are present, in our order.
std::string status_query(const StatusView& v, const std::vector<std::string>& present);
std::string status_query(const StatusView& v);  // every known column

int cmd_status(const StatusCmd& cmd, std::ostream& out, std::ostream& err);

}  // namespace pgrac::ctl
