// The fixture of the engine tests: n engines on loopback, pumped together,
// and helpers to build streams and check what arrived.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/test_support.hpp"

namespace pgrac::ic::enginetest {

inline constexpr uint16_t kStreamType = 301;

inline std::vector<NodeAddress> loopback_nodes(int n, const char* host = "127.0.0.1") {
    std::vector<NodeAddress> v;
    std::set<uint16_t> used;
    for (int i = 1; i <= n; i++) {
        uint16_t port;
        do port = free_port(host);
        while (port == 0 || used.count(port) != 0);
        used.insert(port);
        v.push_back(NodeAddress{static_cast<uint16_t>(i), host, port});
    }
    return v;
}

// Now on the clock the requester lanes' deadlines are on, in ns.
inline uint64_t lane_now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count());
}

// An RPC request's payload for a requester lane: its MessageHeader (type,
// route key 7, rpc_id), then body.
inline std::vector<uint8_t> rpc_request(uint64_t rpc_id, const std::vector<uint8_t>& body,
                                        uint16_t type) {
    MessageHeader mh;
    mh.msg_type = type;
    mh.route_key = 7;
    mh.rpc_id = rpc_id;
    std::vector<uint8_t> p(kMessageHeaderSize + body.size());
    encode_message_header(mh, p.data());
    std::copy(body.begin(), body.end(), p.begin() + kMessageHeaderSize);
    return p;
}

inline std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
    std::vector<uint8_t> b(n);
    for (size_t i = 0; i < n; i++) b[i] = static_cast<uint8_t>(seed * 131 + i * 7 + (i >> 8));
    return b;
}

// Body of stream message i: u32 index, then filler.
inline std::vector<uint8_t> stream_body(uint32_t i, size_t filler = 16) {
    std::vector<uint8_t> b(4 + filler, static_cast<uint8_t>(i));
    std::memcpy(b.data(), &i, 4);
    return b;
}

inline uint32_t stream_index(const Received& r) {
    uint32_t i = ~0u;
    if (r.body.size() >= 4) std::memcpy(&i, r.body.data(), 4);
    return i;
}

// Indices of stream messages from `src` in the order the LMS role took them.
inline std::vector<uint32_t> stream_from(const TestNode& n, uint16_t src,
                                         uint16_t type = kStreamType) {
    std::vector<uint32_t> out;
    for (const Received& r : n.received)
        if (r.src == src && r.mh.msg_type == type) out.push_back(stream_index(r));
    return out;
}

inline std::vector<uint32_t> iota_vec(uint32_t n) {
    std::vector<uint32_t> v(n);
    for (uint32_t i = 0; i < n; i++) v[i] = i;
    return v;
}

class EngineTest : public ::testing::Test {
  protected:
    // Builds n nodes on loopback; tweak(cfg) may change each config first.
    void make(int n, const std::function<void(EngineConfig&)>& tweak = {},
              const SharedSizing& sizing = small_sizing()) {
        addrs_ = loopback_nodes(n);
        for (int i = 1; i <= n; i++) {
            EngineConfig c = make_config(static_cast<uint16_t>(i), addrs_);
            if (tweak) tweak(c);
            nodes_.push_back(std::make_unique<TestNode>(c, sizing));
        }
        for (auto& node : nodes_) {
            std::string err;
            ASSERT_TRUE(node->start(&err)) << err;
        }
    }
    TestNode& node(uint16_t id) { return *nodes_[id - 1]; }
    std::vector<TestNode*> all() {
        std::vector<TestNode*> v;
        for (auto& n : nodes_) v.push_back(n.get());
        return v;
    }
    bool pump(const std::function<bool()>& pred, milliseconds limit = kWait) {
        return pump_until(all(), pred, limit);
    }
    // Every pair UP with every lane up, on both sides.
    bool fully_up() {
        for (auto& a : nodes_)
            for (auto& b : nodes_) {
                if (a == b) continue;
                if (a->state_of(b->id()) != PeerState::Up) return false;
                if (load_relaxed(&a->peer(b->id()).lanes_up) != a->peer(b->id()).lanes_total)
                    return false;
            }
        return true;
    }
    // Every node a member of one committed view with all of them.
    bool one_view() {
        for (auto& a : nodes_) {
            const MembershipShared& m = a->shm()->membership;
            if (load_acquire(&m.state) != static_cast<uint32_t>(MemberState::Member)) return false;
            if (committed_view(&m).epoch != committed_view(&nodes_[0]->shm()->membership).epoch)
                return false;
            if (node_count(committed_view(&m).members) != static_cast<int>(nodes_.size()))
                return false;
        }
        return true;
    }
    void bring_up() {
        ASSERT_TRUE(pump([&] { return fully_up(); })) << "peers never came up";
        ASSERT_TRUE(pump([&] { return one_view(); })) << "no membership view formed" << [&] {
            std::string out;
            for (auto& a : nodes_) {
                const MembershipShared& m = a->shm()->membership;
                out += " node " + std::to_string(a->id()) + ": " +
                       member_state_name(static_cast<MemberState>(m.state)) + " committed " +
                       std::to_string(committed_view(&m).epoch) +
                       mask_text(committed_view(&m).members) + " accepted " +
                       std::to_string(m.accepted.epoch) + mask_text(m.accepted.members) +
                       " lease " + std::to_string(lease_expiry_ms(m.lease_word)) + ";";
            }
            return out;
        }();
    }
    // Runs an RPC from `from` to `to` and waits for the slot to complete.
    uint32_t rpc(uint16_t from, uint16_t to, const std::vector<uint8_t>& body,
                 std::vector<uint8_t>* reply = nullptr, uint32_t slot = 1, uint16_t flags = 0) {
        TestNode& a = node(from);
        if (a.start_rpc(to, slot, 5, body, flags) == 0) return 999;
        if (!pump([&] { return a.rpc_done(slot); })) return 998;
        if (reply != nullptr) *reply = a.rpc_reply(slot);
        return a.rpc_status(slot);
    }
    // No frame left unacked and no record left queued, everywhere.
    bool quiescent() {
        for (auto& a : nodes_)
            for (auto& b : nodes_) {
                if (a == b) continue;
                const PeerShared& p = a->peer(b->id());
                if (load_relaxed(&p.unacked_msgs) != 0 || load_relaxed(&p.queued_msgs) != 0 ||
                    load_relaxed(&p.queued_bytes) != 0)
                    return false;
            }
        return true;
    }

    std::vector<NodeAddress> addrs_;
    std::vector<std::unique_ptr<TestNode>> nodes_;
};

}  // namespace pgrac::ic::enginetest
