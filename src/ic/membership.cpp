// Membership: quorum views, votes, leases and fencing (see membership.hpp).
#include "ic/membership.hpp"

#include <algorithm>
#include <cstring>

#include "ic/atomics.hpp"
#include "ic/codec.hpp"

namespace pgrac::ic {

namespace {

constexpr int64_t kEpochClockOrigin = 1700000000;  // Unix seconds, 2023-11-14

using codec::load_le;
using codec::store_le;

void put_view(uint8_t* p, const View& v) {
    store_le<uint32_t>(p, v.epoch);
    store_le<uint64_t>(p + 4, v.members);
}
View get_view(const uint8_t* p) {
    View v{};
    v.epoch = load_le<uint32_t>(p);
    v.members = load_le<uint64_t>(p + 4);
    return v;
}
bool view_ok(const View& v, NodeMask configured) {
    if ((v.members & ~configured) != 0) return false;
    return (v.epoch == 0) == (v.members == 0);
}

uint64_t ms_of(int64_t us) {
    return us <= 0 ? 0 : static_cast<uint64_t>(us) / 1000;
}

// How long a proposal may be committed after it was made. Under half the peer
// timeout: a voter that moves on to a view leaving the proposer out has not
// heard it for peer_timeout, so by then the proposal is dead, and views are
// committed in epoch order (the other half is the margin for clock rates).
int64_t proposal_life_us(const MembershipConfig& cfg) {
    const int64_t want = std::max<int64_t>(4LL * cfg.heartbeat_interval_ms, 500);
    return std::min<int64_t>(want, cfg.peer_timeout_ms / 2) * 1000;
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

void encode_gossip(const Gossip& g, uint8_t out[kGossipSize]) {
    memset(out, 0, kGossipSize);
    put_view(out, g.committed);
    put_view(out + 12, g.accepted);
    put_view(out + 24, g.proposal);
    out[36] = g.flags;
}

bool decode_gossip(const uint8_t* in, size_t len, NodeMask configured, Gossip* out) {
    if (len != kGossipSize) return false;
    if (in[37] != 0 || in[38] != 0 || in[39] != 0) return false;
    Gossip g;
    g.committed = get_view(in);
    g.accepted = get_view(in + 12);
    g.proposal = get_view(in + 24);
    g.flags = in[36];
    if ((g.flags & ~kKnownGossipFlags) != 0) return false;
    if (!view_ok(g.committed, configured) || !view_ok(g.accepted, configured) ||
        !view_ok(g.proposal, configured))
        return false;
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

View committed_view(const MembershipShared* m) {
    for (int attempt = 0; attempt < 100; attempt++) {
        const uint32_t e = load_acquire(&m->committed_epoch);
        if (e == 0) return View{};
        const View* slot = &m->views[e % kViewRing];
        View v{};
        v.epoch = load_acquire(&slot->epoch);
        v.members = load_acquire(&slot->members);
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
}

void Membership::init_shared(MembershipShared* shm) {
    memset(shm, 0, sizeof *shm);
}

void Membership::set_timing(int heartbeat_interval_ms, int peer_timeout_ms) {
    // A shorter lease takes effect at the next renewal; a longer one too. Safe
    // either way: peers time out by their own setting, which must keep the
    // margin (configuration.md: every node the same values).
    cfg_.heartbeat_interval_ms = heartbeat_interval_ms;
    cfg_.peer_timeout_ms = peer_timeout_ms;
    store_relaxed(&shm_->lease_ms, static_cast<uint32_t>(lease_ms_for(peer_timeout_ms)));
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

void Membership::on_heard(uint16_t node, int64_t now_us) {
    note_start(now_us);
    if (node >= 1 && node <= 64 && node != cfg_.self) peers_[node - 1].heard_us = now_us;
}

void Membership::on_echo(uint16_t node, int64_t ping_sent_us, bool in_view, int64_t now_us) {
    note_start(now_us);
    if (node < 1 || node > 64 || node == cfg_.self || !has_node(cfg_.configured, node)) return;
    PeerInfo& p = peers_[node - 1];
    if (in_view && ping_sent_us > p.echo_us) p.echo_us = ping_sent_us;
}

void Membership::on_gossip(uint16_t node, const Gossip& g, int64_t now_us) {
    note_start(now_us);
    if (node < 1 || node > 64 || node == cfg_.self || !has_node(cfg_.configured, node)) return;
    PeerInfo& p = peers_[node - 1];
    p.gossip = g;
    p.gossip_us = now_us;
    p.heard_us = now_us;
    if (g.proposal.epoch != 0) try_accept(g.proposal, node, now_us);
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
bool Membership::in_accepted_view(uint16_t node) const {
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    return has_node(acc.members, node) && has_node(committed_view(shm_).members, node) &&
           !has_node(load_relaxed(&shm_->muted), node);
}

NodeMask Membership::reachable(int64_t now_us) const {
    NodeMask m = node_bit(cfg_.self);
    const int64_t window = static_cast<int64_t>(cfg_.peer_timeout_ms) * 1000;
    for (uint16_t id : mask_nodes(cfg_.configured)) {
        if (id == cfg_.self) continue;
        // A restarted host process (or host) may have heard it just before: its
        // lease may rest on our echoes, so we wait out peer_timeout from our start.
        const int64_t heard = std::max(peers_[id - 1].heard_us, started_us_);
        if (heard != 0 && now_us - heard < window) m |= node_bit(id);
    }
    return m;
}

// Our vote. A vote for (e, V) promises: no vote for any epoch <= e again, and
// every node left out of V has been silent to us for peer_timeout, so its
// lease (which needs an echo from a majority, us possibly among them) has run
// out before any member of V acts on V.
bool Membership::try_accept(const View& v, uint16_t proposer, int64_t now_us) {
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    if (v.epoch <= acc.epoch) return false;
    if (!has_node(v.members, cfg_.self) || !has_node(v.members, proposer)) return false;
    if ((v.members & ~cfg_.configured) != 0 || node_count(v.members) < majority()) return false;
    if ((reachable(now_us) & ~v.members) != 0) return false;  // it leaves out a node we hear
    store_release(&shm_->muted, load_relaxed(&shm_->muted) | (cfg_.configured & ~v.members));
    store_release(&shm_->accepted.members, v.members);
    store_release(&shm_->accepted.epoch, v.epoch);
    bump_at_accept_ = load_acquire(&shm_->bump_requests);
    return true;
}

void Membership::adopt(const View& v, int64_t now_us) {
    const View old = committed_view(shm_);
    if (v.epoch <= old.epoch) return;
    const bool member = has_node(v.members, cfg_.self);
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
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
    store_release(&slot->epoch, v.epoch);
    store_release(&shm_->committed_epoch, v.epoch);
    const int64_t at = unix_at(now_us, now_us);
    if (!member) {
        if (state() == MemberState::Member)
            fence(now_us, now_us, "excluded from epoch " + std::to_string(v.epoch));
        record(MembershipEvent::Excluded, v.epoch, v.members, at, "this node is not a member");
        return;
    }
    store_release(&shm_->bump_handled, bump_at_accept_);
    store_release(&shm_->muted, NodeMask{0});  // older proposals are committed or dead
    record(MembershipEvent::Committed, v.epoch, v.members, at,
           "was " + mask_text(old.members) + " in epoch " + std::to_string(old.epoch));
    if (state() != MemberState::Member && v.epoch > load_relaxed(&shm_->fenced_epoch)) {
        // A member again (or for the first time) once the lease holds.
        const int64_t exp = computed_expiry_us();
        const uint64_t w = lease_word(shm_);
        if (exp > now_us) {
            const uint64_t ms = exp == INT64_MAX ? kLeaseForever : ms_of(exp);
            store_release(&shm_->lease_word, (static_cast<uint64_t>(lease_fences(w)) << 40) | ms);
            const bool first = state() == MemberState::Joining;
            set_state(MemberState::Member);
            record(MembershipEvent::Rejoined, v.epoch, v.members, at,
                   first ? "a member since this start" : "a member again after a fence");
        }
    }
}

// The lease ends `lease` after the newest ping that a majority (us included)
// echoed from within their accepted views.
int64_t Membership::computed_expiry_us() const {
    const int need = majority() - 1;  // echoes from others
    if (need <= 0) return INT64_MAX;
    std::vector<int64_t> echoes;
    for (uint16_t id : mask_nodes(cfg_.configured))
        if (id != cfg_.self && peers_[id - 1].echo_us > 0) echoes.push_back(peers_[id - 1].echo_us);
    if (static_cast<int>(echoes.size()) < need) return 0;
    std::sort(echoes.rbegin(), echoes.rend());
    return echoes[need - 1] + static_cast<int64_t>(load_relaxed(&shm_->lease_ms)) * 1000;
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
        if (exp_ms == 0 || !lease_valid(w, ms_of(now_us))) {
            fence(now_us, exp_ms == 0 ? now_us : static_cast<int64_t>(exp_ms) * 1000,
                  "lease expired: no echo from a majority for " +
                      std::to_string(load_relaxed(&shm_->lease_ms)) + " ms");
            return;
        }
        const int64_t exp = computed_expiry_us();
        const uint64_t want = exp == INT64_MAX ? kLeaseForever : ms_of(exp);
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
        const View acc{load_relaxed(&shm_->accepted.epoch), 0,
                       load_relaxed(&shm_->accepted.members)};
        if (c.epoch != 0 && c == acc && has_node(c.members, cfg_.self) &&
            c.epoch > load_relaxed(&shm_->fenced_epoch)) {
            const int64_t exp = computed_expiry_us();
            if (exp > now_us) {
                const uint64_t w = lease_word(shm_);
                const uint64_t ms = exp == INT64_MAX ? kLeaseForever : ms_of(exp);
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
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    const bool awaiting_lease = c.epoch != 0 && c == acc && has_node(c.members, cfg_.self) &&
                                c.epoch > load_relaxed(&shm_->fenced_epoch);
    return !awaiting_lease;
}

Gossip Membership::gossip() const {
    Gossip g;
    g.committed = committed_view(shm_);
    g.accepted =
        View{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    g.proposal = proposal_;
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
    const View c = committed_view(shm_);
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    // A vote for a proposal that was given up mutes the voter's echoes (see
    // in_accepted_view) until a view is committed again: commit one.
    bool want = c.members != d || want_epoch() || acc != c;
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
    if (proposal_.epoch != 0 && proposal_.members == d && proposal_.epoch >= top &&
        now_us - proposed_at_us_ < proposal_life_us(cfg_))
        return;
    // Never below the clock's count of seconds since 2023-11-14: a cluster
    // whose majority restarted and forgot its votes does not reuse an epoch
    // that a fenced survivor may still remember (docs/ges.md).
    uint32_t floor = 0;
    if (unix_clock_ != nullptr) {
        const int64_t secs = unix_clock_() / 1000000 - kEpochClockOrigin;
        if (secs > 0) floor = static_cast<uint32_t>(secs);
    }
    View v{std::max(top + 1, floor), 0, d};
    if (!try_accept(v, cfg_.self, now_us)) return;
    proposal_ = v;
    proposed_at_us_ = now_us;
}

void Membership::try_commit(int64_t now_us) {
    if (proposal_.epoch == 0) return;
    const View acc{load_relaxed(&shm_->accepted.epoch), 0, load_relaxed(&shm_->accepted.members)};
    if (acc != proposal_) {
        proposal_ = View{};
        return;
    }
    if (now_us - proposed_at_us_ >= proposal_life_us(cfg_)) return;  // propose() renews it
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
        const View v{1, 0, cfg_.configured};
        store_release(&shm_->accepted.members, v.members);
        store_release(&shm_->accepted.epoch, v.epoch);
        adopt(v, now_us);
    }
    note_start(now_us);
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
