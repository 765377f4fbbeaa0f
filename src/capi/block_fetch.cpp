extern "C" {
#include "postgres.h"

#include "miscadmin.h"
}

#include <cstring>

#include "capi/block_fetch.hpp"
#include "capi/errors.hpp"
#include "ic/wire/message_types.hpp"

namespace pgrac::glue {

namespace {

struct IntoPages {
    void* pages;
    uint64_t* lsns;
};

void copy_entry(void* arg, const uint8_t* e, int64_t i) {
    const IntoPages* into = static_cast<const IntoPages*>(arg);
    std::memcpy(static_cast<uint8_t*>(into->pages) + static_cast<size_t>(i) * kBlockSize,
                e + kBlockEntryHeader, kBlockSize);
    if (into->lsns != nullptr) into->lsns[i] = entry_header(e).lsn;
}

}  // namespace

uint8_t* block_fetch_rpc(int node, const BlockRequest& rq, uint32_t* nblocks, uint32_t* count) {
    require_known_node(node);
    uint8_t req[kBlockRequestSize];
    encode_block_request(rq, req);
    uint8_t* buf = static_cast<uint8_t*>(palloc(PGRAC_IC_MAX_MESSAGE));
    uint32_t len = 0;
    // Room for what was asked (reply space comes from a shared pool).
    const uint32_t cap = kBlockReplyHeader + rq.count * (kBlockEntryHeader + kBlockSize);
    const int rc = pgrac_ic_rpc(node, ic::kMsgBlockFetch, block_route_key(rq), req, sizeof req, buf,
                                Min(cap, PGRAC_IC_MAX_MESSAGE), &len, 0, -1);
    if (rc != PGRAC_IC_OK) raise_status(rc, node, "block fetch", buf, len);
    BlockReplyHeader h;
    const bool header_ok = ic::codec::decode(buf, Min(len, kBlockReplyHeader), &h);
    const uint32_t n = h.count;
    if (!header_ok || n < 1 || n > rq.count ||
        len != kBlockReplyHeader + n * (kBlockEntryHeader + kBlockSize) ||
        entry_header(buf + kBlockReplyHeader).blkno != rq.first)
        ereport(ERROR, (errcode(ERRCODE_DATA_CORRUPTED),
                        errmsg("malformed block reply of %u bytes from node %d", len, node)));
    *nblocks = h.nblocks;
    *count = n;
    return buf;
}

int64_t block_fetch_each(int node, BlockRequest rq, int64_t count, BlockVisitor each, void* arg) {
    int64_t done = 0;
    while (done < count) {
        CHECK_FOR_INTERRUPTS();
        rq.count =
            static_cast<uint16_t>(Min(static_cast<int64_t>(kMaxBlocksPerReply), count - done));
        uint32_t nblocks, n;
        uint8_t* buf = block_fetch_rpc(node, rq, &nblocks, &n);
        const uint8_t* e = buf + kBlockReplyHeader;
        for (uint32_t i = 0; i < n; i++, e += kBlockEntryHeader + kBlockSize) each(arg, e, done++);
        pfree(buf);
        if (static_cast<uint64_t>(rq.first) + n >= nblocks) break;
        rq.first += n;
    }
    return done;
}

int block_fetch_into(int node, const BlockRequest& rq, int count, void* pages, uint64_t* lsns) {
    IntoPages into{pages, lsns};
    return static_cast<int>(block_fetch_each(node, rq, count, copy_entry, &into));
}

}  // namespace pgrac::glue
