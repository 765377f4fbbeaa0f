extern "C" {
#include "postgres.h"
}

#include "guc.hpp"
#include "ic/atomics.hpp"
#include "send_path.hpp"
#include "shmem.hpp"
#include "views/ic_errors.hpp"

using namespace pgrac::ic;

namespace pgrac::glue {

void require_known_node(int node) {
    if (!node_is_known(node))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("pgrac_ic: node %d is not in cluster.nodes", node),
                        errhint("Known nodes are listed in pg_cluster_ic_peers.")));
}

void raise_status(int status, int node, const char* what, const void* reply, uint32_t reply_len) {
    int code = ERRCODE_CONNECTION_FAILURE;
    switch (status) {
        case PGRAC_IC_UNKNOWN_NODE:
            code = ERRCODE_UNDEFINED_OBJECT;
            break;
        case PGRAC_IC_TOO_BIG:
        case PGRAC_IC_BAD_ARGUMENT:
            code = ERRCODE_INVALID_PARAMETER_VALUE;
            break;
        case PGRAC_IC_QUEUE_FULL:
        case PGRAC_IC_BACKOFF:
            code = ERRCODE_CONFIGURATION_LIMIT_EXCEEDED;
            break;
        case PGRAC_IC_NO_HANDLER:
        case PGRAC_IC_HANDLER_ERROR:
            code = ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
            break;
        default:
            break;
    }
    const char* state = "";
    if (IcShared* shm = shared()) {
        if (PeerShared* p = peer_shared(shm, static_cast<uint32_t>(node)))
            state = peer_state_name(static_cast<PeerState>(load_relaxed(&p->state)));
    }
    if (status == PGRAC_IC_HANDLER_ERROR || status == PGRAC_IC_NO_HANDLER) {
        ereport(ERROR,
                (errcode(code),
                 errmsg("pgrac_ic %s to node %d failed: %s", what, node, pgrac_ic_strerror(status)),
                 reply_len > 0 ? errdetail("Remote error: %.*s", static_cast<int>(reply_len),
                                           static_cast<const char*>(reply))
                               : 0));
    }
    ereport(
        ERROR,
        (errcode(code),
         errmsg("pgrac_ic %s to node %d failed: %s", what, node, pgrac_ic_strerror(status)),
         state[0] ? errdetail("Peer state: %s.", state) : 0,
         status == PGRAC_IC_TIMEOUT
             ? errhint("The wait is bounded by cluster.rpc_timeout (%d ms).", pgrac_rpc_timeout_ms)
         : status == PGRAC_IC_NOT_RUNNING ? errhint("Check that the pgrac_ic listener is running "
                                                    "(pg_stat_activity, server log).")
                                          : 0));
    pg_unreachable();
}

}  // namespace pgrac::glue
