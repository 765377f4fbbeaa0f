// RegistryMirror: see registry_mirror.hpp.
#include "ic/ges/registry_mirror.hpp"

#include <cstring>

#include "ic/base/atomics.hpp"

namespace pgrac::ic::ges {

namespace {

constexpr uint8_t kEmpty = 0, kLive = 1, kTomb = 2;

uint32_t round_up(uint32_t n) {
    uint32_t c = 16;
    while (c < n) c <<= 1;
    return c;
}

uint64_t key_hash(Owner o, const ResourceName& r) {
    uint64_t h = r.hash() ^ (static_cast<uint64_t>(o.node) << 48) ^
                 (static_cast<uint64_t>(o.proc) * 0x9E3779B97F4A7C15ull);
    h ^= h >> 31;
    h *= 0xBF58476D1CE4E5B9ull;
    return h ^ (h >> 29);
}

bool same_key(const MirrorSlot& s, Owner o, const ResourceName& r) {
    return s.node == o.node && s.proc == o.proc && s.kind == static_cast<uint8_t>(r.kind) &&
           s.len == r.len && std::memcmp(s.data, r.data, r.len) == 0;
}

void write(MirrorSlot* s, uint8_t state, const ReplayEntry* e) {
    const uint32_t odd = s->seq | 1u;         // a dead writer may have left it odd
    store_release(&s->seq, odd);              // odd: being written
    __atomic_signal_fence(__ATOMIC_SEQ_CST);  // the fields below stay after it
    s->state = state;
    if (e != nullptr) {
        s->lock_state = static_cast<uint8_t>(e->state);
        s->granted_mode = static_cast<uint8_t>(e->granted_mode);
        s->requested_mode = static_cast<uint8_t>(e->requested_mode);
        s->flags = e->flags;
        s->kind = static_cast<uint8_t>(e->resource.kind);
        s->len = e->resource.len;
        s->node = e->owner.node;
        s->proc = e->owner.proc;
        s->request_id = e->request_id;
        s->since = e->since;
        s->token = e->token;
        std::memcpy(s->data, e->resource.data, sizeof s->data);
        s->value_state = static_cast<uint8_t>(e->value.state);
        s->value_len = e->value.len;
        std::memcpy(s->value, e->value.data, sizeof s->value);
    }
    store_release(&s->seq, odd + 1);  // even: stable
}

}  // namespace

size_t RegistryMirror::bytes_for(uint32_t capacity) {
    return sizeof(MirrorHeader) + sizeof(MirrorSlot) * round_up(capacity);
}

RegistryMirror RegistryMirror::create(void* region, uint32_t capacity) {
    const uint32_t cap = round_up(capacity);
    std::memset(region, 0, sizeof(MirrorHeader) + sizeof(MirrorSlot) * cap);
    static_cast<MirrorHeader*>(region)->capacity = cap;
    return attach(region);
}

RegistryMirror RegistryMirror::attach(void* region) {
    RegistryMirror m;
    m.h_ = static_cast<MirrorHeader*>(region);
    m.slots_ = reinterpret_cast<MirrorSlot*>(static_cast<uint8_t*>(region) + sizeof(MirrorHeader));
    return m;
}

MirrorSlot* RegistryMirror::find(Owner o, const ResourceName& r, bool for_insert) const {
    const uint32_t mask = h_->capacity - 1;
    MirrorSlot* first_free = nullptr;
    for (uint32_t i = 0, at = static_cast<uint32_t>(key_hash(o, r)) & mask; i < h_->capacity;
         i++, at = (at + 1) & mask) {
        MirrorSlot* s = &slots_[at];
        if (s->state == kEmpty) return for_insert ? (first_free ? first_free : s) : nullptr;
        // Odd: torn by a dead writer, its key maybe half written: never a match.
        if (s->state == kTomb || (s->seq & 1) != 0) {
            if (first_free == nullptr) first_free = s;
            continue;
        }
        if (same_key(*s, o, r)) return s;
    }
    return for_insert ? first_free : nullptr;
}

bool RegistryMirror::put(const ReplayEntry& e) {
    if (h_ == nullptr) return false;
    if (MirrorSlot* s = find(e.owner, e.resource, false)) {
        write(s, kLive, &e);
        return true;
    }
    // Keep a quarter free, so that probes stay short and a miss ends.
    if ((h_->live + h_->tombstones + 1) * 4 > h_->capacity * 3) rebuild();
    if ((h_->live + 1) * 4 > h_->capacity * 3) {
        store_release(&h_->overflowed, 1u);
        return false;
    }
    MirrorSlot* s = find(e.owner, e.resource, true);
    if (s == nullptr) {
        store_release(&h_->overflowed, 1u);
        return false;
    }
    if (s->state == kTomb) h_->tombstones--;
    write(s, kLive, &e);
    h_->live++;
    return true;
}

void RegistryMirror::erase(Owner o, const ResourceName& r) {
    if (h_ == nullptr) return;
    if (MirrorSlot* s = find(o, r, false)) {
        write(s, kTomb, nullptr);
        h_->live--;
        h_->tombstones++;
    }
}

void RegistryMirror::erase_owner(Owner o) {
    if (h_ == nullptr) return;
    for (uint32_t i = 0; i < h_->capacity; i++) {
        MirrorSlot* s = &slots_[i];
        if (s->state == kLive && s->node == o.node && s->proc == o.proc) {
            write(s, kTomb, nullptr);
            h_->live--;
            h_->tombstones++;
        }
    }
}

void RegistryMirror::clear() {
    if (h_ == nullptr) return;
    store_release(&h_->overflowed, 1u);  // incomplete until every slot is empty
    for (uint32_t i = 0; i < h_->capacity; i++)
        if (slots_[i].state != kEmpty) write(&slots_[i], kEmpty, nullptr);
    h_->live = 0;
    h_->tombstones = 0;
    store_release(&h_->overflowed, 0u);
}

// Re-inserts the live entries without tombstones. The slots are emptied
// first, so while it runs the copy is incomplete: it is marked overflowed, and
// a reader after a writer that died in it does not trust it.
void RegistryMirror::rebuild() {
    std::vector<ReplayEntry> keep = entries();
    const uint32_t overflowed = h_->overflowed;
    store_release(&h_->overflowed, 1u);
    for (uint32_t i = 0; i < h_->capacity; i++)
        if (slots_[i].state != kEmpty) write(&slots_[i], kEmpty, nullptr);
    h_->live = 0;
    h_->tombstones = 0;
    for (const ReplayEntry& e : keep) {
        MirrorSlot* s = find(e.owner, e.resource, true);
        write(s, kLive, &e);
        h_->live++;
    }
    store_release(&h_->overflowed, overflowed);
}

std::vector<ReplayEntry> RegistryMirror::entries() const {
    std::vector<ReplayEntry> out;
    if (h_ == nullptr) return out;
    for (uint32_t i = 0; i < h_->capacity; i++) {
        const MirrorSlot& s = slots_[i];
        const uint32_t seq = load_acquire(&s.seq);
        if ((seq & 1) != 0 || s.state != kLive) continue;
        ReplayEntry e;
        e.owner = Owner{s.node, s.proc};
        e.state = static_cast<LockState>(s.lock_state);
        e.granted_mode = static_cast<LockMode>(s.granted_mode);
        e.requested_mode = static_cast<LockMode>(s.requested_mode);
        e.flags = s.flags;
        e.request_id = s.request_id;
        e.since = s.since;
        e.token = s.token;
        e.resource.kind = static_cast<ResourceKind>(s.kind);
        e.resource.len = s.len;
        std::memcpy(e.resource.data, s.data, sizeof e.resource.data);
        e.value.state = static_cast<ValueState>(s.value_state);
        e.value.len = s.value_len;
        std::memcpy(e.value.data, s.value, sizeof e.value.data);
        if (load_acquire(&s.seq) != seq) continue;
        out.push_back(e);
    }
    return out;
}

bool RegistryMirror::overflowed() const {
    return h_ != nullptr && load_acquire(&h_->overflowed) != 0;
}

uint32_t RegistryMirror::size() const {
    return h_ ? h_->live : 0;
}

uint32_t RegistryMirror::capacity() const {
    return h_ ? h_->capacity : 0;
}

}  // namespace pgrac::ic::ges
