// Hostile peers against frames by RDMA WRITE (docs/rdma.md, "Frames by RDMA
// WRITE"; tiers/verbs/landing.*, transport_cm.cpp, transport_io.cpp). The
// hostile side is written with raw librdmacm and libibverbs: a dialer that
// offers landing slots of its own making in the connect request's private
// data, or a passive side that accepts a VerbsTransport's dial and then posts
// work requests of its own choosing (WRITE WITH IMMEDIATE with wrong numbers,
// sizes and places, SENDs with immediates that lie about credits, plain WRITEs
// and READs). Each attack must end at most its own connection, with a reason,
// deliver no frame the protocol refuses, and leave the transport serving a
// second, honest connection. A well-behaved raw peer (HonestRaw*) shows that
// the raw side speaks the protocol, so the refusals mean something.
//
// Needs an RDMA device: run tests/rxe/verbs_transport_in_vm.sh with
// VERBS_FILTER='VerbsLandingAttack.*'; without a device every test skips.
#include <gtest/gtest.h>

#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ic/transport/transport.hpp"
#include "ic/wire/frame.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "tiers/verbs/landing.hpp"
#include "tiers/verbs/transport.hpp"
#include "tiers/transport_test_support.hpp"
#include "tiers/verbs_test_support.hpp"

using namespace pgrac;
using namespace pgrac::tiers;
using namespace pgrac::tiers::transporttest;
using namespace pgrac::tiers::verbstest;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kWait = std::chrono::seconds(30);         // TCG emulation is slow
constexpr auto kQuiet = std::chrono::milliseconds(600);  // "nothing happens" windows
constexpr uint32_t kRawSlot = 16448;                     // round64(24 + 16 KiB)
constexpr uint64_t kSendFlag = uint64_t{1} << 62;        // wr_id of a raw send

// --- the raw side ---

bool nonblocking(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

rdma_conn_param raw_param(const std::vector<uint8_t>& private_data) {
    rdma_conn_param p{};
    p.private_data = private_data.empty() ? nullptr : private_data.data();
    p.private_data_len = static_cast<uint8_t>(private_data.size());
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    return p;
}

// The frame in p[0, len) is whole and its CRC right.
bool valid_frame(const uint8_t* p, size_t len, ic::FrameHeader* h) {
    if (len < ic::kFrameHeaderSize) return false;
    if (ic::decode_frame_header(p, len, ic::kMaxFramePayload, h) != ic::FrameError::None)
        return false;
    return len == ic::kFrameHeaderSize + h->payload_len &&
           ic::verify_frame_crc(p, p + ic::kFrameHeaderSize, h->payload_len) ==
               ic::FrameError::None;
}

struct RawWc {
    ibv_wc_opcode opcode = IBV_WC_SEND;
    ibv_wc_status status = IBV_WC_SUCCESS;
    bool with_imm = false;
    uint32_t imm = 0;  // host order
    uint32_t byte_len = 0;
    uint64_t wr_id = 0;
    std::vector<uint8_t> data;  // what a SEND brought
};

// One RC connection of the hostile side: its own channel, PD, CQ and QP, a
// receive queue of its own, send buffers, and optionally a landing area
// registered for remote write (which a dialer may offer).
class RawConn {
  public:
    static constexpr size_t kBuf = 72 * 1024;
    static constexpr int kRecvs = 8, kSendBufs = 4;

    RawConn() = default;
    RawConn(const RawConn&) = delete;
    RawConn& operator=(const RawConn&) = delete;
    ~RawConn() {
        if (id_ != nullptr) {
            if (connected_) rdma_disconnect(id_);
            if (id_->qp != nullptr) rdma_destroy_qp(id_);
        }
        for (ibv_mr* mr : {send_mr_, recv_mr_, landing_mr})
            if (mr != nullptr) ibv_dereg_mr(mr);
        if (cq_ != nullptr) ibv_destroy_cq(cq_);
        if (pd_ != nullptr) ibv_dealloc_pd(pd_);
        if (id_ != nullptr) rdma_destroy_id(id_);
        if (ch_ != nullptr) rdma_destroy_event_channel(ch_);
    }

    // Set before dial()/accept(): a landing area of this many bytes (zeroed,
    // remote write), and the connect request's private data, made once it exists.
    size_t landing_bytes = 0;
    std::function<std::vector<uint8_t>(const RawConn&)> private_data;
    bool post_receives = true;

    bool dial(const std::string& host, uint16_t port, std::string* error) {
        if (!make_channel(error)) return false;
        if (rdma_create_id(ch_, &id_, this, RDMA_PS_TCP) != 0)
            return fail_with("rdma_create_id", error);
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST;
        addrinfo* ai = nullptr;
        if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0) {
            *error = "getaddrinfo " + host;
            return false;
        }
        const int rc = rdma_resolve_addr(id_, nullptr, ai->ai_addr, 5000);
        freeaddrinfo(ai);
        return rc == 0 || fail_with("rdma_resolve_addr", error);
    }

    // Accepts the connect request of id (from RawListener).
    bool accept(rdma_cm_id* id, std::string* error) {
        if (!make_channel(error)) {
            rdma_reject(id, nullptr, 0);
            rdma_destroy_id(id);
            return false;
        }
        id_ = id;
        id_->context = this;
        if (rdma_migrate_id(id_, ch_) != 0) return fail_with("rdma_migrate_id", error);
        if (!setup(id_->verbs, error)) return false;
        rdma_conn_param p = raw_param({});
        if (rdma_accept(id_, &p) != 0) return fail_with("rdma_accept", error);
        connected_ = true;
        return true;
    }

    int fd() const { return ch_ == nullptr ? -1 : ch_->fd; }

    // CM events, then the CQ.
    void step() {
        for (int i = 0; ch_ != nullptr && i < 16; ++i) {
            rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(ch_, &ev) != 0) break;
            const rdma_cm_event_type type = ev->event;
            const int status = ev->status;
            rdma_ack_cm_event(ev);
            std::string error;
            switch (type) {
                case RDMA_CM_EVENT_ADDR_RESOLVED:
                    if (!setup(id_->verbs, &error))
                        note_failure(error);
                    else if (rdma_resolve_route(id_, 5000) != 0)
                        note_failure("rdma_resolve_route");
                    break;
                case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                    const std::vector<uint8_t> pd =
                        private_data ? private_data(*this) : std::vector<uint8_t>{};
                    rdma_conn_param p = raw_param(pd);
                    if (rdma_connect(id_, &p) != 0)
                        note_failure("rdma_connect");
                    else
                        connected_ = true;
                    break;
                }
                case RDMA_CM_EVENT_ESTABLISHED:
                    established = true;
                    break;
                case RDMA_CM_EVENT_DISCONNECTED:
                    disconnected = true;
                    break;
                case RDMA_CM_EVENT_ADDR_ERROR:
                case RDMA_CM_EVENT_ROUTE_ERROR:
                case RDMA_CM_EVENT_UNREACHABLE:
                case RDMA_CM_EVENT_CONNECT_ERROR:
                case RDMA_CM_EVENT_REJECTED:
                    note_failure(std::string(rdma_event_str(type)) + " (status " +
                                 std::to_string(status) + ")");
                    break;
                default:
                    break;
            }
        }
        poll_cq();
    }

    // Posts one signaled work request from a send buffer (data copied in
    // first; an RDMA READ reads into it). False if ibv_post_send refused.
    bool post(ibv_wr_opcode op, const uint8_t* data, size_t len, uint32_t imm = 0,
              uint64_t raddr = 0, uint32_t rkey = 0) {
        if (id_ == nullptr || id_->qp == nullptr || len > kBuf) return false;
        const uint64_t n = ++next_wr_;
        uint8_t* buf = send_mem_.data() + (n % kSendBufs) * kBuf;
        if (data != nullptr && len > 0) std::memcpy(buf, data, len);
        ibv_sge sge{};
        sge.addr = reinterpret_cast<uintptr_t>(buf);
        sge.length = static_cast<uint32_t>(len);
        sge.lkey = send_mr_->lkey;
        ibv_send_wr wr{};
        wr.wr_id = kSendFlag | n;
        wr.sg_list = len > 0 ? &sge : nullptr;
        wr.num_sge = len > 0 ? 1 : 0;
        wr.opcode = op;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htobe32(imm);
        wr.wr.rdma.remote_addr = raddr;
        wr.wr.rdma.rkey = rkey;
        ibv_send_wr* bad = nullptr;
        if (ibv_post_send(id_->qp, &wr, &bad) != 0) return false;
        last_wr_ = wr.wr_id;
        return true;
    }
    bool post(ibv_wr_opcode op, const std::vector<uint8_t>& bytes, uint32_t imm = 0,
              uint64_t raddr = 0, uint32_t rkey = 0) {
        return post(op, bytes.data(), bytes.size(), imm, raddr, rkey);
    }
    // A frame into slot `slot` of `o` with `number` as the immediate.
    bool write_imm(const LandingOffer& o, uint64_t slot, const std::vector<uint8_t>& bytes,
                   uint32_t number) {
        return post(IBV_WR_RDMA_WRITE_WITH_IMM, bytes, number, o.addr + slot * o.slot_bytes,
                    o.rkey);
    }
    uint64_t last_wr() const { return last_wr_; }
    const RawWc* send_done(uint64_t wr) const {
        for (const RawWc& w : sends)
            if (w.wr_id == wr) return &w;
        return nullptr;
    }
    void disconnect() {
        if (id_ != nullptr && connected_) rdma_disconnect(id_);
        connected_ = false;
    }

    // This area as a landing offer (what an honest dialer would send).
    LandingOffer own_offer(uint32_t slots, uint32_t slot_bytes) const {
        LandingOffer o;
        o.addr = reinterpret_cast<uintptr_t>(landing);
        o.rkey = landing_mr->rkey;
        o.slot_bytes = slot_bytes;
        o.slots = slots;
        return o;
    }

    bool established = false, disconnected = false, failed = false;
    std::string fail_what;
    std::vector<RawWc> recvs;  // receive completions, in order
    std::vector<RawWc> sends;  // send completions
    uint8_t* landing = nullptr;
    ibv_mr* landing_mr = nullptr;

  private:
    bool make_channel(std::string* error) {
        ch_ = rdma_create_event_channel();
        if (ch_ == nullptr || !nonblocking(ch_->fd)) return fail_with("event channel", error);
        return true;
    }
    bool fail_with(const std::string& what, std::string* error) {
        *error = what + ": " + std::strerror(errno);
        return false;
    }
    void note_failure(const std::string& what) {
        failed = true;
        if (fail_what.empty()) fail_what = what;
    }

    bool setup(ibv_context* verbs, std::string* error) {
        pd_ = ibv_alloc_pd(verbs);
        if (pd_ == nullptr) return fail_with("ibv_alloc_pd", error);
        cq_ = ibv_create_cq(verbs, 64, nullptr, nullptr, 0);
        if (cq_ == nullptr) return fail_with("ibv_create_cq", error);
        ibv_qp_init_attr ia{};
        ia.send_cq = ia.recv_cq = cq_;
        ia.qp_type = IBV_QPT_RC;
        ia.cap.max_send_wr = 16;
        ia.cap.max_recv_wr = kRecvs;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        if (rdma_create_qp(id_, pd_, &ia) != 0) return fail_with("rdma_create_qp", error);
        send_mem_.assign(kBuf * kSendBufs, 0);
        recv_mem_.assign(kBuf * kRecvs, 0);
        send_mr_ = ibv_reg_mr(pd_, send_mem_.data(), send_mem_.size(), IBV_ACCESS_LOCAL_WRITE);
        recv_mr_ = ibv_reg_mr(pd_, recv_mem_.data(), recv_mem_.size(), IBV_ACCESS_LOCAL_WRITE);
        if (send_mr_ == nullptr || recv_mr_ == nullptr) return fail_with("ibv_reg_mr", error);
        if (landing_bytes > 0) {
            landing_mem_.assign(landing_bytes, 0);
            landing = landing_mem_.data();
            landing_mr = ibv_reg_mr(pd_, landing, landing_bytes,
                                    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
            if (landing_mr == nullptr) return fail_with("ibv_reg_mr (landing)", error);
        }
        if (post_receives)
            for (uint64_t i = 0; i < kRecvs; ++i)
                if (!repost(i)) return fail_with("ibv_post_recv", error);
        return true;
    }

    bool repost(uint64_t i) {
        ibv_sge sge{};
        sge.addr = reinterpret_cast<uintptr_t>(recv_mem_.data() + i * kBuf);
        sge.length = static_cast<uint32_t>(kBuf);
        sge.lkey = recv_mr_->lkey;
        ibv_recv_wr wr{};
        wr.wr_id = i;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        return ibv_post_recv(id_->qp, &wr, &bad) == 0;
    }

    void poll_cq() {
        if (cq_ == nullptr) return;
        ibv_wc wcs[16];
        int n;
        while ((n = ibv_poll_cq(cq_, 16, wcs)) > 0) {
            for (int i = 0; i < n; ++i) {
                const ibv_wc& wc = wcs[i];
                RawWc r;
                r.opcode = wc.opcode;
                r.status = wc.status;
                r.with_imm = (wc.wc_flags & IBV_WC_WITH_IMM) != 0;
                r.imm = be32toh(wc.imm_data);
                r.byte_len = wc.byte_len;
                r.wr_id = wc.wr_id;
                if (wc.wr_id & kSendFlag) {
                    sends.push_back(std::move(r));
                    continue;
                }
                if (wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV) {
                    const uint8_t* p = recv_mem_.data() + wc.wr_id * kBuf;
                    r.data.assign(p, p + wc.byte_len);
                }
                const bool ok = wc.status == IBV_WC_SUCCESS;
                recvs.push_back(std::move(r));
                if (ok) repost(wc.wr_id);
            }
        }
    }

    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* id_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_mr *send_mr_ = nullptr, *recv_mr_ = nullptr;
    std::vector<uint8_t> send_mem_, recv_mem_, landing_mem_;
    uint64_t next_wr_ = 0, last_wr_ = 0;
    bool connected_ = false;
};

// The hostile passive side: connect requests wait here with their private
// data until a test accepts them (RawConn::accept).
class RawListener {
  public:
    struct Request {
        rdma_cm_id* id;
        std::vector<uint8_t> private_data;
    };

    RawListener() = default;
    RawListener(const RawListener&) = delete;
    RawListener& operator=(const RawListener&) = delete;
    ~RawListener() {
        for (Request& r : requests) {
            rdma_reject(r.id, nullptr, 0);
            rdma_destroy_id(r.id);
        }
        if (id_ != nullptr) rdma_destroy_id(id_);
        if (ch_ != nullptr) rdma_destroy_event_channel(ch_);
    }

    bool listen(const std::string& host, uint16_t port, std::string* error) {
        ch_ = rdma_create_event_channel();
        if (ch_ == nullptr || !nonblocking(ch_->fd) ||
            rdma_create_id(ch_, &id_, nullptr, RDMA_PS_TCP) != 0) {
            *error = std::string("raw listener: ") + std::strerror(errno);
            return false;
        }
        addrinfo hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_NUMERICSERV | AI_NUMERICHOST | AI_PASSIVE;
        addrinfo* ai = nullptr;
        if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &ai) != 0) {
            *error = "getaddrinfo " + host;
            return false;
        }
        const bool ok = rdma_bind_addr(id_, ai->ai_addr) == 0 && rdma_listen(id_, 16) == 0;
        freeaddrinfo(ai);
        if (!ok) *error = std::string("raw listener bind/listen: ") + std::strerror(errno);
        return ok;
    }

    int fd() const { return ch_ == nullptr ? -1 : ch_->fd; }

    void step() {
        for (int i = 0; ch_ != nullptr && i < 16; ++i) {
            rdma_cm_event* ev = nullptr;
            if (rdma_get_cm_event(ch_, &ev) != 0) break;
            if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
                const auto* p = static_cast<const uint8_t*>(ev->param.conn.private_data);
                Request r{ev->id, {}};
                if (p != nullptr) r.private_data.assign(p, p + ev->param.conn.private_data_len);
                requests.push_back(std::move(r));
            }
            rdma_ack_cm_event(ev);
        }
    }

    std::deque<Request> requests;

  private:
    rdma_event_channel* ch_ = nullptr;
    rdma_cm_id* id_ = nullptr;
};

std::vector<uint8_t> offer_bytes(const LandingOffer& o) {
    std::vector<uint8_t> b(kLandingOfferSize);
    encode_landing_offer(o, b.data());
    return b;
}

size_t frames_on(const Recorder& r, ConnId c) {
    return static_cast<size_t>(std::count_if(r.frames.begin(), r.frames.end(),
                                             [&](const ReceivedFrame& f) { return f.conn == c; }));
}

const ReceivedFrame* last_frame_on(const Recorder& r, ConnId c) {
    for (auto it = r.frames.rbegin(); it != r.frames.rend(); ++it)
        if (it->conn == c) return &*it;
    return nullptr;
}

const ClosedConn* closed_of(const Recorder& r, ConnId c) {
    for (const ClosedConn& x : r.closed)
        if (x.conn == c) return &x;
    return nullptr;
}

bool has(const std::vector<ConnId>& v, ConnId c) {
    return std::find(v.begin(), v.end(), c) != v.end();
}

bool contains(const std::string& s, const std::string& what) {
    return s.find(what) != std::string::npos;
}

// t is the VerbsTransport under attack; h (an honest dialer with landing
// slots) and l (an honest listener that writes) are the second, honest
// connections; raw peers and the raw listener are the hostile side.
class VerbsLandingAttack : public ::testing::Test {
  protected:
    void SetUp() override {
        const std::string why = skip_reason();
        if (!why.empty()) GTEST_SKIP() << why;
        addr = test_addr();
    }

    void TearDown() override {
        raws.clear();  // before the listener whose requests they accepted
        listener.reset();
        h.reset();
        l.reset();
        d.reset();
        t.reset();
    }

    // Polls every transport and steps every raw peer until done() holds;
    // false after limit. raw_only: leave the transports alone (what they
    // would see is staged first, then they poll).
    bool run(const std::function<bool()>& done, std::chrono::milliseconds limit = kWait,
             bool raw_only = false) {
        const auto deadline = Clock::now() + limit;
        for (;;) {
            if (!raw_only)
                for (Transport* x : {t.get(), h.get(), l.get(), d.get()})
                    if (x != nullptr) x->poll(0);
            if (listener) listener->step();
            for (auto& r : raws) r->step();
            if (done()) return true;
            if (Clock::now() > deadline) return false;
            std::vector<pollfd> fds;
            if (!raw_only)
                for (Transport* x : {t.get(), h.get(), l.get(), d.get()})
                    if (x != nullptr) fds.push_back({x->wait_fd(), POLLIN, 0});
            if (listener) fds.push_back({listener->fd(), POLLIN, 0});
            for (auto& r : raws)
                if (r->fd() >= 0) fds.push_back({r->fd(), POLLIN, 0});
            ::poll(fds.data(), fds.size(), 2);  // raw CQs have no channel: poll often
        }
    }
    void idle(std::chrono::milliseconds how_long) {
        run([] { return false; }, how_long);
    }

    std::unique_ptr<Transport> make(Recorder& r, const VerbsOptions& o) {
        std::string error;
        auto x = make_verbs_transport(r, o, &error);
        EXPECT_NE(x, nullptr) << error;
        return x;
    }

    uint16_t listen_on(Transport& x) {
        std::string error;
        for (int i = 0; i < 20; ++i) {
            const uint16_t p = test_port();
            if (x.listen(addr, p, &error)) return p;
        }
        ADD_FAILURE() << "cannot listen: " << error;
        return 0;
    }

    // t listens (the writer: write_min > 0).
    void start_writer(const VerbsOptions& o = writer_options()) {
        t = make(rt, o);
        ASSERT_NE(t, nullptr);
        tport = listen_on(*t);
        ASSERT_NE(tport, 0);
    }

    // A raw peer dials t with a landing area of landing_bytes and the given
    // private data; nullptr (and a failure) unless both ends see it up.
    // *tc: t's id for it.
    RawConn* raw_dial(size_t landing_bytes,
                      std::function<std::vector<uint8_t>(const RawConn&)> private_data,
                      ConnId* tc) {
        auto r = std::make_unique<RawConn>();
        r->landing_bytes = landing_bytes;
        r->private_data = std::move(private_data);
        std::string error;
        if (!r->dial(addr, tport, &error)) {
            ADD_FAILURE() << error;
            return nullptr;
        }
        RawConn* raw = r.get();
        raws.push_back(std::move(r));
        const size_t na = rt.accepted.size();
        if (!run([&] { return (raw->established && rt.accepted.size() > na) || raw->failed; })) {
            ADD_FAILURE() << "raw dial: not established";
            return nullptr;
        }
        if (raw->failed) {
            ADD_FAILURE() << "raw dial failed: " << raw->fail_what;
            return nullptr;
        }
        *tc = rt.accepted.back().first;
        return raw;
    }

    // x (t unless given) dials the raw listener, which accepts; *offer is what
    // the connect request carried (its raw bytes in *pd). nullptr (and a
    // failure) unless both ends see it up.
    RawConn* raw_accept(ConnId* tc, LandingOffer* offer = nullptr, bool expect_offer = true,
                        std::vector<uint8_t>* pd = nullptr, Transport* x = nullptr,
                        Recorder* rx = nullptr) {
        if (x == nullptr) x = t.get();
        if (rx == nullptr) rx = &rt;
        if (!listener && !start_raw_listener()) return nullptr;
        std::string error;
        const size_t nf = rx->connect_failed.size();
        *tc = x->connect(addr, rport, &error);
        if (*tc == 0) {
            ADD_FAILURE() << error;
            return nullptr;
        }
        if (!run([&] { return !listener->requests.empty() || rx->connect_failed.size() > nf; })) {
            ADD_FAILURE() << "no connect request reached the raw listener";
            return nullptr;
        }
        if (listener->requests.empty()) {
            ADD_FAILURE() << "dial failed: " << rx->connect_failed.back().second;
            return nullptr;
        }
        RawListener::Request req = listener->requests.front();
        listener->requests.pop_front();
        if (pd != nullptr) *pd = req.private_data;
        LandingOffer o;
        const bool offered =
            decode_landing_offer(req.private_data.data(), req.private_data.size(), &o);
        if (offered != expect_offer)
            ADD_FAILURE() << "landing offer " << (offered ? "present" : "absent")
                          << " in the connect request";
        if (offer != nullptr) *offer = o;
        auto r = std::make_unique<RawConn>();
        RawConn* raw = r.get();
        raws.push_back(std::move(r));
        if (!raw->accept(req.id, &error)) {
            ADD_FAILURE() << error;
            return nullptr;
        }
        const ConnId c = *tc;
        if (!run([&] {
                return (raw->established && has(rx->connected, c)) || raw->failed ||
                       rx->connect_failed.size() > nf;
            })) {
            ADD_FAILURE() << "raw accept: not established";
            return nullptr;
        }
        if (raw->failed || rx->connect_failed.size() > nf) {
            ADD_FAILURE() << "raw accept failed: " << raw->fail_what;
            return nullptr;
        }
        return raw;
    }

    bool start_raw_listener() {
        std::string error;
        for (int i = 0; i < 20; ++i) {
            const uint16_t p = test_port();
            auto candidate = std::make_unique<RawListener>();
            if (candidate->listen(addr, p, &error)) {
                listener = std::move(candidate);
                rport = p;
                return true;
            }
        }
        ADD_FAILURE() << "raw listener: " << error;
        return false;
    }

    // Waits for the completion of the raw peer's last work request.
    const RawWc* wait_sent(RawConn& r, bool raw_only = false) {
        const uint64_t wr = r.last_wr();
        if (!run([&] { return r.send_done(wr) != nullptr; }, kWait, raw_only)) return nullptr;
        return r.send_done(wr);
    }

    // t (listening, a writer) serves an honest dialer with landing slots:
    // a request, and an 8 KiB reply that t writes into its slot.
    void honest_dialer_round_trip() {
        // A transport with landing slots carries one connection: a new one,
        // with a new recorder (connection ids start again at 1).
        h.reset();
        rh = Recorder{};
        h = make(rh, landing_options());
        ASSERT_NE(h, nullptr);
        std::string error;
        const size_t na = rt.accepted.size();
        const ConnId hc = h->connect(addr, tport, &error);
        ASSERT_NE(hc, 0u) << error;
        ASSERT_TRUE(run([&] {
            return (has(rh.connected, hc) && rt.accepted.size() > na) || !rh.connect_failed.empty();
        })) << "the honest dialer did not get through";
        ASSERT_TRUE(rh.connect_failed.empty()) << rh.connect_failed[0].second;
        const ConnId tc = rt.accepted.back().first;
        const uint64_t writes = t->counters().rdma_writes;
        ASSERT_TRUE(send_frame(*h, hc, message(500, 64)));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 1u);
        const auto reply = message(501, 8192);
        ASSERT_TRUE(send_frame(*t, tc, reply));
        ASSERT_TRUE(run([&] { return frames_on(rh, hc) == 1 || closed_of(rh, hc) != nullptr; }));
        ASSERT_EQ(frames_on(rh, hc), 1u);
        EXPECT_TRUE(payload_matches(*last_frame_on(rh, hc), reply));
        EXPECT_EQ(t->counters().rdma_writes, writes + 1) << "the honest reply was written";
        EXPECT_EQ(closed_of(rt, tc), nullptr);
        EXPECT_EQ(closed_of(rh, hc), nullptr);
    }

    // t (dialing, with landing slots) is served by an honest writer.
    void honest_listener_round_trip() {
        if (!l) {
            l = make(rl, writer_options());
            ASSERT_NE(l, nullptr);
            lport = listen_on(*l);
            ASSERT_NE(lport, 0);
        }
        // A transport with landing slots carries one connection: the
        // attacked one (if it still lives) is closed first.
        for (ConnId c : rt.connected)
            if (closed_of(rt, c) == nullptr) t->close(c);
        std::string error;
        const size_t na = rl.accepted.size(), nf = rt.connect_failed.size();
        const ConnId tc = t->connect(addr, lport, &error);
        ASSERT_NE(tc, 0u) << error;
        ASSERT_TRUE(run([&] {
            return (has(rt.connected, tc) && rl.accepted.size() > na) ||
                   rt.connect_failed.size() > nf;
        }));
        ASSERT_EQ(rt.connect_failed.size(), nf) << rt.connect_failed.back().second;
        const ConnId lc = rl.accepted.back().first;
        const uint64_t landed = t->counters().landed_frames;
        ASSERT_TRUE(send_frame(*t, tc, message(600, 64)));
        ASSERT_TRUE(run([&] { return frames_on(rl, lc) == 1 || closed_of(rl, lc) != nullptr; }));
        ASSERT_EQ(frames_on(rl, lc), 1u);
        const auto reply = message(601, 8192);
        ASSERT_TRUE(send_frame(*l, lc, reply));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 1u);
        EXPECT_TRUE(payload_matches(*last_frame_on(rt, tc), reply));
        EXPECT_EQ(t->counters().landed_frames, landed + 1) << "the honest reply landed";
        EXPECT_EQ(closed_of(rt, tc), nullptr);
    }

    // Waits until t reports the end of tc; its reason ("" if it never came).
    std::string wait_closed(ConnId tc, std::chrono::milliseconds limit = kWait,
                            const Recorder* r = nullptr) {
        if (r == nullptr) r = &rt;
        run([&] { return closed_of(*r, tc) != nullptr; }, limit);
        const ClosedConn* c = closed_of(*r, tc);
        return c == nullptr ? "" : c->reason;
    }

    Recorder rt, rh, rl, rd;
    std::unique_ptr<Transport> t, h, l, d;
    std::unique_ptr<RawListener> listener;
    std::vector<std::unique_ptr<RawConn>> raws;
    std::string addr;
    uint16_t tport = 0, lport = 0, rport = 0;
};

}  // namespace

// ---------------------------------------------------------------------------
// 4. The raw peer is right: an honest raw dialer and an honest raw acceptor.

// A raw dialer offering two real slots gets t's large replies written into
// them in turn (immediate = frame number), gives them back in the immediate
// of its SENDs, and t writes again; small or slot-less replies are SENT.
TEST_F(VerbsLandingAttack, HonestRawDialerIsWrittenToAndGivesSlotsBack) {
    start_writer();
    ConnId tc = 0;
    RawConn* raw = raw_dial(
        2 * kRawSlot, [](const RawConn& r) { return offer_bytes(r.own_offer(2, kRawSlot)); }, &tc);
    ASSERT_NE(raw, nullptr);
    ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(1, 64), 0));
    ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
    ASSERT_EQ(frames_on(rt, tc), 1u) << wait_closed(tc, kQuiet);
    EXPECT_TRUE(payload_matches(rt.frames.back(), message(1, 64)));

    // Three 8 KiB replies: two slots, then a SEND.
    for (uint32_t s = 11; s <= 13; ++s) ASSERT_TRUE(send_frame(*t, tc, message(s, 8192)));
    ASSERT_TRUE(run([&] { return raw->recvs.size() >= 3; }));
    for (uint32_t i = 0; i < 2; ++i) {
        const RawWc& w = raw->recvs[i];
        ASSERT_EQ(w.status, IBV_WC_SUCCESS) << ibv_wc_status_str(w.status);
        EXPECT_EQ(w.opcode, IBV_WC_RECV_RDMA_WITH_IMM) << i;
        EXPECT_EQ(w.imm, i) << "the immediate is the frame's number";
        const auto want = message(11 + i, 8192);
        ASSERT_EQ(w.byte_len, want.size());
        ic::FrameHeader fh;
        const uint8_t* slot = raw->landing + i * kRawSlot;
        EXPECT_TRUE(valid_frame(slot, w.byte_len, &fh)) << "slot " << i;
        EXPECT_EQ(std::memcmp(slot, want.data(), want.size()), 0) << "slot " << i;
    }
    EXPECT_EQ(raw->recvs[2].opcode, IBV_WC_RECV) << "no slot free: sent";
    EXPECT_EQ(raw->recvs[2].data, message(13, 8192));
    EXPECT_EQ(t->counters().rdma_writes, 2u);

    // Both slots back: the next reply goes to slot 0 as frame 2. A plain SEND
    // (no immediate) gives nothing back and takes nothing.
    ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(2, 64), 2));
    ASSERT_TRUE(raw->post(IBV_WR_SEND, message(3, 64)));
    ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 3 || closed_of(rt, tc) != nullptr; }));
    ASSERT_EQ(frames_on(rt, tc), 3u) << wait_closed(tc, kQuiet);
    for (uint32_t s = 14; s <= 16; ++s) ASSERT_TRUE(send_frame(*t, tc, message(s, 8192)));
    ASSERT_TRUE(run([&] { return raw->recvs.size() >= 6; }));
    EXPECT_EQ(raw->recvs[3].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(raw->recvs[3].imm, 2u);
    EXPECT_EQ(std::memcmp(raw->landing, message(14, 8192).data(), message(14, 8192).size()), 0);
    EXPECT_EQ(raw->recvs[4].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(raw->recvs[4].imm, 3u);
    EXPECT_EQ(raw->recvs[5].opcode, IBV_WC_RECV) << "two in use again: sent";
    EXPECT_EQ(t->counters().rdma_writes, 4u);
    EXPECT_TRUE(rt.closed.empty()) << rt.closed[0].reason;
    EXPECT_EQ(rt.reentered, 0);
}

// t dials a raw acceptor: its connect request carries a well-formed offer,
// and frames the raw side writes in turn into the right slots arrive whole
// and in order; each SEND of t's says how many it has consumed.
TEST_F(VerbsLandingAttack, HonestRawAcceptorWritesAreDelivered) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    ConnId tc = 0;
    std::vector<uint8_t> pd;
    LandingOffer o;
    RawConn* raw = raw_accept(&tc, &o, true, &pd);
    ASSERT_NE(raw, nullptr);
    ASSERT_GE(pd.size(), kLandingOfferSize);
    EXPECT_EQ(std::memcmp(pd.data(), "PGRL", 4), 0);
    EXPECT_EQ(pd[4], 1) << "version";
    EXPECT_EQ(pd[5], 2) << "slots";
    EXPECT_EQ(pd[6] | pd[7], 0) << "reserved";
    EXPECT_EQ(o.slots, 2u);
    EXPECT_EQ(o.slot_bytes, kRawSlot);
    EXPECT_NE(o.addr, 0u);
    for (uint32_t i = 0; i < 6; ++i) {
        const auto f = message(100 + i, 4000);
        ASSERT_TRUE(raw->write_imm(o, i % 2, f, i));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == i + 1 || closed_of(rt, tc) != nullptr; }))
            << i;
        ASSERT_EQ(frames_on(rt, tc), i + 1) << wait_closed(tc, kQuiet);
        EXPECT_TRUE(payload_matches(rt.frames.back(), f)) << i;
        EXPECT_EQ(rt.frames.back().h.seq, 100 + i);
        ASSERT_TRUE(send_frame(*t, tc, message(200 + i, 64)));
        ASSERT_TRUE(run([&] { return raw->recvs.size() == i + 1; }));
        const RawWc& w = raw->recvs[i];
        EXPECT_EQ(w.opcode, IBV_WC_RECV);
        EXPECT_TRUE(w.with_imm) << "an offering side SENDs with an immediate";
        EXPECT_EQ(w.imm, i + 1) << "landed frames consumed so far";
        EXPECT_EQ(w.data, message(200 + i, 64));
    }
    EXPECT_EQ(t->counters().landed_frames, 6u);
    EXPECT_TRUE(rt.closed.empty()) << rt.closed[0].reason;
}

// ---------------------------------------------------------------------------
// 1. A hostile dialer's bogus offers.

// Private data that is not an offer (no data, short, address 0, wrong magic
// or version, 0 or 17 slots, slots under 64 bytes or over 16 MiB, reserved
// bits set) leaves the connection to SENDs: t's 8 KiB reply arrives as a SEND
// although a real, writable area lies behind the bogus offer. The dialer's
// SEND with an immediate (credits it was never given) is just a SEND there.
TEST_F(VerbsLandingAttack, BogusOffersAreIgnoredAndRepliesAreSent) {
    start_writer();
    struct Variant {
        const char* name;
        std::function<void(std::vector<uint8_t>&)> spoil;
    };
    auto field = [](size_t at, uint32_t v) {
        return [at, v](std::vector<uint8_t>& b) { std::memcpy(b.data() + at, &v, 4); };
    };
    const std::vector<Variant> variants = {
        {"no private data", [](std::vector<uint8_t>& b) { b.clear(); }},
        // rdma_cm pads private data with zeros (to 56 bytes): cut short, the
        // address reads as 0.
        {"16 bytes", [](std::vector<uint8_t>& b) { b.resize(16); }},
        {"address 0", [](std::vector<uint8_t>& b) { std::memset(b.data() + 16, 0, 8); }},
        {"wrong magic", [](std::vector<uint8_t>& b) { b[0] = 'X'; }},
        {"version 2", [](std::vector<uint8_t>& b) { b[4] = 2; }},
        {"version 0", [](std::vector<uint8_t>& b) { b[4] = 0; }},
        {"0 slots", [](std::vector<uint8_t>& b) { b[5] = 0; }},
        {"17 slots", [](std::vector<uint8_t>& b) { b[5] = 17; }},
        {"255 slots", [](std::vector<uint8_t>& b) { b[5] = 255; }},
        {"63-byte slots", field(8, 63)},
        {"0-byte slots", field(8, 0)},
        {"slots over 16 MiB", field(8, (16u << 20) + 64)},
        {"4 GiB slots", field(8, 0xffffffffu)},
        {"reserved bits", [](std::vector<uint8_t>& b) { b[6] = 1; }},
    };
    uint32_t seq = 1;
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        RawConn* raw = raw_dial(
            2 * kRawSlot,
            [&v](const RawConn& r) {
                std::vector<uint8_t> b = offer_bytes(r.own_offer(2, kRawSlot));
                v.spoil(b);
                return b;
            },
            &tc);
        ASSERT_NE(raw, nullptr);
        ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(seq, 64), 5));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 1u) << wait_closed(tc, kQuiet);
        const auto reply = message(seq + 1000, 8192);
        ASSERT_TRUE(send_frame(*t, tc, reply));
        ASSERT_TRUE(run([&] { return !raw->recvs.empty() || closed_of(rt, tc) != nullptr; }));
        ASSERT_FALSE(raw->recvs.empty()) << wait_closed(tc, kQuiet);
        EXPECT_EQ(raw->recvs[0].opcode, IBV_WC_RECV) << "sent, not written";
        EXPECT_EQ(raw->recvs[0].data, reply);
        EXPECT_EQ(t->counters().rdma_writes, 0u);
        EXPECT_TRUE(std::all_of(raw->landing, raw->landing + 2 * kRawSlot, [](uint8_t b) {
            return b == 0;
        })) << "nothing was written into the area";
        EXPECT_EQ(closed_of(rt, tc), nullptr);
        raw->disconnect();
        const std::string why = wait_closed(tc);
        EXPECT_TRUE(contains(why, "peer closed")) << why;
        ++seq;
    }
    honest_dialer_round_trip();
    EXPECT_EQ(rt.reentered, 0);
}

// The smallest valid offer (one 64-byte slot): t writes only frames that fit
// it, and nothing past it; larger ones are SENT.
TEST_F(VerbsLandingAttack, TinySlotTakesOnlyWhatFits) {
    VerbsOptions o = writer_options();
    o.write_min = 32;
    start_writer(o);
    ConnId tc = 0;
    RawConn* raw = raw_dial(
        4096,
        [](const RawConn& r) {
            std::memset(r.landing + 64, 0xee, 4096 - 64);  // a sentinel past the slot
            return offer_bytes(r.own_offer(1, 64));
        },
        &tc);
    ASSERT_NE(raw, nullptr);
    const auto big = message(1, 8192), fits = message(2, 24), over = message(3, 41);
    ASSERT_EQ(fits.size(), 48u);
    ASSERT_EQ(over.size(), 65u);
    ASSERT_TRUE(send_frame(*t, tc, big));
    ASSERT_TRUE(send_frame(*t, tc, over));
    ASSERT_TRUE(send_frame(*t, tc, fits));
    ASSERT_TRUE(run([&] { return raw->recvs.size() >= 3 || closed_of(rt, tc) != nullptr; }));
    ASSERT_EQ(raw->recvs.size(), 3u) << wait_closed(tc, kQuiet);
    EXPECT_EQ(raw->recvs[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(raw->recvs[0].data, big);
    EXPECT_EQ(raw->recvs[1].opcode, IBV_WC_RECV) << "65 bytes do not fit a 64-byte slot";
    EXPECT_EQ(raw->recvs[1].data, over);
    EXPECT_EQ(raw->recvs[2].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(raw->recvs[2].imm, 0u);
    EXPECT_EQ(std::memcmp(raw->landing, fits.data(), fits.size()), 0);
    EXPECT_TRUE(std::all_of(raw->landing + 64, raw->landing + 4096, [](uint8_t b) {
        return b == 0xee;
    })) << "t wrote past the slot";
    EXPECT_EQ(t->counters().rdma_writes, 1u);
    EXPECT_TRUE(rt.closed.empty()) << rt.closed[0].reason;
}

// Offers t cannot write into (a garbage rkey; an address outside the area;
// one that wraps around 2^64; 16 slots of 16 MiB over one real slot) end
// that connection when the WRITE fails, with the work completion's status as
// the reason, and no other: an honest connection open all along keeps
// working, and a new one is served.
TEST_F(VerbsLandingAttack, OfferTheWriterCannotUseEndsOnlyThatConnection) {
    start_writer();
    // The honest connection, open throughout.
    h = make(rh, landing_options());
    ASSERT_NE(h, nullptr);
    std::string error;
    const ConnId hc = h->connect(addr, tport, &error);
    ASSERT_NE(hc, 0u) << error;
    ASSERT_TRUE(run([&] { return has(rh.connected, hc) && !rt.accepted.empty(); }));
    const ConnId th = rt.accepted.back().first;
    uint32_t hseq = 1;
    auto honest_ping = [&] {
        const size_t before_t = frames_on(rt, th), before_h = frames_on(rh, hc);
        ASSERT_TRUE(send_frame(*h, hc, message(hseq, 64)));
        ASSERT_TRUE(run([&] { return frames_on(rt, th) > before_t; }));
        const auto reply = message(hseq + 5000, 8192);
        ASSERT_TRUE(send_frame(*t, th, reply));
        ASSERT_TRUE(run([&] { return frames_on(rh, hc) > before_h; }));
        EXPECT_TRUE(payload_matches(*last_frame_on(rh, hc), reply));
        ++hseq;
    };
    honest_ping();

    struct Variant {
        const char* name;
        size_t area;
        std::function<LandingOffer(const RawConn&)> offer;
        int good_writes;  // replies that land before the bad one
    };
    const std::vector<Variant> variants = {
        {"garbage rkey", 2 * kRawSlot,
         [](const RawConn& r) {
             LandingOffer o = r.own_offer(2, kRawSlot);
             o.rkey ^= 0x5a5a5a00u;
             return o;
         },
         0},
        {"address past the area", 2 * kRawSlot,
         [](const RawConn& r) {
             LandingOffer o = r.own_offer(2, kRawSlot);
             o.addr += uint64_t{1} << 30;
             return o;
         },
         0},
        {"address that wraps", 2 * kRawSlot,
         [](const RawConn& r) {
             LandingOffer o = r.own_offer(16, 16u << 20);
             o.addr = 0xfffffffffffff000ull;
             return o;
         },
         0},
        {"16 slots of 16 MiB over one slot", kRawSlot,
         [](const RawConn& r) { return r.own_offer(16, 16u << 20); }, 1},
    };
    uint32_t seq = 1;
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        RawConn* raw = raw_dial(
            v.area, [&v](const RawConn& r) { return offer_bytes(v.offer(r)); }, &tc);
        ASSERT_NE(raw, nullptr);
        ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(seq, 64), 0));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 1u) << wait_closed(tc, kQuiet);
        for (int i = 0; i <= v.good_writes; ++i)
            ASSERT_TRUE(send_frame(*t, tc, message(seq + 100 + i, 8192)));
        const std::string why = wait_closed(tc);
        ASSERT_FALSE(why.empty()) << "the failed WRITE did not end the connection";
        std::printf("[ bad offer ] %s: t ended it: %s\n", v.name, why.c_str());
        EXPECT_TRUE(contains(why, "work completion error") || contains(why, "queue pair error"))
            << why;
        EXPECT_EQ(closed_of(rt, tc)->frame_error, ic::FrameError::None);
        int landed = 0;
        for (const RawWc& w : raw->recvs)
            if (w.status == IBV_WC_SUCCESS && w.opcode == IBV_WC_RECV_RDMA_WITH_IMM) ++landed;
        EXPECT_EQ(landed, v.good_writes);
        EXPECT_EQ(frames_on(rt, tc), 1u);
        // Only that connection.
        EXPECT_EQ(closed_of(rt, th), nullptr);
        EXPECT_EQ(closed_of(rh, hc), nullptr);
        honest_ping();
        seq += 10;
    }
    honest_dialer_round_trip();
    EXPECT_EQ(rt.reentered, 0);
}

// ---------------------------------------------------------------------------
// 2. A hostile acceptor writing into the slots t offered.

// Each writes something the lane must refuse; each ends the connection with
// a frame error, and only the frames before it are delivered.
TEST_F(VerbsLandingAttack, WritesOutOfTurnEndTheConnection) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    struct Variant {
        const char* name;
        size_t good;  // frames written correctly first (0, 1)
        std::function<bool(RawConn&, const LandingOffer&)> attack;
        const char* reason;  // in t's on_closed reason
        ic::FrameError fe;
    };
    const auto f = message(77, 4000);
    std::vector<uint8_t> too_big(kRawSlot + 1, 0);
    std::memcpy(too_big.data(), f.data(), f.size());
    auto bad_crc = f;
    bad_crc[ic::kFrameHeaderSize + 100] ^= 0xff;  // payload no longer matches the CRC
    auto trailing = f;
    trailing.resize(f.size() + 8, 0);
    const std::vector<Variant> variants = {
        {"number 1 first", 0,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 1, f, 1); },
         "an RDMA WRITE out of turn", ic::FrameError::BadPayload},
        {"number 2^32-1 first", 0,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 1, f, 0xffffffffu); },
         "an RDMA WRITE out of turn", ic::FrameError::BadPayload},
        {"more bytes than a slot", 0,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 0, too_big, 0); },
         "an RDMA WRITE out of turn", ic::FrameError::BadPayload},
        {"a number skipped", 1,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 0, f, 2); },
         "an RDMA WRITE out of turn", ic::FrameError::BadPayload},
        {"a number repeated", 1,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 1, f, 0); },
         "an RDMA WRITE out of turn", ic::FrameError::BadPayload},
        {"zero bytes", 0,
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, 0, o.addr, o.rkey);
         },
         "bad frame from peer", ic::FrameError::Truncated},
        {"zero bytes after a frame", 1,
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, 1, o.addr + o.slot_bytes,
                           o.rkey);
         },
         "bad frame from peer", ic::FrameError::Truncated},
        {"ten bytes", 0,
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, f.data(), 10, 0, o.addr, o.rkey);
         },
         "bad frame from peer", ic::FrameError::Truncated},
        {"a bad checksum", 0,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 0, bad_crc, 0); },
         "bad_checksum", ic::FrameError::BadChecksum},
        {"bytes past the frame", 0,
         [&](RawConn& r, const LandingOffer& o) { return r.write_imm(o, 0, trailing, 0); },
         "bad_payload", ic::FrameError::BadPayload},
    };
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        LandingOffer o;
        RawConn* raw = raw_accept(&tc, &o);
        ASSERT_NE(raw, nullptr);
        for (size_t i = 0; i < v.good; ++i) {
            const auto good = message(static_cast<uint32_t>(10 + i), 4000);
            ASSERT_TRUE(raw->write_imm(o, i % o.slots, good, static_cast<uint32_t>(i)));
            ASSERT_TRUE(
                run([&] { return frames_on(rt, tc) == i + 1 || closed_of(rt, tc) != nullptr; }));
            ASSERT_EQ(frames_on(rt, tc), i + 1) << wait_closed(tc, kQuiet);
            EXPECT_TRUE(payload_matches(*last_frame_on(rt, tc), good));
        }
        ASSERT_TRUE(v.attack(*raw, o));
        const std::string why = wait_closed(tc);
        ASSERT_FALSE(why.empty()) << "the connection was not ended";
        std::printf("[ out of turn ] %s: %s\n", v.name, why.c_str());
        EXPECT_TRUE(contains(why, v.reason)) << why;
        EXPECT_TRUE(contains(why, "bad frame from peer")) << why;
        EXPECT_EQ(closed_of(rt, tc)->frame_error, v.fe) << ic::frame_error_name(v.fe);
        EXPECT_EQ(frames_on(rt, tc), v.good) << "no frame for the bad WRITE";
        EXPECT_TRUE(run([&] { return raw->disconnected; })) << "the raw side was told";
    }
    // landed_frames counts the frames delivered: the good ones, not the five
    // that passed the slot check and were refused by the frame checks after it.
    EXPECT_EQ(t->counters().landed_frames, 3u);
    honest_listener_round_trip();
    EXPECT_EQ(rt.reentered, 0);
}

// A WRITE WITH IMMEDIATE towards a side that offered nothing (an accepting
// transport; a dialer without landing slots) is out of turn too.
TEST_F(VerbsLandingAttack, WriteToASideThatOfferedNothingEndsTheConnection) {
    start_writer();
    {
        ConnId tc = 0;
        RawConn* raw = raw_dial(0, nullptr, &tc);
        ASSERT_NE(raw, nullptr);
        ASSERT_TRUE(raw->post(IBV_WR_SEND, message(1, 64)));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_TRUE(raw->post(IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, 0, 0, 0));
        const std::string why = wait_closed(tc);
        EXPECT_TRUE(contains(why, "an RDMA WRITE out of turn")) << why;
        EXPECT_EQ(frames_on(rt, tc), 1u);
    }
    honest_dialer_round_trip();

    // d: a dialer with no landing slots, against the raw acceptor.
    d = make(rd, small_options());
    ASSERT_NE(d, nullptr);
    ConnId dc = 0;
    RawConn* raw = raw_accept(&dc, nullptr, /*expect_offer=*/false, nullptr, d.get(), &rd);
    ASSERT_NE(raw, nullptr);
    const auto f = message(5, 64);
    ASSERT_TRUE(raw->post(IBV_WR_SEND, f));
    ASSERT_TRUE(run([&] { return frames_on(rd, dc) == 1 || closed_of(rd, dc) != nullptr; }));
    ASSERT_TRUE(raw->post(IBV_WR_RDMA_WRITE_WITH_IMM, nullptr, 0, 0, 0, 0));
    const std::string why = wait_closed(dc, kWait, &rd);
    EXPECT_TRUE(contains(why, "an RDMA WRITE out of turn")) << why;
    EXPECT_EQ(frames_on(rd, dc), 1u);
    honest_dialer_round_trip();
}

// The accepting side never SENDs with an immediate (it offered nothing, so it
// has nothing to give back): one that does ends the connection, and its frame
// is not delivered.
TEST_F(VerbsLandingAttack, ImmediateOfASendTowardsTheOffererIsRefused) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    ConnId tc = 0;
    LandingOffer o;
    RawConn* raw = raw_accept(&tc, &o);
    ASSERT_NE(raw, nullptr);
    ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(1, 64), 12345));
    ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
    const ClosedConn* c = closed_of(rt, tc);
    ASSERT_NE(c, nullptr) << "a SEND with an immediate from the side that offered nothing";
    EXPECT_NE(c->reason.find("an immediate on a SEND from a side that offered no landing slots"),
              std::string::npos)
        << c->reason;
    EXPECT_EQ(frames_on(rt, tc), 0u);
}

// A plain RDMA WRITE (no immediate) into a slot delivers nothing; the slots
// cannot be read (RDMA READ fails), and a WRITE outside the offered area, or
// with another rkey, fails at the writer. None of it reaches on_frame, and t
// keeps working.
TEST_F(VerbsLandingAttack, PlainWritesReadsAndWritesOutsideDeliverNothing) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    {
        ConnId tc = 0;
        LandingOffer o;
        RawConn* raw = raw_accept(&tc, &o);
        ASSERT_NE(raw, nullptr);
        ASSERT_TRUE(raw->post(IBV_WR_RDMA_WRITE, message(1, 4000), 0, o.addr, o.rkey));
        const RawWc* w = wait_sent(*raw);
        ASSERT_NE(w, nullptr);
        EXPECT_EQ(w->status, IBV_WC_SUCCESS) << "the slot is the peer's to write";
        idle(kQuiet);
        EXPECT_EQ(frames_on(rt, tc), 0u) << "a plain WRITE is no frame";
        const auto f = message(2, 4000);
        ASSERT_TRUE(raw->write_imm(o, 0, f, 0));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 1 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 1u) << wait_closed(tc, kQuiet);
        EXPECT_TRUE(payload_matches(rt.frames.back(), f));

        ASSERT_TRUE(raw->post(IBV_WR_RDMA_READ, nullptr, 4000, 0, o.addr, o.rkey));
        w = wait_sent(*raw);
        ASSERT_NE(w, nullptr);
        EXPECT_NE(w->status, IBV_WC_SUCCESS) << "the landing slots were readable by the peer";
        std::printf("[ read ] RDMA READ of a slot: %s\n", ibv_wc_status_str(w->status));
        raw->disconnect();
        const std::string why = wait_closed(tc);
        std::printf("[ read ] t: %s\n", why.c_str());
        EXPECT_FALSE(why.empty());
        EXPECT_EQ(frames_on(rt, tc), 1u);
    }
    struct Variant {
        const char* name;
        std::function<bool(RawConn&, const LandingOffer&)> attack;
    };
    const auto f = message(3, 4000);
    const std::vector<Variant> variants = {
        {"past the area",
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, f, 0, o.addr + (uint64_t{1} << 20), o.rkey);
         }},
        {"before the area",
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, f, 0, o.addr - 4096, o.rkey);
         }},
        {"another rkey",
         [&](RawConn& r, const LandingOffer& o) {
             return r.post(IBV_WR_RDMA_WRITE_WITH_IMM, f, 0, o.addr, o.rkey + 1);
         }},
    };
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        LandingOffer o;
        RawConn* raw = raw_accept(&tc, &o);
        ASSERT_NE(raw, nullptr);
        ASSERT_TRUE(v.attack(*raw, o));
        const RawWc* w = wait_sent(*raw);
        ASSERT_NE(w, nullptr);
        EXPECT_NE(w->status, IBV_WC_SUCCESS);
        std::printf("[ outside ] %s: writer sees %s\n", v.name, ibv_wc_status_str(w->status));
        std::string why = wait_closed(tc, std::chrono::seconds(2));
        if (why.empty()) {  // the responder may just NAK: the peer then hangs up
            raw->disconnect();
            why = wait_closed(tc);
        }
        std::printf("[ outside ] %s: t: %s\n", v.name, why.c_str());
        EXPECT_FALSE(why.empty());
        EXPECT_EQ(frames_on(rt, tc), 0u);
    }
    honest_listener_round_trip();
    EXPECT_EQ(rt.reentered, 0);
}

// ---------------------------------------------------------------------------
// 3. Credits that lie: a dialer whose SEND immediates give back slots that
// were never written, or go backwards.
TEST_F(VerbsLandingAttack, CreditsThatWereNeverWrittenEndTheConnection) {
    start_writer();
    struct Variant {
        const char* name;
        int writes;                    // 8 KiB replies t writes first
        std::vector<uint32_t> honest;  // immediates of SENDs that are fine
        uint32_t bad;                  // the lying immediate
    };
    const std::vector<Variant> variants = {
        {"1 back, none written", 0, {}, 1},
        {"2^32-1 back, none written", 0, {}, 0xffffffffu},
        {"3 back, 2 written", 2, {}, 3},
        {"backwards: 2 then 1", 2, {0, 2}, 1},
        {"backwards past 0: 2 then 2^32-1", 2, {2}, 0xffffffffu},
    };
    uint32_t seq = 1;
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        RawConn* raw = raw_dial(
            2 * kRawSlot, [](const RawConn& r) { return offer_bytes(r.own_offer(2, kRawSlot)); },
            &tc);
        ASSERT_NE(raw, nullptr);
        for (int i = 0; i < v.writes; ++i)
            ASSERT_TRUE(send_frame(*t, tc, message(seq + 100 + i, 8192)));
        ASSERT_TRUE(run([&] { return raw->recvs.size() == static_cast<size_t>(v.writes); }));
        for (const RawWc& w : raw->recvs) EXPECT_EQ(w.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
        size_t delivered = 0;
        for (uint32_t imm : v.honest) {
            ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(seq++, 64), imm));
            ++delivered;
            ASSERT_TRUE(run(
                [&] { return frames_on(rt, tc) == delivered || closed_of(rt, tc) != nullptr; }));
            ASSERT_EQ(frames_on(rt, tc), delivered) << wait_closed(tc, kQuiet);
        }
        ASSERT_TRUE(raw->post(IBV_WR_SEND_WITH_IMM, message(seq++, 64), v.bad));
        const std::string why = wait_closed(tc);
        std::printf("[ credits ] %s: %s\n", v.name, why.c_str());
        EXPECT_TRUE(contains(why, "landing slots given back that were never written")) << why;
        EXPECT_EQ(closed_of(rt, tc)->frame_error, ic::FrameError::BadPayload);
        EXPECT_EQ(frames_on(rt, tc), delivered) << "no frame for the lying SEND";
        seq += 10;
    }
    honest_dialer_round_trip();
    EXPECT_EQ(rt.reentered, 0);
}

// ---------------------------------------------------------------------------
// Where the lane's checks fall short (see the report in each failure).

// A WRITE WITH IMMEDIATE tells the lane a number and a length, not where the
// bytes went: the lane checks the slot the number names. A writer that puts
// its bytes elsewhere in the area (another slot, the page's tail past the
// last slot) makes the lane deliver whatever that slot still holds: here an
// earlier frame of the same connection, delivered a second time. The lane
// should refuse it (a slot is emptied once consumed).
TEST_F(VerbsLandingAttack, StaleSlotIsNotDeliveredAgain) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    struct Variant {
        const char* name;
        uint64_t offset;  // where the third frame's bytes go, from the area's start
    };
    const std::vector<Variant> variants = {
        {"into slot 1", kRawSlot},
        {"into the tail past the last slot", 2 * uint64_t{kRawSlot}},
    };
    for (const Variant& v : variants) {
        SCOPED_TRACE(v.name);
        ConnId tc = 0;
        LandingOffer o;
        RawConn* raw = raw_accept(&tc, &o);
        ASSERT_NE(raw, nullptr);
        const auto f0 = message(1, 1000), f1 = message(2, 1000);
        ASSERT_TRUE(raw->write_imm(o, 0, f0, 0));
        ASSERT_TRUE(raw->write_imm(o, 1, f1, 1));
        ASSERT_TRUE(run([&] { return frames_on(rt, tc) == 2 || closed_of(rt, tc) != nullptr; }));
        ASSERT_EQ(frames_on(rt, tc), 2u) << wait_closed(tc, kQuiet);
        // Frame 2 belongs in slot 0; its bytes (junk) go elsewhere.
        const std::vector<uint8_t> junk(f0.size(), 0xa5);
        ASSERT_TRUE(raw->post(IBV_WR_RDMA_WRITE_WITH_IMM, junk, 2, o.addr + v.offset, o.rkey));
        const RawWc* w = wait_sent(*raw);
        ASSERT_NE(w, nullptr);
        ASSERT_EQ(w->status, IBV_WC_SUCCESS) << "inside the registered area";
        run([&] { return frames_on(rt, tc) > 2 || closed_of(rt, tc) != nullptr; });
        idle(kQuiet);
        if (frames_on(rt, tc) > 2)
            std::printf("[ stale ] %s: delivered again: seq %u\n", v.name,
                        last_frame_on(rt, tc)->h.seq);
        EXPECT_EQ(frames_on(rt, tc), 2u)
            << "BUG: frame 0's bytes, left in slot 0, were delivered again (seq "
            << last_frame_on(rt, tc)->h.seq << ") for a WRITE whose bytes went elsewhere";
        EXPECT_NE(closed_of(rt, tc), nullptr) << "the WRITE should have been refused";
        t->close(tc);
        wait_closed(tc);
    }
    honest_listener_round_trip();
}

// The same across connections: a landing area is not cleared when it is
// made, so one that reuses the memory of an earlier connection's area (same
// size, freed, allocated again) may still hold that connection's last frame,
// which the next peer can have delivered as its own without knowing it. With
// glibc the frame survives the free when the chunk goes back to the top of
// the heap (a binned chunk gets list pointers over the frame's header), so a
// few rounds are tried; any stale frame delivered is the bug.
TEST_F(VerbsLandingAttack, EarlierConnectionsFrameIsNotDeliveredOnTheNext) {
    VerbsOptions lo = landing_options();
    lo.landing_slots = 1;  // 16448 bytes in a 20480-byte area: a tail to aim at
    t = make(rt, lo);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    int reused = 0, stale = 0;
    for (uint32_t round = 0; round < 6; ++round) {
        SCOPED_TRACE(round);
        ConnId c1 = 0;
        LandingOffer o1;
        RawConn* honest = raw_accept(&c1, &o1);
        ASSERT_NE(honest, nullptr);
        const auto secret = message(4242 + round, 2000);
        ASSERT_TRUE(honest->write_imm(o1, 0, secret, 0));
        ASSERT_TRUE(run([&] { return frames_on(rt, c1) == 1 || closed_of(rt, c1) != nullptr; }));
        ASSERT_EQ(frames_on(rt, c1), 1u);
        t->close(c1);
        wait_closed(c1);
        idle(std::chrono::milliseconds(100));  // reaped: the area is freed

        ConnId c2 = 0;
        LandingOffer o2;
        RawConn* hostile = raw_accept(&c2, &o2);
        ASSERT_NE(hostile, nullptr);
        if (o1.addr == o2.addr) ++reused;
        const std::vector<uint8_t> junk(secret.size(), 0x5a);
        ASSERT_TRUE(
            hostile->post(IBV_WR_RDMA_WRITE_WITH_IMM, junk, 0, o2.addr + o2.slot_bytes, o2.rkey));
        const RawWc* w = wait_sent(*hostile);
        ASSERT_NE(w, nullptr);
        ASSERT_EQ(w->status, IBV_WC_SUCCESS);
        run([&] { return frames_on(rt, c2) > 0 || closed_of(rt, c2) != nullptr; });
        const bool delivered = frames_on(rt, c2) > 0;
        if (delivered) ++stale;
        std::printf("[ stale ] round %u: area %s; connection 2 %s\n", round,
                    o1.addr == o2.addr ? "reused" : "new",
                    delivered ? (payload_matches(*last_frame_on(rt, c2), secret)
                                     ? "delivered connection 1's frame"
                                     : "delivered some other frame")
                              : wait_closed(c2).c_str());
        EXPECT_FALSE(delivered)
            << "BUG: connection 1's frame (seq " << last_frame_on(rt, c2)->h.seq
            << ") was delivered on connection 2, whose peer wrote only junk past the slot";
        if (closed_of(rt, c2) == nullptr) t->close(c2);
        wait_closed(c2);
    }
    std::printf("[ stale ] %d of 6 areas reused the earlier one's memory; %d stale deliveries\n",
                reused, stale);
}

// An rkey is good on every queue pair of the protection domain, and all of a
// transport's queue pairs share one: so a transport with landing slots carries
// one connection (a second connect is refused while the first lives) and does
// not listen, and no other peer can reach its slots. Its one connection works.
TEST_F(VerbsLandingAttack, LandingTransportCarriesOneConnection) {
    t = make(rt, landing_options());
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(start_raw_listener());
    ConnId cx = 0;
    LandingOffer ox;
    RawConn* x = raw_accept(&cx, &ox);
    ASSERT_NE(x, nullptr);
    std::string error;
    EXPECT_EQ(t->connect(addr, rport, &error), 0u) << "a second connection beside the first";
    EXPECT_NE(error.find("carries one connection"), std::string::npos) << error;
    error.clear();
    EXPECT_FALSE(t->listen(addr, static_cast<uint16_t>(rport + 1), &error));
    EXPECT_NE(error.find("does not listen"), std::string::npos) << error;
    const auto honest = message(1, 4000);
    ASSERT_TRUE(x->write_imm(ox, 0, honest, 0));
    ASSERT_TRUE(run([&] { return frames_on(rt, cx) == 1 || closed_of(rt, cx) != nullptr; }));
    ASSERT_EQ(frames_on(rt, cx), 1u) << wait_closed(cx, kQuiet);
    EXPECT_TRUE(payload_matches(*last_frame_on(rt, cx), honest));
}

// ---------------------------------------------------------------------------
// Beyond landing: a peer that never posts a receive holds every frame sent to
// it in RNR retry (forever: rnr_retry 7), and with it a send slot of the pool
// that all connections share. Enough such peers to hold every slot, with
// their queue pairs' depth each (found by this suite), once could; now the
// last quarter of the slots goes only to connections with fewer than 4 frames
// in flight (docs/rdma.md, "Send slots and peers that do not receive"), so
// the honest peer's frame arrives while they stay, and their slots come back
// when they go.
TEST_F(VerbsLandingAttack, PeersThatNeverReceiveCannotTakeEverySlot) {
    start_writer();
    h = make(rh, landing_options());
    ASSERT_NE(h, nullptr);
    std::string error;
    const ConnId hc = h->connect(addr, tport, &error);
    ASSERT_NE(hc, 0u) << error;
    ASSERT_TRUE(run([&] { return has(rh.connected, hc) && !rt.accepted.empty(); }));
    const ConnId th = rt.accepted.back().first;
    const VerbsOptions so = writer_options();
    const uint32_t hostile = so.send_slots / so.qp_send_depth + 1;
    for (uint32_t k = 0; k < hostile; ++k) {
        auto r = std::make_unique<RawConn>();
        r->post_receives = false;
        ASSERT_TRUE(r->dial(addr, tport, &error)) << error;
        RawConn* raw = r.get();
        raws.push_back(std::move(r));
        const size_t na = rt.accepted.size();
        ASSERT_TRUE(run([&] { return raw->established && rt.accepted.size() > na; }));
        const ConnId tc = rt.accepted.back().first;
        for (uint32_t i = 0; i < so.qp_send_depth + 4; ++i)
            ASSERT_TRUE(send_frame(*t, tc, message(i, 64)));
    }
    idle(std::chrono::milliseconds(300));
    const auto reply = message(9, 64);
    ASSERT_TRUE(send_frame(*t, th, reply));
    EXPECT_TRUE(run([&] { return frames_on(rh, hc) == 1; }, std::chrono::seconds(5)))
        << hostile << " peers that never receive starved an honest connection; t queued "
        << t->queued_bytes(th) << " bytes for it";
    // They hold at most the slots above the reserve and 4 each of it.
    EXPECT_GT(t->counters().send_queue_waits, 0u) << "the hostile peers' frames did queue";
    // Once they hang up (their QPs torn down), the slots come back: a second
    // honest frame goes at once.
    raws.clear();
    ASSERT_TRUE(send_frame(*t, th, message(10, 64)));
    EXPECT_TRUE(run([&] { return frames_on(rh, hc) == 2; }))
        << "stuck after the hostile peers left";
    EXPECT_EQ(closed_of(rt, th), nullptr);
    honest_dialer_round_trip();
}
