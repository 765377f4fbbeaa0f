// Verbs tier: connection lifecycle through librdmacm. Outbound: resolve the
// address (which names the device), create the QP, resolve the route,
// connect. Inbound: a connect request on a listening id gets a QP and an
// accept. Either side is usable, and announced, at ESTABLISHED (an accepted
// one also at its first received frame, which may come first: tiers/verbs/transport_io.cpp).
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "tiers/conn_bookkeeping.hpp"
#include "ic/transport/socket.hpp"
#include "tiers/verbs/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

constexpr int kListenBacklog = 128;
constexpr uint8_t kRetryCount = 7;     // transport retries before a QP errors out
constexpr uint8_t kRnrRetryCount = 7;  // 7 = retry forever on receiver-not-ready (backstop)

ConnId conn_of(const rdma_cm_id* id) {
    return id == nullptr ? 0 : static_cast<ConnId>(reinterpret_cast<uintptr_t>(id->context));
}

void* context_of(ConnId id) {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(id));
}

std::string numeric_host(const sockaddr* sa) {
    if (sa == nullptr) return "";
    char host[NI_MAXHOST];
    const socklen_t len = sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    if (getnameinfo(sa, len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "";
    return host;
}

bool resolve(const std::string& host, uint16_t port, bool passive, addrinfo** out,
             std::string* error) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    const std::string service = std::to_string(port);
    const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, out);
    if (rc != 0) {
        *error = "cannot resolve " + host + ": " + gai_strerror(rc);
        return false;
    }
    return true;
}

rdma_conn_param conn_param(const uint8_t* private_data = nullptr, uint8_t private_len = 0) {
    rdma_conn_param p{};
    p.private_data = private_data;
    p.private_data_len = private_len;
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.retry_count = kRetryCount;
    p.rnr_retry_count = kRnrRetryCount;
    return p;
}

}  // namespace

LandingArea::~LandingArea() {
    if (mr != nullptr) ibv_dereg_mr(mr);
    std::free(buf);
}

bool VerbsTransport::make_landing(VerbsConn& c, std::string* error) {
    auto a = std::make_unique<LandingArea>();
    a->slots = std::min(opts_.landing_slots, kMaxLandingSlots);
    a->slot_bytes =
        static_cast<uint32_t>(BufferPool::round_slot(ic::kFrameHeaderSize + max_payload_));
    const size_t page = 4096;
    a->bytes = (size_t{a->slots} * a->slot_bytes + page - 1) / page * page;
    a->buf = static_cast<uint8_t*>(std::aligned_alloc(page, a->bytes));
    if (a->buf == nullptr) {
        *error = "landing slots: out of memory";
        return false;
    }
    // Zeros: a slot whose frame is consumed has its header cleared again
    // (transport_io.cpp), so a WRITE that put its bytes elsewhere finds no
    // frame where its number points, never an old one.
    std::memset(a->buf, 0, a->bytes);
    a->mr = ibv_reg_mr(pd_, a->buf, a->bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (a->mr == nullptr) {
        *error = "ibv_reg_mr of the " + std::to_string(a->bytes) +
                 "-byte landing slots (check ulimit -l): " + std::strerror(errno);
        return false;
    }
    c.landing_reader = LandingReader(a->slots, a->slot_bytes);
    c.landing = std::move(a);
    return true;
}

bool VerbsTransport::listen(const std::string& host, uint16_t port, std::string* error) {
    if (opts_.landing_slots > 0) {
        // An rkey is good on every queue pair of the protection domain: any
        // other connection could write into the landing slots.
        *error = "a verbs transport with landing slots does not listen";
        return false;
    }
    try {
        addrinfo* ai = nullptr;
        if (!resolve(host, port, true, &ai, error)) return false;
        size_t bound = 0;
        std::string first_error;
        for (addrinfo* a = ai; a != nullptr; a = a->ai_next) {
            rdma_cm_id* id = nullptr;
            std::string this_error;
            if (rdma_create_id(cm_channel_, &id, nullptr, RDMA_PS_TCP) != 0) {
                this_error = std::string("rdma_create_id: ") + std::strerror(errno);
            } else if (rdma_bind_addr(id, a->ai_addr) != 0) {
                this_error = "rdma_bind_addr(" + numeric_host(a->ai_addr) + ":" +
                             std::to_string(port) + "): " + std::strerror(errno);
            } else if (id->verbs != nullptr && id->verbs != ctx_) {
                this_error = numeric_host(a->ai_addr) + " belongs to RDMA device " +
                             ibv_get_device_name(id->verbs->device) + ", not " + status_.device;
            } else if (rdma_listen(id, kListenBacklog) != 0) {
                this_error = std::string("rdma_listen: ") + std::strerror(errno);
            } else {
                listeners_.push_back(id);
                ++bound;
                continue;
            }
            if (id != nullptr) rdma_destroy_id(id);
            if (first_error.empty()) first_error = this_error;
        }
        freeaddrinfo(ai);
        return listen_outcome(bound, first_error, error);
    } catch (...) {
        set_error_nothrow(error, "cannot listen: out of memory");
        return false;
    }
}

ConnId VerbsTransport::connect(const std::string& host, uint16_t port, std::string* error) {
    if (queues_broken_) {
        *error = "verbs transport unusable: " + status_.cq_note;
        return 0;
    }
    if (opts_.landing_slots > 0)
        for (const auto& [other, oc] : conns_)
            if (oc->state != VerbsConnState::Closed) {
                // One connection: its landing MR's rkey would be good on the
                // other's queue pair too (one protection domain).
                *error = "connect to " + ic::endpoint_text(host, port) +
                         " refused: a verbs transport with landing slots carries one connection";
                return 0;
            }
    ConnId id = 0;
    addrinfo* ai = nullptr;
    try {
        if (!resolve(host, port, false, &ai, error)) return 0;
        id = next_id_++;
        auto owned = std::make_unique<VerbsConn>();
        VerbsConn& c = *owned;
        c.id = id;
        c.max_payload = initial_max_payload_;
        c.target = ic::endpoint_text(host, port);
        c.peer_host = numeric_host(ai->ai_addr);
        c.deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
        if (rdma_create_id(cm_channel_, &c.cm, context_of(id), RDMA_PS_TCP) != 0) {
            *error = std::string("rdma_create_id: ") + std::strerror(errno);
            freeaddrinfo(ai);
            return 0;
        }
        conns_.emplace(id, std::move(owned));
        if (opts_.landing_slots > 0 && !make_landing(c, error)) {
            *error = "connect to " + c.target + " failed: " + *error;
            rdma_destroy_id(c.cm);
            conns_.erase(id);
            freeaddrinfo(ai);
            return 0;
        }
        const int timeout = opts_.connect_timeout_ms > 0 ? opts_.connect_timeout_ms : 5000;
        if (rdma_resolve_addr(c.cm, nullptr, ai->ai_addr, timeout) != 0) {
            *error =
                "connect to " + c.target + " failed: rdma_resolve_addr: " + std::strerror(errno);
            rdma_destroy_id(c.cm);
            conns_.erase(id);
            freeaddrinfo(ai);
            return 0;
        }
        freeaddrinfo(ai);
        rearm_timer();
        return id;
    } catch (...) {
        if (ai != nullptr) freeaddrinfo(ai);
        if (VerbsConn* c = find(id); c != nullptr) {
            if (c->cm != nullptr) rdma_destroy_id(c->cm);
            conns_.erase(id);
        }
        set_error_nothrow(error, "connect failed: out of memory");
        return 0;
    }
}

void VerbsTransport::close(ConnId conn) {
    VerbsConn* c = find_live(conn);
    if (c != nullptr && c->state != VerbsConnState::Closed) end(*c, VerbsCloseCause::Local);
}

// An RC QP on the shared CQ and SRQ. Receives never go to the QP itself.
bool VerbsTransport::create_qp(VerbsConn& c, std::string* error) {
    if (c.cm->verbs != ctx_) {
        *error = std::string("the route uses RDMA device ") +
                 (c.cm->verbs ? ibv_get_device_name(c.cm->verbs->device) : "(none)") +
                 ", this transport runs on " + status_.device;
        return false;
    }
    if (cq_ == nullptr || srq_ == nullptr) {
        *error = "completion queue unavailable: " + status_.cq_note;
        return false;
    }
    ibv_qp_init_attr ia{};
    ia.qp_context = context_of(c.id);
    ia.send_cq = ia.recv_cq = cq_;
    ia.srq = srq_;
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = 0;
    ia.cap.max_send_wr = status_.qp_send_depth;
    ia.cap.max_recv_wr = 0;
    ia.cap.max_send_sge = 3;  // header, payload in place, tag (transport_io.cpp)
    ia.cap.max_recv_sge = 1;
    ia.cap.max_inline_data = max_inline_;
    if (rdma_create_qp(c.cm, pd_, &ia) != 0) {
        *error = std::string("rdma_create_qp: ") + std::strerror(errno);
        return false;
    }
    c.qp = c.cm->qp;
    c.qpn = c.qp->qp_num;
    c.max_posted = ia.cap.max_send_wr;
    by_qpn_[c.qpn] = c.id;
    verbs_async_own(c.qp, inbox_.get());
    return true;
}

void VerbsTransport::destroy_qp(VerbsConn& c) {
    if (c.qp == nullptr) return;
    verbs_async_disown(c.qp);
    by_qpn_.erase(c.qpn);
    rdma_destroy_qp(c.cm);
    c.qp = nullptr;
}

void VerbsTransport::process_cm_events() {
    for (int i = 0; i < 64; ++i) {
        rdma_cm_event* ev = nullptr;
        if (rdma_get_cm_event(cm_channel_, &ev) != 0) return;  // EAGAIN: drained
        rdma_cm_event copy = *ev;
        // A connect request's private data (a landing offer) lives in the
        // event: kept before the ack frees it.
        if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
            const auto* pd = static_cast<const uint8_t*>(ev->param.conn.private_data);
            cm_private_.assign(pd, pd == nullptr ? pd : pd + ev->param.conn.private_data_len);
            copy.param.conn.private_data = cm_private_.data();
            copy.param.conn.private_data_len = static_cast<uint8_t>(cm_private_.size());
        }
        // Ack first: rdma_destroy_id waits for its events to be acked.
        rdma_ack_cm_event(ev);
        on_cm_event(copy);
    }
}

void VerbsTransport::on_cm_event(const rdma_cm_event& ev) {
    if (ev.event == RDMA_CM_EVENT_CONNECT_REQUEST) {
        on_connect_request(ev.id, ev.param.conn.private_data, ev.param.conn.private_data_len);
        return;
    }
    if (ev.event == RDMA_CM_EVENT_DEVICE_REMOVAL) {
        for (auto& [id, c] : conns_)
            if (c->state != VerbsConnState::Closed)
                end(*c, VerbsCloseCause::DeviceFatal, 0, "RDMA_CM_EVENT_DEVICE_REMOVAL");
        queues_broken_ = true;
        return;
    }
    VerbsConn* c = find_live(conn_of(ev.id));
    if (c == nullptr || c->cm != ev.id || c->state == VerbsConnState::Closed) return;
    const std::string what = std::string(rdma_event_str(ev.event)) +
                             (ev.status != 0 ? " (status " + std::to_string(ev.status) + ")" : "");
    try {
        std::string error;
        switch (ev.event) {
            case RDMA_CM_EVENT_ADDR_RESOLVED:
                if (!create_qp(*c, &error)) {
                    end(*c, VerbsCloseCause::ConnectFailed, 0, error);
                } else if (rdma_resolve_route(c->cm, opts_.connect_timeout_ms > 0
                                                         ? opts_.connect_timeout_ms
                                                         : 5000) != 0) {
                    end(*c, VerbsCloseCause::ConnectFailed, 0,
                        std::string("rdma_resolve_route: ") + std::strerror(errno));
                }
                break;
            case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                // The landing slots are offered once, with the connect request.
                uint8_t offer[kLandingOfferSize];
                if (c->landing != nullptr) {
                    LandingOffer o;
                    o.addr = reinterpret_cast<uintptr_t>(c->landing->buf);
                    o.rkey = c->landing->mr->rkey;
                    o.slot_bytes = c->landing->slot_bytes;
                    o.slots = c->landing->slots;
                    encode_landing_offer(o, offer);
                }
                rdma_conn_param p =
                    c->landing != nullptr ? conn_param(offer, sizeof offer) : conn_param();
                if (rdma_connect(c->cm, &p) != 0)
                    end(*c, VerbsCloseCause::ConnectFailed, 0,
                        std::string("rdma_connect: ") + std::strerror(errno));
                else
                    c->cm_connected = true;
                break;
            }
            case RDMA_CM_EVENT_ESTABLISHED:
                // An accepted connection may be announced already, by its first frame.
                if (!c->announced) established(*c);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
                end(*c, VerbsCloseCause::PeerClosed);
                break;
            case RDMA_CM_EVENT_ADDR_ERROR:
            case RDMA_CM_EVENT_ROUTE_ERROR:
            case RDMA_CM_EVENT_UNREACHABLE:
            case RDMA_CM_EVENT_CONNECT_ERROR:
            case RDMA_CM_EVENT_REJECTED:
                end(*c, c->announced ? VerbsCloseCause::QpFatal : VerbsCloseCause::ConnectFailed, 0,
                    ev.event == RDMA_CM_EVENT_REJECTED ? what + " (nothing listening there?)"
                                                       : what);
                break;
            default:  // TIMEWAIT_EXIT, ADDR_CHANGE, ...
                break;
        }
    } catch (const std::bad_alloc&) {
        if (c->state != VerbsConnState::Closed) end(*c, VerbsCloseCause::OutOfMemory);
    } catch (...) {
        if (c->state != VerbsConnState::Closed) end(*c, VerbsCloseCause::Internal);
    }
}

void VerbsTransport::on_connect_request(rdma_cm_id* id, const void* private_data,
                                        size_t private_len) {
    ConnId cid = 0;
    try {
        std::string error;
        if (queues_broken_) {
            rdma_reject(id, nullptr, 0);
            rdma_destroy_id(id);
            return;
        }
        cid = next_id_++;
        auto owned = std::make_unique<VerbsConn>();
        VerbsConn& c = *owned;
        c.id = cid;
        c.max_payload = initial_max_payload_;
        c.cm = id;
        c.inbound = true;
        c.peer_host = numeric_host(rdma_get_peer_addr(id));
        c.deadline =
            std::chrono::steady_clock::now() + std::chrono::milliseconds(opts_.connect_timeout_ms);
        id->context = context_of(cid);
        // A dialer's landing offer: frames to it may go by RDMA WRITE. Anything
        // else there (nothing, another version) leaves it to SENDs.
        LandingOffer offer;
        if (decode_landing_offer(private_data, private_len, &offer))
            c.landing_writer = LandingCredits(offer);
        conns_.emplace(cid, std::move(owned));
        rdma_conn_param p = conn_param();
        if (!create_qp(c, &error) || rdma_accept(id, &p) != 0) {
            // Never announced: drop it quietly (the dialer sees a reject).
            destroy_qp(c);
            rdma_reject(id, nullptr, 0);
            rdma_destroy_id(id);
            conns_.erase(cid);
            return;
        }
        c.cm_connected = true;
        rearm_timer();
    } catch (...) {
        if (VerbsConn* c = find(cid); c != nullptr) {
            destroy_qp(*c);
            conns_.erase(cid);
        }
        rdma_reject(id, nullptr, 0);
        rdma_destroy_id(id);
    }
}

void VerbsTransport::established(VerbsConn& c) {
    c.state = VerbsConnState::Open;
    c.announced = true;
    note_gid(c.cm);
    if (c.inbound) {
        handler_.on_accepted(c.id, c.peer_host);
    } else {
        handler_.on_connected(c.id, true, std::string());
    }
    // Frames sent while connecting go out now rather than a poll() later.
    if (c.state == VerbsConnState::Open && !c.queue.empty()) flush_queue(c);
}

// Marks the connection closed and starts the QP's teardown: disconnect (the
// peer gets DISCONNECTED) moves it to the error state, which flushes every
// posted send; reap() frees it once those completions are back and the end
// has been reported.
void VerbsTransport::end(VerbsConn& c, VerbsCloseCause cause, int err, std::string detail,
                         ic::FrameError fe) {
    if (c.state == VerbsConnState::Closed) return;  // the first cause is the one reported
    c.state = VerbsConnState::Closed;
    c.queue.clear();
    c.queued_bytes = 0;
    c.cause = cause;
    c.err = err;
    c.detail = std::move(detail);
    c.frame_error = fe;
    if (c.cm != nullptr && c.cm_connected) rdma_disconnect(c.cm);
    if (c.qp != nullptr) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_ERR;
        ibv_modify_qp(c.qp, &a, IBV_QP_STATE);
    }
    c.report_pending = true;
    loop_.note_report();
}

}  // namespace pgrac::tiers
