extern "C" {
#include "postgres.h"
}

#include "capi/ges/held.hpp"
#include "capi/ges/names.hpp"
#include "capi/ges/send.hpp"
#include "instance/ges_shmem.hpp"
#include "instance/guc.hpp"
#include "ic/base/atomics.hpp"
#include "instance/shmem.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;

namespace pgrac::glue {

namespace {

GesHeld g_held[kGesMaxHeld];
int g_nheld = 0;

// This node's fence count now (a lapsed lease is marked fenced first).
uint32_t node_fences() {
    IcShared* shm = shared();
    (void)fence_if_lapsed(&shm->membership, lease_now_ms(&shm->membership));
    return lease_fences(lease_word(&shm->membership));
}

uint32_t shard_fences(const ResourceName& r) {
    GesShared* g = ges_shared();
    return g ? load_acquire(&g->shard_fences[ges_shard_of(r)]) : 0;
}

}  // namespace

GesHeld* ges_find_held(const ResourceName& r) {
    for (int i = 0; i < g_nheld; i++)
        if (g_held[i].resource == r) return &g_held[i];
    return nullptr;
}

void ges_add_held(const GesHeld& h) {
    g_held[g_nheld++] = h;
}

void ges_drop_held(GesHeld* h) {
    *h = g_held[g_nheld - 1];
    g_nheld--;
}

void ges_forget_held() {
    g_nheld = 0;
}

int ges_held_count() {
    return g_nheld;
}

void ges_current_fences(const ResourceName& r, uint32_t* fences, uint32_t* shard) {
    *fences = node_fences();
    *shard = shard_fences(r);
}

void ges_void_lost_locks() {
    if (g_nheld == 0 || shared() == nullptr) return;
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
        if (lost++ == 0) ges_resource_text(g_held[i].resource, first, sizeof first);
        // The master may still list it (granted under the new fences while the
        // request waited in a ring): give it back, best effort.
        const ResourceName r = g_held[i].resource;
        (void)ges_send_client(GesMsgType::Release, &r, route_key_for(r), LockMode::NL, 0, 0, 0,
                              DenyReason::Cancelled, 0);
        ges_drop_held(&g_held[i]);
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

}  // namespace pgrac::glue
