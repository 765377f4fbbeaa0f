// Verbs tier: the data path. A frame goes out as one signaled SEND work
// request from a registered send slot (inline when small enough, or with its
// payload straight from an MR-cache region when zero-copy is on). When the QP's
// send queue or the slots are full, frames wait in a user-space queue that
// send completions drain. Every receive completion is one whole frame in a
// receive slot; it is validated, handed to on_frame and reposted to the SRQ at
// once, so the SRQ stays full (receiver-not-ready is only a backstop).
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tiers/verbs/transport_impl.hpp"

namespace pgrac::tiers {

namespace {

constexpr int kPollBatch = 32;

}  // namespace

bool VerbsTransport::send(ConnId conn, const iovec* iov, int iovcnt) {
    VerbsConn* c = find_live(conn);
    if (c == nullptr || c->state == VerbsConnState::Closed || iov == nullptr || iovcnt <= 0)
        return false;
    size_t total = 0;
    for (int i = 0; i < iovcnt; ++i) total += iov[i].iov_len;
    // Not a frame this transport may carry: refused, the connection stays usable.
    if (total < ic::kFrameHeaderSize || total > ic::kFrameHeaderSize + max_payload_) return false;
    if (c->state == VerbsConnState::Open && c->queue.empty()) {
        switch (post_frame(*c, iov, iovcnt, total)) {
            case PostResult::Posted:
                return true;
            case PostResult::Failed:
                return false;
            case PostResult::Busy:
                break;
        }
    }
    try {
        std::vector<uint8_t> copy(total);
        size_t at = 0;
        for (int i = 0; i < iovcnt; ++i) {
            if (iov[i].iov_len > 0) std::memcpy(copy.data() + at, iov[i].iov_base, iov[i].iov_len);
            at += iov[i].iov_len;
        }
        c->queue.push_back(std::move(copy));
        c->queued_bytes += total;
        if (c->state == VerbsConnState::Open) ++counters_.send_queue_waits;
    } catch (...) {
        end(*c, VerbsCloseCause::OutOfMemory);
        return false;
    }
    return true;
}

size_t VerbsTransport::queued_bytes(ConnId conn) const {
    const VerbsConn* c = find_live(conn);
    return c == nullptr ? 0 : c->queued_bytes;
}

// Receive slots have one fixed size, so a lower limit saves no memory here;
// it is checked on receive as the TCP tier's decoder checks it.
void VerbsTransport::set_max_payload(ConnId conn, uint32_t max_payload) {
    VerbsConn* c = find_live(conn);
    if (c != nullptr && c->state != VerbsConnState::Closed)
        c->max_payload = std::min(max_payload, max_payload_);
}

// Posts one frame. Busy when the QP's send queue or the send slots are full
// (nothing is consumed); Failed after ending the connection.
VerbsTransport::PostResult VerbsTransport::post_frame(VerbsConn& c, const iovec* iov, int iovcnt,
                                                      size_t total) {
    if (c.qp == nullptr) return PostResult::Busy;
    if (c.posted >= c.max_posted || send_free_.empty()) return PostResult::Busy;
    const uint32_t slot = send_free_.take();
    uint8_t* buf = pool_.slot(slot);
    ibv_sge sge[2] = {};
    int nsge = 1;
    VerbsSendCtx ctx;
    ctx.conn = c.id;
    ctx.bytes = static_cast<uint32_t>(total);

    // Zero-copy: header (and small pieces) copied, the one large piece sent from
    // the caller's registered memory.
    const MrHandle* zc = nullptr;
    if (opts_.zero_copy_min > 0 && iovcnt == 2 && iov[1].iov_len >= opts_.zero_copy_min) {
        const void* base = nullptr;
        size_t base_len = 0;
        zc = mr_cache_->find_covering(iov[1].iov_base, iov[1].iov_len, true, &base, &base_len);
        if (zc == nullptr && !opts_.zero_copy_registered_only) {
            std::string ignored;
            zc = mr_cache_->acquire(iov[1].iov_base, iov[1].iov_len, true, &ignored);
            base = iov[1].iov_base;
            base_len = iov[1].iov_len;
        }
        if (zc != nullptr) {
            ctx.pin_base = base;
            ctx.pin_len = base_len;
        }
    }
    size_t copied = 0;
    const int copy_pieces = zc != nullptr ? 1 : iovcnt;
    for (int i = 0; i < copy_pieces; ++i) {
        if (iov[i].iov_len > 0) std::memcpy(buf + copied, iov[i].iov_base, iov[i].iov_len);
        copied += iov[i].iov_len;
    }
    sge[0].addr = reinterpret_cast<uintptr_t>(buf);
    sge[0].length = static_cast<uint32_t>(copied);
    sge[0].lkey = pool_mr_->lkey;
    if (zc != nullptr) {
        sge[1].addr = reinterpret_cast<uintptr_t>(iov[1].iov_base);
        sge[1].length = static_cast<uint32_t>(iov[1].iov_len);
        sge[1].lkey = zc->lkey;
        nsge = 2;
    }

    ibv_send_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (zc == nullptr && total <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(c.qp, &wr, &bad);
    ++counters_.send_calls;
    if (rc != 0) {
        send_free_.give(slot);
        if (ctx.pin_base != nullptr) mr_cache_->unpin(ctx.pin_base, ctx.pin_len);
        if (rc == ENOMEM) return PostResult::Busy;  // send queue full after all
        end(c, VerbsCloseCause::PostFailed, rc);
        return PostResult::Failed;
    }
    send_ctx_[slot] = ctx;
    ++c.posted;
    c.inflight_bytes += total;
    ++counters_.frames_sent;
    counters_.bytes_sent += total;
    if (zc != nullptr) ++counters_.zero_copy_sends;
    return PostResult::Posted;
}

void VerbsTransport::flush_queue(VerbsConn& c) {
    while (c.state == VerbsConnState::Open && !c.queue.empty()) {
        std::vector<uint8_t>& f = c.queue.front();
        iovec one{f.data(), f.size()};
        const size_t n = f.size();
        if (post_frame(c, &one, 1, n) != PostResult::Posted) return;
        c.queue.pop_front();
        c.queued_bytes -= n;
    }
}

// Queued frames of every connection, after completions freed slots.
void VerbsTransport::flush_backlog() {
    if (send_free_.empty()) return;
    for (auto& [id, c] : conns_) {
        if (c->state == VerbsConnState::Open && !c->queue.empty()) flush_queue(*c);
        if (send_free_.empty()) return;
    }
}

// Polls the CQ dry; returns how many completions were handled.
int VerbsTransport::drain_cq() {
    if (cq_ == nullptr) return 0;
    int total = 0;
    ibv_wc wcs[kPollBatch];
    for (;;) {
        const int n = ibv_poll_cq(cq_, kPollBatch, wcs);
        if (n < 0) {  // the CQ itself is broken
            ++counters_.cq_overflows;
            rebuild_requested_ = true;
            rebuild_reason_ = "ibv_poll_cq failed";
            return total;
        }
        for (int i = 0; i < n; ++i) on_completion(wcs[i]);
        total += n;
        if (n < kPollBatch || rebuild_requested_) break;
    }
    if (total > 0) flush_backlog();
    return total;
}

void VerbsTransport::on_completion(const ibv_wc& wc) {
    if (wc.wr_id & kVerbsRecvFlag) {
        on_recv(wc, static_cast<uint32_t>(wc.wr_id & ~kVerbsRecvFlag));
    } else {
        on_send_done(wc, static_cast<uint32_t>(wc.wr_id));
    }
}

void VerbsTransport::on_send_done(const ibv_wc& wc, uint32_t slot) {
    if (slot >= send_ctx_.size()) return;
    const VerbsSendCtx ctx = send_ctx_[slot];
    send_ctx_[slot] = VerbsSendCtx{};
    send_free_.give(slot);
    if (ctx.pin_base != nullptr) mr_cache_->unpin(ctx.pin_base, ctx.pin_len);
    VerbsConn* c = find(ctx.conn);
    if (c == nullptr) return;
    if (c->posted > 0) --c->posted;
    c->inflight_bytes -= std::min<size_t>(c->inflight_bytes, ctx.bytes);
    if (wc.status == IBV_WC_SUCCESS) {
        ++counters_.verbs_sends;
        return;
    }
    if (c->state == VerbsConnState::Closed) return;  // flushed by our own teardown
    ++counters_.qp_errors;
    end(*c, VerbsCloseCause::WcError, 0,
        std::string("send: ") + ibv_wc_status_str(wc.status) + " (vendor error " +
            std::to_string(wc.vendor_err) + ")");
}

void VerbsTransport::repost_recv(uint32_t slot) {
    if (srq_ == nullptr) return;
    ibv_sge sge{};
    sge.addr = reinterpret_cast<uintptr_t>(pool_.slot(slot));
    sge.length = static_cast<uint32_t>(pool_.slot_bytes());
    sge.lkey = pool_mr_->lkey;
    ibv_recv_wr wr{};
    wr.wr_id = kVerbsRecvFlag | slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_srq_recv(srq_, &wr, &bad) != 0) {
        rebuild_requested_ = true;
        rebuild_reason_ = "ibv_post_srq_recv failed";
    }
}

void VerbsTransport::on_recv(const ibv_wc& wc, uint32_t slot) {
    // Give the buffer back however this ends (the handler may throw).
    struct Repost {
        VerbsTransport* t;
        uint32_t slot;
        ~Repost() { t->repost_recv(slot); }
    } repost{this, slot};
    VerbsConn* c = find_qpn(wc.qp_num);
    if (wc.status != IBV_WC_SUCCESS) {
        if (wc.status == IBV_WC_WR_FLUSH_ERR || c == nullptr || c->state == VerbsConnState::Closed)
            return;
        ++counters_.qp_errors;
        end(*c, VerbsCloseCause::WcError, 0,
            std::string("receive: ") + ibv_wc_status_str(wc.status) + " (vendor error " +
                std::to_string(wc.vendor_err) + ")");
        return;
    }
    if (c != nullptr && c->state == VerbsConnState::Connecting && c->inbound && c->cm_connected) {
        // The dialer sends its first frame as soon as it sees ESTABLISHED; here
        // that frame can complete before our own ESTABLISHED event is read
        // (the CQ and the CM channel are separate queues). A frame on the
        // accepted QP proves the connection is up: announce it now rather
        // than drop the frame, which would stall the handshake until it times out.
        established(*c);
    }
    if (c == nullptr || c->state != VerbsConnState::Open) return;
    const uint8_t* p = pool_.slot(slot);
    const size_t len = wc.byte_len;
    counters_.bytes_recv += len;
    ic::FrameHeader h;
    ic::FrameError fe = ic::FrameError::Truncated;
    if (len >= ic::kFrameHeaderSize) {
        fe = ic::decode_frame_header(p, len, c->max_payload, &h);
        if (fe == ic::FrameError::None) {
            const size_t want = ic::kFrameHeaderSize + h.payload_len;
            if (len < want)
                fe = ic::FrameError::Truncated;
            else if (len > want)
                fe = ic::FrameError::BadPayload;  // one message carries exactly one frame
            else
                fe = ic::verify_frame_crc(p, p + ic::kFrameHeaderSize, h.payload_len);
        }
    }
    if (fe != ic::FrameError::None) {
        end(*c, VerbsCloseCause::BadFrame, 0, {}, fe);
        return;
    }
    ++counters_.frames_recv;
    ++counters_.verbs_recvs;
    try {
        handler_.on_frame(c->id, h, p + ic::kFrameHeaderSize);
    } catch (const std::bad_alloc&) {
        if (VerbsConn* still = find_live(c->id);
            still != nullptr && still->state != VerbsConnState::Closed)
            end(*still, VerbsCloseCause::OutOfMemory);
    } catch (...) {
        if (VerbsConn* still = find_live(c->id);
            still != nullptr && still->state != VerbsConnState::Closed)
            end(*still, VerbsCloseCause::Internal);
    }
}

}  // namespace pgrac::tiers
