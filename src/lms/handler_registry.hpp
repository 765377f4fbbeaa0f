// Message handlers by type. Filled in _PG_init (before the postmaster forks),
// so every LMS worker inherits the same table.
#pragma once

#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

struct HandlerEntry {
    pgrac_ic_handler_fn fn;
    const char* name;
};

// nullptr if no handler is registered for msg_type.
const HandlerEntry* find_handler(uint16_t msg_type);
void put_handler(uint16_t msg_type, const char* name, pgrac_ic_handler_fn fn);
// Registers pgrac_ic's own handlers (ping).
void register_builtin_handlers();

}  // namespace pgrac::glue
