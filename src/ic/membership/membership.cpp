// Membership: quorum views, votes, leases and fencing (see membership.hpp).
#include "ic/membership/membership.hpp"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "ic/base/atomics.hpp"
#include "ic/wire/codec.hpp"

namespace pgrac::ic {

namespace {

constexpr int64_t kEpochClockOrigin = 1700000000;  // Unix seconds, 2023-11-14

using codec::load_le;
using codec::store_le;

constexpr size_t kViewBytes = 20;

void put_view(uint8_t* p, const View& v) {
    store_le<uint32_t>(p, v.epoch);
    store_le<uint64_t>(p + 4, v.members);
    store_le<uint64_t>(p + 12, v.binding);
}
View get_view(const uint8_t* p) {
    View v{};
    v.epoch = load_le<uint32_t>(p);
    v.members = load_le<uint64_t>(p + 4);
    v.binding = load_le<uint64_t>(p + 12);
    return v;
}
bool view_ok(const View& v, NodeMask configured) {
    if ((v.members & ~configured) != 0) return false;
    if ((v.epoch == 0) != (v.members == 0)) return false;
    return v.members != 0 || v.binding == 0;
}

uint64_t mix64(uint64_t x) {  // splitmix64's finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

// Reads a View from shared memory (its fields may be written concurrently
// only under the committed-epoch protocol; see committed_view()).
View load_view(const View* slot) {
    View v{};
    v.epoch = load_acquire(&slot->epoch);
    v.members = load_acquire(&slot->members);
    v.binding = load_acquire(&slot->binding);
    return v;
}

uint64_t ms_of(int64_t us) {
    return us <= 0 ? 0 : static_cast<uint64_t>(us) / 1000;
}

// How long a proposal may be committed after it was made. Under half the
// smallest peer timeout known: a voter that moves on to a view leaving the
// proposer out has not heard it for its own timeout, so by then the proposal is
// dead, and views are committed in epoch order (the other half is the margin
// for clock rates).
int64_t proposal_life_us(int heartbeat_interval_ms, int min_timeout_ms) {
    const int64_t want = std::max<int64_t>(4LL * heartbeat_interval_ms, 500);
    return std::min<int64_t>(want, min_timeout_ms / 2) * 1000;
}

}  // namespace

int node_count(NodeMask m) {
    return __builtin_popcountll(m);
}

std::vector<uint16_t> mask_nodes(NodeMask m) {
    std::vector<uint16_t> out;
    for (uint16_t id = 1; id <= 64; id++)
        if (has_node(m, id)) out.push_back(id);
    return out;
}

NodeMask nodes_mask(const std::vector<uint16_t>& ids) {
    NodeMask m = 0;
    for (uint16_t id : ids)
        if (id >= 1 && id <= 64) m |= node_bit(id);
    return m;
}

std::string mask_text(NodeMask m) {
    std::string s = "{";
    for (uint16_t id : mask_nodes(m)) s += (s.size() > 1 ? "," : "") + std::to_string(id);
    return s + "}";
}

uint64_t view_binding(NodeMask members, const uint64_t* instances_by_id) {
    if (members == 0) return 0;
    uint64_t h = 0x70677261632d6963ULL;  // "pgrac-ic"
    for (uint16_t id : mask_nodes(members)) {
        h = mix64(h ^ id);
        h = mix64(h ^ instances_by_id[id - 1]);
    }
    return h == 0 ? 1 : h;
}

size_t gossip_size(const Gossip& g) {
    return kGossipFixedSize + 8 * static_cast<size_t>(node_count(g.proposal.members));
}

void encode_gossip(const Gossip& g, uint8_t* out) {
    memset(out, 0, kGossipFixedSize);
    put_view(out, g.committed);
    put_view(out + kViewBytes, g.accepted);
    put_view(out + 2 * kViewBytes, g.proposal);
    out[60] = g.flags;
    store_le<uint32_t>(out + 64, g.peer_timeout_ms);
    store_le<uint32_t>(out + 68, g.heartbeat_interval_ms);
    size_t off = kGossipFixedSize;
    for (uint16_t id : mask_nodes(g.proposal.members)) {
        store_le<uint64_t>(out + off, g.proposal_instances[id - 1]);
        off += 8;
    }
}

bool decode_gossip(const uint8_t* in, size_t len, NodeMask configured, Gossip* out) {
    if (len < kGossipFixedSize || len > kGossipMaxSize) return false;
    if (in[61] != 0 || in[62] != 0 || in[63] != 0) return false;
    Gossip g;
    g.committed = get_view(in);
    g.accepted = get_view(in + kViewBytes);
    g.proposal = get_view(in + 2 * kViewBytes);
    g.flags = in[60];
    g.peer_timeout_ms = load_le<uint32_t>(in + 64);
    g.heartbeat_interval_ms = load_le<uint32_t>(in + 68);
    if ((g.flags & ~kKnownGossipFlags) != 0) return false;
    if (!view_ok(g.committed, configured) || !view_ok(g.accepted, configured) ||
        !view_ok(g.proposal, configured))
        return false;
    if (g.peer_timeout_ms < kMinPeerTimeoutMs || g.peer_timeout_ms > kMaxPeerTimeoutMs ||
        g.heartbeat_interval_ms < kMinHeartbeatMs || g.heartbeat_interval_ms > kMaxHeartbeatMs)
        return false;
    if (len != gossip_size(g)) return false;
    size_t off = kGossipFixedSize;
    for (uint16_t id : mask_nodes(g.proposal.members)) {
        g.proposal_instances[id - 1] = load_le<uint64_t>(in + off);
        if (g.proposal_instances[id - 1] == 0) return false;
        off += 8;
    }
    if (g.proposal.binding != view_binding(g.proposal.members, g.proposal_instances)) return false;
    *out = g;
    return true;
}

const char* member_state_name(MemberState s) {
    switch (s) {
        case MemberState::Joining:
            return "joining";
        case MemberState::Member:
            return "member";
        case MemberState::Fenced:
            return "fenced";
    }
    return "unknown";
}

const char* membership_event_name(MembershipEvent e) {
    switch (e) {
        case MembershipEvent::Committed:
            return "committed";
        case MembershipEvent::Fenced:
            return "fenced";
        case MembershipEvent::Rejoined:
            return "rejoined";
        case MembershipEvent::Excluded:
            return "excluded";
    }
    return "unknown";
}

// ---- readers (any process)

uint64_t boottime_ms() {
    timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

uint64_t lease_now_ms(const MembershipShared* m) {
    const uint64_t base = load_relaxed(&m->clock_base_ms);
    const uint64_t now = boottime_ms();
    return now > base ? now - base : 0;
}

uint64_t lease_word(const MembershipShared* m) {
    return load_acquire(&m->lease_word);
}

bool fence_if_lapsed(MembershipShared* m, uint64_t now_ms) {
    uint64_t w = load_acquire(&m->lease_word);
    while (lease_expiry_ms(w) != 0 && !lease_valid(w, now_ms)) {
        const uint64_t fenced = static_cast<uint64_t>(lease_fences(w) + 1) << 40;
        if (compare_exchange(&m->lease_word, &w, fenced)) return true;
    }
    return false;
}

void withhold_echoes(MembershipShared* m, uint16_t node, uint64_t now_ms, uint64_t for_ms) {
    if (node < 1 || node > 64) return;
    const uint64_t until = now_ms + for_ms;
    if (load_acquire(&m->withheld_until_ms[node - 1]) > now_ms) {
        if (until > load_relaxed(&m->withheld_until_ms[node - 1]))
            store_release(&m->withheld_until_ms[node - 1], until);
        return;
    }
    store_release(&m->withheld_since_ms[node - 1], now_ms);
    store_release(&m->withheld_until_ms[node - 1], until);
}

View committed_view(const MembershipShared* m) {
    for (int attempt = 0; attempt < 100; attempt++) {
        const uint32_t e = load_acquire(&m->committed_epoch);
        if (e == 0) return View{};
        const View v = load_view(&m->views[e % kViewRing]);
        if (v.epoch == e && load_acquire(&m->committed_epoch) == e) return v;
    }
    return View{};
}

size_t membership_history(const MembershipShared* m, MembershipRecord* out, size_t max) {
    const uint64_t next = load_acquire(&m->history_next);
    size_t n = 0;
    for (uint64_t i = next; i > 0 && n < max && next - i < static_cast<uint64_t>(kHistoryLen);
         i--) {
        const MembershipRecord* r = &m->history[(i - 1) % kHistoryLen];
        const uint64_t s1 = load_acquire(&r->seq);
        if (s1 != 2 * i) continue;
        MembershipRecord copy;
        copy.seq = s1;
        copy.at_us = load_relaxed(&r->at_us);
        copy.epoch = load_relaxed(&r->epoch);
        copy.event = load_relaxed(&r->event);
        copy.members = load_relaxed(&r->members);
        for (size_t b = 0; b < sizeof copy.detail; b++)
            copy.detail[b] = load_relaxed(&r->detail[b]);
        copy.detail[sizeof copy.detail - 1] = '\0';
        if (load_acquire(&r->seq) != s1) continue;
        out[n++] = copy;
    }
    return n;
}

// ---- the protocol (the host process)

Membership::Membership(MembershipConfig cfg, MembershipShared* shm) : cfg_(cfg), shm_(shm) {
    store_relaxed(&shm_->lease_ms, static_cast<uint32_t>(lease_ms_for(cfg_.peer_timeout_ms)));
    store_release(&shm_->owner[cfg_.self - 1], load_relaxed(&shm_->self_instance));
    // A restarted host process whose peer_timeout went down keeps the window
    // it told its peers (echoes given under it may still count): from its
    // first input on (note_start), on the engine's clock.
    told_before_start_ms_ = load_relaxed(&shm_->advertised_timeout_ms);
    store_relaxed(&shm_->advertised_timeout_ms, static_cast<uint32_t>(cfg_.peer_timeout_ms));
}

void Membership::init_shared(MembershipShared* shm) {
    memset(shm, 0, sizeof *shm);
}

void Membership::set_timing(int heartbeat_interval_ms, int peer_timeout_ms, int64_t now_us) {
    // A peer may hold a lease from our echo given under the old window (its
    // lease is 3/4 of the smaller of its timeout and the one our pong carried):
    // a shorter window takes effect once the old one has passed.
    // A floor already in force keeps its own end; the value just given up
    // needs one old value from now. One slot holds both: the larger value
    // until the later end (longer is always safe).
    if (peer_timeout_ms < cfg_.peer_timeout_ms) {
        const uint64_t now_ms = to_lease_ms(now_us);
        const uint64_t until = load_relaxed(&shm_->window_floor_until_ms);
        const bool active = now_ms < until;
        const uint32_t old_value = static_cast<uint32_t>(cfg_.peer_timeout_ms);
        store_relaxed(
            &shm_->window_floor_ms,
            active ? std::max(old_value, load_relaxed(&shm_->window_floor_ms)) : old_value);
        store_relaxed(&shm_->window_floor_until_ms,
                      std::max(active ? until : 0, now_ms + old_value));
    }
    cfg_.heartbeat_interval_ms = heartbeat_interval_ms;
    cfg_.peer_timeout_ms = peer_timeout_ms;
    store_relaxed(&shm_->advertised_timeout_ms, static_cast<uint32_t>(peer_timeout_ms));
    store_relaxed(&shm_->lease_ms, static_cast<uint32_t>(lease_ms_for(min_known_timeout_ms())));
}

void Membership::note_start(int64_t now_us) {
    if (started_us_ != 0) return;
    started_us_ = now_us;
    const uint32_t told = told_before_start_ms_;
    if (told <= static_cast<uint32_t>(cfg_.peer_timeout_ms)) return;
    const uint64_t now_ms = to_lease_ms(now_us);
    const uint64_t until = load_relaxed(&shm_->window_floor_until_ms);
    const bool active = now_ms < until;
    store_relaxed(&shm_->window_floor_ms,
                  active ? std::max(told, load_relaxed(&shm_->window_floor_ms)) : told);
    store_relaxed(&shm_->window_floor_until_ms, std::max(active ? until : 0, now_ms + told));
}

int64_t Membership::window_us(int64_t now_us) const {
    int64_t w = int64_t{cfg_.peer_timeout_ms} * 1000;
    const uint32_t floor = load_relaxed(&shm_->window_floor_ms);
    if (floor != 0 && to_lease_ms(now_us) < load_relaxed(&shm_->window_floor_until_ms))
        w = std::max<int64_t>(w, int64_t{floor} * 1000);
    return w;
}

uint64_t Membership::to_lease_ms(int64_t us) const {
    const uint64_t ms = ms_of(us);
    const uint64_t base = load_relaxed(&shm_->clock_base_ms);
    return ms > base ? ms - base : 0;
}

int Membership::min_known_timeout_ms() const {
    int t = cfg_.peer_timeout_ms;
    for (uint16_t id : mask_nodes(cfg_.configured))
        if (id != cfg_.self && peers_[id - 1].gossip.peer_timeout_ms != 0)
            t = std::min<int>(t, static_cast<int>(peers_[id - 1].gossip.peer_timeout_ms));
    return t;
}

// An echo is good for 3/4 of the smaller of our timeout and the echoing
// peer's: the peer excludes us no sooner than its own window after it heard
// the ping, and that window is never below the timeout its pong carried.
int Membership::echo_lease_ms(uint16_t node) const {
    int t = cfg_.peer_timeout_ms;
    const uint32_t theirs = peers_[node - 1].gossip.peer_timeout_ms;
    if (theirs != 0) t = std::min<int>(t, static_cast<int>(theirs));
    return lease_ms_for(t);
}

// Pings go out at least three times per lease, whatever heartbeat_interval
// is: with timing that differs between nodes (a reload going round), the
// lease uses the smaller timeout, which a heartbeat meant for the larger one
// would not renew in time.
int Membership::ping_interval_ms() const {
    return std::max(1,
                    std::min(cfg_.heartbeat_interval_ms, lease_ms_for(min_known_timeout_ms()) / 3));
}

uint32_t Membership::peer_timeout_of(uint16_t node) const {
    return node >= 1 && node <= 64 ? peers_[node - 1].gossip.peer_timeout_ms : 0;
}

uint32_t Membership::heartbeat_interval_of(uint16_t node) const {
    return node >= 1 && node <= 64 ? peers_[node - 1].gossip.heartbeat_interval_ms : 0;
}

std::vector<std::pair<uint16_t, std::string>> Membership::take_drift() {
    std::vector<std::pair<uint16_t, std::string>> out;
    out.swap(drift_);
    return out;
}

uint64_t Membership::self_instance() const {
    return load_relaxed(&shm_->self_instance);
}

uint64_t Membership::owner(uint16_t node) const {
    return node >= 1 && node <= 64 ? load_acquire(&shm_->owner[node - 1]) : 0;
}

void Membership::set_owner(uint16_t node, uint64_t instance, uint64_t location) {
    if (node < 1 || node > 64 || node == cfg_.self) return;
    store_release(&shm_->owner_location[node - 1], location);
    store_release(&shm_->owner[node - 1], instance);
}

// Whether our vote (the accepted view) binds `node` to `instance`.
bool Membership::bound_here(uint16_t node, uint64_t instance) const {
    const View acc = load_view(&shm_->accepted);
    return has_node(acc.members, node) &&
           load_relaxed(&shm_->accepted_binding[node - 1]) == instance;
}

bool Membership::echo_for(uint16_t node, int64_t now_us) {
    const bool in_view = in_accepted_view(node) && !withheld(node, now_us);
    if (in_view && node >= 1 && node <= 64) peers_[node - 1].echo_sent_us = now_us;
    return in_view;
}

// One owner per node id (docs/ges.md, "One instance per node id"). What makes
// a replacement dangerous is a lease the owner may still hold through our
// echoes; what makes the nodes agree is that every vote binds each member to
// one instance (try_accept). So:
//  * an instance our vote binds is admitted, even over another owner (the
//    owner cannot have had an echo of ours since that vote);
//  * an owner we echoed within our window (or since our start: a restarted
//    host may have) keeps the id: no other instance until it has been silent
//    to us that long, and a new epoch binds the other;
//  * otherwise the older of two live instances wins, and a silent owner
//    gives way.
// Before all that: an instance from the owner's location (the same data
// directory on the same host) while no lane to the owner is up is the node
// restarted. PostgreSQL starts no postmaster on a data directory that an
// earlier one's processes still use, so the owner is gone, with everything
// that could act on its locks. (With a lane up, a copy of the location, a
// cloned machine, is as likely: the rules below decide.)
ClaimVerdict Membership::claim_verdict(uint16_t node, uint64_t instance, uint64_t location,
                                       bool owner_lanes_up, int64_t now_us,
                                       std::string* why) const {
    if (node < 1 || node > 64 || node == cfg_.self) return ClaimVerdict::Admit;
    const uint64_t cur = owner(node);
    if (cur == 0 || cur == instance) return ClaimVerdict::Admit;
    if (location != 0 && location == load_acquire(&shm_->owner_location[node - 1]) &&
        !owner_lanes_up)
        return ClaimVerdict::Switch;
    if (bound_here(node, instance)) return ClaimVerdict::Switch;
    const PeerInfo& p = peers_[node - 1];
    const int64_t window = window_us(now_us);
    // Short: the text goes into the Reject's detail (255 bytes) with the addresses.
    const std::string claim = "instance " + std::to_string(instance) + " claiming node " +
                              std::to_string(node) + " is refused: it is instance " +
                              std::to_string(cur);
    const int64_t echoed = std::max(p.echo_sent_us, started_us_);
    if (echoed != 0 && now_us - echoed < window) {
        *why = claim + ", which may hold a lease through our echoes (until silent here for " +
               std::to_string(window / 1000) + " ms)";
        return ClaimVerdict::Refuse;
    }
    const bool alive = owner_lanes_up || (p.heard_us != 0 && now_us - p.heard_us < window);
    if (!alive || instance < cur) return ClaimVerdict::Switch;
    *why = claim + " (older, " + (owner_lanes_up ? "connected" : "heard recently") + ")";
    return ClaimVerdict::Refuse;
}

void Membership::set_state(MemberState s) {
    store_release(&shm_->state, static_cast<uint32_t>(s));
}

std::vector<std::string> Membership::take_logs() {
    std::vector<std::string> out;
    out.swap(logs_);
    return out;
}

std::vector<std::pair<MembershipEvent, std::string>> Membership::take_events() {
    std::vector<std::pair<MembershipEvent, std::string>> out;
    out.swap(events_);
    return out;
}

int64_t Membership::unix_at(int64_t mono_us, int64_t now_us) const {
    const int64_t unix_now = unix_clock_ ? unix_clock_() : 0;
    return unix_now - (now_us - mono_us);
}

void Membership::record(MembershipEvent e, uint32_t epoch, NodeMask members, int64_t at_us,
                        const std::string& detail) {
    const uint64_t t = load_relaxed(&shm_->history_next) + 1;
    MembershipRecord* r = &shm_->history[(t - 1) % kHistoryLen];
    store_release(&r->seq, 2 * t - 1);
    store_relaxed(&r->at_us, at_us);
    store_relaxed(&r->epoch, epoch);
    store_relaxed(&r->event, static_cast<uint32_t>(e));
    store_relaxed(&r->members, members);
    for (size_t b = 0; b < sizeof r->detail; b++)
        store_relaxed(&r->detail[b],
                      b < detail.size() && b + 1 < sizeof r->detail ? detail[b] : '\0');
    store_release(&r->seq, 2 * t);
    store_release(&shm_->history_next, t);
    std::string text = "membership: " + std::string(membership_event_name(e)) + " epoch " +
                       std::to_string(epoch) + " " + mask_text(members) +
                       (detail.empty() ? "" : ": " + detail);
    logs_.push_back(text);
    events_.emplace_back(e, std::move(text));
}

// A peer's timing that differs from ours is safe (leases take the smaller
// value) but worth a line each time it appears or goes away.
void Membership::note_timing(uint16_t node, int64_t /*now_us*/) {
    PeerInfo& p = peers_[node - 1];
    const uint32_t to = p.gossip.peer_timeout_ms, hb = p.gossip.heartbeat_interval_ms;
    const bool same = to == static_cast<uint32_t>(cfg_.peer_timeout_ms) &&
                      hb == static_cast<uint32_t>(cfg_.heartbeat_interval_ms);
    if (same) {
        if (p.drift_to != 0)
            drift_.emplace_back(node, "node " + std::to_string(node) +
                                          " has the same peer_timeout and heartbeat_interval "
                                          "as this node again");
        p.drift_to = p.drift_hb = 0;
        return;
    }
    if (p.drift_to == to && p.drift_hb == hb) return;
    p.drift_to = to;
    p.drift_hb = hb;
    std::string text;
    if (to != static_cast<uint32_t>(cfg_.peer_timeout_ms))
        text = "peer_timeout is " + std::to_string(cfg_.peer_timeout_ms) + " ms here, " +
               std::to_string(to) + " ms on node " + std::to_string(node);
    if (hb != static_cast<uint32_t>(cfg_.heartbeat_interval_ms))
        text += (text.empty() ? "" : "; ") + std::string("heartbeat_interval is ") +
                std::to_string(cfg_.heartbeat_interval_ms) + " ms here, " + std::to_string(hb) +
                " ms on node " + std::to_string(node);
    drift_.emplace_back(node, text +
                                  ": leases use the smaller peer_timeout until every node has "
                                  "the same values (a rolling reload in progress?)");
}

void Membership::on_heard(uint16_t node, int64_t now_us) {
    note_start(now_us);
    if (node >= 1 && node <= 64 && node != cfg_.self) peers_[node - 1].heard_us = now_us;
}

void Membership::on_echo(uint16_t node, int64_t ping_sent_us, bool in_view, int64_t now_us) {
    note_start(now_us);
    if (node < 1 || node > 64 || node == cfg_.self || !has_node(cfg_.configured, node)) return;
    PeerInfo& p = peers_[node - 1];
    if (!in_view) return;
    const int64_t expiry = ping_sent_us + int64_t{echo_lease_ms(node)} * 1000;
    if (expiry > p.expiry_us) p.expiry_us = expiry;
}

void Membership::on_gossip(uint16_t node, const Gossip& g, int64_t now_us) {
    note_start(now_us);
    if (node < 1 || node > 64 || node == cfg_.self || !has_node(cfg_.configured, node)) return;
    PeerInfo& p = peers_[node - 1];
    p.gossip = g;
    p.gossip_us = now_us;
    p.heard_us = now_us;
    note_timing(node, now_us);
    if (g.proposal.epoch != 0) try_accept(g.proposal, g.proposal_instances, node, now_us);
    if (g.committed.epoch > load_relaxed(&shm_->committed_epoch)) adopt(g.committed, now_us);
}

// Once we voted for a view that leaves `node` out, an echo of ours must not
// renew its lease while that view may still be committed: after the vote we
// may vote for a newer view with `node` in it (a proposer that hears it), while
// the older proposer still commits on our older vote. So every vote adds the
// nodes it leaves out to `muted` (in shared memory: a restarted listener
// keeps it), and only adopting a committed view clears it: by then the older
// proposal is committed or dead (a proposer retires a proposal within
// peer_timeout/2 and commits nothing older than its own vote). A vote that
// leaves nobody out (a new epoch with the same members, a join) mutes no one,
// so leases run on through such epoch changes.
// And only to the instance our vote binds: the engine's lane goes to the
// owner, which is that instance unless another one took the id since.
bool Membership::in_accepted_view(uint16_t node) const {
    const View acc = load_view(&shm_->accepted);
    return has_node(acc.members, node) && has_node(committed_view(shm_).members, node) &&
           !has_node(load_relaxed(&shm_->muted), node) &&
           load_relaxed(&shm_->accepted_binding[node - 1]) == owner(node);
}

bool Membership::withheld(uint16_t node, int64_t now_us) const {
    return node >= 1 && node <= 64 &&
           to_lease_ms(now_us) < load_acquire(&shm_->withheld_until_ms[node - 1]);
}

NodeMask Membership::reachable(int64_t now_us) const {
    NodeMask m = node_bit(cfg_.self);
    const int64_t window = window_us(now_us);
    for (uint16_t id : mask_nodes(cfg_.configured)) {
        if (id == cfg_.self) continue;
        // A restarted host process (or host) may have heard it just before: its
        // lease may rest on our echoes, so we wait out peer_timeout from our start.
        int64_t heard = std::max(peers_[id - 1].heard_us, started_us_);
        // Echoes withheld: heard no later than when the withholding began (our
        // last echo to it is older), so that a window later we may vote it out.
        if (withheld(id, now_us)) {
            const int64_t since_us =
                static_cast<int64_t>((load_relaxed(&shm_->withheld_since_ms[id - 1]) +
                                      load_relaxed(&shm_->clock_base_ms)) *
                                     1000);
            heard = std::min(heard, since_us);
        }
        if (heard != 0 && now_us - heard < window) m |= node_bit(id);
    }
    return m;
}

// Our vote. A vote for (e, V, B) promises: no vote for any epoch <= e again,
// every node left out of V has been silent to us for our window, so its
// lease (which needs an echo from a majority, us possibly among them) has run
// out before any member of V acts on V; and every member is bound to the
// instance we admitted for it (B), so all voters of an epoch agree on who the
// members are. A member we have not met yet is taken as bound.
// A view that binds an id to another instance than our records (the newest
// view we voted for or committed that had the id) rebinds it. Majorities are
// counted by id, so two views that bind one id to two instances could meet in
// that id alone (a second instance bridging a partition: {1, 2:A} and
// {2:B, 3}). A rebinding view therefore needs enough members it does not
// rebind to meet every majority: more than (configured - majority) of them.
// Then any two views that bind an id differently share a member voting for
// both, and epochs order them through it as for any two views. The instance
// we admitted ourselves from the recorded instance's own place is the node
// restarted (assumption A8): not a rebinding.
bool Membership::rebinding_allowed(const View& v, const uint64_t* instances, uint16_t proposer) {
    NodeMask rebound = 0;
    for (uint16_t id : mask_nodes(v.members)) {
        if (id == cfg_.self) continue;
        const uint64_t voted = load_relaxed(&shm_->voted_instance[id - 1]);
        const uint64_t committed = load_relaxed(&shm_->committed_instance[id - 1]);
        const uint64_t inst = instances[id - 1];
        if ((voted == 0 || voted == inst) && (committed == 0 || committed == inst)) continue;
        const uint64_t place = load_relaxed(&shm_->recorded_location[id - 1]);
        if (owner(id) == inst && place != 0 && load_relaxed(&shm_->owner_location[id - 1]) == place)
            continue;  // restarted in place
        rebound |= node_bit(id);
    }
    if (rebound == 0) return true;
    const int others = node_count(v.members & ~rebound);
    if (others > node_count(cfg_.configured) - majority()) return true;
    if (refused_epoch_logged_ != v.epoch) {
        refused_epoch_logged_ = v.epoch;
        logs_.push_back("membership: epoch " + std::to_string(v.epoch) + " proposed by node " +
                        std::to_string(proposer) + " binds node(s) " + mask_text(rebound) +
                        " to other instances than before with " + std::to_string(others) +
                        " other member(s); a replaced instance needs " +
                        std::to_string(node_count(cfg_.configured) - majority() + 1) +
                        ": not voting for it");
    }
    return false;
}

bool Membership::try_accept(const View& v, const uint64_t* instances, uint16_t proposer,
                            int64_t now_us) {
    const View acc = load_view(&shm_->accepted);
    if (v.epoch <= acc.epoch) return false;
    if (!has_node(v.members, cfg_.self) || !has_node(v.members, proposer)) return false;
    if ((v.members & ~cfg_.configured) != 0 || node_count(v.members) < majority()) return false;
    // It leaves out no node we hear, counting only the instance our vote binds
    // where our vote has the id (a node we have not met counts as heard: our
    // predecessor may have echoed it): another instance we admitted meanwhile never
    // had our echo (echo_for), and the bound one was silent here for a window
    // before we let the other in (claim_verdict), so leaving the id out lets
    // no lease outlive the view. (Else a second instance that reaches only
    // some nodes would keep a dead member in the view for as long as it stays.)
    NodeMask heard = reachable(now_us);
    for (uint16_t id : mask_nodes(heard & acc.members))
        if (id != cfg_.self && owner(id) != 0 &&
            load_relaxed(&shm_->accepted_binding[id - 1]) != owner(id))
            heard &= ~node_bit(id);
    if ((heard & ~v.members) != 0) return false;
    if (v.binding != view_binding(v.members, instances)) return false;
    for (uint16_t id : mask_nodes(v.members)) {
        const uint64_t mine = owner(id);
        if (mine != 0 && mine == instances[id - 1]) continue;
        if (mine == 0 && id != cfg_.self && instances[id - 1] != 0) continue;
        if (refused_epoch_logged_ != v.epoch) {
            refused_epoch_logged_ = v.epoch;
            logs_.push_back("membership: epoch " + std::to_string(v.epoch) + " proposed by node " +
                            std::to_string(proposer) + " binds node " + std::to_string(id) +
                            " to instance " + std::to_string(instances[id - 1]) +
                            ", but here node " + std::to_string(id) + " is instance " +
                            std::to_string(mine) + ": not voting for it");
        }
        return false;
    }
    if (!rebinding_allowed(v, instances, proposer)) return false;
    store_release(&shm_->muted, load_relaxed(&shm_->muted) | (cfg_.configured & ~v.members));
    for (uint16_t id : mask_nodes(v.members)) {
        if (id == cfg_.self) continue;
        store_release(&shm_->voted_instance[id - 1], instances[id - 1]);
        store_release(&shm_->recorded_location[id - 1],
                      owner(id) == instances[id - 1] ? load_relaxed(&shm_->owner_location[id - 1])
                                                     : uint64_t{0});
    }
    for (uint16_t id = 1; id <= 64; id++)
        store_release(&shm_->accepted_binding[id - 1],
                      has_node(v.members, id) ? instances[id - 1] : uint64_t{0});
    store_release(&shm_->accepted.binding, v.binding);
    store_release(&shm_->accepted.members, v.members);
    store_release(&shm_->accepted.epoch, v.epoch);
    bump_at_accept_ = load_acquire(&shm_->bump_requests);
    return true;
}

void Membership::adopt(const View& v, int64_t now_us) {
    const View old = committed_view(shm_);
    if (v.epoch <= old.epoch) return;
    const bool member = has_node(v.members, cfg_.self);
    const View acc = load_view(&shm_->accepted);
    if (member && acc != v) {
        // A view with us that we did not vote for (we restarted since, or moved
        // on to a newer proposal): not ours to act in. Ask for a new epoch.
        if (state() == MemberState::Member)
            fence(now_us, now_us,
                  "epoch " + std::to_string(v.epoch) + " was committed without our vote");
        return;
    }
    // Publish the view, then the epoch: readers find the view by the epoch.
    View* slot = &shm_->views[v.epoch % kViewRing];
    store_release(&slot->members, v.members);
    store_release(&slot->binding, v.binding);
    store_release(&slot->epoch, v.epoch);
    store_release(&shm_->committed_epoch, v.epoch);
    const int64_t at = unix_at(now_us, now_us);
    if (!member) {
        if (state() == MemberState::Member)
            fence(now_us, now_us, "excluded from epoch " + std::to_string(v.epoch));
        record(MembershipEvent::Excluded, v.epoch, v.members, at, "this node is not a member");
        return;
    }
    for (uint16_t id : mask_nodes(v.members))
        if (id != cfg_.self)
            store_release(&shm_->committed_instance[id - 1],
                          load_relaxed(&shm_->accepted_binding[id - 1]));
    store_release(&shm_->bump_handled, bump_at_accept_);
    store_release(&shm_->muted, NodeMask{0});  // older proposals are committed or dead
    record(MembershipEvent::Committed, v.epoch, v.members, at,
           "was " + mask_text(old.members) + " in epoch " + std::to_string(old.epoch));
    if (state() != MemberState::Member && v.epoch > load_relaxed(&shm_->fenced_epoch)) {
        // A member again (or for the first time) once the lease holds.
        const int64_t exp = computed_expiry_us();
        const uint64_t w = lease_word(shm_);
        if (exp > now_us) {
            const uint64_t ms = exp == INT64_MAX ? kLeaseForever : to_lease_ms(exp);
            store_release(&shm_->lease_word, (static_cast<uint64_t>(lease_fences(w)) << 40) | ms);
            const bool first = state() == MemberState::Joining;
            set_state(MemberState::Member);
            record(MembershipEvent::Rejoined, v.epoch, v.members, at,
                   first ? "a member since this start" : "a member again after a fence");
        }
    }
}

// The lease ends when fewer than a majority (us included) have an in-view
// echo still good: each echo is good for its own lease (echo_lease_ms).
int64_t Membership::computed_expiry_us() const {
    const int need = majority() - 1;  // echoes from others
    if (need <= 0) return INT64_MAX;
    std::vector<int64_t> ends;
    for (uint16_t id : mask_nodes(cfg_.configured))
        if (id != cfg_.self && peers_[id - 1].expiry_us > 0)
            ends.push_back(peers_[id - 1].expiry_us);
    if (static_cast<int>(ends.size()) < need) return 0;
    std::sort(ends.rbegin(), ends.rend());
    return ends[need - 1];
}

void Membership::fence(int64_t now_us, int64_t expired_at_us, const std::string& why) {
    uint64_t w = lease_word(shm_);
    for (;;) {
        if (lease_expiry_ms(w) == 0) break;  // already marked (by an LMS that noticed first)
        const uint64_t fenced = static_cast<uint64_t>(lease_fences(w) + 1) << 40;
        if (compare_exchange(&shm_->lease_word, &w, fenced)) break;
    }
    store_release(&shm_->fenced_epoch, load_relaxed(&shm_->committed_epoch));
    set_state(MemberState::Fenced);
    record(MembershipEvent::Fenced, load_relaxed(&shm_->committed_epoch),
           committed_view(shm_).members, unix_at(expired_at_us, now_us), why);
}

void Membership::check_lease(int64_t now_us) {
    if (state() == MemberState::Member) {
        const uint64_t w = lease_word(shm_);
        const uint64_t exp_ms = lease_expiry_ms(w);
        if (exp_ms == 0 || !lease_valid(w, to_lease_ms(now_us))) {
            fence(now_us,
                  exp_ms == 0
                      ? now_us
                      : static_cast<int64_t>(exp_ms + load_relaxed(&shm_->clock_base_ms)) * 1000,
                  "lease expired: no echo from a majority for " +
                      std::to_string(load_relaxed(&shm_->lease_ms)) + " ms");
            return;
        }
        const int64_t exp = computed_expiry_us();
        const uint64_t want = exp == INT64_MAX ? kLeaseForever : to_lease_ms(exp);
        if (want > exp_ms) {
            uint64_t expected = w;
            const uint64_t renewed = (static_cast<uint64_t>(lease_fences(w)) << 40) | want;
            if (!compare_exchange(&shm_->lease_word, &expected, renewed))
                fence(now_us, now_us, "lease marked expired by another process");
        }
    } else if (state() != MemberState::Member) {
        // Not a member: a committed view with us, that we voted for, becomes ours
        // once echoes give us a lease.
        const View c = committed_view(shm_);
        const View acc = load_view(&shm_->accepted);
        if (c.epoch != 0 && c == acc && has_node(c.members, cfg_.self) &&
            c.epoch > load_relaxed(&shm_->fenced_epoch)) {
            const int64_t exp = computed_expiry_us();
            if (exp > now_us) {
                const uint64_t w = lease_word(shm_);
                const uint64_t ms = exp == INT64_MAX ? kLeaseForever : to_lease_ms(exp);
                store_release(&shm_->lease_word,
                              (static_cast<uint64_t>(lease_fences(w)) << 40) | ms);
                const bool first = state() == MemberState::Joining;
                set_state(MemberState::Member);
                record(MembershipEvent::Rejoined, c.epoch, c.members, unix_at(now_us, now_us),
                       first ? "a member since this start" : "a member again after a fence");
            }
        }
    }
}

// Whether we need a new epoch: an LMS restart asked for one, or we are not a
// member and no committed view we voted for is about to make us one.
bool Membership::want_epoch() const {
    if (load_acquire(&shm_->bump_requests) != load_acquire(&shm_->bump_handled)) return true;
    if (state() == MemberState::Member) return false;
    const View c = committed_view(shm_);
    const View acc = load_view(&shm_->accepted);
    const bool awaiting_lease = c.epoch != 0 && c == acc && has_node(c.members, cfg_.self) &&
                                c.epoch > load_relaxed(&shm_->fenced_epoch);
    return !awaiting_lease;
}

Gossip Membership::gossip() const {
    Gossip g;
    g.committed = committed_view(shm_);
    g.accepted = load_view(&shm_->accepted);
    g.proposal = proposal_;
    for (uint16_t id : mask_nodes(proposal_.members))
        g.proposal_instances[id - 1] = proposal_instances_[id - 1];
    g.peer_timeout_ms = static_cast<uint32_t>(cfg_.peer_timeout_ms);
    g.heartbeat_interval_ms = static_cast<uint32_t>(cfg_.heartbeat_interval_ms);
    if (want_epoch()) g.flags |= kGossipWantEpoch;
    return g;
}

void Membership::propose(int64_t now_us) {
    const NodeMask d = reachable(now_us);
    if (node_count(d) < majority()) {
        proposal_ = View{};
        return;
    }
    uint16_t lowest = 0;
    for (uint16_t id : mask_nodes(d)) {
        lowest = id;
        break;
    }
    if (lowest != cfg_.self) {
        proposal_ = View{};
        return;
    }
    // Every member bound to the instance we admitted for it; a node we count
    // as heard (see reachable()) but have not met yet cannot be bound: wait.
    uint64_t instances[64] = {};
    for (uint16_t id : mask_nodes(d)) {
        instances[id - 1] = owner(id);
        if (instances[id - 1] == 0) {
            proposal_ = View{};
            return;
        }
    }
    const uint64_t binding = view_binding(d, instances);
    const View c = committed_view(shm_);
    const View acc = load_view(&shm_->accepted);
    // A vote for a proposal that was given up mutes the voter's echoes (see
    // in_accepted_view) until a view is committed again: commit one.
    bool want = c.members != d || c.binding != binding || want_epoch() || acc != c;
    const int64_t fresh = static_cast<int64_t>(cfg_.peer_timeout_ms) * 1000;
    uint32_t top = std::max(c.epoch, acc.epoch);
    for (uint16_t id : mask_nodes(cfg_.configured)) {
        if (id == cfg_.self) continue;
        const PeerInfo& p = peers_[id - 1];
        if (p.gossip_us == 0) continue;
        top = std::max(
            {top, p.gossip.committed.epoch, p.gossip.accepted.epoch, p.gossip.proposal.epoch});
        if (has_node(d, id) && now_us - p.gossip_us < fresh) {
            // A peer that voted for our committed view but has not heard of it
            // yet only has to hear of it (a fenced one or a bump still counts).
            const bool catching_up = p.gossip.accepted == c && p.gossip.committed.epoch < c.epoch;
            if ((p.gossip.flags & kGossipWantEpoch) && !catching_up) want = true;
            if (p.gossip.committed.epoch < c.epoch && p.gossip.accepted.epoch < c.epoch)
                want = true;
            if (p.gossip.accepted.epoch > c.epoch && p.gossip.accepted != p.gossip.committed)
                want = true;
        }
    }
    if (!want) {
        proposal_ = View{};
        return;
    }
    // Keep a live proposal for the same members a while; then try a higher epoch.
    if (proposal_.epoch != 0 && proposal_.members == d && proposal_.binding == binding &&
        proposal_.epoch >= top &&
        now_us - proposed_at_us_ <
            proposal_life_us(cfg_.heartbeat_interval_ms, min_known_timeout_ms()))
        return;
    // Never below the clock's count of seconds since 2023-11-14: a cluster
    // whose majority restarted and forgot its votes does not reuse an epoch
    // that a fenced survivor may still remember (docs/ges.md).
    // Epochs are 32 bits on the wire and in GES messages: computed in 64 and
    // never wrapped. The clock floor reaches 2^32 in the year 2159; only a
    // peer that claims an epoch near the end gets us there, and then no
    // proposal is made (it is logged once) rather than one that goes back.
    uint64_t floor = 0;
    if (unix_clock_ != nullptr) {
        const int64_t secs = unix_clock_() / 1000000 - kEpochClockOrigin;
        if (secs > 0) floor = static_cast<uint64_t>(secs);
    }
    const uint64_t next = std::max<uint64_t>(uint64_t{top} + 1, floor);
    if (next > UINT32_MAX) {
        if (!epoch_space_logged_) {
            epoch_space_logged_ = true;
            logs_.push_back("membership: no new epoch can be proposed: epoch " +
                            std::to_string(top) + " is the last one (32 bits); a peer claims it");
        }
        proposal_ = View{};
        return;
    }
    View v{static_cast<uint32_t>(next), 0, d, binding};
    if (!try_accept(v, instances, cfg_.self, now_us)) return;
    proposal_ = v;
    std::copy(std::begin(instances), std::end(instances), std::begin(proposal_instances_));
    proposed_at_us_ = now_us;
}

void Membership::try_commit(int64_t now_us) {
    if (proposal_.epoch == 0) return;
    const View acc = load_view(&shm_->accepted);
    if (acc != proposal_) {
        proposal_ = View{};
        return;
    }
    if (now_us - proposed_at_us_ >=
        proposal_life_us(cfg_.heartbeat_interval_ms, min_known_timeout_ms()))
        return;  // propose() renews it
    for (uint16_t id : mask_nodes(proposal_.members)) {
        if (id == cfg_.self) continue;
        const Gossip& g = peers_[id - 1].gossip;
        if (g.accepted != proposal_ && g.committed != proposal_) return;
    }
    const View v = proposal_;
    proposal_ = View{};
    adopt(v, now_us);
}

bool Membership::tick(int64_t now_us) {
    // A single-node cluster is its own majority: one view, a lease that never ends.
    if (node_count(cfg_.configured) == 1 && load_acquire(&shm_->committed_epoch) == 0) {
        uint64_t instances[64] = {};
        instances[cfg_.self - 1] = self_instance();
        const View v{1, 0, cfg_.configured, view_binding(cfg_.configured, instances)};
        store_release(&shm_->accepted_binding[cfg_.self - 1], instances[cfg_.self - 1]);
        store_release(&shm_->accepted.binding, v.binding);
        store_release(&shm_->accepted.members, v.members);
        store_release(&shm_->accepted.epoch, v.epoch);
        adopt(v, now_us);
    }
    note_start(now_us);
    store_relaxed(&shm_->lease_ms, static_cast<uint32_t>(lease_ms_for(min_known_timeout_ms())));
    const Gossip before = gossip();
    check_lease(now_us);
    try_commit(now_us);
    propose(now_us);
    try_commit(now_us);  // a one-node view commits at once
    check_lease(now_us);
    const Gossip after = gossip();
    return before.committed != after.committed || before.accepted != after.accepted ||
           before.proposal != after.proposal || before.flags != after.flags;
}

}  // namespace pgrac::ic
