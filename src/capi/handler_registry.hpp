// Message handlers by type. Filled in _PG_init (before the postmaster forks),
// so the listener and every LMS worker inherit the same table.
#pragma once

#include <vector>

#include "pgrac_ic/pgrac_ic.h"

namespace pgrac::glue {

struct HandlerEntry {
    pgrac_ic_handler_fn fn;
    const char* name;
    // Served by the listener where the request arrives, not by an LMS worker:
    // the handler never blocks (pgrac_ic's own may instead decline, see
    // decline_in_place() in lms/request_server.hpp).
    bool in_place;
};

// nullptr if no handler is registered for msg_type.
const HandlerEntry* find_handler(uint16_t msg_type);
void put_handler(uint16_t msg_type, const char* name, pgrac_ic_handler_fn fn,
                 bool in_place = false);
// The types registered in place, indexed by msg_type (EngineConfig::serve_in_place).
std::vector<bool> in_place_types();
// True while a handler runs in the listener, where it arrived (it must not
// wait; the send path refuses to). Set by the request server around the call.
bool serving_in_place();
void set_serving_in_place(bool on);
// Registers pgrac_ic's own handlers (ping, note, seq).
void register_builtin_handlers();

}  // namespace pgrac::glue
