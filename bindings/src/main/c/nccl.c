/*
 * nccl.c - the NCCL half of the host emulation: unique ids, communicators and
 * their shared-memory rendezvous, collectives, point-to-point, groups, errors,
 * abort and fault injection.
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
 * POINT-TO-POINT: every ordered pair (src, dst) has a channel: a queue of
 * message sizes and a byte ring. A send posts its size, then streams bytes; the
 * matching receive (the next message of that pair, so order is NCCL's) checks
 * the size - a mismatch is an ncclInvalidUsage error that names both ranks and
 * both byte counts - and drains bytes. A send smaller than the ring completes
 * without its receive (eager); a larger one needs the receive to progress.
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
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* ================================================================ constants */

#define COMM_MAGIC 0x6a6e63636c636f6dull
#define SEG_VERSION 2
#define HDRQ 64                 /* message sizes queued per channel */
#define WAIT_SLICE_MS 5         /* every wait re-checks abort/failure this often */
#define PID_CHECK_NS 100000000ull /* how often waits check that peer processes live */
#define ABORT_WAIT_MS 2000      /* how long ncclCommAbort waits for the comm's queued work */
#define SPLIT_ALLREDUCE_BYTES 65536 /* all-reduce pieces from this size are reduced in shares */
#define ID_MAGIC "JNCCLHv1"
#define NAME_PREFIX "/jnccl-"

enum { RS_OK = 0, RS_ABORTED = 1, RS_FAILED = 2, RS_LEFT = 3 }; /* seg_rank.status */
enum { CS_INIT = 0, CS_READY = 1, CS_FAILED = 2 };            /* ncclComm.state */
enum { K_ALLREDUCE, K_REDUCESCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE, K_ALLTOALL, K_SEND, K_RECV };
enum { FAULT_NONE, FAULT_FAIL, FAULT_HANG };
enum { STEP_IDLE, STEP_PROGRESS, STEP_DONE, STEP_ERROR };

/* ============================================================ shared layout */

typedef struct {
  int32_t present, pid, device, status; /* status: RS_* */
  int32_t err, blame;                   /* error code; the peer it concerns (-1: none) */
  char text[224];
  uint64_t fill_seq, read_seq;          /* collective rounds written / consumed */
  uint64_t red_seq;                     /* split all-reduce: our share of the round reduced */
  struct {
    uint64_t gen;
    int32_t color, key;
  } split[2];                           /* ncclCommSplit exchange, double-buffered by gen */
} seg_rank;

typedef struct {
  uint64_t head, tail;     /* payload bytes written / consumed */
  uint64_t posted, started; /* messages posted by the sender / taken by the receiver */
  uint64_t sizes[HDRQ];    /* byte count of message m at m % HDRQ */
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

static size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

static size_t seg_layout(int n, uint64_t chunk, uint64_t ring, uint64_t off[5]) {
  size_t o = align_up(sizeof(seg_hdr), 64);
  off[0] = o;
  o = align_up(o + (size_t)n * sizeof(seg_rank), 64);
  off[1] = o;
  o = align_up(o + (size_t)n * (size_t)n * sizeof(seg_chan), 4096);
  off[2] = o;
  o += (size_t)n * chunk;
  off[3] = o;
  o += (size_t)n * (size_t)n * ring;
  off[4] = o; /* result area of the split all-reduce: one chunk */
  o += chunk;
  return o;
}

/* Runs in the creating rank before the segment is marked ready (the file is zero-filled). */
static void seg_init(void *base, void *arg) {
  seg_hdr *h = base;
  const seg_params *p = arg;
  jn_pshared_mutex_init(&h->mu);
  jn_pshared_cond_init(&h->cv);
  h->version = SEG_VERSION;
  h->nranks = p->nranks;
  h->chunk = p->chunk;
  h->ring = p->ring;
  uint64_t off[5];
  seg_layout(p->nranks, p->chunk, p->ring, off);
  h->off_ranks = off[0];
  h->off_chans = off[1];
  h->off_slots = off[2];
  h->off_rings = off[3];
  h->off_result = off[4];
}

static void seg_notify(seg_hdr *h) {
  h->gen++;
  jn_pcond_broadcast(&h->cv);
}

/* ========================================================= communicator */

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
  char async_text[256];
  int pending;        /* operations posted to streams and not finished */
  uint64_t serving;   /* ticket now executing */
  int finalizing;
  int init_thread_live;
  pthread_t init_thread;
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
  const void **ins;
  _Atomic uint64_t next_pid_check;
  /* API-side state */
  uint64_t split_gen;
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
  int fault_mode, fault_at;
  long delay_us;
};

typedef struct {
  ncclResult_t code;
  int blame;
  char text[256];
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

/* ============================================================ last error */

/* strncpy that always terminates (and does not trip -Wformat-truncation). */
static void text_copy(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static _Thread_local char tl_err[512];

__attribute__((format(printf, 2, 3))) static ncclResult_t failf(ncclResult_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_err, sizeof tl_err, fmt, ap);
  va_end(ap);
  return code;
}

__attribute__((format(printf, 4, 5))) static void errf(op_err *e, ncclResult_t code, int blame, const char *fmt,
                                                       ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->text, sizeof e->text, fmt, ap);
  va_end(ap);
  e->code = code;
  e->blame = blame;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch ((int)result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char *ncclGetLastError(ncclComm_t comm) {
  JN_UNUSED(comm); /* NCCL's last error is not per communicator either */
  return tl_err;
}

ncclResult_t ncclGetVersion(int *version) {
  if (version == NULL) return failf(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
  *version = JNCCL_NCCL_VERSION_CODE;
  return ncclSuccess;
}

/* ================================================================ registry */

static pthread_mutex_t g_comm_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *g_comms;

static void comm_register(struct ncclComm *c) {
  pthread_mutex_lock(&g_comm_mu);
  c->next = g_comms;
  g_comms = c;
  pthread_mutex_unlock(&g_comm_mu);
}

/* Makes the handle invalid. Returns 1 if it was registered. */
static int comm_unregister(struct ncclComm *c) {
  int found = 0;
  pthread_mutex_lock(&g_comm_mu);
  for (struct ncclComm **pp = &g_comms; *pp != NULL; pp = &(*pp)->next) {
    if (*pp == c) {
      *pp = c->next;
      found = 1;
      break;
    }
  }
  pthread_mutex_unlock(&g_comm_mu);
  return found;
}

/* Validates a handle and takes a reference. */
static struct ncclComm *comm_get(ncclComm_t h) {
  struct ncclComm *c = NULL;
  pthread_mutex_lock(&g_comm_mu);
  for (struct ncclComm *p = g_comms; p != NULL; p = p->next) {
    if (p == h) {
      c = p;
      atomic_fetch_add(&c->refs, 1);
      break;
    }
  }
  pthread_mutex_unlock(&g_comm_mu);
  return c;
}

static void init_join(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  int live = c->init_thread_live;
  c->init_thread_live = 0;
  pthread_mutex_unlock(&c->mu);
  if (live) pthread_join(c->init_thread, NULL);
}

static void split_join(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  int live = c->split_thread_live;
  c->split_thread_live = 0;
  pthread_mutex_unlock(&c->mu);
  if (live) pthread_join(c->split_thread, NULL);
}

/* Leaves the segment (unlinking it if this was the last rank attached), unmaps it, frees. */
static void comm_teardown(struct ncclComm *c) {
  init_join(c);
  split_join(c);
  if (c->seg != NULL) {
    seg_hdr *h = c->seg->base;
    int unlink_now = 0;
    jn_plock(&h->mu);
    if (c->joined) {
      if (c->ranks[c->rank].status == RS_OK) c->ranks[c->rank].status = atomic_load(&c->aborted) ? RS_ABORTED : RS_LEFT;
      h->attached--;
    }
    if (h->attached == 0 && !h->unlinked) {
      h->unlinked = 1;
      unlink_now = 1;
    }
    seg_notify(h);
    jn_punlock(&h->mu);
    if (unlink_now) jn_seg_unlink(c->name);
    jn_seg_detach(c->seg);
  }
  free(c->ins);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static void comm_put(struct ncclComm *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) comm_teardown(c);
}

/* Records an execution error as the comm's async error (the first one wins) and
 * publishes it in the segment, so that peers waiting for this rank stop. */
static void comm_fail(struct ncclComm *c, const op_err *e) {
  pthread_mutex_lock(&c->mu);
  if (atomic_load(&c->async_err) == ncclSuccess) {
    text_copy(c->async_text, sizeof c->async_text, e->text);
    atomic_store(&c->async_err, e->code);
  }
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->joined) {
    jn_plock(&c->sh->mu);
    seg_rank *me = &c->ranks[c->rank];
    /* After a local abort, ncclCommAbort publishes RS_ABORTED itself: the peers should
     * read "rank r aborted", not the errors the abort caused here. */
    if (me->status == RS_OK && !atomic_load(&c->aborted)) {
      me->status = RS_FAILED;
      me->err = e->code;
      me->blame = e->blame;
      text_copy(me->text, sizeof me->text, e->text);
    }
    seg_notify(c->sh);
    jn_punlock(&c->sh->mu);
  }
}

/* Copies the comm's async error into *code and the thread's last-error text. */
static ncclResult_t comm_async(struct ncclComm *c) {
  ncclResult_t e = atomic_load(&c->async_err);
  if (e != ncclSuccess) {
    pthread_mutex_lock(&c->mu);
    text_copy(tl_err, sizeof tl_err, c->async_text);
    pthread_mutex_unlock(&c->mu);
  }
  return e;
}

/* ===================================================== waiting on peers */

/*
 * If rank r (a peer we are waiting for) can no longer make progress - it
 * aborted, failed, destroyed its communicator, or its process died - fills e
 * and returns 1. Called with the segment lock held.
 */
static int peer_error(struct ncclComm *c, int r, op_err *e) {
  if (r == c->rank) return 0;
  const seg_rank *p = &c->ranks[r];
  switch (p->status) {
    case RS_ABORTED: errf(e, ncclRemoteError, -1, "rank %d aborted", r); return 1;
    case RS_LEFT: errf(e, ncclRemoteError, -1, "rank %d destroyed its communicator", r); return 1;
    case RS_FAILED:
      if (p->blame == c->rank) errf(e, (ncclResult_t)p->err, r, "%s", p->text); /* e.g. our size mismatch */
      else errf(e, ncclRemoteError, -1, "rank %d failed: %s", r, p->text);
      return 1;
    default: break;
  }
  uint64_t now = jn_now_ns();
  if (p->pid != getpid() && now >= atomic_load_explicit(&c->next_pid_check, memory_order_relaxed)) {
    atomic_store_explicit(&c->next_pid_check, now + PID_CHECK_NS, memory_order_relaxed);
    if (kill(p->pid, 0) != 0 && errno == ESRCH) {
      errf(e, ncclRemoteError, -1, "rank %d (pid %d) exited", r, (int)p->pid);
      return 1;
    }
  }
  return 0;
}

static void aborted_error(op_err *e) { errf(e, ncclSystemError, -1, "operation aborted by ncclCommAbort"); }

typedef int (*ready_fn)(const struct ncclComm *c, int r, const void *arg);

/*
 * Waits (segment lock held on entry and exit) until ready(r) holds for every
 * rank r (only: -1) or for rank `only`. Fails if the comm is aborted, if a rank
 * still awaited cannot progress, or (deadline_ns != 0) at the deadline.
 */
static ncclResult_t wait_ranks(struct ncclComm *c, int only, ready_fn ready, const void *arg, uint64_t deadline_ns,
                               op_err *e) {
  int lo = only < 0 ? 0 : only, hi = only < 0 ? c->nranks : only + 1;
  for (;;) {
    int missing = 0;
    for (int r = lo; r < hi; r++) {
      if (ready(c, r, arg)) continue;
      missing = 1;
      if (peer_error(c, r, e)) return e->code;
    }
    if (!missing) return ncclSuccess;
    if (atomic_load(&c->aborted)) {
      aborted_error(e);
      return e->code;
    }
    if (deadline_ns != 0 && jn_now_ns() > deadline_ns) {
      errf(e, ncclSystemError, -1, "timed out waiting for the other ranks");
      return e->code;
    }
    jn_pcond_wait_ms(&c->sh->cv, &c->sh->mu, WAIT_SLICE_MS);
  }
}

enum { SEQ_FILL, SEQ_READ, SEQ_RED };

typedef struct {
  uint64_t k;
  int which; /* SEQ_* */
} seq_arg;

static int ready_seq(const struct ncclComm *c, int r, const void *arg) {
  const seq_arg *a = arg;
  const seg_rank *p = &c->ranks[r];
  return (a->which == SEQ_FILL ? p->fill_seq : a->which == SEQ_READ ? p->read_seq : p->red_seq) >= a->k;
}

/* ========================================================= unique ids */

typedef struct {
  char magic[8];
  char name[64];
  uint32_t pid;
  uint32_t pad;
  uint64_t time_ns;
} id_payload;

_Static_assert(sizeof(id_payload) <= JN_NCCL_UNIQUE_ID_BYTES, "unique id payload too large");

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  static _Atomic uint64_t counter;
  if (uniqueId == NULL) return failf(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  uint64_t r[2] = {0, 0};
  if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* fall back on pid/time/counter only */
    r[0] = 0;
    r[1] = 0;
  }
  uint64_t t = jn_now_ns(), n = atomic_fetch_add(&counter, 1);
  uint64_t a = mix64(r[0] ^ t ^ ((uint64_t)getpid() << 32));
  uint64_t b = mix64(r[1] ^ mix64(n + 0x9e3779b97f4a7c15ull) ^ (uint64_t)(uintptr_t)&counter);
  id_payload p;
  memset(&p, 0, sizeof p);
  memcpy(p.magic, ID_MAGIC, sizeof p.magic);
  snprintf(p.name, sizeof p.name, NAME_PREFIX "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
  p.pid = (uint32_t)getpid();
  p.time_ns = t;
  memset(uniqueId, 0, sizeof *uniqueId);
  memcpy(uniqueId->internal, &p, sizeof p);
  return ncclSuccess;
}

/* Extracts the segment name from an id; 0 if the id was not made by ncclGetUniqueId. */
static int id_name(const ncclUniqueId *id, char out[64]) {
  id_payload p;
  memcpy(&p, id->internal, sizeof p);
  if (memcmp(p.magic, ID_MAGIC, sizeof p.magic) != 0) return 0;
  if (memchr(p.name, '\0', sizeof p.name) == NULL) return 0;
  if (strncmp(p.name, NAME_PREFIX, strlen(NAME_PREFIX)) != 0 || strchr(p.name + 1, '/') != NULL) return 0;
  memcpy(out, p.name, sizeof p.name);
  return 1;
}

/* ====================================================== comm creation */

static ncclResult_t parse_config(const char *fn, const ncclConfig_t *config, int dflt_blocking, int *blocking) {
  *blocking = dflt_blocking;
  if (config == NULL) return ncclSuccess; /* NULL config: defaults (or the parent's, for split) */
  /* As NCCL's parseCommConfig: copy at most sizeof(ncclConfig_t) bytes, as config->size
   * says, over the defaults; check the magic; let the version decide which fields exist;
   * check each attribute that is not NCCL_CONFIG_UNDEF_INT. */
  const int U = JN_NCCL_CONFIG_UNDEF_INT;
  ncclConfig_t t;
  memset(&t, 0, sizeof t);
  t.blocking = t.cgaClusterSize = t.minCTAs = t.maxCTAs = t.splitShare = t.trafficClass = U;
  t.collnetEnable = t.CTAPolicy = t.shrinkShare = t.nvlsCTAs = t.nChannelsPerNetPeer = t.nvlinkCentricSched = U;
  size_t n = config->size > sizeof(ncclConfig_t) ? sizeof(ncclConfig_t) : config->size;
  memcpy(&t, config, n);
  if (t.magic != JN_NCCL_CONFIG_MAGIC)
    return failf(ncclInvalidArgument, "%s : ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER", fn);
  if (t.version < 21400) t.blocking = U;
  if (t.version < 21700) t.cgaClusterSize = t.minCTAs = t.maxCTAs = U;
  if (t.version < 22700) t.collnetEnable = t.CTAPolicy = t.shrinkShare = t.nvlsCTAs = U;
  const char *bad = NULL;
  int value = 0;
  if (t.blocking != U && t.blocking != 0 && t.blocking != 1) bad = "blocking", value = t.blocking;
  else if (t.cgaClusterSize != U && t.cgaClusterSize < 0) bad = "cgaClusterSize", value = t.cgaClusterSize;
  else if ((t.minCTAs != U && t.minCTAs <= 0) || (t.maxCTAs != U && t.maxCTAs <= 0) || t.minCTAs > t.maxCTAs)
    return failf(ncclInvalidArgument, "%s : Invalid config min/max channels attribute value %d/%d", fn, t.minCTAs,
                 t.maxCTAs);
  else if (t.splitShare != U && t.splitShare != 0 && t.splitShare != 1) bad = "splitShare", value = t.splitShare;
  else if (t.collnetEnable != U && t.collnetEnable != 0 && t.collnetEnable != 1)
    bad = "collnetEnable", value = t.collnetEnable;
  else if (t.CTAPolicy != U && (t.CTAPolicy < 0 || t.CTAPolicy > 3)) bad = "policy", value = t.CTAPolicy;
  else if (t.shrinkShare != U && t.shrinkShare != 0 && t.shrinkShare != 1) bad = "shrinkShare", value = t.shrinkShare;
  else if (t.nvlsCTAs != U && t.nvlsCTAs <= 0) bad = "nvlsCTAs", value = t.nvlsCTAs;
  if (bad != NULL) return failf(ncclInvalidArgument, "%s : Invalid config %s attribute value %d", fn, bad, value);
  if (t.blocking != U) *blocking = t.blocking;
  return ncclSuccess;
}

/* Allocates and registers a communicator in state CS_INIT; reads the environment. */
static struct ncclComm *comm_new(int nranks, const char *name, int rank, int device, int blocking) {
  struct ncclComm *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->magic = COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->blocking = blocking;
  text_copy(c->name, sizeof c->name, name);
  atomic_init(&c->refs, 1);
  atomic_init(&c->state, CS_INIT);
  pthread_mutex_init(&c->mu, NULL);
  jn_cond_init_mono(&c->cv);
  /* Staging chunk per rank (the creating rank's value wins; see README). */
  c->chunk_env = (uint64_t)jn_env_long("JNCCL_HOST_CHUNK_BYTES", 1L << 20, 4096, 1L << 28) & ~(uint64_t)63;
  c->init_timeout_ms = jn_env_long("JNCCL_HOST_INIT_TIMEOUT_MS", 120000, 1, 24L * 3600 * 1000);
  const char *f = getenv("JNCCL_HOST_FAULT");
  if (f != NULL && (strcmp(f, "fail") == 0 || strcmp(f, "hang") == 0) &&
      jn_env_long("JNCCL_HOST_FAULT_RANK", 0, -1, 1L << 30) == rank) {
    c->fault_mode = strcmp(f, "fail") == 0 ? FAULT_FAIL : FAULT_HANG;
    c->fault_at = (int)jn_env_long("JNCCL_HOST_FAULT_AT", 1, 1, 1L << 30);
  }
  if (jn_env_is_set("JNCCL_HOST_DELAY_RANK") && jn_env_long("JNCCL_HOST_DELAY_RANK", -1, -1, 1L << 30) == rank)
    c->delay_us = jn_env_long("JNCCL_HOST_DELAY_US", 0, 0, 60L * 1000 * 1000);
  comm_register(c);
  return c;
}

static void comm_set_init_error(struct ncclComm *c, const op_err *e) {
  pthread_mutex_lock(&c->mu);
  text_copy(c->async_text, sizeof c->async_text, e->text);
  atomic_store(&c->async_err, e->code);
  pthread_mutex_unlock(&c->mu);
  atomic_store(&c->state, CS_FAILED);
}

/* Joins the communicator's segment and waits until all ranks have. Sets c->state. */
static void rendezvous(struct ncclComm *c) {
  op_err e = {ncclSuccess, -1, ""};
  int n = c->nranks;
  uint64_t chunk = JN_MAX(c->chunk_env, (uint64_t)n * 64);
  uint64_t ring = JN_MIN(JN_MAX(chunk / 16, 4096), 65536);
  while (ring > 4096 && (uint64_t)n * n * ring > (32ull << 20)) ring /= 2; /* bound n*n rings */
  uint64_t off[5];
  seg_params params = {n, chunk, ring};
  size_t total = seg_layout(n, chunk, ring, off);
  e.code = jn_seg_attach(c->name, total, seg_init, &params, c->init_timeout_ms, &c->aborted, &c->seg, e.text,
                         sizeof e.text);
  if (e.code != ncclSuccess) goto fail;
  seg_hdr *h = c->seg->base;
  if (h->version != SEG_VERSION) {
    errf(&e, ncclInternalError, -1, "shared memory %s has an unknown layout version %d", c->name, (int)h->version);
    goto fail;
  }
  if (h->nranks != n) { /* make the ranks already waiting fail too, instead of timing out */
    errf(&e, ncclInvalidUsage, -1, "ncclCommInitRank: rank %d was given nranks=%d, but the communicator has %d ranks",
         c->rank, n, h->nranks);
    jn_plock(&h->mu);
    if (!h->failed) {
      h->failed = 1;
      h->fail_code = ncclInvalidUsage;
      text_copy(h->fail_text, sizeof h->fail_text, e.text);
    }
    seg_notify(h);
    jn_punlock(&h->mu);
    goto fail;
  }
  c->sh = h;
  c->ranks = (seg_rank *)((char *)h + h->off_ranks);
  c->chans = (seg_chan *)((char *)h + h->off_chans);
  c->slots = (char *)h + h->off_slots;
  c->rings = (char *)h + h->off_rings;
  c->result = (char *)h + h->off_result;
  c->chunk = h->chunk;
  c->ring = h->ring;

  int unlink_now = 0;
  jn_plock(&h->mu);
  seg_rank *me = &c->ranks[c->rank];
  if (!h->failed && me->present) {
    h->failed = 1;
    h->fail_code = ncclInvalidUsage;
    snprintf(h->fail_text, sizeof h->fail_text, "ncclCommInitRank: rank %d was initialised twice", c->rank);
  }
  if (!me->present) {
    /* NCCL 2.30+ lets several ranks of one process share a GPU when NCCL_MULTI_RANK_GPU_ENABLE=1;
     * older ones (and 2.30 without it) refuse. The emulation follows the variable. */
    const char *multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
    int shared_ok = multi != NULL && atoi(multi) == 1;
    for (int r = 0; r < n && !h->failed && !shared_ok; r++) {
      if (c->ranks[r].present && c->ranks[r].pid == getpid() && c->ranks[r].device == c->device) {
        h->failed = 1;
        h->fail_code = ncclInvalidUsage;
        snprintf(h->fail_text, sizeof h->fail_text,
                 "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", r, c->rank, c->device);
      }
    }
    me->present = 1;
    me->pid = getpid();
    me->device = c->device;
    me->status = RS_OK;
    me->blame = -1;
    h->joined++;
    h->attached++;
    c->joined = 1;
    if (h->joined == n && !h->unlinked) { /* everybody is here: remove the name now */
      h->unlinked = 1;
      unlink_now = 1;
    }
  }
  seg_notify(h);
  uint64_t deadline = jn_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull;
  while (!h->failed && h->joined < n) {
    if (atomic_load(&c->aborted)) {
      errf(&e, ncclInvalidUsage, -1, "communicator aborted during initialisation");
      break;
    }
    if (jn_now_ns() > deadline) {
      h->failed = 1;
      h->fail_code = ncclSystemError;
      snprintf(h->fail_text, sizeof h->fail_text,
               "timed out after %ld ms waiting for ranks to join communicator %s (%d of %d joined)",
               c->init_timeout_ms, c->name, h->joined, n);
      seg_notify(h);
      break;
    }
    jn_pcond_wait_ms(&h->cv, &h->mu, WAIT_SLICE_MS);
  }
  if (e.code == ncclSuccess && h->failed) errf(&e, (ncclResult_t)h->fail_code, -1, "%s", h->fail_text);
  jn_punlock(&h->mu);
  if (unlink_now) jn_seg_unlink(c->name);
  if (e.code != ncclSuccess) goto fail;
  c->ins = calloc((size_t)n, sizeof(*c->ins));
  if (c->ins == NULL) {
    errf(&e, ncclSystemError, -1, "out of memory");
    goto fail;
  }
  atomic_store(&c->state, CS_READY);
  return;
fail:
  comm_set_init_error(c, &e);
}

static void *init_main(void *arg) {
  rendezvous(arg);
  return NULL;
}

static ncclResult_t start_init_thread(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  int rc = pthread_create(&c->init_thread, NULL, init_main, c);
  c->init_thread_live = rc == 0;
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    op_err e;
    errf(&e, ncclSystemError, -1, "pthread_create: %s", strerror(rc));
    comm_set_init_error(c, &e);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* Frees a communicator whose initialisation failed, as NCCL does for blocking inits. */
static void comm_discard(struct ncclComm *c) {
  atomic_store(&c->aborted, 1);
  init_join(c);
  comm_unregister(c);
  comm_put(c);
}

/* ================================================================= groups */

typedef struct {
  struct ncclComm *comm;
  ncclComm_t *out;
} init_job;

static _Thread_local int tl_group_depth;
static _Thread_local ncclResult_t tl_group_error;
static _Thread_local jn_op *tl_ops;
static _Thread_local int tl_nops, tl_capops;
static _Thread_local init_job *tl_inits;
static _Thread_local int tl_ninits, tl_capinits;

static void group_note_error(ncclResult_t rc) {
  if (tl_group_depth > 0 && tl_group_error == ncclSuccess) tl_group_error = rc;
}

ncclResult_t ncclGroupStart(void) {
  tl_group_depth++;
  return ncclSuccess;
}

static ncclResult_t post_ops(jn_op *ops, int n);

ncclResult_t ncclGroupEnd(void) {
  if (tl_group_depth == 0) return failf(ncclInvalidUsage, "ncclGroupEnd: not in a group call (no ncclGroupStart)");
  if (--tl_group_depth > 0) return ncclSuccess;
  jn_op *ops = tl_ops;
  int nops = tl_nops;
  init_job *inits = tl_inits;
  int ninits = tl_ninits;
  ncclResult_t rc = tl_group_error;
  tl_ops = NULL;
  tl_nops = tl_capops = 0;
  tl_inits = NULL;
  tl_ninits = tl_capinits = 0;
  tl_group_error = ncclSuccess;

  if (rc != ncclSuccess) { /* a call inside the group failed: nothing is launched */
    for (int i = 0; i < nops; i++) comm_put(ops[i].comm);
    for (int i = 0; i < ninits; i++) {
      *inits[i].out = NULL;
      comm_discard(inits[i].comm);
    }
    free(ops);
    free(inits);
    return rc;
  }
  /* Communicator inits of the group run concurrently (so that one thread can create
   * all ranks, as ncclCommInitAll does); blocking ones are waited for here. */
  int any_nonblocking = 0;
  for (int i = 0; i < ninits; i++) {
    struct ncclComm *c = inits[i].comm;
    start_init_thread(c); /* a failure to start shows in the comm's state */
    any_nonblocking |= !c->blocking;
  }
  for (int i = 0; i < ninits; i++) {
    struct ncclComm *c = inits[i].comm;
    if (!c->blocking) continue;
    init_join(c);
    if (atomic_load(&c->state) != CS_READY) {
      ncclResult_t e = comm_async(c);
      if (rc == ncclSuccess) rc = e;
      *inits[i].out = NULL;
      comm_discard(c);
    }
  }
  free(inits);
  if (nops > 0) {
    ncclResult_t r2 = post_ops(ops, nops);
    if (rc == ncclSuccess) rc = r2;
  }
  free(ops);
  if (rc == ncclSuccess && any_nonblocking) rc = ncclInProgress;
  return rc;
}

/* =========================================================== comm API */

static ncclResult_t init_rank(const char *fn, ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank,
                              const ncclConfig_t *config) {
  int blocking;
  ncclResult_t rc = parse_config(fn, config, 1, &blocking);
  if (rc == ncclSuccess && out == NULL) rc = failf(ncclInvalidArgument, "%s : comm argument is NULL", fn);
  if (rc == ncclSuccess && (nranks < 1 || rank < 0 || rank >= nranks))
    rc = failf(ncclInvalidArgument, "%s : Invalid rank requested : %d/%d", fn, rank, nranks);
  char name[64];
  if (rc == ncclSuccess && !id_name(id, name))
    rc = failf(ncclInvalidArgument, "%s : invalid ncclUniqueId (not created by ncclGetUniqueId)", fn);
  if (rc == ncclSuccess && jn_device_count() == 0)
    rc = failf(ncclUnhandledCudaError, "%s : Cuda failure 100 'no CUDA-capable device is detected'", fn);
  if (rc != ncclSuccess) {
    group_note_error(rc);
    return rc;
  }
  struct ncclComm *c = comm_new(nranks, name, rank, jn_current_device(), blocking);
  if (c == NULL) {
    group_note_error(ncclSystemError);
    return failf(ncclSystemError, "%s : out of memory", fn);
  }
  *out = c;
  if (tl_group_depth > 0) { /* launched by the outermost ncclGroupEnd */
    if (tl_ninits == tl_capinits) {
      int cap = tl_capinits ? tl_capinits * 2 : 8;
      init_job *n = realloc(tl_inits, (size_t)cap * sizeof(*n));
      if (n == NULL) {
        *out = NULL;
        comm_discard(c);
        group_note_error(ncclSystemError);
        return failf(ncclSystemError, "%s : out of memory", fn);
      }
      tl_inits = n;
      tl_capinits = cap;
    }
    tl_inits[tl_ninits++] = (init_job){c, out};
    return ncclSuccess;
  }
  if (blocking) {
    rendezvous(c);
    if (atomic_load(&c->state) != CS_READY) {
      rc = comm_async(c);
      *out = NULL;
      comm_discard(c);
      return rc;
    }
    return ncclSuccess;
  }
  rc = start_init_thread(c);
  return rc == ncclSuccess ? ncclInProgress : failf(rc, "%s : cannot start the initialisation thread", fn);
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
  return init_rank("ncclCommInitRank", comm, nranks, &commId, rank, NULL);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config) {
  return init_rank("ncclCommInitRankConfig", comm, nranks, &commId, rank, config);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist) {
  if (comm == NULL) return failf(ncclInvalidArgument, "ncclCommInitAll : comm argument is NULL");
  if (ndev < 1) return failf(ncclInvalidArgument, "ncclCommInitAll : Invalid device count requested : %d", ndev);
  int total = jn_device_count();
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= total)
      return failf(ncclInvalidArgument, "ncclCommInitAll : Invalid device %d (number of devices %d)", d, total);
    for (int j = 0; j < i && devlist; j++)
      if (devlist[j] == d) return failf(ncclInvalidUsage, "ncclCommInitAll : Duplicate device %d in devlist", d);
  }
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  int saved = jn_current_device();
  ncclGroupStart();
  ncclResult_t rc = ncclSuccess;
  for (int i = 0; i < ndev && rc == ncclSuccess; i++) {
    cudaSetDevice(devlist ? devlist[i] : i);
    rc = ncclCommInitRank(&comm[i], ndev, id, i);
  }
  ncclResult_t rc2 = ncclGroupEnd();
  cudaSetDevice(saved);
  return rc != ncclSuccess ? rc : rc2;
}

/* Validates the handle of an API call and takes a reference; the error text names fn. */
static ncclResult_t get_comm(const char *fn, ncclComm_t h, struct ncclComm **out) {
  if (h == NULL) return failf(ncclInvalidArgument, "%s : comm argument is NULL", fn);
  struct ncclComm *c = comm_get(h);
  if (c == NULL) return failf(ncclInvalidArgument, "%s : invalid communicator %p (destroyed?)", fn, (void *)h);
  *out = c;
  return ncclSuccess;
}

/* The comm must have finished its initialisation without error (NCCL's ncclCommEnsureReady). */
static ncclResult_t ensure_ready(const char *fn, struct ncclComm *c) {
  if (atomic_load(&c->aborted)) return failf(ncclInvalidUsage, "%s : the communicator was aborted", fn);
  if (atomic_load(&c->state) == CS_INIT || atomic_load(&c->split_busy))
    return failf(ncclInvalidArgument,
                 "%s : Attempt to use communicator before the previous operation returned ncclSuccess", fn);
  return comm_async(c);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommGetAsyncError", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (asyncError == NULL) {
    comm_put(c);
    return failf(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
  }
  if (atomic_load(&c->state) == CS_INIT || atomic_load(&c->split_busy)) {
    *asyncError = ncclInProgress;
    comm_put(c);
    return ncclSuccess;
  }
  init_join(c); /* a non-blocking init's thread has finished: join it */
  split_join(c); /* likewise a non-blocking split's */
  ncclResult_t e = atomic_load(&c->async_err);
  if (e == ncclSuccess && atomic_load(&c->state) == CS_READY) {
    /* A peer that failed because of us (send/recv size mismatch) makes us fail too. */
    op_err pe = {ncclSuccess, -1, ""};
    jn_plock(&c->sh->mu);
    for (int r = 0; r < c->nranks; r++)
      if (r != c->rank && c->ranks[r].status == RS_FAILED && c->ranks[r].blame == c->rank) {
        peer_error(c, r, &pe);
        break;
      }
    jn_punlock(&c->sh->mu);
    if (pe.code != ncclSuccess) comm_fail(c, &pe);
  }
  e = comm_async(c);
  if (e == ncclSuccess) {
    pthread_mutex_lock(&c->mu);
    if (c->finalizing && c->pending > 0) e = ncclInProgress;
    pthread_mutex_unlock(&c->mu);
  }
  *asyncError = e;
  comm_put(c);
  return ncclSuccess;
}

/* Waits until no operation of the comm is queued or running. Returns 1 if that was reached
 * (0 if aborted or timed out; timeout_ms < 0: no limit). */
static int wait_idle(struct ncclComm *c, long timeout_ms, int stop_on_abort) {
  uint64_t deadline = timeout_ms < 0 ? 0 : jn_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  pthread_mutex_lock(&c->mu);
  while (c->pending > 0) {
    if (stop_on_abort && atomic_load(&c->aborted)) break;
    if (deadline != 0 && jn_now_ns() > deadline) break;
    jn_cond_wait_ms(&c->cv, &c->mu, 10);
  }
  int idle = c->pending == 0;
  pthread_mutex_unlock(&c->mu);
  return idle;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommFinalize", comm, &c);
  if (rc != ncclSuccess) return rc;
  rc = ensure_ready("ncclCommFinalize", c);
  if (rc == ncclSuccess) {
    pthread_mutex_lock(&c->mu);
    c->finalizing = 1;
    pthread_mutex_unlock(&c->mu);
    if (c->blocking) { /* flush: wait until all enqueued work of the comm is done */
      wait_idle(c, -1, 1);
      rc = comm_async(c);
    } else {
      rc = ncclInProgress; /* poll ncclCommGetAsyncError until ncclSuccess */
    }
  }
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL */
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommDestroy", comm, &c);
  if (rc != ncclSuccess) return rc;
  /* Like NCCL (ncclCommEnsureReady): a communicator whose non-blocking init is still running,
   * or that has an async error, is not destroyed; the error is returned and the caller must
   * wait, or use ncclCommAbort. */
  rc = ensure_ready("ncclCommDestroy", c);
  if (rc != ncclSuccess) {
    comm_put(c);
    return rc;
  }
  if (!comm_unregister(c)) { /* destroyed concurrently */
    comm_put(c);
    return failf(ncclInvalidArgument, "ncclCommDestroy : invalid communicator %p", (void *)comm);
  }
  init_join(c);
  wait_idle(c, -1, 1); /* implicit finalize: queued operations complete first */
  comm_put(c);         /* ours */
  comm_put(c);         /* the handle's: frees everything unless a stream item still holds it */
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL */
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommAbort", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (!comm_unregister(c)) {
    comm_put(c);
    return failf(ncclInvalidArgument, "ncclCommAbort : invalid communicator %p", (void *)comm);
  }
  atomic_store(&c->aborted, 1);
  pthread_mutex_lock(&c->mu);
  if (c->split_child != NULL) atomic_store(&c->split_child->aborted, 1); /* as NCCL's shared abort flag */
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  init_join(c); /* its waits re-check the abort flag */
  split_join(c); /* likewise: the split fails and frees the child it was setting up */
  if (c->joined) { /* tell the peers, and wake every waiter of the segment */
    jn_plock(&c->sh->mu);
    seg_rank *me = &c->ranks[c->rank];
    if (me->status == RS_OK) me->status = RS_ABORTED; /* a failure stays the reported cause */
    seg_notify(c->sh);
    jn_punlock(&c->sh->mu);
  }
  /* The running operation ends at its next wait slice and queued ones are skipped; if a
   * stream is held up by something else, the last item to finish frees the comm. */
  wait_idle(c, ABORT_WAIT_MS, 0);
  comm_put(c);
  comm_put(c);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommCount", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (count == NULL) rc = failf(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
  else *count = c->nranks;
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommCuDevice", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (device == NULL) rc = failf(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
  else *device = c->device;
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommUserRank", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (rank == NULL) rc = failf(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
  else *rank = c->rank;
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommRegister", comm, &c);
  if (rc != ncclSuccess) return rc;
  /* NCCL does not check buff (a NULL one registers nothing); a buffer given must be device
   * memory here. Registration changes nothing in the emulation: the handle is a token. */
  if (handle == NULL) rc = failf(ncclInvalidArgument, "ncclCommRegister : handle argument is NULL");
  else if (buff != NULL && !jn_mem_range_ok(buff, size, NULL))
    rc = failf(ncclInvalidArgument, "ncclCommRegister : buff %p (%zu bytes) is not device memory", buff, size);
  else
    *handle = buff;
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  JN_UNUSED(handle); /* any token, NULL included (NCCL ignores a NULL handle) */
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommDeregister", comm, &c);
  if (rc != ncclSuccess) return rc;
  comm_put(c);
  return rc;
}

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  cudaError_t e = cudaMalloc(ptr, size); /* NCCL falls back on cudaMalloc without cuMem */
  if (e != cudaSuccess) return failf(ncclUnhandledCudaError, "Cuda failure %d '%s'", (int)e, cudaGetErrorString(e));
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void *ptr) {
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess) return failf(ncclUnhandledCudaError, "Cuda failure %d '%s'", (int)e, cudaGetErrorString(e));
  return ncclSuccess;
}

/* ================================================================ split */

typedef struct {
  uint64_t gen;
} split_arg;

static int ready_split(const struct ncclComm *c, int r, const void *arg) {
  uint64_t gen = ((const split_arg *)arg)->gen;
  return c->ranks[r].split[gen & 1].gen == gen;
}

/* Name of the segment of a split's child: a hash of the parent's name, split number and color. */
static void split_name(char out[64], const char *parent, uint64_t gen, int color) {
  uint64_t h1 = 0xcbf29ce484222325ull, h2 = 0x84222325cbf29ce4ull;
  for (const char *p = parent; *p; p++) {
    h1 = (h1 ^ (unsigned char)*p) * 0x100000001b3ull;
    h2 = (h2 ^ (unsigned char)*p) * 0x1000193ull + 0x9e37ull;
  }
  h1 = mix64(h1 ^ mix64(gen) ^ ((uint64_t)(uint32_t)color << 17));
  h2 = mix64(h2 ^ mix64(gen + 0x51ull) ^ (uint64_t)(uint32_t)color);
  snprintf(out, 64, NAME_PREFIX "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
}

/* Exchanges (color, key) through the parent's segment and works out the child's size and
 * rank (newn = 0 for NCCL_SPLIT_NOCOLOR). Fails on abort, a dead peer, or the init timeout. */
static ncclResult_t split_exchange(struct ncclComm *c, int color, int key, uint64_t gen, int *newn_out,
                                   int *newrank_out, op_err *e) {
  split_arg a = {gen};
  int n = c->nranks, newn = 0, newrank = 0;
  jn_plock(&c->sh->mu);
  c->ranks[c->rank].split[gen & 1].color = color;
  c->ranks[c->rank].split[gen & 1].key = key;
  c->ranks[c->rank].split[gen & 1].gen = gen;
  seg_notify(c->sh);
  ncclResult_t rc = wait_ranks(c, -1, ready_split, &a, jn_now_ns() + (uint64_t)c->init_timeout_ms * 1000000ull, e);
  if (rc == ncclSuccess && color != JN_NCCL_SPLIT_NOCOLOR) {
    for (int r = 0; r < n; r++) { /* new rank = position in (key, old rank) order */
      const seg_rank *p = &c->ranks[r];
      if (p->split[gen & 1].color != color) continue;
      newn++;
      int pk = p->split[gen & 1].key;
      if (pk < key || (pk == key && r < c->rank)) newrank++;
    }
  }
  jn_punlock(&c->sh->mu);
  *newn_out = newn;
  *newrank_out = newrank;
  return rc;
}

typedef struct {
  struct ncclComm *parent;
  ncclComm_t *out;
  int color, key, blocking;
  uint64_t gen;
} split_job;

/* Records a failure of an asynchronous operation of c as its async error (locally, as NCCL's
 * ncclCommSetAsyncError: the peers are not told). */
static void comm_set_async_local(struct ncclComm *c, ncclResult_t code, const char *text) {
  pthread_mutex_lock(&c->mu);
  if (atomic_load(&c->async_err) == ncclSuccess) {
    text_copy(c->async_text, sizeof c->async_text, text);
    atomic_store(&c->async_err, code);
  }
  pthread_mutex_unlock(&c->mu);
}

/* The split of a non-blocking parent, on its own thread: exchange, create the child, wait for
 * all its ranks, then publish the handle and leave ncclInProgress (NCCL sets *newcomm only
 * when the child is complete). The parent outlives the thread: abort, destroy and teardown
 * join it first, and destroy/finalize refuse while the split is running. */
static void *split_main(void *arg) {
  split_job *j = arg;
  struct ncclComm *c = j->parent;
  op_err e = {ncclSuccess, -1, ""};
  int newn = 0, newrank = 0;
  ncclResult_t rc = split_exchange(c, j->color, j->key, j->gen, &newn, &newrank, &e);
  if (rc == ncclSuccess && j->color != JN_NCCL_SPLIT_NOCOLOR) {
    char name[64];
    split_name(name, c->name, j->gen, j->color);
    struct ncclComm *nc = comm_new(newn, name, newrank, c->device, j->blocking);
    if (nc == NULL) {
      rc = ncclSystemError;
      errf(&e, rc, -1, "out of memory");
    } else {
      pthread_mutex_lock(&c->mu);
      c->split_child = nc;
      if (atomic_load(&c->aborted)) atomic_store(&nc->aborted, 1);
      pthread_mutex_unlock(&c->mu);
      rendezvous(nc);
      pthread_mutex_lock(&c->mu);
      c->split_child = NULL;
      pthread_mutex_unlock(&c->mu);
      if (atomic_load(&nc->state) != CS_READY) {
        rc = atomic_load(&nc->async_err);
        pthread_mutex_lock(&nc->mu);
        errf(&e, rc == ncclSuccess ? ncclSystemError : rc, -1, "%s", nc->async_text);
        pthread_mutex_unlock(&nc->mu);
        rc = e.code;
        comm_discard(nc);
      } else {
        *j->out = nc;
      }
    }
  }
  if (rc != ncclSuccess) {
    char text[300];
    snprintf(text, sizeof text, "ncclCommSplit : %s", e.text);
    comm_set_async_local(c, rc, text);
  }
  atomic_store(&c->split_busy, 0); /* after *out: who sees "not in progress" sees the handle */
  free(j);
  return NULL;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
  static const char fn[] = "ncclCommSplit";
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  int blocking = c->blocking;
  /* Any color is valid (NCCL accepts negative ones too); NCCL_SPLIT_NOCOLOR opts out. */
  if (newcomm == NULL) rc = failf(ncclInvalidArgument, "%s : newcomm argument is NULL", fn);
  if (rc == ncclSuccess) rc = ensure_ready(fn, c);
  if (rc == ncclSuccess) rc = parse_config(fn, config, c->blocking, &blocking); /* NULL: inherit */
  if (rc != ncclSuccess) {
    comm_put(c);
    return rc;
  }
  uint64_t gen = ++c->split_gen;
  if (!c->blocking) {
    /* As NCCL: the split is a job of the parent's group, which is non-blocking because the
     * parent is, whatever the child's config says. *newcomm is NULL until the parent's async
     * state leaves ncclInProgress; then it is the ready child (or NULL for NOCOLOR/failure). */
    *newcomm = NULL;
    split_job *j = calloc(1, sizeof(*j));
    if (j == NULL) {
      comm_put(c);
      return failf(ncclSystemError, "%s : out of memory", fn);
    }
    *j = (split_job){c, newcomm, color, key, blocking, gen};
    atomic_store(&c->split_busy, 1);
    pthread_mutex_lock(&c->mu);
    int err = pthread_create(&c->split_thread, NULL, split_main, j);
    c->split_thread_live = err == 0;
    pthread_mutex_unlock(&c->mu);
    if (err != 0) {
      atomic_store(&c->split_busy, 0);
      free(j);
      comm_put(c);
      return failf(ncclSystemError, "%s : cannot start the split thread: %s", fn, strerror(err));
    }
    comm_put(c);
    return ncclInProgress;
  }
  /* A blocking parent: the exchange and (for a blocking child) the child's rendezvous happen
   * here; a non-blocking child's rendezvous runs in the background. */
  op_err e = {ncclSuccess, -1, ""};
  int newn = 0, newrank = 0;
  rc = split_exchange(c, color, key, gen, &newn, &newrank, &e);
  if (rc != ncclSuccess) {
    *newcomm = NULL;
    rc = failf(rc, "%s : %s", fn, e.text);
    comm_put(c);
    return rc;
  }
  if (color == JN_NCCL_SPLIT_NOCOLOR) {
    *newcomm = NULL;
    comm_put(c);
    return ncclSuccess;
  }
  char name[64];
  split_name(name, c->name, gen, color);
  struct ncclComm *nc = comm_new(newn, name, newrank, c->device, blocking);
  comm_put(c);
  if (nc == NULL) return failf(ncclSystemError, "%s : out of memory", fn);
  *newcomm = nc;
  if (blocking) {
    rendezvous(nc);
    if (atomic_load(&nc->state) != CS_READY) {
      rc = comm_async(nc);
      *newcomm = NULL;
      comm_discard(nc);
      return rc;
    }
    return ncclSuccess;
  }
  rc = start_init_thread(nc);
  return rc == ncclSuccess ? ncclInProgress : failf(rc, "%s : cannot start the initialisation thread", fn);
}

/* ============================================================= execution */

static void turn_acquire(struct ncclComm *c, uint64_t ticket) {
  pthread_mutex_lock(&c->mu);
  while (c->serving != ticket) jn_cond_wait_ms(&c->cv, &c->mu, 50);
  pthread_mutex_unlock(&c->mu);
}

static void turn_release(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  c->serving++;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

/*
 * Common start of every operation: skip it if the comm already failed, count it,
 * apply the rank's delay and the injected faults.
 * Returns 0 to run it, 1 if it failed (e set), 2 to skip it silently.
 */
static int op_begin(struct ncclComm *c, op_err *e) {
  if (atomic_load(&c->aborted)) {
    aborted_error(e);
    return 1;
  }
  if (atomic_load(&c->async_err) != ncclSuccess) return 2;
  c->op_count++;
  if (c->delay_us > 0) jn_sleep_us(c->delay_us);
  if (c->fault_mode != FAULT_NONE && c->op_count == (uint64_t)c->fault_at) {
    if (c->fault_mode == FAULT_FAIL) {
      errf(e, ncclSystemError, -1, "injected failure at operation %d of rank %d", c->fault_at, c->rank);
      return 1;
    }
    pthread_mutex_lock(&c->mu); /* FAULT_HANG: block until the communicator is aborted */
    while (!atomic_load(&c->aborted)) jn_cond_wait_ms(&c->cv, &c->mu, 50);
    pthread_mutex_unlock(&c->mu);
    errf(e, ncclSystemError, -1, "operation aborted by ncclCommAbort (hung by JNCCL_HOST_FAULT=hang)");
    return 1;
  }
  return 0;
}

static char *slot_of(const struct ncclComm *c, int r) { return c->slots + (size_t)r * c->chunk; }

/* NCCL's ring all-reduce splits the buffer into n chunks; chunk k is reduced along the ring from
 * rank k + 1 to rank k. The chunk is ceil(count / n) elements rounded up to 16 bytes, as NCCL
 * does with one channel (with several channels each channel's share is split this way, which
 * the emulation does not model: it then differs in rounding order from NCCL for some elements). */
static size_t ring_chunk(size_t count, int n, size_t es) {
  size_t granule = es >= 16 ? 1 : 16 / es;
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  per = (per + granule - 1) / granule * granule;
  return per == 0 ? 1 : per;
}

/* Reduces elements [at, at + len) of an all-reduce of `count` elements (ins point at element
 * `at`), each ring chunk in its ring order. */
static void reduce_ring_chunks(struct ncclComm *c, char *out, size_t at, size_t len, const jn_op *op) {
  const int n = c->nranks;
  const size_t es = jn_dtype_size(op->dtype), chunk = ring_chunk(op->count, n, es);
  size_t done = 0;
  while (done < len) {
    size_t g = at + done, k = g / chunk, part = JN_MIN(len - done, (k + 1) * chunk - g);
    for (int j = 0; j < n; j++) c->ins[j] = (const char *)c->ins[j] + done * es;
    jn_reduce(out + done * es, c->ins, n, (int)((k + 1) % (size_t)n), part, op->dtype, op->redop);
    for (int j = 0; j < n; j++) c->ins[j] = (const char *)c->ins[j] - done * es;
    done += part;
  }
}

/* Runs one collective in chunk-sized rounds (see the top of the file). */
static ncclResult_t run_coll(struct ncclComm *c, const jn_op *op, op_err *e) {
  const int n = c->nranks, me = c->rank, root = op->peer;
  const size_t es = jn_dtype_size(op->dtype);
  const char *send = op->send;
  char *recv = op->recv;
  size_t per = c->chunk / es; /* elements of one rank's piece per round */
  if (op->kind == K_REDUCESCATTER || op->kind == K_ALLTOALL) per /= (size_t)n;
  if (per == 0) per = 1;
  for (size_t off = 0; off < op->count; off += per) {
    const size_t len = JN_MIN(per, op->count - off), lb = len * es;
    const uint64_t k = ++c->round;
    char *mine = slot_of(c, me);
    /* 1. our slot is free once everyone has read round k-1 */
    seq_arg prev = {k - 1, SEQ_READ};
    jn_plock(&c->sh->mu);
    ncclResult_t rc = wait_ranks(c, -1, ready_seq, &prev, 0, e);
    jn_punlock(&c->sh->mu);
    if (rc != ncclSuccess) return rc;
    /* 2. write our piece */
    switch (op->kind) {
      case K_ALLREDUCE:
      case K_REDUCE:
      case K_ALLGATHER: memcpy(mine, send + off * es, lb); break;
      case K_BROADCAST:
        if (me == root) memcpy(mine, send + off * es, lb);
        break;
      case K_REDUCESCATTER:
      case K_ALLTOALL: /* the piece for rank d sits at d*lb */
        for (int d = 0; d < n; d++) memcpy(mine + (size_t)d * lb, send + ((size_t)d * op->count + off) * es, lb);
        break;
      default: break;
    }
    /* 3. publish it and wait for everybody's */
    seq_arg fill = {k, SEQ_FILL};
    jn_plock(&c->sh->mu);
    c->ranks[me].fill_seq = k;
    seg_notify(c->sh);
    rc = wait_ranks(c, -1, ready_seq, &fill, 0, e);
    jn_punlock(&c->sh->mu);
    if (rc != ncclSuccess) return rc;
    /* 4. read / reduce */
    if (op->kind == K_ALLREDUCE && n > 2 && lb >= SPLIT_ALLREDUCE_BYTES) {
      /* Split all-reduce: each rank reduces 1/n of the piece (same rank order, so the same
       * bits) into the result area; then everybody copies the whole result. */
      size_t lo = len * (size_t)me / (size_t)n, hi = len * (size_t)(me + 1) / (size_t)n;
      for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j) + lo * es;
      reduce_ring_chunks(c, c->result + lo * es, off + lo, hi - lo, op);
      seq_arg red = {k, SEQ_RED};
      jn_plock(&c->sh->mu);
      c->ranks[me].red_seq = k;
      seg_notify(c->sh);
      rc = wait_ranks(c, -1, ready_seq, &red, 0, e);
      jn_punlock(&c->sh->mu);
      if (rc != ncclSuccess) return rc;
      memcpy(recv + off * es, c->result, lb);
    } else switch (op->kind) {
      case K_ALLREDUCE:
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j);
        reduce_ring_chunks(c, recv + off * es, off, len, op);
        break;
      case K_REDUCE: /* NCCL's ring reduce ends at the root */
        if (me != root) break;
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j);
        jn_reduce(recv + off * es, c->ins, n, root + 1, len, op->dtype, op->redop);
        break;
      case K_REDUCESCATTER: /* rank me's chunk travels the ring from rank me + 1 to me */
        for (int j = 0; j < n; j++) c->ins[j] = slot_of(c, j) + (size_t)me * lb;
        jn_reduce(recv + off * es, c->ins, n, me + 1, len, op->dtype, op->redop);
        break;
      case K_BROADCAST:
        if (recv + off * es != send + off * es || me != root) memcpy(recv + off * es, slot_of(c, root), lb);
        break;
      case K_ALLGATHER:
        for (int j = 0; j < n; j++) memcpy(recv + ((size_t)j * op->count + off) * es, slot_of(c, j), lb);
        break;
      case K_ALLTOALL:
        for (int j = 0; j < n; j++)
          memcpy(recv + ((size_t)j * op->count + off) * es, slot_of(c, j) + (size_t)me * lb, lb);
        break;
      default: break;
    }
    /* 5. done with the others' slots */
    jn_plock(&c->sh->mu);
    c->ranks[me].read_seq = k;
    seg_notify(c->sh);
    jn_punlock(&c->sh->mu);
  }
  return ncclSuccess;
}

static seg_chan *chan_of(const struct ncclComm *c, int src, int dst) {
  return &c->chans[(size_t)src * (size_t)c->nranks + (size_t)dst];
}

static char *ring_of(const struct ncclComm *c, int src, int dst) {
  return c->rings + ((size_t)src * (size_t)c->nranks + (size_t)dst) * c->ring;
}

static void ring_put(char *ring, uint64_t cap, uint64_t pos, const char *src, size_t len) {
  size_t first = JN_MIN(len, (size_t)(cap - pos));
  memcpy(ring + pos, src, first);
  memcpy(ring, src + first, len - first);
}

static void ring_get(const char *ring, uint64_t cap, uint64_t pos, char *dst, size_t len) {
  size_t first = JN_MIN(len, (size_t)(cap - pos));
  memcpy(dst, ring + pos, first);
  memcpy(dst + first, ring, len - first);
}

/* One non-blocking progress step of a send or receive. */
static int p2p_step(jn_op *op, op_err *e) {
  struct ncclComm *c = op->comm;
  const int me = c->rank, peer = op->peer;
  int progressed = 0;
  jn_plock(&c->sh->mu);
  if (op->kind == K_SEND) {
    seg_chan *ch = chan_of(c, me, peer);
    if (!op->started && ch->posted - ch->started < HDRQ) {
      ch->sizes[ch->posted % HDRQ] = op->bytes;
      ch->posted++;
      op->started = 1;
      progressed = 1;
    }
    uint64_t space = c->ring - (ch->head - ch->tail);
    if (op->started && op->done < op->bytes && space > 0) {
      size_t len = (size_t)JN_MIN(space, (uint64_t)(op->bytes - op->done));
      uint64_t pos = ch->head % c->ring;
      jn_punlock(&c->sh->mu); /* only this rank's worker writes this channel */
      ring_put(ring_of(c, me, peer), c->ring, pos, (const char *)op->send + op->done, len);
      jn_plock(&c->sh->mu);
      ch->head += len;
      op->done += len;
      progressed = 1;
    }
  } else {
    seg_chan *ch = chan_of(c, peer, me);
    if (!op->started && ch->posted > ch->started) {
      uint64_t size = ch->sizes[ch->started % HDRQ];
      if (size != op->bytes) {
        errf(e, ncclInvalidUsage, peer,
             "send/recv size mismatch: rank %d sends %llu bytes to rank %d, which receives %zu bytes", peer,
             (unsigned long long)size, me, op->bytes);
        jn_punlock(&c->sh->mu);
        return STEP_ERROR;
      }
      ch->started++;
      op->started = 1;
      progressed = 1;
    }
    uint64_t avail = ch->head - ch->tail;
    if (op->started && op->done < op->bytes && avail > 0) {
      size_t len = (size_t)JN_MIN(avail, (uint64_t)(op->bytes - op->done));
      uint64_t pos = ch->tail % c->ring;
      jn_punlock(&c->sh->mu); /* only this rank's worker reads this channel */
      ring_get(ring_of(c, peer, me), c->ring, pos, (char *)op->recv + op->done, len);
      jn_plock(&c->sh->mu);
      ch->tail += len;
      op->done += len;
      progressed = 1;
    }
  }
  int rc = op->started && op->done == op->bytes ? STEP_DONE : progressed ? STEP_PROGRESS : STEP_IDLE;
  if (progressed) seg_notify(c->sh);
  if (rc == STEP_IDLE && peer_error(c, peer, e)) rc = STEP_ERROR;
  jn_punlock(&c->sh->mu);
  return rc;
}

static int is_p2p(const jn_op *op) { return op->kind == K_SEND || op->kind == K_RECV; }

/* Progresses all send/recv operations of an item together until each finished or failed. */
static void run_p2p(nccl_item *it) {
  int active = 0;
  for (int i = 0; i < it->nops; i++) {
    jn_op *op = &it->ops[i];
    if (!is_p2p(op)) continue;
    op_err e;
    int b = op_begin(op->comm, &e);
    if (b == 1) comm_fail(op->comm, &e);
    op->st = b != 0;
    active += b == 0;
  }
  while (active > 0) {
    seg_hdr *wait_seg = NULL;
    uint64_t gen0 = 0;
    int nsegs = 0, progressed = 0;
    for (int i = 0; i < it->nops; i++) {
      jn_op *op = &it->ops[i];
      if (!is_p2p(op) || op->st) continue;
      struct ncclComm *c = op->comm;
      if (wait_seg == NULL) { /* remember the state version before this pass */
        wait_seg = c->sh;
        jn_plock(&wait_seg->mu);
        gen0 = wait_seg->gen;
        jn_punlock(&wait_seg->mu);
      }
      nsegs += c->sh != wait_seg;
      /* Messages between a pair stay in order: an op waits for earlier ones of its pair. */
      int blocked = 0;
      for (int j = 0; j < i && !blocked; j++) {
        const jn_op *o = &it->ops[j];
        blocked = !o->st && o->kind == op->kind && o->comm == c && o->peer == op->peer;
      }
      if (blocked) continue;
      op_err e;
      int s;
      if (atomic_load(&c->aborted)) {
        aborted_error(&e);
        s = STEP_ERROR;
      } else if (atomic_load(&c->async_err) != ncclSuccess) {
        s = STEP_DONE; /* the comm failed meanwhile: skip */
      } else {
        s = p2p_step(op, &e);
      }
      if (s == STEP_ERROR) comm_fail(c, &e);
      if (s == STEP_ERROR || s == STEP_DONE) {
        op->st = 1;
        active--;
      }
      progressed |= s != STEP_IDLE;
    }
    if (active > 0 && !progressed && wait_seg != NULL) {
      jn_plock(&wait_seg->mu);
      if (wait_seg->gen == gen0) jn_pcond_wait_ms(&wait_seg->cv, &wait_seg->mu, nsegs ? 1 : WAIT_SLICE_MS);
      jn_punlock(&wait_seg->mu);
    }
  }
}

static jn_join *join_new(int followers) {
  jn_join *j = calloc(1, sizeof(*j));
  if (j == NULL) return NULL;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cv, NULL);
  j->followers = followers;
  atomic_init(&j->refs, followers + 1);
  return j;
}

static void join_put(jn_join *j) {
  if (atomic_fetch_sub(&j->refs, 1) == 1) {
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j);
  }
}

static void join_arrive(jn_join *j) {
  pthread_mutex_lock(&j->mu);
  j->arrived++;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void join_finish(jn_join *j) {
  pthread_mutex_lock(&j->mu);
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

static void join_wait(jn_join *j, int for_done) {
  pthread_mutex_lock(&j->mu);
  while (for_done ? !j->done : j->arrived < j->followers) pthread_cond_wait(&j->cv, &j->mu);
  pthread_mutex_unlock(&j->mu);
}

static void nccl_item_run(jn_item *base) {
  nccl_item *it = (nccl_item *)base;
  for (int i = 0; i < it->nfollow; i++) join_arrive(it->follow[i]);
  if (it->nops > 0) {
    for (int i = 0; i < it->nlead; i++) join_wait(it->lead[i], 0); /* other streams' earlier work is done */
    for (int t = 0; t < it->ntickets; t++) turn_acquire(it->tickets[t].comm, it->tickets[t].ticket);
    run_p2p(it);
    for (int i = 0; i < it->nops; i++) {
      jn_op *op = &it->ops[i];
      if (is_p2p(op)) continue;
      op_err e;
      int b = op_begin(op->comm, &e);
      if (b == 0 && run_coll(op->comm, op, &e) != ncclSuccess) b = 1;
      if (b == 1) comm_fail(op->comm, &e);
    }
    for (int t = 0; t < it->ntickets; t++) turn_release(it->tickets[t].comm);
    for (int i = 0; i < it->nlead; i++) join_finish(it->lead[i]);
  }
  for (int i = 0; i < it->nfollow; i++) join_wait(it->follow[i], 1);
}

static void op_finished(struct ncclComm *c) {
  pthread_mutex_lock(&c->mu);
  if (--c->pending == 0) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  comm_put(c);
}

static void nccl_item_free(jn_item *base) {
  nccl_item *it = (nccl_item *)base;
  for (int i = 0; i < it->nops; i++) op_finished(it->ops[i].comm);
  for (int i = 0; i < it->nlead; i++) join_put(it->lead[i]);
  for (int i = 0; i < it->nfollow; i++) join_put(it->follow[i]);
  free(it->lead);
  free(it->follow);
  free(it->tickets);
  free(it->ops);
  free(it);
}

/*
 * Posts operations (each holding a comm reference) as one stream item per stream.
 * All operations of a communicator go to the item of the first stream it uses in the
 * group (its launch stream); the other streams it uses get follower items (see jn_join).
 */
static ncclResult_t post_ops(jn_op *ops, int n) {
  ncclResult_t rc = ncclSuccess;
  /* distinct streams and communicators, in order of first appearance */
  cudaStream_t *streams = calloc((size_t)n, sizeof(*streams));
  struct ncclComm **comms = calloc((size_t)n, sizeof(*comms));
  int *launch = calloc((size_t)n, sizeof(*launch));   /* per comm: index of its launch stream */
  int *op_stream = calloc((size_t)n, sizeof(*op_stream));
  char *uses = calloc((size_t)n * (size_t)n, 1);       /* uses[comm * n + stream] */
  jn_join **joins = calloc((size_t)n, sizeof(*joins)); /* per comm, if it uses several streams */
  nccl_item **items = calloc((size_t)n, sizeof(*items));
  int ns = 0, nc = 0, oom = !streams || !comms || !launch || !op_stream || !uses || !joins || !items;
  for (int i = 0; i < n && !oom; i++) {
    int si = 0, ci = 0;
    while (si < ns && streams[si] != ops[i].stream) si++;
    if (si == ns) streams[ns++] = ops[i].stream;
    while (ci < nc && comms[ci] != ops[i].comm) ci++;
    if (ci == nc) {
      comms[nc++] = ops[i].comm;
      launch[ci] = si;
    }
    op_stream[i] = launch[ci];
    uses[(size_t)ci * (size_t)n + (size_t)si] = 1;
  }
  for (int ci = 0; ci < nc && !oom; ci++) {
    int k = 0;
    for (int si = 0; si < ns; si++) k += uses[(size_t)ci * (size_t)n + (size_t)si];
    if (k > 1 && (joins[ci] = join_new(k - 1)) == NULL) oom = 1;
  }
  /* build one item per stream */
  for (int si = 0; si < ns && !oom; si++) {
    nccl_item *it = calloc(1, sizeof(*it));
    if (it == NULL) {
      oom = 1;
      break;
    }
    items[si] = it;
    it->base = (jn_item){NULL, nccl_item_run, nccl_item_free};
    for (int i = 0; i < n; i++) it->nops += op_stream[i] == si;
    it->ops = calloc((size_t)it->nops + 1, sizeof(*it->ops));
    it->tickets = calloc((size_t)nc + 1, sizeof(*it->tickets));
    it->lead = calloc((size_t)nc + 1, sizeof(*it->lead));
    it->follow = calloc((size_t)nc + 1, sizeof(*it->follow));
    if (!it->ops || !it->tickets || !it->lead || !it->follow) {
      oom = 1;
      break;
    }
    for (int i = 0, k = 0; i < n; i++)
      if (op_stream[i] == si) it->ops[k++] = ops[i];
    for (int ci = 0; ci < nc; ci++) {
      if (joins[ci] == NULL) continue;
      if (launch[ci] == si) it->lead[it->nlead++] = joins[ci];
      else if (uses[(size_t)ci * (size_t)n + (size_t)si]) it->follow[it->nfollow++] = joins[ci];
    }
  }
  if (oom) { /* nothing was posted: release everything */
    for (int i = 0; i < n; i++) comm_put(ops[i].comm);
    for (int ci = 0; ci < nc; ci++)
      if (joins && joins[ci]) {
        pthread_mutex_destroy(&joins[ci]->mu);
        pthread_cond_destroy(&joins[ci]->cv);
        free(joins[ci]);
      }
    for (int si = 0; si < ns && items; si++)
      if (items[si]) {
        free(items[si]->ops);
        free(items[si]->tickets);
        free(items[si]->lead);
        free(items[si]->follow);
        free(items[si]);
      }
    rc = failf(ncclSystemError, "out of memory");
    goto out;
  }
  jn_enqueue_lock();
  for (int si = 0; si < ns; si++) {
    nccl_item *it = items[si];
    for (int j = 0; j < it->nops; j++) { /* one ticket per distinct communicator */
      struct ncclComm *c = it->ops[j].comm;
      int seen = 0;
      for (int t = 0; t < it->ntickets && !seen; t++) seen = it->tickets[t].comm == c;
      if (!seen) it->tickets[it->ntickets++] = (jn_ticket){c, c->next_ticket++};
      pthread_mutex_lock(&c->mu);
      c->pending++;
      pthread_mutex_unlock(&c->mu);
    }
    jn_item *one[1] = {&it->base};
    if (jn_stream_submit(streams[si], one, 1) != cudaSuccess) {
      /* The stream was destroyed since the call: undo, and release the joins' partners. */
      for (int t = 0; t < it->ntickets; t++) it->tickets[t].comm->next_ticket--;
      it->ntickets = 0;
      for (int i = 0; i < it->nlead; i++) join_finish(it->lead[i]);
      for (int i = 0; i < it->nfollow; i++) join_arrive(it->follow[i]);
      nccl_item_free(&it->base);
      rc = failf(ncclInvalidArgument, "invalid stream %p (destroyed?)", (void *)streams[si]);
    }
  }
  jn_enqueue_unlock();
out:
  free(streams);
  free(comms);
  free(launch);
  free(op_stream);
  free(uses);
  free(joins);
  free(items);
  return rc;
}

/* ============================================================ enqueueing */

static ncclResult_t check_buf(const char *fn, const char *what, const void *p, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (p == NULL) return failf(ncclInvalidArgument, "%s : %s argument is NULL", fn, what);
  if (!jn_mem_range_ok(p, bytes, NULL))
    return failf(ncclInvalidArgument,
                 "%s : %s %p is not device memory (cudaMalloc/ncclMemAlloc) holding %zu bytes", fn, what, p, bytes);
  return ncclSuccess;
}

static ncclResult_t validate(const char *fn, jn_op *op, struct ncclComm *c, cudaStream_t stream) {
  ncclResult_t rc = ensure_ready(fn, c);
  if (rc != ncclSuccess) return rc;
  const int n = c->nranks;
  const int rooted = op->kind == K_BROADCAST || op->kind == K_REDUCE;
  if (rooted && (op->peer < 0 || op->peer >= n))
    return failf(ncclInvalidArgument, "%s : invalid root %d (root should be in the 0..%d range)", fn, op->peer, n - 1);
  if (is_p2p(op) && (op->peer < 0 || op->peer >= n))
    return failf(ncclInvalidArgument, "%s : invalid peer %d (peer should be in the 0..%d range)", fn, op->peer, n - 1);
  size_t es = jn_dtype_size(op->dtype);
  if (es == 0) return failf(ncclInvalidArgument, "%s : invalid type %d", fn, op->dtype);
  const int reducing = op->kind == K_ALLREDUCE || op->kind == K_REDUCESCATTER || op->kind == K_REDUCE;
  if (reducing && (op->redop < 0 || op->redop >= ncclNumOps))
    return failf(ncclInvalidArgument, "%s : invalid reduction operation %d", fn, op->redop);
  int sdev = -1;
  switch (jn_stream_classify(stream, &sdev)) {
    case JN_STREAM_LEGACY:
      return failf(ncclInvalidUsage,
                   "%s : the host emulation needs an explicit stream: NCCL operations on the legacy default "
                   "stream (0) are not supported",
                   fn);
    case JN_STREAM_PER_THREAD:
      return failf(ncclInvalidUsage, "%s : cudaStreamPerThread is not supported by the host emulation", fn);
    case JN_STREAM_USER: break;
    default: return failf(ncclInvalidArgument, "%s : invalid stream %p", fn, (void *)stream);
  }
  if (sdev != c->device)
    return failf(ncclInvalidArgument, "%s : the stream belongs to device %d but the communicator to device %d", fn,
                 sdev, c->device);
  /* Byte sizes of the buffers the operation touches on this rank. */
  size_t unit, sbytes = 0, rbytes = 0;
  if (__builtin_mul_overflow(op->count, es, &unit))
    return failf(ncclInvalidArgument, "%s : count %zu is too large", fn, op->count);
  size_t whole;
  if (__builtin_mul_overflow(unit, (size_t)n, &whole))
    return failf(ncclInvalidArgument, "%s : count %zu is too large", fn, op->count);
  switch (op->kind) {
    case K_ALLREDUCE: sbytes = rbytes = unit; break;
    case K_REDUCESCATTER: sbytes = whole; rbytes = unit; break;
    case K_ALLGATHER: sbytes = unit; rbytes = whole; break;
    case K_ALLTOALL: sbytes = rbytes = whole; break;
    case K_BROADCAST: sbytes = c->rank == op->peer ? unit : 0; rbytes = unit; break;
    case K_REDUCE: sbytes = unit; rbytes = c->rank == op->peer ? unit : 0; break;
    case K_SEND: sbytes = unit; break;
    case K_RECV: rbytes = unit; break;
    default: break;
  }
  if ((rc = check_buf(fn, "sendbuff", op->send, sbytes)) != ncclSuccess) return rc;
  if ((rc = check_buf(fn, "recvbuff", op->recv, rbytes)) != ncclSuccess) return rc;
  op->bytes = unit;
  return ncclSuccess;
}

/* Validates an operation and enqueues it (or adds it to the thread's open group). */
static ncclResult_t enqueue(const char *fn, jn_op *op, ncclComm_t comm, cudaStream_t stream) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc == ncclSuccess) {
    rc = validate(fn, op, c, stream);
    if (rc != ncclSuccess) comm_put(c);
  }
  if (rc != ncclSuccess) {
    group_note_error(rc);
    return rc;
  }
  op->comm = c; /* the reference travels with the operation */
  op->stream = stream;
  if (tl_group_depth > 0) {
    if (tl_nops == tl_capops) {
      int cap = tl_capops ? tl_capops * 2 : 16;
      jn_op *nops = realloc(tl_ops, (size_t)cap * sizeof(*nops));
      if (nops == NULL) {
        comm_put(c);
        group_note_error(ncclSystemError);
        return failf(ncclSystemError, "%s : out of memory", fn);
      }
      tl_ops = nops;
      tl_capops = cap;
    }
    tl_ops[tl_nops++] = *op;
    return ncclSuccess;
  }
  return post_ops(op, 1);
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLREDUCE, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .redop = (int)op};
  return enqueue("ncclAllReduce", &o, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_REDUCESCATTER, .send = sendbuff, .recv = recvbuff, .count = recvcount,
             .dtype = (int)datatype, .redop = (int)op};
  return enqueue("ncclReduceScatter", &o, comm, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLGATHER, .send = sendbuff, .recv = recvbuff, .count = sendcount, .dtype = (int)datatype};
  return enqueue("ncclAllGather", &o, comm, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_BROADCAST, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .peer = root};
  return enqueue("ncclBroadcast", &o, comm, stream);
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_REDUCE, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype,
             .redop = (int)op, .peer = root};
  return enqueue("ncclReduce", &o, comm, stream);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  jn_op o = {.kind = K_ALLTOALL, .send = sendbuff, .recv = recvbuff, .count = count, .dtype = (int)datatype};
  return enqueue("ncclAlltoAll", &o, comm, stream);
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  jn_op o = {.kind = K_SEND, .send = sendbuff, .count = count, .dtype = (int)datatype, .peer = peer};
  return enqueue("ncclSend", &o, comm, stream);
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  jn_op o = {.kind = K_RECV, .recv = recvbuff, .count = count, .dtype = (int)datatype, .peer = peer};
  return enqueue("ncclRecv", &o, comm, stream);
}
