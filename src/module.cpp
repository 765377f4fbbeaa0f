// The module's entry: settings, shared memory, background workers.
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void _PG_init(void);
}

#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "lms/block_service.hpp"
#include "lms/ges_service.hpp"
#include "capi/handler_registry.hpp"
#include "capi/requester_path.hpp"
#include "instance/verbs_glue.hpp"
#include "instance/shmem.hpp"
#include "instance/tier_startup.hpp"

namespace {

void register_worker(const char* name, const char* type, const char* function, int arg) {
    BackgroundWorker w = {};
    // A database connection (to no database) makes the workers visible in
    // pg_stat_activity and lets LMS read shared buffers.
    w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    w.bgw_start_time = BgWorkerStart_ConsistentState;
    w.bgw_restart_time = 1;
    snprintf(w.bgw_library_name, BGW_MAXLEN, "pgrac_ic");
    snprintf(w.bgw_function_name, BGW_MAXLEN, "%s", function);
    snprintf(w.bgw_name, BGW_MAXLEN, "%s", name);
    snprintf(w.bgw_type, BGW_MAXLEN, "%s", type);
    w.bgw_main_arg = Int32GetDatum(arg);
    RegisterBackgroundWorker(&w);
}

}  // namespace

void _PG_init(void) {
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic must be loaded via shared_preload_libraries"),
                        errhint("Add pgrac_ic to shared_preload_libraries in postgresql.conf and "
                                "restart the server.")));

    pgrac::glue::define_settings();
    pgrac::glue::check_settings_together();
    pgrac::glue::select_tier();
    pgrac::glue::install_lane_transport_factory(&pgrac::glue::make_verbs_lane_transport);
    pgrac::glue::register_builtin_handlers();
    pgrac::glue::install_shmem_hooks();
    pgrac::glue::install_ges_shmem();        // GES wait slots (src/instance/ges_shmem.cpp)
    pgrac::glue::register_ges_handlers();    // GES in the LMS (src/lms/ges_service.cpp)
    pgrac::glue::register_block_handlers();  // Cache Fusion (src/lms/block_service.cpp)

    register_worker("pgrac_ic listener", "pgrac_ic listener", "pgrac_ic_listener_main", 0);
    for (int i = 0; i < pgrac_lms_workers; i++) {
        char name[BGW_MAXLEN];
        snprintf(name, sizeof name, "pgrac_ic lms %d", i);
        register_worker(name, name, "pgrac_ic_lms_main", i);
    }
}
