/*
 * fault.c - injected faults and delays of the host emulation's NCCL operations
 * (README.md, "Environment variables"): JNCCL_HOST_FAULT / _RANK / _AT make one
 * rank's k-th operation fail or hang (on its stream, or inside the posting call),
 * or that rank's ncclCommAbort never return; JNCCL_HOST_DELAY_RANK / _US slow one
 * rank's operations. Both are read (config.c) when a communicator is created.
 */
#include "comm.h"

#include <stdio.h>

void fault_configure(struct ncclComm *c, const jn_comm_env *env) {
  if (env->fault_mode != JN_FAULT_NONE && env->fault_rank == c->rank) {
    c->fault_mode = env->fault_mode;
    c->fault_at = (int)env->fault_at;
  }
  if (env->delay_rank == c->rank) c->delay_us = env->delay_us;
}

int op_begin(struct ncclComm *c, op_err *e) {
  if (atomic_load(&c->aborted)) {
    aborted_error(e);
    return 1;
  }
  if (atomic_load(&c->async_err) != ncclSuccess || atomic_load(&c->revoked)) return 2;
  c->op_count++;
  if (c->delay_us > 0) jn_sleep_us(c->delay_us);
  if ((c->fault_mode == JN_FAULT_FAIL || c->fault_mode == JN_FAULT_HANG) && c->op_count == (uint64_t)c->fault_at) {
    if (c->fault_mode == JN_FAULT_FAIL) {
      errf(e, ncclSystemError, -1, "injected failure at operation %d of rank %d", c->fault_at, c->rank);
      return 1;
    }
    pthread_mutex_lock(&c->mu); /* JN_FAULT_HANG: block until the communicator is aborted (or revoked) */
    while (!atomic_load(&c->aborted) && !atomic_load(&c->revoked)) jn_cond_wait_ms(&c->cv, &c->mu, 50);
    pthread_mutex_unlock(&c->mu);
    if (!atomic_load(&c->aborted)) return 2; /* revoked: ends without an error, as every revoked operation */
    errf(e, ncclSystemError, -1, "operation aborted by ncclCommAbort (hung by JNCCL_HOST_FAULT=hang)");
    return 1;
  }
  return 0;
}

/* Real NCCL connects to its peers lazily, inside the ncclGroupEnd of the first collectives that
 * need them, and holds the calling thread there until they come: a rank stuck this way is inside
 * an enqueue, not waiting for a stream. The k-th operation posted on the faulty rank holds the
 * poster until its communicator is aborted, then fails like NCCL's aborted connect. */
int enqueue_fault(const jn_op *ops, int n) {
  for (int i = 0; i < n; i++) {
    struct ncclComm *c = ops[i].comm;
    if (c->fault_mode != JN_FAULT_HANG_ENQUEUE) continue;
    pthread_mutex_lock(&c->mu);
    int hit = ++c->enqueue_count == (uint64_t)c->fault_at;
    while (hit && !atomic_load(&c->aborted)) jn_cond_wait_ms(&c->cv, &c->mu, 50);
    pthread_mutex_unlock(&c->mu);
    if (hit) return 1;
  }
  return 0;
}

/* Real NCCL's ncclCommAbort can itself hang: it sets the abort flag, then waits for its kernels,
 * proxy thread and peers' connections to wind down, and one that never does holds the caller
 * for good. JNCCL_HOST_FAULT=hang-abort models that on the faulty rank: the abort has done what
 * a real one does first (the communicator's operations end, the peers see "rank r aborted"),
 * then the calling thread blocks here for ever. Nothing wakes it; it ends with the process. The
 * thread, the communicator and its segment mapping are leaked on purpose: a caller that bounds
 * its abort must abandon them, which is what this fault tests. */
void abort_fault(struct ncclComm *c) {
  if (c->fault_mode != JN_FAULT_HANG_ABORT) return;
  static pthread_mutex_t never_mu = PTHREAD_MUTEX_INITIALIZER;
  static pthread_cond_t never_cv = PTHREAD_COND_INITIALIZER; /* never signalled */
  fprintf(stderr, "jnccl host emulation: ncclCommAbort of rank %d hangs for ever (JNCCL_HOST_FAULT=hang-abort)\n",
          c->rank);
  pthread_mutex_lock(&never_mu);
  for (;;) pthread_cond_wait(&never_cv, &never_mu);
}
