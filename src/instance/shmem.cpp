// Shared memory: sized from the settings, created by the postmaster.
extern "C" {
#include "postgres.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
}

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include "instance/guc.hpp"
#include "instance/shmem.hpp"
#include "instance/tier_startup.hpp"
#include "instance/timing_file.hpp"

namespace pgrac::glue {

namespace {

shmem_request_hook_type prev_shmem_request_hook = nullptr;
shmem_startup_hook_type prev_shmem_startup_hook = nullptr;
pgrac::ic::IcShared* g_shared = nullptr;

pgrac::ic::SharedSizing sizing() {
    pgrac::ic::SharedSizing s;
    s.n_lms = static_cast<uint32_t>(pgrac_lms_workers);
    // One reply slot per PGPROC, indexed by pgprocno.
    s.n_slots = static_cast<uint32_t>(MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts);
    s.reply_pool_chunks =
        static_cast<uint32_t>(pgrac_reply_pool_kb / (pgrac::ic::kReplyChunkBytes / 1024));
    return s;
}

void request_shmem() {
    if (prev_shmem_request_hook) prev_shmem_request_hook();
    RequestAddinShmemSpace(pgrac::ic::shared_size(sizing()));
}

// This instance for the membership: older instances have smaller numbers
// (among claimants of one node id, the older wins: ic/membership/membership.hpp).
uint64_t new_instance() {
    uint64_t r = 0;
    if (!pg_strong_random(&r, sizeof r)) r = static_cast<uint64_t>(MyProcPid);
    const uint64_t v = (static_cast<uint64_t>(pgrac::ic::unix_time_us()) << 8 ^ (r & 0xff)) &
                       0x7fffffffffffffffULL;
    return v == 0 ? 1 : v;
}

void fill_shared(pgrac::ic::IcShared* shm) {
    shm->my_node_id = static_cast<uint32_t>(pgrac_node_id);
    shm->started_us = pgrac::ic::unix_time_us();
    shm->membership.self_instance = new_instance();
    // The previous instance's window here (timing_file.hpp): kept from the start.
    shm->membership.advertised_timeout_ms = told_timeout_from_file();
    char host[256] = "";
    struct stat st;
    if (gethostname(host, sizeof host - 1) == 0 && DataDir != nullptr && stat(DataDir, &st) == 0)
        shm->membership.self_location = pgrac::ic::instance_location(
            host, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
    // Lease words count from here (ic/membership/membership.hpp): small whatever the clock.
    shm->membership.clock_base_ms = pgrac::ic::boottime_ms() - 1;
    shm->settings.lms_workers = static_cast<uint16_t>(pgrac_lms_workers);
    shm->settings.tcp_paths = static_cast<uint8_t>(pgrac_tcp_paths);
    shm->settings.witnesses = witness_mask();
    try {
        shm->settings.nodes_digest = pgrac::ic::cluster_nodes_digest(configured_nodes());
    } catch (const std::exception&) {
        // Left 0: every peer refuses us with config_mismatch naming cluster.nodes.
    }
    for (const pgrac::ic::NodeAddress& n : configured_nodes()) {
        pgrac::ic::PeerShared& p = shm->peers[n.node_id - 1];
        p.node_id = n.node_id;
        bool v6 = n.host.find(':') != std::string::npos;
        snprintf(p.address, sizeof p.address, v6 ? "[%s]:%u" : "%s:%u", n.host.c_str(),
                 static_cast<unsigned>(n.port));
        p.rpc_latency.reset();
    }
    publish_tier(shm);
}

void startup_shmem() {
    if (prev_shmem_startup_hook) prev_shmem_startup_hook();
    const pgrac::ic::SharedSizing s = sizing();
    LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
    bool found = false;
    void* region = ShmemInitStruct("pgrac_ic", pgrac::ic::shared_size(s), &found);
    if (!found) fill_shared(pgrac::ic::shared_init(region, s));
    g_shared = static_cast<pgrac::ic::IcShared*>(region);
    LWLockRelease(AddinShmemInitLock);
}

}  // namespace

void install_shmem_hooks() {
    prev_shmem_request_hook = shmem_request_hook;
    shmem_request_hook = request_shmem;
    prev_shmem_startup_hook = shmem_startup_hook;
    shmem_startup_hook = startup_shmem;
}

pgrac::ic::IcShared* shared() {
    return g_shared;
}

const std::vector<pgrac::ic::NodeAddress>& configured_nodes() {
    // Parsed once per process; the check hook already validated the text.
    static const std::vector<pgrac::ic::NodeAddress> nodes = [] {
        std::string err;
        auto parsed = pgrac::ic::parse_node_list(pgrac_nodes ? pgrac_nodes : "", &err);
        std::vector<pgrac::ic::NodeAddress> v =
            parsed ? *parsed : std::vector<pgrac::ic::NodeAddress>{};
        if (v.empty()) v.push_back({static_cast<uint16_t>(pgrac_node_id), "127.0.0.1", 0});
        return v;
    }();
    return nodes;
}

void wake_procno(int procno) {
    if (procno >= 0) SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

}  // namespace pgrac::glue
