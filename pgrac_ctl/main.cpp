// pgrac_ctl: see docs/pgrac_ctl.md.
#include <iostream>

#include "cli.hpp"

int main(int argc, char** argv) {
    return pgrac::ctl::run_cli(argc, argv, std::cout, std::cerr);
}
