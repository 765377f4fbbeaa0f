/*
 * ges_cache.pml: GES node-level lock caching with BASTs, membership epochs,
 * leases, replay behind a barrier, and fencing tokens (issue 27, item 5).
 * models/README.md says what is modelled, what is abstracted and why;
 * models/check.sh runs it.
 *
 * 3 nodes (0..2), 2 resources (0..1), modes NL < PR < EX.
 * A node keeps a lock after its last local user released it (cached: the
 * node owner's grant at the master, same mode, same token range); a backend
 * takes a covered mode from the cache without a message, each take with the
 * next token of the range; a BAST stops new takes, and once the local users
 * have drained the node gives the lock back (Release). Misses go to the
 * master and queue there FIFO.
 *
 * One process. Each step is one atomic choice among the enabled actions
 * (a backend's, a node's protocol step, the delivery or loss of a message in
 * flight, a view change) followed by one d_step that performs it, including
 * what its node then does in-process (a master that is the node itself is
 * called directly, as in the glue). No state inside a step is stored.
 * Messages in flight are a bag: any may be delivered next (reordering, a
 * stronger adversary than the real per-session FIFO) or lost at any time.
 *
 * Bounds (-D to change): MAXE epochs, ACQMAX backend acquisitions in a run,
 * GMAX master grants per resource and epoch, STEP = 2^k tokens per master
 * grant, SEQMAX messages to a master per (node, resource) and epoch, BAGSZ
 * messages in flight. Options: CANCEL (waiting backends may give up),
 * ONE_RES (resource 1 unused), NO_EVICT, LIVENESS (no loss; a progress check
 * in every final state), NO_S5, NO_CHECK_BOUND.
 *
 * Mutants (-D): MUTANT_KEEP_AFTER_BAST, MUTANT_NO_LEASE_FENCE,
 * MUTANT_TOKEN_REUSE, MUTANT_NO_BARRIER, MUTANT_EARLY_GIVEBACK, MUTANT_NO_SEQ,
 * MUTANT_REFRESH_IGNORES_WAITERS, MUTANT_IGNORE_BAST.
 * Witnesses (-DPROBES, pan -c0): cache_regrant, old_range, conversion,
 * bast_in_use, bast_giveback, refresh, moved_grant, moved_cache, early_bast,
 * reorder.
 */

#ifndef MAXE
#define MAXE 2
#endif
#ifndef ACQMAX
#define ACQMAX 3
#endif
#ifndef GMAX
#define GMAX 3
#endif
#ifndef STEP
#define STEP 2
#endif
#ifndef SEQMAX
#define SEQMAX 3
#endif
#ifndef BAGSZ
#define BAGSZ 4
#endif
#ifndef BOUND
#define BOUND (2*STEP)
#endif

#define NN 3
#define NR 2
#define NL 0
#define PR 1
#define EX 2
#define NONE 3

#define compat(a,b) ((a)==NL || (b)==NL || ((a)==PR && (b)==PR))
#define CI(n,r) ((n)*NR+(r))
#define MI(m,r,c) (((m)*NR+(r))*NN+(c))
#define LCNT(x,j) ((ms[x].lc >> (4*(j))) & 15)
/* A grant's fencing token: the epoch, then the master's grant count in the
 * epoch, then the index in the node's range of STEP: strictly increasing per
 * resource in grant order. (In the code: epoch << 32 | count << k | index.) */
#define TOKEN(e,g,i) ((((e)*(GMAX+1)+(g))*STEP)+(i))
#define INVIEW(mask,n) ((((mask)>>(n))&1)==1)
/* Rendezvous hashing over 3 nodes is a fixed preference order per resource:
 * resource 0: 0,1,2; resource 1: 1,2,0 (a majority view has >= 2 members).
 * A departing node's resources go to the next in order, nothing else moves. */
#define PREF0(r) ((r)==0 -> 0 : 1)
#define PREF1(r) ((r)==0 -> 1 : 2)
#define PREF2(r) ((r)==0 -> 2 : 0)
#define MASTER(r,mask) (INVIEW(mask,PREF0(r)) -> PREF0(r) : (INVIEW(mask,PREF1(r)) -> PREF1(r) : PREF2(r)))
#define MASTERS_ANY(mask,m) (MASTER(0,mask) == (m) || MASTER(1,mask) == (m))

/* ---- messages: one int each; 0 = empty */
#define K_REQ 1     /* client -> master: seq, mode asked, held (sender's held mode) */
#define K_REL 2     /* client -> master: seq, new held mode (release / down-convert) */
#define K_GRANT 3   /* master -> client: seq of the request, mode, token */
#define K_BAST 4    /* master -> holder: seq of the holder's grant, blocked mode */
#define K_REPLAY 5  /* client -> a master: its held mode of r0 (M) and r1 (H), and
                       the barrier marker, in one message (all or nothing) */
#define MK(k,d,s,r,e,q,m,h,t) ((k) | ((d)<<3) | ((s)<<5) | ((r)<<7) | ((e)<<8) | ((q)<<10) | ((m)<<12) | ((h)<<14) | ((t)<<16))
#define F_K(x) ((x)&7)
#define F_D(x) (((x)>>3)&3)
#define F_S(x) (((x)>>5)&3)
#define F_R(x) (((x)>>7)&1)
#define F_E(x) (((x)>>8)&3)
#define F_Q(x) (((x)>>10)&3)
#define F_M(x) (((x)>>12)&3)
#define F_H(x) (((x)>>14)&3)
#define F_T(x) (((x)>>16)&127)

#if MAXE > 3 || SEQMAX > 3 || STEP > 7 || BOUND > 14 || TOKEN(MAXE,GMAX,STEP-1) > 127 || BAGSZ < 3 || BAGSZ > 6
#error "bounds out of range for the packed state"
#endif

/* Witnesses (-DPROBES, run with pan -c0): the first time an interesting
 * event happens anywhere in the search, a failing assertion names it, so
 * that SPIN shows the checked model is not vacuous. `seen` is hidden: it
 * is not part of the state and so keeps what the whole search saw. */
#ifdef PROBES
#define WITNESS(name, bit, cond) \
  if :: (cond) && !((seen >> (bit)) & 1) -> seen = seen | (1 << (bit)); assert(!(WITNESS_ && name)) \
     :: else -> skip fi
#else
#define WITNESS(name, bit, cond) skip
#endif

/* ---- membership and per-node state */
typedef Node {
  unsigned leased : 1;   /* the node's lease is valid */
  unsigned ep : 2;       /* epoch the node has adopted (0: none, fenced) */
  unsigned rcvd : 3      /* its replay barrier: members whose replay arrived */
};
byte E = 1;              /* the committed epoch */
byte VM[MAXE+1];         /* members of each epoch (bit n) */
Node nd[NN];

/* ---- client side, per (node, resource): the node-level lock */
typedef Client {
  unsigned held : 2;     /* mode the master granted this node (cached or in use) */
  unsigned use : 2;      /* strongest mode its local holders use (NL: only cached) */
  unsigned want : 2;     /* a local backend waits for this mode */
  unsigned bast : 2;     /* blocked mode of a BAST not yet acted on */
  unsigned tu : 3;       /* tokens of the node's range used (0..STEP) */
  unsigned sq : 2;       /* messages sent to the master in this epoch */
  unsigned outst : 1;    /* a request to the master is outstanding */
  unsigned tb : 7        /* token of the master's grant: the node's range starts there */
};
Client cl[NN*NR];

/* ---- master side, per (master node, resource, client) */
typedef Entry {
  unsigned g : 2;        /* mode the master believes the client holds */
  unsigned l : 2;        /* newest seq taken from the client */
  unsigned q : 2;        /* queued request's mode (NL: none) */
  unsigned k : 2;        /* its FIFO rank, 1 = oldest (0: not queued) */
  unsigned b : 2;        /* strongest mode BASTed to it since its mode changed */
  unsigned lc : 12       /* ghost (S4): per other node j, 4 bits at 4*j: uses in a
                            mode conflicting with the queued request while it waits */
};
Entry ms[NN*NR*NN];
byte mt[NN*NR];          /* grants made in the epoch by master m for r (token counter) */

int bag[BAGSZ];          /* messages between nodes: kept sorted (canonical) */
#ifdef LIVENESS
bit dropped;             /* ghost: a send was lost to a full bag */
#endif

/* ---- the run's budget and ghosts for the properties */
byte acqs;               /* backend acquisitions so far */
byte gall[NR];           /* highest token of any use so far */
byte gex[NR];            /* highest token of an EX use so far */

/* ---- the step being taken: chosen atomically, 0 in every stored state */
byte act, an, ar, am;
hidden int sfq[6];       /* messages to self, handled within the step */
hidden byte sfn;

/* temporaries of the d_step (not part of the state) */
hidden byte hi, hj, hk, hq, hx, hy, hb, hrank, hcnt, hgo, hok, hn2, hr2, hmas, hconf, hh0, hh1, hm;
hidden byte pi, pj;
hidden int hmsg, htmp, hout;
/* always 1: they name the property in SPIN's report of a violated assertion */
hidden byte S1 = 1, S2 = 1, S3 = 1, S4 = 1, S5 = 1, L1 = 1, WITNESS_ = 1;
hidden byte cache_regrant = 1, old_range = 1, bast_in_use = 1, refresh = 1, moved_grant = 1,
            moved_cache = 1, early_bast = 1, reorder = 1, bast_giveback = 1, conversion = 1;
hidden int seen;

#define FROZEN(m) (nd[m].rcvd != VM[nd[m].ep])

/* ================= the bag: loss and reordering ================= */
inline bag_remove(ix) {
  hk = ix;
  do
  :: hk < BAGSZ-1 -> bag[hk] = bag[hk+1]; hk++
  :: else -> break
  od;
  bag[BAGSZ-1] = 0
}

/* To another node: into the bag (a copy of a message in flight merges with
 * it, a full bag loses the new one: both are losses). To itself: handled
 * before the step ends. */
inline send(x) {
  htmp = x;
  if
  :: F_D(htmp) == F_S(htmp) -> assert(sfn < 6); sfq[sfn] = htmp; sfn++
  :: else ->
     hk = 0;
     do
     :: hk < BAGSZ -> if :: bag[hk] == htmp -> htmp = 0 :: else -> skip fi; hk++
     :: else -> break
     od;
     if
     :: htmp != 0 && bag[BAGSZ-1] == 0 ->
        hk = BAGSZ-1;
        do
        :: hk > 0 && bag[hk-1] < htmp -> bag[hk] = bag[hk-1]; hk--
        :: else -> break
        od;
        bag[hk] = htmp
     :: else ->
#ifdef LIVENESS
        if :: htmp != 0 -> dropped = 1 :: else -> skip fi;
#endif
        skip
     fi
  fi
}

/* Messages to node n of an epoch older than `e`: n would drop them. */
inline purge_to(n, e) {
  pi = 0;
  do
  :: pi < BAGSZ ->
     if
     :: bag[pi] != 0 && F_D(bag[pi]) == n && F_E(bag[pi]) < e -> bag_remove(pi)
     :: else -> pi++
     fi
  :: else -> break
  od
}

/* Messages whose delivery can never change anything go at once (the
 * receiver would drop them): fewer states, no behaviour lost. */
#ifdef MUTANT_NO_SEQ
#define DEAD_SEQ(x) 0
#else
#define DEAD_SEQ(x) ((F_K(x) == K_REQ || F_K(x) == K_REL) && F_Q(x) <= ms[MI(F_D(x),F_R(x),F_S(x))].l)
#endif
#define DEAD(x) (!nd[F_D(x)].leased || F_E(x) < nd[F_D(x)].ep || (F_E(x) == nd[F_D(x)].ep && ( \
   (F_K(x) == K_GRANT && (!cl[CI(F_D(x),F_R(x))].outst || F_Q(x) != cl[CI(F_D(x),F_R(x))].sq)) || \
   DEAD_SEQ(x))))
inline gc() {
  pj = 0;
  do
  :: pj < BAGSZ ->
     if
     :: bag[pj] != 0 && DEAD(bag[pj]) ->
        /* a release overtaken by a newer message of its sender */
        WITNESS(reorder, 7, nd[F_D(bag[pj])].leased && F_E(bag[pj]) == nd[F_D(bag[pj])].ep &&
                F_K(bag[pj]) == K_REL && F_Q(bag[pj]) < ms[MI(F_D(bag[pj]),F_R(bag[pj]),F_S(bag[pj]))].l);
        bag_remove(pj)
     :: else -> pj++
     fi
  :: else -> break
  od
}

/* ================= properties ================= */
/* S1: the modes in use on a resource, over the nodes with a valid lease,
 * are pairwise compatible. Checked whenever a use starts or grows. */
inline check_s1(n, r, m) {
  for (hj : 0 .. NN-1) {
    assert(S1 && (hj == n || !nd[hj].leased || compat(cl[CI(hj,r)].use, m)))
  }
}

/* S2: a use's token is above every earlier conflicting use's. */
inline check_s2(r, m, t) {
  if
  :: m == EX -> assert(S2 && t > gall[r])
  :: else -> assert(S2 && t > gex[r])
  fi;
  if :: t > gall[r] -> gall[r] = t :: else -> skip fi;
  if :: m == EX && t > gex[r] -> gex[r] = t :: else -> skip fi
}

/* S4: while a request waits at a master, each other node starts at most
 * BOUND uses in a mode that conflicts with it (cached re-grants included). */
inline check_bound(n, r, m) {
#ifndef NO_CHECK_BOUND
  for (hi : 0 .. NN-1) {
    for (hj : 0 .. NN-1) {
      if
      :: hj != n && ms[MI(hi,r,hj)].q != NL && !compat(m, ms[MI(hi,r,hj)].q) ->
         ms[MI(hi,r,hj)].lc = ms[MI(hi,r,hj)].lc + (1 << (4*n));
         assert(S4 && LCNT(MI(hi,r,hj), n) <= BOUND)
      :: else -> skip
      fi
    }
  }
#endif
  skip
}

/* ================= client side ================= */
#ifdef MUTANT_NO_LEASE_FENCE
#define LOCAL_OK(n) (nd[n].ep > 0)
#else
#define LOCAL_OK(n) (nd[n].leased && nd[n].ep > 0)
#endif
/* A local holder may take mode m without a message: the node's grant
 * covers it, a token of the range is left, no BAST is pending (from the
 * BAST on, no new local take at all), and m goes with what the node's
 * holders use (or converts PR -> EX). */
#define CAN_LOCAL(n,r,m) (cl[CI(n,r)].held >= (m) && cl[CI(n,r)].tu < STEP && cl[CI(n,r)].bast == NL && \
   (cl[CI(n,r)].use == NL || (cl[CI(n,r)].use == PR && (m) == EX)))
/* Ask the master: for a stronger mode (new lock or up-conversion), or for a
 * new token range of the held mode once the range is used up (a refresh;
 * never while a BAST is pending: give back first). */
#define CAN_ASK(n,r) (nd[n].leased && nd[n].ep > 0 && cl[CI(n,r)].want != NL && !cl[CI(n,r)].outst && \
   cl[CI(n,r)].sq < SEQMAX && (cl[CI(n,r)].held < cl[CI(n,r)].want || (cl[CI(n,r)].tu == STEP && cl[CI(n,r)].bast == NL)))

inline local_grant(n, r, m) {
  hb = cl[CI(n,r)].tb + cl[CI(n,r)].tu;
#ifdef MUTANT_TOKEN_REUSE
  if :: cl[CI(n,r)].tu == 0 -> cl[CI(n,r)].tu = 1 :: else -> skip fi;   /* re-grants reuse a token */
#else
  cl[CI(n,r)].tu++;
#endif
  printf("  node %d r%d: a local holder gets %d, token %d\n", n, r, m, hb);
  check_s1(n, r, m);
  check_s2(r, m, hb);
  check_bound(n, r, m);
  cl[CI(n,r)].use = m
}

inline do_ask(n, r) {
  cl[CI(n,r)].sq++;
  cl[CI(n,r)].outst = 1;
  hq = cl[CI(n,r)].want;
  if :: cl[CI(n,r)].held > hq -> hq = cl[CI(n,r)].held :: else -> skip fi;
  hm = MASTER(r, VM[nd[n].ep]);
  hout = MK(K_REQ, hm, n, r, nd[n].ep, cl[CI(n,r)].sq, hq, cl[CI(n,r)].held, 0);
  printf("  node %d r%d: Req(mode %d, held %d, seq %d, epoch %d) to node %d\n", n, r, hq, cl[CI(n,r)].held, cl[CI(n,r)].sq, nd[n].ep, hm);
  send(hout)
}

/* A backend asks for m (a new lock, or PR -> EX): from the cache if it can,
 * else it waits and the node asks the master if it may now. */
#define G_ACQUIRE(n,r,m) (LOCAL_OK(n) && cl[CI(n,r)].want == NL && acqs < ACQMAX && \
   (cl[CI(n,r)].use == NL || (cl[CI(n,r)].use == PR && (m) == EX)))
inline acquire(n, r, m) {
  acqs++;
  printf("node %d r%d: a backend asks for %d (held %d, use %d)\n", n, r, m, cl[CI(n,r)].held, cl[CI(n,r)].use);
  if
  :: CAN_LOCAL(n, r, m) ->
     /* a lock mastered elsewhere taken again from the cache, no message */
     WITNESS(cache_regrant, 0, cl[CI(n,r)].tu >= 1 && MASTER(r, VM[nd[n].ep]) != n);
     /* ... from a range that a master of an older epoch gave */
     WITNESS(old_range, 1, cl[CI(n,r)].tu >= 1 && cl[CI(n,r)].tb / ((GMAX+1)*STEP) < nd[n].ep);
     local_grant(n, r, m)
  :: else ->
     cl[CI(n,r)].want = m;
     if :: CAN_ASK(n, r) -> do_ask(n, r) :: else -> skip fi
  fi
}

/* A waiting backend is served from the cache once nothing blocks it any
 * more (a give-back, a new epoch, a release). */
#define G_WAKE(n,r) (LOCAL_OK(n) && cl[CI(n,r)].want != NL && CAN_LOCAL(n, r, cl[CI(n,r)].want))
inline wake(n, r) {
  printf("node %d r%d: the waiting backend is served from the cache\n", n, r);
  local_grant(n, r, cl[CI(n,r)].want);
  cl[CI(n,r)].want = NL
}

/* The last local holder releases: the node keeps the grant, cached. */
#define G_RELEASE(n,r) (LOCAL_OK(n) && cl[CI(n,r)].use != NL && cl[CI(n,r)].want == NL)
inline release(n, r) {
  printf("node %d r%d: the backend releases (%d stays cached)\n", n, r, cl[CI(n,r)].held);
  /* the last local user of a lock BASTed while in use: the give-back waited for it */
  WITNESS(bast_in_use, 2, cl[CI(n,r)].bast != NL);
  cl[CI(n,r)].use = NL
}

/* A waiting backend gives up (timeout, cancel, deadlock victim); a grant
 * that comes later just stays in the cache. */
#define G_CANCEL(n,r) (LOCAL_OK(n) && cl[CI(n,r)].want != NL)
inline cancel(n, r) {
  printf("node %d r%d: the waiting backend gives up\n", n, r);
  cl[CI(n,r)].want = NL
}

/* Ask again (after a give-back, a new epoch, a used-up range). */
#define G_ASK(n,r) CAN_ASK(n,r)
inline ask(n, r) {
  do_ask(n, r)
}

/* BAST pending: no new local take (CAN_LOCAL); once the local users have
 * drained, the LMS gives the lock back: a Release of the node owner. */
#ifdef MUTANT_EARLY_GIVEBACK
#define GB_OK(n,r) 1                             /* gives back while still in use */
#else
#define GB_OK(n,r) (cl[CI(n,r)].use == NL)
#endif
#define G_GIVE_BACK(n,r) (nd[n].leased && nd[n].ep > 0 && cl[CI(n,r)].bast != NL && \
   !compat(cl[CI(n,r)].held, cl[CI(n,r)].bast) && cl[CI(n,r)].sq < SEQMAX && GB_OK(n,r))
inline give_back(n, r) {
  printf("node %d r%d: gives back its %d after a BAST for %d (in use: %d)\n", n, r, cl[CI(n,r)].held, cl[CI(n,r)].bast, cl[CI(n,r)].use);
  WITNESS(bast_giveback, 8, MASTER(r, VM[nd[n].ep]) != n);
#ifndef MUTANT_KEEP_AFTER_BAST
  /* the mutant tells the master but keeps its cache entry (and its range) */
  cl[CI(n,r)].held = NL;
  cl[CI(n,r)].tb = 0; cl[CI(n,r)].tu = 0;
#endif
  cl[CI(n,r)].bast = NL;
  cl[CI(n,r)].outst = 0;
  cl[CI(n,r)].sq++;
  hout = MK(K_REL, MASTER(r, VM[nd[n].ep]), n, r, nd[n].ep, cl[CI(n,r)].sq, NL, NL, 0);
  send(hout)
}

/* The cache is full (LRU): an unused lock is given back on its own. */
#define G_EVICT(n,r) (nd[n].leased && nd[n].ep > 0 && cl[CI(n,r)].held != NL && cl[CI(n,r)].use == NL && \
   cl[CI(n,r)].want == NL && cl[CI(n,r)].sq < SEQMAX)
inline evict(n, r) {
  printf("node %d r%d: evicts its cached %d\n", n, r, cl[CI(n,r)].held);
  cl[CI(n,r)].held = NL;
  cl[CI(n,r)].tb = 0; cl[CI(n,r)].tu = 0;
  cl[CI(n,r)].bast = NL;
  cl[CI(n,r)].outst = 0;
  cl[CI(n,r)].sq++;
  hout = MK(K_REL, MASTER(r, VM[nd[n].ep]), n, r, nd[n].ep, cl[CI(n,r)].sq, NL, NL, 0);
  send(hout)
}

/* A grant counts only as the answer to the node's newest message. */
inline on_grant(n) {
  hr2 = F_R(hmsg);
  hx = CI(n, hr2);
  if
  :: cl[hx].outst && F_Q(hmsg) == cl[hx].sq ->
     cl[hx].held = F_M(hmsg);
     cl[hx].tb = F_T(hmsg);
     cl[hx].tu = 0;
     cl[hx].outst = 0;
     /* a BAST that came before its grant (reordering) still counts */
     if :: compat(cl[hx].held, cl[hx].bast) -> cl[hx].bast = NL :: else -> skip fi;
     /* the backend the request was for gets it, BAST or not */
     if
     :: cl[hx].want != NL && cl[hx].held >= cl[hx].want &&
        (cl[hx].use == NL || (cl[hx].use == PR && cl[hx].want == EX)) ->
        /* a PR holder's up-conversion granted by a remote master */
        WITNESS(conversion, 9, cl[hx].use == PR && MASTER(hr2, VM[nd[n].ep]) != n);
        local_grant(n, hr2, cl[hx].want);
        cl[hx].want = NL
     :: else -> skip
     fi
  :: else -> skip
  fi
}

/* A BAST names the grant it is about (the seq of the request it answered):
 * the held grant, or the one still on its way (kept for it). */
inline on_bast(n) {
  hx = CI(n, F_R(hmsg));
  if
#ifdef MUTANT_IGNORE_BAST
  :: 1 -> skip
#endif
  :: (!compat(cl[hx].held, F_M(hmsg)) || (cl[hx].outst && F_Q(hmsg) == cl[hx].sq)) &&
     F_M(hmsg) > cl[hx].bast ->
     WITNESS(early_bast, 6, compat(cl[hx].held, F_M(hmsg)));
     cl[hx].bast = F_M(hmsg)
  :: else -> skip   /* nothing to give back (a stale BAST) */
  fi
}

/* ================= master side ================= */
inline enqueue(m, r, c, qm) {
  hcnt = 0;
  for (hi : 0 .. NN-1) { if :: ms[MI(m,r,hi)].k != 0 -> hcnt++ :: else -> skip fi }
  ms[MI(m,r,c)].q = qm;
  ms[MI(m,r,c)].k = hcnt + 1
}

inline dequeue(m, r, c) {
  if
  :: ms[MI(m,r,c)].k != 0 ->
     hrank = ms[MI(m,r,c)].k;
     for (hi : 0 .. NN-1) { if :: ms[MI(m,r,hi)].k > hrank -> ms[MI(m,r,hi)].k-- :: else -> skip fi }
     ms[MI(m,r,c)].k = 0;
     ms[MI(m,r,c)].q = NL;
     ms[MI(m,r,c)].lc = 0
  :: else -> skip
  fi
}

inline grant(m, r, c, qm) {
  /* a new token range for the mode a node already holds */
  WITNESS(refresh, 3, qm == ms[MI(m,r,c)].g && c != m);
  /* a grant by a master the resource moved to */
  WITNESS(moved_grant, 4, MASTER(r, VM[1]) != m && c != m);
  mt[CI(m,r)]++;
  printf("  master %d r%d: grants %d to node %d, token %d\n", m, r, qm, c, TOKEN(nd[m].ep, mt[CI(m,r)], 0));
  ms[MI(m,r,c)].g = qm;
  ms[MI(m,r,c)].b = NL;
  hout = MK(K_GRANT, c, m, r, nd[m].ep, ms[MI(m,r,c)].l, qm, 0, TOKEN(nd[m].ep, mt[CI(m,r)], 0));
  send(hout)
}

/* Serve the queue (the lock table's rules): conversions (the client holds
 * something) first, FIFO, each granted if it goes with the other holders;
 * a refresh (a new range for the held mode) only if no request of another
 * node that conflicts with it waits. Then, if no conversion waits, new
 * requests FIFO while grantable. */
inline serve(m, r) {
  hgo = 1;
  do
  :: hgo != 0 ->
     /* the oldest queued conversion (hgo 1), or the oldest request (hgo 2) */
     hy = NONE; hrank = 255;
     for (hi : 0 .. NN-1) {
       if
       :: ms[MI(m,r,hi)].k != 0 && (hgo == 2 || ms[MI(m,r,hi)].g != NL) && ms[MI(m,r,hi)].k < hrank ->
          hy = hi; hrank = ms[MI(m,r,hi)].k
       :: else -> skip
       fi
     }
     if
     :: hy == NONE -> hgo = (hgo == 1 -> 2 : 0)
     :: else ->
        hq = ms[MI(m,r,hy)].q;
        /* hok: hq goes with every other holder; hconf: the strongest request
         * of another node queued that conflicts with it */
        hok = 1;
        hconf = NL;
        for (hj : 0 .. NN-1) {
          if
          :: hj != hy && !compat(ms[MI(m,r,hj)].g, hq) -> hok = 0
          :: else -> skip
          fi;
          if
          :: hj != hy && ms[MI(m,r,hj)].k != 0 && !compat(ms[MI(m,r,hj)].q, hq) && ms[MI(m,r,hj)].q > hconf ->
             hconf = ms[MI(m,r,hj)].q
          :: else -> skip
          fi
        }
        if
        :: hok && mt[CI(m,r)] < GMAX &&
#ifndef MUTANT_REFRESH_IGNORES_WAITERS
           (hq > ms[MI(m,r,hy)].g || hconf == NL) &&
#endif
           1 ->
           dequeue(m, r, hy); grant(m, r, hy, hq)
        :: else -> hgo = 0
        fi
     fi
  :: else -> break
  od
}

/* Every holder whose mode blocks a queued request hears of it, once per
 * blocking situation (docs/ges.md, "BAST: once per blocking situation"). */
inline basts(m, r) {
  for (hn2 : 0 .. NN-1) {
    if
    :: ms[MI(m,r,hn2)].k != 0 ->
       for (hj : 0 .. NN-1) {
         if
         :: hj != hn2 && !compat(ms[MI(m,r,hj)].g, ms[MI(m,r,hn2)].q) && ms[MI(m,r,hn2)].q > ms[MI(m,r,hj)].b ->
            ms[MI(m,r,hj)].b = ms[MI(m,r,hn2)].q;
            printf("  master %d r%d: BAST for %d to node %d (node %d waits)\n", m, r, ms[MI(m,r,hn2)].q, hj, hn2);
            hout = MK(K_BAST, hj, m, r, nd[m].ep, ms[MI(m,r,hj)].l, ms[MI(m,r,hn2)].q, 0, 0);
            send(hout)
         :: else -> skip
         fi
       }
    :: else -> skip
    fi
  }
}

/* Nothing is served, BASTed or granted until every member's replay of the
 * epoch has arrived (the barrier). */
#ifdef MUTANT_NO_BARRIER
#define SERVING(m) 1
#else
#define SERVING(m) (!FROZEN(m))
#endif

/* Request or release from client c. Only a message newer than any taken
 * from c counts: a reordered older one is dropped. Each carries c's held
 * mode as of sending, which the master records (c's held can only have
 * gone down since, or up through this very request). */
inline on_master(m) {
  hr2 = F_R(hmsg);
  hn2 = F_S(hmsg);
  hx = MI(m, hr2, hn2);
  assert(MASTER(hr2, VM[nd[m].ep]) == m);
  if
#ifdef MUTANT_NO_SEQ
  :: F_Q(hmsg) == ms[hx].l -> skip
#else
  :: F_Q(hmsg) <= ms[hx].l -> skip
#endif
  :: else ->
     if :: F_Q(hmsg) > ms[hx].l -> ms[hx].l = F_Q(hmsg) :: else -> skip fi;
     dequeue(m, hr2, hn2);
     if :: ms[hx].g != F_H(hmsg) -> ms[hx].g = F_H(hmsg); ms[hx].b = NL :: else -> skip fi;
     if
     :: F_K(hmsg) == K_REQ -> enqueue(m, hr2, hn2, F_M(hmsg))
     :: else -> skip
     fi;
     hh0 = (hr2 == 0 -> 1 : 2)    /* the resource to settle */
  fi
}

/* Replay of c's locks in this epoch with its marker. An entry counts unless
 * c already sent something newer for the resource. */
inline on_replay(m) {
  hn2 = F_S(hmsg);
  for (hr2 : 0 .. NR-1) {
    if
    :: MASTER(hr2, VM[nd[m].ep]) == m && ms[MI(m,hr2,hn2)].l == 0 ->
       hq = (hr2 == 0 -> F_M(hmsg) : F_H(hmsg));
#ifndef NO_S5
       /* S5: replayed grants never conflict (replay_conflict stays 0) */
       for (hj : 0 .. NN-1) { assert(S5 && (hj == hn2 || compat(ms[MI(m,hr2,hj)].g, hq))) }
#endif
       /* a cached or held lock replayed to the master it moved to */
       WITNESS(moved_cache, 5, hq != NL && hn2 != m && MASTER(hr2, VM[1]) != m);
       ms[MI(m,hr2,hn2)].g = hq;
       ms[MI(m,hr2,hn2)].b = NL
    :: else -> skip
    fi
  }
  nd[m].rcvd = nd[m].rcvd | (1 << hn2);
  hh0 = (MASTER(0, VM[nd[m].ep]) == m -> 1 : 0) + (MASTER(1, VM[nd[m].ep]) == m -> 2 : 0)
}

/* Handles every message the step sent to its own node (and a delivered
 * one), and theirs in turn. */
inline drain() {
  do
  :: sfn > 0 ->
     hmsg = sfq[0];
     for (hi : 1 .. 5) { sfq[hi-1] = sfq[hi] }
     sfq[5] = 0;
     sfn--;
     hm = F_D(hmsg);
     hh0 = 0;   /* resources to settle: bit r */
     if
     :: F_K(hmsg) == K_REQ || F_K(hmsg) == K_REL -> on_master(hm)
     :: F_K(hmsg) == K_REPLAY -> on_replay(hm)
     :: F_K(hmsg) == K_GRANT -> on_grant(hm)
     :: F_K(hmsg) == K_BAST -> on_bast(hm)
     fi;
     for (hr2 : 0 .. NR-1) {
       if
       :: ((hh0 >> hr2) & 1) && SERVING(hm) -> serve(hm, hr2); basts(hm, hr2)
       :: else -> skip
       fi
     }
  :: else -> break
  od;
  hmsg = 0
}

/* ================= delivery ================= */
/* Slot i goes to its destination if that has a valid lease and has adopted
 * the message's epoch (messages of older epochs were dropped: gc). */
#define G_DELIVER(i) (bag[i] != 0 && nd[F_D(bag[i])].leased && F_E(bag[i]) == nd[F_D(bag[i])].ep)
inline deliver(i) {
  printf("deliver kind %d (1 Req, 2 Rel, 3 Grant, 4 Bast, 5 Replay): %d -> %d r%d, epoch %d, seq %d, mode %d\n",
         F_K(bag[i]), F_S(bag[i]), F_D(bag[i]), F_R(bag[i]), F_E(bag[i]), F_Q(bag[i]), F_M(bag[i]));
  sfq[sfn] = bag[i];
  sfn++;
  bag_remove(i)
}

#define G_LOSE(i) (bag[i] != 0)
inline lose(i) {
  printf("lost kind %d: %d -> %d r%d\n", F_K(bag[i]), F_S(bag[i]), F_D(bag[i]), F_R(bag[i]));
  bag_remove(i)
}

/* ================= membership ================= */
/* n adopts the committed epoch: its master side starts empty and frozen,
 * and it replays its whole registry (held modes, cached ones included) to
 * each node that masters a resource in the new view, with the marker (one
 * message); to itself in-process. */
#define G_ADOPT(n) (nd[n].leased && INVIEW(VM[E], n) && nd[n].ep < E)
inline adopt(n) {
  printf("node %d adopts epoch %d; replays r0 %d, r1 %d\n", n, E, cl[CI(n,0)].held, cl[CI(n,1)].held);
  nd[n].ep = E;
  for (hi : 0 .. NN*NR*NN-1) {
    if
    :: hi / (NR*NN) == n -> ms[hi].g = 0; ms[hi].l = 0; ms[hi].q = 0; ms[hi].k = 0; ms[hi].b = 0; ms[hi].lc = 0
    :: else -> skip
    fi
  }
  mt[CI(n,0)] = 0; mt[CI(n,1)] = 0;
  nd[n].rcvd = 0;
  for (hi : 0 .. NR-1) { cl[CI(n,hi)].sq = 0; cl[CI(n,hi)].outst = 0; cl[CI(n,hi)].bast = NL }
  purge_to(n, E);
  for (hmas : 0 .. NN-1) {
    if
    :: INVIEW(VM[E], hmas) && MASTERS_ANY(VM[E], hmas) ->
       hh0 = (MASTER(0, VM[E]) == hmas -> cl[CI(n,0)].held : 0);
       hh1 = (MASTER(1, VM[E]) == hmas -> cl[CI(n,1)].held : 0);
       hout = MK(K_REPLAY, hmas, n, 0, E, 0, hh0, hh1, 0);
       send(hout)
    :: else -> skip
    fi
  }
}

/* n's lease lapses: it fences itself. Its cached and in-use locks are void,
 * its tables dropped; it ignores every message until it adopts a newer
 * epoch. */
inline fence(n) {
  nd[n].leased = 0;
  for (hi : 0 .. NN*NR*NN-1) {
    if
    :: hi / (NR*NN) == n -> ms[hi].g = 0; ms[hi].l = 0; ms[hi].q = 0; ms[hi].k = 0; ms[hi].b = 0; ms[hi].lc = 0
    :: else -> skip
    fi
  }
  mt[CI(n,0)] = 0; mt[CI(n,1)] = 0;
  nd[n].rcvd = 0;
#ifndef MUTANT_NO_LEASE_FENCE
  for (hi : 0 .. NR-1) {
    cl[CI(n,hi)].held = NL; cl[CI(n,hi)].use = NL; cl[CI(n,hi)].want = NL; cl[CI(n,hi)].bast = NL;
    cl[CI(n,hi)].tb = 0; cl[CI(n,hi)].tu = 0; cl[CI(n,hi)].sq = 0; cl[CI(n,hi)].outst = 0
  }
  nd[n].ep = 0;
#endif
  purge_to(n, MAXE+1)
}

/* A view commits: a majority `mask` in the next epoch. The assumption
 * (docs/ges.md A1-A3 with A4, A6, and step 3 of "Why a lock can never be
 * held twice"): every node it leaves out had its lease lapse, and so fenced
 * itself, before the commit. A pause (the node takes no step) and a cut
 * (its messages are lost) are the scheduler's and the bag's choices; the
 * lapse is taken at the commit, the latest moment it may happen, which
 * leaves the node the most time to act. `restart`: a member whose lease
 * lapsed too and that comes back in this view with nothing (NONE: none). */
#define G_VIEW(mask,restart) (E < MAXE)
inline view(mask, restart) {
  printf("view: epoch %d, members %d (bit n = node n), restarted %d (3: none)\n", E+1, mask, restart);
  for (hmas : 0 .. NN-1) {
    if :: (!INVIEW(mask, hmas) || hmas == restart) && nd[hmas].leased -> fence(hmas) :: else -> skip fi
  }
  /* S3: no cached or in-use lock of a left-out node survives into the view */
  for (hi : 0 .. NN-1) {
    if
    :: !INVIEW(mask, hi) ->
       assert(S3 && cl[CI(hi,0)].held == NL && cl[CI(hi,0)].use == NL &&
              cl[CI(hi,1)].held == NL && cl[CI(hi,1)].use == NL)
    :: else -> skip
    fi
  }
  E++;
  VM[E] = mask;
  for (hi : 0 .. NN-1) { if :: INVIEW(mask, hi) && !nd[hi].leased -> nd[hi].leased = 1 :: else -> skip fi }
}

#ifdef LIVENESS
/* Bounded progress: in a state where nothing can happen any more, no
 * backend still waits, unless the run lost a message (a full bag), ran out
 * of a bound (messages or grants in the epoch), or two holders wait to
 * convert (a deadlock: the deadlock search's victim breaks it). */
inline progress() {
  d_step {
    printf("no step possible: progress check\n");
    hok = !dropped;
    for (hi : 0 .. NN*NR-1) {
      if :: cl[hi].use != NL || cl[hi].sq == SEQMAX || mt[hi] == GMAX -> hok = 0 :: else -> skip fi
    }
    if
    :: hok -> for (hi : 0 .. NN*NR-1) { assert(L1 && cl[hi].want == NL) }
    :: else -> skip
    fi;
    skip
  }
}
#endif

/* ================= the step ================= */
#define A_ACQUIRE 1
#define A_WAKE 2
#define A_RELEASE 3
#define A_CANCEL 4
#define A_ASK 5
#define A_GIVE_BACK 6
#define A_EVICT 7
#define A_DELIVER 8
#define A_LOSE 9
#define A_ADOPT 10
#define A_VIEW 11

#ifdef CANCEL
#define CHOOSE_CANCEL(n,r) :: G_CANCEL(n,r) -> act = A_CANCEL; an = n; ar = r
#else
#define CHOOSE_CANCEL(n,r)
#endif
#ifdef NO_EVICT
#define CHOOSE_EVICT(n,r)
#else
#define CHOOSE_EVICT(n,r) :: G_EVICT(n,r) -> act = A_EVICT; an = n; ar = r
#endif
#define CHOOSE_RES(n,r) \
  :: G_ACQUIRE(n,r,PR) -> act = A_ACQUIRE; an = n; ar = r; am = PR \
  :: G_ACQUIRE(n,r,EX) -> act = A_ACQUIRE; an = n; ar = r; am = EX \
  :: G_WAKE(n,r) -> act = A_WAKE; an = n; ar = r \
  :: G_RELEASE(n,r) -> act = A_RELEASE; an = n; ar = r \
  CHOOSE_CANCEL(n,r) \
  :: G_ASK(n,r) -> act = A_ASK; an = n; ar = r \
  :: G_GIVE_BACK(n,r) -> act = A_GIVE_BACK; an = n; ar = r \
  CHOOSE_EVICT(n,r)
#ifdef ONE_RES
#define CHOOSE_RES1(n)
#else
#define CHOOSE_RES1(n) CHOOSE_RES(n,1)
#endif
#define CHOOSE_NODE(n) \
  CHOOSE_RES(n,0) \
  CHOOSE_RES1(n) \
  :: G_ADOPT(n) -> act = A_ADOPT; an = n
#ifdef LIVENESS
#define CHOOSE_SLOT(i) :: G_DELIVER(i) -> act = A_DELIVER; an = i
#else
#define CHOOSE_SLOT(i) \
  :: G_DELIVER(i) -> act = A_DELIVER; an = i \
  :: G_LOSE(i) -> act = A_LOSE; an = i
#endif
#define CHOOSE_VIEW(mask,restart) :: G_VIEW(mask,restart) -> act = A_VIEW; an = mask; ar = restart

inline perform() {
  d_step {
    if
    :: act == A_ACQUIRE -> acquire(an, ar, am)
    :: act == A_WAKE -> wake(an, ar)
    :: act == A_RELEASE -> release(an, ar)
    :: act == A_CANCEL -> cancel(an, ar)
    :: act == A_ASK -> ask(an, ar)
    :: act == A_GIVE_BACK -> give_back(an, ar)
    :: act == A_EVICT -> evict(an, ar)
    :: act == A_DELIVER -> deliver(an)
    :: act == A_LOSE -> lose(an)
    :: act == A_ADOPT -> adopt(an)
    :: act == A_VIEW -> view(an, ar)
    fi;
    drain();
    gc();
    act = 0; an = 0; ar = 0; am = 0
  }
}

init {
  d_step {
    VM[1] = 7;
    nd[0].leased = 1; nd[1].leased = 1; nd[2].leased = 1;
    nd[0].ep = 1; nd[1].ep = 1; nd[2].ep = 1;
    nd[0].rcvd = 7; nd[1].rcvd = 7; nd[2].rcvd = 7
  }
  do
  :: atomic {
       if
       CHOOSE_NODE(0)
       CHOOSE_NODE(1)
       CHOOSE_NODE(2)
       CHOOSE_SLOT(0)
       CHOOSE_SLOT(1)
       CHOOSE_SLOT(2)
#if BAGSZ > 3
       CHOOSE_SLOT(3)
#endif
#if BAGSZ > 4
       CHOOSE_SLOT(4)
#endif
#if BAGSZ > 5
       CHOOSE_SLOT(5)
#endif
       CHOOSE_VIEW(7, NONE)
       CHOOSE_VIEW(3, NONE)
       CHOOSE_VIEW(5, NONE)
       CHOOSE_VIEW(6, NONE)
       CHOOSE_VIEW(7, 0)
       CHOOSE_VIEW(7, 1)
       CHOOSE_VIEW(7, 2)
       fi;
       perform()
     }
#ifdef LIVENESS
  :: timeout -> progress()
#endif
  od
}
