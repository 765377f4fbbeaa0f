// SQL interface of the Global Enqueue Service, backend side: session-level
// global locks (as pg_advisory_lock), their cleanup at backend exit, and the
// cluster-wide lock view.
//
// A request goes to this node's LMS worker for the resource (which records
// it and forwards it to the master); the answer comes back through this
// backend's GES wait slot (src/ges_shmem.hpp) and its latch. Everything that
// may raise an error holds only trivially destructible locals; GES wire
// encoding (which uses std::vector) happens in encode_msg() under guarded().
extern "C" {
#include "postgres.h"

#include "access/htup_details.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/tuplestore.h"
#include "utils/wait_event.h"

PG_FUNCTION_INFO_V1(pgrac_ges_lock_text);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_int);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_text);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_int);
PG_FUNCTION_INFO_V1(pgrac_ges_unlock_all_sql);
PG_FUNCTION_INFO_V1(pgrac_ges_locks);
PG_FUNCTION_INFO_V1(pgrac_ges_resource);
PG_FUNCTION_INFO_V1(pgrac_ges_bench);
PG_FUNCTION_INFO_V1(pgrac_ges_lock_token);
}

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "ges_shmem.hpp"
#include "guc.hpp"
#include "ic/atomics.hpp"
#include "ic/ges_wire.hpp"
#include "lms/ges_service.hpp"
#include "pg_boundary.hpp"
#include "shmem.hpp"
#include "views/ic_errors.hpp"
#include "views/srf.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::glue::GesWaitSlot;

namespace {

constexpr int kMaxHeld = 1024;
constexpr int kEncodeMax = 256;

// A lock this session holds, with what makes it valid: the node's fence
// count and the shard's (LMS restart) fence count when it was granted. If
// either moved since, the lock is void (docs/ges.md, "Fencing").
struct Held {
    ResourceName resource;
    LockMode mode;
    int64 count;
    uint32_t fences;
    uint32_t shard_fences;
    uint64_t token;  // fencing token of the grant
};

Held g_held[kMaxHeld];
int g_nheld = 0;
bool g_used = false;      // sent at least one request: clean up at exit
bool g_callback = false;  // exit callback registered
uint64_t g_id_high = 0;
uint32_t g_id_low = 0;

// The request being waited for, for the error path.
struct Pending {
    bool active;
    uint64_t request_id;
    ResourceName resource;
    bool was_held;
    LockMode prior;
    // To send the request again if its LMS worker restarts meanwhile.
    LockMode mode;
    uint8_t flags;
    uint32_t timeout_ms;
    uint32_t lms_starts;
};
Pending g_pending;

Held* find_held(const ResourceName& r) {
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].resource == r) return &g_held[i];
    return nullptr;
}

void drop_held(Held* h) {
    *h = g_held[g_nheld - 1];
    g_nheld--;
}

void resource_text(const ResourceName& r, char* out, size_t cap);

// Ids name this backend's slot and session (src/ges_shmem.hpp); prepare()
// sets g_id_high when the backend takes its slot.
uint64_t next_request_id() {
    if (++g_id_low == 0) g_id_low = 1;
    return g_id_high | g_id_low;
}

uint32_t shard_of(const ResourceName& r) {
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    return shm && shm->n_lms ? worker_for(r, shm->n_lms) : 0;
}

// This node's fence count now (a lapsed lease is marked fenced first).
uint32_t node_fences() {
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    (void)fence_if_lapsed(&shm->membership, monotonic_ns() / 1000000);
    return lease_fences(lease_word(&shm->membership));
}

uint32_t shard_fences(const ResourceName& r) {
    pgrac::glue::GesShared* g = pgrac::glue::ges_shared();
    return g ? load_acquire(&g->shard_fences[shard_of(r)]) : 0;
}

// What a grant made now is valid under: (node fences, shard fences).
void current_fences(const ResourceName& r, uint32_t* fences, uint32_t* shard) {
    *fences = node_fences();
    *shard = shard_fences(r);
}

int send_client(GesMsgType type, const ResourceName* r, uint32_t route_key, LockMode mode,
                uint64_t request_id, uint8_t flags, uint32_t timeout_ms, DenyReason reason,
                int wait_ms);

// The holder's next GES call learns that locks were lost: they are dropped
// from the session and a named error says which and why.
void void_lost_locks() {
    if (g_nheld == 0 || pgrac::glue::shared() == nullptr) return;
    int lost = 0;
    bool node_fenced = false;
    char first[80] = "";
    const uint32_t f = node_fences();  // once: it is the node's, not the lock's
    for (int i = 0; i < g_nheld;) {
        if (f == g_held[i].fences && shard_fences(g_held[i].resource) == g_held[i].shard_fences) {
            i++;
            continue;
        }
        node_fenced = node_fenced || f != g_held[i].fences;
        if (lost++ == 0) resource_text(g_held[i].resource, first, sizeof first);
        // The master may still list it (granted under the new fences while the
        // request waited in a ring): give it back, best effort.
        const ResourceName r = g_held[i].resource;
        (void)send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                          DenyReason::Cancelled, 0);
        drop_held(&g_held[i]);
    }
    if (lost == 0) return;
    ereport(ERROR,
            (errcode(ERRCODE_LOCK_NOT_AVAILABLE),
             errmsg("global lock lost: %d global lock(s) of this session, \"%s\" among them, are "
                    "void",
                    lost, first),
             errdetail(node_fenced ? "Node %d was fenced: it lost its membership lease (no "
                                     "quorum), and other nodes may hold these locks now."
                                   : "An LMS worker of node %d restarted and lost its part of "
                                     "these locks; other nodes may hold them now.",
                       pgrac_node_id),
             errhint("Take the locks again. Work done under them since then may conflict with "
                     "another holder's: upper layers check fencing tokens.")));
}

Owner my_owner() {
    return Owner{static_cast<uint16_t>(pgrac_node_id), static_cast<uint32_t>(MyProcPid)};
}

// Encodes one GES message into out (kEncodeMax bytes); returns its length,
// 0 on failure (message in err).
size_t encode_msg(GesMsgType type, const ResourceName* r, LockMode mode, uint64_t request_id,
                  uint8_t flags, uint32_t timeout_ms, DenyReason reason, uint8_t* out, char* err,
                  size_t errlen) {
    size_t n = 0;
    const bool ok = pgrac::glue::guarded(
        [&] {
            GesMessage m;
            m.type = type;
            m.owner = my_owner();
            if (r) m.resource = *r;
            m.mode = mode;
            m.request_id = request_id;
            m.flags = flags;
            m.timeout_ms = timeout_ms;
            m.reason = reason;
            std::vector<uint8_t> body;
            const GesWireError e = encode_ges_message(m, &body);
            if (e != GesWireError::None || body.size() > kEncodeMax)
                throw std::runtime_error(std::string("cannot encode GES message: ") +
                                         ges_wire_error_name(e));
            std::memcpy(out, body.data(), body.size());
            n = body.size();
        },
        err, errlen);
    return ok ? n : 0;
}

// Sends one message to this node's LMS worker for route_key. Returns a
// pgrac_ic status; `wait_ms` bounds the wait for queue room.
int send_client(GesMsgType type, const ResourceName* r, uint32_t route_key, LockMode mode,
                uint64_t request_id, uint8_t flags, uint32_t timeout_ms, DenyReason reason,
                int wait_ms) {
    uint8_t body[kEncodeMax];
    char err[256];
    const size_t n =
        encode_msg(type, r, mode, request_id, flags, timeout_ms, reason, body, err, sizeof err);
    if (n == 0) ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("pgrac_ic: %s", err)));
    return pgrac_ic_send(pgrac_node_id, pgrac::glue::kMsgGesClient, route_key, body,
                         static_cast<uint32_t>(n), PGRAC_IC_CONTROL, wait_ms);
}

// ReleaseAll to every local LMS worker; returns the first failure (or OK).
int send_release_all(int wait_ms) {
    int first = PGRAC_IC_OK;
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    for (uint32_t w = 0; shm && w < shm->n_lms; w++) {
        const int rc = send_client(GesMsgType::ReleaseAll, nullptr, w, LockMode::NL, 0, 0, 0,
                                   DenyReason::Cancelled, wait_ms);
        if (rc != PGRAC_IC_OK && first == PGRAC_IC_OK) first = rc;
    }
    return first;
}

// Backend exit. The ReleaseAll is a courtesy that makes the release prompt:
// if it cannot be queued (listener restarting, ring full) the LMS reaper
// releases the locks anyway once it sees the slot is no longer ours
// (clearing slot->pid below is what it looks for).
void ges_at_exit(int, Datum) {
    GesWaitSlot* slot = pgrac::glue::ges_my_slot();
    if (g_used) (void)send_release_all(1000);
    g_nheld = 0;
    g_pending.active = false;
    if (slot) {
        store_release(&slot->word, uint64_t{0});
        store_release(&slot->pid, 0);
    }
}

GesWaitSlot* prepare() {
    GesWaitSlot* slot = pgrac::glue::ges_my_slot();
    if (pgrac::glue::shared() == nullptr || slot == nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                        errmsg("pgrac_ic global locks need pgrac_ic in shared_preload_libraries")));
    if (!g_callback) {
        before_shmem_exit(ges_at_exit, 0);
        g_callback = true;
    }
    if (g_id_high == 0 || load_relaxed(&slot->pid) != MyProcPid) {
        // A new session in this slot: a new tag, so that the reaper tells the
        // previous owner (maybe with the same pid) from this one.
        const uint32_t session = load_relaxed(&slot->session) + 1;
        store_release(&slot->session, session);
        store_release(&slot->word, uint64_t{0});
        store_release(&slot->pid, static_cast<int32_t>(MyProcPid));
        g_id_high =
            pgrac::glue::ges_request_id_base(static_cast<uint32_t>(MyProc->pgprocno), session);
    }
    return slot;
}

// The backend stops waiting (timeout, cancel, error). If the answer won the
// race and was a grant, give it back: the caller will not believe it holds it.
void abandon(GesWaitSlot* slot, DenyReason why) {
    if (!g_pending.active) return;
    g_pending.active = false;
    const uint64_t id = g_pending.request_id;
    const ResourceName r = g_pending.resource;
    const uint32_t rk = route_key_for(r);
    uint64_t expected = pgrac::glue::ges_slot_word(id, pgrac::glue::kGesWaiting);
    HOLD_INTERRUPTS();
    if (compare_exchange(&slot->word, &expected, uint64_t{0})) {
        (void)send_client(GesMsgType::Cancel, &r, rk, LockMode::NL, id, 0, 0, why, 1000);
    } else if ((expected & 0xff) == pgrac::glue::kGesGranted) {
        if (g_pending.was_held)
            (void)send_client(GesMsgType::Request, &r, rk, g_pending.prior, next_request_id(), 0, 0,
                              DenyReason::Cancelled, 1000);
        else
            (void)send_client(GesMsgType::Release, &r, rk, LockMode::NL, 0, 0, 0,
                              DenyReason::Cancelled, 1000);
    }
    store_release(&slot->word, uint64_t{0});
    RESUME_INTERRUPTS();
}

ResourceName text_resource(text* t) {
    const int len = VARSIZE_ANY_EXHDR(t);
    const char* p = VARDATA_ANY(t);
    ResourceName r;
    if (len < 1 || len > static_cast<int>(kMaxResourceText) || memchr(p, 0, len) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("global lock resource names are 1 to %d bytes",
                               static_cast<int>(kMaxResourceText))));
    r.kind = ResourceKind::Text;
    r.len = static_cast<uint8_t>(len);
    memset(r.data, 0, sizeof r.data);
    memcpy(r.data, p, len);
    return r;
}

LockMode parse_mode(text* t) {
    char buf[8];
    const int len = VARSIZE_ANY_EXHDR(t);
    if (len >= 1 && len <= 2) {
        for (int i = 0; i < len; i++) buf[i] = pg_toupper(VARDATA_ANY(t)[i]);
        buf[len] = '\0';
        for (int m = 0; m < kLockModeCount; m++)
            if (strcmp(buf, lock_mode_name(static_cast<LockMode>(m))) == 0)
                return static_cast<LockMode>(m);
    }
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("unknown global lock mode \"%s\"", text_to_cstring(t)),
                    errhint("Modes are NL, CR, CW, PR, PW and EX.")));
    pg_unreachable();
}

void resource_text(const ResourceName& r, char* out, size_t cap) {
    if (r.is_text())
        snprintf(out, cap, "%.*s", static_cast<int>(r.len), reinterpret_cast<const char*>(r.data));
    else
        snprintf(out, cap, "#%lld", static_cast<long long>(r.int_value()));
}

// The LMS worker of the pending request restarted: the old process may have
// taken the request without recording it. Send it again (same id: a worker
// that has it ignores the copy, or delivers its grant again).
void resend_if_lms_restarted() {
    pgrac::glue::GesShared* g = pgrac::glue::ges_shared();
    GesWaitSlot* slot = pgrac::glue::ges_my_slot();
    if (!g_pending.active || g == nullptr || slot == nullptr) return;
    // Answered meanwhile: nothing to send.
    if ((load_acquire(&slot->word) & 0xff) != pgrac::glue::kGesWaiting) return;
    const uint32_t w = shard_of(g_pending.resource);
    const uint32_t starts = load_acquire(&g->lms_starts[w]);
    if (starts == g_pending.lms_starts) return;
    g_pending.lms_starts = starts;
    (void)send_client(GesMsgType::Request, &g_pending.resource, route_key_for(g_pending.resource),
                      g_pending.mode, g_pending.request_id, g_pending.flags, g_pending.timeout_ms,
                      DenyReason::Cancelled, 1000);
}

// Waits on the latch until the armed slot leaves Waiting (*word: its value)
// or limit_ms (-1: no limit) passes (*timed_out; the request is withdrawn, and
// for NOWAIT, where only a lost answer can take that long, an error raised).
// Interrupts are honoured: the caller's PG_CATCH withdraws the request.
void wait_answer(GesWaitSlot* slot, int timeout_ms, int64_t limit_ms, uint64_t* word,
                 bool* timed_out) {
    const uint64_t start = monotonic_ns();
    for (;;) {
        ResetLatch(MyLatch);
        *word = load_acquire(&slot->word);
        if ((*word & 0xff) != pgrac::glue::kGesWaiting) return;
        long wait_ms = 1000;
        if (limit_ms >= 0) {
            const int64_t left =
                limit_ms - static_cast<int64_t>((monotonic_ns() - start) / 1000000);
            if (left <= 0) {
                abandon(slot, DenyReason::Timeout);
                // The answer may have won the race: abandon() gave it back.
                if (timeout_ms == 0)
                    ereport(ERROR, (errcode(ERRCODE_CONNECTION_FAILURE),
                                    errmsg("no answer from the master of global lock within %lld "
                                           "ms",
                                           static_cast<long long>(limit_ms))));
                *timed_out = true;
                return;
            }
            wait_ms = Min(wait_ms, static_cast<long>(left));
        }
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, wait_ms,
                        PG_WAIT_EXTENSION);
        CHECK_FOR_INTERRUPTS();
        resend_if_lms_restarted();
    }
}

// Takes (or converts to) `mode`. true: granted; false: not granted within
// timeout_ms (0: NOWAIT). Errors for deadlock victims and failures.
bool ges_lock(const ResourceName& r, LockMode mode, int timeout_ms) {
    if (timeout_ms < -1)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("timeout_ms must be -1 (wait), 0 (NOWAIT) or positive")));
    GesWaitSlot* slot = prepare();
    void_lost_locks();
    Held* h = find_held(r);
    if (h != nullptr && h->mode != mode &&
        ((h->mode == LockMode::CW && mode == LockMode::PR) ||
         (h->mode == LockMode::PR && mode == LockMode::CW))) {
        // CW and PR are unordered: if the conversion failed, giving the lock
        // back to the held mode would itself be an up-conversion that may
        // have to wait, and the session would believe a mode it does not hold.
        char name[80];
        resource_text(r, name, sizeof name);
        ereport(ERROR,
                (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                 errmsg("cannot convert global lock \"%s\" between CW and PR", name),
                 errdetail("CW and PR are unordered: neither includes the other."),
                 errhint("Convert to a mode that covers both (PW or EX), or release the lock "
                         "first.")));
    }
    if (h != nullptr && h->mode == mode) {
        h->count++;
        return true;
    }
    if (h == nullptr && g_nheld >= kMaxHeld)
        ereport(ERROR, (errcode(ERRCODE_OUT_OF_MEMORY),
                        errmsg("this session holds too many global locks (%d)", kMaxHeld)));
    const uint64_t id = next_request_id();
    // NOWAIT still needs the master's answer; bound it (a remastering can
    // hold it back for up to the peer timeout).
    const int64_t limit_ms = timeout_ms > 0    ? timeout_ms
                             : timeout_ms == 0 ? pgrac_rpc_timeout_ms + 2 * pgrac_peer_timeout_ms
                                               : -1;
    uint64_t word = 0;
    bool timed_out = false;
    uint32_t fences0, shard0;
    current_fences(r, &fences0, &shard0);
    const uint8_t flags = timeout_ms == 0 ? kNoWait : 0;
    const uint32_t wire_timeout = timeout_ms > 0 ? static_cast<uint32_t>(timeout_ms) : 0;
    pgrac::glue::GesShared* gs = pgrac::glue::ges_shared();
    g_pending = Pending{true,
                        id,
                        r,
                        h != nullptr,
                        h ? h->mode : LockMode::NL,
                        mode,
                        flags,
                        wire_timeout,
                        gs ? load_acquire(&gs->lms_starts[shard_of(r)]) : 0};
    store_release(&slot->request_id, id);
    store_release(&slot->word, pgrac::glue::ges_slot_word(id, pgrac::glue::kGesWaiting));
    g_used = true;
    // From the armed slot to the end of the wait, any error (a cancel, a
    // failed send, anything raised in between) withdraws the request and
    // gives back a grant that won the race.
    PG_TRY();
    {
        // Room in the send queue is waited for within the caller's limit.
        const int rc =
            send_client(GesMsgType::Request, &r, route_key_for(r), mode, id, flags, wire_timeout,
                        DenyReason::Cancelled, limit_ms >= 0 ? static_cast<int>(limit_ms) : -1);
        if (rc != PGRAC_IC_OK) {
            // Not queued: nothing to withdraw.
            g_pending.active = false;
            store_release(&slot->word, uint64_t{0});
            if (rc == PGRAC_IC_QUEUE_FULL && timeout_ms > 0) {
                timed_out = true;  // not granted within timeout_ms, like pg_try_advisory_lock
            } else {
                pgrac::glue::raise_status(rc, pgrac_node_id, "global lock request", nullptr, 0);
            }
        } else {
            wait_answer(slot, timeout_ms, limit_ms, &word, &timed_out);
        }
    }
    PG_CATCH();
    {
        abandon(slot, DenyReason::Cancelled);
        PG_RE_THROW();
    }
    PG_END_TRY();
    if (timed_out) return false;
    g_pending.active = false;
    store_release(&slot->word, uint64_t{0});
    if ((word & 0xff) == pgrac::glue::kGesGranted) {
        const uint64_t token = load_acquire(&slot->token);
        h = find_held(r);
        if (h != nullptr) {
            h->mode = mode;
            h->count++;
            h->token = token;
        } else {
            g_held[g_nheld++] = Held{r, mode, 1, fences0, shard0, token};
        }
        // Fenced while we waited: the grant is void like the rest.
        void_lost_locks();
        return true;
    }
    const DenyReason why = static_cast<DenyReason>((word >> 8) & 0xff);
    char name[80];
    resource_text(r, name, sizeof name);
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
            void_lost_locks();
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

bool ges_unlock(const ResourceName& r) {
    void_lost_locks();
    Held* h = find_held(r);
    if (h == nullptr) {
        char name[80];
        resource_text(r, name, sizeof name);
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
    const int rc = send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                               DenyReason::Cancelled, -1);
    if (rc != PGRAC_IC_OK)
        pgrac::glue::raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    drop_held(find_held(r));
    return true;
}

// The members of the committed membership view (this node alone before the first).
int64 count_live(uint16_t* live) {
    int64 n = 0;
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    const View v = shm ? committed_view(&shm->membership) : View{};
    for (uint16_t id : mask_nodes(v.members & ~pgrac::glue::witness_mask())) live[n++] = id;
    if (n == 0) live[n++] = static_cast<uint16_t>(pgrac_node_id);
    return n;
}

}  // namespace

Datum pgrac_ges_lock_text(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    PG_RETURN_BOOL(ges_lock(r, parse_mode(PG_GETARG_TEXT_PP(1)), PG_GETARG_INT32(2)));
}

// The bigint forms go through the C API, so that SQL tests exercise it too.
Datum pgrac_ges_lock_int(PG_FUNCTION_ARGS) {
    const auto mode = static_cast<pgrac_ges_mode>(parse_mode(PG_GETARG_TEXT_PP(1)));
    PG_RETURN_BOOL(pgrac_ges_lock_id(PG_GETARG_INT64(0), mode, PG_GETARG_INT32(2)) != 0);
}

Datum pgrac_ges_unlock_text(PG_FUNCTION_ARGS) {
    PG_RETURN_BOOL(ges_unlock(text_resource(PG_GETARG_TEXT_PP(0))));
}

Datum pgrac_ges_unlock_int(PG_FUNCTION_ARGS) {
    PG_RETURN_BOOL(pgrac_ges_unlock_id(PG_GETARG_INT64(0)) != 0);
}

// Releases every global lock of this session; returns how many resources.
Datum pgrac_ges_unlock_all_sql(PG_FUNCTION_ARGS) {
    PG_RETURN_INT32(pgrac_ges_unlock_all());
}

// Where a resource is mastered now, and which LMS worker owns it there.
Datum pgrac_ges_resource(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    uint16_t live[kMaxNodes + 1];
    const int64 n = count_live(live);
    uint16_t master = 0;
    char err[128];
    const bool ok = pgrac::glue::guarded(
        [&] { master = master_for(r, std::vector<uint16_t>(live, live + n)); }, err, sizeof err);
    if (!ok) ereport(ERROR, (errmsg("pgrac_ic: %s", err)));
    pgrac::ic::IcShared* shm = pgrac::glue::shared();
    TupleDesc desc;
    if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
        ereport(ERROR, (errmsg("return type must be a row type")));
    Datum v[3] = {Int32GetDatum(master),
                  Int32GetDatum(shm && shm->n_lms ? worker_for(r, shm->n_lms) : 0),
                  Int64GetDatum(static_cast<int64>(route_key_for(r)))};
    bool nulls[3] = {false, false, false};
    PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), v, nulls)));
}

// Every lock of every reachable master (live nodes x LMS workers).
Datum pgrac_ges_locks(PG_FUNCTION_ARGS) {
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    uint16_t live[kMaxNodes + 1];
    const int64 nlive = count_live(live);
    std::sort(live, live + nlive);
    uint8_t* buf = static_cast<uint8_t*>(palloc(PGRAC_IC_MAX_MESSAGE));
    for (int64 i = 0; i < nlive; i++) {
        uint32_t n_lms = 1;
        for (uint32_t w = 0; w < n_lms; w++) {
            uint32_t len = 0;
            const int rc = pgrac_ic_rpc(live[i], pgrac::glue::kMsgGesView, w, nullptr, 0, buf,
                                        PGRAC_IC_MAX_MESSAGE, &len, PGRAC_IC_CONTROL, -1);
            if (rc != PGRAC_IC_OK || len < 9) {
                ereport(NOTICE, (errmsg("GES locks of node %u worker %u not read: %s", live[i], w,
                                        pgrac_ic_strerror(rc))));
                break;
            }
            n_lms = buf[0] | buf[1] << 8 | buf[2] << 16 | static_cast<uint32_t>(buf[3]) << 24;
            // A peer's word, not ours to trust with the number of RPCs.
            n_lms = Max(1u, Min(n_lms, static_cast<uint32_t>(kMaxLmsWorkers)));
            const uint32_t rows =
                buf[4] | buf[5] << 8 | buf[6] << 16 | static_cast<uint32_t>(buf[7]) << 24;
            if (buf[8])
                ereport(NOTICE, (errmsg("GES locks of node %u worker %u truncated", live[i], w)));
            uint32_t off = 9;
            for (uint32_t k = 0; k < rows; k++) {
                if (off + 1 > len || off + 1 + buf[off] + 27 > len) break;
                const uint32_t rl = buf[off];
                const uint8_t* p = buf + off + 1 + rl;
                Datum v[9];
                bool nulls[9] = {false, false, false, false, false, false, false, false, false};
                v[0] = PointerGetDatum(cstring_to_text_with_len(
                    reinterpret_cast<const char*>(buf + off + 1), static_cast<int>(rl)));
                v[1] = Int32GetDatum(p[0] | p[1] << 8);
                v[2] = Int32GetDatum(p[2] | p[3] << 8);
                v[3] = Int32GetDatum(static_cast<int32>(p[4] | p[5] << 8 | p[6] << 16 |
                                                        static_cast<uint32_t>(p[7]) << 24));
                const LockMode mode = static_cast<LockMode>(p[8] % kLockModeCount);
                const LockMode held = static_cast<LockMode>(p[9] % kLockModeCount);
                const LockState st = static_cast<LockState>(p[10]);
                int64_t since = 0;
                for (int b = 0; b < 8; b++) since |= static_cast<int64_t>(p[11 + b]) << (8 * b);
                v[4] = CStringGetTextDatum(lock_mode_name(mode));
                v[5] = CStringGetTextDatum(lock_mode_name(held));
                nulls[5] = st != LockState::Converting;
                v[6] = CStringGetTextDatum(lock_state_name(st));
                v[7] = pgrac::glue::unix_us_to_timestamptz(since);
                uint64_t token = 0;
                for (int b = 0; b < 8; b++) token |= static_cast<uint64_t>(p[19 + b]) << (8 * b);
                v[8] = Int64GetDatum(static_cast<int64>(token));
                nulls[8] = token == 0;
                tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
                off += 1 + rl + 27;
            }
        }
    }
    return (Datum)0;
}

// Latency of lock + unlock of one resource, measured in this backend.
Datum pgrac_ges_bench(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    const LockMode mode = parse_mode(PG_GETARG_TEXT_PP(1));
    const int iterations = PG_GETARG_INT32(2);
    if (iterations < 1 || iterations > 10000000)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("iterations must be between 1 and 10000000")));
    if (find_held(r) != nullptr)
        ereport(ERROR, (errcode(ERRCODE_OBJECT_IN_USE),
                        errmsg("release the lock before benchmarking it")));
    uint64_t* samples = static_cast<uint64_t*>(palloc(sizeof(uint64_t) * iterations));
    const uint64_t begin = monotonic_ns();
    for (int i = 0; i < iterations; i++) {
        const uint64_t t0 = monotonic_ns();
        if (!ges_lock(r, mode, -1)) ereport(ERROR, (errmsg("global lock not granted")));
        ges_unlock(r);
        samples[i] = monotonic_ns() - t0;
    }
    const uint64_t elapsed = monotonic_ns() - begin;
    std::sort(samples, samples + iterations);
    auto pct = [&](double q) {
        return Float8GetDatum(
            static_cast<double>(samples[static_cast<int>(q * (iterations - 1) + 0.5)]) / 1000.0);
    };
    InitMaterializedSRF(fcinfo, 0);
    ReturnSetInfo* rsinfo = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
    Datum v[4] = {pct(0.5), pct(0.99),
                  Float8GetDatum(iterations / (static_cast<double>(elapsed) / 1e9)),
                  Int32GetDatum(iterations)};
    bool n[4] = {false, false, false, false};
    tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, n);
    return (Datum)0;
}

// ---- the C API (include/pgrac_ic/pgrac_ic.h) for upper layers

namespace {

LockMode api_mode(pgrac_ges_mode mode) {
    if (static_cast<int>(mode) < 0 || static_cast<int>(mode) >= pgrac::ic::ges::kLockModeCount)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("invalid global lock mode %d", static_cast<int>(mode))));
    return static_cast<LockMode>(mode);
}

ResourceName api_name(const char* resource) {
    if (resource == nullptr)
        ereport(ERROR, (errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
                        errmsg("global lock resource name must not be NULL")));
    text* t = cstring_to_text_with_len(resource, static_cast<int>(strnlen(resource, 4096)));
    return text_resource(t);
}

}  // namespace

extern "C" int pgrac_ges_lock_name(const char* resource, pgrac_ges_mode mode, int timeout_ms) {
    return ges_lock(api_name(resource), api_mode(mode), timeout_ms) ? 1 : 0;
}

extern "C" int pgrac_ges_lock_id(int64_t resource, pgrac_ges_mode mode, int timeout_ms) {
    return ges_lock(ResourceName::from_int(resource), api_mode(mode), timeout_ms) ? 1 : 0;
}

extern "C" int pgrac_ges_unlock_name(const char* resource) {
    return ges_unlock(api_name(resource)) ? 1 : 0;
}

extern "C" int pgrac_ges_unlock_id(int64_t resource) {
    return ges_unlock(ResourceName::from_int(resource)) ? 1 : 0;
}

extern "C" uint64_t pgrac_ges_token_name(const char* resource) {
    const ResourceName r = api_name(resource);
    void_lost_locks();
    const Held* h = find_held(r);
    return h ? h->token : 0;
}

extern "C" uint64_t pgrac_ges_token_id(int64_t resource) {
    void_lost_locks();
    const Held* h = find_held(ResourceName::from_int(resource));
    return h ? h->token : 0;
}

// The fencing token of a lock this session holds; NULL if it holds none.
Datum pgrac_ges_lock_token(PG_FUNCTION_ARGS) {
    const ResourceName r = text_resource(PG_GETARG_TEXT_PP(0));
    void_lost_locks();
    const Held* h = find_held(r);
    if (h == nullptr) PG_RETURN_NULL();
    PG_RETURN_INT64(static_cast<int64>(h->token));
}

extern "C" int pgrac_ges_unlock_all(void) {
    void_lost_locks();
    const int n = g_nheld;
    if (g_used) {
        prepare();
        const int rc = send_release_all(-1);
        // Locks stay recorded as held unless every worker got the ReleaseAll.
        if (rc != PGRAC_IC_OK)
            pgrac::glue::raise_status(rc, pgrac_node_id, "global lock release", nullptr, 0);
    }
    g_nheld = 0;
    return n;
}
