#include "ic/ges/wire.hpp"

#include <algorithm>
#include <cstring>

#include "ic/wire/codec.hpp"
#include "ic/base/node_list.hpp"

namespace pgrac::ic::ges {

namespace {

using codec::Reader;
using codec::Writer;

void put_owner(Writer& w, Owner o) {
    w.le(o.node);
    w.le(o.proc);
}

void put_resource(Writer& w, const ResourceName& r) {
    w.le(static_cast<uint8_t>(r.kind));
    w.le(r.len);
    w.bytes(r.data, r.len);
}

void put_value(Writer& w, const LockValue& v) {
    w.le(static_cast<uint8_t>(v.state));
    if (v.state != ValueState::Valid) return;
    w.le(v.len);
    w.bytes(v.data, v.len);
}

// Field checks shared by encode and decode.

bool value_ok(const LockValue& v) {
    return static_cast<uint8_t>(v.state) <= kMaxValueState &&
           (v.state != ValueState::Valid || v.len <= kMaxLockValue);
}

bool node_ok(uint16_t node) {
    return node >= 1 && node <= kMaxNodes;
}

bool mode_ok(LockMode m) {
    return lock_mode_valid(static_cast<uint8_t>(m));
}

bool resource_ok(const ResourceName& r) {
    if (r.kind == ResourceKind::Int) return r.len == 8;
    if (r.kind != ResourceKind::Text || r.len == 0 || r.len > kMaxResourceText) return false;
    return std::memchr(r.data, 0, r.len) == nullptr;
}

bool cancel_reason_ok(DenyReason r) {
    return r == DenyReason::Cancelled || r == DenyReason::Timeout || r == DenyReason::Deadlock;
}

bool deny_reason_ok(DenyReason r) {
    const auto v = static_cast<uint8_t>(r);
    return v >= 1 && v <= kMaxDenyReason;
}

GesWireError check_edge(const WaitForEdge& e) {
    if (!node_ok(e.waiter.node) || !node_ok(e.holder.node) || !node_ok(e.master))
        return GesWireError::BadNode;
    if (e.waiter == e.holder) return GesWireError::BadEdge;
    if (e.request_id == 0) return GesWireError::BadRequestId;
    if (!resource_ok(e.resource)) return GesWireError::BadResource;
    return GesWireError::None;
}

GesWireError check_entry(const ReplayEntry& e) {
    if (!node_ok(e.owner.node)) return GesWireError::BadNode;
    if (e.request_id == 0) return GesWireError::BadRequestId;
    if (!mode_ok(e.granted_mode) || !mode_ok(e.requested_mode)) return GesWireError::BadMode;
    if ((e.flags & ~kKnownEntryFlags) != 0) return GesWireError::BadFlags;
    switch (e.state) {
        case LockState::Granted:
            if (e.requested_mode != e.granted_mode) return GesWireError::BadState;
            break;
        case LockState::Converting:
            if (e.requested_mode == e.granted_mode) return GesWireError::BadState;
            break;
        case LockState::Waiting:
            if (e.granted_mode != LockMode::NL) return GesWireError::BadState;
            if (e.value.carries()) return GesWireError::BadValue;  // holds nothing
            break;
        default:
            return GesWireError::BadState;
    }
    if (!resource_ok(e.resource)) return GesWireError::BadResource;
    if (!value_ok(e.value)) return GesWireError::BadValue;
    return GesWireError::None;
}

// Everything but the framing: what must hold of a message of its type.
GesWireError check_message(const GesMessage& m) {
    const auto t = static_cast<uint8_t>(m.type);
    if (t == 0 || t > kMaxGesMsgType) return GesWireError::BadType;
    if (m.type == GesMsgType::HandOff) {
        if (!resource_ok(m.resource)) return GesWireError::BadResource;
        if (!value_ok(m.value)) return GesWireError::BadValue;
        if (m.entries.size() > kMaxReplayEntries) return GesWireError::BadCount;
        for (const ReplayEntry& e : m.entries) {
            if (GesWireError err = check_entry(e); err != GesWireError::None) return err;
            if (!(e.resource == m.resource)) return GesWireError::BadInner;
        }
        return GesWireError::None;
    }
    if (m.type == GesMsgType::HandOffAck || m.type == GesMsgType::Moved ||
        m.type == GesMsgType::Drained)
        return resource_ok(m.resource) ? GesWireError::None : GesWireError::BadResource;
    if (m.type == GesMsgType::Forwarded) {
        if (!node_ok(m.origin)) return GesWireError::BadNode;
        if (m.inner.empty() || m.inner.size() > kMaxForwardedInner) return GesWireError::BadInner;
        GesMessage in;
        if (decode_ges_message(m.inner.data(), m.inner.size(), &in) != GesWireError::None ||
            !forwardable(in.type) || in.epoch != m.epoch)
            return GesWireError::BadInner;
        return GesWireError::None;
    }
    if (m.type == GesMsgType::Replay) {
        if ((m.flags & ~kReplayLast) != 0) return GesWireError::BadFlags;
        if (m.entries.size() > kMaxReplayEntries) return GesWireError::BadCount;
        for (const ReplayEntry& e : m.entries)
            if (GesWireError err = check_entry(e); err != GesWireError::None) return err;
        return GesWireError::None;
    }
    switch (m.type) {
        case GesMsgType::WaitHint:
            return m.worker < kMaxWireWorkers ? GesWireError::None : GesWireError::BadWorker;
        case GesMsgType::ReplayDone:
            return m.n_workers >= 1 && m.n_workers <= kMaxWireWorkers && m.worker < m.n_workers
                       ? GesWireError::None
                       : GesWireError::BadWorker;
        case GesMsgType::EdgesRequest:
            return m.round != 0 && m.wait_ms != 0 ? GesWireError::None : GesWireError::BadRound;
        case GesMsgType::Edges:
            if (m.round == 0) return GesWireError::BadRound;
            if (m.worker >= kMaxWireWorkers) return GesWireError::BadWorker;
            if ((m.flags & ~kKnownEdgesFlags) != 0) return GesWireError::BadFlags;
            if (m.edges.size() > kMaxEdgeEntries) return GesWireError::BadCount;
            for (const WaitForEdge& e : m.edges)
                if (GesWireError err = check_edge(e); err != GesWireError::None) return err;
            return GesWireError::None;
        default:
            break;
    }
    if (!node_ok(m.owner.node)) return GesWireError::BadNode;
    if (m.type == GesMsgType::ReleaseAll) return GesWireError::None;
    const bool has_id = m.type != GesMsgType::Release && m.type != GesMsgType::Transfer &&
                        m.type != GesMsgType::CacheNotify;
    if (has_id && m.type != GesMsgType::Cancel && m.type != GesMsgType::Withdraw &&
        m.request_id == 0)
        return GesWireError::BadRequestId;
    switch (m.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert:
            if (!mode_ok(m.mode)) return GesWireError::BadMode;
            if ((m.flags & ~kKnownRequestFlags) != 0) return GesWireError::BadFlags;
            break;
        case GesMsgType::Cancel:
        case GesMsgType::Withdraw:
            if (!cancel_reason_ok(m.reason)) return GesWireError::BadReason;
            break;
        case GesMsgType::Grant:
        case GesMsgType::Queued:
            if (!mode_ok(m.mode)) return GesWireError::BadMode;
            break;
        case GesMsgType::Bast:
            // NL never blocks anyone, so a BAST for it is nonsense.
            if (!mode_ok(m.mode) || m.mode == LockMode::NL) return GesWireError::BadMode;
            break;
        case GesMsgType::Deny:
            if (!mode_ok(m.mode)) return GesWireError::BadMode;
            if (!deny_reason_ok(m.reason)) return GesWireError::BadReason;
            break;
        case GesMsgType::Transfer:
            if (m.to_proc == m.owner.proc) return GesWireError::BadEdge;  // to itself
            break;
        default:
            break;
    }
    if (!resource_ok(m.resource)) return GesWireError::BadResource;
    if (!value_ok(m.value)) return GesWireError::BadValue;
    return GesWireError::None;
}

// The replay entry encoding (Replay, HandOff).
void put_entry(Writer& w, const ReplayEntry& e) {
    put_owner(w, e.owner);
    w.le<uint64_t>(e.request_id);
    w.le<uint64_t>(static_cast<uint64_t>(e.since));
    w.le<uint8_t>(static_cast<uint8_t>(e.state));
    w.le<uint8_t>(static_cast<uint8_t>(e.granted_mode));
    w.le<uint8_t>(static_cast<uint8_t>(e.requested_mode));
    w.le<uint8_t>(e.flags);
    w.le<uint64_t>(e.token);
    put_resource(w, e.resource);
    put_value(w, e.value);
}

bool carries_value(GesMsgType t) {
    return t == GesMsgType::Request || t == GesMsgType::Convert || t == GesMsgType::Release ||
           t == GesMsgType::Transfer || t == GesMsgType::Grant;
}

// Reads a resource, checking each part as soon as it is read; returns false
// (with the error) when it does not parse.
bool read_resource(Reader& r, ResourceName* out, GesWireError* err) {
    const uint8_t kind = r.le<uint8_t>();
    const uint8_t len = r.le<uint8_t>();
    if (!r.ok()) {
        *err = GesWireError::Truncated;
        return false;
    }
    const bool is_text = kind == static_cast<uint8_t>(ResourceKind::Text);
    const bool is_int = kind == static_cast<uint8_t>(ResourceKind::Int);
    if (!(is_text && len >= 1 && len <= kMaxResourceText) && !(is_int && len == 8)) {
        *err = GesWireError::BadResource;
        return false;
    }
    const uint8_t* b = r.bytes(len);
    if (b == nullptr) {
        *err = GesWireError::Truncated;
        return false;
    }
    ResourceName res;
    res.kind = static_cast<ResourceKind>(kind);
    res.len = len;
    std::memset(res.data, 0, sizeof res.data);
    std::memcpy(res.data, b, len);
    if (!resource_ok(res)) {  // a NUL in the text
        *err = GesWireError::BadResource;
        return false;
    }
    *out = res;
    return true;
}

// Reads a value block; false (with the error) when it does not parse.
bool read_value(Reader& r, LockValue* out, GesWireError* err) {
    LockValue v;
    const uint8_t state = r.le<uint8_t>();
    if (!r.ok()) {
        *err = GesWireError::Truncated;
        return false;
    }
    if (state > kMaxValueState) {
        *err = GesWireError::BadValue;
        return false;
    }
    v.state = static_cast<ValueState>(state);
    if (v.state == ValueState::Valid) {
        v.len = r.le<uint8_t>();
        if (!r.ok()) {
            *err = GesWireError::Truncated;
            return false;
        }
        if (v.len > kMaxLockValue) {
            *err = GesWireError::BadValue;
            return false;
        }
        const uint8_t* b = r.bytes(v.len);
        if (b == nullptr) {
            *err = GesWireError::Truncated;
            return false;
        }
        if (v.len != 0) std::memcpy(v.data, b, v.len);
    }
    *out = v;
    return true;
}

Owner read_owner(Reader& r) {
    Owner o;
    o.node = r.le<uint16_t>();
    o.proc = r.le<uint32_t>();
    return o;
}

// One replay entry, checked as it is read, so a bad entry fails before the
// rest is parsed.
bool read_entry(Reader& r, ReplayEntry* out, GesWireError* err) {
    ReplayEntry e;
    e.owner = read_owner(r);
    e.request_id = r.le<uint64_t>();
    e.since = static_cast<int64_t>(r.le<uint64_t>());
    e.state = static_cast<LockState>(r.le<uint8_t>());
    e.granted_mode = static_cast<LockMode>(r.le<uint8_t>());
    e.requested_mode = static_cast<LockMode>(r.le<uint8_t>());
    e.flags = r.le<uint8_t>();
    e.token = r.le<uint64_t>();
    if (!read_resource(r, &e.resource, err)) return false;
    if (!read_value(r, &e.value, err)) return false;
    if (GesWireError ee = check_entry(e); ee != GesWireError::None) {
        *err = ee;
        return false;
    }
    *out = e;
    return true;
}

}  // namespace

const char* ges_msg_type_name(GesMsgType t) {
    switch (t) {
        case GesMsgType::Request:
            return "request";
        case GesMsgType::Convert:
            return "convert";
        case GesMsgType::Release:
            return "release";
        case GesMsgType::ReleaseAll:
            return "release_all";
        case GesMsgType::Cancel:
            return "cancel";
        case GesMsgType::Withdraw:
            return "withdraw";
        case GesMsgType::Grant:
            return "grant";
        case GesMsgType::Bast:
            return "bast";
        case GesMsgType::Deny:
            return "deny";
        case GesMsgType::Replay:
            return "replay";
        case GesMsgType::WaitHint:
            return "wait_hint";
        case GesMsgType::EdgesRequest:
            return "edges_request";
        case GesMsgType::Edges:
            return "edges";
        case GesMsgType::ReplayDone:
            return "replay_done";
        case GesMsgType::Transfer:
            return "transfer";
        case GesMsgType::CacheNotify:
            return "cache_notify";
        case GesMsgType::HandOff:
            return "hand_off";
        case GesMsgType::HandOffAck:
            return "hand_off_ack";
        case GesMsgType::Forwarded:
            return "forwarded";
        case GesMsgType::Moved:
            return "moved";
        case GesMsgType::Drained:
            return "drained";
        case GesMsgType::Queued:
            return "queued";
    }
    return "unknown";
}

const char* ges_wire_error_name(GesWireError e) {
    switch (e) {
        case GesWireError::None:
            return "none";
        case GesWireError::Truncated:
            return "truncated";
        case GesWireError::TrailingBytes:
            return "trailing_bytes";
        case GesWireError::BadVersion:
            return "bad_version";
        case GesWireError::BadType:
            return "bad_type";
        case GesWireError::BadReserved:
            return "bad_reserved";
        case GesWireError::BadNode:
            return "bad_node";
        case GesWireError::BadRequestId:
            return "bad_request_id";
        case GesWireError::BadMode:
            return "bad_mode";
        case GesWireError::BadFlags:
            return "bad_flags";
        case GesWireError::BadReason:
            return "bad_reason";
        case GesWireError::BadResource:
            return "bad_resource";
        case GesWireError::BadState:
            return "bad_state";
        case GesWireError::BadCount:
            return "bad_count";
        case GesWireError::BadEdge:
            return "bad_edge";
        case GesWireError::BadWorker:
            return "bad_worker";
        case GesWireError::BadRound:
            return "bad_round";
        case GesWireError::BadValue:
            return "bad_value";
        case GesWireError::BadInner:
            return "bad_inner";
    }
    return "unknown";
}

bool operator==(const GesMessage& a, const GesMessage& b) {
    if (a.type != b.type || a.epoch != b.epoch) return false;
    switch (a.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert:
            return a.owner == b.owner && a.request_id == b.request_id && a.mode == b.mode &&
                   a.flags == b.flags && a.timeout_ms == b.timeout_ms && a.resource == b.resource &&
                   a.value == b.value;
        case GesMsgType::Release:
            return a.owner == b.owner && a.resource == b.resource && a.value == b.value;
        case GesMsgType::CacheNotify:
            return a.owner == b.owner && a.resource == b.resource;
        case GesMsgType::Transfer:
            return a.owner == b.owner && a.to_proc == b.to_proc && a.request_id == b.request_id &&
                   a.resource == b.resource && a.value == b.value;
        case GesMsgType::ReleaseAll:
            return a.owner == b.owner && a.request_id == b.request_id;
        case GesMsgType::Cancel:
        case GesMsgType::Withdraw:
            return a.owner == b.owner && a.request_id == b.request_id && a.reason == b.reason &&
                   a.resource == b.resource;
        case GesMsgType::Grant:
        case GesMsgType::Bast:
            return a.owner == b.owner && a.request_id == b.request_id && a.mode == b.mode &&
                   (a.type != GesMsgType::Grant || (a.token == b.token && a.value == b.value)) &&
                   a.resource == b.resource;
        case GesMsgType::Deny:
            return a.owner == b.owner && a.request_id == b.request_id && a.mode == b.mode &&
                   a.reason == b.reason && a.resource == b.resource;
        case GesMsgType::Queued:
            return a.owner == b.owner && a.request_id == b.request_id && a.mode == b.mode &&
                   a.resource == b.resource;
        case GesMsgType::Replay:
            return a.flags == b.flags && a.entries == b.entries;
        case GesMsgType::WaitHint:
            return a.worker == b.worker && a.wait_ms == b.wait_ms;
        case GesMsgType::EdgesRequest:
            return a.round == b.round && a.wait_ms == b.wait_ms;
        case GesMsgType::Edges:
            return a.round == b.round && a.worker == b.worker && a.flags == b.flags &&
                   a.edges == b.edges;
        case GesMsgType::ReplayDone:
            return a.worker == b.worker && a.n_workers == b.n_workers && a.replayed == b.replayed &&
                   a.witnesses == b.witnesses;
        case GesMsgType::HandOff:
            return a.resource == b.resource && a.value == b.value && a.grant_seq == b.grant_seq &&
                   a.entries == b.entries;
        case GesMsgType::HandOffAck:
        case GesMsgType::Moved:
        case GesMsgType::Drained:
            return a.resource == b.resource;
        case GesMsgType::Forwarded:
            return a.origin == b.origin && a.inner == b.inner;
    }
    return false;
}

GesWireError encode_ges_message(const GesMessage& m, std::vector<uint8_t>* out) {
    if (GesWireError e = check_message(m); e != GesWireError::None) return e;
    Writer w(out);
    w.le<uint8_t>(kGesWireVersion);
    w.le<uint8_t>(static_cast<uint8_t>(m.type));
    w.le<uint16_t>(0);
    w.le<uint32_t>(m.epoch);
    switch (m.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            w.le<uint8_t>(static_cast<uint8_t>(m.mode));
            w.le<uint8_t>(m.flags);
            w.le<uint32_t>(m.timeout_ms);
            put_resource(w, m.resource);
            break;
        case GesMsgType::Release:
        case GesMsgType::CacheNotify:
            put_owner(w, m.owner);
            put_resource(w, m.resource);
            break;
        case GesMsgType::Transfer:
            put_owner(w, m.owner);
            w.le<uint32_t>(m.to_proc);
            w.le<uint64_t>(m.request_id);
            put_resource(w, m.resource);
            break;
        case GesMsgType::ReleaseAll:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            break;
        case GesMsgType::Cancel:
        case GesMsgType::Withdraw:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            w.le<uint8_t>(static_cast<uint8_t>(m.reason));
            put_resource(w, m.resource);
            break;
        case GesMsgType::Grant:
        case GesMsgType::Bast:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            w.le<uint8_t>(static_cast<uint8_t>(m.mode));
            if (m.type == GesMsgType::Grant) w.le<uint64_t>(m.token);
            put_resource(w, m.resource);
            break;
        case GesMsgType::Deny:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            w.le<uint8_t>(static_cast<uint8_t>(m.mode));
            w.le<uint8_t>(static_cast<uint8_t>(m.reason));
            put_resource(w, m.resource);
            break;
        case GesMsgType::Queued:
            put_owner(w, m.owner);
            w.le<uint64_t>(m.request_id);
            w.le<uint8_t>(static_cast<uint8_t>(m.mode));
            put_resource(w, m.resource);
            break;
        case GesMsgType::Replay:
            w.le<uint8_t>(m.flags);
            w.le<uint8_t>(0);
            w.le<uint16_t>(static_cast<uint16_t>(m.entries.size()));
            for (const ReplayEntry& e : m.entries) put_entry(w, e);
            break;
        case GesMsgType::HandOff:
            put_resource(w, m.resource);
            put_value(w, m.value);
            w.le<uint32_t>(m.grant_seq);
            w.le<uint16_t>(static_cast<uint16_t>(m.entries.size()));
            for (const ReplayEntry& e : m.entries) put_entry(w, e);
            break;
        case GesMsgType::HandOffAck:
        case GesMsgType::Moved:
        case GesMsgType::Drained:
            put_resource(w, m.resource);
            break;
        case GesMsgType::Forwarded:
            w.le<uint16_t>(m.origin);
            w.le<uint16_t>(static_cast<uint16_t>(m.inner.size()));
            w.bytes(m.inner.data(), m.inner.size());
            break;
        case GesMsgType::WaitHint:
            w.le<uint16_t>(m.worker);
            w.le<uint32_t>(m.wait_ms);
            break;
        case GesMsgType::EdgesRequest:
            w.le<uint64_t>(m.round);
            w.le<uint32_t>(m.wait_ms);
            break;
        case GesMsgType::Edges:
            w.le<uint64_t>(m.round);
            w.le<uint16_t>(m.worker);
            w.le<uint8_t>(m.flags);
            w.le<uint8_t>(0);
            w.le<uint16_t>(static_cast<uint16_t>(m.edges.size()));
            for (const WaitForEdge& e : m.edges) {
                put_owner(w, e.waiter);
                put_owner(w, e.holder);
                w.le<uint16_t>(e.master);
                w.le<uint64_t>(e.request_id);
                w.le<uint64_t>(static_cast<uint64_t>(e.since));
                w.le<uint64_t>(e.order);
                put_resource(w, e.resource);
            }
            break;
        case GesMsgType::ReplayDone:
            w.le<uint16_t>(m.worker);
            w.le<uint16_t>(m.n_workers);
            w.le<uint32_t>(m.replayed);
            w.le<uint64_t>(m.witnesses);
            break;
    }
    if (carries_value(m.type)) put_value(w, m.value);
    return GesWireError::None;
}

GesWireError decode_ges_message(const uint8_t* in, size_t len, GesMessage* out) {
    Reader r(in, len);
    const uint8_t version = r.le<uint8_t>();
    const uint8_t type = r.le<uint8_t>();
    const uint16_t reserved = r.le<uint16_t>();
    const uint32_t epoch = r.le<uint32_t>();
    if (!r.ok()) return GesWireError::Truncated;
    if (version != kGesWireVersion) return GesWireError::BadVersion;
    if (type == 0 || type > kMaxGesMsgType) return GesWireError::BadType;
    if (reserved != 0) return GesWireError::BadReserved;

    GesMessage m;
    m.type = static_cast<GesMsgType>(type);
    m.epoch = epoch;
    GesWireError err = GesWireError::None;
    // Raw bytes go into the enum fields unchecked; check_message() below
    // rejects every value outside the enum before anyone sees the message.
    switch (m.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            m.mode = static_cast<LockMode>(r.le<uint8_t>());
            m.flags = r.le<uint8_t>();
            m.timeout_ms = r.le<uint32_t>();
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Release:
        case GesMsgType::CacheNotify:
            m.owner = read_owner(r);
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Transfer:
            m.owner = read_owner(r);
            m.to_proc = r.le<uint32_t>();
            m.request_id = r.le<uint64_t>();
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::ReleaseAll:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            break;
        case GesMsgType::Cancel:
        case GesMsgType::Withdraw:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            m.reason = static_cast<DenyReason>(r.le<uint8_t>());
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Grant:
        case GesMsgType::Bast:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            m.mode = static_cast<LockMode>(r.le<uint8_t>());
            if (m.type == GesMsgType::Grant) m.token = r.le<uint64_t>();
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Deny:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            m.mode = static_cast<LockMode>(r.le<uint8_t>());
            m.reason = static_cast<DenyReason>(r.le<uint8_t>());
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Queued:
            m.owner = read_owner(r);
            m.request_id = r.le<uint64_t>();
            m.mode = static_cast<LockMode>(r.le<uint8_t>());
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Replay: {
            m.flags = r.le<uint8_t>();
            const uint8_t reserved2 = r.le<uint8_t>();
            const uint16_t count = r.le<uint16_t>();
            if (!r.ok()) return GesWireError::Truncated;
            if (reserved2 != 0) return GesWireError::BadReserved;
            if (count > kMaxReplayEntries) return GesWireError::BadCount;
            for (uint16_t i = 0; i < count; ++i) {
                ReplayEntry e;
                if (!read_entry(r, &e, &err)) return err;
                m.entries.push_back(e);
            }
            break;
        }
        case GesMsgType::HandOff: {
            if (!read_resource(r, &m.resource, &err)) return err;
            if (!read_value(r, &m.value, &err)) return err;
            m.grant_seq = r.le<uint32_t>();
            const uint16_t count = r.le<uint16_t>();
            if (!r.ok()) return GesWireError::Truncated;
            if (count > kMaxReplayEntries) return GesWireError::BadCount;
            for (uint16_t i = 0; i < count; ++i) {
                ReplayEntry e;
                if (!read_entry(r, &e, &err)) return err;
                m.entries.push_back(e);
            }
            break;
        }
        case GesMsgType::HandOffAck:
        case GesMsgType::Moved:
        case GesMsgType::Drained:
            if (!read_resource(r, &m.resource, &err)) return err;
            break;
        case GesMsgType::Forwarded: {
            m.origin = r.le<uint16_t>();
            const uint16_t n = r.le<uint16_t>();
            if (!r.ok()) return GesWireError::Truncated;
            const uint8_t* b = r.bytes(n);
            if (b == nullptr) return GesWireError::Truncated;
            m.inner.assign(b, b + n);
            break;
        }
        case GesMsgType::WaitHint:
            m.worker = r.le<uint16_t>();
            m.wait_ms = r.le<uint32_t>();
            break;
        case GesMsgType::EdgesRequest:
            m.round = r.le<uint64_t>();
            m.wait_ms = r.le<uint32_t>();
            break;
        case GesMsgType::Edges: {
            m.round = r.le<uint64_t>();
            m.worker = r.le<uint16_t>();
            m.flags = r.le<uint8_t>();
            const uint8_t reserved2 = r.le<uint8_t>();
            const uint16_t count = r.le<uint16_t>();
            if (!r.ok()) return GesWireError::Truncated;
            if (reserved2 != 0) return GesWireError::BadReserved;
            if (count > kMaxEdgeEntries) return GesWireError::BadCount;
            for (uint16_t i = 0; i < count; ++i) {
                WaitForEdge e;
                e.waiter = read_owner(r);
                e.holder = read_owner(r);
                e.master = r.le<uint16_t>();
                e.request_id = r.le<uint64_t>();
                e.since = static_cast<int64_t>(r.le<uint64_t>());
                e.order = r.le<uint64_t>();
                if (!read_resource(r, &e.resource, &err)) return err;
                if (GesWireError ee = check_edge(e); ee != GesWireError::None) return ee;
                m.edges.push_back(e);
            }
            break;
        }
        case GesMsgType::ReplayDone:
            m.worker = r.le<uint16_t>();
            m.n_workers = r.le<uint16_t>();
            m.replayed = r.le<uint32_t>();
            m.witnesses = r.le<uint64_t>();
            break;
    }
    if (!r.ok()) return GesWireError::Truncated;
    if (carries_value(m.type) && !read_value(r, &m.value, &err)) return err;
    if (!r.at_end()) return GesWireError::TrailingBytes;
    if (GesWireError e = check_message(m); e != GesWireError::None) return e;
    *out = std::move(m);
    return GesWireError::None;
}

bool forwardable(GesMsgType t) {
    return t == GesMsgType::Request || t == GesMsgType::Convert || t == GesMsgType::Release ||
           t == GesMsgType::Cancel || t == GesMsgType::Transfer || t == GesMsgType::Withdraw;
}

std::vector<std::vector<uint8_t>> encode_replay_messages(const std::vector<ReplayEntry>& entries,
                                                         uint32_t epoch) {
    // Entries that would not decode (the registry never makes one) are left
    // out rather than sent for the master to reject the whole batch.
    std::vector<ReplayEntry> valid;
    for (const ReplayEntry& e : entries)
        if (check_entry(e) == GesWireError::None) valid.push_back(e);
    std::vector<std::vector<uint8_t>> out;
    size_t pos = 0;
    do {
        const size_t n = std::min<size_t>(kMaxReplayEntries, valid.size() - pos);
        GesMessage m;
        m.type = GesMsgType::Replay;
        m.epoch = epoch;
        m.entries.assign(valid.begin() + pos, valid.begin() + pos + n);
        pos += n;
        m.flags = pos == valid.size() ? kReplayLast : 0;
        out.emplace_back();
        encode_ges_message(m, &out.back());
    } while (pos < valid.size());
    return out;
}

std::vector<std::vector<uint8_t>> encode_edges_messages(uint64_t round, uint16_t worker,
                                                        const std::vector<WaitForEdge>& edges,
                                                        bool incomplete) {
    std::vector<WaitForEdge> valid;
    for (const WaitForEdge& e : edges)
        if (check_edge(e) == GesWireError::None) valid.push_back(e);
    std::vector<std::vector<uint8_t>> out;
    size_t pos = 0;
    do {
        const size_t n = std::min<size_t>(kMaxEdgeEntries, valid.size() - pos);
        GesMessage m;
        m.type = GesMsgType::Edges;
        m.round = round;
        m.worker = worker;
        m.edges.assign(valid.begin() + pos, valid.begin() + pos + n);
        pos += n;
        m.flags = static_cast<uint8_t>((pos == valid.size() ? kEdgesLast : 0) |
                                       (incomplete ? kEdgesIncomplete : 0));
        out.emplace_back();
        if (encode_ges_message(m, &out.back()) != GesWireError::None) {
            out.pop_back();  // a bad round or worker: nothing can be sent
            break;
        }
    } while (pos < valid.size());
    return out;
}

GesMessage message_for_event(const Event& e) {
    GesMessage m;
    m.owner = e.owner;
    m.resource = e.resource;
    m.mode = e.mode;
    m.request_id = e.request_id;
    if (e.type == EventType::Granted) {
        m.token = e.token;
        m.value = e.value;
    }
    switch (e.type) {
        case EventType::Granted:
            m.type = GesMsgType::Grant;
            break;
        case EventType::Bast:
            m.type = GesMsgType::Bast;
            break;
        case EventType::Denied:
            m.type = GesMsgType::Deny;
            m.reason = e.reason;
            break;
    }
    return m;
}

}  // namespace pgrac::ic::ges
