// libFuzzer target: arbitrary bytes, as a peer could send them, split into
// GES message bodies (a length byte pair before each), decoded, and every
// accepted message applied to a LockTable the way the LMS glue would.
//
// Besides memory errors it checks what must hold for any input: an accepted
// message re-encodes to exactly the bytes it came from (the encoding is
// canonical, so nothing in a message goes unchecked), it carries the epoch
// of its 8-byte version-2 header (bytes 4..7, little-endian) and a token
// only if it is a Grant, and the table stays consistent: its snapshot has
// one row per lock, every event names a valid mode, and no owner ever holds
// two locks on one resource. The messages of the cluster-wide deadlock
// search feed a DeadlockRound (Edges) and the victim search over the
// gathered edges: every victim must be one of them.
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

#include "ic/ges_lock_table.hpp"
#include "ic/ges_wire.hpp"

using namespace pgrac::ic::ges;

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
}

void check_events(const Events& ev) {
    for (const Event& e : ev) {
        check(lock_mode_valid(static_cast<uint8_t>(e.mode)));
        check(e.owner.node >= 1 && e.owner.node <= 64);
    }
}

void check_victims(const std::vector<WaitForEdge>& edges) {
    const std::vector<WaitForEdge> victims = find_deadlock_victims(edges);
    check(victims.size() <= edges.size());
    for (const WaitForEdge& v : victims) {
        bool found = false;
        for (const WaitForEdge& e : edges) found = found || e == v;
        check(found);
    }
}

void apply(LockTable& t, DeadlockRound& round, const GesMessage& m, int64_t now) {
    LockRequest rq;
    rq.owner = m.owner;
    rq.resource = m.resource;
    rq.mode = m.mode;
    rq.request_id = m.request_id;
    rq.flags = m.flags;
    rq.now = now;
    rq.deadline = m.timeout_ms == 0 ? 0 : now + m.timeout_ms % 16;
    switch (m.type) {
        case GesMsgType::Request:
            check_events(t.request(rq));
            break;
        case GesMsgType::Convert:
            check_events(t.convert(rq));
            break;
        case GesMsgType::Release:
            check_events(t.release(m.owner, m.resource, now));
            break;
        case GesMsgType::ReleaseAll:
            check_events(t.release_all(m.owner, now));
            break;
        case GesMsgType::Cancel:
            check_events(t.cancel(m.owner, m.resource, m.request_id, m.reason, now));
            break;
        case GesMsgType::Replay:
            check_events(t.ingest_replay(m.entries, now));
            break;
        case GesMsgType::Grant:
        case GesMsgType::Bast:
            check_events(t.expire(now));
            break;
        case GesMsgType::Deny:
            check_events(t.release_node(m.owner.node, now));
            break;
        case GesMsgType::WaitHint:
            check_victims(edges_waiting_at_least(t.wait_for_edges(), now, m.wait_ms % 8));
            break;
        case GesMsgType::EdgesRequest:
            round.start(m.round, {{1, 0}, {2, 0}, {2, 1}, {3, 0}}, now);
            break;
        case GesMsgType::Edges: {
            const uint16_t node = m.edges.empty() ? 1 : m.edges[0].master;
            round.add(node, m.worker, m.round, (m.flags & kEdgesLast) != 0,
                      (m.flags & kEdgesIncomplete) != 0, m.edges);
            check_victims(m.edges);
            if (round.complete()) {
                check(round.missing().empty());
                check_victims(round.edges());
                round.finish();
            }
            break;
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    LockTable table(1);
    DeadlockRound round;
    size_t pos = 0;
    int64_t now = 0;
    while (pos + 2 <= size) {
        const size_t n = std::min<size_t>(data[pos] | (data[pos + 1] << 8), size - pos - 2);
        const uint8_t* body = data + pos + 2;
        pos += 2 + n;

        GesMessage m;
        if (decode_ges_message(body, n, &m) != GesWireError::None) continue;
        check(n >= 8 && body[0] == kGesWireVersion);
        uint32_t epoch = 0;
        for (int i = 0; i < 4; ++i) epoch |= static_cast<uint32_t>(body[4 + i]) << (8 * i);
        check(m.epoch == epoch);
        check(m.type == GesMsgType::Grant || m.token == 0);  // Bast and the rest carry none
        std::vector<uint8_t> again;
        check(encode_ges_message(m, &again) == GesWireError::None);
        check(again.size() == n && std::memcmp(again.data(), body, n) == 0);
        apply(table, round, m, ++now);
    }
    check_events(table.end_replay(++now));
    check_events(table.detect_deadlocks(now));

    const std::vector<LockRow> rows = table.snapshot();
    check(rows.size() == table.lock_count());
    std::set<std::pair<std::string, std::pair<uint16_t, uint32_t>>> seen;
    for (const LockRow& r : rows) check(seen.insert({r.resource, {r.owner_node, r.proc}}).second);
    check(find_deadlock_victims(table.wait_for_edges()).empty());
    return 0;
}
