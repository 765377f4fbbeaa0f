// The serving side's check that a block request names what it claims
// (src/lms/block_identity.cpp): relNumber in spc is, right now, the storage of
// relation relid of database db on this instance. The LMS is connected to no
// database, so the check reads that database's pg_class itself (its relation
// map, then the heap pages through the buffer pool); docs/cache_fusion.md
// explains why this, under the relation lock, is enough.
//
// PostgreSQL types: include only after postgres.h (glue files).
#pragma once

namespace pgrac::glue {

// Raises an ERROR naming the mismatch unless rnode is the storage of relid in
// db (db 0: a shared catalog) and relid is a permanent relation whose blocks
// may be shipped (not a sequence, not temporary). Call with the relation
// locked and CurrentResourceOwner set: it pins buffers of pg_class.
// Serving in place (the listener, serving_in_place()), it never waits: it
// answers only from what it remembers and what is in the buffer pool, with
// pg_class rows whose hint bits decide their visibility; otherwise it returns
// false (undecided: the caller declines, and an LMS worker checks).
bool verify_block_identity(Oid db, Oid relid, RelFileNode rnode);

// The same test, false instead of an error (after the read: has a DDL slipped
// in?). In place, block_identity_undecided() says whether it could not tell.
bool block_identity_holds(Oid db, Oid relid, RelFileNode rnode);
bool block_identity_undecided();

// Forgets where rows were found (after an error: a moved database, a
// rewritten pg_class).
void reset_block_identity_cache();

}  // namespace pgrac::glue
