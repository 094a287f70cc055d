/*
 * redop.c - what a communicator keeps besides its rendezvous: pre-multiplied sum operators
 * (ncclRedOpCreatePreMulSum / ncclRedOpDestroy), buffer registrations (ncclCommRegister /
 * ncclCommDeregister) and the tuning fields of ncclConfig_t it received.
 *
 * As NCCL 2.28 (src/enqueue.cc, src/register/register.cc, src/init.cc):
 *  - a user operator is ncclNumOps + its index in the communicator's table, usable only with that
 *    communicator and the data type it was created for; the scalar (ncclScalarHostImmediate) is
 *    read at creation, in the data type's own encoding (a float16 scalar is 2 bytes of float16),
 *    and an operation copies it when it is enqueued, so the operator may be destroyed as soon as
 *    the call that used it returned;
 *  - destroying a built-in, a garbage value or an operator unknown to the communicator is
 *    ncclInvalidArgument;
 *  - registering a range already registered returns its handle again (one more reference);
 *    deregistering a handle the communicator does not hold (a second deregistration) is
 *    ncclInvalidUsage ("Could not find handle"), a NULL handle is ignored;
 *  - minCTAs / maxCTAs default to 1 / 64 and are capped at 64 (MAXCHANNELS), cgaClusterSize
 *    defaults to 4; commName is kept as given.
 */
#include "comm.h"

#include <stdlib.h>
#include <string.h>

struct jn_user_op {
  int used, dtype;
  uint64_t scalar;
};

struct jn_reg {
  const char *buff;
  size_t size;
  int refs;
  struct jn_reg *next;
};

#define JN_MAX_CHANNELS 64

/* ======================================================== user operators */

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclRedOpCreatePreMulSum", comm, &c);
  if (rc != ncclSuccess) return rc;
  size_t es = jn_dtype_size((int)datatype);
  if (op == NULL || scalar == NULL)
    rc = failf(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : %s argument is NULL", op == NULL ? "op" : "scalar");
  else if (es == 0)
    rc = failf(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : invalid type %d", (int)datatype);
  else if (residence != ncclScalarHostImmediate)
    rc = failf(ncclInvalidUsage,
               "ncclRedOpCreatePreMulSum : the host emulation supports ncclScalarHostImmediate only, not %d",
               (int)residence);
  if (rc == ncclSuccess) rc = ensure_ready("ncclRedOpCreatePreMulSum", c);
  if (rc == ncclSuccess) {
    pthread_mutex_lock(&c->mu);
    int ix = 0;
    while (ix < c->user_op_cap && c->user_ops[ix].used) ix++;
    if (ix == c->user_op_cap) {
      int cap = c->user_op_cap < 4 ? 4 : 2 * c->user_op_cap;
      struct jn_user_op *grown = realloc(c->user_ops, (size_t)cap * sizeof *grown);
      if (grown == NULL) {
        rc = failf(ncclSystemError, "ncclRedOpCreatePreMulSum : out of memory");
      } else {
        memset(grown + c->user_op_cap, 0, (size_t)(cap - c->user_op_cap) * sizeof *grown);
        c->user_ops = grown;
        c->user_op_cap = cap;
      }
    }
    if (rc == ncclSuccess) {
      struct jn_user_op *u = &c->user_ops[ix];
      u->used = 1;
      u->dtype = (int)datatype;
      u->scalar = 0;
      memcpy(&u->scalar, scalar, es); /* little endian: the value's bytes, as NCCL's scalarArg */
      *op = (ncclRedOp_t)(ncclNumOps + ix);
    }
    pthread_mutex_unlock(&c->mu);
  }
  comm_put(c);
  return rc;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if ((int)op >= 0 && (int)op < ncclNumOps)
    return failf(ncclInvalidArgument, "ncclRedOpDestroy : operator is a NCCL builtin.");
  if ((int)op < 0) return failf(ncclInvalidArgument, "ncclRedOpDestroy :  operator is garbage.");
  if (comm == NULL) return failf(ncclInvalidArgument, "ncclRedOpDestroy : invalid communicator passed.");
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclRedOpDestroy", comm, &c);
  if (rc != ncclSuccess) return rc;
  int ix = (int)op - ncclNumOps;
  pthread_mutex_lock(&c->mu);
  if (ix >= c->user_op_cap || !c->user_ops[ix].used)
    rc = failf(ncclInvalidArgument, "ncclRedOpDestroy : operator unknown to this communicator.");
  else
    c->user_ops[ix].used = 0;
  pthread_mutex_unlock(&c->mu);
  comm_put(c);
  return rc;
}

ncclResult_t redop_resolve(const char *fn, struct ncclComm *c, jn_op *op) {
  if (op->redop >= 0 && op->redop < ncclNumOps) return ncclSuccess;
  if (op->redop < 0) return failf(ncclInvalidArgument, "%s : invalid reduction operation %d", fn, op->redop);
  int ix = op->redop - ncclNumOps;
  ncclResult_t rc = ncclSuccess;
  pthread_mutex_lock(&c->mu);
  if (ix >= c->user_op_cap || !c->user_ops[ix].used) {
    rc = failf(ncclInvalidArgument, "%s : invalid reduction operation %d", fn, op->redop);
  } else if (c->user_ops[ix].dtype != op->dtype) {
    rc = failf(ncclInvalidArgument,
               "%s : Data type supplied to user-created ncclRedOp_t does not match type given to reduction "
               "operation (%s, created for %s)",
               fn, jn_dtype_name(op->dtype), jn_dtype_name(c->user_ops[ix].dtype));
  } else if (c->nranks == 1 && (op->dtype == ncclFloat8e4m3 || op->dtype == ncclFloat8e5m2)) {
    /* As NCCL 2.28: its single-rank path (src/device/onerank.cu) has no fp8 pre-multiplied sum. */
    rc = failf(ncclInvalidArgument, "%s : no single-rank pre-multiplied sum for %s", fn, jn_dtype_name(op->dtype));
  } else {
    op->redop = JN_REDOP_PREMUL;
    op->scalar = c->user_ops[ix].scalar;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ========================================================= registrations */

ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommRegister", comm, &c);
  if (rc != ncclSuccess) return rc;
  /* NCCL does not check buff (a NULL one registers nothing: the handle is NULL); a buffer given
   * must be device memory here. Registration changes nothing in how data moves. */
  if (handle == NULL) rc = failf(ncclInvalidArgument, "ncclCommRegister : handle argument is NULL");
  else if (buff != NULL && !jn_mem_range_ok(buff, size, NULL))
    rc = failf(ncclInvalidArgument, "ncclCommRegister : buff %p (%zu bytes) is not device memory", buff, size);
  else if (buff == NULL)
    *handle = NULL;
  if (rc == ncclSuccess && buff != NULL) {
    pthread_mutex_lock(&c->mu);
    struct jn_reg *r = c->regs;
    while (r != NULL && !(r->buff == buff && r->size == size)) r = r->next;
    if (r != NULL) {
      r->refs++;
    } else if ((r = calloc(1, sizeof *r)) != NULL) {
      r->buff = buff;
      r->size = size;
      r->refs = 1;
      r->next = c->regs;
      c->regs = r;
    } else {
      rc = failf(ncclSystemError, "ncclCommRegister : out of memory");
    }
    if (rc == ncclSuccess) *handle = r;
    pthread_mutex_unlock(&c->mu);
  }
  comm_put(c);
  return rc;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("ncclCommDeregister", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (handle != NULL) {
    pthread_mutex_lock(&c->mu);
    struct jn_reg **at = &c->regs;
    while (*at != NULL && *at != handle) at = &(*at)->next;
    if (*at == NULL) {
      rc = failf(ncclInvalidUsage, "ncclCommDeregister : Could not find handle %p", handle);
    } else if (--(*at)->refs == 0) {
      struct jn_reg *gone = *at;
      *at = gone->next;
      free(gone);
    }
    pthread_mutex_unlock(&c->mu);
  }
  comm_put(c);
  return rc;
}

void redop_teardown(struct ncclComm *c) {
  free(c->user_ops);
  c->user_ops = NULL;
  c->user_op_cap = 0;
  while (c->regs != NULL) {
    struct jn_reg *gone = c->regs;
    c->regs = gone->next;
    free(gone);
  }
}

/* ======================================================= configuration */

void config_apply(jn_comm_config *out, const ncclConfig_t *config, const jn_comm_config *inherit) {
  const int U = JN_NCCL_CONFIG_UNDEF_INT;
  if (config == NULL && inherit != NULL) {
    *out = *inherit;
    return;
  }
  ncclConfig_t t;
  memset(&t, 0, sizeof t);
  t.cgaClusterSize = t.minCTAs = t.maxCTAs = U;
  if (config != NULL) {
    size_t n = config->size > sizeof(ncclConfig_t) ? sizeof(ncclConfig_t) : config->size;
    memcpy(&t, config, n);
    if (t.version < 21700) t.cgaClusterSize = t.minCTAs = t.maxCTAs = U;
  }
  out->min_ctas = t.minCTAs == U ? 1 : (t.minCTAs > JN_MAX_CHANNELS ? JN_MAX_CHANNELS : t.minCTAs);
  out->max_ctas = t.maxCTAs == U ? JN_MAX_CHANNELS : (t.maxCTAs > JN_MAX_CHANNELS ? JN_MAX_CHANNELS : t.maxCTAs);
  out->cga_cluster_size = t.cgaClusterSize == U ? 4 : t.cgaClusterSize;
  text_copy(out->name, sizeof out->name, t.commName != NULL ? t.commName : "");
}

ncclResult_t jnccl_emu_comm_config(ncclComm_t comm, int *minCTAs, int *maxCTAs, int *cgaClusterSize, char *name,
                                   size_t len) {
  struct ncclComm *c;
  ncclResult_t rc = get_comm("jnccl_emu_comm_config", comm, &c);
  if (rc != ncclSuccess) return rc;
  if (minCTAs == NULL || maxCTAs == NULL || cgaClusterSize == NULL || name == NULL || len == 0) {
    rc = failf(ncclInvalidArgument, "jnccl_emu_comm_config : NULL output");
  } else {
    *minCTAs = c->config.min_ctas;
    *maxCTAs = c->config.max_ctas;
    *cgaClusterSize = c->config.cga_cluster_size;
    text_copy(name, len, c->config.name);
  }
  comm_put(c);
  return rc;
}
