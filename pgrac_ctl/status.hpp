// `pgrac_ctl status`: the tier, peers and counters of a running instance,
// read through libpq from the pg_cluster_* views.
#pragma once

#include <ostream>
#include <string>

namespace pgrac::ctl {

struct StatusCmd {
    std::string host, port, dbname, user;  // empty: libpq defaults (PGHOST, ...)
    bool json = false;
};

int cmd_status(const StatusCmd& cmd, std::ostream& out, std::ostream& err);

}  // namespace pgrac::ctl
