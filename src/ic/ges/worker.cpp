// The GES worker (ic/ges/worker.hpp): the master and client logic of one LMS
// worker, over a WorkerHost. docs/ges.md describes the protocol.
#include "ic/ges/worker.hpp"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

namespace pgrac::ic::ges {

namespace {

// How often a worker looks for requests older than cluster.ges_deadlock_timeout.
constexpr int64_t kWaitCheckUs = 50000;
// How often a worker looks for local owners whose backend is gone.
constexpr int64_t kReapUs = 250000;
// Hand-offs one worker makes in one epoch at most (mastership that follows
// use): bounds the maps that remember them, at every node.
constexpr size_t kMaxHandOffs = 65536;
// How long a NOWAIT request blocked only by cached locks waits for their
// give-back (docs/ges.md, "Node-level caching").
constexpr int64_t kNoWaitCacheGraceUs = 50000;
// How long a request waits for a Transfer's grant before it goes to the master.
constexpr int64_t kAfterTransferUs = 100000;

LockTable::Options table_options() {
    LockTable::Options o;
    o.nowait_cache_grace = kNoWaitCacheGraceUs;
    return o;
}
// A replay barrier still missing a member's marker after this many
// peer_timeouts asks the membership for a new epoch; by then membership would
// have removed a member that went silent (docs/ges.md, "When a barrier
// cannot complete").
constexpr int64_t kBarrierBoundTimeouts = 2;

std::string list_text(const std::vector<uint16_t>& v) {
    std::string s = "{";
    for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + std::to_string(v[i]);
    return s + "}";
}

}  // namespace

Worker::Worker(WorkerHost& host, uint32_t index, uint16_t self, RegistryMirror mirror)
    : host_(host), index_(index), self_(self), table_(self, table_options()), mirror_(mirror) {
    shard_fences_seen_ = host_.shard_fences(index);
    fences_seen_ = lease_fences(host_.lease_word());
}

// ---- restart of this LMS worker (docs/ges.md, "LMS restart")
//
// The previous process of this worker took its lock table (the master
// side of the shard) and its registry (this node's client side of it)
// with it. The registry comes back from its copy in shared memory (the
// mirror, kept by every change); then a new epoch is asked for, in which
// every master rebuilds its table from the registries, this one included.
// Until that epoch the worker serves nothing: its empty table must not
// grant. Only if the mirror overflowed are this node's locks in the shard
// voided instead (shard_fences[w], which every holder checks at its next
// GES call).
void Worker::start_after_restart(int64_t now) {
    (void)now;
    min_epoch_ = host_.committed_view().epoch + 1;
    std::string got;
    if (mirror_.overflowed()) {
        shard_fences_seen_ = host_.bump_shard_fences(index_);
        mirror_.clear();
        clear_cache();  // its entries are void with the shard's locks
        got =
            "its registry copy had overflowed: this node's global locks in its shard are "
            "void";
    } else {
        size_t n = 0;
        const std::vector<ReplayEntry> kept = mirror_.entries();
        mirror_.clear();  // written again below, with counts this process can trust
        for (const ReplayEntry& e : kept) {
            if (e.owner.node != self_) continue;
            registry_.restore(e);
            if (e.state != LockState::Waiting && e.token != 0)
                held_tokens_[Key{e.resource, e.owner}] = e.token;
            sync(e.owner, e.resource);
            n++;
        }
        got = "got back " + std::to_string(n) + " lock(s) and request(s) of this node";
        clear_waiting_marks();  // the old process's local waiters are gone with it
    }
    host_.request_new_epoch();
    log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): restarted; " + got +
                                 "; serves again from epoch " + std::to_string(min_epoch_) + " on");
}

// Keeps the shared-memory copy of the registry entry of (o, r) current.
void Worker::sync(Owner o, const ResourceName& r) {
    auto e = registry_.find(o, r);
    if (!e) {
        mirror_.erase(o, r);
        return;
    }
    auto t = held_tokens_.find(Key{r, o});
    if (t != held_tokens_.end() && e->state != LockState::Waiting) e->token = t->second;
    if (!mirror_.put(*e) && !mirror_full_logged_) {
        mirror_full_logged_ = true;
        log(WorkerLogLevel::Warning,
            "GES (LMS " + std::to_string(index_) + "): the registry copy is full (" +
                std::to_string(mirror_.capacity()) +
                " entries, cluster.ges_registry_entries): a restart of this worker would "
                "void this node's global locks in its shard");
    }
}

// ---- owners whose backend is gone (docs/ges.md, "Cleanup")
//
// A backend's exit hook sends ReleaseAll, but that can be lost (listener
// restarting, ring full) or never sent. Every kReapUs, each local owner in
// the registry whose wait slot no longer belongs to it (its pid, and the
// session tag in its request ids) has its locks released: all of them
// (ReleaseAll) if none of its entries is from a live session, else (a new
// backend reusing the pid) the stale resources one by one.
void Worker::reap_dead_owners(int64_t now) {
    if (now - last_reap_ < kReapUs) return;
    last_reap_ = now;
    std::map<Owner, std::vector<ResourceName>> dead;
    std::map<Owner, uint64_t> dead_session;  // a dead owner's session: its ReleaseAll's bound
    std::set<Owner> live_owner;
    // The backends' entries only (indexed by owner): the node owner's cached
    // locks, which may be a million, are not walked.
    for (const Owner& o : registry_.owners()) {
        if (o.node != self_) continue;
        for (const ReplayEntry& e : registry_.locks_of(o)) {
            if (host_.owner_alive(e.owner.proc, e.request_id))
                live_owner.insert(e.owner);
            else {
                dead[e.owner].push_back(e.resource);
                if ((e.request_id & kInternalRequestId) == 0)
                    dead_session[e.owner] = e.request_id | 0xffffffffu;
            }
        }
    }
    // Local waiters are not in the registry: those whose backend is gone go.
    std::set<ResourceName> waited;
    for (auto it = local_waiters_.begin(); it != local_waiters_.end();) {
        if (!host_.owner_alive(it->m.owner.proc, it->m.request_id)) {
            waited.insert(it->m.resource);
            it = local_waiters_.erase(it);
        } else {
            ++it;
        }
    }
    for (const ResourceName& r : waited) serve_local_waiters(r, now);
    for (auto& [o, resources] : dead) {
        host_.count(WorkerCounter::DeadOwnersReaped);
        log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): backend " +
                                     std::to_string(o.proc) +
                                     " is gone but still had global locks; releasing " +
                                     std::to_string(resources.size()));
        if (live_owner.count(o) == 0) {
            // Bounded by the dead session: a new backend with the same pid
            // may have a direct lock at a master before this node knows it.
            auto b = dead_session.find(o);
            release_owner(o, now, b != dead_session.end() ? b->second : 0);
            continue;
        }
        for (const ResourceName& r : resources) release_one(o, r, now);
    }
}

// A new request from a session whose pid had entries of a dead session on
// the same resource (pid reuse faster than the reaper): drop the stale one
// first, so that the new request is not taken for a conversion of it.
void Worker::drop_stale_entry(const GesMessage& m, int64_t now) {
    auto e = registry_.find(m.owner, m.resource);
    if (!e || (e->request_id & kInternalRequestId) || (m.request_id & kInternalRequestId) ||
        (e->request_id >> 32) == (m.request_id >> 32))
        return;
    release_one(m.owner, m.resource, now);
}

// (Only for a session that is gone: a PW/EX lock's value turns invalid.)
void Worker::release_one(Owner o, const ResourceName& r, int64_t now) {
    const Key k{r, o};
    registry_.on_released(o, r);
    held_tokens_.erase(k);
    cancelling_.erase(k);
    orphans_.erase(k);
    sync(o, r);
    GesMessage m;
    m.type = GesMsgType::Release;
    m.owner = o;
    m.resource = r;
    m.value = LockValue::invalid();
    to_master(m, now);
}

// Value blocks the master side made invalid since the last look (the table
// is new in every epoch).
void Worker::count_value_invalidations() {
    const uint64_t n = table_.value_invalidations();
    if (n > invalidations_seen_)
        host_.count_many(WorkerCounter::ValueInvalidations, n - invalidations_seen_);
    invalidations_seen_ = n;
}

// Everything of one owner, at every live master (its worker of this index).
void Worker::release_owner(Owner o, int64_t now, uint64_t bound) {
    registry_.on_released_all(o);
    mirror_.erase_owner(o);
    erase_owner(&cancelling_, o);
    erase_owner(&orphans_, o);
    erase_owner(&held_tokens_, o);
    std::set<ResourceName> waited;
    for (auto it = local_waiters_.begin(); it != local_waiters_.end();) {
        if (it->m.owner == o && released_by_bound(it->m.request_id, bound)) {
            waited.insert(it->m.resource);
            it = local_waiters_.erase(it);
        } else {
            ++it;
        }
    }
    for (const ResourceName& r : waited) serve_local_waiters(r, now);
    if (epoch_ == 0) return;  // outside an epoch the next replay leaves them out
    GesMessage m;
    m.type = GesMsgType::ReleaseAll;
    m.epoch = epoch_;
    m.owner = o;
    m.request_id = bound;  // a direct request after it may have come first: its lock stays
    std::vector<uint8_t> body;
    if (encode_ges_message(m, &body) != GesWireError::None) return;
    for (uint16_t n : live_) {
        if (n == self_)
            on_master(self_, m, now);
        else
            host_.send(n, GesChannel::Master, index_, body);
    }
}

// ---- membership, fencing and epochs (docs/ges.md, "Membership, leases and epochs")
//
// The worker follows the committed view and this node's lease
// (ic/membership/membership.hpp), never raw peer states. In each epoch every master
// starts from an empty table, rebuilt from every member's registry
// (replay), and serves nothing until each member's marker of that epoch
// has arrived and checked out: no timeout ends the barrier early, one that
// waits too long asks for a new epoch. Messages of an older epoch are
// refused; those of a newer one wait (for a while) until this worker has
// adopted it.

void Worker::check_membership(int64_t now) {
    const uint64_t now_ms = host_.lease_clock_ms();
    if (host_.fence_if_lapsed(now_ms))
        log(WorkerLogLevel::Log,
            "GES (LMS " + std::to_string(index_) + "): this node's lease expired; fencing it");
    // The view first: a fence is published before any later epoch.
    const View v = host_.committed_view();
    const uint64_t w = host_.lease_word();
    const uint32_t shard = host_.shard_fences(index_);
    if (lease_fences(w) != fences_seen_ || shard != shard_fences_seen_) {
        const bool node = lease_fences(w) != fences_seen_;
        fences_seen_ = lease_fences(w);
        shard_fences_seen_ = shard;
        drop_everything(node ? "this node was fenced (it lost its lease)"
                             : "this LMS worker restarted");
    }
    // A view of witnesses only (no node may master) serves nothing.
    bool any_master = false;
    for (uint16_t n : mask_nodes(v.members)) any_master = any_master || !is_witness(n);
    const bool ok = lease_valid(w, now_ms) && has_node(v.members, self_) && any_master;
    if (!ok) {
        if (epoch_ != 0) {
            log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) +
                                         "): not a member of epoch " + std::to_string(v.epoch) +
                                         " with a lease; serving nothing");
            stop_serving();
        }
        member_ = false;
        return;
    }
    member_ = true;
    if (v.epoch != epoch_) start_epoch(v, now);
}

// Everything this worker knew is void (the node was fenced, or the
// worker restarted): waiting backends are told, the rest forgotten.
void Worker::drop_everything(const char* why) {
    // Slots of direct requests: a grant a backend took itself is void with
    // the rest (the fence counts say so); its slot is freed, and open ones
    // closed so that the denials below reach them.
    for (const ReplayEntry& e : registry_.locks()) {
        uint64_t token = 0;
        LockValue value;
        if (e.owner.node == self_ && e.state == LockState::Waiting &&
            e.owner.proc != kNodeOwnerProc && (e.request_id & kInternalRequestId) == 0)
            (void)host_.settle_direct(e.owner.proc, e.request_id, &token, &value);
    }
    size_t waiting = 0;
    for (const ReplayEntry& e : registry_.locks()) {
        if (e.owner.node != self_ || e.state == LockState::Granted) continue;
        host_.deliver_denial(e.owner.proc, e.request_id, DenyReason::NoQuorum);
        waiting++;
    }
    log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): " + why + "; dropping " +
                                 std::to_string(registry_.size()) + " local lock entries (" +
                                 std::to_string(waiting) + " waiting, denied) and " +
                                 std::to_string(table_.lock_count()) + " mastered locks");
    for (const auto& [k, c] : conversions_)
        host_.deliver_denial(k.owner.proc, c.m.request_id, DenyReason::NoQuorum);
    conversions_.clear();
    for (const AfterTransfer& a : after_transfer_)
        host_.deliver_denial(a.m.owner.proc, a.m.request_id, DenyReason::NoQuorum);
    after_transfer_.clear();
    for (const CachedConversion& w : local_waiters_)
        host_.deliver_denial(w.m.owner.proc, w.m.request_id, DenyReason::NoQuorum);
    local_waiters_.clear();
    clear_cache();
    registry_ = ClientRegistry();
    direct_.clear();  // their slots were denied above
    held_tokens_.clear();
    mirror_.clear();
    basted_.clear();
    early_basts_.clear();
    stop_serving();
}

void Worker::stop_serving() {
    // (direct_ stays: the next epoch settles those slots, as it replays the
    // registry's requests.)
    early_answers_.clear();
    owner_ids_.clear();
    owner_ids_full_ = false;
    count_value_invalidations();
    table_ = LockTable(self_, table_options());
    invalidations_seen_ = 0;
    clear_remastering();
    tokens_.clear();
    cancelling_.clear();
    orphans_.clear();
    replaying_ = false;
    round_.finish();
    epoch_ = 0;
    live_.assign(1, self_);
    masters_.assign(1, self_);
}

void Worker::start_epoch(const View& v, int64_t now) {
    if (v.epoch < min_epoch_) return;  // a restarted worker waits for a new epoch
    const std::vector<uint16_t> old = live_;
    const uint32_t old_epoch = epoch_;
    epoch_ = v.epoch;
    live_.clear();
    masters_.clear();
    epoch_witnesses_ = host_.witnesses();
    for (uint16_t n : mask_nodes(v.members)) {
        live_.push_back(n);
        if ((epoch_witnesses_ & node_bit(n)) == 0) masters_.push_back(n);
    }
    count_value_invalidations();
    table_ = LockTable(self_, table_options());
    invalidations_seen_ = 0;
    clear_remastering();  // every table is rebuilt at the home masters
    tokens_.clear();
    table_.begin_replay();
    replaying_ = true;
    replay_.clear();
    for (uint16_t n : live_) replay_[n];
    barrier_start_ms_ = host_.lease_clock_ms();
    barrier_deadline_ms_ = barrier_start_ms_ + static_cast<uint64_t>(replay_barrier_bound_ms());
    barrier_warned_ = false;
    cancelling_.clear();
    orphans_.clear();
    round_.finish();
    if (old != live_ || old_epoch == 0)
        log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): epoch " +
                                     std::to_string(old_epoch) + " " + list_text(old) + " -> " +
                                     std::to_string(epoch_) + " " + list_text(live_) +
                                     "; rebuilding the shard");
    else
        log(WorkerLogLevel::Debug, "GES (LMS " + std::to_string(index_) + "): epoch " +
                                       std::to_string(epoch_) + "; rebuilding the shard");
    // Direct requests: a grant a backend took itself is the registry's now;
    // the rest are answered through this worker from here on.
    settle_direct_requests(now);
    early_answers_.clear();  // of the old epoch: their requests go to the new masters
    owner_ids_.clear();
    owner_ids_full_ = false;
    // Client side: every master gets our locks it masters now.
    std::map<uint16_t, std::vector<ReplayEntry>> by_master;
    for (ReplayEntry e : registry_.locks()) {
        auto t = held_tokens_.find(Key{e.resource, e.owner});
        if (t != held_tokens_.end() && e.state != LockState::Waiting) e.token = t->second;
        // A cached PW/EX lock's value is what its local users last wrote.
        if (e.owner.proc == kNodeOwnerProc && e.state != LockState::Waiting &&
            mode_writes_value(e.granted_mode)) {
            const LockValue v = cached_value(e.resource);
            if (v.carries()) e.value = v;
        }
        by_master[master_for(e.resource, masters_)].push_back(e);
    }
    send_replay(by_master, now);
    // Messages of this epoch that came before we adopted it; those of an
    // epoch passed over will never be served here.
    std::vector<Stashed> later;
    std::vector<Stashed> now_due;
    for (Stashed& s : stash_) {
        if (s.m.epoch > epoch_)
            later.push_back(std::move(s));
        else if (s.m.epoch == epoch_)
            now_due.push_back(std::move(s));
        else
            drop_future(s.src, s.m, Severity::Info,
                        "its epoch was never served here (this worker went on to epoch " +
                            std::to_string(epoch_) + ")");
    }
    stash_ = std::move(later);
    for (Stashed& s : now_due) {
        if (s.reply)
            on_reply(s.src, s.m, now);
        else
            on_master(s.src, s.m, now);
    }
    maybe_end_replay(now);
}

// Client side of the rebuild: this worker's registry (this node's locks of
// its shard) to each resource's master, in batches, and then to every member
// (witnesses too: they check it) the marker its barrier waits for. The
// marker names this worker, the settings the replay's routing rests on, and
// how many entries this member was sent, so that a master can tell a
// complete replay from one with a lost batch or the wrong shard.
void Worker::send_replay(const std::map<uint16_t, std::vector<ReplayEntry>>& by_master,
                         int64_t now) {
    size_t kept = 0, replayed = 0;
    for (uint16_t member : live_) {
        uint32_t sent = 0;
        auto it = by_master.find(member);
        if (it != by_master.end()) {
            kept += it->second.size();
            for (std::vector<uint8_t>& body : encode_replay_messages(it->second, epoch_)) {
                GesMessage batch;
                if (decode_ges_message(body.data(), body.size(), &batch) != GesWireError::None)
                    continue;
                sent += static_cast<uint32_t>(batch.entries.size());
                if (member == self_)
                    on_master(self_, batch, now);
                else
                    host_.send(member, GesChannel::Master, index_, std::move(body));
            }
        }
        replayed += sent;
        GesMessage done;
        done.type = GesMsgType::ReplayDone;
        done.epoch = epoch_;
        done.worker = static_cast<uint16_t>(index_);
        done.n_workers = static_cast<uint16_t>(std::max<uint32_t>(1, host_.n_lms()));
        done.replayed = sent;
        done.witnesses = epoch_witnesses_;
        std::vector<uint8_t> body;
        if (encode_ges_message(done, &body) != GesWireError::None) continue;  // 16 workers at most
        if (member == self_)
            on_master(self_, done, now);
        else
            host_.send(member, GesChannel::Master, index_, std::move(body));
    }
    if (replayed != kept) {
        // An entry the wire cannot carry would be dropped from every
        // table: say so loudly (it must not happen).
        const std::string text = "GES (LMS " + std::to_string(index_) + "): epoch " +
                                 std::to_string(epoch_) + ": " + std::to_string(kept - replayed) +
                                 " registry entries could not be replayed";
        log(WorkerLogLevel::Warning, text);
        host_.record_error(ErrorType::Internal, Severity::Error, -1, text);
    }
}

// A message for an epoch this worker has not adopted yet: keep it, for at
// most peer_timeout and kMaxStash messages.
void Worker::stash(uint16_t src, const GesMessage& m, bool reply) {
    if (stash_.size() >= kMaxStash) {
        drop_future(src, m, Severity::Warning,
                    "too many messages of epochs not adopted here; asking for a new epoch");
        host_.request_new_epoch();  // the rebuild recovers what it said
        return;
    }
    stash_.push_back(Stashed{src, reply, m, host_.lease_clock_ms()});
}

// A message of an epoch this worker did not adopt is dropped: counted, in
// the errors view, and logged (the first ones at LOG, the rest at DEBUG1).
void Worker::drop_future(uint16_t src, const GesMessage& m, Severity severity,
                         const std::string& why) {
    host_.count_future_epoch_message();
    const std::string text = std::string(ges_msg_type_name(m.type)) + " of epoch " +
                             std::to_string(m.epoch) + " from node " + std::to_string(src) +
                             " dropped: " + why;
    host_.record_error(ErrorType::FutureEpoch, severity, src, text);
    const bool loud = severity != Severity::Info && future_logged_++ < 20;
    log(loud ? WorkerLogLevel::Log : WorkerLogLevel::Debug,
        "GES (LMS " + std::to_string(index_) + "): " + text);
}

// A member sends in an epoch only once it is committed, and a committed view
// reaches every member with its next heartbeats: a message whose epoch is
// still not adopted here after peer_timeout names an epoch that this node
// will not serve (or a peer that makes epochs up). Nothing waits forever.
void Worker::expire_stash() {
    if (stash_.empty()) return;
    const uint64_t now_ms = host_.lease_clock_ms();
    const uint64_t limit = static_cast<uint64_t>(std::max<int64_t>(1, host_.peer_timeout_ms()));
    size_t n = 0;
    while (n < stash_.size() && now_ms - stash_[n].since_ms > limit) n++;
    for (size_t i = 0; i < n; i++)
        drop_future(stash_[i].src, stash_[i].m, Severity::Warning,
                    "epoch " + std::to_string(stash_[i].m.epoch) + " not adopted here within " +
                        std::to_string(limit) + " ms (serving epoch " + std::to_string(epoch_) +
                        ")");
    stash_.erase(stash_.begin(), stash_.begin() + static_cast<long>(n));
}

// Whether a message of epoch e may be acted on now (else it is stashed or refused).
bool Worker::epoch_ok(uint16_t src, const GesMessage& m, bool reply, int64_t now) {
    if (m.epoch > epoch_) {
        check_membership(now);
        if (m.epoch > epoch_) {  // not adopted yet (or not serving): keep it
            stash(src, m, reply);
            return false;
        }
    }
    if (epoch_ == 0) return false;
    if (m.epoch < epoch_) {
        host_.count(WorkerCounter::StaleEpochRefused);
        host_.count_stale_epoch_message();
        host_.record_error(ErrorType::StaleEpoch, Severity::Info, src,
                           std::string(ges_msg_type_name(m.type)) + " of epoch " +
                               std::to_string(m.epoch) + " refused in epoch " +
                               std::to_string(epoch_));
        log(WorkerLogLevel::Debug, std::string("GES: ") + ges_msg_type_name(m.type) + " of epoch " +
                                       std::to_string(m.epoch) + " from node " +
                                       std::to_string(src) + " refused in epoch " +
                                       std::to_string(epoch_));
        return false;
    }
    return true;
}

void Worker::refuse_source(uint16_t src, const GesMessage& m, const char* why) {
    host_.count(WorkerCounter::WrongSourceRefused);
    std::string text = std::string("GES: ") + ges_msg_type_name(m.type) + " from node " +
                       std::to_string(src) + " refused: " + why;
    if (wrong_source_logged_++ < 20) log(WorkerLogLevel::Log, text);
    host_.record_error(ErrorType::WrongSource, Severity::Warning, src, text);
}

// A batch that cannot be taken poisons its sender's replay for the epoch:
// its marker will not complete the barrier (the rest of the replay would
// be incomplete), so a new epoch must replay everything again.
void Worker::refuse_replay(uint16_t src, const GesMessage& m, const std::string& why) {
    auto it = replay_.find(src);
    if (it != replay_.end() && it->second.refused.empty()) {
        it->second.refused = why;
        it->second.done = false;
    }
    refuse_source(src, m, why.c_str());
}

// A member's marker: its replay to this worker is complete. It counts only
// from the worker that replays this shard (same index, same worker count),
// with the same witnesses (the same masters for every resource), after every
// entry it announces arrived. Anything else is refused by name, and the
// barrier waits on.
void Worker::on_replay_done(uint16_t src, const GesMessage& m) {
    auto it = replay_.find(src);
    if (it == replay_.end()) return;  // a member is always there
    ReplaySource& s = it->second;
    const uint32_t n_lms = std::max<uint32_t>(1, host_.n_lms());
    std::string mismatch;
    if (m.n_workers != n_lms)
        mismatch = "cluster.lms_workers is " + std::to_string(n_lms) + " here, " +
                   std::to_string(m.n_workers) + " on node " + std::to_string(src);
    else if (m.worker != index_)
        mismatch = "LMS worker " + std::to_string(m.worker) + " of node " + std::to_string(src) +
                   " replayed to LMS worker " + std::to_string(index_) + " here";
    else if (m.witnesses != epoch_witnesses_)
        mismatch = "cluster.witness_nodes is " + mask_text(epoch_witnesses_) + " here, " +
                   mask_text(m.witnesses) + " on node " + std::to_string(src);
    if (!mismatch.empty()) {
        // Replayed to the wrong shard, or with other masters for the same
        // resources: granting from such a table could grant twice.
        const std::string text = "GES (LMS " + std::to_string(index_) + "): epoch " +
                                 std::to_string(epoch_) + ": the replay of node " +
                                 std::to_string(src) + " is refused: config_mismatch: " + mismatch;
        log(WorkerLogLevel::Warning, text);
        host_.record_error(ErrorType::ConfigMismatch, Severity::Error, src, text);
        s.done = false;
        if (s.refused.empty()) s.refused = "config_mismatch: " + mismatch;
        return;
    }
    if (!s.refused.empty()) return;
    if (m.replayed != s.entries) {
        s.refused = std::to_string(s.entries) + " of the " + std::to_string(m.replayed) +
                    " entries it replayed arrived";
        log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): epoch " +
                                     std::to_string(epoch_) + ": the replay of node " +
                                     std::to_string(src) + " is incomplete: " + s.refused);
        return;
    }
    s.done = true;
}

int64_t Worker::replay_barrier_bound_ms() {
    return kBarrierBoundTimeouts * std::max<int64_t>(1, host_.peer_timeout_ms());
}

void Worker::maybe_end_replay(int64_t now) {
    if (!replaying_) return;
    if ((epoch_witnesses_ & node_bit(self_)) != 0) {  // masters nothing: nothing to wait for
        replaying_ = false;
        return;
    }
    std::vector<uint16_t> missing;
    for (uint16_t n : live_) {
        auto it = replay_.find(n);
        if (it == replay_.end() || !it->second.done) missing.push_back(n);
    }
    if (missing.empty()) {
        replaying_ = false;
        overdue_attempts_ = 0;
        dispatch(table_.end_replay(now), now);
        return;
    }
    const uint64_t now_ms = host_.lease_clock_ms();
    const uint64_t waited = now_ms - barrier_start_ms_;
    if (!barrier_warned_ && static_cast<int64_t>(waited) > host_.peer_timeout_ms()) {
        barrier_warned_ = true;
        log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) + "): epoch " +
                                     std::to_string(epoch_) + " still waits for the replay of " +
                                     "node(s) " + list_text(missing) +
                                     "; their shard is not served until they report or "
                                     "leave the membership");
    }
    if (now_ms >= barrier_deadline_ms_) barrier_overdue(now_ms, missing);
}

// The barrier has waited kBarrierBoundTimeouts x peer_timeout: a member that
// went silent would have been voted out by now, so the missing ones are in
// the membership and yet their replay did not complete (a lost message, a
// refused replay, a stopped LMS). Only a new epoch can help: every node
// replays again. If the cause persists, each new epoch's barrier ends the
// same way after its own bound, with the same named cause; within one epoch
// the request is repeated once per bound, never faster.
void Worker::barrier_overdue(uint64_t now_ms, const std::vector<uint16_t>& missing) {
    const int64_t bound = replay_barrier_bound_ms();
    barrier_deadline_ms_ = now_ms + static_cast<uint64_t>(bound);
    overdue_attempts_++;
    std::string causes;
    for (uint16_t n : missing) {
        const ReplaySource& s = replay_[n];
        causes += "node " + std::to_string(n) + ": " +
                  (s.refused.empty() ? "no marker arrived" : "refused, " + s.refused) + "; ";
    }
    // A new epoch makes every member replay again. If that did not help (a
    // second overdue barrier in a row), membership decides: this node withholds
    // its lease echoes from the members it waits for, for three bounds; where a
    // majority of nodes does the same, the member's lease lapses, it fences,
    // is voted out and comes back through a new epoch.
    const bool withhold = overdue_attempts_ >= 2;
    const std::string text =
        "GES (LMS " + std::to_string(index_) + "): epoch " + std::to_string(epoch_) +
        ": replay barrier overdue after " + std::to_string(now_ms - barrier_start_ms_) +
        " ms: " + causes + "asking for a new epoch" +
        (withhold ? " and withholding lease echoes from the node(s) above" : "") + " (attempt " +
        std::to_string(overdue_attempts_) + ", bound " + std::to_string(bound) + " ms)";
    log(WorkerLogLevel::Warning, text);
    host_.record_error(ErrorType::BarrierOverdue, Severity::Error,
                       missing.size() == 1 ? missing[0] : -1, text);
    if (withhold)
        for (uint16_t n : missing) host_.withhold_echoes(n, 3 * static_cast<uint64_t>(bound));
    host_.request_new_epoch();
}

void Worker::tick(int64_t now) {
    check_membership(now);
    expire_stash();
    maybe_end_replay(now);
    if (epoch_ != 0 && !replaying_) dispatch(table_.expire(now), now);
    reap_dead_owners(now);
    cache_tick(now);
    if (epoch_ != 0) deadlock_tick(now);
    remaster_tick();
    run_hand_offs(now);
    count_value_invalidations();
}

// ---- the cluster-wide deadlock search (docs/ges.md, "Deadlocks")
//
// Every worker: when one of its pending requests has waited longer than
// cluster.ges_deadlock_timeout (tau), hint the coordinator (LMS 0 of the
// lowest live node), at most once per tau. The coordinator: when hinted,
// at most once per tau, ask every live node's every LMS worker for its
// wait-for edges older than tau (one-way messages, answered at once: no
// LMS ever waits for another), and when all have answered within tau,
// cancel each cycle's victim at its master.

int64_t Worker::deadlock_timeout_us() {
    return std::max<int64_t>(1, host_.deadlock_timeout_ms()) * 1000;
}

// The local users of r's cache entry (their pids), if it has one.
std::vector<uint32_t> Worker::local_users(const ResourceName& r) const {
    NodeCache* c = host_.node_cache();
    if (c == nullptr) return {};
    const uint32_t part = c->partition_of(r, index_);
    uint32_t index = 0, generation = 0;
    bool found = false;
    host_.lock_cache_partition(part);
    if (const CacheEntry* x = c->find(part, r)) {
        index = c->index_of(x);
        generation = x->generation;
        found = true;
    }
    host_.unlock_cache_partition(part);
    if (!found) return {};
    return host_.cache_users(index, generation);
}

std::vector<WaitForEdge> Worker::old_edges(int64_t now, int64_t min_wait) const {
    std::vector<WaitForEdge> out = edges_waiting_at_least(table_.wait_for_edges(), now, min_wait);
    // A local waiter waits for the entry's local users (its cancel comes here).
    uint64_t order = 0;
    for (const CachedConversion& w : local_waiters_) {
        if (now - w.since < min_wait) continue;
        for (uint32_t pid : local_users(w.m.resource)) {
            WaitForEdge e;
            e.waiter = w.m.owner;
            e.holder = Owner{self_, pid};
            e.resource = w.m.resource;
            e.master = self_;
            e.request_id = w.m.request_id;
            e.since = w.since;
            e.order = order++;
            if (!(e.holder == e.waiter)) out.push_back(e);
        }
    }
    // Who really holds this node's cached locks that someone waits for (a
    // BAST came): their local users (deadlock.hpp, through_cached_locks).
    for (const ResourceName& r : cache_basts_) {
        for (uint32_t pid : local_users(r)) {
            WaitForEdge e;
            e.waiter = node_owner(self_);
            e.holder = Owner{self_, pid};
            e.resource = r;
            e.master = self_;
            e.request_id = 1;  // names no request: use edges are never victims
            out.push_back(e);
        }
    }
    return out;
}

void Worker::deadlock_tick(int64_t now) {
    const int64_t tau = deadlock_timeout_us();
    if (!replaying_ && now - last_wait_check_ >= std::min(kWaitCheckUs, tau)) {
        last_wait_check_ = now;
        std::optional<int64_t> oldest = table_.oldest_wait_since();
        for (const CachedConversion& w : local_waiters_)
            if (!oldest || w.since < *oldest) oldest = w.since;
        if (oldest && now - *oldest >= tau && now - last_hint_ >= tau) {
            last_hint_ = now;
            hint_coordinator(now - *oldest);
        }
    }
    if (!is_coordinator()) {
        round_.finish();
        hinted_ = false;
        return;
    }
    if (round_.active() && now - round_.started() > tau) {
        std::string who;
        for (const DeadlockRound::Source& s : round_.missing())
            who += " " + std::to_string(s.node) + "/" + std::to_string(s.worker);
        log(WorkerLogLevel::Debug, "GES deadlock search: round " + std::to_string(round_.id()) +
                                       " incomplete after " + std::to_string(tau / 1000) +
                                       " ms (no answer from node/LMS" + who + "); dropped");
        round_.finish();
    }
    if (!round_.active() && hinted_ && now - last_round_ >= tau) start_round(now, tau);
}

void Worker::hint_coordinator(int64_t age) {
    const uint16_t coordinator = deadlock_coordinator(live_);
    if (coordinator == self_ && index_ == 0) {
        hinted_ = true;
        return;
    }
    GesMessage h;
    h.type = GesMsgType::WaitHint;
    h.worker = static_cast<uint16_t>(index_);
    h.wait_ms = static_cast<uint32_t>(std::min<int64_t>(age / 1000, UINT32_MAX));
    std::vector<uint8_t> body;
    if (encode_ges_message(h, &body) == GesWireError::None)
        host_.send(coordinator, GesChannel::Deadlock, 0, std::move(body));
}

void Worker::start_round(int64_t now, int64_t tau) {
    round_id_ = std::max(static_cast<uint64_t>(now), round_id_ + 1);
    const uint32_t n_lms = std::max<uint32_t>(1, host_.n_lms());
    std::vector<DeadlockRound::Source> expected;
    for (uint16_t n : live_)
        for (uint32_t w = 0; w < n_lms; w++) expected.push_back({n, static_cast<uint16_t>(w)});
    round_.start(round_id_, expected, now);
    hinted_ = false;
    last_round_ = now;
    GesMessage rq;
    rq.type = GesMsgType::EdgesRequest;
    rq.round = round_id_;
    rq.wait_ms = static_cast<uint32_t>(tau / 1000);
    std::vector<uint8_t> body;
    if (encode_ges_message(rq, &body) != GesWireError::None) {
        round_.finish();
        return;
    }
    for (const DeadlockRound::Source& s : expected) {
        if (s.node == self_ && s.worker == index_)
            round_.add(self_, s.worker, round_id_, true, replaying_, old_edges(now, tau));
        else
            host_.send(s.node, GesChannel::Deadlock, s.worker, body);
    }
    maybe_decide(now);
}

void Worker::on_deadlock(uint16_t src, const GesMessage& m, int64_t now) {
    switch (m.type) {
        case GesMsgType::WaitHint:
            if (is_coordinator()) hinted_ = true;
            return;
        case GesMsgType::EdgesRequest: {
            const int64_t min_wait = static_cast<int64_t>(m.wait_ms) * 1000;
            for (std::vector<uint8_t>& body : encode_edges_messages(
                     m.round, static_cast<uint16_t>(index_), old_edges(now, min_wait), replaying_))
                host_.send(src, GesChannel::Deadlock, 0, std::move(body));
            return;
        }
        case GesMsgType::Edges:
            round_.add(src, m.worker, m.round, (m.flags & kEdgesLast) != 0,
                       (m.flags & kEdgesIncomplete) != 0, m.edges);
            maybe_decide(now);
            return;
        default:
            log(WorkerLogLevel::Log, std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                         " in the deadlock search, from node " +
                                         std::to_string(src));
    }
}

void Worker::maybe_decide(int64_t now) {
    if (!round_.complete()) return;
    const int64_t tau = deadlock_timeout_us();
    const int64_t took = now - round_.started();
    if (round_.spoiled() || took > tau) {
        // Snapshots further apart than tau, or a table being rebuilt:
        // a cycle in them might not have existed at any one moment.
        log(WorkerLogLevel::Debug,
            "GES deadlock search: round " + std::to_string(round_.id()) +
                (round_.spoiled() ? " spoiled (a table is replaying)" : " took too long") +
                "; dropped");
        round_.finish();
        return;
    }
    const size_t n_edges = round_.edges().size();
    const std::vector<WaitForEdge> victims =
        find_deadlock_victims(through_cached_locks(round_.edges()));
    log(WorkerLogLevel::Debug, "GES deadlock search: round " + std::to_string(round_.id()) + ": " +
                                   std::to_string(n_edges) + " old wait-for edges, " +
                                   std::to_string(victims.size()) + " cycle(s), " +
                                   std::to_string(took) + " us");
    round_.finish();
    const uint32_t n_lms = std::max<uint32_t>(1, host_.n_lms());
    for (const WaitForEdge& v : victims) {
        host_.count(WorkerCounter::ClusterDeadlocks);
        log(WorkerLogLevel::Log,
            "GES: deadlock across instances or LMS workers: cancelling the "
            "request of node " +
                std::to_string(v.waiter.node) + " pid " + std::to_string(v.waiter.proc) +
                " for \"" + v.resource.to_string() + "\" (mastered on node " +
                std::to_string(v.master) + ")");
        GesMessage c;
        c.type = GesMsgType::Cancel;
        c.owner = v.waiter;
        c.resource = v.resource;
        c.request_id = v.request_id;
        c.reason = DenyReason::Deadlock;
        c.epoch = epoch_;
        if (v.master == self_ && worker_for(v.resource, n_lms) == index_) {
            on_master(self_, c, now);
            continue;
        }
        std::vector<uint8_t> body;
        if (encode_ges_message(c, &body) == GesWireError::None)
            host_.send(v.master, GesChannel::Master, route_key_for(v.resource), std::move(body));
    }
}

// ---- client side: from this node's backends

void Worker::on_client(const GesMessage& m, int64_t now) {
    const Key k{m.resource, m.owner};
    if (!member_ && (m.type == GesMsgType::Request || m.type == GesMsgType::Convert)) {
        // Not a member with a lease (joining, fenced, no quorum): refuse at once.
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::NoQuorum);
        return;
    }
    switch (m.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert: {
            if (m.type == GesMsgType::Request && (m.flags & kDirect) != 0) {
                register_direct(m, now);
                return;
            }
            // The backend resends a request after a restart of this worker
            // (the old process may have taken it unrecorded): one we have
            // is not new; a grant of it that never reached the slot is
            // delivered again.
            auto have = registry_.find(m.owner, m.resource);
            auto d = direct_.find(k);
            if (have && have->request_id == m.request_id && d != direct_.end() &&
                d->second == m.request_id && have->state == LockState::Waiting) {
                // A direct request the master did not serve (or whose RPC
                // failed): it goes the usual way now, its slot closed to the
                // backend's own completion first.
                direct_.erase(d);
                uint64_t token = 0;
                LockValue value;
                if (host_.settle_direct(m.owner.proc, m.request_id, &token, &value)) {
                    adopt_direct_grant(m.owner, m.resource, m.request_id, token, value, now);
                    return;
                }
                to_master(m, now);
                return;
            }
            if (have && have->request_id == m.request_id) {
                if (have->state == LockState::Granted) {
                    auto t = held_tokens_.find(k);
                    host_.deliver_grant(m.owner.proc, m.request_id,
                                        t != held_tokens_.end() ? t->second : 0, have->value);
                }
                return;
            }
            // A backend sends Convert only for a lock it took from the
            // node's cache (a conversion the cache could not make).
            if (m.type == GesMsgType::Convert) {
                if (conversions_.count(k) == 0) convert_cached(m, now);
                return;
            }
            drop_stale_entry(m, now);
            // A new request that the node's cache can serve (the backend
            // missed it by a moment), or will once the Transfer's grant is back.
            if (!registry_.find(m.owner, m.resource) && serve_from_cache(m, now)) return;
            direct_request(m, now);
            return;
        }
        case GesMsgType::CacheNotify:
            cache_look(m.resource, now);
            return;
        case GesMsgType::Grant:
        case GesMsgType::Deny: {
            // The master's answer to a direct request, relayed by the backend
            // that got it in its RPC's reply: taken as that master's reply,
            // for a request registered here (docs/ges.md, "Direct routing").
            if ((m.request_id & kInternalRequestId) != 0 || m.owner.proc == kNodeOwnerProc) return;
            auto e = registry_.find(m.owner, m.resource);
            if (!e) {
                // Its registration was dropped (the node fenced, a restart that
                // voided the shard): a grant the backend took is void; its slot
                // is freed and the lock given back.
                uint64_t token = 0;
                LockValue value;
                if (m.type == GesMsgType::Grant &&
                    host_.settle_direct(m.owner.proc, m.request_id, &token, &value))
                    undo(m.owner, m.resource, now, m.request_id);
                return;
            }
            if (e->request_id != m.request_id || e->state != LockState::Waiting) return;
            direct_.erase(k);
            on_reply(master_for(m.resource, masters_), m, now);
            return;
        }
        case GesMsgType::Release:
            direct_.erase(k);
            if (keep_in_cache(m.owner, m.resource, m.value, now)) return;
            basted_.erase(k);
            early_basts_.erase(k);
            registry_.on_released(m.owner, m.resource);
            held_tokens_.erase(k);
            cancelling_.erase(k);
            orphans_.erase(k);
            sync(m.owner, m.resource);
            to_master(m, now);
            return;
        case GesMsgType::ReleaseAll:
            erase_owner(&direct_, m.owner);
            for (auto it = early_answers_.begin(); it != early_answers_.end();)
                it = it->first.owner == m.owner &&
                             released_by_bound(it->second.second.request_id, m.request_id)
                         ? early_answers_.erase(it)
                         : std::next(it);
            release_owner(m.owner, now, m.request_id);
            return;
        case GesMsgType::Cancel: {
            if (cancel_after_transfer(m) || cancel_local_wait(m, now)) return;
            auto cv = conversions_.find(k);
            if (cv != conversions_.end() &&
                (m.request_id == 0 || cv->second.m.request_id == m.request_id)) {
                const uint64_t id = cv->second.m.request_id;
                conversions_.erase(cv);
                mark_converting(m.resource);
                cache_look(m.resource, now);
                host_.deliver_denial(m.owner.proc, id, m.reason);
                return;
            }
            auto e = registry_.find(m.owner, m.resource);
            if (!e || e->state == LockState::Granted ||
                (m.request_id != 0 && e->request_id != m.request_id))
                return;  // already answered: the backend handles the outcome
            // A down-conversion is granted at once and its backend takes it
            // as made: it is never withdrawn.
            if (e->state == LockState::Converting &&
                mode_at_most(e->requested_mode, e->granted_mode))
                return;
            const LockMode prior =
                e->state == LockState::Converting ? e->granted_mode : LockMode::NL;
            // A direct request (its slot was open to the backend): its grant
            // may have gone into an RPC reply nobody read, so the master is
            // asked to release a grant of it too (Withdraw).
            auto d = direct_.find(k);
            const bool withdraw = d != direct_.end() && d->second == e->request_id;
            if (d != direct_.end()) direct_.erase(d);
            registry_.on_denied(m.owner, m.resource, e->request_id);
            sync(m.owner, m.resource);
            cancelling_[k] = Undo{e->request_id, prior, withdraw};
            GesMessage c = m;
            c.request_id = e->request_id;
            if (withdraw) c.type = GesMsgType::Withdraw;
            to_master(c, now);
            return;
        }
        default:
            log(WorkerLogLevel::Log,
                std::string("GES: unexpected ") + ges_msg_type_name(m.type) + " from a backend");
    }
}

// ---- master side

void Worker::on_master(uint16_t src, const GesMessage& m, int64_t now) {
    if (!epoch_ok(src, m, false, now)) return;
    if (!std::binary_search(live_.begin(), live_.end(), src)) {
        refuse_source(src, m, "the node is not a member of this epoch");
        return;
    }
    // The master acts on the authenticated source, not on the body: an
    // owner is always a backend of the node that sends for it (a deadlock
    // victim's cancel comes from the search's coordinator).
    switch (m.type) {  // mastership that follows use: between the home and the new master
        case GesMsgType::HandOff:
            on_hand_off(src, m, now);
            return;
        case GesMsgType::HandOffAck: {
            auto h = handed_off_.find(m.resource);
            if (h == handed_off_.end() || h->second != src) return;
            unacked_.erase(m.resource);
            // Everything src sent here about the resource before its ack is
            // forwarded back to it already (same lanes): it may go local now.
            GesMessage d;
            d.type = GesMsgType::Drained;
            d.epoch = epoch_;
            d.resource = m.resource;
            std::vector<uint8_t> body;
            if (encode_ges_message(d, &body) == GesWireError::None)
                host_.send(src, GesChannel::Master, route_key_for(m.resource), std::move(body));
            return;
        }
        case GesMsgType::Drained: {
            if (src != master_for(m.resource, masters_) || !hosted(m.resource)) return;
            drained_.insert(m.resource);
            hosted_since_ms_.erase(m.resource);
            auto q = undrained_.find(m.resource);
            if (q == undrained_.end()) return;
            std::vector<GesMessage> kept = std::move(q->second);
            undrained_.erase(q);
            for (const GesMessage& k : kept) on_master(self_, k, now);
            return;
        }
        case GesMsgType::Forwarded:
            on_forwarded(src, m, now);
            return;
        default:
            break;
    }
    const bool coordinator_cancel =
        m.type == GesMsgType::Cancel && m.reason == DenyReason::Deadlock;
    const bool replay = m.type == GesMsgType::Replay || m.type == GesMsgType::ReplayDone;
    if (!replay && m.owner.node != src && !coordinator_cancel) {
        refuse_source(src, m, "it names an owner of another node");
        return;
    }
    // A deadlock victim waiting in this node for a local user of a cached
    // lock (its edge named this node as the master): withdrawn here.
    if (coordinator_cancel && m.owner.node == self_ && cancel_local_wait(m, now)) return;
    if (!replay) note_owner_id(src, m);
    if (!replay && m.type != GesMsgType::ReleaseAll && !hosted(m.resource)) {
        if (master_for(m.resource, masters_) != self_) {
            refuse_source(src, m, "this node is not the resource's master in this epoch");
            return;
        }
        // The home master: it may hand the resource over, and forwards
        // whatever still comes for one it handed over.
        if ((m.type == GesMsgType::Request || m.type == GesMsgType::Convert) &&
            handed_off_.count(m.resource) == 0)
            note_use(m.resource, src, now);
        auto h = handed_off_.find(m.resource);
        if (h != handed_off_.end()) {
            if (forwardable(m.type)) forward(src, h->second, m);
            return;
        }
    }
    Events ev;
    switch (m.type) {
        case GesMsgType::Request:
        case GesMsgType::Convert: {
            // The owner's lock here came from a later request of the same
            // session (direct routing: by the requester lane, ahead of this
            // one on the LMS path): this one was given up (a cancel follows).
            // The same request again (an RPC that failed, sent again through
            // the LMS) is not a new one: a grant of it is sent again.
            LockState st;
            uint64_t gid = 0, rid = 0;
            if ((m.request_id & kInternalRequestId) == 0 &&
                table_.lock_ids(m.owner, m.resource, &st, &gid, &rid)) {
                auto same_session_after = [&](uint64_t id) {
                    return (id & kInternalRequestId) == 0 && (id >> 32) == (m.request_id >> 32) &&
                           (id & 0xffffffffu) > (m.request_id & 0xffffffffu);
                };
                if (same_session_after(gid) || same_session_after(rid)) return;
                if (m.type == GesMsgType::Request && rid == m.request_id) {
                    if (st == LockState::Granted && gid == m.request_id)
                        dispatch(table_.regrant(m.owner, m.resource), now);
                    return;
                }
            }
            LockRequest rq;
            rq.owner = m.owner;
            rq.resource = m.resource;
            rq.mode = m.mode;
            rq.request_id = m.request_id;
            rq.flags = static_cast<uint8_t>(m.flags & kKnownEntryFlags);
            rq.now = now;
            rq.deadline = m.timeout_ms ? now + static_cast<int64_t>(m.timeout_ms) * 1000 : 0;
            rq.value = m.value;
            ev = m.type == GesMsgType::Request ? table_.request(rq) : table_.convert(rq);
            break;
        }
        case GesMsgType::Release:
            tokens_.erase(Key{m.resource, m.owner});
            ev = table_.release(m.owner, m.resource, now, m.value);
            break;
        case GesMsgType::ReleaseAll:
            ev = table_.release_all(m.owner, now, m.request_id);
            for (auto it = tokens_.begin(); it != tokens_.end();)
                it = it->first.owner == m.owner && !table_.has_lock(m.owner, it->first.resource)
                         ? tokens_.erase(it)
                         : std::next(it);
            break;
        case GesMsgType::Withdraw:
            ev = table_.withdraw_request(m.owner, m.resource, m.request_id, now);
            if (!table_.has_lock(m.owner, m.resource)) tokens_.erase(Key{m.resource, m.owner});
            break;
        case GesMsgType::Cancel:
            ev = table_.cancel(m.owner, m.resource, m.request_id, m.reason, now);
            break;
        case GesMsgType::Transfer: {
            const Owner to{m.owner.node, m.to_proc};
            bool moved = false;
            ev = table_.transfer(m.owner, to, m.resource, m.request_id, now, &moved, m.value);
            auto t = tokens_.find(Key{m.resource, m.owner});
            if (t != tokens_.end()) {
                if (moved) tokens_[Key{m.resource, to}] = t->second;
                tokens_.erase(Key{m.resource, m.owner});
            }
            break;
        }
        case GesMsgType::Replay: {
            // The whole batch or nothing: the entries of one sender, of
            // resources this worker masters in the epoch, before its marker.
            const uint32_t n_lms = std::max<uint32_t>(1, host_.n_lms());
            const char* why = nullptr;
            for (const ReplayEntry& e : m.entries) {
                if (e.owner.node != src)
                    why = "a replayed lock names an owner of another node";
                else if (master_for(e.resource, masters_) != self_)
                    why = "a replayed lock is not mastered here in this epoch";
                else if (worker_for(e.resource, n_lms) != index_)
                    why = "a replayed lock is of another LMS worker's shard";
                if (why != nullptr) break;
            }
            ReplaySource& s = replay_[src];  // src is a member (checked above)
            if (why == nullptr && s.done) why = "it came after the sender's replay marker";
            if (why != nullptr) {
                refuse_replay(src, m, why);
                return;
            }
            const uint64_t conflicts = table_.replay_conflicts();
            ev = table_.ingest_replay(m.entries, now);
            if (table_.replay_conflicts() != conflicts) report_replay_conflict(src, m);
            for (const ReplayEntry& e : m.entries)
                if (e.state != LockState::Waiting && e.token != 0)
                    tokens_[Key{e.resource, e.owner}] = e.token;
            s.entries += m.entries.size();
            break;
        }
        case GesMsgType::ReplayDone:
            on_replay_done(src, m);
            break;
        default:
            log(WorkerLogLevel::Log, std::string("GES: unexpected ") + ges_msg_type_name(m.type) +
                                         " from node " + std::to_string(src));
            return;
    }
    dispatch(ev, now);
    maybe_end_replay(now);
    count_value_invalidations();
}

// Two members replayed grants that conflict: a double grant happened
// before (it must not). Said loudly; the table keeps both, so that
// neither is granted anything more until one releases.
void Worker::report_replay_conflict(uint16_t src, const GesMessage& m) {
    host_.count(WorkerCounter::ReplayConflicts);
    std::string text = "GES (LMS " + std::to_string(index_) + "): epoch " + std::to_string(epoch_) +
                       ": a lock replayed by node " + std::to_string(src) +
                       " conflicts with a granted one (" + std::to_string(m.entries.size()) +
                       " entries in the batch)";
    log(WorkerLogLevel::Warning, text);
    host_.record_error(ErrorType::ReplayConflict, Severity::Error, src, text);
}

// ---- client side: from masters

void Worker::on_reply(uint16_t src, const GesMessage& m, int64_t now) {
    if (!epoch_ok(src, m, true, now)) return;
    const uint16_t home = master_for(m.resource, masters_);
    if (m.type == GesMsgType::Moved) {
        // The resource's home handed it to src, which answers us from now on.
        if (src == home || src == self_ ||
            !std::binary_search(masters_.begin(), masters_.end(), src)) {
            refuse_source(src, m, "it cannot have been handed this resource");
            return;
        }
        moved_[m.resource] = src;
        host_.note_moved(m.resource);
        return;
    }
    // Replies only from the node that masters the resource in this epoch:
    // its home, or the node its home handed it to (which said so first).
    if (!answers_for(src, m.resource) || m.owner.node != self_) {
        refuse_source(src, m, "it is not the resource's master in this epoch");
        return;
    }
    const Key k{m.resource, m.owner};
    if (m.type == GesMsgType::Bast) {
        bast_count_++;
        host_.count(WorkerCounter::BastsReceived);
        cache_bast(m, now);
        return;
    }
    auto c = cancelling_.find(k);
    const bool cancelled = c != cancelling_.end() && c->second.request_id == m.request_id;
    const bool withdrawn = cancelled && c->second.withdrawn;
    if (cancelled) cancelling_.erase(c);
    auto e = registry_.find(m.owner, m.resource);
    if (m.type == GesMsgType::Grant) {
        if (withdrawn) return;  // the Withdraw releases it at the master
        if (cancelled) {
            // Granted before the cancel reached the master: give it back,
            // unless a newer request of the owner is already on its way
            // (the master treats that one as a conversion of this grant).
            if (e && e->state != LockState::Granted)
                orphans_[k] = LockMode::NL;
            else
                undo(m.owner, m.resource, now, m.request_id);
            return;
        }
        if (!e && keep_early_answer(src, m)) return;  // its direct request's registration follows
        if (!e || (e->state != LockState::Granted && e->request_id != m.request_id)) {
            // A grant nobody waits for (the backend ended, its request was
            // dropped): give it back, or the lock would leak.
            if (!e) undo(m.owner, m.resource, now, m.request_id);
            return;
        }
        if (e->state == LockState::Granted) return;  // a duplicate
        const LockMode prior = e->state == LockState::Converting ? e->granted_mode : LockMode::NL;
        registry_.on_granted(m.owner, m.resource, m.request_id, now, m.value);
        orphans_.erase(k);
        // A BAST about this very grant may have come first (a resource handed
        // to a new master answers on another lane than its home did).
        auto early = early_basts_.find(k);
        if (early != early_basts_.end() && early->second == m.request_id)
            basted_.insert(k);
        else
            basted_.erase(k);
        if (early != early_basts_.end()) early_basts_.erase(early);
        held_tokens_[k] = m.token;
        sync(m.owner, m.resource);  // before the backend may act on it
        if (m.owner.proc == kNodeOwnerProc) {
            cache_granted(m.resource, m.mode, m.token, m.value, now);
            return;
        }
        // (The LMS's own requests, to undo or give back, have no waiter.) A
        // down-conversion nobody waits for any more is kept: its backend took
        // it as made when it stopped waiting (lock_client.cpp).
        if (!(m.request_id & kInternalRequestId) &&
            !host_.deliver_grant(m.owner.proc, m.request_id, m.token, m.value) &&
            !(prior != LockMode::NL && mode_at_most(m.mode, prior)))
            give_back(m.owner, m.resource, prior, now, m.request_id);
    } else if (m.type == GesMsgType::Deny) {
        if (cancelled) return;
        if (!e && keep_early_answer(src, m)) return;
        registry_.on_denied(m.owner, m.resource, m.request_id);
        sync(m.owner, m.resource);
        auto o = orphans_.find(k);
        if (o != orphans_.end()) {
            orphans_.erase(o);
            undo(m.owner, m.resource, now);
        }
        host_.deliver_denial(m.owner.proc, m.request_id, m.reason);
    }
}
// Rows of this worker's table for the view, with each holder's token.
uint64_t Worker::token_of(const LockRow& r) const {
    auto t = tokens_.find(Key{r.name, Owner{r.owner_node, r.proc}});
    return t == tokens_.end() ? 0 : t->second;
}

// The backend stopped waiting before the grant reached it (its slot was
// no longer waiting: timeout, cancel, exit): it believes it holds `prior`
// (NL: nothing). Bring the registry and the master back to that.
void Worker::give_back(Owner o, const ResourceName& r, LockMode prior, int64_t now,
                       uint64_t grant_id) {
    host_.count(WorkerCounter::LateGrantsUndone);
    const Key k{r, o};
    GesMessage m;
    m.owner = o;
    m.resource = r;
    if (prior == LockMode::NL) {
        registry_.on_released(o, r);
        held_tokens_.erase(k);
        m.type = grant_id != 0 ? GesMsgType::Withdraw : GesMsgType::Release;
        m.request_id = grant_id;
    } else {
        m.type = GesMsgType::Request;  // a down-conversion: granted at once
        m.mode = prior;
        m.request_id = kInternalRequestId | next_internal_id_++;
        registry_.on_request(o, r, prior, m.request_id, 0, now);
    }
    sync(o, r);
    to_master(m, now);
}

// The master holds a lock the owner does not believe in: bring the
// master back to what the registry (= the backend) believes.
void Worker::undo(Owner o, const ResourceName& r, int64_t now, uint64_t grant_id) {
    host_.count(WorkerCounter::LateGrantsUndone);
    GesMessage m;
    m.owner = o;
    m.resource = r;
    auto e = registry_.find(o, r);
    if (!e) {
        m.type = grant_id != 0 ? GesMsgType::Withdraw : GesMsgType::Release;
        m.request_id = grant_id;
    } else {
        m.type = GesMsgType::Request;
        m.mode = e->granted_mode;
        m.request_id = kInternalRequestId | next_internal_id_++;
    }
    to_master(m, now);
}

// Outside an epoch nothing is sent: the registry holds the request, and
// the next epoch's replay carries it to the master.
void Worker::to_master(const GesMessage& msg, int64_t now) {
    if (epoch_ == 0) return;
    GesMessage m = msg;
    m.epoch = epoch_;
    if (hosted(m.resource) && drained_.count(m.resource) == 0) {
        // Mastered here, but this node's earlier messages about it may still
        // be on their way through the home: kept until its Drained.
        undrained_[m.resource].push_back(m);
        return;
    }
    const uint16_t master = master_of(m.resource);
    if (master == self_) {
        on_master(self_, m, now);
        return;
    }
    std::vector<uint8_t> body;
    if (encode_ges_message(m, &body) == GesWireError::None)
        host_.send(master, GesChannel::Master, route_key_for(m.resource), std::move(body));
}

// Each grant gets a fencing token: the epoch in the high 32 bits, then a
// counter of this worker's grants in the epoch, then kCacheTokenBits zero
// bits that number the local takes of the lock once the node caches it.
// One master per resource and epoch, and epochs only grow: so a resource's
// tokens grow strictly across the cluster (docs/ges.md, "Fencing tokens").
void Worker::dispatch(const Events& ev, int64_t now, Capture* capture) {
    for (const Event& e : ev) {
        GesMessage r = message_for_event(e);
        r.epoch = epoch_;
        if (e.type == EventType::Granted) {
            if (grant_epoch_ != epoch_) {
                grant_epoch_ = epoch_;
                grant_seq_ = 0;
            }
            r.token = (static_cast<uint64_t>(epoch_) << 32) |
                      (static_cast<uint64_t>(++grant_seq_) << kCacheTokenBits);
            // Far from wrapping (2^24 grants of one worker in one epoch),
            // ask for a new epoch: tokens must only grow.
            if (grant_seq_ == (1u << (31 - kCacheTokenBits))) host_.request_new_epoch();
            tokens_[Key{e.resource, e.owner}] = r.token;
        }
        if (capture != nullptr && !capture->got && e.owner == capture->owner &&
            e.request_id == capture->request_id &&
            (e.type == EventType::Granted || e.type == EventType::Denied)) {
            capture->answer = r;  // goes back in the direct request's reply
            capture->got = true;
            continue;
        }
        if (e.owner.node == self_) {
            on_reply(self_, r, now);
            continue;
        }
        if (hosted(e.resource) && told_[e.resource].insert(e.owner.node).second) {
            // Before the first answer there (same lane, so it arrives first).
            GesMessage mv;
            mv.type = GesMsgType::Moved;
            mv.epoch = epoch_;
            mv.resource = e.resource;
            std::vector<uint8_t> mb;
            if (encode_ges_message(mv, &mb) == GesWireError::None)
                host_.send(e.owner.node, GesChannel::Reply, route_key_for(e.resource),
                           std::move(mb));
        }
        std::vector<uint8_t> body;
        if (encode_ges_message(r, &body) == GesWireError::None)
            host_.send(e.owner.node, GesChannel::Reply, route_key_for(e.resource), std::move(body));
    }
}

void Worker::handle(WorkerRole role, uint16_t src, const uint8_t* body, size_t len, int64_t now) {
    GesMessage m;
    const GesWireError we = decode_ges_message(body, len, &m);
    if (we != GesWireError::None) {
        log(WorkerLogLevel::Log, std::string("GES: malformed message from node ") +
                                     std::to_string(src) + ": " + ges_wire_error_name(we));
        return;
    }
    check_membership(now);
    switch (role) {
        case WorkerRole::Client:
            if (src == self_) on_client(m, now);
            break;
        case WorkerRole::Master:
            on_master(src, m, now);
            break;
        case WorkerRole::Reply:
            on_reply(src, m, now);
            break;
        case WorkerRole::Deadlock:
            on_deadlock(src, m, now);
            break;
    }
    run_hand_offs(now);
}

// ---- node-level caching (docs/ges.md, "Node-level caching")
//
// A backend's last release of a granted lock keeps it on this node: the
// lock becomes the node owner's (proc 0) at the master (Transfer: same
// mode, place and token) and an entry of the shared-memory cache, from which
// backends take it again without a message. A BAST marks the entry (no new
// take) and, once its users are gone, the lock goes back (Release of the node
// owner). Only this worker inserts, frees and evicts its partitions' entries.

bool Worker::cache_on() const {
    NodeCache* c = host_.node_cache();
    return c != nullptr && c->enabled() && member_ && epoch_ != 0;
}

// The backend `o` releases r. True if the lock is kept for the node: the
// registry forgets o's lock and records a request of the node owner, and the
// master renames o's lock the node owner's (Transfer) and answers with a
// grant to it (a new token). Only that grant makes the cache entry usable: a
// Transfer lost with a session leaves nothing usable (the node owner's request
// is replayed in the next epoch like any waiting request).
bool Worker::keep_in_cache(Owner o, const ResourceName& r, const LockValue& value, int64_t now) {
    if (!cache_on() || o.proc == kNodeOwnerProc) return false;
    const Key k{r, o};
    const Owner node = node_owner(self_);
    auto e = registry_.find(o, r);
    auto t = held_tokens_.find(k);
    if (!e || e->state != LockState::Granted || (e->request_id & kInternalRequestId) ||
        t == held_tokens_.end() || t->second == 0 || basted_.count(k) != 0 ||
        cancelling_.count(k) != 0 || orphans_.count(k) != 0 || registry_.find(node, r))
        return false;
    const LockMode mode = e->granted_mode;
    const uint64_t id = kInternalRequestId | next_internal_id_++;
    registry_.on_released(o, r);
    held_tokens_.erase(k);
    sync(o, r);
    registry_.on_request(node, r, mode, id, 0, now);
    sync(node, r);
    host_.count(WorkerCounter::CacheTransfers);
    GesMessage tr;
    tr.type = GesMsgType::Transfer;
    tr.owner = o;
    tr.to_proc = kNodeOwnerProc;
    tr.request_id = id;
    tr.resource = r;
    tr.value = value;  // a PW/EX holder's write: the master's grant brings it back
    to_master(tr, now);
    return true;
}

// The master granted the node owner r (a Transfer's answer, or a replayed
// request of it): the lock enters the cache, unless a BAST already asks for it
// back or there is no room.
void Worker::cache_granted(const ResourceName& r, LockMode mode, uint64_t token,
                           const LockValue& value, int64_t now) {
    NodeCache* c = host_.node_cache();
    const bool basted = pending_basts_.erase(r) != 0;
    bool kept = false;
    std::optional<ResourceName> evicted;
    LockValue evicted_value;
    if (cache_on() && !basted) {
        const uint32_t part = c->partition_of(r, index_);
        host_.lock_cache_partition(part);
        CacheEntry* x = c->find(part, r);
        if (x != nullptr && (x->fences != fences_seen_ || x->shard_fences != shard_fences_seen_)) {
            c->erase(part, x);  // void (its users' holds are too): made again below
            x = nullptr;
        }
        if (x != nullptr) {
            // The node owner granted again while its entry lives (a replay):
            // the entry, and what its users wrote in it, stay.
            kept = true;
        } else {
            x = c->insert(part, r);
            if (x == nullptr) {
                if (CacheEntry* v = c->victim(part)) {
                    evicted = v->resource;
                    evicted_value = v->value;
                    c->erase(part, v);
                    x = c->insert(part, r);
                }
            }
            if (x != nullptr) {
                x->mode = static_cast<uint8_t>(mode);
                x->fences = fences_seen_;
                x->shard_fences = shard_fences_seen_;
                x->grant_token = token;
                x->next_token = token + 1;
                x->token_end = (token | (kCacheTokenRange - 1)) + 1;
                x->value = value;
                x->state = kCacheCached;
                kept = true;
            }
        }
        host_.unlock_cache_partition(part);
    }
    if (evicted) {
        host_.count(WorkerCounter::CacheEvictions);
        release_node_lock(*evicted, now, evicted_value);
    }
    if (!kept) {
        if (basted) host_.count(WorkerCounter::CacheGiveBacks);
        release_node_lock(r, now);
    }
    serve_after_transfer(r, now);
}

// The node owner's lock of r goes back to the master, with the value its
// local users left (a PW/EX lock's; the master ignores the rest).
void Worker::release_node_lock(const ResourceName& r, int64_t now, const LockValue& value) {
    const Owner node = node_owner(self_);
    cache_basts_.erase(r);
    if (!registry_.find(node, r)) return;
    registry_.on_released(node, r);
    held_tokens_.erase(Key{r, node});
    sync(node, r);
    GesMessage rel;
    rel.type = GesMsgType::Release;
    rel.owner = node;
    rel.resource = r;
    rel.value = value;
    to_master(rel, now);
}

// The value block of r's cache entry (None: no entry).
LockValue Worker::cached_value(const ResourceName& r) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return LockValue{};
    const uint32_t part = c->partition_of(r, index_);
    LockValue v;
    host_.lock_cache_partition(part);
    if (const CacheEntry* x = c->find(part, r)) v = x->value;
    host_.unlock_cache_partition(part);
    return v;
}

// Frees r's entry if nobody uses it and no conversion waits on it. True if
// freed (the node owner's lock must then go back, with *value).
bool Worker::free_unused_entry(const ResourceName& r, LockValue* value) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return false;
    const uint32_t part = c->partition_of(r, index_);
    bool freed = false;
    host_.lock_cache_partition(part);
    CacheEntry* x = c->find(part, r);
    if (x != nullptr && cache_users(*x) == 0 && x->converting == 0) {
        *value = x->value;
        c->erase(part, x);
        freed = true;
    }
    host_.unlock_cache_partition(part);
    return freed;
}

// Marks r's entry while a local conversion waits on it (no new take), and
// unmarks it when none does.
void Worker::mark_converting(const ResourceName& r) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return;
    auto it = conversions_.lower_bound(Key{r, Owner{0, 0}});
    const bool waits = it != conversions_.end() && it->first.resource == r;
    const uint32_t part = c->partition_of(r, index_);
    host_.lock_cache_partition(part);
    if (CacheEntry* x = c->find(part, r)) x->converting = waits ? 1 : 0;
    host_.unlock_cache_partition(part);
}

// The node owner's lock of r goes back to the master if the cache has it
// and nobody uses it.
void Worker::give_back_cached(const ResourceName& r, int64_t now) {
    auto e = registry_.find(node_owner(self_), r);
    if (!e || e->state != LockState::Granted) return;
    LockValue value;
    if (!free_unused_entry(r, &value)) return;
    release_node_lock(r, now, value);
    flush_local_waiters(r, now);  // (their users just left: they go to the master)
}

// A BAST: for the node owner's cached lock, or for a backend's lock that
// was (or is being) moved into the cache. No new local take from now on;
// back as soon as the local users are done.
void Worker::cache_bast(const GesMessage& m, int64_t now) {
#ifdef PGRAC_MUTANT_KEEP_AFTER_BAST
    // A deliberate bug for tests/mutants/run.sh: the cached lock is kept.
    (void)m;
    (void)now;
    return;
#endif
    const Owner node = node_owner(self_);
    auto held = registry_.find(node, m.resource);
    if (!held) {
        // A backend's own lock: when it releases, the lock goes back, not
        // into the cache (someone waits for it).
        if (m.owner.proc != kNodeOwnerProc) {
            const Key k{m.resource, m.owner};
            basted_.insert(k);
            auto e = registry_.find(m.owner, m.resource);
            // Before its grant (or, for a direct request, before its
            // registration): kept for that grant.
            if (!e || (e->state != LockState::Granted && e->request_id == m.request_id))
                early_basts_[k] = m.request_id;
        }
        return;
    }
    if (held->state != LockState::Granted) {
        // The Transfer's grant is on its way: the lock goes back as it comes.
        pending_basts_.insert(m.resource);
        return;
    }
    NodeCache* c = host_.node_cache();
    bool marked = false;
    if (c != nullptr && c->enabled()) {
        const uint32_t part = c->partition_of(m.resource, index_);
        host_.lock_cache_partition(part);
        if (CacheEntry* x = c->find(part, m.resource)) {
            x->bast = static_cast<uint8_t>(1 + static_cast<uint8_t>(m.mode));
            marked = true;
        }
        host_.unlock_cache_partition(part);
    }
    if (!marked) {  // granted to the node but not in the cache: back at once
        host_.count(WorkerCounter::CacheGiveBacks);
        release_node_lock(m.resource, now);
        return;
    }
    cache_basts_.insert(m.resource);
    // Its local waiters go to the master, behind whoever caused the BAST.
    flush_local_waiters(m.resource, now);
    cache_look(m.resource, now);
}

// The users of r's cached lock changed (a backend's notice, a cancel, the
// tick): act on a BAST or a waiting conversion that can go on now.
void Worker::cache_look(const ResourceName& r, int64_t now) {
    // A conversion of a cached lock waits until its backend is the only user.
    std::vector<std::pair<Owner, int64_t>> waiting;
    for (auto it = conversions_.lower_bound(Key{r, Owner{0, 0}});
         it != conversions_.end() && it->first.resource == r; ++it) {
        const GesMessage m = it->second.m;
        if (convert_cached_now(m, now)) {
            conversions_.erase(Key{r, m.owner});
            mark_converting(r);
            return;  // the entry is gone: any other conversion waits at the master now
        }
        waiting.emplace_back(m.owner, it->second.since);
    }
    if (waiting.size() >= 2) {
        // Every user waits to convert and none is alone: each waits for the
        // others (the conversion deadlock of two readers that both want to
        // write). The youngest gives way, as in the lock table.
        NodeCache* c = host_.node_cache();
        const uint32_t part = c->partition_of(r, index_);
        host_.lock_cache_partition(part);
        CacheEntry* x = c->find(part, r);
        const uint32_t users = x != nullptr ? cache_users(*x) : 0;
        host_.unlock_cache_partition(part);
        if (users == waiting.size()) {
            auto youngest =
                std::max_element(waiting.begin(), waiting.end(), [](const auto& a, const auto& b) {
                    return a.second != b.second ? a.second < b.second : a.first < b.first;
                });
            auto v = conversions_.find(Key{r, youngest->first});
            const uint64_t id = v->second.m.request_id;
            conversions_.erase(v);
            host_.deliver_denial(youngest->first.proc, id, DenyReason::Deadlock);
            mark_converting(r);
        }
    }
    if (has_local_waiters(r)) serve_local_waiters(r, now);
    if (cache_basts_.count(r) != 0) {
        const Owner node = node_owner(self_);
        if (!registry_.find(node, r)) {
            cache_basts_.erase(r);
            return;
        }
        const size_t before = cache_basts_.size();
        give_back_cached(r, now);
        if (cache_basts_.size() != before) host_.count(WorkerCounter::CacheGiveBacks);
    }
}

// A backend whose lock of r came from the cache asks for a mode the cache
// could not give it. Once it is the only local user, the lock becomes its own
// again at the master (Transfer back), and the conversion goes on as any.
void Worker::convert_cached(const GesMessage& m, int64_t now) {
    if (!member_) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::NoQuorum);
        return;
    }
    if (convert_cached_now(m, now)) return;
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !registry_.find(node_owner(self_), m.resource)) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::NotHeld);
        return;
    }
    if (m.flags & kNoWait) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::NoWait);
        return;
    }
    const int64_t deadline = m.timeout_ms ? now + static_cast<int64_t>(m.timeout_ms) * 1000 : 0;
    conversions_[Key{m.resource, m.owner}] = CachedConversion{m, deadline, now};
    mark_converting(m.resource);
    cache_look(m.resource, now);  // all users converting: one gives way
}

// True if the conversion was started (or answered): the backend was the only
// user of the cached lock, which is now its own lock at the master again.
bool Worker::convert_cached_now(const GesMessage& m, int64_t now) {
    NodeCache* c = host_.node_cache();
    const Owner node = node_owner(self_);
    auto held = registry_.find(node, m.resource);
    if (c == nullptr || !c->enabled() || !held) return false;
    const uint32_t part = c->partition_of(m.resource, index_);
    bool sole = false;
    LockValue value;
    host_.lock_cache_partition(part);
    CacheEntry* x = c->find(part, m.resource);
    if (x != nullptr && cache_users(*x) == 1) {
        value = x->value;
        c->erase(part, x);
        sole = true;
    }
    host_.unlock_cache_partition(part);
    if (!sole) return false;
    host_.count(WorkerCounter::CacheConversions);
    cache_basts_.erase(m.resource);
    const Key nk{m.resource, node};
    const uint64_t token = held_tokens_.count(nk) ? held_tokens_[nk] : 0;
    const LockMode mode = held->granted_mode;
    // The node owner's lock is the backend's again (Transfer back) ...
    registry_.on_released(node, m.resource);
    held_tokens_.erase(nk);
    sync(node, m.resource);
    const uint64_t gid = kInternalRequestId | next_internal_id_++;
    registry_.on_request(m.owner, m.resource, mode, gid, 0, now);
    registry_.on_granted(m.owner, m.resource, gid, now, value);
    held_tokens_[Key{m.resource, m.owner}] = token;
    sync(m.owner, m.resource);
    GesMessage tr;
    tr.type = GesMsgType::Transfer;
    tr.owner = node;
    tr.to_proc = m.owner.proc;
    tr.request_id = 0;  // no answer: the backend's registry entry is granted already
    tr.resource = m.resource;
    tr.value = value;  // what the local users wrote goes to the master first
    to_master(tr, now);
    // ... and its conversion goes to the master like any (FIFO after the Transfer).
    GesMessage rq = m;
    rq.type = GesMsgType::Request;
    rq.flags = static_cast<uint8_t>(rq.flags & kKnownEntryFlags);
    if (!registry_.on_request(m.owner, m.resource, m.mode, m.request_id, rq.flags, now, m.value)) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::AlreadyPending);
    } else {
        sync(m.owner, m.resource);
        to_master(rq, now);
    }
    // The entry is gone: local waiters go to the master, behind the conversion.
    flush_local_waiters(m.resource, now);
    return true;
}

// Deadlines of conversions waiting locally; BASTs whose users' notices were
// lost (a full queue).
void Worker::cache_tick(int64_t now) {
    for (auto it = conversions_.begin(); it != conversions_.end();) {
        if (it->second.deadline != 0 && now >= it->second.deadline) {
            const GesMessage m = it->second.m;
            it = conversions_.erase(it);
            mark_converting(m.resource);
            host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::Timeout);
            continue;
        }
        ++it;
    }
    std::set<ResourceName> waited, expired;
    for (auto it = local_waiters_.begin(); it != local_waiters_.end();) {
        if (it->deadline != 0 && now >= it->deadline) {
            host_.deliver_denial(it->m.owner.proc, it->m.request_id, DenyReason::Timeout);
            expired.insert(it->m.resource);
            it = local_waiters_.erase(it);
            continue;
        }
        waited.insert(it->m.resource);
        ++it;
    }
    for (const ResourceName& r : expired) serve_local_waiters(r, now);  // (and the mark)
    // Requests kept for a Transfer's grant that has not come (lost with a
    // session: the node owner's request waits for the next epoch) go to the
    // master after kAfterTransferUs.
    std::set<ResourceName> late;
    for (const AfterTransfer& a : after_transfer_)
        if (now - a.since >= kAfterTransferUs) late.insert(a.m.resource);
    for (const ResourceName& r : late)
        for (const AfterTransfer& a : take_after_transfer(r)) direct_request(a.m, now);
    // (A backend's notice may have been lost to a full queue.)
    std::set<ResourceName> look(cache_basts_.begin(), cache_basts_.end());
    for (const auto& [k, c] : conversions_) look.insert(k.resource);
    look.insert(waited.begin(), waited.end());
    for (const ResourceName& r : look) cache_look(r, now);
}

// A backend's request that goes to the master as its own lock.
void Worker::direct_request(const GesMessage& m, int64_t now) {
    const Key k{m.resource, m.owner};
    if (!registry_.on_request(m.owner, m.resource, m.mode, m.request_id,
                              static_cast<uint8_t>(m.flags & kKnownEntryFlags), now, m.value)) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::AlreadyPending);
        return;
    }
    sync(m.owner, m.resource);
    basted_.erase(k);
    // It missed the node's cache: an unused cached lock goes back first (FIFO
    // to the same master), so that the request does not wait for a BAST to
    // this node.
    give_back_cached(m.resource, now);
    to_master(m, now);  // outside an epoch, the next epoch's replay carries it
}

// A new request of a backend served by the worker from the node's cache
// (a local take made for it: the token's low bits say so to the backend), or
// kept until the Transfer's grant comes. False: it goes to the master.
bool Worker::serve_from_cache(const GesMessage& m, int64_t now) {
    if (!cache_on()) return false;
    auto n = registry_.find(node_owner(self_), m.resource);
    if (!n) return false;
    if (n->state != LockState::Granted) {
        if (pending_basts_.count(m.resource) != 0) return false;  // going back
        after_transfer_.push_back(AfterTransfer{m, now});
        return true;
    }
    // A local user's mode, or local waiters ahead (the entry's mark), is all
    // that stands in the way: it waits here, behind them (FIFO). A mode the
    // cached lock does not cover goes to the master.
    const CacheMiss miss = take_for(m);
    if (miss == CacheMiss::LocalConflict) return wait_locally(m, now);
    return miss == CacheMiss::None;
}

CacheMiss Worker::take_for(const GesMessage& m, bool queue_head) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return CacheMiss::NotCached;
    const uint32_t part = c->partition_of(m.resource, index_);
    uint64_t token = 0;
    LockValue value;
    host_.lock_cache_partition(part);
    CacheEntry* x = c->find(part, m.resource);
    const CacheMiss miss = x == nullptr ? CacheMiss::NotCached
                                        : cache_take(*x, m.mode, LockMode::NL, fences_seen_,
                                                     shard_fences_seen_, &token, queue_head);
    if (miss == CacheMiss::None) value = x->value;
    host_.unlock_cache_partition(part);
    if (miss != CacheMiss::None) return miss;
    if (!host_.deliver_grant(m.owner.proc, m.request_id, token, value)) {
        // Nobody waits any more: the use ends at once. (Only this worker
        // frees the entry, and not while it has a user.)
        host_.lock_cache_partition(part);
        if (CacheEntry* y = c->find(part, m.resource)) cache_drop(*y, m.mode);
        host_.unlock_cache_partition(part);
    }
    return CacheMiss::None;
}

// The Transfer's grant came (or will not): the requests kept for it are
// served from the cache (or wait for a local user), or go to the master.
void Worker::serve_after_transfer(const ResourceName& r, int64_t now) {
    for (const AfterTransfer& a : take_after_transfer(r))
        if (!serve_from_cache(a.m, now)) direct_request(a.m, now);
}

// ---- local waiters (docs/ges.md, "Local waiters")
//
// A new request that the node's cached lock covers but a local user's mode
// blocks waits here, not at the master: no message, and the next local user
// is served from the cache when the blocking ones are done (a backend's
// CacheNotify, as for a BAST). FIFO: while any waits, no new take (local or
// here) goes ahead of it. A BAST ends it: the waiters go to the master, behind
// the remote waiter, and the entry takes no one new, so a remote waiter waits
// at most for the local users of the moment.

std::vector<LockRow> Worker::snapshot() const {
    std::vector<LockRow> rows = table_.snapshot();
    for (const CachedConversion& w : local_waiters_) {
        LockRow row;
        row.name = w.m.resource;
        row.resource = w.m.resource.to_string();
        row.master = master_of(w.m.resource);
        row.owner_node = w.m.owner.node;
        row.proc = w.m.owner.proc;
        row.mode = w.m.mode;
        row.state = LockState::Waiting;
        row.since = w.since;
        row.request_id = w.m.request_id;
        row.local = true;
        rows.push_back(std::move(row));
    }
    return rows;
}

bool Worker::has_local_waiters(const ResourceName& r) const {
    for (const CachedConversion& w : local_waiters_)
        if (w.m.resource == r) return true;
    return false;
}

bool Worker::wait_locally(const GesMessage& m, int64_t now) {
    if (m.flags & kNoWait) {  // in use here, in a conflicting mode: not grantable now
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::NoWait);
        return true;
    }
    bool stale = false;
    for (auto it = local_waiters_.begin(); it != local_waiters_.end(); ++it) {
        if (!(it->m.owner == m.owner && it->m.resource == m.resource)) continue;
        if (it->m.request_id == m.request_id) return true;  // a copy (a resend)
        // An older request of the owner: its backend stopped waiting for it
        // (its Cancel lost) or is gone (a new session in its slot).
        local_waiters_.erase(it);
        stale = true;
        break;
    }
    const int64_t deadline = m.timeout_ms ? now + static_cast<int64_t>(m.timeout_ms) * 1000 : 0;
    local_waiters_.push_back(CachedConversion{m, deadline, now});
    host_.count(WorkerCounter::LocalWaits);
    if (stale)
        serve_local_waiters(m.resource, now);  // those behind the stale one may go now
    else
        mark_waiting(m.resource);
    return true;
}

// The local users of r changed: its waiters are served from the cache in
// order, as far as their modes allow; if the entry can serve no one any more
// (a BAST, a conversion, fenced, gone), they go to the master.
void Worker::serve_local_waiters(const ResourceName& r, int64_t now) {
    for (auto it = local_waiters_.begin(); it != local_waiters_.end();) {
        if (!(it->m.resource == r)) {
            ++it;
            continue;
        }
        const CacheMiss miss = take_for(it->m, true);
        if (miss == CacheMiss::None) {
            it = local_waiters_.erase(it);
            continue;
        }
        if (miss != CacheMiss::LocalConflict) {
            flush_local_waiters(r, now);
            return;
        }
        break;  // the first still blocked: the rest wait behind it
    }
    mark_waiting(r);
}

void Worker::flush_local_waiters(const ResourceName& r, int64_t now) {
    std::vector<GesMessage> out;
    for (auto it = local_waiters_.begin(); it != local_waiters_.end();) {
        if (it->m.resource == r) {
            out.push_back(it->m);
            it = local_waiters_.erase(it);
        } else {
            ++it;
        }
    }
    mark_waiting(r);
    for (const GesMessage& m : out) direct_request(m, now);
}

bool Worker::cancel_local_wait(const GesMessage& m, int64_t now) {
    for (auto it = local_waiters_.begin(); it != local_waiters_.end(); ++it) {
        if (it->m.resource == m.resource && it->m.owner == m.owner &&
            (m.request_id == 0 || it->m.request_id == m.request_id)) {
            const uint64_t id = it->m.request_id;
            local_waiters_.erase(it);
            host_.deliver_denial(m.owner.proc, id, m.reason);
            serve_local_waiters(m.resource, now);  // the next may go now
            return true;
        }
    }
    return false;
}

// Marks r's entry while local requests wait for it (no new take ahead of
// them, and a dropped use tells this worker).
void Worker::mark_waiting(const ResourceName& r) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return;
    const bool waits = has_local_waiters(r);
    const uint32_t part = c->partition_of(r, index_);
    host_.lock_cache_partition(part);
    if (CacheEntry* x = c->find(part, r)) x->waiting = waits ? 1 : 0;
    host_.unlock_cache_partition(part);
}

// The requests kept for r's Transfer, in arrival order, out of the list.
std::vector<Worker::AfterTransfer> Worker::take_after_transfer(const ResourceName& r) {
    std::vector<AfterTransfer> mine;
    for (auto it = after_transfer_.begin(); it != after_transfer_.end();) {
        if (it->m.resource == r) {
            mine.push_back(*it);
            it = after_transfer_.erase(it);
        } else {
            ++it;
        }
    }
    return mine;
}

bool Worker::cancel_after_transfer(const GesMessage& m) {
    for (auto it = after_transfer_.begin(); it != after_transfer_.end(); ++it) {
        if (it->m.resource == m.resource && it->m.owner == m.owner &&
            (m.request_id == 0 || it->m.request_id == m.request_id)) {
            const uint64_t id = it->m.request_id;
            after_transfer_.erase(it);
            host_.deliver_denial(m.owner.proc, id, m.reason);
            return true;
        }
    }
    return false;
}

// ---- mastership that follows use (docs/ges.md, "Mastership that follows use")
//
// Within an epoch a resource's home master (master_for) may hand its whole
// table to the node that sends most of its requests: it exports the
// resource (its locks, queues, value, tokens and its grant count as a floor
// for the new master's tokens) in one HandOff and from then on forwards
// whatever still comes for it, on the same lane, so after the HandOff. The new
// master tells each node, before its first answer there, that it masters
// the resource now (Moved); that node then sends it the resource's messages
// itself. A hand-off not acknowledged within two peer timeouts (a lost
// HandOff: the locks would be nowhere) asks for a new epoch, which rebuilds
// every table from the nodes' registries at the home masters, as every epoch
// does: mastership that followed use never outlives its epoch.

// Where this node sends its own messages about r. Only through the home
// (which forwards them) unless this node is the home, or masters r (and then,
// until the home's Drained says its earlier ones are back, to_master keeps
// them): each node's messages about a resource take one path at a time, so
// they arrive in the order they were sent (a Release that took the long way
// must not overtake, nor be overtaken by, a newer request of its owner).
uint16_t Worker::master_of(const ResourceName& r) const {
    if (hosted(r)) return self_;  // (to_master keeps them until Drained)
    auto h = handed_off_.find(r);
    if (h != handed_off_.end()) return h->second;
    return master_for(r, masters_);
}

// Whether src may answer about r: its home, the node it was handed to
// (which said so with Moved), or this node if it masters it.
bool Worker::answers_for(uint16_t src, const ResourceName& r) const {
    if (src == master_for(r, masters_)) return true;
    if (hosted(r)) return src == self_;
    auto h = handed_off_.find(r);
    if (h != handed_off_.end()) return src == h->second;
    auto m = moved_.find(r);
    return m != moved_.end() && m->second == src;
}

// A request for r from src at r's home: after remaster_window() of them,
// the resource goes to the node that sent at least 40 % of them if this node
// sent under 20 %.
void Worker::note_use(const ResourceName& r, uint16_t src, int64_t now) {
    const uint32_t window = host_.remaster_window();
    if (window == 0 || replaying_) return;
    if (use_.size() > 65536) use_.clear();  // bounded: a window starts again
    Use& u = use_[r];
    u.total++;
    if (src == self_) {
        u.local++;
    } else {
        for (int k = 0; k < 4; ++k) {
            if (u.node[k] == src || u.node[k] == 0) {
                u.node[k] = src;
                u.count[k]++;
                break;
            }
        }
    }
    if (u.total < window) return;
    const Use seen = u;
    use_.erase(r);
    // Bounded: this many hand-offs per worker and epoch at most.
    if (handed_off_.size() + due_hand_offs_.size() >= kMaxHandOffs) return;
    int top = 0;
    for (int k = 1; k < 4; ++k)
        if (seen.count[k] > seen.count[top]) top = k;
    const uint16_t to = seen.node[top];
    if (to == 0 || seen.count[top] * 5 < seen.total * 2 || seen.local * 5 >= seen.total ||
        !std::binary_search(masters_.begin(), masters_.end(), to))
        return;
    // Made once the current message is done (run_hand_offs): in the middle of
    // it, a grant being dispatched could still take a token after the one
    // the hand-off gives the new master as its floor.
    (void)now;
    due_hand_offs_.emplace_back(r, to);
}

void Worker::run_hand_offs(int64_t now) {
    std::vector<std::pair<ResourceName, uint16_t>> due;
    due.swap(due_hand_offs_);
    for (const auto& [r, to] : due)
        if (epoch_ != 0 && !replaying_ && handed_off_.count(r) == 0 && !hosted(r) &&
            master_for(r, masters_) == self_ &&
            std::binary_search(masters_.begin(), masters_.end(), to))
            hand_off(r, to, now);
}

void Worker::hand_off(const ResourceName& r, uint16_t to, int64_t now) {
    (void)now;
    LockTable::ResourceState st;
    if (table_.locks_on(r) > kMaxReplayEntries || !table_.export_resource(r, &st)) return;
    GesMessage h;
    h.type = GesMsgType::HandOff;
    h.epoch = epoch_;
    h.resource = r;
    h.value = st.value;
    h.grant_seq = grant_epoch_ == epoch_ ? grant_seq_ : 0;
    for (ReplayEntry e : st.entries) {
        auto t = tokens_.find(Key{r, e.owner});
        if (e.state != LockState::Waiting && t != tokens_.end()) e.token = t->second;
        h.entries.push_back(e);
    }
    std::vector<uint8_t> body;
    if (encode_ges_message(h, &body) != GesWireError::None) {
        Events ev;  // cannot happen (the table's entries encode): keep it here
        table_.import_resource(r, st, now, &ev);
        dispatch(ev, now);
        return;
    }
    for (auto t = tokens_.lower_bound(Key{r, Owner{0, 0}});
         t != tokens_.end() && t->first.resource == r;)
        t = tokens_.erase(t);
    handed_off_[r] = to;
    unacked_[r] = host_.lease_clock_ms() +
                  2 * static_cast<uint64_t>(std::max<int64_t>(1, host_.peer_timeout_ms()));
    host_.send(to, GesChannel::Master, route_key_for(r), std::move(body));
    host_.count(WorkerCounter::Remasters);
    log(WorkerLogLevel::Debug, "GES (LMS " + std::to_string(index_) + "): \"" + r.to_string() +
                                   "\" handed to node " + std::to_string(to) + " with " +
                                   std::to_string(st.entries.size()) + " locks");
}

void Worker::on_hand_off(uint16_t src, const GesMessage& m, int64_t now) {
    const uint32_t n_lms = std::max<uint32_t>(1, host_.n_lms());
    if (src == self_ || src != master_for(m.resource, masters_) ||
        worker_for(m.resource, n_lms) != index_ || hosted(m.resource)) {
        refuse_source(src, m, "it is not the resource's home master, or the resource is here");
        return;
    }
    LockTable::ResourceState st;
    st.entries = m.entries;
    st.value = m.value;
    Events ev;
    if (!table_.import_resource(m.resource, st, now, &ev)) {
        // Two tables for one resource: let a new epoch rebuild it.
        log(WorkerLogLevel::Warning, "GES (LMS " + std::to_string(index_) + "): \"" +
                                         m.resource.to_string() + "\" handed here by node " +
                                         std::to_string(src) +
                                         " is in this table already; asking for a new epoch");
        host_.request_new_epoch();
        return;
    }
    hosted_.insert(m.resource);
    host_.note_moved(m.resource);
    hosted_since_ms_[m.resource] = host_.lease_clock_ms();
    for (const ReplayEntry& e : m.entries)
        if (e.state != LockState::Waiting && e.token != 0)
            tokens_[Key{m.resource, e.owner}] = e.token;
    // Tokens must keep growing: this worker's next grants count on from the home's.
    if (grant_epoch_ != epoch_) {
        grant_epoch_ = epoch_;
        grant_seq_ = 0;
    }
    grant_seq_ = std::max(grant_seq_, m.grant_seq);
    GesMessage ack;
    ack.type = GesMsgType::HandOffAck;
    ack.epoch = epoch_;
    ack.resource = m.resource;
    std::vector<uint8_t> body;
    if (encode_ges_message(ack, &body) == GesWireError::None)
        host_.send(src, GesChannel::Master, route_key_for(m.resource), std::move(body));
    dispatch(ev, now);
}

// The home forwards a message of node `src` for a resource it handed to `to`.
void Worker::forward(uint16_t src, uint16_t to, const GesMessage& m) {
    GesMessage f;
    f.type = GesMsgType::Forwarded;
    f.epoch = m.epoch;
    f.origin = src;
    if (encode_ges_message(m, &f.inner) != GesWireError::None) return;
    std::vector<uint8_t> body;
    if (encode_ges_message(f, &body) == GesWireError::None)
        host_.send(to, GesChannel::Master, route_key_for(m.resource), std::move(body));
}

void Worker::on_forwarded(uint16_t src, const GesMessage& m, int64_t now) {
    GesMessage in;
    if (decode_ges_message(m.inner.data(), m.inner.size(), &in) != GesWireError::None) return;
    if (src != master_for(in.resource, masters_) || !hosted(in.resource)) {
        // Not (or no longer) mastered here: dropped. The sender's registry
        // still has it, and the home asks for a new epoch (which replays it)
        // if its hand-off went unacknowledged.
        log(WorkerLogLevel::Debug, std::string("GES: forwarded ") + ges_msg_type_name(in.type) +
                                       " for \"" + in.resource.to_string() + "\" from node " +
                                       std::to_string(src) + " dropped: not mastered here");
        return;
    }
    on_master(m.origin, in, now);
}

void Worker::remaster_tick() {
    if (unacked_.empty() && hosted_since_ms_.empty()) return;
    const uint64_t now_ms = host_.lease_clock_ms();
    const uint64_t bound = 2 * static_cast<uint64_t>(std::max<int64_t>(1, host_.peer_timeout_ms()));
    bool overdue = false;
    for (auto it = hosted_since_ms_.begin(); it != hosted_since_ms_.end();) {
        if (now_ms - it->second < bound) {
            ++it;
            continue;
        }
        overdue = true;  // no Drained: this node's own messages about it wait
        host_.count(WorkerCounter::RemasterTimeouts);
        log(WorkerLogLevel::Warning, "GES (LMS " + std::to_string(index_) + "): no Drained for \"" +
                                         it->first.to_string() +
                                         "\" from its home; asking for a new epoch");
        it = hosted_since_ms_.erase(it);
    }
    for (auto it = unacked_.begin(); it != unacked_.end();) {
        if (now_ms < it->second) {
            ++it;
            continue;
        }
        overdue = true;
        host_.count(WorkerCounter::RemasterTimeouts);
        log(WorkerLogLevel::Warning, "GES (LMS " + std::to_string(index_) +
                                         "): the hand-off of \"" + it->first.to_string() +
                                         "\" to node " + std::to_string(handed_off_[it->first]) +
                                         " was not acknowledged; asking for a new epoch");
        it = unacked_.erase(it);
    }
    if (overdue) host_.request_new_epoch();
}

void Worker::clear_remastering() {
    host_.clear_moved();
    use_.clear();
    early_basts_.clear();
    drained_.clear();
    undrained_.clear();  // the registry has what they were about: the replay carries it
    hosted_since_ms_.clear();
    due_hand_offs_.clear();
    handed_off_.clear();
    unacked_.clear();
    hosted_.clear();
    told_.clear();
    moved_.clear();
}

// The node was fenced or this worker restarted: every entry of its
// partitions is void (their users learn it from the fence counts).
// Calls fn(partition, entry) for every cached entry of this worker's
// partitions, each partition locked around it.
template <typename Fn>
void Worker::each_cached_entry(Fn fn) {
    NodeCache* c = host_.node_cache();
    if (c == nullptr || !c->enabled()) return;
    for (uint32_t p = 0; p < kCachePartsPerWorker; ++p) {
        const uint32_t part = index_ * kCachePartsPerWorker + p;
        if (part >= c->partitions()) break;
        host_.lock_cache_partition(part);
        const uint32_t base = part * c->entries_per_partition();
        for (uint32_t i = 0; i < c->entries_per_partition(); ++i) {
            CacheEntry* x = c->at(base + i);
            if (x != nullptr && x->state == kCacheCached) fn(part, x);
        }
        host_.unlock_cache_partition(part);
    }
}

// No local request waits in this process (a restart): no entry of its
// partitions says one does.
void Worker::clear_waiting_marks() {
    each_cached_entry([](uint32_t, CacheEntry* x) { x->waiting = 0; });
}

void Worker::clear_cache() {
    cache_basts_.clear();
    pending_basts_.clear();
    NodeCache* c = host_.node_cache();
    each_cached_entry([c](uint32_t part, CacheEntry* x) { c->erase(part, x); });
}

// ---- direct routing (docs/ges.md, "Direct routing")
//
// A backend sends a new request for a resource mastered on another node to
// that node's LMS itself, on its requester lane, and registers it with its own
// LMS (Request flagged kDirect) at the same time. The master answers in the
// RPC's reply: a grant the backend may take itself if this worker opened its
// slot for it (mark_direct: registered in the epoch the backend sent it in),
// and then relays to this worker, which records it (the registry learns of a
// grant before or as its backend uses it; an epoch change in between settles
// the slot: settle_direct). Everything later (a grant after a wait, a denial,
// BASTs) comes the usual way.

// Why the master does not serve this direct request (nullptr: it does).
const char* Worker::direct_refusal(uint16_t src, const GesMessage& m) const {
    if (!member_ || epoch_ == 0 || replaying_) return "this worker is not serving";
    if (m.epoch != epoch_) return "of another epoch";
    if (!std::binary_search(live_.begin(), live_.end(), src) || src == self_ ||
        m.owner.node != src || (m.request_id & kInternalRequestId) != 0 ||
        m.owner.proc == kNodeOwnerProc)
        return "wrong source";
    if (master_for(m.resource, masters_) != self_ || hosted(m.resource) ||
        handed_off_.count(m.resource) != 0)
        return "not the resource's home master now";
    if (owner_ids_full_) return "too many owners in this epoch";
    auto o = owner_ids_.find(m.owner);
    // A later message of the owner came first (the cancel of this very
    // request, say): this one is stale.
    if (o != owner_ids_.end() && m.request_id <= o->second) return "stale";
    // The owner's earlier message about the resource (a release, a cancel)
    // is still on its way through its LMS: the request must go after it.
    if (table_.has_lock(m.owner, m.resource)) return "busy";
    return nullptr;
}

// The highest request id of each owner, whichever path it came by (a
// ReleaseAll ends the owner: no direct request of it is served any more in
// this epoch).
void Worker::note_owner_id(uint16_t src, const GesMessage& m) {
    (void)src;
    uint64_t id = m.request_id;
    if (m.type == GesMsgType::ReleaseAll)
        id = id != 0 ? id : UINT64_MAX;  // bound: requests after it may still come
    else if ((m.type != GesMsgType::Request && m.type != GesMsgType::Convert &&
              m.type != GesMsgType::Cancel && m.type != GesMsgType::Withdraw) ||
             id == 0 || (id & kInternalRequestId) != 0)
        return;
    auto it = owner_ids_.find(m.owner);
    if (it != owner_ids_.end()) {
        it->second = std::max(it->second, id);
        return;
    }
    if (owner_ids_.size() >= kMaxDirectOwners) {
        if (!owner_ids_full_)
            log(WorkerLogLevel::Log, "GES (LMS " + std::to_string(index_) +
                                         "): " + std::to_string(kMaxDirectOwners) +
                                         " owners in epoch " + std::to_string(epoch_) +
                                         "; direct requests go through their LMS until the next");
        owner_ids_full_ = true;
        return;
    }
    owner_ids_.emplace(m.owner, id);
}

std::vector<uint8_t> Worker::handle_direct(uint16_t src, const uint8_t* body, size_t len,
                                           int64_t now) {
    GesMessage m;
    if (decode_ges_message(body, len, &m) != GesWireError::None || m.type != GesMsgType::Request ||
        (m.flags & kDirect) == 0)
        return {};
    check_membership(now);
    GesMessage a;
    a.epoch = epoch_;
    a.owner = m.owner;
    a.resource = m.resource;
    a.mode = m.mode;
    a.request_id = m.request_id;
    const char* why = direct_refusal(src, m);
    if (why != nullptr) {
        if (std::string(why) == "wrong source") refuse_source(src, m, "a direct request");
        host_.count(WorkerCounter::DirectRedirected);
        a.type = GesMsgType::Deny;
        a.reason = DenyReason::Redirect;
    } else {
        host_.count(WorkerCounter::DirectServed);
        note_owner_id(src, m);
        note_use(m.resource, src, now);
        LockRequest rq;
        rq.owner = m.owner;
        rq.resource = m.resource;
        rq.mode = m.mode;
        rq.request_id = m.request_id;
        rq.flags = static_cast<uint8_t>(m.flags & ~kDirect);
        rq.now = now;
        rq.deadline = m.timeout_ms ? now + static_cast<int64_t>(m.timeout_ms) * 1000 : 0;
        rq.value = m.value;
        Capture c;
        c.owner = m.owner;
        c.request_id = m.request_id;
        dispatch(table_.request(rq), now, &c);
        count_value_invalidations();
        if (c.got)
            a = c.answer;
        else
            a.type = GesMsgType::Queued;
    }
    run_hand_offs(now);
    std::vector<uint8_t> out;
    if (encode_ges_message(a, &out) != GesWireError::None) out.clear();
    return out;
}

// Client side: a backend's direct request, registered as any request; the
// slot is opened for the backend's own completion when the backend sent it
// in this worker's epoch to the master this worker would have sent it to.
// Otherwise it goes to the master from here as well (the master refuses the
// direct copy, or serves it in a table that is gone).
void Worker::register_direct(const GesMessage& m, int64_t now) {
    GesMessage plain = m;
    plain.flags = static_cast<uint8_t>(m.flags & ~kDirect);
    const Key k{m.resource, m.owner};
    auto have = registry_.find(m.owner, m.resource);
    if (have && have->request_id == m.request_id) return;  // a copy
    drop_stale_entry(plain, now);
    if (!registry_.on_request(m.owner, m.resource, m.mode, m.request_id,
                              static_cast<uint8_t>(plain.flags & kKnownEntryFlags), now, m.value)) {
        host_.deliver_denial(m.owner.proc, m.request_id, DenyReason::AlreadyPending);
        return;
    }
    sync(m.owner, m.resource);
    basted_.erase(k);
    give_back_cached(m.resource, now);
    // The master's answer may have come first (through a peer lane, while
    // this registration waited in the listener): the master has the request,
    // so it is not sent again; the answer is handled now.
    auto early = early_answers_.find(k);
    if (early != early_answers_.end() && early->second.second.request_id == m.request_id) {
        const uint16_t src = early->second.first;
        const GesMessage answer = early->second.second;
        early_answers_.erase(early);
        on_reply(src, answer, now);
        return;
    }
    const uint16_t home = master_for(m.resource, masters_);
    if (epoch_ != 0 && m.epoch == epoch_ && home != self_ && master_of(m.resource) == home &&
        host_.mark_direct(m.owner.proc, m.request_id))
        direct_[k] = m.request_id;
    else
        to_master(plain, now);
}

// A master's answer for a local backend's request that this worker has not
// registered yet, while the backend's slot waits for exactly that request:
// its direct request's registration is still on its way here.
bool Worker::keep_early_answer(uint16_t src, const GesMessage& m) {
    if (m.owner.node != self_ || m.owner.proc == kNodeOwnerProc ||
        (m.request_id & kInternalRequestId) != 0 || early_answers_.size() >= kMaxEarlyAnswers ||
        !host_.slot_waits(m.owner.proc, m.request_id))
        return false;
    early_answers_[Key{m.resource, m.owner}] = {src, m};
    return true;
}

void Worker::adopt_direct_grant(Owner o, const ResourceName& r, uint64_t request_id, uint64_t token,
                                const LockValue& value, int64_t now) {
    const Key k{r, o};
    registry_.on_granted(o, r, request_id, now, value);
    orphans_.erase(k);
    auto early = early_basts_.find(k);
    if (early != early_basts_.end() && early->second == request_id)
        basted_.insert(k);
    else
        basted_.erase(k);
    if (early != early_basts_.end()) early_basts_.erase(early);
    held_tokens_[k] = token;
    sync(o, r);
}

// An epoch change (or a restart's first epoch): every waiting request of a
// backend here is settled against its slot. A grant the backend took itself
// becomes the registry's, so the replay carries it; a slot still open is
// closed, so that a grant of the old epoch is never taken (the replay carries
// the request to the new master, whose answer comes through this worker).
void Worker::settle_direct_requests(int64_t now) {
    std::vector<ReplayEntry> waiting;
    for (const ReplayEntry& e : registry_.locks())
        if (e.owner.node == self_ && e.state == LockState::Waiting &&
            e.owner.proc != kNodeOwnerProc && (e.request_id & kInternalRequestId) == 0)
            waiting.push_back(e);
    for (const ReplayEntry& e : waiting) {
        uint64_t token = 0;
        LockValue value;
        if (host_.settle_direct(e.owner.proc, e.request_id, &token, &value))
            adopt_direct_grant(e.owner, e.resource, e.request_id, token, value, now);
    }
    direct_.clear();
}

}  // namespace pgrac::ic::ges
