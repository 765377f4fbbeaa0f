#include "ic/ges/client.hpp"

#include <algorithm>

namespace pgrac::ic::ges {

bool ClientRegistry::on_request(Owner owner, const ResourceName& resource, LockMode mode,
                                uint64_t request_id, uint8_t flags, int64_t now,
                                const LockValue& value) {
    const Key key{resource, owner};
    auto it = locks_.find(key);
    if (it == locks_.end()) {
        ReplayEntry e;
        e.owner = owner;
        e.resource = resource;
        e.state = LockState::Waiting;
        e.requested_mode = mode;
        e.request_id = request_id;
        e.flags = flags;
        e.since = now;
        locks_.emplace(key, Held{e, 0});
        index(owner, resource);
        return true;
    }
    ReplayEntry& e = it->second.entry;
    if (e.state != LockState::Granted) return false;
    it->second.grant_id = e.request_id;
    e.state = LockState::Converting;
    e.requested_mode = mode;
    e.request_id = request_id;
    e.flags = flags;
    e.since = now;
    if (value.carries() && mode_writes_value(e.granted_mode) &&
        !(e.granted_mode == LockMode::PW && mode == LockMode::EX))
        e.value = value;
    return true;
}

void ClientRegistry::on_granted(Owner owner, const ResourceName& resource, uint64_t request_id,
                                int64_t now, const LockValue& value) {
    auto it = locks_.find(Key{resource, owner});
    if (it == locks_.end()) return;
    ReplayEntry& e = it->second.entry;
    if (e.state == LockState::Granted || e.request_id != request_id) return;
    e.state = LockState::Granted;
    e.granted_mode = e.requested_mode;
    e.flags = 0;
    e.since = now;
    e.value = value;
}

void ClientRegistry::on_denied(Owner owner, const ResourceName& resource, uint64_t request_id) {
    auto it = locks_.find(Key{resource, owner});
    if (it == locks_.end()) return;
    ReplayEntry& e = it->second.entry;
    if (e.state == LockState::Granted || e.request_id != request_id) return;
    if (e.state == LockState::Waiting) {
        locks_.erase(it);
        unindex(owner, resource);
        return;
    }
    e.state = LockState::Granted;  // a refused conversion keeps the held mode
    e.requested_mode = e.granted_mode;
    // The id the held mode was granted under; a restored entry may not know
    // it, and then keeps the conversion's (same session, never zero).
    if (it->second.grant_id != 0) e.request_id = it->second.grant_id;
    e.flags = 0;
}

void ClientRegistry::on_released(Owner owner, const ResourceName& resource) {
    if (locks_.erase(Key{resource, owner}) != 0) unindex(owner, resource);
}

void ClientRegistry::on_released_all(Owner owner) {
    if (owner.proc != kNodeOwnerProc) {
        auto o = by_owner_.find(owner);
        if (o == by_owner_.end()) return;
        for (const ResourceName& r : o->second) locks_.erase(Key{r, owner});
        by_owner_.erase(o);
        return;
    }
    for (auto it = locks_.begin(); it != locks_.end();)
        it = it->first.owner == owner ? locks_.erase(it) : std::next(it);
}

void ClientRegistry::index(Owner owner, const ResourceName& resource) {
    if (owner.proc != kNodeOwnerProc) by_owner_[owner].insert(resource);
}

void ClientRegistry::unindex(Owner owner, const ResourceName& resource) {
    auto o = by_owner_.find(owner);
    if (o == by_owner_.end()) return;
    o->second.erase(resource);
    if (o->second.empty()) by_owner_.erase(o);
}

void ClientRegistry::restore(const ReplayEntry& e) {
    const Key key{e.resource, e.owner};
    auto it = locks_.find(key);
    if (it == locks_.end()) {
        // A converting entry's grant id is unknown here: the conversion's own id
        // stands in for it (nonzero, same session), never 0.
        locks_.emplace(key, Held{e, e.request_id});
        index(e.owner, e.resource);
        return;
    }
    ReplayEntry& have = it->second.entry;
    if (have.state == LockState::Waiting && e.state != LockState::Waiting &&
        have.request_id != e.request_id) {
        it->second.grant_id = e.state == LockState::Granted ? e.request_id : 0;
        have.state = LockState::Converting;
        have.granted_mode = e.granted_mode;
    }
}

std::vector<Owner> ClientRegistry::owners() const {
    std::vector<Owner> out;
    out.reserve(by_owner_.size());
    for (const auto& [owner, resources] : by_owner_) out.push_back(owner);
    return out;
}

std::vector<ReplayEntry> ClientRegistry::locks_of(Owner owner) const {
    std::vector<ReplayEntry> out;
    auto o = by_owner_.find(owner);
    if (o == by_owner_.end()) return out;
    for (const ResourceName& r : o->second) {
        auto it = locks_.find(Key{r, owner});
        if (it != locks_.end()) out.push_back(it->second.entry);
    }
    return out;
}

std::optional<ReplayEntry> ClientRegistry::find(Owner owner, const ResourceName& resource) const {
    auto it = locks_.find(Key{resource, owner});
    if (it == locks_.end()) return std::nullopt;
    return it->second.entry;
}

std::vector<ReplayEntry> ClientRegistry::locks() const {
    std::vector<ReplayEntry> out;
    out.reserve(locks_.size());
    for (const auto& [key, held] : locks_) out.push_back(held.entry);
    return out;
}

std::vector<ReplayBatch> ClientRegistry::plan_replay(const std::vector<uint16_t>& old_live,
                                                     const std::vector<uint16_t>& new_live,
                                                     const std::vector<uint16_t>& restarted) const {
    std::map<uint16_t, std::vector<ReplayEntry>> by_master;
    for (const auto& [key, held] : locks_) {
        const uint16_t before = master_for(key.resource, old_live);
        const uint16_t after = master_for(key.resource, new_live);
        if (after == 0) continue;  // nobody left to master it
        const bool lost_table =
            std::find(restarted.begin(), restarted.end(), after) != restarted.end();
        if (before != after || lost_table) by_master[after].push_back(held.entry);
    }
    std::vector<ReplayBatch> batches;
    for (auto& [master, entries] : by_master) {
        // Holders first (the master reinstates them before anyone queues), then
        // pending requests oldest first, so the new queues keep their order.
        std::stable_sort(entries.begin(), entries.end(),
                         [](const ReplayEntry& a, const ReplayEntry& b) {
                             const bool ha = a.state != LockState::Waiting;
                             const bool hb = b.state != LockState::Waiting;
                             if (ha != hb) return ha;
                             return a.since < b.since;
                         });
        batches.push_back({master, std::move(entries)});
    }
    return batches;
}

}  // namespace pgrac::ic::ges
