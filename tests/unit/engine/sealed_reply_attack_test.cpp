// Replies sealed while they are written (Engine::begin_sealed_reply ...
// finish_sealed_reply), attacked by a review (both cases failed before the
// fixes in requesters.cpp and engine.cpp). The owner here does
// what src/lms/request_server.cpp and src/listener/in_place.cpp do: a throw
// from an engine call is the handler's error, whose reply (HANDLER_ERROR)
// then goes through send_from_owner() as usual.
#include <atomic>
#include <stdexcept>
#include <thread>
#include <unistd.h>

#include "engine/fixture.hpp"
#include "ic/engine/requester_lane.hpp"

namespace pgrac::ic::enginetest {
namespace {

constexpr uint16_t kRpcType = 300;

uint64_t now_ns() {
    return lane_now_ns();
}

class SealedReplyAttack : public EngineTest {
  protected:
    using Result = RequesterLaneBase::Result;

    // Node 2 serves kRpcType in place, by serve() below; everything secure.
    std::unique_ptr<RequesterLaneBase> up() {
        make(2, [](EngineConfig& c) {
            c.serve_in_place.assign(PGRAC_IC_MAX_MSG_TYPE + 1, false);
            c.serve_in_place[kRpcType] = true;
            c.identity.protection = WireProtection::Secure;
        });
        bring_up();
        node(2).owner_serves = false;  // serve() takes them
        EngineConfig c = make_config(1, addrs_);
        c.identity.protection = WireProtection::Secure;
        const NodeAddress& a = addrs_[1];
        auto lane = std::make_unique<RequesterLane>(c.identity, 2, a.host, a.port);
        std::string err;
        Result r = Result::Failed;
        run([&] { r = lane->open(now_ns() + 5000000000ull, nullptr, &err); });
        EXPECT_EQ(r, Result::Ok) << err;
        return lane;
    }

    // The listener's loop: engine rounds, then requests served in place.
    template <typename F>
    void run(F f) {
        std::atomic<bool> done{false};
        std::thread t([&] {
            f();
            done = true;
        });
        const auto deadline = Clock::now() + std::chrono::seconds(20);
        while (!done && Clock::now() < deadline) {
            for (TestNode* n : all()) {
                n->engine().run_once();
                n->serve_lms();
            }
            serve();
            usleep(200);
        }
        t.join();
    }

    // As serve_record(): the handler seals its reply; an engine call that
    // throws is the handler's error, answered with HANDLER_ERROR.
    void serve() {
        Engine& e = node(2).engine();
        std::vector<uint8_t> rec(sizeof(RingPrefix) + kMessageHeaderSize + PGRAC_IC_MAX_MESSAGE);
        while (e.take_in_place(rec.data(), rec.size()) > 0) {
            RingPrefix pre;
            std::memcpy(&pre, rec.data(), sizeof pre);
            MessageHeader mh;
            const uint8_t* payload = rec.data() + sizeof pre;
            decode_message_header(payload, pre.payload_len, &mh);
            const uint8_t* body = payload + kMessageHeaderSize;
            const uint32_t body_len = pre.payload_len - static_cast<uint32_t>(kMessageHeaderSize);
            MessageHeader rh = mh;
            rh.status = PGRAC_IC_OK;
            bool failed = false;
            try {
                if (e.begin_sealed_reply(pre.node, kFlagRpcReply, rh, body_len)) {
                    e.write_sealed_reply(body, body_len / 2);
                    if (between) between();
                    e.write_sealed_reply(body + body_len / 2, body_len - body_len / 2);
                    if (before_finish) before_finish();
                    e.finish_sealed_reply();
                    sealed++;
                    continue;
                }
            } catch (const std::exception&) {
                failed = true;  // engine_failed(): ereport(ERROR) in the handler
            }
            e.abandon_sealed_reply();  // serve_record()'s reply_stream_abandon()
            const char text[] = "handler failed";
            std::vector<uint8_t> out(kMessageHeaderSize + (failed ? sizeof text : body_len));
            rh.status = failed ? PGRAC_IC_HANDLER_ERROR : PGRAC_IC_OK;
            encode_message_header(rh, out.data());
            std::memcpy(out.data() + kMessageHeaderSize,
                        failed ? reinterpret_cast<const uint8_t*>(text) : body,
                        out.size() - kMessageHeaderSize);
            e.send_from_owner(pre.node, kFlagRpcReply, out.data(),
                              static_cast<uint32_t>(out.size()));
        }
    }

    Result call(RequesterLaneBase& l, uint64_t rpc_id, const std::vector<uint8_t>& body,
                std::vector<uint8_t>* reply, std::string* err, uint64_t timeout_ns) {
        const std::vector<uint8_t> req = rpc_request(rpc_id, body, kRpcType);
        Result r = Result::Failed;
        bool sent = false;
        run([&] {
            r = l.call(req.data(), static_cast<uint32_t>(req.size()), 0, rpc_id, 0,
                       now_ns() + timeout_ns, nullptr, reply, &sent, err);
        });
        return r;
    }

    std::function<void()> between, before_finish;
    int sealed = 0;
};

// A send that throws after seal_end() advanced the frame counter and took
// the reply off the due list (as TcpTransport::send may, with bad_alloc):
// finish_sealed_reply() must not throw then, or request_server.cpp would send
// HANDLER_ERROR through send_from_owner(), which no longer finds the due reply
// and sends it over the peer lanes, while the lane stays open one frame out
// of step. It ends the lane instead: the call fails, nothing else is sent.
TEST_F(SealedReplyAttack, AThrowAfterSealEndNeitherDesyncsTheLaneNorLeaksTheReply) {
    auto lane = up();
    TestNode& b = node(2);
    before_finish = [&] {
        b.net().rewrite_next_message([](FrameHeader&, std::vector<uint8_t>&) {
            throw std::runtime_error("transport send threw");
        });
    };
    const uint64_t wrong_source0 = node(1).errors(ErrorType::WrongSource);
    std::string err;
    std::vector<uint8_t> reply;
    const Result first =
        call(*lane, make_rpc_id(3, 1), pattern(8204, 1), &reply, &err, 1500000000ull);
    before_finish = nullptr;
    EXPECT_NE(first, Result::Timeout) << "the requester got neither a reply nor a closed lane";
    // Give a reply sent over the peer lanes time to arrive at node 1.
    pump([] { return false; }, std::chrono::milliseconds(300));
    EXPECT_EQ(node(1).errors(ErrorType::WrongSource), wrong_source0)
        << "a reply to a requester-lane RPC went over the peer lanes";
    if (first != Result::Ok) return;  // lane closed: in step by construction
    // The lane is still up: the next reply must open at the requester.
    reply.clear();
    const auto body = pattern(100, 2);
    ASSERT_EQ(call(*lane, make_rpc_id(3, 2), body, &reply, &err, 1500000000ull), Result::Ok)
        << "frame counters out of step: " << err;
}

// "Between begin and finish the owner makes no other engine call" is
// enforced (logic_error), and the open frame has a buffer of its own: a send
// in between, had it gone through, would have overwritten the reply on TCP.
TEST_F(SealedReplyAttack, AnotherSendWhileAReplyIsOpenIsRefusedOrHarmless) {
    auto lane = up();
    TestNode& b = node(2);
    between = [&] {
        between = nullptr;
        MessageHeader mh;
        mh.msg_type = kRpcType;
        mh.route_key = 1;
        std::vector<uint8_t> one(kMessageHeaderSize + 40, 0x77);
        encode_message_header(mh, one.data());
        try {
            b.engine().send_from_owner(1, 0, one.data(), static_cast<uint32_t>(one.size()));
        } catch (const std::logic_error&) {
            // refused: acceptable
        }
    };
    std::string err;
    std::vector<uint8_t> reply;
    const auto body = pattern(8204, 5);
    ASSERT_EQ(call(*lane, make_rpc_id(3, 1), body, &reply, &err, 1500000000ull), Result::Ok) << err;
    EXPECT_EQ(std::vector<uint8_t>(reply.begin() + kMessageHeaderSize, reply.end()), body);
}

}  // namespace
}  // namespace pgrac::ic::enginetest
