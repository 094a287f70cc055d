/*
 * comm.h - declarations shared by the NCCL half of the host emulation: unique
 * ids, communicators and their shared-memory rendezvous, collectives,
 * point-to-point, groups, errors, abort and fault injection. Its files:
 *   comm.c   errors (ncclGetLastError), the communicator registry, waiting on
 *            peers, async errors, finalize / destroy / abort, queries
 *   init.c   unique ids, configs, communicator creation and rendezvous,
 *            ncclCommInitRank / InitAll, ncclCommSplit
 *   exec.c   execution order (tickets, stream joins), stream items, argument
 *            validation and enqueueing of every operation
 *   coll.c   collectives in chunk-sized rounds, and their API
 *   p2p.c    groups (ncclGroupStart / End), send/recv channels, their API
 *   fault.c  injected faults and delays (JNCCL_HOST_FAULT*, JNCCL_HOST_DELAY_*)
 * Nothing here is exported (the library is built with -fvisibility=hidden).
 *
 * RENDEZVOUS
 * ----------
 * ncclGetUniqueId fills the 128-byte id with a magic tag and a random segment
 * name "/jnccl-<32 hex>". Each rank of a communicator maps that POSIX
 * shared-memory segment (shm.c: the first rank to arrive creates it, mode 0600,
 * O_CREAT|O_EXCL), registers itself (pid, device) in it and waits until all
 * nranks have joined. The rank that completes the set unlinks the name at once,
 * so nothing is left in /dev/shm even if a process dies later; if the set is
 * never completed, the last rank to leave unlinks it. Every rank unmaps the
 * segment when its communicator is destroyed (ranks in one process share one
 * mapping). Ranks can therefore be threads of one process or separate processes.
 *
 * SEGMENT LAYOUT
 * --------------
 *   seg_hdr | seg_rank[n] | seg_chan[n*n] | slot[n] (chunk bytes each) | ring[n*n]
 * One robust, process-shared mutex and condition variable guard all the
 * control words; bulk data is copied outside the lock and published through
 * counters. Every wait is a timed wait (5 ms slices) that re-checks the local
 * abort flag and the state of the ranks still awaited, so an abort, a failure
 * or the death of a peer process always ends it.
 *
 * COLLECTIVES run in rounds over chunk-sized pieces. In round k each rank
 * waits until every rank has finished reading round k-1, writes its piece into
 * its slot, publishes fill_seq = k, waits until every rank has, reads/reduces
 * what it needs from the slots, and publishes read_seq = k. Reductions combine
 * the slots in rank order, so all ranks get bit-identical results, and memory
 * stays bounded whatever the message size.
 *
 * MISMATCHES: the first round of each collective also carries, in the rank's
 * seg_rank.coll, what the rank called (function, count, data type, reduction
 * operator and pre-multiplied sum scalar, root). Once every rank has filled
 * that round, each compares all the descriptors under the segment lock; none
 * can have been overwritten (a rank writes its next one only after everybody
 * read this round). So every rank sees the same descriptors and reaches the
 * same verdict on its own: if they differ, each fails the collective with
 * ncclInvalidUsage and a text naming the groups of ranks and what each called,
 * without waiting for anybody - nobody is left waiting for a failed rank. A
 * collective of 0 elements is no collective (NCCL drops it at the call): it
 * has no round, no number and no descriptor.
 *
 * POINT-TO-POINT: every ordered pair (src, dst) has a channel: a queue of
 * message counts and types, and a byte ring. A send posts its count and type,
 * then streams bytes; the matching receive (the next message of that pair, so
 * order is NCCL's) checks both - a mismatch is an ncclInvalidUsage error that
 * names both ranks, both counts and both types - and drains bytes. A send
 * smaller than the ring completes without its receive (eager); a larger one
 * needs the receive to progress.
 *
 * EXECUTION ORDER: an NCCL call only enqueues a stream item. Each item takes,
 * under one global lock, a ticket from every communicator it uses; a worker
 * executes the item's operations on a communicator only when that
 * communicator serves its ticket. So operations of one communicator execute
 * one at a time in issue order even across streams (as NCCL serialises them),
 * and no cycle can form because all tickets follow one global order. A group
 * (ncclGroupStart/End) becomes one item per stream; its worker first
 * progresses all send/recv operations together with a non-blocking loop (so no
 * send/recv pattern inside a group can deadlock), then runs the collectives
 * in order. If a group uses several streams with one communicator, all its
 * operations on that communicator run in the item of the first such stream,
 * once the other streams have reached their own item of the group, and those
 * wait for it to finish - the stream join NCCL performs for such a group.
 *
 * ERRORS: argument errors return at the call with a text for ncclGetLastError
 * (a per-thread buffer). An error during execution becomes the communicator's
 * async error (first one wins) and is published in the segment, so peers
 * waiting for this rank stop with ncclRemoteError ("rank r failed: ...", or
 * "rank r aborted"); later operations of a failed communicator are skipped
 * while the stream keeps draining.
 */
#ifndef JNCCL_COMM_H
#define JNCCL_COMM_H

#include "internal.h"

/* ================================================================ constants */

#define COMM_MAGIC 0x6a6e63636c636f6dull
#define SEG_VERSION 4
#define HDRQ 64                 /* message sizes queued per channel */
#define WAIT_SLICE_MS 5         /* every wait re-checks abort/failure this often */
#define PID_CHECK_NS 100000000ull /* how often waits check that peer processes live */
#define ABORT_WAIT_MS 2000      /* how long ncclCommAbort waits for the comm's queued work */
#define SPLIT_ALLREDUCE_BYTES 65536 /* all-reduce pieces from this size are reduced in shares */
#define ID_MAGIC "JNCCLHv1"
#define NAME_PREFIX "/jnccl-"

enum { RS_OK = 0, RS_ABORTED = 1, RS_FAILED = 2, RS_LEFT = 3 }; /* seg_rank.status */
enum { CS_INIT = 0, CS_READY = 1, CS_FAILED = 2 };            /* ncclComm.state */
enum { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE, K_ALLTOALL, K_SEND, K_RECV, K_GATHER, K_SCATTER };
enum { STEP_IDLE, STEP_PROGRESS, STEP_DONE, STEP_ERROR };

/* ============================================================ shared layout */

/* What a rank called for one collective (see MISMATCHES): the fields that must agree on every
 * rank. Fields that do not apply to the function are normalised (redop -1 where nothing is
 * reduced, root -1 where there is none, scalar 0 unless the op is a pre-multiplied sum). */
typedef struct {
  uint64_t seq;   /* this communicator's collective number, from 1 (not compared) */
  uint64_t count; /* the count argument of the call */
  uint64_t scalar;
  int32_t kind, dtype, redop, root; /* K_*, ncclDataType_t, ncclRedOp_t or JN_REDOP_PREMUL */
} coll_desc;

typedef struct {
  int32_t present, pid, device, status; /* status: RS_* */
  int32_t err, blame;                   /* error code; the peer it concerns (-1: none) */
  uint64_t host;                        /* the rank's machine as NCCL sees it (jn_host_hash) */
  char text[224];
  uint64_t fill_seq, read_seq;          /* collective rounds written / consumed */
  coll_desc coll;                       /* the collective of our latest first round */
  uint64_t red_seq;                     /* split all-reduce: our share of the round reduced */
  struct {
    uint64_t gen;
    int32_t color, key;
  } split[2];                           /* ncclCommSplit exchange, double-buffered by gen */
} seg_rank;

typedef struct {
  uint64_t head, tail;     /* payload bytes written / consumed */
  uint64_t posted, started; /* messages posted by the sender / taken by the receiver */
  uint64_t counts[HDRQ];   /* count and data type of message m at m % HDRQ, as its ncclSend said */
  int32_t dtypes[HDRQ];
} seg_chan;

typedef struct {
  jn_seg_prefix prefix;
  pthread_mutex_t mu;
  jn_pcond cv;  /* a futex, not a pthread_cond_t: see jn_pcond in internal.h */
  uint64_t gen; /* incremented on every state change (lost-wake-up-free waits) */
  int32_t version, nranks;
  int32_t joined, attached, unlinked;
  int32_t failed, fail_code;
  char fail_text[256];
  uint64_t chunk, ring;
  uint64_t off_ranks, off_chans, off_slots, off_rings, off_result;
} seg_hdr;

typedef struct {
  int nranks;
  uint64_t chunk, ring;
} seg_params;

/* Bumps the segment's generation and wakes all its waiters (segment lock held). */
void seg_notify(seg_hdr *h);

/* ========================================================= communicator */

/* The tuning fields of ncclConfig_t a communicator received (redop.c). */
typedef struct {
  int min_ctas, max_ctas, cga_cluster_size;
  char name[128];
} jn_comm_config;

struct ncclComm {
  uint64_t magic;
  struct ncclComm *next; /* registry */
  int rank, nranks, device, blocking;
  char name[64]; /* shared-memory segment */
  _Atomic int refs;  /* user handle + API calls in flight + queued operations */
  _Atomic int aborted;
  _Atomic int state; /* CS_* */
  _Atomic int async_err;
  pthread_mutex_t mu; /* guards the fields below and async_text */
  pthread_cond_t cv;  /* turn changes, pending == 0, abort */
  char async_text[512];
  int pending;        /* operations posted to streams and not finished */
  uint64_t serving;   /* ticket now executing */
  int finalizing;
  int init_thread_live;
  pthread_t init_thread;
  /* A non-blocking grow's newcomm: as NCCL's init job, the thread stores the handle there again
   * when it ends, so the caller's slot must outlive the call (NULL for every other init). */
  ncclComm_t *grow_out;
  uint64_t next_ticket; /* under jn_enqueue_lock */
  /* shared memory (set by the rendezvous before state becomes CS_READY) */
  jn_seg *seg;
  seg_hdr *sh;
  seg_rank *ranks;
  seg_chan *chans;
  char *slots, *rings, *result;
  uint64_t chunk, ring;
  int joined;
  /* execution state: touched only by the worker holding the comm's turn */
  uint64_t round, op_count;
  uint64_t coll_seq; /* collectives with elements run so far (MISMATCHES) */
  const void **ins;
  _Atomic uint64_t next_pid_check;
  /* API-side state */
  uint64_t split_gen;
  uint64_t shrink_gen; /* shrinks of this parent so far: names each child's segment */
  /* ncclCommRevoke (or a shrink with NCCL_SHRINK_ABORT): pending operations end without an
   * error of the communicator, new ones are refused; split, shrink, destroy, abort still work. */
  _Atomic int revoked;
  /* A split of a non-blocking communicator runs on a thread, as NCCL's group job does: the
   * parent's async state is ncclInProgress (split_busy) until the child is ready, and the
   * caller's newcomm is written only then. split_child (under mu) is the child being set up,
   * so that ncclCommAbort of the parent can abort its initialisation. */
  _Atomic int split_busy;
  int split_thread_live; /* under mu */
  pthread_t split_thread;
  struct ncclComm *split_child;
  /* configuration read from the environment at creation */
  uint64_t chunk_env;
  long init_timeout_ms;
  int fault_mode, fault_at; /* JN_FAULT_* */
  uint64_t enqueue_count; /* operations posted, for JN_FAULT_HANG_ENQUEUE (under mu) */
  long delay_us;
  /* ncclConfig_t as received, NCCL's defaults applied (jnccl_emu_comm_config; redop.c) */
  jn_comm_config config;
  /* pre-multiplied sum operators and buffer registrations (under mu; redop.c) */
  struct jn_user_op *user_ops;
  int user_op_cap;
  struct jn_reg *regs;
};

typedef struct {
  ncclResult_t code;
  int blame;
  char text[512]; /* a mismatch verdict lists every group of ranks */
} op_err;

/* One NCCL operation (a stream item holds one or more). */
typedef struct {
  int kind;
  struct ncclComm *comm; /* holds a reference */
  cudaStream_t stream;
  const void *send;
  void *recv;
  size_t count;
  int dtype, redop, peer; /* peer: root for broadcast/reduce */
  uint64_t scalar;        /* redop JN_REDOP_PREMUL: the scalar's bits, in the data type */
  size_t bytes;           /* send/recv: message size */
  /* execution state */
  int st;                 /* p2p: 0 active, 1 finished */
  int started;
  size_t done;
} jn_op;

typedef struct {
  struct ncclComm *comm;
  uint64_t ticket;
} jn_ticket;

/*
 * Join of the streams that one communicator uses inside one group. NCCL
 * launches such a group once, on the first of those streams, after the others
 * reached that point, and makes the others wait for it. The "lead" item runs
 * the operations once every follower item has arrived; followers wait for it.
 */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int followers, arrived, done;
  _Atomic int refs;
} jn_join;

typedef struct {
  jn_item base;
  int nops, ntickets, nlead, nfollow;
  jn_op *ops;
  jn_ticket *tickets;
  jn_join **lead, **follow;
} nccl_item;
/* ------------------------------------------------------------ comm.c -- */

/* strncpy that always terminates (and does not trip -Wformat-truncation). */
void text_copy(char *dst, size_t cap, const char *src);
/* Sets the calling thread's last NCCL error text and returns code. */
__attribute__((format(printf, 2, 3))) ncclResult_t failf(ncclResult_t code, const char *fmt, ...);
/* Fills an execution error. */
__attribute__((format(printf, 4, 5))) void errf(op_err *e, ncclResult_t code, int blame, const char *fmt, ...);
void comm_register(struct ncclComm *c);
/* Makes the handle invalid. Returns 1 if it was registered. */
int comm_unregister(struct ncclComm *c);
/* Joins the thread of a non-blocking init, if any. */
void init_join(struct ncclComm *c);
/* Drops a reference; the last one frees the communicator. */
void comm_put(struct ncclComm *c);
/* Records an execution error as the comm's async error and publishes it in the segment. */
void comm_fail(struct ncclComm *c, const op_err *e);
/* Copies the comm's async error into the thread's last-error text and returns it. */
ncclResult_t comm_async(struct ncclComm *c);
/* 1 (e filled) if the awaited rank r can no longer make progress (segment lock held). */
int peer_error(struct ncclComm *c, int r, op_err *e);
void aborted_error(op_err *e);
typedef int (*ready_fn)(const struct ncclComm *c, int r, const void *arg);
/* Waits (segment lock held) until ready(r) holds for every rank (only: -1) or rank `only`. */
ncclResult_t wait_ranks(struct ncclComm *c, int only, ready_fn ready, const void *arg, uint64_t deadline_ns,
                        op_err *e);
/* Validates the handle of an API call and takes a reference; the error text names fn. */
ncclResult_t get_comm(const char *fn, ncclComm_t h, struct ncclComm **out);
/* The comm must have finished its initialisation without error (NCCL's ncclCommEnsureReady). */
ncclResult_t ensure_ready(const char *fn, struct ncclComm *c);
/* Refuses new operations on a revoked communicator (ncclInvalidUsage, as NCCL). */
ncclResult_t ensure_not_revoked(const char *fn, struct ncclComm *c);
/* Revokes c: its running operation ends at its next wait slice, queued ones are skipped, all
 * without an async error and without telling the peers; returns once idle (or after
 * ABORT_WAIT_MS). */
void comm_stop(struct ncclComm *c);
/* Waits until no operation of the comm is queued or running; 1 if reached within timeout_ms. */
int comm_wait_idle(struct ncclComm *c, long timeout_ms);

/* ------------------------------------------------------------ init.c -- */

/* Starts the rendezvous of c on its own thread (non-blocking init, or an init in a group). */
ncclResult_t start_init_thread(struct ncclComm *c);
/* Frees a communicator whose initialisation failed, as NCCL does for blocking inits. */
void comm_discard(struct ncclComm *c);

/* ------------------------------------------------------------ exec.c -- */

/* Posts operations (each holding a comm reference) as one stream item per stream. */
ncclResult_t post_ops(jn_op *ops, int n);
/* Validates an operation and enqueues it (or adds it to the thread's open group). */
ncclResult_t enqueue(const char *fn, jn_op *op, ncclComm_t comm, cudaStream_t stream);

/* ----------------------------------------------------------- redop.c -- */

/* Checks a reducing operation's redop against c (a built-in, or a pre-multiplied sum created on c
 * for op->dtype) and resolves a user operator into JN_REDOP_PREMUL and its scalar. */
ncclResult_t redop_resolve(const char *fn, struct ncclComm *c, jn_op *op);
/* The configuration a new communicator receives: from config (NULL: *inherit, or NCCL's defaults
 * when inherit is NULL too); parse_config has checked it. */
void config_apply(jn_comm_config *out, const ncclConfig_t *config, const jn_comm_config *inherit);
/* Frees the operators and registrations left on a communicator being freed. */
void redop_teardown(struct ncclComm *c);

/* ------------------------------------------------------------ coll.c -- */

/* Runs one collective in chunk-sized rounds. */
ncclResult_t run_coll(struct ncclComm *c, const jn_op *op, op_err *e);
/* A data type as the mismatch verdicts name it: "float32", "bfloat16", ... */
const char *dtype_label(int dtype);

/* ------------------------------------------------------------- p2p.c -- */

/* 1 inside ncclGroupStart/End on the calling thread. */
int group_open(void);
/* Makes the open group's ncclGroupEnd fail with rc (the first error wins). */
void group_note_error(ncclResult_t rc);
/* Adds an init to the open group (started by the outermost ncclGroupEnd). On failure,
 * discards c and sets *out to NULL. */
ncclResult_t group_defer_init(const char *fn, struct ncclComm *c, ncclComm_t *out);
/* Adds a validated operation to the open group. On failure, drops its comm reference. */
ncclResult_t group_defer_op(const char *fn, const jn_op *op);
int is_p2p(const jn_op *op);
/* Progresses all send/recv operations of an item together until each finished or failed. */
void run_p2p(nccl_item *it);

/* ----------------------------------------------------------- fault.c -- */

/* Applies the fault and delay variables (read at creation) that concern the new comm's rank. */
void fault_configure(struct ncclComm *c, const jn_comm_env *env);
/*
 * Common start of every operation: skip it if the comm already failed, count it,
 * apply the rank's delay and the injected faults.
 * Returns 0 to run it, 1 if it failed (e set), 2 to skip it silently.
 */
int op_begin(struct ncclComm *c, op_err *e);
/* JNCCL_HOST_FAULT=hang-enqueue: holds the calling thread inside the posting call; non-zero when
 * it did (the communicator was aborted meanwhile) */
int enqueue_fault(const jn_op *ops, int n);
/* JNCCL_HOST_FAULT=hang-abort: on the faulty rank, never returns (called by ncclCommAbort once
 * the operations were told to end and the peers that this rank aborted). */
void abort_fault(struct ncclComm *c);

#endif /* JNCCL_COMM_H */
