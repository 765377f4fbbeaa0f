// pgrac_ctl's command line (CLI11): parses, dispatches, maps errors to exit
// codes (0 ok, 1 a check or action failed, 2 usage error).
#pragma once

#include <ostream>

namespace pgrac::ctl {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace pgrac::ctl
