// Everything here may raise an error and holds only trivially destructible
// locals.
extern "C" {
#include "postgres.h"
}

#include "capi/errors.hpp"
#include "capi/ges/held.hpp"
#include "capi/ges/lock.hpp"
#include "capi/ges/names.hpp"
#include "capi/ges/send.hpp"
#include "capi/ges/wait.hpp"
#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"

using namespace pgrac::ic::ges;
using pgrac::ic::load_acquire;

namespace pgrac::glue {

namespace {

// CW and PR are unordered: if the conversion failed, giving the lock back to
// the held mode would itself be an up-conversion that may have to wait, and
// the session would believe a mode it does not hold.
void refuse_cw_pr_conversion(const GesHeld* h, const ResourceName& r, LockMode mode) {
    if (h == nullptr || h->mode == mode ||
        !((h->mode == LockMode::CW && mode == LockMode::PR) ||
          (h->mode == LockMode::PR && mode == LockMode::CW)))
        return;
    char name[80];
    ges_resource_text(r, name, sizeof name);
    ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                    errmsg("cannot convert global lock \"%s\" between CW and PR", name),
                    errdetail("CW and PR are unordered: neither includes the other."),
                    errhint("Convert to a mode that covers both (PW or EX), or release the lock "
                            "first.")));
}

// The master's denial (word: the slot's answer): false for NOWAIT and
// timeouts, an ERROR for the rest.
bool denied(const ResourceName& r, LockMode mode, uint64_t word) {
    const DenyReason why = static_cast<DenyReason>((word >> 8) & 0xff);
    char name[80];
    ges_resource_text(r, name, sizeof name);
    switch (why) {
        case DenyReason::NoWait:
        case DenyReason::Timeout:
            return false;
        case DenyReason::Deadlock:
            ereport(ERROR, (errcode(ERRCODE_T_R_DEADLOCK_DETECTED),
                            errmsg("deadlock detected on global lock \"%s\"", name),
                            errdetail("This session was chosen as the victim of a cycle of "
                                      "global lock waits; its request for %s was withdrawn.",
                                      lock_mode_name(mode)),
                            errhint("Locks this session already holds are kept; release them "
                                    "or retry.")));
            break;
        case DenyReason::NoQuorum:
            ges_void_lost_locks();
            ereport(ERROR,
                    (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                     errmsg("global lock request for \"%s\" was refused: no_quorum", name),
                     errdetail("Node %d is not a member of the cluster with a valid lease "
                               "(starting, fenced, or cut off from a majority).",
                               pgrac_node_id),
                     errhint("See pg_cluster_membership; retry once the node is a member.")));
            break;
        default:
            ereport(ERROR, (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
                            errmsg("global lock request for \"%s\" was refused: %s", name,
                                   deny_reason_name(why))));
    }
    return false;
}

}  // namespace

bool ges_lock(const ResourceName& r, LockMode mode, int timeout_ms) {
    if (timeout_ms < -1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("timeout_ms must be -1 (wait), 0 (NOWAIT) or positive")));
    GesWaitSlot* slot = ges_prepare();
    ges_void_lost_locks();
    GesHeld* h = ges_find_held(r);
    refuse_cw_pr_conversion(h, r, mode);
    if (h != nullptr && h->mode == mode) {
        h->count++;
        return true;
    }
    if (h == nullptr && ges_held_count() >= kGesMaxHeld)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("this session holds too many global locks (%d)", kGesMaxHeld)));
    const uint64_t id = ges_next_request_id();
    // NOWAIT still needs the master's answer; bound it (a remastering can
    // hold it back for up to the peer timeout).
    const int64_t limit_ms = timeout_ms > 0    ? timeout_ms
                             : timeout_ms == 0 ? pgrac_rpc_timeout_ms + 2 * pgrac_peer_timeout_ms
                                               : -1;
    uint64_t word = 0;
    bool timed_out = false;
    uint32_t fences0, shard0;
    ges_current_fences(r, &fences0, &shard0);
    const uint8_t flags = timeout_ms == 0 ? kNoWait : 0;
    const uint32_t wire_timeout = timeout_ms > 0 ? static_cast<uint32_t>(timeout_ms) : 0;
    ges_arm(slot,
            GesRequest{id, r, mode, flags, wire_timeout, h != nullptr, h ? h->mode : LockMode::NL});
    // From the armed slot to the end of the wait, any error (a cancel, a
    // failed send, anything raised in between) withdraws the request and
    // gives back a grant that won the race.
    PG_TRY();
    {
        // Room in the send queue is waited for within the caller's limit.
        const int rc = ges_send_client(GesMsgType::Request, &r, route_key_for(r), mode, id, flags,
                                       wire_timeout, DenyReason::Cancelled,
                                       limit_ms >= 0 ? static_cast<int>(limit_ms) : -1);
        if (rc != PGRAC_IC_OK) {
            // Not queued: nothing to withdraw.
            ges_disarm(slot);
            if (rc == PGRAC_IC_QUEUE_FULL && timeout_ms > 0) {
                timed_out = true;  // not granted within timeout_ms, like pg_try_advisory_lock
            } else {
                raise_status(rc, pgrac_node_id, "global lock request", nullptr, 0);
            }
        } else {
            ges_wait_answer(slot, timeout_ms, limit_ms, &word, &timed_out);
        }
    }
    PG_CATCH();
    {
        ges_abandon(slot, DenyReason::Cancelled);
        PG_RE_THROW();
    }
    PG_END_TRY();
    if (timed_out) return false;
    ges_disarm(slot);
    if ((word & 0xff) != kGesGranted) return denied(r, mode, word);
    const uint64_t token = load_acquire(&slot->token);
    h = ges_find_held(r);
    if (h != nullptr) {
        h->mode = mode;
        h->count++;
        h->token = token;
    } else {
        ges_add_held(GesHeld{r, mode, 1, fences0, shard0, token});
    }
    // Fenced while we waited: the grant is void like the rest.
    ges_void_lost_locks();
    return true;
}

bool ges_unlock(const ResourceName& r) {
    ges_void_lost_locks();
    GesHeld* h = ges_find_held(r);
    if (h == nullptr) {
        char name[80];
        ges_resource_text(r, name, sizeof name);
        ereport(WARNING, (errmsg("you don't own a global lock on \"%s\"", name)));
        return false;
    }
    if (h->count > 1) {
        h->count--;
        return true;
    }
    // The last level: the session keeps the lock until the Release is queued
    // (if it cannot be, the caller gets the error and the lock is still held,
    // for a retry, pgrac_ges_unlock_all() or the end of the session).
    const int rc = ges_send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                                   DenyReason::Cancelled, -1);
    if (rc != PGRAC_IC_OK) raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    ges_drop_held(ges_find_held(r));
    return true;
}

int ges_unlock_all() {
    ges_void_lost_locks();
    const int n = ges_held_count();
    if (ges_session_used()) {
        ges_prepare();
        const int rc = ges_send_release_all(-1);
        // Locks stay recorded as held unless every worker got the ReleaseAll.
        if (rc != PGRAC_IC_OK) raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    }
    ges_forget_held();
    return n;
}

bool ges_held_token(const ResourceName& r, uint64_t* token) {
    ges_void_lost_locks();
    const GesHeld* h = ges_find_held(r);
    if (h == nullptr) return false;
    *token = h->token;
    return true;
}

}  // namespace pgrac::glue
