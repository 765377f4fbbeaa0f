// libFuzzer target: arbitrary handshake frames fed to a dialer or an acceptor
// in each of its states, with the invariants checked after every frame.
//
// Input: byte 0 picks the role, the dialer's lane and the state to drive the
// target into (with a real, honest counterpart); then records of {u8 frame type, u16 length LE,
// bytes}. Each record goes to the target; what it answers goes to the
// counterpart, which must cope as well.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ic/session/handshake.hpp"

namespace {

using namespace pgrac::ic;

class Policy : public HandshakePolicy {
  public:
    RejectReason check_peer(uint16_t node_id, const std::string& peer_address,
                            uint8_t lane) override {
        if (node_id != 1 && node_id != 3) return RejectReason::UnknownNode;
        if (peer_address != "10.0.0.1") return RejectReason::AddressMismatch;
        return lane < 4 ? RejectReason::None : RejectReason::UnknownLane;
    }
    LaneState lane_state(uint16_t node_id, uint8_t lane) override {
        return LaneState{node_id * 7u + lane, node_id * 1000u + lane};
    }
    RejectReason admit(uint16_t, uint64_t, uint64_t, uint64_t, uint8_t, std::string*) override {
        return RejectReason::None;
    }
};

LocalIdentity identity(uint16_t node) {
    LocalIdentity id;
    id.cluster_name = "prod";
    id.system_id = 0x1122334455667788ULL;
    id.node_id = node;
    id.incarnation = 77 + node;
    id.instance = 77 + node;
    const std::string key = "fuzz-key-0123456789abcdef";
    id.key.assign(key.begin(), key.end());
    return id;
}

void check(bool ok) {
    if (!ok) std::abort();
}

void deliver(Handshake& to, uint16_t src, const std::vector<HandshakeOutput>& frames,
             std::vector<HandshakeOutput>* out) {
    for (const HandshakeOutput& f : frames)
        to.on_frame(f.type, src, f.payload.data(), f.payload.size(), out);
}

// Invariants after one frame went into h, which answered with out.
void check_after(const Handshake& h, bool was_failed, const std::vector<HandshakeOutput>& out) {
    for (const HandshakeOutput& o : out)
        check(o.type >= FrameType::Hello && o.type <= FrameType::Reject);
    if (was_failed) {
        check(out.empty());  // a failed handshake stays quiet
        return;
    }
    if (!h.failed()) return;
    check(h.reject_reason() != RejectReason::None);
    check(!h.error_text().empty());
    if (h.rejected_by_peer()) return;
    check(!out.empty() && out.back().type == FrameType::Reject);
    const std::vector<uint8_t>& r = out.back().payload;
    check(r.size() >= 3 && r.size() == 3u + r[2]);
    check((r[0] | (r[1] << 8)) == static_cast<int>(h.reject_reason()));
    // Before the peer's proof verified, a Reject says nothing but its reason.
    if (!h.peer_authenticated()) check(r[2] == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const bool target_is_dialer = (data[0] & 1) != 0;
    const int stage = (data[0] >> 1) % 5;  // how far the honest exchange goes first
    const auto lane = static_cast<uint8_t>(data[0] >> 6);

    Policy dialer_policy, acceptor_policy;
    const LocalIdentity dialer_id = identity(1), acceptor_id = identity(2);
    Handshake dialer(Handshake::Role::Dialer, dialer_id, dialer_policy, 2, {}, lane);
    Handshake acceptor(Handshake::Role::Acceptor, acceptor_id, acceptor_policy, 0, "10.0.0.1");

    // Stages: 0 nothing; 1 dialer started; 2 Hello/HelloReply exchanged;
    // 3 both Done; 4 the target failed on an out-of-order frame.
    std::vector<HandshakeOutput> to_a, to_d;
    if (stage >= 1 && stage <= 3) to_a = dialer.start();
    if (stage >= 2 && stage <= 3) {
        deliver(acceptor, 1, to_a, &to_d);
        to_a.clear();
        deliver(dialer, 2, to_d, &to_a);
        to_d.clear();
    }
    if (stage == 3) {
        deliver(acceptor, 1, to_a, &to_d);
        deliver(dialer, 2, to_d, &to_a);
        check(dialer.done() && acceptor.done());
    }
    Handshake& target = target_is_dialer ? dialer : acceptor;
    Handshake& other = target_is_dialer ? acceptor : dialer;
    if (stage == 4) {
        std::vector<HandshakeOutput> scratch;
        target.on_frame(FrameType::Message, target_is_dialer ? 2 : 1, nullptr, 0, &scratch);
        check(target.failed());
    }

    // Before its peer's proof is checked, a target fed only by the fuzzer must
    // never get past that check: the proofs cover its own fresh nonce. (The
    // dialer proves first: it reaches WaitAuthOk on any well-formed HelloReply.)
    const bool before_proof = stage <= 2;

    size_t pos = 1;
    while (size - pos >= 3) {
        const auto type = static_cast<FrameType>(data[pos]);
        const size_t len = std::min<size_t>(data[pos + 1] | (data[pos + 2] << 8), size - pos - 3);
        const uint8_t* payload = data + pos + 3;
        pos += 3 + len;

        const bool was_failed = target.failed();
        std::vector<HandshakeOutput> out;
        // The fuzzer's frames come from the node the target expects.
        target.on_frame(type, target_is_dialer ? 2 : 1, len == 0 ? nullptr : payload, len, &out);
        check_after(target, was_failed, out);
        if (before_proof) check(!target.done() && !target.peer_authenticated());

        const bool other_was_failed = other.failed();
        std::vector<HandshakeOutput> other_out;
        deliver(other, target_is_dialer ? 1 : 2, out, &other_out);
        if (!out.empty()) check_after(other, other_was_failed, other_out);
    }
    return 0;
}
