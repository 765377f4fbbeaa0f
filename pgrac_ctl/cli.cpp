#include "cli.hpp"

#include <CLI/CLI.hpp>

#include <exception>

#include "numa_irq.hpp"
#include "status.hpp"
#include "verify_rdma.hpp"

namespace pgrac::ctl {

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
    CLI::App app{
        "pgrac_ctl: check RDMA hardware before deploying pgrac_ic, place the HCA's IRQs, "
        "and show a running cluster's interconnect"};
    app.name("pgrac_ctl");
    app.set_version_flag("--version", "pgrac_ctl 0.1.0");
    app.require_subcommand(1);
    app.fallthrough();  // global options may also follow the subcommand

    tiers::SysRoots roots;
    app.add_option("--sysfs-root", roots.sysfs,
                   "read sysfs from DIR instead of /sys (a recorded tree)")
        ->check(CLI::ExistingDirectory)
        ->option_text("DIR");
    app.add_option("--procfs-root", roots.procfs, "read procfs from DIR instead of /proc")
        ->check(CLI::ExistingDirectory)
        ->option_text("DIR");

    // verify rdma
    CLI::App* verify =
        app.add_subcommand("verify", "check that this machine is ready for pgrac_ic");
    verify->require_subcommand(1);
    VerifyCmd vcmd;
    CLI::App* rdma = verify->add_subcommand(
        "rdma",
        "check the RDMA stack in order: HCA presence, vendor, driver and rdma-core, hugepages, "
        "NUMA and "
        "IRQ affinity, PFC/ECN, the server's locked-memory limit, a verbs loopback test, and the "
        "tier an instance would run at. "
        "Exit 0 when no check fails, 1 when one does, 2 on usage errors.");
    rdma->add_option("--device", vcmd.device,
                     "check this RDMA device (default: the one an instance would use)")
        ->option_text("NAME");
    rdma->add_flag("--json", vcmd.json, "print one JSON document instead of the table");
    rdma->add_option("--tier", vcmd.tier, "the cluster.interconnect_tier to evaluate")
        ->check(CLI::IsMember({"auto", "stub", "tier1", "tier2", "tier3"}))
        ->capture_default_str();
    rdma->add_flag("--strict", vcmd.strict, "evaluate with cluster.interconnect_strict = on");
    rdma->add_option("--iters", vcmd.iters, "loopback ping-pong round trips (64 B)")
        ->check(CLI::Range(1, 10000000))
        ->capture_default_str();
    rdma->add_option("--bw-iters", vcmd.bw_iters, "loopback bandwidth messages (64 KiB)")
        ->check(CLI::Range(1, 10000000))
        ->capture_default_str();

    CLI::Option* pid_opt =
        rdma->add_option("--pid", vcmd.memlock.pid,
                         "locked-memory check: this postmaster's limit (default: every running "
                         "postmaster's)")
            ->check(CLI::PositiveNumber)
            ->option_text("PID");
    rdma->add_option("--pgdata", vcmd.memlock.pgdata,
                     "locked-memory check: the postmaster of this data directory")
        ->option_text("DIR")
        ->excludes(pid_opt);
    rdma->add_option("--user", vcmd.memlock.user,
                     "locked-memory check: only postmasters running as this user")
        ->option_text("NAME");
    rdma->add_option("--hugepage-size", vcmd.memlock.hugepage_size,
                     "locked-memory check: the instances' cluster.rdma_hugepage_size")
        ->check(CLI::IsMember({"none", "2MB", "1GB"}))
        ->capture_default_str();

    // numa bind-irqs
    CLI::App* numa = app.add_subcommand("numa", "NUMA placement of the HCA");
    numa->require_subcommand(1);
    std::string bind_device;
    bool dry_run = false;
    CLI::App* bind = numa->add_subcommand("bind-irqs",
                                          "pin the RDMA device's IRQs to the CPUs of its NUMA node "
                                          "(writes /proc/irq/<N>/smp_affinity_list; "
                                          "root only unless --dry-run)");
    bind->add_option("--device", bind_device, "the RDMA device (default: the first with IRQs)")
        ->option_text("NAME");
    bind->add_flag("--dry-run", dry_run, "print the changes without writing anything");

    // status
    CLI::App* status = app.add_subcommand(
        "status", "connect to an instance with libpq and show its tier, peers and counters");
    status->set_help_flag("--help", "Print this help message and exit");  // -h is the host
    StatusCmd scmd;
    status->add_option("-h,--host", scmd.host, "database server host or socket directory")
        ->option_text("HOST");
    status->add_option("-p,--port", scmd.port, "database server port")->option_text("PORT");
    status->add_option("-d,--dbname", scmd.dbname, "database to connect to")->option_text("DB");
    status->add_option("-U,--username", scmd.user, "database user")->option_text("USER");
    status->add_flag("--json", scmd.json, "print one JSON document");

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // Help and --version exit 0; anything else is a usage error.
        return app.exit(e, out, err) == 0 ? 0 : 2;
    }

    try {
        if (*rdma) return cmd_verify_rdma(roots, vcmd, out);
        if (*bind) return cmd_bind_irqs(roots, bind_device, dry_run, out, err);
        if (*status) return cmd_status(scmd, out, err);
    } catch (const std::exception& e) {
        err << "pgrac_ctl: " << e.what() << '\n';
        return 1;
    }
    err << app.help();
    return 2;
}

}  // namespace pgrac::ctl
