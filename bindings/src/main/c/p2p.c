/*
 * p2p.c - groups and point-to-point of the host emulation's NCCL half (see
 * comm.h for the design): ncclGroupStart / End, the send/recv channels and
 * their progress, ncclSend / ncclRecv.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

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

int group_open(void) { return tl_group_depth > 0; }

void group_note_error(ncclResult_t rc) {
  if (tl_group_depth > 0 && tl_group_error == ncclSuccess) tl_group_error = rc;
}

ncclResult_t ncclGroupStart(void) {
  tl_group_depth++;
  return ncclSuccess;
}

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

ncclResult_t group_defer_init(const char *fn, struct ncclComm *c, ncclComm_t *out) {
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

ncclResult_t group_defer_op(const char *fn, const jn_op *op) {
  if (tl_nops == tl_capops) {
    int cap = tl_capops ? tl_capops * 2 : 16;
    jn_op *nops = realloc(tl_ops, (size_t)cap * sizeof(*nops));
    if (nops == NULL) {
      comm_put(op->comm);
      group_note_error(ncclSystemError);
      return failf(ncclSystemError, "%s : out of memory", fn);
    }
    tl_ops = nops;
    tl_capops = cap;
  }
  tl_ops[tl_nops++] = *op;
  return ncclSuccess;
}

/* ============================================================ send / recv */

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
      ch->counts[ch->posted % HDRQ] = op->count;
      ch->dtypes[ch->posted % HDRQ] = op->dtype;
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
      /* The pair must agree on count and type, not only on bytes: a matching byte count of another
       * type is a mix-up NCCL would not notice (it moves bytes), and it is as wrong. */
      const uint64_t count = ch->counts[ch->started % HDRQ];
      const int dtype = ch->dtypes[ch->started % HDRQ];
      if (count != op->count || dtype != op->dtype) {
        errf(e, ncclInvalidUsage, peer,
             "ncclSend of rank %d to rank %d: %llu x %s, but rank %d receives %zu x %s from rank %d", peer, me,
             (unsigned long long)count, dtype_label(dtype), me, op->count, dtype_label(op->dtype), peer);
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

int is_p2p(const jn_op *op) { return op->kind == K_SEND || op->kind == K_RECV; }

void run_p2p(nccl_item *it) {
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
      } else if (atomic_load(&c->async_err) != ncclSuccess || atomic_load(&c->revoked)) {
        s = STEP_DONE; /* the comm failed or was revoked meanwhile: skip */
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
