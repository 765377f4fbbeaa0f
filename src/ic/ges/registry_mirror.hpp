// A copy of one LMS worker's client registry (ges::ClientRegistry: this node's
// locks and requests in the worker's shard) in shared memory, so that a
// restarted worker gets its node's locks back instead of losing them with the
// process (docs/ges.md, "LMS restart").
//
// Fixed capacity, open addressing with linear probing and tombstones, keyed
// by (owner, resource). One writer: the worker. One reader: the worker's next
// process, after the writer died. Each entry is published with a sequence
// number (odd while it is written), so the reader skips one the dead writer
// was in the middle of. Plain data only, found by address: it lives in shared
// memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ic/ges/types.hpp"

namespace pgrac::ic::ges {

struct MirrorSlot {
    uint32_t seq;   // even: stable; odd: being written
    uint8_t state;  // 0 empty, 1 live, 2 tombstone
    uint8_t lock_state;
    uint8_t granted_mode;
    uint8_t requested_mode;
    uint8_t flags;
    uint8_t kind;
    uint8_t len;
    uint8_t value_state;  // the entry's lock value block (ValueState)
    uint16_t node;
    uint8_t value_len;
    uint8_t pad;
    uint32_t proc;
    uint64_t request_id;
    int64_t since;
    uint64_t token;
    uint8_t data[kMaxResourceText];
    uint8_t value[kMaxLockValue];
};

struct MirrorHeader {
    uint32_t capacity;    // a power of two
    uint32_t overflowed;  // incomplete: a put found no room, or a clear/rebuild is running
    uint32_t live;
    uint32_t tombstones;
};

class RegistryMirror {
  public:
    // Bytes for a mirror of at least `capacity` entries (rounded up to a power of two).
    static size_t bytes_for(uint32_t capacity);
    // Lays out an empty mirror in `region` (bytes_for(capacity) bytes).
    static RegistryMirror create(void* region, uint32_t capacity);
    static RegistryMirror attach(void* region);
    RegistryMirror() = default;

    // Records (or replaces) the entry of (e.owner, e.resource). False, and the
    // mirror marked overflowed, when it is full.
    bool put(const ReplayEntry& e);
    void erase(Owner owner, const ResourceName& resource);
    void erase_owner(Owner owner);
    void clear();

    // Every complete live entry (for the restarted worker).
    std::vector<ReplayEntry> entries() const;
    bool overflowed() const;
    uint32_t size() const;
    uint32_t capacity() const;

  private:
    MirrorHeader* h_ = nullptr;
    MirrorSlot* slots_ = nullptr;

    // Slot of the key, or the first free one on its probe path (nullptr: full).
    MirrorSlot* find(Owner owner, const ResourceName& resource, bool for_insert) const;
    void rebuild();  // drops tombstones when they pile up
};

}  // namespace pgrac::ic::ges
