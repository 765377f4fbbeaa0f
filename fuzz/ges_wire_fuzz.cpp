// libFuzzer target: arbitrary bytes, as peers and backends could send them,
// fed to the real GES worker of node 1 in a 3-node cluster of real workers in
// memory (tests/unit/ges/worker_support.hpp: each worker over a fake host,
// messages routed between them as the interconnect would).
//
// Input: records of  u8 op | u16 length (little-endian) | body.
//   op bits 0-1: the handler it arrives at (client, master, reply, deadlock)
//   op bits 2-3: the authenticated source node (1, 2, 3, or 4: not a member)
//   op bit  4:   overwrite the body's epoch (bytes 4..7) with the committed one
//   op bits 5-7: what happens first: nothing; 1 ms and node 1 ticks; 400 ms and
//                every node ticks (deadlock rounds, the reaper); a new epoch;
//                a new epoch with node 3 out (or back); node 1's lease lapses;
//                node 1's LMS worker restarts; node 1's backends stop waiting.
// A client Request or Convert arms its backend's wait slot, as a backend does.
//
// Besides memory errors it checks what must hold for any input: an accepted
// body re-encodes to exactly its bytes (the encoding is canonical, so nothing
// in a message goes unchecked) and carries the epoch of its header and a
// token only if it is a Grant; every message a worker sends decodes, and a
// master or reply message carries an epoch no newer than the sender's
// committed one; each master's table has one row per owner and resource and,
// unless a replay conflict was reported, no two conflicting grants; the
// victims of accepted deadlock-search edges are among them.
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "ges/worker_support.hpp"

using namespace pgrac::ic;
using namespace pgrac::ic::ges;
using pgrac::ic::ges::testing::FakeHost;
using pgrac::ic::ges::testing::GesCluster;

namespace {

void check(bool ok) {
    if (!ok) __builtin_trap();
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

// What every worker queued: well-formed, and in an epoch it has seen.
void check_outgoing(GesCluster& c) {
    for (uint16_t n = 1; n <= c.size(); n++) {
        const uint32_t committed = c.host(n).committed_view().epoch;
        for (const auto& s : c.host(n).sent) {
            GesMessage m;
            check(decode_ges_message(s.body.data(), s.body.size(), &m) == GesWireError::None);
            if (s.channel != GesChannel::Deadlock) check(m.epoch != 0 && m.epoch <= committed);
        }
    }
}

// The committed view of every node, and a lease for each.
void commit(GesCluster& c, uint32_t* epoch, std::vector<uint16_t> members) {
    ++*epoch;
    for (uint16_t n = 1; n <= c.size(); n++) c.host(n).set_lease(kLeaseForever);
    c.commit_view(*epoch, std::move(members));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    GesCluster c(3, /*mirror_capacity=*/16);
    // Mastership that follows use as often as it can happen: hand-offs,
    // forwarding and Moved between the workers, whatever the input.
    for (uint16_t n = 1; n <= 3; n++) c.host(n).remaster = 2;
    uint32_t epoch = 9;
    bool three = true;
    commit(c, &epoch, {1, 2, 3});
    FakeHost& host = c.host(1);

    size_t pos = 0;
    while (pos + 3 <= size) {
        const uint8_t op = data[pos];
        const size_t n = std::min<size_t>(data[pos + 1] | (data[pos + 2] << 8), size - pos - 3);
        std::vector<uint8_t> body(data + pos + 3, data + pos + 3 + n);
        pos += 3 + n;

        switch (op >> 5) {
            case 1:
                c.advance_ms(1);
                c.tick(1);
                break;
            case 2:
                c.advance_ms(400);
                c.tick_all();
                break;
            case 3:
                commit(c, &epoch,
                       three ? std::vector<uint16_t>{1, 2, 3} : std::vector<uint16_t>{1, 2});
                break;
            case 4:
                three = !three;
                commit(c, &epoch,
                       three ? std::vector<uint16_t>{1, 2, 3} : std::vector<uint16_t>{1, 2});
                break;
            case 5:
                host.set_lease(host.now_ms);
                c.advance_ms(1);
                c.tick(1);
                break;
            case 6:
                c.node(1).restart(c.now());
                c.pump();
                break;
            case 7:
                host.waiting.clear();
                break;
        }

        GesMessage m;
        if (decode_ges_message(body.data(), body.size(), &m) == GesWireError::None) {
            check(body.size() >= 8 && body[0] == kGesWireVersion);
            uint32_t e = 0;
            for (int i = 0; i < 4; ++i) e |= static_cast<uint32_t>(body[4 + i]) << (8 * i);
            check(m.epoch == e);
            check(m.type == GesMsgType::Grant || m.token == 0);  // Bast and the rest carry none
            std::vector<uint8_t> again;
            check(encode_ges_message(m, &again) == GesWireError::None);
            check(again == body);
            if (m.type == GesMsgType::Edges) check_victims(m.edges);
        }
        if ((op & 0x10) && body.size() >= 8) {
            const uint32_t now_epoch = host.committed_view().epoch;
            for (int i = 0; i < 4; ++i) body[4 + i] = static_cast<uint8_t>(now_epoch >> (8 * i));
        }

        const auto role = static_cast<WorkerRole>(op & 3);
        const uint16_t src = static_cast<uint16_t>(1 + ((op >> 2) & 3));
        if (role == WorkerRole::Client && src == 1 &&
            decode_ges_message(body.data(), body.size(), &m) == GesWireError::None &&
            (m.type == GesMsgType::Request || m.type == GesMsgType::Convert))
            host.waiting.insert(m.request_id);
        check_outgoing(c);
        if (role == WorkerRole::Master &&
            decode_ges_message(body.data(), body.size(), &m) == GesWireError::None &&
            m.type == GesMsgType::Request && (m.flags & kDirect) != 0) {
            // A backend's direct request on its requester lane (docs/ges.md,
            // "Direct routing"): the answer goes back in the RPC's reply.
            const std::vector<uint8_t> answer =
                c.worker(1).handle_direct(src, body.data(), body.size(), c.now());
            check(!answer.empty());
            GesMessage a;
            check(decode_ges_message(answer.data(), answer.size(), &a) == GesWireError::None);
            check(a.type == GesMsgType::Grant || a.type == GesMsgType::Deny ||
                  a.type == GesMsgType::Queued);
            check(a.owner == m.owner && a.request_id == m.request_id && a.resource == m.resource);
            // Served only for an owner of the sending node, never for the node itself.
            check((a.type == GesMsgType::Deny && a.reason == DenyReason::Redirect) ||
                  (m.owner.node == src && src != 1));
        } else {
            c.worker(1).handle(role, src, body.data(), body.size(), c.now());
        }
        check_outgoing(c);
        c.pump();
        check(c.tables_consistent());
    }
    // Let every barrier, deadline and deadlock round run out.
    for (int i = 0; i < 5; i++) {
        c.advance_ms(400);
        c.tick_all();
        check(c.tables_consistent());
    }
    return 0;
}
