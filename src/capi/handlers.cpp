// pgrac_ic_register_handler[_flags] (include/pgrac_ic/pgrac_ic.h): an upper
// layer's handler for its message type, registered from _PG_init of a
// preloaded library so that the listener and every LMS worker inherit it (the
// table: src/capi/handler_registry.hpp).
extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include "capi/handler_registry.hpp"

extern "C" int pgrac_ic_register_handler(uint16_t msg_type, const char* name,
                                         pgrac_ic_handler_fn fn) {
    return pgrac_ic_register_handler_flags(msg_type, name, fn, 0);
}

extern "C" int pgrac_ic_register_handler_flags(uint16_t msg_type, const char* name,
                                               pgrac_ic_handler_fn fn, int flags) {
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic handlers must be registered from _PG_init of a library "
                               "in shared_preload_libraries")));
    if (msg_type < PGRAC_IC_FIRST_USER_TYPE || msg_type > PGRAC_IC_MAX_MSG_TYPE || fn == nullptr ||
        (flags & ~PGRAC_IC_HANDLER_IN_PLACE) != 0)
        return PGRAC_IC_BAD_ARGUMENT;
    if (pgrac::glue::find_handler(msg_type) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
                        errmsg("pgrac_ic message type %u already has a handler (%s)", msg_type,
                               pgrac::glue::find_handler(msg_type)->name)));
    pgrac::glue::put_handler(msg_type, name, fn, (flags & PGRAC_IC_HANDLER_IN_PLACE) != 0);
    return PGRAC_IC_OK;
}
