// Keeping the told peer_timeout across instance restarts (timing_file.hpp).
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
#include "storage/fd.h"
}

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "ic/membership/membership.hpp"
#include "instance/timing_file.hpp"

namespace pgrac::glue {

namespace {

constexpr char kFile[] = "pgrac_ic.timing";
constexpr char kTemp[] = "pgrac_ic.timing.tmp";
uint32_t g_written = 0;  // what this process last wrote (0: nothing yet)

}  // namespace

uint32_t told_timeout_from_file() {
    FILE* f = fopen(kFile, "r");  // the postmaster's working directory is the data directory
    if (f == nullptr) return 0;
    unsigned long v = 0;
    const int got = fscanf(f, "peer_timeout_ms=%lu", &v);
    fclose(f);
    if (got != 1 || v > pgrac::ic::kMaxPeerTimeoutMs) return 0;
    return static_cast<uint32_t>(v);
}

void remember_told_timeout(pgrac::ic::IcShared* shm) {
    const pgrac::ic::MembershipShared* m = &shm->membership;
    uint32_t window = static_cast<uint32_t>(pgrac_peer_timeout_ms);
    if (pgrac::ic::lease_now_ms(m) < pgrac::ic::load_relaxed(&m->window_floor_until_ms))
        window = std::max(window, pgrac::ic::load_relaxed(&m->window_floor_ms));
    if (window == g_written) return;
    char text[64];
    const int len = snprintf(text, sizeof text, "peer_timeout_ms=%u\n", window);
    // Written whole, synced, then renamed (durable_rename syncs the directory):
    // a crash leaves the old value or the new one.
    const int fd = OpenTransientFile(kTemp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
    bool ok = fd >= 0 && write(fd, text, static_cast<size_t>(len)) == len && pg_fsync(fd) == 0;
    if (fd >= 0) ok = CloseTransientFile(fd) == 0 && ok;
    if (ok) ok = durable_rename(kTemp, kFile, WARNING) == 0;
    if (!ok) {
        ereport(WARNING, (errcode_for_file_access(),
                          errmsg("pgrac_ic: could not write \"%s\": %m; after a restart this "
                                 "node may vote a peer out after its new cluster.peer_timeout "
                                 "rather than the %u ms it told its peers",
                                 kFile, window)));
        return;
    }
    g_written = window;
}

}  // namespace pgrac::glue
