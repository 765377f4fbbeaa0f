// One-way messages of the C API (include/pgrac_ic/pgrac_ic.h): pgrac_ic_send
// to one node and pgrac_ic_broadcast to every other configured node, both
// through the outbound ring (src/capi/send_path.hpp); and pgrac_ic_my_node_id.
extern "C" {
#include "postgres.h"
}

#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;

extern "C" {

int pgrac_ic_my_node_id(void) {
    return pgrac_node_id;
}

int pgrac_ic_send(int node, uint16_t msg_type, uint32_t route_key, const void* body, uint32_t len,
                  int flags, int timeout_ms) {
    pgrac::glue::refuse_in_place();
    if (msg_type == 0 || msg_type > PGRAC_IC_MAX_MSG_TYPE || (len > 0 && body == nullptr))
        return PGRAC_IC_BAD_ARGUMENT;
    IcShared* shm = pgrac::glue::shared();
    MessageHeader mh;
    mh.msg_type = msg_type;
    mh.route_key = route_key;
    mh.epoch = shm ? load_relaxed(&shm->epoch) : 0;
    const uint16_t fflags = (flags & PGRAC_IC_CONTROL) ? kFlagControlLane : 0;
    return pgrac::glue::enqueue_message(node, fflags, mh, body, len, flags, timeout_ms);
}

int pgrac_ic_broadcast(uint16_t msg_type, uint32_t route_key, const void* body, uint32_t len,
                       int flags, int timeout_ms) {
    int first_failure = PGRAC_IC_OK;
    for (const NodeAddress& n : pgrac::glue::configured_nodes()) {
        if (n.node_id == pgrac_node_id) continue;
        int rc = pgrac_ic_send(n.node_id, msg_type, route_key, body, len, flags, timeout_ms);
        if (rc != PGRAC_IC_OK && first_failure == PGRAC_IC_OK) first_failure = rc;
    }
    return first_failure;
}

}  // extern "C"
