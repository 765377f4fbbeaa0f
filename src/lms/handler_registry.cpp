extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <cstring>

#include "lms/handler_registry.hpp"

namespace pgrac::glue {

namespace {

HandlerEntry g_handlers[PGRAC_IC_MAX_MSG_TYPE + 1];

// Built-in PING: the reply is the request body.
int ping_handler(const pgrac_ic_message* msg, pgrac_ic_reply* reply) {
    if (reply == nullptr) return PGRAC_IC_OK;
    std::memcpy(reply->body, msg->body, msg->len);
    reply->len = msg->len;
    return PGRAC_IC_OK;
}

}  // namespace

void put_handler(uint16_t type, const char* name, pgrac_ic_handler_fn fn) {
    g_handlers[type].fn = fn;
    g_handlers[type].name = name;
}

const HandlerEntry* find_handler(uint16_t msg_type) {
    if (msg_type > PGRAC_IC_MAX_MSG_TYPE || g_handlers[msg_type].fn == nullptr) return nullptr;
    return &g_handlers[msg_type];
}

void register_builtin_handlers() { put_handler(PGRAC_IC_MSG_PING, "ping", ping_handler); }

}  // namespace pgrac::glue

extern "C" int pgrac_ic_register_handler(uint16_t msg_type, const char* name,
                                         pgrac_ic_handler_fn fn) {
    if (!process_shared_preload_libraries_in_progress)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic handlers must be registered from _PG_init of a library "
                               "in shared_preload_libraries")));
    if (msg_type < PGRAC_IC_FIRST_USER_TYPE || msg_type > PGRAC_IC_MAX_MSG_TYPE || fn == nullptr)
        return PGRAC_IC_BAD_ARGUMENT;
    if (pgrac::glue::find_handler(msg_type) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_DUPLICATE_OBJECT),
                        errmsg("pgrac_ic message type %u already has a handler (%s)", msg_type,
                               pgrac::glue::find_handler(msg_type)->name)));
    pgrac::glue::put_handler(msg_type, name, fn);
    return PGRAC_IC_OK;
}
