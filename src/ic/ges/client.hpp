// The client side of GES on one node: what this node's owners hold and wait
// for, as the masters last told them, so that after a membership change the
// locks can be replayed to the resources' new masters.
//
// The glue records each request it sends and each reply it gets. The registry
// mirrors the master's view of this node's locks; plan_replay() says which of
// them each new master must be sent (LockTable::ingest_replay on the far side).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

struct ReplayBatch {
    uint16_t master = 0;               // send these here (may be this node)
    std::vector<ReplayEntry> entries;  // holders first, then pending by since
};

class ClientRegistry {
  public:
    // A request (or conversion) was sent. False, and no change, if the owner
    // already has one pending on the resource (the master would deny it).
    // A PW/EX holder's down-conversion that writes a value block records it at
    // once (a replay in a new epoch then carries it: the new master grants
    // the conversion, so the write takes effect).
    bool on_request(Owner owner, const ResourceName& resource, LockMode mode, uint64_t request_id,
                    uint8_t flags, int64_t now, const LockValue& value = {});
    // Replies from the master. Ignored unless request_id is the pending one
    // (a late reply to a cancelled request must not resurrect it).
    // A grant also tells the resource's value block (kept for the replay).
    void on_granted(Owner owner, const ResourceName& resource, uint64_t request_id, int64_t now,
                    const LockValue& value = {});
    void on_denied(Owner owner, const ResourceName& resource, uint64_t request_id);
    // The owner released the resource, or everything (backend exit).
    void on_released(Owner owner, const ResourceName& resource);
    void on_released_all(Owner owner);

    // Rebuilding after a restart of the process that kept the registry: the
    // master says the owner holds / waits for this. An entry the registry
    // already has (a newer request seen since the restart) wins, except that
    // a pending new request on a resource the master says is held becomes a
    // conversion from the held mode.
    void restore(const ReplayEntry& e);
    // The backend owners (not node owners: proc kNodeOwnerProc) with at least
    // one entry, and one owner's entries: indexed, so that the reaper does not
    // walk a registry of a million cached locks every round.
    std::vector<Owner> owners() const;
    std::vector<ReplayEntry> locks_of(Owner owner) const;

    std::optional<ReplayEntry> find(Owner owner, const ResourceName& resource) const;
    // Everything, ordered by resource, then owner.
    std::vector<ReplayEntry> locks() const;
    size_t size() const { return locks_.size(); }

    // What to replay, per new master, when membership goes from old_live to
    // new_live: every lock whose resource's master changed, plus every lock
    // mastered by a node in `restarted` (same id, new incarnation: it lost its
    // table). Batches are ordered by master.
    std::vector<ReplayBatch> plan_replay(const std::vector<uint16_t>& old_live,
                                         const std::vector<uint16_t>& new_live,
                                         const std::vector<uint16_t>& restarted = {}) const;

  private:
    using Key = LockKey;
    struct Held {
        ReplayEntry entry;
        uint64_t grant_id = 0;  // Converting: the id the held mode was granted under
    };
    void index(Owner owner, const ResourceName& resource);
    void unindex(Owner owner, const ResourceName& resource);
    std::map<Key, Held> locks_;
    std::map<Owner, std::set<ResourceName>> by_owner_;  // backend owners only
};

}  // namespace pgrac::ic::ges
