/*
 * comm.c - communicators of the host emulation's NCCL half (see comm.h for the
 * design): the thread's last error, the registry of handles, waiting on peers,
 * async errors, finalize, destroy, abort and the query functions.
 */
#include "comm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void seg_notify(seg_hdr *h) {
  h->gen++;
  jn_pcond_broadcast(&h->cv);
}

/* ============================================================ last error */

void text_copy(char *dst, size_t cap, const char *src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

static _Thread_local char tl_err[512];

ncclResult_t failf(ncclResult_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tl_err, sizeof tl_err, fmt, ap);
  va_end(ap);
  return code;
}

void errf(op_err *e, ncclResult_t code, int blame, const char *fmt, ...) {
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

void comm_register(struct ncclComm *c) {
  pthread_mutex_lock(&g_comm_mu);
  c->next = g_comms;
  g_comms = c;
  pthread_mutex_unlock(&g_comm_mu);
}

/* Makes the handle invalid. Returns 1 if it was registered. */
int comm_unregister(struct ncclComm *c) {
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

void init_join(struct ncclComm *c) {
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
  redop_teardown(c);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

void comm_put(struct ncclComm *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) comm_teardown(c);
}

/* Records an execution error as the comm's async error (the first one wins) and
 * publishes it in the segment, so that peers waiting for this rank stop. */
void comm_fail(struct ncclComm *c, const op_err *e) {
  if (atomic_load(&c->revoked)) return; /* an operation ended by the revoke: not an error of the comm */
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
ncclResult_t comm_async(struct ncclComm *c) {
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
int peer_error(struct ncclComm *c, int r, op_err *e) {
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

void aborted_error(op_err *e) { errf(e, ncclSystemError, -1, "operation aborted by ncclCommAbort"); }

/*
 * Waits (segment lock held on entry and exit) until ready(r) holds for every
 * rank r (only: -1) or for rank `only`. Fails if the comm is aborted, if a rank
 * still awaited cannot progress, or (deadline_ns != 0) at the deadline.
 */
ncclResult_t wait_ranks(struct ncclComm *c, int only, ready_fn ready, const void *arg, uint64_t deadline_ns,
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
    if (deadline_ns == 0 && atomic_load(&c->revoked)) { /* an operation's wait (they have no deadline) */
      errf(e, ncclInvalidUsage, -1, "operation ended by ncclCommRevoke");
      return e->code;
    }
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

/* Validates the handle of an API call and takes a reference; the error text names fn. */
ncclResult_t get_comm(const char *fn, ncclComm_t h, struct ncclComm **out) {
  if (h == NULL) return failf(ncclInvalidArgument, "%s : comm argument is NULL", fn);
  struct ncclComm *c = comm_get(h);
  if (c == NULL) return failf(ncclInvalidArgument, "%s : invalid communicator %p (destroyed?)", fn, (void *)h);
  *out = c;
  return ncclSuccess;
}

/* The comm must have finished its initialisation without error (NCCL's ncclCommEnsureReady). */
ncclResult_t ensure_ready(const char *fn, struct ncclComm *c) {
  if (atomic_load(&c->aborted)) return failf(ncclInvalidUsage, "%s : the communicator was aborted", fn);
  if (atomic_load(&c->state) == CS_INIT || atomic_load(&c->split_busy))
    return failf(ncclInvalidArgument,
                 "%s : Attempt to use communicator before the previous operation returned ncclSuccess", fn);
  return comm_async(c);
}

ncclResult_t ensure_not_revoked(const char *fn, struct ncclComm *c) {
  if (atomic_load(&c->revoked)) return failf(ncclInvalidUsage, "%s : the communicator was revoked", fn);
  return ncclSuccess;
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

int comm_wait_idle(struct ncclComm *c, long timeout_ms) { return wait_idle(c, timeout_ms, 1); }

void comm_stop(struct ncclComm *c) {
  atomic_store(&c->revoked, 1);
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (c->joined) { /* wake this rank's waits at once (the peers are not told: revoke is local) */
    jn_plock(&c->sh->mu);
    seg_notify(c->sh);
    jn_punlock(&c->sh->mu);
  }
  wait_idle(c, ABORT_WAIT_MS, 0);
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  static const char fn[] = "ncclCommRevoke";
  struct ncclComm *c;
  ncclResult_t rc = get_comm(fn, comm, &c);
  if (rc != ncclSuccess) return rc;
  if (revokeFlags != 0)
    rc = failf(ncclInvalidArgument, "%s : revokeFlags %d must be NCCL_REVOKE_DEFAULT (0)", fn, revokeFlags);
  else if (atomic_load(&c->revoked))
    rc = failf(ncclInvalidArgument, "%s : the communicator was already revoked", fn);
  else if (atomic_load(&c->state) != CS_READY)
    rc = failf(ncclInvalidArgument, "%s : the communicator is not initialised", fn);
  if (rc == ncclSuccess) comm_stop(c);
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommFinalize", comm, &c);
  if (rc != ncclSuccess) return rc;
  rc = ensure_not_revoked("ncclCommFinalize", c);
  if (rc == ncclSuccess) rc = ensure_ready("ncclCommFinalize", c);
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
  abort_fault(c); /* JNCCL_HOST_FAULT=hang-abort: the abort hangs here, as NCCL's teardown can */
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

/* ncclCommRegister / ncclCommDeregister: redop.c (the registrations a communicator keeps). */

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
