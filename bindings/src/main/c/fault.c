/*
 * fault.c - injected faults and delays of the host emulation's NCCL operations
 * (README.md, "Environment variables"): JNCCL_HOST_FAULT / _RANK / _AT make one
 * rank's k-th operation fail or hang; JNCCL_HOST_DELAY_RANK / _US slow one
 * rank's operations. Both are read (config.c) when a communicator is created.
 */
#include "comm.h"

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
  if (atomic_load(&c->async_err) != ncclSuccess) return 2;
  c->op_count++;
  if (c->delay_us > 0) jn_sleep_us(c->delay_us);
  if (c->fault_mode != JN_FAULT_NONE && c->op_count == (uint64_t)c->fault_at) {
    if (c->fault_mode == JN_FAULT_FAIL) {
      errf(e, ncclSystemError, -1, "injected failure at operation %d of rank %d", c->fault_at, c->rank);
      return 1;
    }
    pthread_mutex_lock(&c->mu); /* JN_FAULT_HANG: block until the communicator is aborted */
    while (!atomic_load(&c->aborted)) jn_cond_wait_ms(&c->cv, &c->mu, 50);
    pthread_mutex_unlock(&c->mu);
    errf(e, ncclSystemError, -1, "operation aborted by ncclCommAbort (hung by JNCCL_HOST_FAULT=hang)");
    return 1;
  }
  return 0;
}
