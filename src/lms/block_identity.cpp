// Serving-side identity of a block request (block_identity.hpp). The LMS has
// no database connection, hence no relcache or syscache for the relation's
// database: it reads that database's relation map (pg_filenode.map, as
// CREATE DATABASE ... STRATEGY wal_log does for its source) to find pg_class,
// and pg_class's heap pages through the buffer pool, keeping the row whose
// oid is the relation's and that is valid now (SnapshotSelf: its inserter
// committed, no committed deleter). Where a relation's row was found last is
// remembered, so that a repeated request reads one pg_class page.
extern "C" {
#include "postgres.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_tablespace_d.h"
#include "common/relpath.h"
#include "storage/buf_internals.h"
#include "storage/bufmgr.h"
#include "storage/bufpage.h"
#include "storage/smgr.h"
#include "utils/relmapper.h"
#include "utils/snapmgr.h"
}

#include <cstring>

#include "instance/guc.hpp"
#include "capi/handler_registry.hpp"
#include "lms/block_identity.hpp"
#include "lms/kept_files.hpp"
#include "lms/request_server.hpp"

namespace pgrac::glue {

namespace {

struct ClassRow {
    bool found;
    Oid relfilenode, reltablespace;
    char relkind, relpersistence;
};

// Where relid's pg_class row was last found (direct-mapped, per LMS worker).
struct RowPlace {
    Oid db, relid, classfile;
    BlockNumber blk;
    OffsetNumber off;
};
constexpr uint32_t kPlaces = 256;
RowPlace g_places[kPlaces];

// Serving in place: the last check needed something that would wait.
bool g_undecided = false;
bool undecided() {
    g_undecided = true;
    return false;
}

RowPlace* place_of(Oid db, Oid relid) {
    return &g_places[(db * 31u + relid) % kPlaces];
}

// A database's default tablespace is the one that holds its relation map:
// the relation's own tablespace or pg_default (InvalidOid if neither).
Oid database_tablespace(Oid db, Oid spc) {
    const Oid candidates[2] = {spc, DEFAULTTABLESPACE_OID};
    for (const Oid c : candidates) {
        if (c == GLOBALTABLESPACE_OID) continue;
        char* dir = GetDatabasePath(db, c);
        char file[MAXPGPATH];
        snprintf(file, sizeof file, "%s/pg_filenode.map", dir);
        pfree(dir);
        if (access(file, F_OK) == 0) return c;
    }
    return InvalidOid;
}

// Where a database's pg_class lives, per LMS worker: reading the relation map
// (open, read, close) on every request cost more than the rest of the check,
// so it is read again only when its file changed (inode, size or mtime: the
// relmapper rewrites it when a mapped catalog such as pg_class is rewritten).
// The default tablespace cannot change while the request holds its lock on
// the database (ALTER DATABASE SET TABLESPACE takes AccessExclusiveLock);
// between requests a move makes the file vanish from the cached path.
struct DbContext {
    Oid db, datspc, classfile;
    char map_path[MAXPGPATH];
    ino_t ino;
    off_t size;
    struct timespec mtime;
};
constexpr uint32_t kDbContexts = 16;
DbContext g_dbs[kDbContexts];

// A map written within the last 2 s is read again on every request, not
// remembered: file timestamps move in coarse ticks (a few ms; whole seconds on
// some file systems), and a second rewrite within the tick of the first would
// look like the same file. One written before that has a timestamp no later
// rewrite can repeat. Maps are rewritten rarely (VACUUM FULL of a mapped
// catalog), so the reads cost little.
constexpr int64_t kSettledNs = 2000LL * 1000 * 1000;
bool settled(const struct stat& st) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME_COARSE, &now) != 0) return false;
    const int64_t age = (static_cast<int64_t>(now.tv_sec) - st.st_mtim.tv_sec) * 1000000000 +
                        (now.tv_nsec - st.st_mtim.tv_nsec);
    return age >= kSettledNs;
}

bool same_file(const DbContext& c, const struct stat& st) {
    return c.ino == st.st_ino && c.size == st.st_size && c.mtime.tv_sec == st.st_mtim.tv_sec &&
           c.mtime.tv_nsec == st.st_mtim.tv_nsec;
}

// pg_class's storage in db, or false if db has no relation map where the
// request's tablespace or pg_default would hold it.
bool class_storage(Oid db, Oid req_spc, RelFileNode* cls, char** dbpath) {
    DbContext& c = g_dbs[db % kDbContexts];
    struct stat st;
    if (c.db == db && stat(c.map_path, &st) == 0 && same_file(c, st)) {
        *cls = RelFileNode{c.datspc, db, c.classfile};
        *dbpath = nullptr;
        return true;
    }
    // In place too: once per database (a 512-byte file under a shared
    // lightweight lock), then remembered until the file changes (once settled). A changed
    // map of this database may mean a rewritten pg_class or a dropped,
    // re-created or moved database: no file kept open is used again. (Not
    // when another database's entry is replaced: its files are the redo
    // pointer's to close, and two databases sharing an entry would close
    // everything on every request.)
    if (c.db == db) kept_files_close_all();
    const Oid datspc = database_tablespace(db, req_spc);
    if (!OidIsValid(datspc)) return false;
    char* path = GetDatabasePath(db, datspc);
    c = DbContext{};
    snprintf(c.map_path, sizeof c.map_path, "%s/pg_filenode.map", path);
    // stat first: a map rewritten between the two is seen by the next request.
    const bool stated = stat(c.map_path, &st) == 0 && settled(st);
    const Oid classfile = RelationMapOidToFilenodeForDatabase(path, RelationRelationId);
    if (stated) {
        c.db = db;
        c.datspc = datspc;
        c.classfile = classfile;
        c.ino = st.st_ino;
        c.size = st.st_size;
        c.mtime = st.st_mtim;
    }
    *cls = RelFileNode{datspc, db, classfile};
    *dbpath = path;
    return true;
}

// SnapshotSelf's answer from the hint bits alone: 1 visible (inserter
// committed, no deleter), 0 invisible (inserter aborted, or a committed
// deleter), -1 undecided.
int visible_by_hints(uint16 infomask) {
    // As HeapTupleHeaderXminInvalid / XminCommitted read them (frozen = both bits).
    if ((infomask & HEAP_XMIN_FROZEN) == HEAP_XMIN_INVALID) return 0;
    if (!(infomask & HEAP_XMIN_COMMITTED)) return -1;
    if (infomask & HEAP_XMAX_INVALID) return 1;
    if (HEAP_XMAX_IS_LOCKED_ONLY(infomask)) return 1;  // a locker, not a deleter
    if ((infomask & HEAP_XMAX_COMMITTED) && !(infomask & HEAP_XMAX_IS_MULTI)) return 0;
    return -1;
}

// The tuple at off of a share-locked pg_class page, if it is relid's valid row.
bool row_at(Buffer buf, BlockNumber blk, OffsetNumber off, Oid relid, ClassRow* out) {
    const Page page = BufferGetPage(buf);
    if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(page)) return false;
    const ItemId iid = PageGetItemId(page, off);
    if (!ItemIdIsNormal(iid)) return false;
    HeapTupleData tup;
    tup.t_data = reinterpret_cast<HeapTupleHeader>(PageGetItem(page, iid));
    tup.t_len = ItemIdGetLength(iid);
    tup.t_tableOid = RelationRelationId;
    ItemPointerSet(&tup.t_self, blk, off);
    if (tup.t_len < tup.t_data->t_hoff + offsetof(FormData_pg_class, relpersistence) + 1)
        return false;
    const Form_pg_class c = reinterpret_cast<Form_pg_class>(GETSTRUCT(&tup));
    if (c->oid != relid) return false;
    if (serving_in_place()) {
        // Only what the hint bits decide; anything else may need clog or
        // multixact reads (an LMS worker checks).
        const int v = visible_by_hints(tup.t_data->t_infomask);
        if (v < 0) return undecided();
        if (v == 0) return false;
    } else if (!HeapTupleSatisfiesVisibility(&tup, SnapshotSelf, buf)) {
        return false;
    }
    *out = ClassRow{true, c->relfilenode, c->reltablespace, c->relkind, c->relpersistence};
    return true;
}

// Serving in place: looks at one pg_class page (every offset if off is 0),
// only if it is in the buffer pool and free to share-lock now. 1 found (off
// set), 0 not there, -1 undecided.
int look_in_place(SMgrRelation sr, RelFileNode cls, BlockNumber blk, OffsetNumber* off, Oid relid,
                  ClassRow* row) {
    const PrefetchBufferResult r = PrefetchSharedBuffer(sr, MAIN_FORKNUM, blk);
    if (!BufferIsValid(r.recent_buffer) ||
        !ReadRecentBuffer(cls, MAIN_FORKNUM, blk, r.recent_buffer))
        return (undecided(), -1);
    if (!LWLockConditionalAcquire(
            BufferDescriptorGetContentLock(GetBufferDescriptor(r.recent_buffer - 1)), LW_SHARED)) {
        ReleaseBuffer(r.recent_buffer);
        return (undecided(), -1);
    }
    int found = 0;
    const OffsetNumber first = *off != 0 ? *off : FirstOffsetNumber;
    const OffsetNumber last =
        *off != 0 ? *off : PageGetMaxOffsetNumber(BufferGetPage(r.recent_buffer));
    for (OffsetNumber o = first; o <= last && found == 0 && !g_undecided; o++) {
        if (row_at(r.recent_buffer, blk, o, relid, row)) {
            *off = o;
            found = 1;
        }
    }
    UnlockReleaseBuffer(r.recent_buffer);
    return g_undecided ? -1 : found;
}

// Serving in place: where the row was last, else a scan of at most
// kInPlaceScanPages pages, each in the buffer pool and free to share-lock
// now. Undecided otherwise, and when the row is not found (an LMS worker
// reads every page before it says a relation does not exist).
constexpr BlockNumber kInPlaceScanPages = 64;
// pg_class's size is asked (a system call) only for a scan or a place past
// the first segment: a page found by its buffer tag exists (a truncation
// drops the buffers past the new end first, and waits for our pin), and a
// miss in the first segment only prefetches.
ClassRow find_row_in_place(SMgrRelation sr, RelFileNode cls, Oid relid, RowPlace* p) {
    ClassRow row{};
    BlockNumber nblocks = InvalidBlockNumber;
    if (p->db == cls.dbNode && p->relid == relid && p->classfile == cls.relNode &&
        (p->blk < RELSEG_SIZE || p->blk < (nblocks = smgrnblocks(sr, MAIN_FORKNUM)))) {
        OffsetNumber off = p->off;
        const int r = look_in_place(sr, cls, p->blk, &off, relid, &row);
        if (r == 1) return row;
        if (r < 0) {
            // Not in the buffer pool (or locked). A place past pg_class's end
            // (the row moved, then VACUUM truncated pg_class) is never there
            // again: scan instead, as the size check did before it.
            if (nblocks == InvalidBlockNumber) nblocks = smgrnblocks(sr, MAIN_FORKNUM);
            if (p->blk < nblocks) return row;
            g_undecided = false;
        }
    }
    if (nblocks == InvalidBlockNumber) nblocks = smgrnblocks(sr, MAIN_FORKNUM);
    if (nblocks > kInPlaceScanPages) {
        undecided();
        return row;
    }
    for (BlockNumber blk = 0; blk < nblocks; blk++) {
        OffsetNumber off = 0;
        const int r = look_in_place(sr, cls, blk, &off, relid, &row);
        if (r < 0) return row;
        if (r == 1) {
            *p = RowPlace{cls.dbNode, relid, cls.relNode, blk, off};
            return row;
        }
    }
    undecided();
    return row;
}

// relid's valid row in the pg_class stored in cls: first where it was last
// found, else by reading every page.
ClassRow find_row(RelFileNode cls, Oid relid) {
    ClassRow row{};
    SMgrRelation sr = kept_files_open(cls);
    RowPlace* p = place_of(cls.dbNode, relid);
    if (serving_in_place()) return find_row_in_place(sr, cls, relid, p);
    const BlockNumber nblocks = smgrnblocks(sr, MAIN_FORKNUM);
    if (p->db == cls.dbNode && p->relid == relid && p->classfile == cls.relNode &&
        p->blk < nblocks) {
        const Buffer buf =
            ReadBufferWithoutRelcache(cls, MAIN_FORKNUM, p->blk, RBM_NORMAL, nullptr, true);
        LockBuffer(buf, BUFFER_LOCK_SHARE);
        const bool hit = row_at(buf, p->blk, p->off, relid, &row);
        UnlockReleaseBuffer(buf);
        if (hit) return row;
    }
    for (BlockNumber blk = 0; blk < nblocks && !row.found; blk++) {
        const Buffer buf =
            ReadBufferWithoutRelcache(cls, MAIN_FORKNUM, blk, RBM_NORMAL, nullptr, true);
        LockBuffer(buf, BUFFER_LOCK_SHARE);
        const OffsetNumber maxoff = PageGetMaxOffsetNumber(BufferGetPage(buf));
        for (OffsetNumber off = FirstOffsetNumber; off <= maxoff; off++) {
            if (row_at(buf, blk, off, relid, &row)) {
                *p = RowPlace{cls.dbNode, relid, cls.relNode, blk, off};
                break;
            }
        }
        UnlockReleaseBuffer(buf);
    }
    return row;
}

// nullptr if rnode is relid's storage in db, else why not (palloc'd).
char* mismatch(Oid db, Oid relid, RelFileNode rnode) {
    if (db == InvalidOid) {
        if (serving_in_place()) return (undecided(), nullptr);  // the global map: lock and I/O
        // Shared relations are all catalogs, all mapped (relmapper.c).
        char* global = GetDatabasePath(InvalidOid, GLOBALTABLESPACE_OID);
        if (rnode.spcNode == GLOBALTABLESPACE_OID && rnode.dbNode == InvalidOid &&
            RelationMapOidToFilenodeForDatabase(global, relid) == rnode.relNode)
            return nullptr;
        return psprintf("%u/%u/%u is not the storage of shared relation %u on node %d",
                        rnode.spcNode, rnode.dbNode, rnode.relNode, relid, pgrac_node_id);
    }
    RelFileNode cls;
    char* dbpath = nullptr;
    if (rnode.dbNode != db || rnode.spcNode == GLOBALTABLESPACE_OID ||
        !class_storage(db, rnode.spcNode, &cls, &dbpath)) {
        return psprintf(
            "database %u of block request %u/%u/%u does not exist on node %d "
            "(or its default tablespace is neither pg_default nor %u)",
            db, rnode.spcNode, rnode.dbNode, rnode.relNode, pgrac_node_id, rnode.spcNode);
    }
    const Oid datspc = cls.spcNode;
    const ClassRow row = find_row(cls, relid);
    if (g_undecided) return nullptr;
    if (!row.found)
        return psprintf("relation %u does not exist in database %u on node %d", relid, db,
                        pgrac_node_id);
    if (row.relkind == RELKIND_SEQUENCE || row.relpersistence == RELPERSISTENCE_TEMP)
        return psprintf(
            "relation %u of database %u on node %d is a %s: its blocks are not "
            "shipped",
            relid, db, pgrac_node_id,
            row.relkind == RELKIND_SEQUENCE ? "sequence" : "temporary relation");
    if (!OidIsValid(row.relfilenode) && serving_in_place()) return (undecided(), nullptr);
    if (!OidIsValid(row.relfilenode) && dbpath == nullptr) dbpath = GetDatabasePath(db, datspc);
    const Oid file = OidIsValid(row.relfilenode)
                         ? row.relfilenode
                         : RelationMapOidToFilenodeForDatabase(dbpath, relid);
    const Oid spc = OidIsValid(row.reltablespace) ? row.reltablespace : datspc;
    if (file == rnode.relNode && spc == rnode.spcNode) return nullptr;
    return psprintf(
        "block request names relation %u of database %u with storage %u/%u/%u, "
        "but on node %d its storage is %u/%u/%u",
        relid, db, rnode.spcNode, rnode.dbNode, rnode.relNode, pgrac_node_id, spc, db, file);
}

}  // namespace

bool verify_block_identity(Oid db, Oid relid, RelFileNode rnode) {
    g_undecided = false;
    char* why = mismatch(db, relid, rnode);
    // A multixact xmax looked up above registers this process as a reader
    // of multixacts; the LMS runs no transaction whose end would clear it.
    AtEOXact_MultiXact();
    if (g_undecided) return false;
    if (why != nullptr) ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE), errmsg("%s", why)));
    return true;
}

bool block_identity_holds(Oid db, Oid relid, RelFileNode rnode) {
    g_undecided = false;
    const bool holds = mismatch(db, relid, rnode) == nullptr;
    AtEOXact_MultiXact();
    return holds && !g_undecided;
}

bool block_identity_undecided() {
    return g_undecided;
}

void reset_block_identity_cache() {
    std::memset(g_places, 0, sizeof g_places);
    std::memset(g_dbs, 0, sizeof g_dbs);
}

}  // namespace pgrac::glue
