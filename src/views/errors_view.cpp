// pg_cluster_rdma_errors (recent errors, newest first) and
// pg_cluster_rdma_error_totals (every error type, all-time counts).
extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(pgrac_ic_errors);
PG_FUNCTION_INFO_V1(pgrac_ic_error_totals);
}

#include <cstring>

#include "instance/shmem.hpp"
#include "capi/errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;

Datum pgrac_ic_errors(PG_FUNCTION_ARGS) {
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    ErrorEntry* entries = static_cast<ErrorEntry*>(palloc(sizeof(ErrorEntry) * ErrorLog::kEntries));
    size_t count = shm->errors.snapshot(entries, ErrorLog::kEntries);
    for (size_t k = 0; k < count; k++) {
        const ErrorEntry& e = entries[k];
        Datum v[5];
        bool n[5] = {false, false, false, false, false};
        v[0] = pgrac::glue::unix_us_to_timestamptz(e.time_us);
        if (e.peer_node > 0)
            v[1] = Int32GetDatum(e.peer_node);
        else
            n[1] = true;
        v[2] = CStringGetTextDatum(error_type_name(static_cast<ErrorType>(e.type)));
        v[3] = CStringGetTextDatum(severity_name(static_cast<Severity>(e.severity)));
        v[4] = CStringGetTextDatum(e.description);
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    }
    pfree(entries);
    return (Datum)0;
}

Datum pgrac_ic_error_totals(PG_FUNCTION_ARGS) {
    IcShared* shm = pgrac::glue::require_shared();
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    for (int t = 0; t < static_cast<int>(ErrorType::kCount); t++) {
        Datum v[2];
        bool n[2] = {false, false};
        v[0] = CStringGetTextDatum(error_type_name(static_cast<ErrorType>(t)));
        v[1] = pgrac::glue::counter_datum(shm->errors.total(static_cast<ErrorType>(t)));
        tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    }
    return (Datum)0;
}
