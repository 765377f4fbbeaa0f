// Verbs tier: the data path. A frame goes out as one signaled SEND work
// request from a registered send slot (inline when small enough, or with its
// payload straight from an MR-cache region when zero-copy is on), or as an
// RDMA WRITE WITH IMMEDIATE into the peer's landing slot (landing.hpp). When the QP's
// send queue or the slots are full, frames wait in a user-space queue that
// send completions drain. Every receive completion is one whole frame in a
// receive slot; it is validated, handed to on_frame and reposted to the SRQ at
// once, so the SRQ stays full (receiver-not-ready is only a backstop).
#include <endian.h>

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

// A send slot lent for the caller to write one frame into (a sealed frame):
// only when the frame could be posted at once, so that it is never queued.
uint8_t* VerbsTransport::reserve_frame(ConnId conn, size_t bytes) {
    if (reserved_slot_ >= 0) return nullptr;  // one at a time
    VerbsConn* c = find_live(conn);
    if (c == nullptr || c->state != VerbsConnState::Open || !c->queue.empty() || c->qp == nullptr ||
        c->posted >= c->max_posted || !may_take_slot(*c) || bytes < ic::kFrameHeaderSize ||
        bytes > ic::kFrameHeaderSize + max_payload_)
        return nullptr;
    reserved_slot_ = send_free_.take();
    reserved_conn_ = conn;
    return pool_.slot(static_cast<uint32_t>(reserved_slot_));
}

bool VerbsTransport::send_reserved(ConnId conn, size_t bytes) {
    const long slot = reserved_slot_;
    if (slot < 0 || conn != reserved_conn_) return false;
    reserved_slot_ = -1;
    VerbsConn* c = find_live(conn);
    PostResult r = PostResult::Failed;
    if (c != nullptr && c->state == VerbsConnState::Open && bytes >= ic::kFrameHeaderSize &&
        bytes <= pool_.slot_bytes())
        r = post_frame(*c, nullptr, 0, bytes, slot);
    if (r == PostResult::Posted) return true;
    const uint8_t* frame = pool_.slot(static_cast<uint32_t>(slot));
    bool queued = false;
    if (r == PostResult::Busy && c != nullptr && c->state == VerbsConnState::Open) {
        // The send queue filled after all: the frame waits like any other.
        try {
            c->queue.emplace_back(frame, frame + bytes);
            c->queued_bytes += bytes;
            ++counters_.send_queue_waits;
            queued = true;
        } catch (...) {
            end(*c, VerbsCloseCause::OutOfMemory);
        }
    }
    send_free_.give(static_cast<uint32_t>(slot));
    return queued;
}

void VerbsTransport::cancel_reserved(ConnId conn) {
    if (reserved_slot_ < 0 || conn != reserved_conn_) return;
    send_free_.give(static_cast<uint32_t>(reserved_slot_));
    reserved_slot_ = -1;
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

// A free send slot, and this connection may take it (the reserve rule of
// transport_impl.hpp: the last quarter only below kSlotsBelowReserve in flight).
bool VerbsTransport::may_take_slot(const VerbsConn& c) const {
    if (send_free_.empty()) return false;
    return c.posted < kSlotsBelowReserve || send_free_.available() > opts_.send_slots / 4;
}

// Posts one frame. Busy when the QP's send queue or the send slots are full
// (nothing is consumed); Failed after ending the connection.
//
// The gather list follows the frame: pieces are copied into a send slot, and
// so is all of a small frame, except one large piece in a region registered
// ahead (zero-copy: the payload between header and tag), which the device
// reads where it is. A frame goes into the peer's next landing slot by RDMA
// WRITE WITH IMMEDIATE when the peer offered slots, one is free and the frame
// is at least write_min bytes; otherwise it is SENT, with the count of landed
// frames consumed here as its immediate when this side offered slots.
VerbsTransport::PostResult VerbsTransport::post_frame(VerbsConn& c, const iovec* iov, int iovcnt,
                                                      size_t total, long reserved) {
    if (reserved < 0 && (c.qp == nullptr || c.posted >= c.max_posted || !may_take_slot(c)))
        return PostResult::Busy;
    const uint32_t slot = reserved >= 0 ? static_cast<uint32_t>(reserved) : send_free_.take();
    uint8_t* buf = pool_.slot(slot);
    constexpr int kMaxSge = 3;
    ibv_sge sge[kMaxSge] = {};
    int nsge = 0;
    VerbsSendCtx ctx;
    ctx.conn = c.id;
    ctx.bytes = static_cast<uint32_t>(total);

    const MrHandle* zc = nullptr;
    size_t copied = 0;
    bool in_slot = false;  // the last entry is the slot's, ending at `copied`
    if (reserved >= 0) {   // written in place (reserve_frame)
        sge[0].addr = reinterpret_cast<uintptr_t>(buf);
        sge[0].length = static_cast<uint32_t>(total);
        sge[0].lkey = pool_mr_->lkey;
        nsge = 1;
        iovcnt = 0;
    }
    for (int i = 0; i < iovcnt; ++i) {
        if (iov[i].iov_len == 0) continue;
        // The one large piece from registered memory, if the list has room for
        // it and whatever follows (one more slot entry).
        if (opts_.zero_copy_min > 0 && zc == nullptr && iov[i].iov_len >= opts_.zero_copy_min &&
            nsge + (i + 1 < iovcnt ? 2 : 1) <= kMaxSge) {
            const void* base = nullptr;
            size_t base_len = 0;
            zc = mr_cache_->find_covering(iov[i].iov_base, iov[i].iov_len, true, &base, &base_len);
            if (zc == nullptr && !opts_.zero_copy_registered_only) {
                std::string ignored;
                zc = mr_cache_->acquire(iov[i].iov_base, iov[i].iov_len, true, &ignored);
                base = iov[i].iov_base;
                base_len = iov[i].iov_len;
            }
            if (zc != nullptr) {
                ctx.pin_base = base;
                ctx.pin_len = base_len;
                sge[nsge].addr = reinterpret_cast<uintptr_t>(iov[i].iov_base);
                sge[nsge].length = static_cast<uint32_t>(iov[i].iov_len);
                sge[nsge].lkey = zc->lkey;
                ++nsge;
                in_slot = false;
                continue;
            }
        }
        std::memcpy(buf + copied, iov[i].iov_base, iov[i].iov_len);
        if (!in_slot) {
            sge[nsge].addr = reinterpret_cast<uintptr_t>(buf + copied);
            sge[nsge].lkey = pool_mr_->lkey;
            ++nsge;
            in_slot = true;
        }
        sge[nsge - 1].length += static_cast<uint32_t>(iov[i].iov_len);
        copied += iov[i].iov_len;
    }

    ibv_send_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = sge;
    wr.num_sge = nsge;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (zc == nullptr && total <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
    const bool write =
        opts_.write_min > 0 && total >= opts_.write_min && c.landing_writer.can_write(total);
    if (write) {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htobe32(c.landing_writer.next_number());
        wr.wr.rdma.remote_addr = c.landing_writer.next_addr();
        wr.wr.rdma.rkey = c.landing_writer.rkey();
    } else if (c.landing != nullptr) {
        wr.opcode = IBV_WR_SEND_WITH_IMM;
        wr.imm_data = htobe32(c.landing_reader.consumed());
    } else {
        wr.opcode = IBV_WR_SEND;
    }
    ibv_send_wr* bad = nullptr;
    const int rc = ibv_post_send(c.qp, &wr, &bad);
    ++counters_.send_calls;
    if (rc != 0) {
        if (reserved < 0) send_free_.give(slot);  // a reserved slot stays the caller's
        if (ctx.pin_base != nullptr) mr_cache_->unpin(ctx.pin_base, ctx.pin_len);
        if (rc == ENOMEM) return PostResult::Busy;  // send queue full after all
        end(c, VerbsCloseCause::PostFailed, rc);
        return PostResult::Failed;
    }
    if (write) {
        c.landing_writer.wrote();
        ++counters_.rdma_writes;
    }
    send_ctx_[slot] = ctx;
    ++c.posted;
    c.inflight_bytes += total;
    ++counters_.frames_sent;
    counters_.bytes_sent += total;
    if (zc != nullptr || reserved >= 0) ++counters_.zero_copy_sends;
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

// Queued frames of every connection, after completions freed slots (a
// connection over its share of the reserve waits for its own completions).
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
    counters_.bytes_recv += wc.byte_len;
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        // A frame the peer wrote into our landing slots: only the next one, in
        // its slot, and only where slots were offered.
        const long at = c->landing == nullptr
                            ? -1
                            : c->landing_reader.slot_of(be32toh(wc.imm_data), wc.byte_len);
        if (at < 0) {
            end(*c, VerbsCloseCause::BadFrame, 0, "an RDMA WRITE out of turn",
                ic::FrameError::BadPayload);
            return;
        }
        const ConnId id = c->id;
        uint8_t* frame = c->landing->slot(at);
        if (deliver_frame(*c, frame, wc.byte_len)) ++counters_.landed_frames;
        // Consumed once on_frame is done with it; its header is cleared before
        // the next SEND gives the slot back, so that a later WRITE whose bytes
        // went elsewhere cannot make this frame arrive again.
        if (VerbsConn* still = find_live(id); still != nullptr && still->landing != nullptr) {
            std::memset(frame, 0, ic::kFrameHeaderSize);
            still->landing_reader.consumed_one();
        }
        return;
    }
    if ((wc.wc_flags & IBV_WC_WITH_IMM) && !c->landing_writer.offered() && !c->inbound) {
        // The accepting side never offers slots, so it has none to give back.
        // (A dialer whose offer was not taken, say of a later version, still
        // puts counts in its immediates: those are ignored.)
        end(*c, VerbsCloseCause::BadFrame, 0,
            "an immediate on a SEND from a side that offered no landing slots",
            ic::FrameError::BadPayload);
        return;
    }
    if ((wc.wc_flags & IBV_WC_WITH_IMM) && c->landing_writer.offered()) {
        if (!c->landing_writer.on_consumed(be32toh(wc.imm_data))) {
            end(*c, VerbsCloseCause::BadFrame, 0,
                "landing slots given back that were never written", ic::FrameError::BadPayload);
            return;
        }
    }
    deliver_frame(*c, pool_.slot(slot), wc.byte_len);
}

bool VerbsTransport::deliver_frame(VerbsConn& c, const uint8_t* p, size_t len) {
    ic::FrameHeader h;
    ic::FrameError fe = ic::FrameError::Truncated;
    if (len >= ic::kFrameHeaderSize) {
        fe = ic::decode_frame_header(p, len, c.max_payload, &h);
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
        end(c, VerbsCloseCause::BadFrame, 0, {}, fe);
        return false;
    }
    ++counters_.frames_recv;
    ++counters_.verbs_recvs;
    const ConnId id = c.id;
    try {
        handler_.on_frame(id, h, p + ic::kFrameHeaderSize);
    } catch (const std::bad_alloc&) {
        if (VerbsConn* still = find_live(id);
            still != nullptr && still->state != VerbsConnState::Closed)
            end(*still, VerbsCloseCause::OutOfMemory);
    } catch (...) {
        if (VerbsConn* still = find_live(id);
            still != nullptr && still->state != VerbsConnState::Closed)
            end(*still, VerbsCloseCause::Internal);
    }
    return true;
}

}  // namespace pgrac::tiers
