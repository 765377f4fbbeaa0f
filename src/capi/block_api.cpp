// The block fetch of the C API (include/pgrac_ic/pgrac_ic.h) for upper
// layers: blocks named by BufferTag, the relation found by the local catalog
// (src/capi/block_request.hpp), fetched by src/capi/block_fetch.hpp. Reports
// failures with ereport; nothing below it throws.
extern "C" {
#include "postgres.h"

#include "common/relpath.h"
}

#include "capi/block_fetch.hpp"
#include "capi/block_request.hpp"
#include "capi/send_path.hpp"

using namespace pgrac::glue;

extern "C" int pgrac_cf_fetch_blocks(int node, uint32_t spcoid, uint32_t dboid, uint32_t relnumber,
                                     int forknum, uint32_t first, int count, void* pages,
                                     uint64_t* lsns) {
    refuse_in_place();
    if (count < 1 || pages == nullptr || forknum < 0 || forknum > MAX_FORKNUM)
        ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                        errmsg("pgrac_cf_fetch_blocks: count must be at least 1, pages set and "
                               "the fork valid")));
    BlockRequest rq;
    rq.spc = spcoid;
    rq.db = dboid;
    rq.rel = relnumber;
    rq.relid = block_relation_of_tag(spcoid, dboid, relnumber);
    rq.fork = static_cast<uint8_t>(forknum);
    rq.first = first;
    return block_fetch_into(node, rq, count, pages, lsns);
}
