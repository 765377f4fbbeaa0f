extern "C" {
#include "postgres.h"
}

#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "capi/send_path.hpp"
#include "instance/shmem.hpp"
#include "capi/errors.hpp"

using namespace pgrac::ic;

namespace {

const char* const kStatusText[PGRAC_IC_STATUS_COUNT] = {
    "ok",
    "timed out waiting for the reply",
    "unknown node (not in cluster.nodes)",
    "peer unreachable",
    "send queue full",
    "message too large",
    "peer restarted while the request was in flight",
    "no handler for the message type on the peer",
    "the peer's handler raised an error",
    "reply larger than the buffer",
    "the interconnect listener is not running",
    "invalid argument",
    "the peer asked to back off",
};

}  // namespace

extern "C" const char* pgrac_ic_strerror(int status) {
    if (status < 0 || status >= PGRAC_IC_STATUS_COUNT) return "unknown status";
    return kStatusText[status];
}

namespace pgrac::glue {

IcShared* require_shared() {
    IcShared* shm = shared();
    if (shm == nullptr)
        ereport(
            ERROR,
            (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), errmsg("pgrac_ic is not loaded"),
             errhint("Add pgrac_ic to shared_preload_libraries and restart the server.")));
    return shm;
}

void require_known_node(int node) {
    if (!node_is_known(node))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("pgrac_ic: node %d is not in cluster.nodes", node),
                        errhint("Known nodes are listed in pg_cluster_ic_peers.")));
}

// The HINT of a failed status's ERROR: what to do about it (0: nothing to add).
int status_hint(int status) {
    switch (status) {
        case PGRAC_IC_TIMEOUT:
            return errhint(
                "The wait is bounded by cluster.rpc_timeout (%d ms); see the peer's "
                "state and RTT in pg_cluster_ic_peers.",
                pgrac_rpc_timeout_ms);
        case PGRAC_IC_NOT_RUNNING:
            return errhint(
                "Check that the pgrac_ic listener is running (pg_stat_activity, "
                "server log).");
        case PGRAC_IC_UNREACHABLE:
        case PGRAC_IC_PEER_RESET:
            return errhint(
                "See pg_cluster_ic_peers and pg_cluster_rdma_errors here and the "
                "peer's server log; retry once the peer is UP.");
        case PGRAC_IC_QUEUE_FULL:
        case PGRAC_IC_BACKOFF:
            return errhint(
                "The peer is not keeping up: retry, or raise "
                "cluster.send_queue_max_size / cluster.send_queue_max_messages.");
        default:
            return 0;
    }
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
    ereport(ERROR,
            (errcode(code),
             errmsg("pgrac_ic %s to node %d failed: %s", what, node, pgrac_ic_strerror(status)),
             state[0] ? errdetail("Peer state: %s.", state) : 0, status_hint(status)));
    pg_unreachable();
}

}  // namespace pgrac::glue
