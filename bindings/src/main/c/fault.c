/*
 * fault.c - injected faults and delays of the host emulation's NCCL operations
 * (README.md, "Environment variables"): JNCCL_HOST_FAULT / _RANK / _AT make one
 * rank's k-th operation fail or hang; JNCCL_HOST_DELAY_RANK / _US slow one
 * rank's operations. Both are read when a communicator is created.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

void fault_configure(struct ncclComm *c, int rank) {
  const char *f = getenv("JNCCL_HOST_FAULT");
  if (f != NULL && (strcmp(f, "fail") == 0 || strcmp(f, "hang") == 0) &&
      jn_env_long("JNCCL_HOST_FAULT_RANK", 0, -1, 1L << 30) == rank) {
    c->fault_mode = strcmp(f, "fail") == 0 ? FAULT_FAIL : FAULT_HANG;
    c->fault_at = (int)jn_env_long("JNCCL_HOST_FAULT_AT", 1, 1, 1L << 30);
  }
  if (jn_env_is_set("JNCCL_HOST_DELAY_RANK") && jn_env_long("JNCCL_HOST_DELAY_RANK", -1, -1, 1L << 30) == rank)
    c->delay_us = jn_env_long("JNCCL_HOST_DELAY_US", 0, 0, 60L * 1000 * 1000);
}

int op_begin(struct ncclComm *c, op_err *e) {
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
