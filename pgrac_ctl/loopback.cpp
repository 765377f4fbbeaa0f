#include "loopback.hpp"

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace pgrac::ctl {
namespace {

using Clock = std::chrono::steady_clock;

struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& what, int err) {
    throw Failure(what + ": " + std::strerror(err));
}

int mtu_bytes(ibv_mtu m) {
    return 128 << static_cast<int>(m);
}  // IBV_MTU_256 == 1

// All verbs objects of the test; released in reverse order.
class Loopback {
  public:
    explicit Loopback(const LoopbackOptions& o) : o_(o) {}
    ~Loopback() {
        for (ibv_qp* qp : qp_)
            if (qp) ibv_destroy_qp(qp);
        for (ibv_cq* cq : cq_)
            if (cq) ibv_destroy_cq(cq);
        if (mr_) ibv_dereg_mr(mr_);
        if (pd_) ibv_dealloc_pd(pd_);
        if (ctx_) ibv_close_device(ctx_);
        std::free(buf_);
    }

    LoopbackResult run() {
        LoopbackResult r;
        deadline_ = Clock::now() + std::chrono::milliseconds(o_.timeout_ms);
        const auto t0 = Clock::now();
        setup();
        r.path_mtu = mtu_bytes(mtu_);
        for (int s = 0; s < 2; ++s)
            for (int slot = 0; slot < o_.window; ++slot) post_recv(s, slot);
        pingpong(10, o_.lat_size);  // warm-up: caches, lazy kernel paths
        auto t = Clock::now();
        pingpong(o_.lat_iters, o_.lat_size);
        r.lat_us_per_iter =
            std::chrono::duration<double, std::micro>(Clock::now() - t).count() / o_.lat_iters;
        t = Clock::now();
        stream(o_.bw_iters, o_.bw_size);
        const double secs = std::chrono::duration<double>(Clock::now() - t).count();
        r.bw_mb_per_s = secs > 0 ? static_cast<double>(o_.bw_iters) * o_.bw_size / secs / 1e6 : 0;
        r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        r.ok = true;
        return r;
    }

  private:
    size_t slot_size() const { return std::max(o_.lat_size, o_.bw_size); }
    // Per side: window receive slots, then one send slot.
    char* slot(int side, int idx) { return buf_ + (side * (o_.window + 1) + idx) * slot_size(); }

    void setup() {
        int n = 0;
        ibv_device** list = ibv_get_device_list(&n);
        if (!list) fail("ibv_get_device_list", errno);
        for (int i = 0; i < n && !ctx_; ++i)
            if (o_.device == ibv_get_device_name(list[i])) {
                ctx_ = ibv_open_device(list[i]);
                if (!ctx_) {
                    int err = errno;
                    ibv_free_device_list(list);
                    fail("ibv_open_device(" + o_.device + ")", err);
                }
            }
        ibv_free_device_list(list);
        if (!ctx_) throw Failure("libibverbs lists no device " + o_.device);

        ibv_port_attr pa{};
        if (int rc = ibv_query_port(ctx_, static_cast<uint8_t>(o_.port), &pa))
            fail("ibv_query_port", rc);
        if (pa.state != IBV_PORT_ACTIVE)
            throw Failure("port " + std::to_string(o_.port) + " is not ACTIVE");
        mtu_ = pa.active_mtu;
        lid_ = pa.lid;
        if (o_.gid_index < 0 && lid_ == 0)
            throw Failure("InfiniBand port has no LID (no subnet manager?)");
        if (o_.gid_index >= 0 &&
            ibv_query_gid(ctx_, static_cast<uint8_t>(o_.port), o_.gid_index, &gid_))
            fail("ibv_query_gid(" + std::to_string(o_.gid_index) + ")", errno);

        pd_ = ibv_alloc_pd(ctx_);
        if (!pd_) fail("ibv_alloc_pd", errno);
        const size_t len = 2 * (o_.window + 1) * slot_size();
        if (posix_memalign(reinterpret_cast<void**>(&buf_), 4096, len))
            throw Failure("out of memory");
        std::memset(buf_, 0x5a, len);
        mr_ = ibv_reg_mr(pd_, buf_, len, IBV_ACCESS_LOCAL_WRITE);
        if (!mr_) fail("ibv_reg_mr (check ulimit -l, the locked-memory limit)", errno);
        for (int s = 0; s < 2; ++s) {
            cq_[s] = ibv_create_cq(ctx_, 2 * o_.window + 8, nullptr, nullptr, 0);
            if (!cq_[s]) fail("ibv_create_cq", errno);
            ibv_qp_init_attr ia{};
            ia.send_cq = ia.recv_cq = cq_[s];
            ia.qp_type = IBV_QPT_RC;
            ia.cap.max_send_wr = o_.window + 4;
            ia.cap.max_recv_wr = o_.window;
            ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
            ia.cap.max_inline_data = 64;
            qp_[s] = ibv_create_qp(pd_, &ia);
            if (!qp_[s]) {
                ia.cap.max_inline_data = 0;  // some devices have no inline sends
                qp_[s] = ibv_create_qp(pd_, &ia);
            }
            if (!qp_[s]) fail("ibv_create_qp(RC)", errno);
            max_inline_ = ia.cap.max_inline_data;
            max_send_[s] = static_cast<int>(ia.cap.max_send_wr);
        }
        for (int s = 0; s < 2; ++s) connect(s, qp_[1 - s]->qp_num);
    }

    void connect(int s, uint32_t remote_qpn) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = static_cast<uint8_t>(o_.port);
        a.qp_access_flags = 0;
        if (int rc = ibv_modify_qp(
                qp_[s], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
            fail("ibv_modify_qp(INIT)", rc);

        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = mtu_;
        a.dest_qp_num = remote_qpn;
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12;
        a.ah_attr.port_num = static_cast<uint8_t>(o_.port);
        if (o_.gid_index >= 0) {  // RoCE: addressed by GID, one hop (ourselves)
            a.ah_attr.is_global = 1;
            a.ah_attr.grh.dgid = gid_;
            a.ah_attr.grh.sgid_index = static_cast<uint8_t>(o_.gid_index);
            a.ah_attr.grh.hop_limit = 1;
        } else {
            a.ah_attr.dlid = lid_;
        }
        if (int rc =
                ibv_modify_qp(qp_[s], &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
            fail("ibv_modify_qp(RTR)", rc);

        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.sq_psn = 0;
        a.max_rd_atomic = 1;
        if (int rc = ibv_modify_qp(qp_[s], &a,
                                   IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
            fail("ibv_modify_qp(RTS)", rc);
    }

    void post_recv(int s, int idx) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(slot(s, idx)), static_cast<uint32_t>(slot_size()),
                    mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = static_cast<uint64_t>(idx);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(qp_[s], &wr, &bad)) fail("ibv_post_recv", rc);
    }

    void post_send(int s, size_t size) {
        while (sends_out_[s] >= max_send_[s]) poll(s);
        ibv_sge sge{reinterpret_cast<uintptr_t>(slot(s, o_.window)), static_cast<uint32_t>(size),
                    mr_->lkey};
        ibv_send_wr wr{};
        wr.wr_id = UINT64_MAX;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_SEND;
        wr.send_flags = IBV_SEND_SIGNALED | (size <= max_inline_ ? IBV_SEND_INLINE : 0);
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(qp_[s], &wr, &bad)) fail("ibv_post_send", rc);
        ++sends_out_[s];
    }

    // Reaps completions on side s; returns the number of receives (reposted).
    int poll(int s) {
        if (Clock::now() > deadline_)
            throw Failure("timed out after " + std::to_string(o_.timeout_ms) +
                          " ms waiting for completions");
        ibv_wc wc[16];
        int n = ibv_poll_cq(cq_[s], 16, wc);
        if (n < 0) throw Failure("ibv_poll_cq failed");
        int recvs = 0;
        for (int i = 0; i < n; ++i) {
            if (wc[i].status != IBV_WC_SUCCESS)
                throw Failure(std::string("work completion error: ") +
                              ibv_wc_status_str(wc[i].status));
            if (wc[i].opcode == IBV_WC_RECV) {
                post_recv(s, static_cast<int>(wc[i].wr_id));
                ++recvs;
            } else {
                --sends_out_[s];
            }
        }
        return recvs;
    }

    void wait_recv(int s) {
        while (poll(s) == 0) {
        }
    }

    void pingpong(int iters, size_t size) {
        for (int i = 0; i < iters; ++i) {
            post_send(0, size);
            wait_recv(1);
            post_send(1, size);
            wait_recv(0);
        }
    }

    // Side 0 streams to side 1 with at most `window` messages unreceived.
    void stream(int iters, size_t size) {
        int sent = 0, received = 0;
        while (received < iters) {
            while (sent < iters && sent - received < o_.window && sends_out_[0] < max_send_[0]) {
                post_send(0, size);
                ++sent;
            }
            received += poll(1);
            poll(0);
        }
        while (sends_out_[0] > 0) poll(0);
    }

    const LoopbackOptions o_;
    Clock::time_point deadline_;
    ibv_context* ctx_ = nullptr;
    ibv_pd* pd_ = nullptr;
    ibv_mr* mr_ = nullptr;
    ibv_cq* cq_[2] = {nullptr, nullptr};
    ibv_qp* qp_[2] = {nullptr, nullptr};
    char* buf_ = nullptr;
    ibv_mtu mtu_ = IBV_MTU_1024;
    uint16_t lid_ = 0;
    ibv_gid gid_{};
    size_t max_inline_ = 0;
    int max_send_[2] = {0, 0};
    int sends_out_[2] = {0, 0};
};

}  // namespace

LoopbackResult run_loopback(const LoopbackOptions& opts) {
    try {
        if (opts.lat_iters <= 0 || opts.bw_iters <= 0 || opts.window <= 0)
            throw Failure("iteration counts must be positive");
        Loopback lb(opts);
        return lb.run();
    } catch (const std::exception& e) {
        LoopbackResult r;
        r.error = e.what();
        return r;
    }
}

}  // namespace pgrac::ctl
