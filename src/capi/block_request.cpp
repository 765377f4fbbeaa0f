extern "C" {
#include "postgres.h"

#include "access/relation.h"
#include "catalog/pg_class.h"
#include "catalog/pg_tablespace_d.h"
#include "common/relpath.h"
#include "miscadmin.h"
#include "storage/block.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relfilenodemap.h"
#include "utils/rls.h"
}

#include "capi/block_request.hpp"

namespace pgrac::glue {

namespace {

// A page image is every row of the block, whatever the column privileges or
// row-level security policies say: reading one needs SELECT on the relation,
// and is refused where row-level security applies to the caller. Checked
// before the relation is locked (as RangeVarGetRelidExtended callbacks do), so
// that a caller without the privilege can neither queue behind nor block a
// DDL on a relation it may not read; checked again once it is locked.
void check_may_read_pages(Oid relid) {
    const char* name = get_rel_name(relid);
    if (name == nullptr)
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                        errmsg("relation with OID %u does not exist", relid)));
    const AclResult acl = pg_class_aclcheck(relid, GetUserId(), ACL_SELECT);
    if (acl != ACLCHECK_OK) aclcheck_error(acl, get_relkind_objtype(get_rel_relkind(relid)), name);
    if (check_enable_rls(relid, InvalidOid, true) == RLS_ENABLED)
        ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                        errmsg("cannot fetch blocks of relation \"%s\": row-level security "
                               "applies to the current user",
                               name)));
}

}  // namespace

BlockRequest block_relation_request(uint32_t relid, const char* forkname, int64_t first) {
    BlockRequest rq;
    check_may_read_pages(relid);
    Relation rel = relation_open(relid, AccessShareLock);
    check_may_read_pages(relid);
    if (!RELKIND_HAS_STORAGE(rel->rd_rel->relkind) || rel->rd_rel->relkind == RELKIND_SEQUENCE)
        ereport(ERROR, (errcode(ERRCODE_WRONG_OBJECT_TYPE),
                        errmsg("\"%s\" has no storage whose blocks can be fetched",
                               RelationGetRelationName(rel)),
                        errdetail("Sequences are refused: their storage is replaced without an "
                                  "exclusive lock.")));
    if (RelationUsesLocalBuffers(rel))
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("blocks of temporary relation \"%s\" cannot be fetched",
                               RelationGetRelationName(rel))));
    rq.db = rel->rd_rel->relisshared ? InvalidOid : MyDatabaseId;
    rq.relid = relid;
    rq.spc = rel->rd_node.spcNode;
    rq.rel = rel->rd_node.relNode;
    // Keep the lock to the end of the transaction: the relation is not dropped
    // or rewritten here meanwhile (the serving instance locks it too, and
    // checks that rq.rel is still its storage there: docs/cache_fusion.md).
    relation_close(rel, NoLock);
    rq.fork = static_cast<uint8_t>(forkname_to_number(forkname));
    rq.first = block_number(first);
    rq.count = 1;
    return rq;
}

uint32_t block_number(int64_t blkno) {
    if (blkno < 0 || blkno > static_cast<int64_t>(MaxBlockNumber))
        ereport(ERROR,
                (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                 errmsg("block number %lld is out of range", static_cast<long long>(blkno))));
    return static_cast<uint32_t>(blkno);
}

uint32_t block_relation_of_tag(uint32_t spc, uint32_t db, uint32_t relnumber) {
    if (db != InvalidOid && db != MyDatabaseId)
        ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                        errmsg("blocks of database %u can be fetched by BufferTag only with the "
                               "relation's OID (reloid), or from a session connected to it",
                               db)));
    const Oid relid = RelidByRelfilenode(db == InvalidOid ? GLOBALTABLESPACE_OID : spc, relnumber);
    if (!OidIsValid(relid))
        ereport(ERROR,
                (errcode(ERRCODE_UNDEFINED_TABLE),
                 errmsg("no relation of this database has storage %u/%u/%u", spc, db, relnumber)));
    return relid;
}

}  // namespace pgrac::glue
