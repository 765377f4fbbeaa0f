// Keeps the listener's smgr relations open between in-place block requests,
// under the rules of kept_files.hpp. An LMS worker (not serving in place)
// closes everything after every request, as before.
extern "C" {
#include "postgres.h"

#include "access/xlog.h"
#include "storage/smgr.h"
}

#include "capi/handler_registry.hpp"
#include "lms/kept_files.hpp"
#include "lms/request_server.hpp"

namespace pgrac::glue {

namespace {

// Relations kept open, and those opened by the request being served (at
// most pg_class's and the requested relation's; more sets g_overflow).
// 32: the listener's sockets are not counted in PostgreSQL's descriptor
// budget, so its file cache should not grow much past what it was.
constexpr int kMaxKept = 32;
constexpr int kMaxTouched = 4;
RelFileNode g_kept[kMaxKept];
int g_nkept = 0;
SMgrRelation g_touched[kMaxTouched];
int g_ntouched = 0;
bool g_overflow = false;
// The redo pointer when the kept files were checked last: a checkpoint that
// begins moves it.
XLogRecPtr g_redo = InvalidXLogRecPtr;

bool kept(RelFileNode rnode) {
    for (int i = 0; i < g_nkept; i++)
        if (RelFileNodeEquals(g_kept[i], rnode)) return true;
    return false;
}

void forget(RelFileNode rnode) {
    for (int i = 0; i < g_nkept; i++)
        if (RelFileNodeEquals(g_kept[i], rnode)) {
            g_kept[i] = g_kept[--g_nkept];
            return;
        }
}

// A second open segment in any fork: a later truncation by another process
// would not be seen through it (md.c starts counting at the last one).
bool one_segment_each(SMgrRelation sr) {
    for (int f = 0; f <= MAX_FORKNUM; f++)
        if (sr->md_num_open_segs[f] > 1) return false;
    return true;
}

}  // namespace

void kept_files_close_all() {
    smgrcloseall();
    g_nkept = 0;
    g_ntouched = 0;
    g_overflow = false;
}

void kept_files_begin() {
    g_ntouched = 0;
    g_overflow = false;
    if (!serving_in_place() || RecoveryInProgress()) {
        if (g_nkept > 0) kept_files_close_all();
        return;
    }
    const XLogRecPtr redo = GetRedoRecPtr();
    if (g_nkept > 0 && redo != g_redo) kept_files_close_all();
    g_redo = redo;
}

SMgrRelation kept_files_open(RelFileNode rnode) {
    SMgrRelation sr = smgropen(rnode, InvalidBackendId);
    if (g_ntouched < kMaxTouched)
        g_touched[g_ntouched++] = sr;
    else
        g_overflow = true;
    return sr;
}

bool kept_fork_is_open(SMgrRelation sr, ForkNumber fork) {
    // The redo pointer again: called after the identity check, which may
    // have passed for a relation created (with a reused number) after a
    // checkpoint that began during this request.
    return serving_in_place() && kept(sr->smgr_rnode.node) && sr->md_num_open_segs[fork] == 1 &&
           GetRedoRecPtr() == g_redo;
}

void kept_files_idle() {
    if (g_nkept > 0 && (RecoveryInProgress() || GetRedoRecPtr() != g_redo)) kept_files_close_all();
}

void kept_files_end() {
    if (!serving_in_place() || g_overflow || RecoveryInProgress()) {
        kept_files_close_all();
        return;
    }
    // Redo pointer first: a checkpoint that began during the request may
    // already have unlinked a file this request opened after its relation
    // was dropped (the identity check refused it, but it is open now).
    if (GetRedoRecPtr() != g_redo) {
        kept_files_close_all();
        return;
    }
    for (int i = 0; i < g_ntouched; i++) {
        SMgrRelation sr = g_touched[i];
        if (sr == nullptr) continue;
        const RelFileNode rnode = sr->smgr_rnode.node;
        if (!one_segment_each(sr)) {
            forget(rnode);
            smgrclose(sr);
            // A later entry may be the same relation, now closed.
            for (int j = i + 1; j < g_ntouched; j++)
                if (g_touched[j] == sr) g_touched[j] = nullptr;
            continue;
        }
        if (kept(rnode)) continue;
        if (g_nkept == kMaxKept) {
            kept_files_close_all();
            return;
        }
        g_kept[g_nkept++] = rnode;
    }
    g_ntouched = 0;
}

}  // namespace pgrac::glue
