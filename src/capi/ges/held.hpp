// The global locks this session holds, and whether they are still valid: a
// grant is valid under the node's fence count and its shard's (LMS restart)
// fence count at the time of the grant; if either moved since, the lock is
// void (docs/ges.md, "Fencing").
#pragma once

#include <cstdint>

#include "ic/ges/mode.hpp"
#include "ic/ges/resource.hpp"

namespace pgrac::glue {

inline constexpr int kGesMaxHeld = 1024;

struct GesHeld {
    pgrac::ic::ges::ResourceName resource;
    pgrac::ic::ges::LockMode mode;
    int64_t count;
    uint32_t fences;
    uint32_t shard_fences;
    uint64_t token;  // fencing token of the grant
};

// The session's lock on r; nullptr if it holds none.
GesHeld* ges_find_held(const pgrac::ic::ges::ResourceName& r);
// Records a lock not held yet (the caller checked ges_held_count() < kGesMaxHeld).
void ges_add_held(const GesHeld& h);
// Forgets one lock (h from ges_find_held), or all of them.
void ges_drop_held(GesHeld* h);
void ges_forget_held();
int ges_held_count();
// What a grant made now is valid under: (node fences, shard fences).
void ges_current_fences(const pgrac::ic::ges::ResourceName& r, uint32_t* fences, uint32_t* shard);
// The holder's next GES call learns that locks were lost: they are dropped
// from the session (and given back to the master, best effort) and an ERROR
// says which and why.
void ges_void_lost_locks();

}  // namespace pgrac::glue
