/*
 * pgrac_ic.h: the public C API of the pgrac_ic cluster interconnect.
 *
 * Upper layers (GES, Cache Fusion, other extensions) send messages and RPCs to
 * other instances through these calls. The same API and the same semantics hold
 * on every tier (stub, TCP, RDMA): reliable, ordered, exactly-once delivery per
 * pair of instances, with clear errors for dead or unknown peers.
 *
 * Calls that wait (RPCs, sends that block on a full queue) must be made from a
 * backend or background worker attached to shared memory; they sleep on the
 * process latch and honour interrupts (a query cancel ends the wait).
 *
 * Handlers are registered by message type in _PG_init of a library listed in
 * shared_preload_libraries, so that every LMS worker inherits them.
 */
#ifndef PGRAC_IC_H
#define PGRAC_IC_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Largest message body an upper layer may send in one message or reply. */
#define PGRAC_IC_MAX_MESSAGE 65536

/* Message types below this value are reserved for pgrac_ic itself. */
#define PGRAC_IC_FIRST_USER_TYPE 256
#define PGRAC_IC_MAX_MSG_TYPE 1023

/* Built-in message types. */
#define PGRAC_IC_MSG_PING 1 /* echo: the reply is the request body */
#define PGRAC_IC_MSG_NOTE 2 /* one-way note, counted where it is served */
#define PGRAC_IC_MSG_SEQ 3  /* exactly-once probe: u32 stream, u64 seq -> u8 outcome */

/* Flags for pgrac_ic_send / pgrac_ic_rpc. */
#define PGRAC_IC_NOWAIT 0x0001  /* a full send queue fails at once with QUEUE_FULL */
#define PGRAC_IC_CONTROL 0x0002 /* control lane: never queues behind bulk traffic */

typedef enum pgrac_ic_status {
    PGRAC_IC_OK = 0,
    PGRAC_IC_TIMEOUT = 1,       /* no reply within the timeout */
    PGRAC_IC_UNKNOWN_NODE = 2,  /* node id not in cluster.nodes */
    PGRAC_IC_UNREACHABLE = 3,   /* peer DOWN, or the tier has no network */
    PGRAC_IC_QUEUE_FULL = 4,    /* send queue to that peer is full */
    PGRAC_IC_TOO_BIG = 5,       /* message larger than PGRAC_IC_MAX_MESSAGE */
    PGRAC_IC_PEER_RESET = 6,    /* peer restarted (new incarnation) while in flight */
    PGRAC_IC_NO_HANDLER = 7,    /* no handler for that message type on the peer */
    PGRAC_IC_HANDLER_ERROR = 8, /* the peer's handler raised an error */
    PGRAC_IC_REPLY_TOO_BIG = 9, /* reply larger than the caller's buffer */
    PGRAC_IC_NOT_RUNNING = 10,  /* the interconnect listener is not running */
    PGRAC_IC_BAD_ARGUMENT = 11, /* invalid message type, flags or buffer */
    PGRAC_IC_BACKOFF = 12,      /* the peer asked requesters to hold off */
    PGRAC_IC_STATUS_COUNT = 13
} pgrac_ic_status;

/* A message as a handler sees it. The body is valid only during the call. */
typedef struct pgrac_ic_message {
    uint16_t msg_type;
    int32_t src_node;
    uint32_t route_key;
    const void* body;
    uint32_t len;
} pgrac_ic_message;

/* Where a handler writes its reply to an RPC. */
typedef struct pgrac_ic_reply {
    void* body;        /* buffer of `capacity` bytes */
    uint32_t capacity; /* PGRAC_IC_MAX_MESSAGE */
    uint32_t len;      /* bytes written by the handler */
} pgrac_ic_reply;

/*
 * A handler runs in an LMS worker, or in the IC listener if registered with
 * PGRAC_IC_HANDLER_IN_PLACE. For an RPC it fills `reply` and returns
 * PGRAC_IC_OK (or another status, which the caller receives); for a one-way
 * message `reply` is NULL. It may raise a PostgreSQL ERROR: the caller then
 * receives PGRAC_IC_HANDLER_ERROR with the error's message.
 */
typedef int (*pgrac_ic_handler_fn)(const pgrac_ic_message* msg, pgrac_ic_reply* reply);

/* Register a handler for msg_type (>= PGRAC_IC_FIRST_USER_TYPE); call from _PG_init. */
extern int pgrac_ic_register_handler(uint16_t msg_type, const char* name, pgrac_ic_handler_fn fn);

/*
 * The handler never waits (no heavyweight lock, no I/O, no sleep, no
 * condition variable; LWLocks and spinlocks held only briefly): the IC
 * listener runs it where the request arrives, which saves two process
 * wakeups per round trip. While it runs, no message moves on any lane of
 * this instance. Messages of one route_key are still handled in order.
 */
#define PGRAC_IC_HANDLER_IN_PLACE 0x0001

/* pgrac_ic_register_handler with flags (0 or PGRAC_IC_HANDLER_IN_PLACE). */
extern int pgrac_ic_register_handler_flags(uint16_t msg_type, const char* name,
                                           pgrac_ic_handler_fn fn, int flags);

/* This instance's node id (cluster.node_id). */
extern int pgrac_ic_my_node_id(void);

/*
 * One-way message to `node` (may be this node). route_key picks the LMS worker
 * on the receiver: messages with one route_key are handled in order by one
 * worker. Blocks up to timeout_ms on a full queue unless PGRAC_IC_NOWAIT.
 */
extern int pgrac_ic_send(int node, uint16_t msg_type, uint32_t route_key, const void* body,
                         uint32_t len, int flags, int timeout_ms);

/* The same message to every other configured node; returns the first failure. */
extern int pgrac_ic_broadcast(uint16_t msg_type, uint32_t route_key, const void* body, uint32_t len,
                              int flags, int timeout_ms);

/*
 * Request/reply. The reply body is copied into reply_buf (reply_cap bytes);
 * *reply_len gets its length. On PGRAC_IC_HANDLER_ERROR the reply buffer holds
 * the remote error message as a NUL-terminated string.
 */
extern int pgrac_ic_rpc(int node, uint16_t msg_type, uint32_t route_key, const void* body,
                        uint32_t len, void* reply_buf, uint32_t reply_cap, uint32_t* reply_len,
                        int flags, int timeout_ms);

/* A short constant text for a status code, e.g. "peer unreachable". */
extern const char* pgrac_ic_strerror(int status);

/*
 * Global Enqueue Service: cluster-wide locks with session-level semantics, as
 * pg_advisory_lock (the SQL functions pgrac_ges_* are built on these). Call
 * from a backend. Locking a resource this session holds in another mode
 * converts it; in the same mode it counts (unlock once per lock). A lock is
 * released when the session ends, and when this instance dies.
 */
typedef enum pgrac_ges_mode {
    PGRAC_GES_NL = 0, /* null: holds the resource's place, blocks nobody */
    PGRAC_GES_CR = 1, /* concurrent read */
    PGRAC_GES_CW = 2, /* concurrent write */
    PGRAC_GES_PR = 3, /* protected read (shared) */
    PGRAC_GES_PW = 4, /* protected write */
    PGRAC_GES_EX = 5  /* exclusive */
} pgrac_ges_mode;

/* Largest resource name, in bytes. */
#define PGRAC_GES_MAX_NAME 64

/*
 * Takes (or converts to) `mode` on a resource named by text or by a 64-bit id.
 * timeout_ms: -1 waits for the grant, 0 does not wait (NOWAIT), > 0 waits that
 * long. Returns 1 when granted, 0 when not granted in time. Raises a
 * PostgreSQL ERROR for a deadlock victim (SQLSTATE 40P01), a query cancel, a
 * name longer than PGRAC_GES_MAX_NAME, or an interconnect failure.
 */
extern int pgrac_ges_lock_name(const char* resource, pgrac_ges_mode mode, int timeout_ms);
extern int pgrac_ges_lock_id(int64_t resource, pgrac_ges_mode mode, int timeout_ms);
/* Releases one level of a lock this session holds; 0 (and a WARNING) if not held. */
extern int pgrac_ges_unlock_name(const char* resource);
extern int pgrac_ges_unlock_id(int64_t resource);
/* Releases every global lock of this session; returns how many resources. */
extern int pgrac_ges_unlock_all(void);

/*
 * The fencing token of a lock this session holds (0 if it holds none). Tokens
 * of one resource grow strictly across the cluster with every grant (the
 * membership epoch in the high 32 bits): an upper layer that writes shared
 * state under a global lock stores the token with the write and refuses a
 * write carrying an older token than one it has seen (docs/ges.md, "Fencing
 * tokens").
 *
 * Every GES call first checks that this session's locks are still valid: if
 * this node was fenced (it lost its membership lease) or the LMS worker of a
 * lock restarted, the void locks are dropped and an ERROR (SQLSTATE 55P03,
 * "global lock lost") is raised. A request while the node is not a member
 * raises "refused: no_quorum".
 */
extern uint64_t pgrac_ges_token_name(const char* resource);
extern uint64_t pgrac_ges_token_id(int64_t resource);

/*
 * Lock value blocks (docs/ges.md, "Lock value blocks"): up to
 * PGRAC_GES_MAX_VALUE bytes a resource carries with its locks. Every grant
 * brings the resource's value; a PW or EX holder sets a new one, which is
 * written when it releases the lock (pgrac_ges_unlock) or converts it down.
 * The value turns invalid when a PW or EX holder goes without writing it (its
 * session ends or releases everything, its node is fenced) or when a
 * membership change leaves no holder above CR to tell it, until a PW or EX
 * holder writes it again. It lives as long as some lock or request on the
 * resource (the node's cached locks count): hold NL to keep it.
 *
 * pgrac_ges_lock_value_*: copies the value of this session's lock into buf
 * (PGRAC_GES_MAX_VALUE bytes) and its length into *len; returns 1 if valid,
 * 0 if invalid (*len 0). pgrac_ges_set_lock_value_*: sets it (PW or EX
 * only). Both raise an ERROR if this session does not hold the resource.
 */
#define PGRAC_GES_MAX_VALUE 32
extern int pgrac_ges_lock_value_name(const char* resource, void* buf, int* len);
extern int pgrac_ges_lock_value_id(int64_t resource, void* buf, int* len);
extern void pgrac_ges_set_lock_value_name(const char* resource, const void* value, int len);
extern void pgrac_ges_set_lock_value_id(int64_t resource, const void* value, int len);

/*
 * Cache Fusion: the current image of blocks, served by `node` from its buffer
 * pool (read in from storage if they are not there), named by BufferTag.
 * Fetches `count` (>= 1) consecutive blocks from `first`, stopping at the end
 * of the fork; `pages` receives BLCKSZ bytes per block and `lsns` (may be
 * NULL) each page's LSN. Returns the number of blocks fetched. Raises a
 * PostgreSQL ERROR for a missing or dropped relation, a first block past the
 * end, or an interconnect failure. Privileges are the caller's business (the
 * SQL functions check SELECT on the relation).
 */
extern int pgrac_cf_fetch_blocks(int node, uint32_t spcoid, uint32_t dboid, uint32_t relnumber,
                                 int forknum, uint32_t first, int count, void* pages,
                                 uint64_t* lsns);

#ifdef __cplusplus
}
#endif

#endif /* PGRAC_IC_H */
