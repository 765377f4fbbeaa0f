// The verbs tier's transport object. tiers/verbs/transport.cpp: device and queue
// setup, the poll loop, async events and CQ rebuilds; tiers/verbs/transport_cm.cpp:
// rdma_cm connection lifecycle; tiers/verbs/transport_io.cpp: posting sends,
// completions and receive delivery.
//
// wait_fd() is the event loop's epoll fd (event_loop.hpp) over the rdma_cm
// event channel, the CQ completion channel and the device's async event fd;
// the loop's wake (reports pending, async events filed by another transport)
// and timer (connect deadlines) wake it too.
//
// Like the TCP tier, callbacks come only from poll(), and a connection's entry
// is erased only after its end is reported (never inside a callback). Its queue
// pair lives on until the device has flushed every send posted on it, so a
// send slot is never reused while the device may still read it.
#pragma once

#include <rdma/rdma_cma.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tiers/event_loop.hpp"
#include "tiers/transports.hpp"
#include "tiers/verbs/async_events.hpp"
#include "tiers/verbs/buffer_pool.hpp"
#include "tiers/verbs/landing.hpp"
#include "tiers/verbs/mr_cache.hpp"
#include "tiers/verbs/transport.hpp"

namespace pgrac::tiers {

// wr_id of a receive work request: this bit | the slot; a send's is its slot.
inline constexpr uint64_t kVerbsRecvFlag = uint64_t{1} << 63;

enum class VerbsConnState { Connecting, Open, Closed };

enum class VerbsCloseCause {
    Local,
    PeerClosed,   // DISCONNECTED without a local close
    BadFrame,     // frame_error
    WcError,      // a work completion with an error status (wc_status)
    QpFatal,      // IBV_EVENT_QP_FATAL / QP_REQ_ERR / QP_ACCESS_ERR
    CqOverflow,   // the shared CQ overflowed; every connection is rebuilt
    DeviceFatal,  // IBV_EVENT_DEVICE_FATAL or RDMA_CM_EVENT_DEVICE_REMOVAL
    PostFailed,   // ibv_post_send failed (err)
    OutOfMemory,
    Internal,        // an exception from a handler callback
    ConnectFailed,   // rdma_cm said why in detail; reported through on_connected(false)
    ConnectTimeout,  // reported through on_connected(false)
};

// The landing slots an outbound connection offers its peer (landing.hpp):
// page-aligned memory registered for remote write, one MR per connection so
// that its rkey reaches nothing else. Freed after the QP is destroyed.
struct LandingArea {
    uint8_t* buf = nullptr;
    size_t bytes = 0;
    uint32_t slot_bytes = 0, slots = 0;
    ibv_mr* mr = nullptr;
    LandingArea() = default;
    LandingArea(const LandingArea&) = delete;
    LandingArea& operator=(const LandingArea&) = delete;
    ~LandingArea();
    uint8_t* slot(long i) const { return buf + static_cast<size_t>(i) * slot_bytes; }
};

struct VerbsConn {
    ConnId id = 0;
    rdma_cm_id* cm = nullptr;
    ibv_qp* qp = nullptr;
    uint32_t qpn = 0;
    VerbsConnState state = VerbsConnState::Connecting;
    bool inbound = false;
    bool announced = false;     // on_connected(true) / on_accepted was made
    bool cm_connected = false;  // rdma_connect/rdma_accept was issued
    bool reported = false;      // the end was reported; kept only until the QP is flushed
    std::string target;         // "host:port" of an outbound connection
    std::string peer_host;      // numeric address of the peer
    uint32_t max_payload = 0;   // largest payload received; larger frames end the connection
    std::chrono::steady_clock::time_point deadline;

    std::deque<std::vector<uint8_t>> queue;  // frames waiting for a send slot / SQ room
    size_t queued_bytes = 0;
    uint32_t posted = 0;      // send WRs not yet completed
    uint32_t max_posted = 0;  // the QP's max_send_wr
    size_t inflight_bytes = 0;

    // Frames by RDMA WRITE: the slots this side offered and how far their
    // frames are consumed (outbound), the slots the peer offered (inbound).
    std::unique_ptr<LandingArea> landing;
    LandingReader landing_reader;
    LandingCredits landing_writer;

    bool report_pending = false;
    VerbsCloseCause cause = VerbsCloseCause::Local;
    int err = 0;
    std::string detail;  // extra text for the reason (wc status, cm event)
    ic::FrameError frame_error = ic::FrameError::None;
};

// What a posted send holds until its completion.
struct VerbsSendCtx {
    ConnId conn = 0;
    uint32_t bytes = 0;
    const void* pin_base = nullptr;  // MR cache entry pinned for zero-copy
    size_t pin_len = 0;
};

class VerbsTransport final : public Transport {
  public:
    VerbsTransport(TransportHandler& handler, const VerbsOptions& opts);
    ~VerbsTransport() override;
    VerbsTransport(const VerbsTransport&) = delete;
    VerbsTransport& operator=(const VerbsTransport&) = delete;

    bool start(std::string* error);  // false: unusable, *error says why

    const char* name() const override { return "verbs"; }
    bool listen(const std::string& host, uint16_t port, std::string* error) override;
    ConnId connect(const std::string& host, uint16_t port, std::string* error) override;
    bool send(ConnId conn, const iovec* iov, int iovcnt) override;
    uint8_t* reserve_frame(ConnId conn, size_t bytes) override;
    bool lends_frames() const override { return true; }
    bool send_reserved(ConnId conn, size_t bytes) override;
    void cancel_reserved(ConnId conn) override;
    size_t queued_bytes(ConnId conn) const override;
    void set_max_payload(ConnId conn, uint32_t max_payload) override;
    void close(ConnId conn) override;
    int wait_fd() const override { return loop_.fd(); }
    void poll(int timeout_ms) override;
    void poll_now() override;
    uint32_t max_payload() const override { return max_payload_; }
    TransportCounters counters() const override;

    const VerbsStatus& status() const { return status_; }
    size_t in_flight(ConnId conn) const;
    bool register_region(const void* addr, size_t len, std::string* error);
    bool region_in_flight(const void* addr, size_t len) const;

  private:
    VerbsConn* find(ConnId id) const;       // any entry, reported ones too
    VerbsConn* find_live(ConnId id) const;  // not yet reported
    VerbsConn* find_qpn(uint32_t qpn) const;

    // setup (tiers/verbs/transport.cpp)
    bool open_device(std::string* error);
    bool create_queues(int cq_depth, std::string* error);
    void destroy_queues();
    bool post_all_receives(std::string* error);
    void rebuild_queues(const std::string& why);
    void handle_async_events();
    void get_cq_events();
    void rearm_timer();
    void expire_connects();
    void deliver_reports();
    void reap();
    std::string end_text(const VerbsConn& c) const;
    void note_gid(rdma_cm_id* id);

    // connection lifecycle (tiers/verbs/transport_cm.cpp)
    void process_cm_events();
    void on_cm_event(const rdma_cm_event& ev);
    void on_connect_request(rdma_cm_id* id, const void* private_data, size_t private_len);
    bool create_qp(VerbsConn& c, std::string* error);
    void destroy_qp(VerbsConn& c);
    void established(VerbsConn& c);
    void end(VerbsConn& c, VerbsCloseCause cause, int err = 0, std::string detail = {},
             ic::FrameError fe = ic::FrameError::None);

    // data path (tiers/verbs/transport_io.cpp)
    enum class PostResult { Posted, Busy, Failed };
    // reserved >= 0: the frame is already in that send slot (reserve_frame).
    PostResult post_frame(VerbsConn& c, const iovec* iov, int iovcnt, size_t total,
                          long reserved = -1);
    void flush_queue(VerbsConn& c);
    void flush_backlog();
    int drain_cq();
    void on_completion(const ibv_wc& wc);
    void on_send_done(const ibv_wc& wc, uint32_t slot);
    void on_recv(const ibv_wc& wc, uint32_t slot);
    // The frame at p (len bytes) checked and handed to on_frame; false if it
    // was refused (the connection ends).
    bool deliver_frame(VerbsConn& c, const uint8_t* p, size_t len);
    bool make_landing(VerbsConn& c, std::string* error);
    void repost_recv(uint32_t slot);

    TransportHandler& handler_;
    const VerbsOptions opts_;
    const uint32_t max_payload_;
    const uint32_t initial_max_payload_;  // a new connection's limit
    VerbsStatus status_;

    // rdma_cm and device
    rdma_event_channel* cm_channel_ = nullptr;
    ibv_context** devices_ = nullptr;  // rdma_get_devices(); the contexts belong to librdmacm
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_comp_channel* comp_channel_ = nullptr;
    ibv_cq* cq_ = nullptr;
    ibv_srq* srq_ = nullptr;
    int cq_depth_ = 0;
    unsigned cq_events_unacked_ = 0;
    uint32_t max_inline_ = 0;
    uint32_t srq_depth_ = 0;
    bool queues_broken_ = false;  // rebuild failed: no new connections

    // buffers: slots [0, send_slots) send, [send_slots, +recv_slots) receive
    BufferPool pool_;
    ibv_mr* pool_mr_ = nullptr;
    SlotList send_free_;
    // The send slots are shared by every connection, and a frame to a peer
    // that posts no receive holds its slot in RNR retry for as long as the
    // peer stays connected. So the last quarter of them goes only to a
    // connection with fewer than kSlotsBelowReserve frames in flight: peers
    // that never receive can take at most the rest, kSlotsBelowReserve each
    // from the reserve, and every other connection still gets a slot.
    static constexpr uint32_t kSlotsBelowReserve = 4;
    bool may_take_slot(const VerbsConn& c) const;
    long reserved_slot_ = -1;  // lent by reserve_frame() until send_reserved()
    ConnId reserved_conn_ = 0;
    std::vector<VerbsSendCtx> send_ctx_;
    std::unique_ptr<MrRegistrar> registrar_;
    std::unique_ptr<MrCache> mr_cache_;

    // event plumbing
    EventLoop loop_;
    std::unique_ptr<VerbsAsyncInbox> inbox_;
    bool async_attached_ = false;
    bool rebuild_requested_ = false;
    std::string rebuild_reason_;

    std::vector<uint8_t> cm_private_;  // a connect request's private data, kept past its ack
    std::vector<rdma_cm_id*> listeners_;
    std::unordered_map<ConnId, std::unique_ptr<VerbsConn>> conns_;
    std::unordered_map<uint32_t, ConnId> by_qpn_;
    ConnId next_id_ = 1;
    unsigned quick_polls_ = 0;  // poll(0) calls, for the epoll_wait cadence
    TransportCounters counters_;
};

}  // namespace pgrac::tiers
