// Verbs tier: device and queue setup, the poll loop, async events, CQ/SRQ
// rebuilds and end reports. Connection setup is in tiers/verbs/transport_cm.cpp,
// the data path in tiers/verbs/transport_io.cpp.
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tiers/conn_bookkeeping.hpp"
#include "tiers/detect/rdma_detect.hpp"
#include "tiers/detect/rdma_live.hpp"
#include "tiers/verbs/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

constexpr uint64_t kCmTag = 1, kCompTag = 2, kAsyncTag = 3;
constexpr int kMaxEvents = 16;
constexpr unsigned kAckBatch = 64;
constexpr unsigned kQuickPolls = 8;

bool set_nonblocking(int fd) {
    const int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

std::string errtext(const std::string& what, int err) {
    return what + ": " + std::strerror(err);
}

// One buffer-pool slot: a whole frame, header and payload.
size_t pool_slot_bytes(uint32_t max_payload) {
    return BufferPool::round_slot(ic::kFrameHeaderSize + max_payload);
}

}  // namespace

size_t verbs_pool_bytes(const VerbsOptions& o) {
    const uint64_t small = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t page = o.hugepage_size >= (1ull << 30)   ? (1ull << 30)
                          : o.hugepage_size >= (2ull << 20) ? (2ull << 20)
                                                            : small;
    const size_t slots = size_t{o.send_slots} + std::max<uint32_t>(o.recv_slots, 2);
    return BufferPool::mapped_bytes(slots * pool_slot_bytes(o.max_payload), page);
}

VerbsTransport::VerbsTransport(TransportHandler& handler, const VerbsOptions& opts)
    : handler_(handler),
      opts_(opts),
      max_payload_(std::min(std::max<uint32_t>(opts.max_payload, 64), ic::kMaxFramePayload)),
      initial_max_payload_(std::min(opts.initial_max_payload, max_payload_)) {}

VerbsTransport::~VerbsTransport() {
    for (auto& [id, c] : conns_) {
        if (c->qp != nullptr) verbs_async_disown(c->qp);
        if (c->cm != nullptr) {
            if (c->cm->qp != nullptr) rdma_destroy_qp(c->cm);
            rdma_destroy_id(c->cm);
        }
    }
    conns_.clear();
    for (rdma_cm_id* id : listeners_) rdma_destroy_id(id);
    if (async_attached_) verbs_async_detach(inbox_.get());
    mr_cache_.reset();  // deregisters
    registrar_.reset();
    destroy_queues();
    if (pool_mr_ != nullptr) ibv_dereg_mr(pool_mr_);
    if (comp_channel_ != nullptr) ibv_destroy_comp_channel(comp_channel_);
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (cm_channel_ != nullptr) rdma_destroy_event_channel(cm_channel_);
    if (devices_ != nullptr) rdma_free_devices(devices_);
}

VerbsConn* VerbsTransport::find(ConnId id) const {
    auto it = conns_.find(id);
    return it == conns_.end() ? nullptr : it->second.get();
}

VerbsConn* VerbsTransport::find_live(ConnId id) const {
    VerbsConn* c = find(id);
    return c != nullptr && !c->reported ? c : nullptr;
}

VerbsConn* VerbsTransport::find_qpn(uint32_t qpn) const {
    auto it = by_qpn_.find(qpn);
    return it == by_qpn_.end() ? nullptr : find(it->second);
}

// Picks the device among the contexts librdmacm opened (connections made by
// rdma_cm can only use those), and reads what the status view shows.
bool VerbsTransport::open_device(std::string* error) {
    int n = 0;
    devices_ = rdma_get_devices(&n);
    if (devices_ == nullptr || n == 0) {
        *error = "no RDMA device (librdmacm lists none)";
        return false;
    }
    std::string seen;
    for (int i = 0; i < n && ctx_ == nullptr; ++i) {
        ibv_context* c = devices_[i];
        const std::string dev_name = ibv_get_device_name(c->device);
        if (!seen.empty()) seen += ", ";
        seen += dev_name;
        if (!opts_.device.empty() && dev_name != opts_.device) continue;
        ibv_port_attr pa{};
        if (ibv_query_port(c, static_cast<uint8_t>(opts_.port), &pa) != 0) continue;
        if (pa.state != IBV_PORT_ACTIVE && opts_.device.empty()) continue;
        if (pa.state != IBV_PORT_ACTIVE) {
            *error = "RDMA device " + dev_name + " port " + std::to_string(opts_.port) +
                     " is not ACTIVE";
            return false;
        }
        ctx_ = c;
        status_.device = dev_name;
        status_.port = opts_.port;
        status_.active_mtu = mtu_bytes(pa.active_mtu);
        const bool ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ||
                        pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED;
        status_.link_layer = ib ? "InfiniBand" : "Ethernet";
        status_.tier = ib ? "tier1" : "tier2";
    }
    if (ctx_ == nullptr) {
        *error = opts_.device.empty()
                     ? "no RDMA device with an ACTIVE port " + std::to_string(opts_.port) +
                           " (devices: " + seen + ")"
                     : "RDMA device " + opts_.device + " not found (devices: " + seen + ")";
        return false;
    }
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(ctx_, &attr)) {
        *error = errtext("ibv_query_device(" + status_.device + ")", rc);
        return false;
    }
    status_.vendor_id = attr.vendor_id;
    status_.vendor_part_id = attr.vendor_part_id;
    status_.vendor = classify_vendor(status_.device, "");
    status_.xrc_supported = (attr.device_cap_flags & IBV_DEVICE_XRC) != 0;
    status_.srq_in_use = true;
    status_.xrc_in_use = false;
    // XRC would let one receive queue serve every process of this node for a
    // given peer; this tier keeps one process per transport, so a plain SRQ
    // gives the same sharing. The XRC data path is not built (docs/rdma.md).
    switch (opts_.use_xrc) {
        case XrcMode::kOff:
            status_.xrc_srq_note = "XRC off by setting; shared receive queue (SRQ) in use";
            break;
        case XrcMode::kAuto:
            status_.xrc_srq_note =
                status_.xrc_supported
                    ? "device supports XRC, but this build has no XRC path; SRQ in use"
                    : "device has no XRC (auto): falling back to a shared receive queue (SRQ)";
            break;
        case XrcMode::kOn:
            *error = status_.xrc_supported
                         ? "cluster.rdma_use_xrc=on: XRC is not implemented by this build"
                         : "cluster.rdma_use_xrc=on but device " + status_.device +
                               " does not support XRC";
            return false;
    }
    if (opts_.gid_index >= 0) {
        ibv_gid gid{};
        if (ibv_query_gid(ctx_, static_cast<uint8_t>(opts_.port), opts_.gid_index, &gid) != 0) {
            *error = "gid_index " + std::to_string(opts_.gid_index) + " not readable on " +
                     status_.device;
            return false;
        }
    }
    const uint32_t max_wr = static_cast<uint32_t>(std::max(attr.max_qp_wr, 1));
    status_.qp_send_depth = std::min(std::max<uint32_t>(opts_.qp_send_depth, 1), max_wr);
    srq_depth_ = std::min(std::max<uint32_t>(opts_.recv_slots, 2),
                          static_cast<uint32_t>(std::max(attr.max_srq_wr, 2)));
    status_.srq_depth = srq_depth_;
    status_.numa_node = verbs_device_numa_node(status_.device);
    return true;
}

bool VerbsTransport::create_queues(int cq_depth, std::string* error) {
    cq_ = ibv_create_cq(ctx_, cq_depth, nullptr, comp_channel_, 0);
    if (cq_ == nullptr) {
        *error = errtext("ibv_create_cq(" + std::to_string(cq_depth) + ")", errno);
        return false;
    }
    cq_depth_ = cq_depth;
    status_.cq_depth = cq_->cqe;  // what the device gave (often rounded up)
    verbs_async_own(cq_, inbox_.get());
    if (int rc = ibv_req_notify_cq(cq_, 0)) {
        *error = errtext("ibv_req_notify_cq", rc);
        return false;
    }
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = srq_depth_;
    sa.attr.max_sge = 1;
    srq_ = ibv_create_srq(pd_, &sa);
    if (srq_ == nullptr) {
        *error = errtext("ibv_create_srq(" + std::to_string(srq_depth_) + ")", errno);
        return false;
    }
    verbs_async_own(srq_, inbox_.get());
    if (!post_all_receives(error)) return false;
    // Low-water mark: the device tells us when the SRQ runs below a quarter
    // (the receiver is falling behind). Optional: not every device has it.
    ibv_srq_attr lim{};
    lim.srq_limit = std::max<uint32_t>(srq_depth_ / 4, 1);
    ibv_modify_srq(srq_, &lim, IBV_SRQ_LIMIT);
    send_free_.reset(0, opts_.send_slots);
    send_ctx_.assign(opts_.send_slots, VerbsSendCtx{});
    return true;
}

bool VerbsTransport::post_all_receives(std::string* error) {
    for (uint32_t i = 0; i < srq_depth_; ++i) {
        const uint32_t slot = opts_.send_slots + i;
        ibv_sge sge{};
        sge.addr = reinterpret_cast<uintptr_t>(pool_.slot(slot));
        sge.length = static_cast<uint32_t>(pool_.slot_bytes());
        sge.lkey = pool_mr_->lkey;
        ibv_recv_wr wr{};
        wr.wr_id = kVerbsRecvFlag | slot;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_srq_recv(srq_, &wr, &bad)) {
            *error = errtext("ibv_post_srq_recv", rc);
            return false;
        }
    }
    return true;
}

void VerbsTransport::destroy_queues() {
    if (srq_ != nullptr) {
        verbs_async_disown(srq_);
        ibv_destroy_srq(srq_);
        srq_ = nullptr;
    }
    if (cq_ != nullptr) {
        if (cq_events_unacked_ > 0) ibv_ack_cq_events(cq_, cq_events_unacked_);
        cq_events_unacked_ = 0;
        verbs_async_disown(cq_);
        ibv_destroy_cq(cq_);
        cq_ = nullptr;
    }
}

bool VerbsTransport::start(std::string* error) {
    if (!loop_.ok()) {
        *error = errtext("epoll/eventfd/timerfd", loop_.error());
        return false;
    }
    inbox_ = std::make_unique<VerbsAsyncInbox>(loop_.wake_fd());
    if (!open_device(error)) return false;

    if (opts_.numa_bind) {
        std::string why;
        status_.numa_bound = bind_thread_to_numa_node(status_.numa_node, &why);
        status_.numa_note = status_.numa_bound
                                ? "thread bound to NUMA node " + std::to_string(status_.numa_node)
                                : "not bound: " + why;
    } else {
        status_.numa_note = "binding not requested";
    }

    // Buffers: send slots then receive slots, one registration for all.
    const size_t slot_bytes = pool_slot_bytes(max_payload_);
    if (!pool_.create(size_t{opts_.send_slots} + srq_depth_, slot_bytes, opts_.hugepage_size,
                      status_.numa_node, error))
        return false;
    status_.hugepage_size = pool_.page_size();
    status_.hugepage_warning = pool_.warning();
    status_.pool_bytes = pool_.bytes();
    status_.max_payload = max_payload_;

    cm_channel_ = rdma_create_event_channel();
    if (cm_channel_ == nullptr) {
        *error = errtext("rdma_create_event_channel", errno);
        return false;
    }
    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) {
        *error = errtext("ibv_alloc_pd", errno);
        return false;
    }
    pool_mr_ = ibv_reg_mr(pd_, pool_.base(), pool_.bytes(), IBV_ACCESS_LOCAL_WRITE);
    if (pool_mr_ == nullptr) {
        *error = errtext("ibv_reg_mr of the " + std::to_string(pool_.bytes()) +
                             "-byte buffer pool (check ulimit -l)",
                         errno);
        return false;
    }
    registrar_ = make_ibv_registrar(pd_);
    mr_cache_ = std::make_unique<MrCache>(*registrar_, opts_.mr_cache_entries);
    comp_channel_ = ibv_create_comp_channel(ctx_);
    if (comp_channel_ == nullptr) {
        *error = errtext("ibv_create_comp_channel", errno);
        return false;
    }
    status_.cq_depth_requested = opts_.cq_depth;
    verbs_async_attach(ctx_, inbox_.get());
    async_attached_ = true;
    if (!create_queues(std::max(opts_.cq_depth, 1), error)) return false;
    const uint32_t need = srq_depth_ + opts_.send_slots;
    if (static_cast<uint32_t>(status_.cq_depth) < need)
        status_.cq_note = "CQ depth " + std::to_string(status_.cq_depth) +
                          " is below receive slots + send slots (" + std::to_string(need) +
                          "): a burst can overflow it (detected, counted, rebuilt larger)";

    if (!set_nonblocking(cm_channel_->fd) || !set_nonblocking(comp_channel_->fd) ||
        !set_nonblocking(ctx_->async_fd) || !loop_.add(cm_channel_->fd, EPOLLIN, kCmTag) ||
        !loop_.add(comp_channel_->fd, EPOLLIN, kCompTag) ||
        !loop_.add(ctx_->async_fd, EPOLLIN, kAsyncTag)) {
        *error = errtext("epoll setup", errno);
        return false;
    }
    // The largest inline send the device accepts: probe with a throwaway QP.
    ibv_qp_init_attr ia{};
    ia.send_cq = ia.recv_cq = cq_;
    ia.srq = srq_;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 1;
    ia.cap.max_send_sge = 2;
    ia.cap.max_inline_data = 256;
    if (ibv_qp* probe = ibv_create_qp(pd_, &ia)) {
        max_inline_ = ia.cap.max_inline_data;
        ibv_destroy_qp(probe);
    }
    status_.max_inline = max_inline_;
    return true;
}

// Records which GID rdma_cm chose for the first connection (it picks by IP).
void VerbsTransport::note_gid(rdma_cm_id* id) {
    if (status_.gid_index >= 0 || id == nullptr) return;
    const ibv_gid& sgid = id->route.addr.addr.ibaddr.sgid;
    ibv_port_attr pa{};
    if (ibv_query_port(ctx_, static_cast<uint8_t>(opts_.port), &pa) != 0) return;
    std::vector<ibv_gid_entry> table(static_cast<size_t>(std::max(pa.gid_tbl_len, 1)));
    const ssize_t n = ibv_query_gid_table(ctx_, table.data(), table.size(), 0);
    for (ssize_t i = 0; i < n; ++i) {
        const ibv_gid_entry& e = table[static_cast<size_t>(i)];
        if (e.port_num != static_cast<uint32_t>(opts_.port) ||
            std::memcmp(&e.gid, &sgid, sizeof sgid) != 0)
            continue;
        status_.gid_index = static_cast<int>(e.gid_index);
        status_.gid_type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? "RoCE v2"
                           : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? "RoCE v1"
                                                                : "IB";
        char text[64];
        const uint8_t* r = sgid.raw;
        snprintf(text, sizeof text,
                 "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", r[0],
                 r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], r[9], r[10], r[11], r[12], r[13],
                 r[14], r[15]);
        status_.gid = text;
        if (opts_.gid_index >= 0 && opts_.gid_index != status_.gid_index)
            status_.gid_note = "rdma_cm chose GID index " + std::to_string(status_.gid_index) +
                               " for the address, not the configured " +
                               std::to_string(opts_.gid_index);
        return;
    }
}

// CQ overflow or SRQ error: every completion that was lost leaves send slots
// and receive slots in an unknown state, so every connection ends (the engine
// redials and resends) and the CQ and SRQ are built afresh, larger when the
// old depth could not hold what is outstanding.
void VerbsTransport::rebuild_queues(const std::string& why) {
    for (auto& [id, c] : conns_) {
        if (c->state != VerbsConnState::Closed) end(*c, VerbsCloseCause::CqOverflow, 0, why);
        destroy_qp(*c);
        c->posted = 0;
        c->inflight_bytes = 0;
    }
    for (const VerbsSendCtx& s : send_ctx_)
        if (s.pin_base != nullptr) mr_cache_->unpin(s.pin_base, s.pin_len);
    destroy_queues();
    ++counters_.cq_rebuilds;
    const int need = static_cast<int>(srq_depth_ + opts_.send_slots);
    int depth = std::max(cq_depth_, 1);
    if (depth < need) {
        ibv_device_attr attr{};
        const int max_cqe = ibv_query_device(ctx_, &attr) == 0 ? attr.max_cqe : need;
        depth = std::min(need, max_cqe);
        status_.cq_note = "CQ rebuilt after: " + why + "; depth grown from " +
                          std::to_string(cq_depth_) + " to " + std::to_string(depth);
    } else {
        status_.cq_note = "CQ rebuilt after: " + why;
    }
    std::string error;
    if (!create_queues(depth, &error)) {
        destroy_queues();
        queues_broken_ = true;
        status_.cq_note += "; rebuild FAILED: " + error;
    }
}

void VerbsTransport::handle_async_events() {
    for (const VerbsAsyncEvent& e : inbox_->take()) {
        switch (e.type) {
            case IBV_EVENT_CQ_ERR:
                if (e.object != cq_) break;  // an old CQ
                ++counters_.cq_overflows;
                rebuild_requested_ = true;
                rebuild_reason_ = "completion queue overflow (IBV_EVENT_CQ_ERR)";
                break;
            case IBV_EVENT_SRQ_ERR:
                if (e.object != srq_) break;
                rebuild_requested_ = true;
                rebuild_reason_ = "shared receive queue error (IBV_EVENT_SRQ_ERR)";
                break;
            case IBV_EVENT_SRQ_LIMIT_REACHED: {
                if (e.object != srq_) break;
                ++counters_.srq_low_events;
                ibv_srq_attr lim{};  // the limit disarms itself; arm it again
                lim.srq_limit = std::max<uint32_t>(srq_depth_ / 4, 1);
                ibv_modify_srq(srq_, &lim, IBV_SRQ_LIMIT);
                break;
            }
            case IBV_EVENT_QP_FATAL:
            case IBV_EVENT_QP_REQ_ERR:
            case IBV_EVENT_QP_ACCESS_ERR:
                for (auto& [id, c] : conns_)
                    if (c->qp == e.object && c->state != VerbsConnState::Closed) {
                        ++counters_.qp_errors;
                        end(*c, VerbsCloseCause::QpFatal, 0, ibv_event_type_str(e.type));
                    }
                break;
            case IBV_EVENT_DEVICE_FATAL:
                for (auto& [id, c] : conns_)
                    if (c->state != VerbsConnState::Closed)
                        end(*c, VerbsCloseCause::DeviceFatal, 0, "IBV_EVENT_DEVICE_FATAL");
                queues_broken_ = true;
                break;
            default:  // port changes, LAST_WQE_REACHED, ...: nothing to do
                break;
        }
    }
}

void VerbsTransport::get_cq_events() {
    for (;;) {
        ibv_cq* ev_cq = nullptr;
        void* ev_ctx = nullptr;
        if (ibv_get_cq_event(comp_channel_, &ev_cq, &ev_ctx) != 0) break;  // EAGAIN
        if (ev_cq == cq_) {
            if (++cq_events_unacked_ >= kAckBatch) {
                ibv_ack_cq_events(cq_, cq_events_unacked_);
                cq_events_unacked_ = 0;
            }
        } else {
            ibv_ack_cq_events(ev_cq, 1);  // cannot happen: old CQs are acked before destroy
        }
    }
    if (cq_ != nullptr) ibv_req_notify_cq(cq_, 0);
}

void VerbsTransport::expire_connects() {
    if (opts_.connect_timeout_ms <= 0) return;
    expire_connect_deadlines(conns_, VerbsConnState::Connecting,
                             [this](VerbsConn& c) { end(c, VerbsCloseCause::ConnectTimeout); });
}

void VerbsTransport::rearm_timer() {
    if (opts_.connect_timeout_ms <= 0) return;
    loop_.arm_timer(earliest_connect_deadline(conns_, VerbsConnState::Connecting));
}

std::string VerbsTransport::end_text(const VerbsConn& c) const {
    const std::string more = c.detail.empty() ? "" : ": " + c.detail;
    switch (c.cause) {
        case VerbsCloseCause::Local:
            return "closed locally";
        case VerbsCloseCause::PeerClosed:
            return "peer closed the connection (RDMA_CM_EVENT_DISCONNECTED)";
        case VerbsCloseCause::BadFrame:
            return std::string("bad frame from peer: ") + ic::frame_error_name(c.frame_error) +
                   more;
        case VerbsCloseCause::WcError:
            return "work completion error" + more;
        case VerbsCloseCause::QpFatal:
            return "queue pair error" + more;
        case VerbsCloseCause::CqOverflow:
            return "connection torn down to rebuild the completion queue" + more;
        case VerbsCloseCause::DeviceFatal:
            return "RDMA device failed" + more;
        case VerbsCloseCause::PostFailed:
            return errtext("ibv_post_send failed", c.err);
        case VerbsCloseCause::OutOfMemory:
            return "out of memory";
        case VerbsCloseCause::Internal:
            return "internal error (exception in a handler callback)";
        case VerbsCloseCause::ConnectFailed:
            return "connect to " + c.target + " failed" + more;
        case VerbsCloseCause::ConnectTimeout:
            return "connect to " + c.target + " timed out after " +
                   std::to_string(opts_.connect_timeout_ms) + " ms";
    }
    return "closed";
}

// Reports ended connections in ConnId order. An outbound connect that never
// completed gets on_connected(false); an inbound one that never completed was
// never announced and is dropped silently; everything else gets on_closed.
void VerbsTransport::deliver_reports() {
    deliver_conn_reports(handler_, conns_, loop_.pending_reports(), [this](VerbsConn& c) {
        c.report_pending = false;
        c.reported = true;  // the entry stays until reap() sees its QP flushed
        ConnEndReport r;
        if (c.announced)
            r.kind = ConnEndReport::Kind::Closed;
        else if (!c.inbound)
            r.kind = ConnEndReport::Kind::ConnectFailed;
        r.reason = end_text(c);
        r.frame_error = c.frame_error;
        return r;
    });
}

// Frees reported connections whose queue pair has nothing left in flight.
void VerbsTransport::reap() {
    for (auto it = conns_.begin(); it != conns_.end();) {
        VerbsConn& c = *it->second;
        if (!c.reported || c.posted > 0) {
            ++it;
            continue;
        }
        destroy_qp(c);
        if (c.cm != nullptr) rdma_destroy_id(c.cm);
        it = conns_.erase(it);
    }
}

void VerbsTransport::poll(int timeout_ms) {
    loop_.run_pass([&] {
        deliver_reports();
        int work = drain_cq();
        handle_async_events();
        epoll_event events[kMaxEvents];
        const int wait =
            work > 0 || loop_.pending_reports() > 0 || rebuild_requested_ ? 0 : timeout_ms;
        // A busy-polling owner (poll(0) in a loop) mostly needs the CQ, which
        // was just polled without a system call; the fds (rdma_cm, async,
        // completion events) are level-triggered and looked at every
        // kQuickPolls-th call, so nothing is lost, only deferred by a few calls.
        int n = 0;
        if (wait != 0 || ++quick_polls_ % kQuickPolls == 0)
            n = loop_.wait(events, kMaxEvents, wait);
        for (int i = 0; i < n; ++i) {
            switch (events[i].data.u64) {
                case kCmTag:
                    process_cm_events();
                    break;
                case kCompTag:
                    get_cq_events();
                    break;
                case kAsyncTag:
                    verbs_async_drain(ctx_);
                    break;
            }
        }
        handle_async_events();
        if (!rebuild_requested_) drain_cq();
        if (rebuild_requested_) {
            rebuild_requested_ = false;
            rebuild_queues(rebuild_reason_);
        }
        flush_backlog();
        expire_connects();
        deliver_reports();
        reap();
        rearm_timer();
    });
}

void VerbsTransport::poll_now() {
    quick_polls_ = kQuickPolls - 1;  // this pass waits on the fds too (with 0)
    poll(0);
}

TransportCounters VerbsTransport::counters() const {
    TransportCounters c = counters_;
    if (mr_cache_) {
        const MrCache::Stats s = mr_cache_->stats();
        c.mr_cache_hits = s.hits;
        c.mr_cache_misses = s.misses;
    }
    return c;
}

size_t VerbsTransport::in_flight(ConnId conn) const {
    const VerbsConn* c = find(conn);
    return c == nullptr ? 0 : c->inflight_bytes;
}

bool VerbsTransport::region_in_flight(const void* addr, size_t len) const {
    return mr_cache_ && mr_cache_->pinned(addr, len);
}

bool VerbsTransport::register_region(const void* addr, size_t len, std::string* error) {
    return mr_cache_ && mr_cache_->acquire(addr, len, false, error) != nullptr;
}

std::unique_ptr<Transport> make_verbs_transport(TransportHandler& handler, const VerbsOptions& opts,
                                                std::string* error) {
    std::string dummy;
    if (error == nullptr) error = &dummy;
    try {
        auto t = std::make_unique<VerbsTransport>(handler, opts);
        if (!t->start(error)) return nullptr;
        return t;
    } catch (const std::exception& e) {
        *error = std::string("verbs transport: ") + e.what();
        return nullptr;
    }
}

bool verbs_transport_status(const Transport& t, VerbsStatus* out) {
    const auto* v = dynamic_cast<const VerbsTransport*>(&t);
    if (v == nullptr) return false;
    *out = v->status();
    return true;
}

bool verbs_region_in_flight(const Transport& t, const void* addr, size_t len) {
    const auto* v = dynamic_cast<const VerbsTransport*>(&t);
    return v != nullptr && v->region_in_flight(addr, len);
}

size_t verbs_in_flight(const Transport& t, ConnId conn) {
    const auto* v = dynamic_cast<const VerbsTransport*>(&t);
    return v == nullptr ? 0 : v->in_flight(conn);
}

bool verbs_register_region(Transport& t, const void* addr, size_t len, std::string* error) {
    auto* v = dynamic_cast<VerbsTransport*>(&t);
    if (v == nullptr) {
        if (error) *error = "not a verbs transport";
        return false;
    }
    return v->register_region(addr, len, error);
}

}  // namespace pgrac::tiers
